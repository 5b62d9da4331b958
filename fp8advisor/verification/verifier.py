"""`verify`: prove that float8 really runs where the advice says, and nowhere else.

Four checks on one model and one training config file (`fp8advisor.frameworks.reader` reads it as its
framework would):

1. Conversion. The model is built on the meta device (no memory) and converted by torchao's own
   `convert_to_float8_training` with the config's recipe and the framework's exact module filter; the layers
   that became `Float8Linear` are what the framework converts. Each is compared with `advise` for the same
   model, batch, seq, recipe and profile, and each filter entry that matches no nn.Linear FQN is named.
2. Execution. One forward and backward on small real tensors: on a GPU with FP8 tensor cores when there is one
   (`torch._scaled_mm`), else with torchao's emulated float8 on the CPU (`Float8LinearConfig(emulate=True)`:
   the casts to float8 are real, the GEMM multiplies the float8 values in float32). Never torch.compile: eager
   shows which GEMMs run in float8 and costs no compile time.
   - A model of at most `REAL_MODEL_MAX_PARAMETERS` parameters is built for real by the user's own code, cast
     to bf16 and run whole at batch 1 x seq `RUN_SEQ` (a multiple of 16): the user's forward decides which
     layers run.
   - A larger model (an 8B or 70B shape) cannot be allocated here. Its *shadow* runs instead: a module tree
     with the same FQNs in which each nn.Linear is a real Linear with K and N capped at `SHADOW_MAX_DIM` (plus
     K % 16 and N % 16, so divisibility is kept), called as many times as the traced forward called the real
     one (layers the forward never calls are not called). Which layers convert is still decided by the
     framework's filter on the real-shaped meta model, so the conversion check stays exact. What a shadow
     cannot show: the user's forward itself (a layer bypassed at run time but not when traced on the meta
     device) and the model's own activations (its numerics use random inputs). The report says which was used.
3. Trace. A TorchDispatchMode records every GEMM (`aten.mm`, `addmm`, `bmm`, `_scaled_mm`, ...) and every cast
   to a float8 dtype, attributed to the nn.Linear that ran it: in forward by forward pre/post hooks, in
   backward by the autograd node being executed (`torch._C._current_autograd_node()`), mapped to its Linear
   through the graph that Linear's forward built. A GEMM is float8 when its operands are torchao
   `Float8TrainingTensor`s (their `aten.mm` becomes `torch._scaled_mm` on a GPU, or the emulated matmul of
   float8 values on the CPU) or float8 tensors given to `_scaled_mm` directly. Every converted layer must run
   float8 GEMMs forward and backward; every other layer none.
4. Numerics. Each converted layer runs alone, float8 against its bf16 twin (same weights), on the very input
   and output gradient it saw in the bf16 model: SQNR in dB of its output and of its input gradient. Alone, so
   that the figure is the layer's own error, not the error piled up by the layers before it.

`SQNR_THRESHOLD_DB` = 15 dB. e4m3 keeps 3 mantissa bits (e5m2, used for gradients by tensorwise, 2), so a
correct dynamically scaled float8 linear measures a few tens of dB, not more. Measured by this project's tests
on the CPU (emulated, all three recipes,
`tests/test_verify.py::test_sqnr_of_correct_layers_clears_threshold_by_margin`): output about 28 to 29 dB;
input gradient about 29 dB with the rowwise recipes and 24 to 25 dB with tensorwise (e5m2 gradients). A layer
whose weight cast is broken on purpose (only the signs kept, `test_layer_losing_precision_is_flagged`)
measures about 6 dB. 15 dB sits about 9 dB (an error amplitude ~3x larger) under the lowest correct figure, so
that the activation outliers of a real model do not raise false alarms, and far above a broken cast.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn

from fp8advisor import compat
from fp8advisor.device import MIN_FP8_CAPABILITY
from fp8advisor.errors import AdvisorError, TargetError
from fp8advisor.frameworks.filters import entries_matching_nothing
from fp8advisor.frameworks.formats import (
    ALL_OR_NONE_EXPERT_FORMATS,
    all_or_none_converts,
    expert_modules,
    file_can_convert,
    grouped_expert_groups,
)
from fp8advisor.frameworks.reader import AUTO_FILTER_FLAG, FrameworkConfig, read_config
from fp8advisor.inspect.layers import LayerStatus, ModelLayers, block_shape
from fp8advisor.inspect.spec import TargetSpec
from fp8advisor.recipes import Recipe, float8_config, parse_recipe, sqnr_db
from fp8advisor.request import AUTO, SuggestRequest

#: A layer whose float8 output or input-gradient SQNR is below this is flagged (see the module docstring).
SQNR_THRESHOLD_DB = 15.0
#: Models up to this many parameters are built for real (bf16, on the CPU: ~0.4 GB per copy, two copies).
REAL_MODEL_MAX_PARAMETERS = 100_000_000
#: The run uses batch 1 and this many tokens (a multiple of 16: float8's grad_weight GEMM multiplies over
#: the tokens).
RUN_SEQ = 32
#: The shadow of a large model caps K and N at this (plus K % 16, N % 16, so divisibility is kept).
SHADOW_MAX_DIM = 128
#: GEMM ops the trace counts.
_GEMM_OP_NAMES = (
    "mm",
    "addmm",
    "bmm",
    "baddbmm",
    "matmul",
    "_scaled_mm",
    "_grouped_mm",
    "_scaled_grouped_mm",
)


class DifferenceKind(str, Enum):
    """What makes `verify` exit 1."""

    FP8_OFF = "fp8 off"
    RECIPE = "recipe differs"
    UNUSED_ENTRY = "filter entry matches no layer"
    AGAINST_ADVICE = "converted against the advice"
    LEFT_BF16 = "advised, left in bf16"
    NEVER_CALLED = "converted, never called"
    NO_FLOAT8 = "float8 missing where converted"
    UNEXPECTED_FLOAT8 = "float8 where not converted"
    NUMERICS = "numerics"
    EXPERTS = "experts differ from the advice"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Difference:
    kind: DifferenceKind
    subject: str  # a layer FQN, a filter entry, or the config
    detail: str

    def describe(self) -> str:
        return (
            f"{self.kind.value}: {self.subject} ({self.detail})"
            if self.detail
            else f"{self.kind.value}: {self.subject}"
        )

    def to_json(self) -> dict:
        return {"kind": self.kind.value, "subject": self.subject, "detail": self.detail}


@dataclass(frozen=True)
class LayerCheck:
    """One nn.Linear: what the config does with it, what the advice says, and what ran."""

    fqn: str
    K: int
    N: int
    M: int  # rows per call at the advised batch x seq (0: never called)
    status: LayerStatus
    advised: bool
    advice_reason: str
    predicted_speedup: float | None
    converted: bool
    calls: int  # forward calls in the run
    float8_gemms: int  # forward + backward
    high_precision_gemms: int
    float8_casts: int
    sqnr_output_db: float | None = None
    sqnr_grad_input_db: float | None = None
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        def rounded(value: float | None) -> float | None:
            return None if value is None or not math.isfinite(value) else round(value, 2)

        return {
            "fqn": self.fqn,
            "K": self.K,
            "N": self.N,
            "M": self.M,
            "status": self.status.value,
            "advised": self.advised,
            "advice_reason": self.advice_reason,
            "predicted_speedup": None if self.predicted_speedup is None else round(self.predicted_speedup, 4),
            "converted": self.converted,
            "calls": self.calls,
            "float8_gemms": self.float8_gemms,
            "high_precision_gemms": self.high_precision_gemms,
            "float8_casts": self.float8_casts,
            "sqnr_output_db": rounded(self.sqnr_output_db),
            "sqnr_grad_input_db": rounded(self.sqnr_grad_input_db),
            "problems": list(self.problems),
        }


@dataclass(frozen=True)
class ExpertCheck:
    """One group of grouped MoE experts: what the config does with its 3-D weights, what the advice says."""

    group: str  # ExpertAdvice.group
    modules: tuple[str, ...]  # the modules holding its 3-D weights
    advised: bool  # what the advice says (ExpertAdvice.convert)
    expected: bool  # what a config of this format should do (all-or-none for torchtitan 0.3)
    converted: bool | None  # what the config does; None: its format cannot convert grouped experts
    predicted_speedup: float | None
    provenance: str | None
    problems: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {
            "group": self.group,
            "modules": list(self.modules),
            "advised": self.advised,
            "expected": self.expected,
            "converted": self.converted,
            "predicted_speedup": None if self.predicted_speedup is None else round(self.predicted_speedup, 4),
            "provenance": self.provenance,
            "problems": list(self.problems),
        }


@dataclass(frozen=True)
class Execution:
    """How the forward and backward were run."""

    device: str  # "cpu (torchao emulated float8)" or the GPU name
    emulated: bool
    mode: str  # "model" (the user's forward, real weights) or "shadow" (see the module docstring)
    batch: int
    seq: int
    why: str  # why this mode
    sqnr_scope: str  # which converted layers have an SQNR
    model_output_sqnr_db: float | None = None  # whole-model output, float8 vs bf16 (mode "model" only)

    def to_json(self) -> dict:
        sqnr = self.model_output_sqnr_db
        return {
            "device": self.device,
            "emulated": self.emulated,
            "mode": self.mode,
            "batch": self.batch,
            "seq": self.seq,
            "why": self.why,
            "sqnr_scope": self.sqnr_scope,
            "model_output_sqnr_db": None if sqnr is None or not math.isfinite(sqnr) else round(sqnr, 2),
        }


@dataclass(frozen=True)
class VerifyReport:
    target: str
    config: FrameworkConfig
    recipe: Recipe
    profile: str
    batch: int
    seq: int
    min_speedup: float
    layers: tuple[LayerCheck, ...]
    differences: tuple[Difference, ...]
    execution: Execution
    sqnr_threshold_db: float = SQNR_THRESHOLD_DB
    notes: tuple[str, ...] = ()
    experts: tuple[ExpertCheck, ...] = ()  # one per group of grouped MoE experts (empty: a dense model)

    @property
    def passed(self) -> bool:
        return not self.differences

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    @property
    def converted(self) -> tuple[str, ...]:
        return tuple(layer.fqn for layer in self.layers if layer.converted)

    @property
    def advised(self) -> tuple[str, ...]:
        return tuple(layer.fqn for layer in self.layers if layer.advised)

    def to_json(self) -> dict:
        return {
            "target": self.target,
            "config": self.config.to_json(),
            "recipe": self.recipe.value,
            "profile": self.profile,
            "batch": self.batch,
            "seq": self.seq,
            "min_speedup": self.min_speedup,
            "passed": self.passed,
            "execution": self.execution.to_json(),
            "sqnr_threshold_db": self.sqnr_threshold_db,
            "converted": list(self.converted),
            "advised": list(self.advised),
            "differences": [difference.to_json() for difference in self.differences],
            "layers": [layer.to_json() for layer in self.layers],
            "experts": [group.to_json() for group in self.experts],
            "notes": list(self.notes),
        }


# ----------------------------------------------------------------------------------------------------
# The trace


@dataclass
class _LayerTrace:
    calls: int = 0
    forward_float8: int = 0
    forward_high_precision: int = 0
    backward_float8: int = 0
    backward_high_precision: int = 0
    float8_casts: int = 0


def _is_float8_dtype(dtype: torch.dtype | None) -> bool:
    return dtype is not None and "float8" in str(dtype)


def _is_float8_operand(value: Any) -> bool:
    return isinstance(value, compat.float8_training_tensor()) or (
        isinstance(value, torch.Tensor) and _is_float8_dtype(value.dtype)
    )


class OpTrace:
    """Counts GEMMs (float8 or not) and float8 casts per nn.Linear, forward and backward (module docstring).

    Use as a context manager around one forward and backward of `model`; hooks are removed on exit.
    """

    def __init__(self, model: nn.Module):
        self.layers: dict[str, _LayerTrace] = {}
        self.unattributed_float8_gemms = 0
        self._active: list[str] = []
        self._node_owner: dict[int, tuple[str, Any]] = {}  # id(node) -> (fqn, node): the node is kept alive
        self._handles: list[Any] = []
        for fqn, module in model.named_modules():
            if isinstance(module, nn.Linear):
                self.layers[fqn] = _LayerTrace()
                self._handles.append(module.register_forward_pre_hook(self._before(fqn)))
                self._handles.append(module.register_forward_hook(self._after(fqn)))
        self._mode = self._make_mode()

    def _before(self, fqn: str) -> Callable:
        def hook(module, args):
            self._active.append(fqn)
            self.layers[fqn].calls += 1

        return hook

    def _after(self, fqn: str) -> Callable:
        def hook(module, args, output):
            self._active.pop()
            inputs = {id(a.grad_fn) for a in args if isinstance(a, torch.Tensor) and a.grad_fn is not None}
            if isinstance(output, torch.Tensor) and output.grad_fn is not None:
                self._claim(output.grad_fn, inputs, fqn)

        return hook

    def _claim(self, start: Any, stop: set[int], fqn: str) -> None:
        """Every autograd node between this Linear's output and its input belongs to it (a few per call)."""
        pending = [start]
        while pending:
            node = pending.pop()
            if node is None or id(node) in stop or id(node) in self._node_owner:
                continue
            if type(node).__name__ == "AccumulateGrad":
                continue
            self._node_owner[id(node)] = (fqn, node)
            if len(self._node_owner) > 1_000_000:  # pragma: no cover - a runaway graph walk
                break
            pending.extend(next_node for next_node, _ in node.next_functions)

    def _owner(self) -> tuple[str | None, bool]:
        """(the Linear running now, whether we are in backward)."""
        if self._active:
            return self._active[-1], False
        node = compat.current_autograd_node()
        if node is None:
            return None, False
        owner = self._node_owner.get(id(node))
        return (owner[0] if owner is not None and owner[1] is node else None), True

    def _make_mode(self):
        trace = self
        gemm_packets = {op for name in _GEMM_OP_NAMES if (op := compat.aten_op(name)) is not None}
        cast_packets = {compat.aten_op("_to_copy"), torch.ops.aten.to} - {None}

        class Recorder(compat.torch_dispatch_mode()):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                packet = func.overloadpacket
                if packet in gemm_packets:
                    trace._record_gemm(any(_is_float8_operand(a) for a in (*args, *kwargs.values())))
                elif packet in cast_packets and _is_float8_dtype(kwargs.get("dtype")):
                    trace._record_cast()
                return func(*args, **kwargs)

        return Recorder()

    def _record_gemm(self, float8: bool) -> None:
        fqn, backward = self._owner()
        if fqn is None:
            self.unattributed_float8_gemms += int(float8)
            return
        layer = self.layers[fqn]
        if backward:
            layer.backward_float8 += int(float8)
            layer.backward_high_precision += int(not float8)
        else:
            layer.forward_float8 += int(float8)
            layer.forward_high_precision += int(not float8)

    def _record_cast(self) -> None:
        fqn, _ = self._owner()
        if fqn is not None:
            self.layers[fqn].float8_casts += 1

    def __enter__(self) -> OpTrace:
        self._mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._mode.__exit__(*exc)
        for handle in self._handles:
            handle.remove()


# ----------------------------------------------------------------------------------------------------
# Building what runs


def converted_fqns(model: nn.Module) -> set[str]:
    """FQNs of the Float8Linear modules in `model` (each once, under its first name, as torchao swaps)."""
    float8_linear = compat.float8_linear()
    return {fqn for fqn, module in model.named_modules() if isinstance(module, float8_linear)}


def convert(
    model: nn.Module,
    config: FrameworkConfig,
    recipe: Recipe,
    *,
    emulate: bool,
    decide_on: nn.Module | None = None,
) -> set[str]:
    """Convert `model` in place as the framework would; return the converted FQNs.

    `decide_on`: a model with the real shapes (the meta model) whose filter answers are replayed on `model` (a
    shadow whose shapes are reduced), so that divisibility and size rules see the real K and N.
    """
    from torchao.float8 import convert_to_float8_training

    if decide_on is None:
        module_filter = config.filter_for(model)
    else:
        real = dict(decide_on.named_modules())
        real_filter = config.filter_for(decide_on)

        def module_filter(module: nn.Module, fqn: str) -> bool:
            return fqn in real and real_filter(real[fqn], fqn)

    if not config.enabled:
        return set()
    convert_to_float8_training(
        model, config=float8_config(recipe, emulate=emulate), module_filter_fn=module_filter
    )
    return converted_fqns(model)


def _count(number: int) -> str:
    return f"{number / 1e9:.2f}B" if number >= 1e9 else f"{number / 1e6:.1f}M"


def _reduced(dim: int) -> int:
    return dim if dim <= SHADOW_MAX_DIM else SHADOW_MAX_DIM + dim % 16


class _Shadow(nn.Module):
    """Same FQNs as the model, each Linear at reduced size, called in the traced order and number."""

    def __init__(self, model: nn.Module, call_plan: Sequence[tuple[str, int]], dtype: torch.dtype, device):
        super().__init__()
        for fqn, module in model.named_modules():
            if not isinstance(module, nn.Linear):
                continue
            parent: nn.Module = self
            parts = fqn.split(".")
            for part in parts[:-1]:
                child = getattr(parent, part, None)
                if not isinstance(child, nn.Module):
                    child = nn.Module()
                    parent.add_module(part, child)
                parent = child
            out_features, in_features = module.weight.shape
            linear = nn.Linear(
                _reduced(in_features),
                _reduced(out_features),
                bias=module.bias is not None,
                dtype=dtype,
                device=device,
            )
            parent.add_module(parts[-1], linear)
        self.call_plan = tuple((fqn, calls) for fqn, calls in call_plan if calls > 0)

    def example_inputs(self, tokens: int, seed: int) -> dict[str, torch.Tensor]:
        generator = torch.Generator().manual_seed(seed)
        modules = dict(self.named_modules())
        inputs = {}
        for fqn, _ in self.call_plan:
            linear = modules[fqn]
            x = torch.randn(tokens, linear.in_features, generator=generator)
            inputs[fqn] = x.to(device=linear.weight.device, dtype=linear.weight.dtype)
        return inputs

    def forward(self, inputs: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        modules = dict(self.named_modules())
        outputs = []
        for fqn, calls in self.call_plan:
            for _ in range(calls):
                outputs.append(modules[fqn](inputs[fqn]))
        return outputs


def _floating_outputs(value: Any) -> list[torch.Tensor]:
    """Every floating tensor in a model's output (tensor, tuple, list, dict, Hugging Face ModelOutput)."""
    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() and value.requires_grad else []
    if isinstance(value, dict):
        return [t for item in value.values() for t in _floating_outputs(item)]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _floating_outputs(item)]
    if hasattr(value, "to_tuple"):
        return _floating_outputs(value.to_tuple())
    return []


def _loss(outputs: Sequence[torch.Tensor], seed: int) -> torch.Tensor:
    """A fixed random projection of every output: the same gradient for the bf16 and the float8 model."""
    generator = torch.Generator().manual_seed(seed)
    total = torch.zeros((), dtype=torch.float32, device=outputs[0].device)
    for output in outputs:
        weights = torch.randn(output.shape, generator=generator).to(output.device)
        total = total + (output.float() * weights).sum() / math.sqrt(output.numel())
    return total


def _run(model: nn.Module, args: tuple, kwargs: dict, seed: int) -> list[torch.Tensor]:
    outputs = _floating_outputs(model(*args, **kwargs))
    if not outputs:
        raise TargetError(
            f"{type(model).__name__}'s forward returned no floating tensor that needs a gradient",
            hint="verify runs a backward from the model's output; return the logits or the loss",
        )
    _loss(outputs, seed).backward()
    return outputs


class _Capture:
    """The input and output gradient of each watched Linear's first call (bf16 model)."""

    def __init__(self, model: nn.Module, fqns: Iterable[str]):
        self.inputs: dict[str, torch.Tensor] = {}
        self.grad_outputs: dict[str, torch.Tensor] = {}
        self._handles = []
        modules = dict(model.named_modules())
        for fqn in fqns:
            if fqn in modules:  # not an alias: the bf16 model holds a shared module under its first name only
                self._handles.append(modules[fqn].register_forward_hook(self._hook(fqn)))

    def _hook(self, fqn: str) -> Callable:
        def hook(module, args, output):
            if fqn in self.inputs or not args or not isinstance(args[0], torch.Tensor):
                return
            self.inputs[fqn] = args[0].detach().clone()
            if isinstance(output, torch.Tensor) and output.requires_grad:

                def keep(grad: torch.Tensor) -> None:
                    self.grad_outputs.setdefault(fqn, grad.detach().clone())

                output.register_hook(keep)

        return hook

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


def _forward_backward(bf16_model, float8_model, args, kwargs, converted, seed):
    """One traced step of each model: (bf16 captures, bf16 outputs, float8 outputs, float8 trace)."""
    bf16_capture = _Capture(bf16_model, converted)
    try:
        bf16_outputs = _run(bf16_model, args, kwargs, seed)
    finally:
        bf16_capture.remove()
    bf16_model.zero_grad(set_to_none=True)  # nothing reads them: the float8 run's peak holds one set only
    with OpTrace(float8_model) as trace:
        float8_outputs = _run(float8_model, args, kwargs, seed)
    return bf16_capture, bf16_outputs, float8_outputs, trace


def layer_sqnr(
    bf16_layer: nn.Module, float8_layer: nn.Module, x: torch.Tensor, grad_output: torch.Tensor | None
) -> tuple[float, float | None]:
    """(output SQNR, input-gradient SQNR) of `float8_layer` against `bf16_layer`, same input and gradient."""
    results = []
    for layer in (bf16_layer, float8_layer):
        x_leaf = x.detach().clone().requires_grad_(True)
        output = layer(x_leaf)
        grad_input = None
        if grad_output is not None:
            output.backward(grad_output)
            grad_input = x_leaf.grad
        results.append((output.detach(), grad_input))
    (reference, reference_grad), (output, grad) = results
    grad_sqnr = sqnr_db(reference_grad, grad) if reference_grad is not None and grad is not None else None
    return sqnr_db(reference, output), grad_sqnr


# ----------------------------------------------------------------------------------------------------
# verify


class _Device(NamedTuple):
    """Where the step runs: a GPU with FP8 tensor cores, else the CPU with torchao's emulated float8."""

    device: torch.device
    words: str  # for the report
    emulate: bool


def _execution_device() -> _Device:
    if torch.cuda.is_available():
        capability = torch.cuda.get_device_capability(0)
        if capability >= MIN_FP8_CAPABILITY:
            return _Device(torch.device("cuda"), torch.cuda.get_device_name(0), False)
        name = torch.cuda.get_device_name(0)
        words = f"cpu (torchao emulated float8; {name} has no FP8 tensor cores)"
        return _Device(torch.device("cpu"), words, True)
    return _Device(torch.device("cpu"), "cpu (torchao emulated float8)", True)


def _unused_entries(config: FrameworkConfig, linear_fqns: Sequence[str]) -> list[str]:
    """Filter entries (or names in a Python filter's literal set) that are a substring of no nn.Linear FQN."""
    entries = [entry for entry in (config.filter_fqns or ()) if entry != AUTO_FILTER_FLAG]
    return entries_matching_nothing(entries, linear_fqns)


def advice_settings(
    config_path: str | Path, target: str | None = None, **given: Any
) -> tuple[SuggestRequest, tuple[str, ...], str | None]:
    """The request to advise with: each setting `given` on the command line (not None; the names of
    `SuggestRequest`), else the one in the header `fp8advisor suggest` wrote into the config
    (`fp8advisor.frameworks.formats.read_header`), else the default. Also the names of the settings taken from
    the header, and one line saying where the command line disagrees with the header (the command line wins;
    a `target` other than the one the header names is said too), or None. A file without such a header (or
    none at all: `read_config` reports that) gives the command line and the defaults."""
    from fp8advisor.frameworks.formats import read_header

    try:
        header = read_header(Path(config_path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        header = None
    written_target = header.request.target if header is not None else None
    request = SuggestRequest(target if target is not None else written_target or "")
    merged, from_header, disagreements = request.merge_with_header(
        given, header.written() if header is not None else None
    )
    if target is not None and written_target is not None and target != written_target:
        disagreements.insert(0, f"TARGET {target} (header: {written_target})")
    message = None
    if disagreements:
        message = (
            f"the command line differs from the header fp8advisor suggest wrote in {config_path}: "
            f"{', '.join(disagreements)}; advising with the command line's values"
        )
    return merged, from_header, message


def verify(
    request: SuggestRequest,
    config_path: str | Path,
    *,
    predictor: Callable | None = None,
    trust_config: bool = False,
    run_seq: int = RUN_SEQ,
    real_model_max_parameters: int = REAL_MODEL_MAX_PARAMETERS,
    sqnr_threshold_db: float = SQNR_THRESHOLD_DB,
    seed: int = 0,
) -> VerifyReport:
    """Check that the config at `config_path` converts exactly the layers `advise` picks for the request's
    target at its (batch, seq), that they run float8 GEMMs and nothing else does, and that their numerics are
    sound.

    `request`: the settings to advise with, as `suggest` takes them (`advice_settings` merges a command line
    with the config's header); its recipe "auto" means the one the config names (for a bare filter list:
    "auto"); its in-context results (`measured`) decide the blocks they measured, and are never picked up
    automatically, as under --check. `predictor` replaces the profile's predictions (tests).
    `trust_config`: run a Python config's filter function instead of evaluating it from its syntax
    (`fp8advisor.frameworks.reader.read_config`).
    Raises AdvisorError subclasses (exit 2) for unusable input; the report's `exit_code` is 0 or 1.
    """
    from fp8advisor.inspect.layers import inspect_loaded
    from fp8advisor.inspect.target import load_model

    target, batch, seq, recipe = request.target, request.batch, request.seq, request.recipe
    requested_recipe = parse_recipe(str(recipe)) if recipe not in (None, AUTO) else None
    config = read_config(config_path, recipe=requested_recipe, trust_config=trust_config)

    # 1. The model at the advised batch x seq, and the advice.
    meta = load_model(target, "meta")
    model_layers: ModelLayers = inspect_loaded(meta, batch=batch, seq=seq)
    advice = _advice_for(model_layers, config, requested_recipe, request, predictor)
    if config.recipe is None:  # a bare filter list trains with the advised recipe
        config = config.with_recipe(advice.recipe)
    run_recipe = config.recipe
    assert run_recipe is not None
    differences = _config_differences(config, requested_recipe, advised_any=bool(advice.convert_fqns))

    # 2. Which layers the framework converts: torchao's own swap on the real-shaped meta model.
    shapes_model = copy.deepcopy(meta.model)  # meta tensors: no memory; kept unconverted for the shadow
    device = _execution_device()
    converted = convert(meta.model, config, run_recipe, emulate=device.emulate)
    expert_checks, expert_differences, expert_notes = check_experts(advice, config, meta.model)
    differences.extend(expert_differences)

    # 3. Run one traced step: the model itself when small enough, else its shadow.
    linear_layers = [layer for layer in model_layers.layers if layer.is_linear]
    run_tokens = max(16, min(run_seq, seq) // 16 * 16)
    with _one_cpu_thread(device):
        step = _run_step(
            meta.spec,  # parsed once: a Hub id is not looked up again
            config,
            shapes_model,
            linear_layers,
            converted,
            device,
            run_tokens,
            real_model_max_parameters,
            seed,
        )

        # 4. Numerics of each converted layer, alone, on what it saw in the bf16 model.
        sqnr = _converted_layer_sqnr(step, linear_layers, converted)

    # 5. Per layer: the config against the advice, against the trace and against the threshold.
    advice_by_fqn = {layer.fqn: layer for layer in advice.layers}
    checks = []
    for layer in linear_layers:
        check, layer_differences = _check_layer(
            layer,
            advice_by_fqn.get(layer.fqn),
            config,
            converted,
            step.trace.layers.get(layer.fqn, _LayerTrace()),
            sqnr.get(layer.fqn, (None, None)),
            sqnr_threshold_db,
        )
        checks.append(check)
        differences.extend(layer_differences)
    checks = _mark_expert_wrapped(checks, expert_differences)

    # 6. Filter entries that match nothing, and the report.
    every_name = [fqn for layer in linear_layers for fqn in (layer.fqn, *layer.aliases)]
    for entry in _unused_entries(config, every_name):
        differences.append(
            Difference(DifferenceKind.UNUSED_ENTRY, entry, "a substring of no nn.Linear FQN of this model")
        )
    return VerifyReport(
        target=target,
        config=config,
        recipe=run_recipe,
        profile=advice.profile_name,
        batch=batch,
        seq=seq,
        min_speedup=request.min_speedup,
        layers=tuple(checks),
        differences=tuple(_ordered(differences)),
        execution=step.execution,
        sqnr_threshold_db=sqnr_threshold_db,
        notes=tuple(
            dict.fromkeys(
                (*config.notes, *model_layers.notes, *step.notes, *expert_notes)
                + ((model_layers.seq_warning,) if model_layers.seq_warning else ())
            )
        ),
        experts=expert_checks,
    )


# ----------------------------------------------------------------------------------------------------
# MoE experts (grouped form): their conversion, checked on the meta model


def swapped_expert_modules(model: nn.Module) -> set[str]:
    """FQNs of the modules whose own parameters torchao's moe_training swapped to its float8 weight wrapper
    (`Float8TrainingWeightWrapperTensor`: its `torch._grouped_mm` calls run float8 grouped GEMMs)."""
    wrapper = compat.float8_training_weight_wrapper()
    return {
        fqn
        for fqn, module in model.named_modules()
        if any(isinstance(p, wrapper) for p in module.parameters(recurse=False))
    }


#: A module the config's expert filter swaps (torchao's quantize_) that holds no expert group's weights.
NOT_AN_EXPERT_GROUP = (
    "the config's expert filter swaps its parameters to torchao's float8 weight wrapper (its matmuls run "
    "float8): not an expert group"
)


def _mark_expert_wrapped(checks: list[LayerCheck], expert_differences: list[Difference]) -> list[LayerCheck]:
    """The Linear checks whose weight the expert conversion wrapped (a router or shared expert under a module
    the expert filter names), with that problem: the Layers table must not show them as bf16 and ok."""
    wrapped = {d.subject for d in expert_differences if d.detail == NOT_AN_EXPERT_GROUP}
    problem = f"{DifferenceKind.EXPERTS.value}: {NOT_AN_EXPERT_GROUP}"
    return [replace(c, problems=(*c.problems, problem)) if c.fqn in wrapped else c for c in checks]


def convert_experts(model: nn.Module, config: FrameworkConfig, groups) -> set[str]:
    """Convert the grouped experts of `model` in place as the config's framework would; return the modules
    whose parameters were swapped. torchao and torchtitan 0.2: torchao's own `quantize_(model,
    Float8TrainingOpConfig(), filter_fn=<the file's filter>)`. torchtitan 0.3 swaps every GroupedExperts, a
    torchtitan class a model of any other code does not have: simulated as every module of every group."""
    if not config.converts_experts:
        return set()
    if config.expert_filter is None:
        return {module for group in groups for module in expert_modules(group)}
    compat.quantize_grouped_experts(model, config.expert_filter)
    return swapped_expert_modules(model)


def experts_summary(report) -> str:
    """`; the 2 expert groups: converted as advised, checked on the meta model (not run: ...)`: what the
    PASS/FAIL line says of the grouped experts (empty for a model without them): their conversion is checked
    on the meta model only (`EXPERTS_NOT_RUN`)."""
    checks = [check for check in report.experts if check.converted is not None]
    if not checks:
        return ""
    agree = all(not check.problems for check in checks)
    return (
        f"; the {len(checks)} expert group(s): {'converted as advised' if agree else 'see the differences'}, "
        "checked on the meta model (not run: torchao's float8 grouped GEMM needs a CUDA GPU)"
    )


#: Why the step runs the experts in bf16 (module docstring: verify's step runs on the CPU, emulated).
EXPERTS_NOT_RUN = (
    "the MoE experts' float8 conversion was checked on the meta model (parameters swapped to torchao's "
    "Float8TrainingWeightWrapperTensor), not run: torchao's float8 grouped GEMM casts with Triton kernels "
    "and multiplies with torch._scaled_grouped_mm, CUDA only (no emulated path), so the step runs them"
    " in bf16"
)


def check_experts(
    advice, config: FrameworkConfig, model: nn.Module
) -> tuple[tuple[ExpertCheck, ...], list[Difference], list[str]]:
    """The config's grouped experts against the advice (`Advice.experts`): converted on `model` (the meta
    model) as the framework would; one check per group, the differences, and notes. A format that cannot
    convert grouped experts keeps them in bf16: a note, no difference. Experts held as lists of nn.Linear are
    checked as Linear layers."""
    groups = grouped_expert_groups(advice.experts)
    if not groups:
        return (), [], []
    if config.converts_experts is None:
        advised = [group for group in groups if group.convert]
        said = (
            f"the advice converts {len(advised)} of the {len(groups)} expert groups"
            if advised
            else "so does the advice"
        )
        return (
            tuple(_expert_check(group, group.convert, None, ()) for group in groups),
            [],
            [
                f"{config.framework.value} cannot convert grouped MoE experts: they stay bf16 with this file "
                f"({said}); --format torchtitan-py or torchao can hold that decision"
            ],
        )
    all_or_none = config.framework in ALL_OR_NONE_EXPERT_FORMATS
    together = all_or_none_converts(groups, advice.min_speedup) if all_or_none else None
    swapped = convert_experts(model, config, groups)
    checks, differences = [], []
    for group in groups:
        expected = together if together is not None else group.convert
        if expected and not file_can_convert(group, config.framework):
            expected = False  # its module holds other parameters: the file cannot name it alone (emit's note)
        modules = expert_modules(group)
        done = [module in swapped for module in modules]
        converted = all(done)
        problems = []
        if any(done) and not converted:
            missing = [m for m, d in zip(modules, done, strict=True) if not d]
            problems.append(f"only part of the group converts: {', '.join(missing)} stay bf16")
        elif converted != expected:
            problems.append(_expert_mismatch(group, expected, all_or_none))
        checks.append(_expert_check(group, expected, converted, tuple(problems)))
        differences += [Difference(DifferenceKind.EXPERTS, group.group, problem) for problem in problems]
    known = {module for group in groups for module in expert_modules(group)}
    for module in sorted(swapped - known):
        differences.append(
            Difference(
                DifferenceKind.EXPERTS,
                module,
                NOT_AN_EXPERT_GROUP,
            )
        )
    notes = [EXPERTS_NOT_RUN] if swapped else []
    if all_or_none and len({group.convert for group in groups}) > 1:
        notes.append(
            f"{config.framework.value} converts every expert group or none: checked against that choice "
            f"({'all' if together else 'none'}, by the groups' total predicted speedup)"
        )
    return tuple(checks), differences, notes


def _expert_check(group, expected: bool, converted: bool | None, problems: tuple[str, ...]) -> ExpertCheck:
    return ExpertCheck(
        group=group.group,
        modules=expert_modules(group),
        advised=group.convert,
        expected=expected,
        converted=converted,
        predicted_speedup=group.predicted_speedup,
        provenance=group.provenance,
        problems=problems,
    )


def _expert_mismatch(group, expected: bool, all_or_none: bool) -> str:
    figure = (
        "no prediction" if group.predicted_speedup is None else f"predicted {group.predicted_speedup:.2f}x"
    )
    if group.provenance:
        figure += f", {group.provenance}"
    whose = "the all-or-none choice" if all_or_none and expected != group.convert else "the advice"
    if expected:
        return f"{whose} converts it ({figure}), the config keeps it in bf16"
    return f"the config converts it, {whose} keeps it in bf16 ({figure})"


@contextlib.contextmanager
def _one_cpu_thread(device: _Device) -> Iterator[None]:
    """Run the step on the CPU with one intra-op thread, as torch was set before afterwards.

    The step's GEMMs are small (RUN_SEQ tokens; a shadow's K and N at most SHADOW_MAX_DIM) and, emulated,
    in float32: on the 2-core development machine each ran 3 to 10x slower on 2 OpenMP threads than on 1
    (docs/benchmarks.md), the threads' synchronisation costing more than the work they share.
    """
    if device.device.type != "cpu":
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _advice_for(
    model_layers: ModelLayers,
    config: FrameworkConfig,
    requested_recipe: Recipe | None,
    request: SuggestRequest,
    predictor: Callable | None,
):
    """`advise` for the model, with --recipe, else the config's recipe, else (a bare filter list) "auto"; with
    the tensor- and expert-parallel degrees and the in-context results `suggest` advised with."""
    from fp8advisor.advice.decide import advise
    from fp8advisor.advice.in_context import in_context_reader

    choice = _profile_choice(request.profile, predictor, request.grouped_profile)
    in_context = None
    if request.measured is not None:
        in_context = in_context_reader(
            request.measured,
            automatic=False,
            model_layers=model_layers,
            family=choice.primary.family,
            tensor_parallel=request.tensor_parallel,
        )
    return advise(
        model_layers,
        choice,
        requested_recipe or config.recipe or AUTO,
        request.min_speedup,
        predictor=predictor,
        device_capability=None,
        compare_torchao_auto=False,
        tensor_parallel=request.tensor_parallel,
        in_context=in_context,
        expert_parallel=request.expert_parallel,
    )


def _config_differences(
    config: FrameworkConfig, requested_recipe: Recipe | None, *, advised_any: bool
) -> list[Difference]:
    """What differs in the config as a whole: the recipe, and FP8 switched off while the advice converts
    some layer (when it converts none, FP8 off is the advised outcome, and the recipe of nothing is moot)."""
    differences = []
    if config.enabled and requested_recipe is not None and config.recipe is not requested_recipe:
        assert config.recipe is not None
        differences.append(
            Difference(
                DifferenceKind.RECIPE,
                str(config.path),
                f"the config trains with {config.recipe.value}, --recipe asks {requested_recipe.value}",
            )
        )
    if not config.enabled and advised_any:
        differences.append(
            Difference(
                DifferenceKind.FP8_OFF,
                str(config.path),
                "; ".join(n for n in config.notes if n.startswith("FP8 is off")) or "FP8 is off",
            )
        )
    return differences


@dataclass(frozen=True)
class _Step:
    """One traced forward and backward of the bf16 model and its float8 twin (the model, or its shadow)."""

    bf16_model: nn.Module
    float8_model: nn.Module
    capture: _Capture  # what each converted layer saw in the bf16 model
    trace: OpTrace  # the GEMMs and casts each layer of the float8 model ran
    execution: Execution
    notes: tuple[str, ...]


def _run_step(
    spec: TargetSpec,
    config: FrameworkConfig,
    shapes_model: nn.Module,
    linear_layers: Sequence,
    converted: set[str],
    device: _Device,
    run_tokens: int,
    real_model_max_parameters: int,
    seed: int,
) -> _Step:
    """The model built for real by its own code when it has at most `real_model_max_parameters`, else (or
    when that fails) its shadow; one forward and backward of each (module docstring)."""
    from fp8advisor.inspect.sandbox import describe_error, running_user_code

    recipe = config.recipe
    assert recipe is not None
    parameter_count = sum(p.numel() for p in shapes_model.parameters())
    run_batch = 1
    notes: list[str] = []
    ran = None
    if parameter_count <= real_model_max_parameters:
        try:
            with running_user_code(
                spec.path if spec.kind == "python" else None, "running the model for real"
            ):
                bf16_model, float8_model, args, kwargs = _real_models(
                    spec,
                    config,
                    recipe,
                    device.device,
                    device.emulate,
                    run_batch,
                    run_tokens,
                    converted,
                    seed,
                )
                ran = _forward_backward(bf16_model, float8_model, args, kwargs, converted, seed)
        except AdvisorError:
            raise
        except Exception as error:  # the user's code on real tensors: fall back, and say why
            notes.append(
                f"running the model for real failed ({describe_error(error)[:200]}); its shadow was run "
                "instead"
            )
    if ran is not None:
        mode = "model"
        why = (
            f"{_count(parameter_count)} parameters: built for real by the model's own code, in bf16, "
            f"run at batch {run_batch} x seq {run_tokens}"
        )
        sqnr_scope = "every converted layer"
    else:
        bf16_model, float8_model = _shadow_models(
            shapes_model, linear_layers, config, converted, device, seed
        )
        args, kwargs = (bf16_model.example_inputs(run_tokens, seed),), {}
        ran = _forward_backward(bf16_model, float8_model, args, kwargs, converted, seed)
        mode = "shadow"
        why = (
            f"{_count(parameter_count)} parameters, more than the {_count(real_model_max_parameters)} built "
            f"for real here: a shadow with the same FQNs, K and N capped at {SHADOW_MAX_DIM}, each Linear "
            f"called as often as the traced forward calls it, on {run_tokens} random tokens"
            if parameter_count > real_model_max_parameters
            else "the model could not run for real: a shadow with the same FQNs, K and N capped at "
            f"{SHADOW_MAX_DIM}, on {run_tokens} random tokens"
        )
        sqnr_scope = (
            "the first converted layer of each repeated group (a shadow runs one code on random weights)"
        )
    capture, bf16_outputs, float8_outputs, trace = ran
    model_sqnr = sqnr_db(bf16_outputs[0], float8_outputs[0]) if mode == "model" else None
    execution = Execution(
        device.words, device.emulate, mode, run_batch, run_tokens, why, sqnr_scope, model_sqnr
    )
    if trace.unattributed_float8_gemms:
        notes.append(f"{trace.unattributed_float8_gemms} float8 GEMM(s) ran outside any nn.Linear")
    return _Step(bf16_model, float8_model, capture, trace, execution, tuple(notes))


def _shadow_models(
    shapes_model: nn.Module,
    linear_layers: Sequence,
    config: FrameworkConfig,
    converted: set[str],
    device: _Device,
    seed: int,
) -> tuple[_Shadow, _Shadow]:
    """The bf16 shadow of the model and its float8 twin, converted by the framework's filter on the real
    shapes (so the same layers convert as on the meta model)."""
    recipe = config.recipe
    assert recipe is not None
    plan = [(layer.fqn, layer.calls or int(layer.status is LayerStatus.ASSUMED)) for layer in linear_layers]
    torch.manual_seed(seed)
    bf16_model = _Shadow(shapes_model, plan, torch.bfloat16, device.device)
    # The float8 twin shares the bf16 shadow's weights (conversion swaps modules, not weights; nothing writes
    # them): one set in memory, the same values in both.
    float8_model = copy.deepcopy(bf16_model, memo={id(p): p for p in bf16_model.parameters()})
    shadow_converted = convert(float8_model, config, recipe, emulate=device.emulate, decide_on=shapes_model)
    # The shadow holds each module once, under its first name: aliases are checked on `converted` alone.
    shadow_fqns = {fqn for fqn, _ in bf16_model.named_modules()}  # once: per layer it was quadratic
    expected = converted & shadow_fqns
    if shadow_converted != expected:  # pragma: no cover - the replayed filter must give the same set
        raise AssertionError(f"shadow conversion differs: {sorted(shadow_converted ^ expected)}")
    return bf16_model, float8_model


def _converted_layer_sqnr(
    step: _Step, linear_layers: Sequence, converted: set[str]
) -> dict[str, tuple[float, float | None]]:
    """(output SQNR, input-gradient SQNR) of each converted layer that ran, alone, against its bf16 twin on
    the input and output gradient it saw in the bf16 model. A shadow measures one layer per repeated group."""
    bf16_modules = dict(step.bf16_model.named_modules())
    float8_modules = dict(step.float8_model.named_modules())
    sqnr: dict[str, tuple[float, float | None]] = {}
    measured_groups: set[tuple] = set()
    for fqn in [layer.fqn for layer in linear_layers if layer.fqn in converted]:
        if step.execution.mode == "shadow":
            # The shadow's layers of one repeated group are the same torchao code on random weights of the
            # same shape: one of them measures what all would (and keeps an 80-layer model's check short).
            group = (block_shape(fqn), bf16_modules[fqn].in_features, bf16_modules[fqn].out_features)
            if group in measured_groups:
                continue
            measured_groups.add(group)
        if fqn in step.capture.inputs:
            sqnr[fqn] = layer_sqnr(
                bf16_modules[fqn],
                float8_modules[fqn],
                step.capture.inputs[fqn],
                step.capture.grad_outputs.get(fqn),
            )
    return sqnr


def _check_layer(
    layer,
    layer_advice,
    config: FrameworkConfig,
    converted: set[str],
    traced: _LayerTrace,
    sqnr: tuple[float | None, float | None],
    sqnr_threshold_db: float,
) -> tuple[LayerCheck, list[Difference]]:
    """One nn.Linear: the config's decision against the advice, against what the trace saw run, and its
    SQNR against the threshold."""
    advised = bool(layer_advice and layer_advice.convert)
    is_converted = layer.fqn in converted
    float8_gemms = traced.forward_float8 + traced.backward_float8
    high_precision = traced.forward_high_precision + traced.backward_high_precision
    problems: list[tuple[DifferenceKind, str]] = []
    never_called = layer.status is LayerStatus.NOT_CALLED or traced.calls == 0
    if is_converted and never_called:
        problems.append(
            (DifferenceKind.NEVER_CALLED, "the forward never calls it: no float8 ever runs there")
        )
    elif is_converted and (traced.forward_float8 == 0 or traced.backward_float8 == 0):
        problems.append(
            (
                DifferenceKind.NO_FLOAT8,
                f"float8 GEMMs forward {traced.forward_float8}, backward {traced.backward_float8}",
            )
        )
    # A module registered under several names is swapped per name: the calls through a name left
    # unconverted run in bf16 (a same-parent alias, or a shared module the filter names only once).
    left_bf16 = [alias for alias in layer.aliases if alias not in converted]
    if is_converted and left_bf16:
        problems.append(
            (
                DifferenceKind.NO_FLOAT8,
                f"the same module is also registered as {', '.join(left_bf16)}, which the config leaves "
                "in bf16: the calls through that name run in bf16",
            )
        )
    if is_converted and not advised and not never_called:
        reason = layer_advice.reason if layer_advice else "not advised"
        problems.append((DifferenceKind.AGAINST_ADVICE, f"advice: {reason}"))
    if advised and not is_converted:
        problems.append((DifferenceKind.LEFT_BF16, _why_not_converted(config, layer)))
    if not is_converted and (float8_gemms or traced.float8_casts):
        problems.append((DifferenceKind.UNEXPECTED_FLOAT8, f"{float8_gemms} float8 GEMM(s)"))
    output_sqnr, grad_sqnr = sqnr
    low = [
        f"{what} {value:.1f} dB"
        for what, value in (("output", output_sqnr), ("input gradient", grad_sqnr))
        if value is not None and value < sqnr_threshold_db
    ]
    if low:
        problems.append((DifferenceKind.NUMERICS, f"SQNR {', '.join(low)} < {sqnr_threshold_db:g} dB"))
    check = LayerCheck(
        fqn=layer.fqn,
        K=layer.K,
        N=layer.N,
        M=layer.M,
        status=layer.status,
        advised=advised,
        advice_reason=layer_advice.reason if layer_advice else "",
        predicted_speedup=(layer_advice.predicted_speedup if layer_advice else None),
        converted=is_converted,
        calls=traced.calls,
        float8_gemms=float8_gemms,
        high_precision_gemms=high_precision,
        float8_casts=traced.float8_casts,
        sqnr_output_db=output_sqnr,
        sqnr_grad_input_db=grad_sqnr,
        problems=tuple(f"{kind.value}: {detail}" for kind, detail in problems),
    )
    return check, [Difference(kind, layer.fqn, detail) for kind, detail in problems]


_KIND_ORDER = list(DifferenceKind)


def _ordered(differences: list[Difference]) -> list[Difference]:
    return sorted(differences, key=lambda d: _KIND_ORDER.index(d.kind))


def _why_not_converted(config: FrameworkConfig, layer) -> str:
    if not config.enabled:
        return "FP8 is off in the config"
    entries = [entry for entry in (config.filter_fqns or ()) if entry in layer.fqn]
    if entries and config.rule.startswith(("substring", "torchao")):
        return f"filter entr{'y' if len(entries) == 1 else 'ies'} {', '.join(map(repr, entries))} match it"
    return f"the config's rule ({config.rule}) keeps it in bf16"


def _profile_choice(profile: str | None, predictor: Callable | None, grouped_profile: str | None = None):
    if predictor is not None and profile is None:
        return _TestProfile()
    from fp8advisor.predict.profile import select_profile

    return select_profile(profile, grouped=grouped_profile)


class _TestProfile:
    """Stands for a profile when a test supplies its own predictor."""

    name = "test predictor"
    provenance = "modelled"
    family = "test"  # no GPU family: in-context results of any real GPU are refused

    @property
    def primary(self) -> _TestProfile:  # a profile choice of one profile, as `select_profile` returns
        return self

    def describe(self) -> str:
        return self.name

    def covers(self, recipe) -> bool:
        return True


class _RealRunUnavailable(Exception):
    """The model cannot be built or run for real here; the shadow is used instead."""


def _real_models(
    spec: TargetSpec,
    config: FrameworkConfig,
    recipe: Recipe,
    device: torch.device,
    emulate: bool,
    batch: int,
    tokens: int,
    expected: set[str],
    seed: int,
) -> tuple[nn.Module, nn.Module, tuple, dict]:
    from fp8advisor.inspect.inputs import make_example_inputs
    from fp8advisor.inspect.target import load_model

    torch.manual_seed(seed)
    loaded = load_model(spec, device)
    model = loaded.model.to(dtype=torch.bfloat16)
    model.train()
    bf16_model = copy.deepcopy(model)
    actual = convert(model, config, recipe, emulate=emulate)
    if actual != expected:
        raise _RealRunUnavailable(
            f"conversion on the real model differs from the meta model: {sorted(actual ^ expected)}"
        )
    inputs = make_example_inputs(loaded.model, loaded.namespace, batch, tokens, device, spec=loaded.spec)
    args = tuple(_as_run_input(value) for value in inputs.args)
    kwargs = {key: _as_run_input(value) for key, value in inputs.kwargs.items()}
    return bf16_model, model, args, kwargs


def _as_run_input(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.to(torch.bfloat16)
    return value


__all__ = [
    "REAL_MODEL_MAX_PARAMETERS",
    "SQNR_THRESHOLD_DB",
    "Difference",
    "DifferenceKind",
    "Execution",
    "ExpertCheck",
    "LayerCheck",
    "OpTrace",
    "VerifyReport",
    "check_experts",
    "convert",
    "convert_experts",
    "layer_sqnr",
    "sqnr_db",
    "verify",
]
