"""The private torch and torchao names fp8advisor relies on, in one place (the GPU checks of the training
frameworks that `verify` lifts to run their own conversion on the CPU:
`fp8advisor.verification.lifted_checks`). torch and torchao move their internals between releases; when one of
these breaks, this is the only file to change. Each function or constant says what it stands for and why
nothing public does the job.

Nothing is looked up at import, only when a function is called (`layers` and `suggest` must not pay for
torch._dynamo or torchao's heavy modules). A moved name raises `CompatError` naming the version and the name,
unless a docstring says how the caller degrades.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import importlib.abc
import importlib.util
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

from fp8advisor.errors import CompatError

#: The releases these names were read from; a `CompatError` suggests them.
TESTED_WITH = "torch 2.11 and 2.13 with torchao 0.18"

#: The kernel `torch.cuda._sleep` launches (ATen's `spin_kernel`): a GPU kernel that belongs to no aten op,
#: which is what pads a profiler session (`fp8advisor.measure.timers.padded_profile`).
SLEEP_KERNEL_MARKER = "spin_kernel"

#: Inductor's FX-graph cache and AOTAutograd's cache counters, as `torch._dynamo.utils.counters` keeps them.
CACHE_COUNTERS = {
    "fxgraph_cache_hit": ("inductor", "fxgraph_cache_hit"),
    "fxgraph_cache_miss": ("inductor", "fxgraph_cache_miss"),
    "fxgraph_cache_bypass": ("inductor", "fxgraph_cache_bypass"),
    "autograd_cache_hit": ("aot_autograd", "autograd_cache_hit"),
    "autograd_cache_miss": ("aot_autograd", "autograd_cache_miss"),
    "autograd_cache_bypass": ("aot_autograd", "autograd_cache_bypass"),
}

#: The loggers that warn while torchao is first imported: torchao's own (its optional C extensions, not in
#: a CPU wheel) and torch's pytree registry (on torchao's enum constants). Their names are the only handle.
TORCHAO_IMPORT_LOGGERS = ("torchao", "torch.utils._pytree")

#: The attribute where a wrapper made by `torch._disable_dynamo` caches the function it calls; a function that
#: already holds it is called as it is, without importing torch._dynamo (see `dynamo_disabled_functions`).
DYNAMO_DISABLE_CACHE_ATTR = "__dynamo_disable"

#: The modules holding torch's Python meta kernels, refs, prims and decompositions.
_PYTHON_KERNEL_MODULES = ("torch._refs", "torch._decomp", "torch._prims", "torch._meta_registrations")


def _installed(package: str) -> str:
    """`torch 2.13.0+cpu`: the package with the version this process imported."""
    module = sys.modules.get(package)
    return f"{package} {getattr(module, '__version__', '(version unknown)')}"


def _moved(package: str, what: str) -> CompatError:
    """The error for a private name that `package` no longer has where fp8advisor looks for it."""
    return CompatError(
        f"{_installed(package)} {what}",
        hint=f"fp8advisor was written against {TESTED_WITH}: install one of those, or report this message",
    )


def _import(module: str) -> types.ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise _moved(module.partition(".")[0], f"cannot import {module}: {error}") from error


def required(module: str, name: str) -> Any:
    """`module.name`, imported now; a `CompatError` naming the installed version when it has moved (also for
    the frameworks' names `verification.lifted_checks` replaces)."""
    owner = _import(module)
    try:
        return getattr(owner, name)
    except AttributeError:
        raise _moved(module.partition(".")[0], f"has no {module}.{name}") from None


# --- torch: building a model on another device --------------------------------------------------------------


def device_constructors() -> set[Callable]:
    """The torch functions that create a tensor and take `device=`, the set `torch.set_default_device`
    redirects (`torch.utils._device._device_constructors`). torch publishes no list of its factories."""
    return required("torch.utils._device", "_device_constructors")()


def parse_to(*args: Any, **kwargs: Any) -> tuple:
    """(device, dtype, non_blocking, memory_format) of the arguments of a `Tensor.to` call, read by torch's
    own parser (`torch._C._nn._parse_to`). `.to` takes a device, a dtype, a tensor or several of them, by
    position or by name; nothing public says which one a call meant."""
    return required("torch._C._nn", "_parse_to")(*args, **kwargs)


def dynamo_imported() -> bool:
    """Whether this process has imported torch._dynamo (about 3 s, which inspecting a model avoids)."""
    return "torch._dynamo" in sys.modules


@functools.cache
def dynamo_disabled_functions() -> list[Callable]:
    """The functions torch wraps with `torch._disable_dynamo` among its Python meta kernels, refs, prims and
    decompositions: the functions inside the wrappers, where `DYNAMO_DISABLE_CACHE_ATTR` goes.

    Each wrapper imports torch._dynamo on its first call only to mark its function "do not compile"; setting
    that cache beforehand saves the import (`fp8advisor.inspect.target`). torch has no public way to run its
    refs without dynamo, so this reads the wrappers' closures. Found once per process. The caller degrades
    when this raises: inspection still works, only slower.
    """
    disable_dynamo = required("torch", "_disable_dynamo")
    _import("torch._refs")  # the refs register their meta kernels on import
    decomposition_tables = required("torch._decomp", "global_decomposition_table")
    wrapper_code = disable_dynamo(lambda: None).__code__
    if "fn" not in wrapper_code.co_freevars:
        raise _moved("torch", "wraps functions with torch._disable_dynamo without holding them as `fn`")
    function_cell = wrapper_code.co_freevars.index("fn")
    pending = [
        value
        for name, module in list(sys.modules.items())
        if module is not None and name.startswith(_PYTHON_KERNEL_MODULES)
        for value in vars(module).values()
        if callable(value)
    ]
    for table in decomposition_tables.values():
        pending.extend(table.values())
    seen: set[int] = set()
    found = []
    while pending:
        function = pending.pop()
        if id(function) in seen:
            continue
        seen.add(id(function))
        if getattr(function, "__code__", None) is wrapper_code:
            found.append(function.__closure__[function_cell].cell_contents)
        wrapped = getattr(function, "__wrapped__", None)
        if wrapped is not None:
            pending.append(wrapped)
        if isinstance(function, functools.partial):
            pending.append(function.func)
        for cell in getattr(function, "__closure__", None) or ():
            try:
                content = cell.cell_contents
            except ValueError:
                continue
            if isinstance(content, (types.FunctionType, functools.partial)):
                pending.append(content)
    return found


#: What transformers takes from torch._dynamo while its modules are imported (`dynamo_deferred`): the
#: decorators that mark functions for torch.compile, and the mode its vmap mask path enters.
_DYNAMO = "torch._dynamo"
_DYNAMO_DECORATORS = ("disable", "assume_constant_result", "allow_in_graph")
_DYNAMO_GETITEM = "torch._dynamo._trace_wrapped_higher_order_op"
_DYNAMO_GETITEM_CLASS = "TransformGetItemToIndex"


@contextlib.contextmanager
def dynamo_deferred() -> Iterator[None]:
    """Import code that decorates functions with torch._dynamo without importing torch._dynamo (as much
    again as torch itself: it brings inductor, triton and sympy).

    transformers 5 imports torch._dynamo with its modules only to mark functions for torch.compile
    (`torch.compiler.disable`, `torch._dynamo.allow_in_graph`, `assume_constant_result`) and to name
    `TransformGetItemToIndex`. While the context is open, `torch._dynamo` is a stand-in: those decorators
    return wrappers that apply the real one on the function's first call (as torch's own
    `torch._disable_dynamo` does), and `TransformGetItemToIndex()` builds the real one. Anything else asked of
    torch._dynamo (another attribute, a submodule) imports the real package there and then and answers from
    it: the stand-in saves time, it never changes an answer. Nothing changes when torch._dynamo is imported.
    """
    if _DYNAMO in sys.modules:
        yield
        return
    package = types.ModuleType(_DYNAMO, "stand-in for torch._dynamo (fp8advisor.compat.dynamo_deferred)")
    package.__path__ = []  # a package: a submodule import reaches _RealDynamoFinder
    getitem = types.ModuleType(_DYNAMO_GETITEM)
    standins = {_DYNAMO: package, _DYNAMO_GETITEM: getitem}

    def real() -> types.ModuleType:
        for name, module in standins.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]
        return importlib.import_module(_DYNAMO)

    for name in _DYNAMO_DECORATORS:
        setattr(package, name, _deferred_decorator(name, real))
    setattr(getitem, _DYNAMO_GETITEM_CLASS, _deferred_class(_DYNAMO_GETITEM, _DYNAMO_GETITEM_CLASS, real))
    package.__getattr__ = _forwarded(_DYNAMO, real)
    getitem.__getattr__ = _forwarded(_DYNAMO_GETITEM, real)
    finder = _RealDynamoFinder(package, real)
    sys.modules.update(standins)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
        for name, module in standins.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]


def _deferred_decorator(name: str, real: Callable[[], types.ModuleType]) -> Callable:
    """`torch._dynamo.<name>` applied on the decorated function's first call rather than at import."""

    def decorate(fn: Any = None, *args: Any, **kwargs: Any) -> Any:
        if fn is None:  # given arguments only: @torch.compiler.disable(recursive=False)
            return lambda function: decorate(function, *args, **kwargs)
        if not isinstance(fn, types.FunctionType):  # a class, a list...: nothing to defer
            return getattr(real(), name)(fn, *args, **kwargs)
        applied: list[Callable] = []

        @functools.wraps(fn)
        def first_call_applies(*call_args: Any, **call_kwargs: Any) -> Any:
            if not applied:
                applied.append(getattr(real(), name)(fn, *args, **kwargs))
            return applied[0](*call_args, **call_kwargs)

        return first_call_applies

    return decorate


def _deferred_class(module: str, name: str, real: Callable[[], types.ModuleType]) -> type:
    """A class whose instances are `module.name`'s, the real module imported on the first one."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        real()
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    return type(name, (), {"__new__": __new__, "__doc__": f"builds {module}.{name} (deferred import)"})


def _forwarded(module: str, real: Callable[[], types.ModuleType]) -> Callable[[str], Any]:
    def __getattr__(attribute: str) -> Any:
        if attribute.startswith("__"):  # introspection (inspect.getmodule asks every module for __file__)
            raise AttributeError(attribute)
        real()
        return getattr(importlib.import_module(module), attribute)

    return __getattr__


class _AlreadyLoaded(importlib.abc.Loader):
    def __init__(self, module: types.ModuleType):
        self.module = module

    def create_module(self, spec: Any) -> types.ModuleType:
        return self.module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class _RealDynamoFinder(importlib.abc.MetaPathFinder):
    """A torch._dynamo submodule asked for while the stand-in is in place: the real package first."""

    def __init__(self, package: types.ModuleType, real: Callable[[], types.ModuleType]):
        self.package = package
        self.real = real

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if not fullname.startswith(_DYNAMO + ".") or sys.modules.get(_DYNAMO) is not self.package:
            return None
        self.real()  # may import `fullname` itself, as part of the package
        module = sys.modules.get(fullname)
        if module is None:
            return importlib.util.find_spec(fullname)
        spec = copy.copy(module.__spec__)
        spec.loader = _AlreadyLoaded(module)
        return spec


# --- torch: tracing what a forward runs ---------------------------------------------------------------------


def torch_dispatch_mode() -> type:
    """`torch.utils._python_dispatch.TorchDispatchMode`, the base class of a mode that sees every aten op with
    its real arguments. torch exports it under no public name (the public `TorchFunctionMode` sees torch
    functions, before they are decomposed into aten ops)."""
    return required("torch.utils._python_dispatch", "TorchDispatchMode")


def eager_dispatch_mode() -> type:
    """A `torch_dispatch_mode()` whose subclasses keep their `__torch_dispatch__` as written.

    torch wraps a mode's `__torch_dispatch__` with `torch._disable_dynamo` unless the class's private hook
    `_should_skip_dynamo` answers False; the wrapper imports torch._dynamo (3 s) on its first call. A mode
    that never runs under torch.compile loses nothing by answering False. Should torch drop the hook, this
    override is never called and the mode only gets slower.
    """

    class EagerDispatchMode(torch_dispatch_mode()):
        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            return False

    return EagerDispatchMode


def aten_op(name: str) -> Any:
    """The aten operator `torch.ops.aten.<name>` (its overload packet), or None where this torch has none.

    For the ops named with a leading underscore (`_scaled_mm`, `_grouped_mm`, `_to_copy`, ...): private by
    name, yet what a forward dispatches to, so a trace must recognise them. A torch without one cannot run
    it: the caller has one op fewer to recognise, and no error is due.
    """
    import torch

    return getattr(torch.ops.aten, name, None)


def op_schema(op: Any) -> Any:
    """The `torch.FunctionSchema` of an aten op overload (`OpOverload._schema`): whether the op mutates or
    aliases its inputs. `OpOverload` exposes `is_view` and `tags`, but no public accessor for the schema."""
    try:
        return op._schema
    except AttributeError:
        raise _moved("torch", f"has no _schema on the op overload {op!r}") from None


def storage_address(storage: Any) -> int:
    """The address of the StorageImpl behind an `UntypedStorage` (`UntypedStorage._cdata`): one number for the
    memory a tensor and every view or wrapper of it share. `data_ptr()` is 0 for every storage on the meta
    device, and torch has no public storage identity."""
    try:
        return storage._cdata
    except AttributeError:
        raise _moved("torch", "has no torch.UntypedStorage._cdata") from None


def storage_key(tensor: Any) -> int | None:
    """`storage_address` of a tensor's storage; None for a tensor without one (e.g. a tensor subclass)."""
    try:
        storage = tensor.untyped_storage()
    except (RuntimeError, NotImplementedError, AttributeError):
        return None
    return storage_address(storage)


def current_autograd_node() -> Any:
    """The autograd Node whose backward is running, None outside backward (`torch._C._current_autograd_node`):
    what ties a backward GEMM to the layer it belongs to. Public module and tensor hooks run before or after a
    node, never while its ops dispatch."""
    return required("torch._C", "_current_autograd_node")()


def scaled_mm() -> Callable:
    """`torch._scaled_mm`, the float8 GEMM a benchmark times: the op torchao's float8 training calls for every
    float8 matmul (`torchao.float8.float8_ops`). The public `torch.nn.functional.scaled_mm` of recent torch
    is another entry point, not what torchao runs. Returned, not wrapped: it is called in timed loops."""
    return required("torch", "_scaled_mm")


# --- torch: compilation -------------------------------------------------------------------------------------


def dynamo_reset() -> None:
    """Forget every compiled graph (`torch._dynamo.reset`), as torchao's benchmark does between
    configurations; the on-disk caches stay."""
    required("torch._dynamo", "reset")()


def compile_cache_counters() -> dict[str, int]:
    """This process's inductor / AOTAutograd cache hits, misses and bypasses so far (monotonic counters: a
    compile's figures are the difference of two readings). Missing counters read 0."""
    counters = required("torch._dynamo.utils", "counters")
    return {name: int(counters[group][key]) for name, (group, key) in CACHE_COUNTERS.items()}


def compiled_graph_count() -> int:
    """Graphs dynamo has compiled in this process (`torch._dynamo.utils.counters["stats"]["unique_graphs"]`),
    a running count that `dynamo_reset` does not reset. torch reports compilations through no public API."""
    return int(required("torch._dynamo.utils", "counters")["stats"]["unique_graphs"])


def raise_recompile_limit(at_least: int) -> None:
    """Let dynamo compile each frame at least `at_least` times before it falls back to eager
    (`torch._dynamo.config.recompile_limit`, `cache_size_limit` in older torch; both where both exist)."""
    config = _import("torch._dynamo.config")
    for limit in ("recompile_limit", "cache_size_limit"):
        if hasattr(config, limit):
            setattr(config, limit, max(getattr(config, limit), at_least))


def configure_compile_worker() -> None:
    """Settings of a process that only pre-compiles for another: one compile thread (the worker processes are
    the parallelism), and no local autotuning cache.

    The second matters for the figures. A worker runs its graph once, and inductor autotunes a kernel with
    several candidate configurations on its first run; with workers sharing the GPU those timings are noisy.
    `autotune_local_cache` is left out of inductor's FX-graph cache key (`_cache_config_ignore_prefix`), so
    the timing process still hits the graphs the workers compiled, but the kernels carry the setting in their
    metadata, so nobody reuses a worker's choice: the timing process autotunes them itself, alone on the GPU.
    """
    inductor_config = _import("torch._inductor.config")
    inductor_config.compile_threads = 1
    inductor_config.autotune_local_cache = False


# --- torch: the GPU timeline --------------------------------------------------------------------------------


def cuda_sleep(cycles: int) -> None:
    """Launch one GPU kernel that spins for about `cycles` clock cycles (`torch.cuda._sleep`)."""
    required("torch.cuda", "_sleep")(cycles)


def is_device_record(event) -> bool:
    """True for a profiler event on the GPU timeline (a kernel, memcpy or memset) as opposed to a CPU op or a
    user annotation's GPU span."""
    from torch.autograd import DeviceType

    return event.device_type == DeviceType.CUDA and not getattr(event, "is_user_annotation", False)


# --- torchao ------------------------------------------------------------------------------------------------


#: The torchao releases (major.minor) whose `_auto_filter_for_recipe` thresholds
#: `fp8advisor.frameworks.filters` copies in `auto_filter_keeps` (tests/test_filters.py pins the copy against
#: the installed torchao's own).
AUTO_FILTER_COPIED_FROM = ("0.18",)


def installed_torchao_version() -> str | None:
    """The installed torchao's version from its package metadata (milliseconds: torchao is not imported, which
    costs 2 s and pulls in torch._dynamo), None when torchao is not installed."""
    from importlib import metadata

    try:
        return metadata.version("torchao")
    except metadata.PackageNotFoundError:
        return None


def auto_filter_copy_matches_installed() -> bool:
    """Whether the installed torchao's `_auto_filter_for_recipe` is the rule `filters.auto_filter_keeps`
    copies: its release is one the copy was read from. Otherwise the caller calls torchao's own function."""
    version = installed_torchao_version()
    return version is not None and ".".join(version.split(".")[:2]) in AUTO_FILTER_COPIED_FROM


def auto_filter_for_recipe(recipe: str, filter_fqns: list[str]) -> Callable:
    """torchao's own `module_filter_fn` for `recipe` (`torchao.float8._auto_filter_for_recipe`): the Linear
    layers torchao itself would convert. torchao exports it from `torchao.float8` under a private name, and
    torchtitan calls it from there. Raises NotImplementedError for a recipe torchao has no rule for."""
    return required("torchao.float8", "_auto_filter_for_recipe")(recipe, filter_fqns=filter_fqns)


def float8_linear() -> type:
    """`torchao.float8.float8_linear.Float8Linear`, the module `convert_to_float8_training` swaps in: what
    tells the converted layers from the others. torchao declares it "not a public API" and exports it
    nowhere else."""
    return required("torchao.float8.float8_linear", "Float8Linear")


def float8_training_tensor() -> type:
    """`torchao.float8.float8_training_tensor.Float8TrainingTensor`, the tensor a Float8Linear hands its
    GEMMs: what tells a float8 GEMM from a high-precision one in a trace. torchao declares it "not a public
    API" (`torchao.float8` re-exports it only so that `torch.load(weights_only=True)` can read it)."""
    return required("torchao.float8.float8_training_tensor", "Float8TrainingTensor")


def compute_error(reference: Any, actual: Any) -> Any:
    """torchao's SQNR in dB, 20 log10(|reference| / |reference - actual|), as a 0-d tensor
    (`torchao.float8.float8_utils.compute_error`): the figure torchao's float8 tests report. It lives in a
    module torchao does not export."""
    return required("torchao.float8.float8_utils", "compute_error")(reference, actual)


# --- grouped expert GEMMs (bench --grouped) -----------------------------------------------------------------


def grouped_mm() -> Callable:
    """`torch._grouped_mm`, the bf16 grouped GEMM of MoE experts (torchtitan's GroupedExperts, transformers'
    `integrations/moe.py`) and the baseline of torchao's moe_training benchmarks. torch exposes it under this
    private name only. It runs on the CPU too (torch 2.13, forward and backward)."""
    return required("torch", "_grouped_mm")


def fp8_rowwise_grouped_mm() -> Callable:
    """torchao's differentiable float8 rowwise grouped GEMM
    (`torchao.prototype.moe_training.fp8_grouped_mm._to_fp8_rowwise_then_scaled_grouped_mm`): dynamic rowwise
    casts of A and B (Triton kernels), then `torch._scaled_grouped_mm`, forward and backward. It is what
    `Float8TrainingOpConfig` (FP8_ROWWISE) dispatches every converted grouped GEMM to; torchao exports it only
    under this private name. CUDA only (Triton casts, no CPU kernel)."""
    return required("torchao.prototype.moe_training.fp8_grouped_mm", "_to_fp8_rowwise_then_scaled_grouped_mm")


def float8_grouped_training_config() -> Any:
    """A default `torchao.prototype.moe_training.config.Float8TrainingOpConfig()`: the float8 dtype and output
    dtype torchao's grouped GEMM conversion uses (e4m3fn, or e4m3fnuz on MI300; bf16 out). A prototype
    module, so it is reached through here."""
    return required("torchao.prototype.moe_training.config", "Float8TrainingOpConfig")()


def float8_training_weight_wrapper() -> type:
    """`torchao.prototype.moe_training.tensor.Float8TrainingWeightWrapperTensor`: the tensor subclass
    `quantize_(..., Float8TrainingOpConfig())` swaps expert weights to (its `torch._grouped_mm` calls run
    float8). A prototype module, so it is reached through here (verify checks a conversion with it)."""
    return required("torchao.prototype.moe_training.tensor", "Float8TrainingWeightWrapperTensor")


def quantize_grouped_experts(model: Any, filter_fn: Callable) -> None:
    """torchao's own moe_training conversion, as a torchao file written by `suggest` calls it:
    `quantize_(model, config=Float8TrainingOpConfig(), filter_fn=filter_fn)` (in place)."""
    quantize = required("torchao.quantization.quant_api", "quantize_")
    quantize(model, config=float8_grouped_training_config(), filter_fn=filter_fn)


def float8_scaling() -> types.SimpleNamespace:
    """torchao's float8 scale arithmetic, for the emulated grouped GEMM: `tensor_to_scale`, `amax_to_scale`
    and `to_fp8_saturated` (`torchao.float8.float8_utils`, a module torchao does not export) and the
    `AXISWISE` granularity (`torchao.float8.config.ScalingGranularity`)."""
    return types.SimpleNamespace(
        tensor_to_scale=required("torchao.float8.float8_utils", "tensor_to_scale"),
        amax_to_scale=required("torchao.float8.float8_utils", "amax_to_scale"),
        to_fp8_saturated=required("torchao.float8.float8_utils", "to_fp8_saturated"),
        AXISWISE=required("torchao.float8.config", "ScalingGranularity").AXISWISE,
    )


# --- torchao: MXFP8 training (a prototype namespace; torchao 0.18's names) --------------------------------


def mx_training_api() -> tuple[type, type, type]:
    """torchao's MXFP8 training config, its recipe enum and the kernel-preference enum:
    (`MXFP8TrainingOpConfig`, `MXFP8TrainingRecipe`, `KernelPreference`). They live under
    `torchao.prototype.moe_training` (torchao 0.18; earlier releases had `MXLinearConfig` instead)."""
    return (
        required("torchao.prototype.moe_training.config", "MXFP8TrainingOpConfig"),
        required("torchao.prototype.moe_training.config", "MXFP8TrainingRecipe"),
        required("torchao.quantization.quantize_.common.kernel_preference", "KernelPreference"),
    )


def mx_weight_tensor_class() -> type:
    """`MXFP8TrainingWeightWrapperTensor`, the tensor `quantize_(model, MXFP8TrainingOpConfig)` wraps a
    converted layer's weight in: what tells an MXFP8 layer from a bf16 one."""
    return required("torchao.prototype.moe_training.tensor", "MXFP8TrainingWeightWrapperTensor")


def mx_grouped_mm() -> Callable:
    """torchao's differentiable MXFP8 grouped GEMM
    (`torchao.prototype.moe_training.mxfp8_grouped_mm._to_mxfp8_then_scaled_grouped_mm`): 1x32 casts with
    E8M0 scales, their rearrangement to the blocked layout, then `torch._scaled_grouped_mm`, forward and
    backward (KernelPreference.EMULATED: `to_mx` casts and a dequantized `torch._grouped_mm`, on the CPU too).
    It is what `MXFP8TrainingOpConfig` dispatches every converted grouped GEMM to; torchao exports it only
    under this private name."""
    return required("torchao.prototype.moe_training.mxfp8_grouped_mm", "_to_mxfp8_then_scaled_grouped_mm")


def mx_linear_class() -> type:
    """`torchao.prototype.moe_training.mxfp8_linear.MXFP8Linear`, the nn.Linear subclass torchtitan 0.3's
    `MXFP8LinearConverter` builds its MXFP8Linear from (torchtitan/components/quantization/mx.py:21-25): what
    tells a layer torchtitan converted. A prototype module, so it is reached through here."""
    return required("torchao.prototype.moe_training.mxfp8_linear", "MXFP8Linear")


def mx_tensor_class() -> type:
    """`torchao.prototype.mx_formats.mx_tensor.MXTensor`: the operand an MXFP8 GEMM receives (e4m3
    elements with E8M0 scales; `aten.mm` on two of them is the block-scaled GEMM, dequantized when
    emulated): what tells an MXFP8 GEMM from a bf16 one in a trace."""
    return required("torchao.prototype.mx_formats.mx_tensor", "MXTensor")


__all__ = [
    "AUTO_FILTER_COPIED_FROM",
    "CACHE_COUNTERS",
    "DYNAMO_DISABLE_CACHE_ATTR",
    "SLEEP_KERNEL_MARKER",
    "TESTED_WITH",
    "TORCHAO_IMPORT_LOGGERS",
    "aten_op",
    "auto_filter_copy_matches_installed",
    "auto_filter_for_recipe",
    "compile_cache_counters",
    "compiled_graph_count",
    "compute_error",
    "configure_compile_worker",
    "cuda_sleep",
    "current_autograd_node",
    "device_constructors",
    "dynamo_deferred",
    "dynamo_disabled_functions",
    "dynamo_imported",
    "dynamo_reset",
    "eager_dispatch_mode",
    "float8_grouped_training_config",
    "float8_linear",
    "float8_scaling",
    "float8_training_tensor",
    "float8_training_weight_wrapper",
    "fp8_rowwise_grouped_mm",
    "grouped_mm",
    "installed_torchao_version",
    "is_device_record",
    "mx_grouped_mm",
    "mx_linear_class",
    "mx_tensor_class",
    "mx_training_api",
    "mx_weight_tensor_class",
    "op_schema",
    "parse_to",
    "quantize_grouped_experts",
    "raise_recompile_limit",
    "required",
    "scaled_mm",
    "storage_address",
    "torch_dispatch_mode",
]
