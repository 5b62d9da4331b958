"""Every GEMM-bearing layer of a model, with the (M, K, N) it really multiplies.

`inspect_model` builds the user's model on the meta device, runs one forward on fake tensors and records each
aten-level GEMM (mm, addmm, bmm, _grouped_mm, _scaled_mm) against the parameter it multiplies.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING, Any

from fp8advisor import compat
from fp8advisor.request import DEFAULT_BATCH, DEFAULT_SEQ

if TYPE_CHECKING:
    from fp8advisor.inspect.census import CensusTracer, OpCensus


class LayerStatus(str, Enum):
    TRACED = "traced"  # M seen in the traced forward
    ASSUMED = "assumed"  # tracing stopped before this layer ran; M = batch x seq
    NOT_CALLED = "not called"  # conversion would swap it, but the forward never calls it
    NOT_CONVERTIBLE = "not convertible"  # see GemmLayer.reason

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class GemmLayer:
    """One layer (or bare parameter) that feeds a GEMM.

    K = in_features, N = out_features (torchao: `N, K = weight.shape`); `M_per_call` has one entry per call,
    the number of rows multiplied in that call.
    """

    fqn: str
    cls: str  # class name, e.g. "Linear", "MyLinear", "Parameter", "GroupedExperts"
    K: int
    N: int
    M_per_call: tuple[int, ...]
    status: LayerStatus
    reason: str | None = None  # why not convertible / why assumed
    is_linear: bool = True  # isinstance(module, nn.Linear): float8 conversion would swap it
    tied_to: str | None = None  # FQN whose weight this layer shares
    aliases: tuple[str, ...] = ()  # other names the same module is registered under
    expert_group: str | None = None  # the ExpertGroup.fqn this layer is one GEMM of (routed experts)

    @property
    def calls(self) -> int:
        return len(self.M_per_call)

    @property
    def M(self) -> int:
        """Rows per call (the largest, when calls differ); 0 when never called."""
        return max(self.M_per_call, default=0)

    @property
    def convertible(self) -> bool:
        """Float8 conversion would swap it and it runs: the candidates the advice decides on."""
        return self.status in (LayerStatus.TRACED, LayerStatus.ASSUMED)

    def to_json(self) -> dict:
        return {
            "fqn": self.fqn,
            "class": self.cls,
            "K": self.K,
            "N": self.N,
            "M": self.M,
            "M_per_call": list(self.M_per_call),
            "calls": self.calls,
            "status": self.status.value,
            "reason": self.reason,
            "is_linear": self.is_linear,
            "tied_to": self.tied_to,
            "aliases": list(self.aliases),
            "expert_group": self.expert_group,
        }


class ExpertForm(str, Enum):
    GROUPED = "grouped"  # 3-D weights (E, K, N) run through torch._grouped_mm or bmm
    LINEAR_LIST = "linear_list"  # a ModuleList of E expert modules of nn.Linear, dispatched one by one

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class ExpertGemm:
    """One GEMM every expert of a group runs (w1, w2, w3 / gate_up_proj, down_proj): K x N per expert."""

    name: str  # inside one expert: the 3-D parameter ("w1") or the Linear of expert 0 ("w1", "0.w1" form)
    K: int
    N: int
    fqns: tuple[str, ...]  # the GemmLayer FQNs that are this GEMM (one 3-D parameter, or E Linears)

    def to_json(self) -> dict:
        return {"name": self.name, "K": self.K, "N": self.N, "fqns": list(self.fqns)}


@dataclass(frozen=True)
class ExpertGroup:
    """The routed experts of one MoE layer: E experts whose GEMMs float8 converts (or not) together.

    Under balanced routing each expert multiplies `M_per_expert` = tokens x top_k / E rows; `M_total` =
    tokens x top_k rows pass through each GEMM of the group. The router and shared experts are not members:
    the router is never converted (N = E is small); shared experts are dense Linears decided one by one.
    """

    fqn: str  # the module holding the experts: "layers.3.moe.experts"
    cls: str  # its class name
    form: ExpertForm
    n_experts: int  # E
    top_k: int | None  # experts per token, where the router shows it; None: unknown
    top_k_source: str  # where top_k was read ("layers.3.moe.router.top_k"), or why it is unknown
    tokens: int  # rows entering the MoE layer (batch x seq)
    M_total: int | None  # rows through each grouped GEMM per step (traced, or tokens x top_k); None: unknown
    gemms: tuple[ExpertGemm, ...]
    router: str | None = None  # FQN of the router's GEMM layer (never converted)
    shared: tuple[str, ...] = ()  # FQNs of the shared experts' Linear layers (dense, decided one by one)
    notes: tuple[str, ...] = ()
    #: GROUPED form: the other parameters under the experts' module (its own and its children's: a router or
    #: shared expert beside 3-D weights held on the MoE module itself). torchao's quantize_ swaps every
    #: parameter under a module its filter matches, so a file naming modules cannot convert this group alone.
    other_parameters: tuple[str, ...] = ()

    @property
    def M_per_expert(self) -> float | None:
        """Rows each expert multiplies under balanced routing; None when M_total is unknown."""
        return None if self.M_total is None else self.M_total / self.n_experts

    @property
    def member_fqns(self) -> tuple[str, ...]:
        return tuple(fqn for gemm in self.gemms for fqn in gemm.fqns)

    def to_json(self) -> dict:
        per_expert = self.M_per_expert
        return {
            "fqn": self.fqn,
            "class": self.cls,
            "form": self.form.value,
            "E": self.n_experts,
            "top_k": self.top_k,
            "top_k_source": self.top_k_source,
            "tokens": self.tokens,
            "M_total": self.M_total,
            "M_per_expert": None if per_expert is None else round(per_expert, 3),
            "gemms": [gemm.to_json() for gemm in self.gemms],
            "router": self.router,
            "shared": list(self.shared),
            "notes": list(self.notes),
            "other_parameters": list(self.other_parameters),
        }


@dataclass(frozen=True)
class ModelLayers:
    """The inspection of one model at one (batch, seq)."""

    target: str  # as the user typed it
    batch: int
    seq: int
    layers: tuple[GemmLayer, ...]
    notes: tuple[str, ...] = field(
        default=()
    )  # e.g. "tracing stopped at model.py:42 (.item()); 3 layers assumed"
    census: OpCensus | None = None  # what else the same forward runs (attention, memory-bound regions)
    # parameters of the model, a shared one once: what the optimizer and FSDP move
    parameter_count: int = 0
    #: the longest sequence the model says it takes, and where it says so (`max_positions`); None: unknown
    max_positions: tuple[int, str] | None = None
    #: the routed experts of each MoE layer, in module order (empty for a dense model)
    expert_groups: tuple[ExpertGroup, ...] = ()

    @property
    def seq_warning(self) -> str | None:
        """A warning when `seq` exceeds the model's maximum positions; None when it does not, or unknown."""
        if self.max_positions is None or self.seq <= self.max_positions[0]:
            return None
        limit, where = self.max_positions
        return (
            f"--seq {self.seq} is longer than the model's maximum positions ({limit}, its {where}): "
            "it was not built for such sequences; check --seq"
        )

    @property
    def tokens(self) -> int:
        return self.batch * self.seq

    def linear_fqns(self) -> list[str]:
        """FQNs of every nn.Linear that float8 conversion would visit, in module order."""
        return [layer.fqn for layer in self.layers if layer.is_linear]

    def to_json(self) -> dict:
        return {
            "target": self.target,
            "batch": self.batch,
            "seq": self.seq,
            "tokens": self.tokens,
            "layers": [layer.to_json() for layer in self.layers],
            "notes": list(self.notes),
            "census": self.census.to_json() if self.census is not None else None,
            "parameter_count": self.parameter_count,
            "max_positions": None if self.max_positions is None else self.max_positions[0],
            "expert_groups": [group.to_json() for group in self.expert_groups],
        }


# ----------------------------------------------------------------------------------------------------
# Inspection

# torch._scaled_mm needs K, N and (in the grad_weight GEMM, whose inner dimension is M) M divisible by 16.
_M_DIVISOR = 16


_DATA_DEPENDENT_WORDS = {
    "_local_scalar_dense": "a tensor value read in Python: .item(), bool(), int() or an if on a tensor",
    "nonzero": "nonzero / boolean-mask indexing: the output size depends on the values",
}


class _TracingStopped(Exception):
    """The forward hit an op whose result depends on tensor values (`.item()`, `nonzero`): meta has none."""

    def __init__(self, op: str, cause: BaseException | None = None):
        super().__init__(op)
        self.op = op
        self.cause = cause


@dataclass
class _GemmCall:
    """One aten GEMM that multiplies a parameter."""

    parameter: object  # the nn.Parameter
    op: str
    M: int
    K: int
    N: int
    inside: object | None  # the nn.Linear owning `parameter` that was running when the GEMM ran, if any


def _gemm_ops():
    import torch

    aten = torch.ops.aten
    # op -> (index of A, index of B); A is (..., M, K) and B is (..., K, N)
    table = {
        aten.mm.default: (0, 1),
        aten.addmm.default: (1, 2),
        aten.bmm.default: (0, 1),
        aten.baddbmm.default: (1, 2),
    }
    private = {
        "_addmm_activation": (1, 2),
        "_scaled_mm": (0, 1),
        "_grouped_mm": (0, 1),
        "_scaled_grouped_mm": (0, 1),
    }
    for name, operands in private.items():
        op = compat.aten_op(name)
        if op is not None:  # a torch without the op cannot run it
            table[op.default] = operands
    return table


def _value_ops():
    import torch

    aten = torch.ops.aten
    # Ops whose output holds the same values as the input in a new storage: a weight cast to bf16 is still it.
    private = [compat.aten_op(name) for name in ("_to_copy", "_unsafe_view")]
    return {aten.clone.default, aten.contiguous.default} | {op.default for op in private if op is not None}


def _make_recorder(
    parameters_by_storage: dict,
    active_linears: list,
    calls: list,
    *,
    memo: bool = True,
    census: CensusTracer | None = None,
):
    """A TorchDispatchMode that records every GEMM on a parameter (or a view or copy of one).

    `memo` answers repeated meta-kernel calls from a cache (see `__torch_dispatch__`); off only to test it.
    `census`, when given, observes every op after it ran (`fp8advisor.inspect.census`).
    """
    import torch

    gemm_ops = _gemm_ops()
    value_ops = _value_ops()
    bf16_only = _bf16_only_ops()
    data_dependent_tags = {torch.Tag.data_dependent_output, torch.Tag.dynamic_output_shape}
    keep_alive: list = []  # copies of parameters: their storages must not be freed and reused while we trace

    meta = torch.device("meta")
    cacheable: dict = {}  # op -> whether its output is a fresh tensor whose metadata depends on its inputs
    outputs_by_inputs: dict = {}  # (op, input metadata) -> output metadata

    def is_cacheable(func) -> bool:
        found = cacheable.get(func)
        if found is None:
            schema = compat.op_schema(func)
            found = not (
                func.is_view
                or schema.is_mutable
                or any(r.alias_info is not None for r in schema.returns)
                or data_dependent_tags.intersection(func.tags)
            )
            cacheable[func] = found
        return found

    class GemmRecorder(compat.eager_dispatch_mode()):  # never runs under torch.compile
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            operands = gemm_ops.get(func)
            on_parameter = operands is not None and self._record(func, args, operands)
            # Meta kernels of most ops are Python refs (~300 us each); a model repeats the same op on the same
            # shapes once per block. The output's metadata is a function of the inputs' metadata, so a cached
            # answer is exact.
            key = _metadata_key(func, args, kwargs, meta) if memo and is_cacheable(func) else None
            cached = outputs_by_inputs.get(key) if key is not None else None
            if cached is not None:
                out = _materialize(cached, meta)
            else:
                try:
                    if func in bf16_only and _off_bf16_on_meta(args, meta):
                        out = _run_in_bf16(func, args, kwargs)
                    else:
                        out = func(*args, **kwargs)
                except Exception as error:
                    if data_dependent_tags.intersection(func.tags):
                        raise _TracingStopped(str(func.overloadpacket.__name__), error) from error
                    raise
                if key is not None:
                    if _shares_a_storage(out, (*args, *kwargs.values())):
                        # An alias its schema does not declare (_unsafe_view): a fresh tensor from the cache
                        # would cut it off from its input's storage, which the op census follows.
                        cacheable[func] = False
                    else:
                        described = _describe_output(out)
                        if described is not None:
                            outputs_by_inputs[key] = described
            if func in value_ops and args and isinstance(args[0], torch.Tensor):
                parameter = parameters_by_storage.get(compat.storage_key(args[0]))
                if parameter is not None and isinstance(out, torch.Tensor):
                    parameters_by_storage[compat.storage_key(out)] = parameter
                    keep_alive.append(out)
            if census is not None:
                census.observe(func, args, kwargs, out, on_parameter)
            return out

        def _record(self, func, args, operands) -> bool:
            """Record a GEMM on a parameter; False when it multiplies no parameter."""
            a, b = args[operands[0]], args[operands[1]]
            op = func.overloadpacket.__name__
            parameter = parameters_by_storage.get(compat.storage_key(b))
            if parameter is not None:  # x @ W: rows of x are M
                K, N = a.shape[-1], b.shape[-1]
                M = a.numel() // K if K else 0
            else:
                parameter = parameters_by_storage.get(compat.storage_key(a))
                if parameter is None:
                    return False  # activations times activations (attention scores): no layer to convert
                # W @ x: the output's columns play the part of rows
                K, N = a.shape[-1], a.shape[-2]
                M = b.numel() // b.shape[-2] if b.shape[-2] else 0
            inside = active_linears[-1] if active_linears else None
            calls.append(_GemmCall(parameter, op, int(M), int(K), int(N), inside))
            return True

    return GemmRecorder()


def _bf16_only_ops() -> set:
    """GEMM ops whose meta kernel accepts only bf16 operands (torch._grouped_mm, as its CUDA kernel)."""
    op = compat.aten_op("_grouped_mm")
    return set() if op is None else {op.default}


def _off_bf16_on_meta(args, meta) -> bool:
    """Whether a GEMM's operands are meta tensors of a floating dtype other than bf16."""
    import torch

    operands = [a for a in args[:2] if isinstance(a, torch.Tensor)]
    return bool(operands) and all(
        a.device == meta and a.is_floating_point() and a.dtype != torch.bfloat16 for a in operands
    )


def _run_in_bf16(func, args, kwargs):
    """Run a bf16-only GEMM (torch._grouped_mm) on meta operands of another dtype: in bf16, cast back.

    Shapes only: a model built in fp32 (Hugging Face's transformers 5 MoE experts call torch._grouped_mm on
    fp32 weights when built from a config) would stop tracing at its first expert GEMM, which training runs in
    bf16. The output takes the dtype the caller asked for (its `out_dtype`, else its input's), as if the
    kernel accepted it.
    """
    import torch

    schema_args = [argument.name for argument in compat.op_schema(func).arguments]
    named = dict(zip(schema_args, args, strict=False)) | dict(kwargs)
    out_dtype = named.pop("out_dtype", None) or named[schema_args[0]].dtype
    in_bf16 = {
        name: value.to(torch.bfloat16)
        if isinstance(value, torch.Tensor) and value.is_floating_point()
        else value
        for name, value in named.items()
    }
    return func(**in_bf16).to(out_dtype)


def _metadata_key(func, args, kwargs, meta) -> tuple | None:
    """Everything a meta kernel can see of its inputs, hashable; None when something is not plain enough."""
    import torch

    parts: list = [func]

    def add(value) -> bool:
        if isinstance(value, torch.Tensor):
            if type(value) not in (torch.Tensor, torch.nn.Parameter) or value.device != meta:
                return False
            parts.append(
                (
                    value.shape,
                    value.stride(),
                    value.dtype,
                    value.storage_offset(),
                    value.is_conj(),
                    value.is_neg(),
                )
            )
            return True
        if isinstance(value, (list, tuple)):
            parts.append(len(value))
            return all(add(item) for item in value)
        if value is None or isinstance(
            value, (bool, int, float, str, torch.dtype, torch.device, torch.layout, torch.memory_format)
        ):
            parts.append((type(value), value))  # 2 and 2.0 promote differently
            return True
        return False

    if not all(add(a) for a in args):
        return None
    for name in sorted(kwargs):
        parts.append(name)
        if not add(kwargs[name]):
            return None
    return tuple(parts)


def _shares_a_storage(out, args) -> bool:
    """Whether a tensor of `out` lives in the storage of a tensor argument (lists of tensors included)."""
    import torch

    outputs = out if isinstance(out, (tuple, list)) else (out,)
    output_keys = {compat.storage_key(o) for o in outputs if isinstance(o, torch.Tensor)}
    output_keys.discard(None)
    if not output_keys:
        return False
    for arg in args:
        for tensor in arg if isinstance(arg, (tuple, list)) else (arg,):
            if isinstance(tensor, torch.Tensor) and compat.storage_key(tensor) in output_keys:
                return True
    return False


def _describe_output(out):
    import torch

    if isinstance(out, torch.Tensor):
        if type(out) is not torch.Tensor or out.storage_offset() != 0:
            return None
        return (out.shape, out.stride(), out.dtype)
    if isinstance(out, (tuple, list)) and out and all(isinstance(o, torch.Tensor) for o in out):
        described = [_describe_output(o) for o in out]
        return None if any(d is None for d in described) else (type(out), tuple(described))
    return None


def _materialize(described, meta):
    import torch

    if isinstance(described[0], type):
        kind, parts = described
        return kind(_materialize(part, meta) for part in parts)
    shape, stride, dtype = described
    return torch.empty_strided(shape, stride, dtype=dtype, device=meta)


def _torchao_names(model) -> dict[int, list[str]]:
    """id(module) -> the FQNs under which torchao's conversion visits it (named_children, per parent)."""
    visited: dict[int, list[str]] = {}

    def walk(module, prefix: str, depth: int) -> None:
        if depth > 200:
            return  # a module that contains itself
        for name, child in module.named_children():
            fqn = f"{prefix}.{name}" if prefix else name
            visited.setdefault(id(child), []).append(fqn)
            walk(child, fqn, depth + 1)

    walk(model, "", 0)
    return visited


def _all_names(model) -> dict[int, list[str]]:
    names: dict[int, list[str]] = {}
    for fqn, module in model.named_modules(remove_duplicate=False):
        if fqn:
            names.setdefault(id(module), [])
            if fqn not in names[id(module)]:
                names[id(module)].append(fqn)
    return names


def _stop_location(error: BaseException, source_file) -> str | None:
    """file:line of the user's code where the forward stopped (the innermost frame outside torch and us)."""
    import os
    import traceback

    from fp8advisor.inspect.sandbox import user_location

    found = user_location(source_file, error.__traceback__)
    if found:
        return found
    torch_dir = os.path.dirname(os.path.dirname(__import__("torch").__file__))
    own_dir = os.path.dirname(os.path.abspath(__file__))
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        path = os.path.abspath(frame.filename)
        if not path.startswith(own_dir) and not path.startswith(os.path.join(torch_dir, "torch")):
            return f"{frame.filename}:{frame.lineno}"
    return None


def _run_forward(loaded, inputs, parameters_by_storage: dict, linears: list, debug: bool, tokens: int):
    """One forward under the recorder and Linear hooks.

    Returns (GEMM calls, calls per Linear, input rows per Linear, (what, where) if tracing stopped part-way
    else None, the op census at `tokens`). Raises when the forward fails before anything ran.
    """
    import torch

    from fp8advisor.errors import CompatError, ModelInputsError, TargetError
    from fp8advisor.inspect.census import CensusTracer
    from fp8advisor.inspect.sandbox import describe_error, redirect_devices, running_user_code

    model = loaded.model
    active: list = []
    module_calls: dict[int, int] = {}
    module_rows: dict[int, list[int]] = {}
    calls: list[_GemmCall] = []

    def before(module, args):
        active.append(module)
        module_calls[id(module)] = module_calls.get(id(module), 0) + 1
        # Rows of the input, for a call whose GEMM is not an mm/addmm on its weight
        x = args[0] if args else None
        rows = x.numel() // module.in_features if isinstance(x, torch.Tensor) and module.in_features else 0
        module_rows.setdefault(id(module), []).append(rows)

    def after(module, _args, _output):
        if active and active[-1] is module:
            active.pop()

    handles = []
    for module in linears:
        handles.append(module.register_forward_pre_hook(before))
        handles.append(module.register_forward_hook(after))
    stopped: tuple[str, str | None] | None = None  # (what, where)
    census = CensusTracer(parameters_by_storage, _gemm_ops())
    recorder = _make_recorder(parameters_by_storage, active, calls, census=census)
    output = None
    # Training mode: float8 conversion is for training, and eval mode sends nn.MultiheadAttention down a fused
    # fast path that multiplies its weights inside one op, out of the recorder's sight.
    model.train()
    try:
        with (
            running_user_code(loaded.source_file, f"running the forward on {inputs.how}"),
            torch.no_grad(),
            redirect_devices(loaded.device),
            census.attention_mode(),
            recorder,
        ):
            output = model(*inputs.args, **inputs.kwargs)
    except _TracingStopped as error:
        what = _DATA_DEPENDENT_WORDS.get(error.op, f"data-dependent aten.{error.op}")
        stopped = (what, _stop_location(error, loaded.source_file))
        if debug:
            import traceback

            traceback.print_exception(error)
    except CompatError:
        raise  # a torch name of ours moved: not where the model stops
    except Exception as error:
        where = _stop_location(error, loaded.source_file)
        if not calls and not module_calls:
            error_class = TargetError if inputs.how.startswith("example_inputs") else ModelInputsError
            if error_class is TargetError:
                hint = "fix the model code or example_inputs; run with --debug for the full traceback"
            elif loaded.spec.kind == "hf_config":
                hint = (
                    "this model's forward needs more than token ids: write a model.py that builds it with "
                    "transformers (from_config) and defines example_inputs(batch, seq)"
                )
            else:
                hint = (
                    f"the tool guessed {inputs.how}; if forward wants something else, add to the file:\n"
                    "    def example_inputs(batch, seq):\n"
                    "        return (x,)   # forward's positional arguments (or a dict of keyword arguments)"
                )
            raise error_class(
                f"the forward failed on {inputs.how}: {describe_error(error)}", location=where, hint=hint
            ) from error
        stopped = (describe_error(error), where)
        if debug:
            import traceback

            traceback.print_exception(error)
    finally:
        for handle in handles:
            handle.remove()

    what = None if stopped is None else f"{stopped[0]} at {stopped[1] or 'an unknown place'}"
    return calls, module_calls, module_rows, stopped, census.finish(output, tokens=tokens, stopped=what)


#: The most tokens per step (batch x seq) `layers` accepts: far beyond any GPU step, and far inside int64
#: element counts (M x K of the widest layer).
MAX_TOKENS = 2**31


def check_tokens(batch: int, seq: int) -> None:
    """A `TargetError` unless batch and seq are positive and batch x seq is at most `MAX_TOKENS`."""
    from fp8advisor.errors import TargetError

    if batch < 1 or seq < 1:
        raise TargetError(f"batch and seq must be positive (got batch {batch}, seq {seq})")
    if batch * seq > MAX_TOKENS:
        raise TargetError(
            f"batch {batch} x seq {seq} = {batch * seq} tokens per step is more than {MAX_TOKENS}",
            hint="give the batch and sequence length of one GPU's step",
        )


def inspect_loaded(
    loaded, *, batch: int = DEFAULT_BATCH, seq: int = DEFAULT_SEQ, debug: bool = False
) -> ModelLayers:
    """Inspect a model already built by `fp8advisor.inspect.target.load_model` (on the meta device for
    speed)."""
    from torch import nn

    from fp8advisor.errors import TargetError

    check_tokens(batch, seq)
    model = loaded.model
    spec = loaded.spec
    target_text = spec.text
    if isinstance(model, nn.Linear):
        raise TargetError(
            "the model is a single nn.Linear: a layer with no name (FQN ''), which no filter_fqns "
            "entry can name",
            location=str(loaded.source_file) if loaded.source_file else None,
            hint="build the model the way training holds it (e.g. nn.Sequential(linear)) and point at that",
        )
    notes: list[str] = [f"built by {loaded.built_by}", *loaded.notes]

    modules = list(model.named_modules())  # deduplicated: each module once, under its first name
    linears = [(fqn, m) for fqn, m in modules if isinstance(m, nn.Linear)]
    owners: dict[int, list[tuple[str, object, str]]] = {}  # id(param) -> [(module fqn, module, param name)]
    parameters_by_storage: dict[int | None, nn.Parameter] = {}
    for fqn, module in modules:
        for name, parameter in module.named_parameters(recurse=False, remove_duplicate=False):
            owners.setdefault(id(parameter), []).append((fqn, module, name))
            parameters_by_storage.setdefault(compat.storage_key(parameter), parameter)
    parameters_by_storage.pop(None, None)

    not_gemms = (
        nn.Embedding,
        nn.Conv1d,
        nn.Conv2d,
        nn.Conv3d,
        nn.ConvTranspose1d,
        nn.ConvTranspose2d,
        nn.ConvTranspose3d,
    )
    if not linears and not any(
        p.dim() >= 2 for _, m in modules if not isinstance(m, not_gemms) for p in m.parameters(recurse=False)
    ):
        raise TargetError(
            f"{target_text} has no nn.Linear (and no other parameter a GEMM could multiply)",
            location=str(loaded.source_file) if loaded.source_file else None,
            hint="fp8advisor advises on nn.Linear layers; point it at a model that has some",
        )

    inputs = loaded.example_inputs(batch, seq)
    notes.append(f"inputs: {inputs.how}")

    traced = _run_forward(loaded, inputs, parameters_by_storage, [m for _, m in linears], debug, batch * seq)
    if traced[3] is not None and "attention_mask" in inputs.kwargs:
        # transformers asks data-dependent questions of an explicit mask in some models (bidirectional
        # encoders) and of the positions without one in others (causal decoders): try the other way too.
        without_mask = {k: v for k, v in inputs.kwargs.items() if k != "attention_mask"}
        retry = _run_forward(
            loaded,
            replace(inputs, kwargs=without_mask),
            parameters_by_storage,
            [m for _, m in linears],
            debug,
            batch * seq,
        )
        if retry[3] is None or len(retry[0]) > len(traced[0]):
            traced = retry
    calls, module_calls, module_rows, stopped, census = traced
    if census.matmuls and spec.kind == "hf_config":
        eager = (
            "the Hugging Face model was built with eager attention (see fp8advisor.inspect.target): its "
            "attention is counted as matmuls and memory regions, where training with sdpa runs one fused "
            "kernel"
        )
        census = replace(census, notes=(*census.notes, eager))
    layers, trace = _build_layers(
        model, modules, owners, calls, module_calls, module_rows, stopped, batch * seq
    )
    expert_groups, layers = find_expert_groups(model, modules, layers, trace)
    if stopped is not None:
        what, where = stopped
        assumed = sum(1 for layer in layers if "M assumed:" in (layer.reason or ""))
        per_expert = sum(1 for layer in layers if _BALANCED_REASON in (layer.reason or ""))
        experts = f"; {per_expert} routed expert Linear(s) M per expert under balanced routing" * bool(
            per_expert
        )
        notes.append(
            f"tracing stopped at {where or 'an unknown place'} ({what}); "
            f"{assumed} layer(s) that had not run yet assumed M = batch x seq = {batch * seq}{experts}"
        )
        untraced = untraced_expert_weights(modules, layers)
        if untraced:
            shown = ", ".join(untraced[:4]) + (f", ... ({len(untraced)} in all)" if len(untraced) > 4 else "")
            notes.append(
                f"WARNING: {shown}: >= 3-D parameters that had not run when tracing stopped look like routed "
                "experts that were not traced (no E, M or GEMM seen): left out of the expert groups and of "
                "the advice, they stay bf16 in every file it writes"
            )
    if not layers:
        raise TargetError(
            f"{target_text} has no nn.Linear and its forward multiplies no parameter",
            hint="fp8advisor advises on nn.Linear layers; point it at a model that has some",
        )
    return ModelLayers(
        target=target_text,
        batch=batch,
        seq=seq,
        layers=tuple(layers),
        notes=tuple(notes),
        census=census,
        parameter_count=sum(parameter.numel() for parameter in model.parameters()),
        max_positions=max_positions(model),
        expert_groups=tuple(expert_groups),
    )


#: Where models say how long a sequence they take: a Hugging Face config, or the args object of a Python
#: model (torchtitan's `model_args.max_seq_len`, Meta's `params.max_seq_len`, ...).
_POSITION_HOLDERS = ("config", "args", "model_args", "params")
_POSITION_NAMES = ("max_position_embeddings", "max_seq_len", "max_seq_length")


def max_positions(model) -> tuple[int, str] | None:
    """(the longest sequence `model` says it takes, the attribute saying so), or None when it does not say."""
    for holder in _POSITION_HOLDERS:
        args = getattr(model, holder, None)
        for name in _POSITION_NAMES:
            value = getattr(args, name, None) if args is not None else None
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value, f"{holder}.{name}"
    return None


def _build_layers(
    model, modules, owners, calls, module_calls, module_rows, stopped, assumed_M
) -> tuple[list[GemmLayer], _Trace]:
    """Every GEMM-bearing layer in module order, and the trace they were read from."""
    from torch import nn

    torchao_names = _torchao_names(model)
    all_names = _all_names(model)
    per_linear: dict[int, list[int]] = {}  # id(module) -> M of each GEMM run inside its forward on its weight
    outside_linear: dict[
        int, list[int]
    ] = {}  # id(module) -> M of GEMMs on its weight while it was not running
    per_parameter: dict[tuple[int, str], list[_GemmCall]] = {}  # bare parameters: (id(module), name) -> calls
    for call in calls:
        entries = owners.get(id(call.parameter), [])
        linear_owners = [e for e in entries if isinstance(e[1], nn.Linear) and e[2] == "weight"]
        running = [e for e in linear_owners if e[1] is call.inside]
        if running:
            per_linear.setdefault(id(running[0][1]), []).append(call.M)
        elif linear_owners:
            outside_linear.setdefault(id(linear_owners[0][1]), []).append(call.M)
        elif entries:
            fqn, module, name = entries[0]
            per_parameter.setdefault((id(module), name), []).append(call)

    trace = _Trace(
        owners=owners,
        per_linear=per_linear,
        outside_linear=outside_linear,
        module_calls=module_calls,
        module_rows=module_rows,
        torchao_names=torchao_names,
        all_names=all_names,
        stopped=stopped,
        assumed_M=assumed_M,
    )
    layers: list[GemmLayer] = []
    for fqn, module in modules:
        if isinstance(module, nn.Linear):
            layers.append(_linear_layer(fqn, module, trace))
        for name, _ in module.named_parameters(recurse=False, remove_duplicate=False):
            found = per_parameter.get((id(module), name))
            if found:
                layers.append(_parameter_layer(fqn, module, name, found, owners))
    return layers, trace


def _tied_to(parameter, module, owners) -> str | None:
    others = [fqn for fqn, owner, _ in owners.get(id(parameter), []) if owner is not module]
    return others[0] if others else None


def _divisibility_reason(K: int, N: int, Ms) -> str | None:
    for label, value in (("K", K), ("N", N)):
        if value % _M_DIVISOR:
            return f"{label} = {value} is not a multiple of 16 (torch._scaled_mm)"
    bad = sorted({m for m in Ms if m % _M_DIVISOR})
    if bad:
        return f"M = {bad[0]} is not a multiple of 16 (grad_weight GEMM; pad_inner_dim=True pads it)"
    return None


@dataclass
class _Trace:
    """What one traced forward saw, keyed by id(module) / id(parameter)."""

    owners: dict  # id(parameter) -> [(module fqn, module, parameter name)]
    per_linear: dict  # id(Linear) -> M of each GEMM on its weight while it ran
    outside_linear: dict  # id(Linear) -> M of each GEMM on its weight while it did not run
    module_calls: dict  # id(Linear) -> number of forward calls
    module_rows: dict  # id(Linear) -> input rows of each call
    torchao_names: dict  # id(module) -> FQNs torchao's conversion visits
    all_names: dict  # id(module) -> every FQN it is registered under
    stopped: tuple | None  # (what, where) when tracing stopped part-way
    assumed_M: int  # batch x seq


def _stopped_before(trace: _Trace) -> str:
    return f"tracing stopped at {trace.stopped[1] or 'an unknown place'} before it ran"


def _linear_layer(fqn: str, module, trace: _Trace, assumed: tuple[int, str] | None = None) -> GemmLayer:
    """The GemmLayer of one nn.Linear. `assumed`: (M, reason) for a layer tracing stopped before, in place of
    batch x seq (routed experts: M per expert under balanced routing)."""
    from torch import nn

    K, N = module.in_features, module.out_features
    cls = type(module).__name__
    names = trace.all_names.get(id(module), [fqn])
    aliases = tuple(n for n in names if n != fqn)
    tied_to = _tied_to(module.weight, module, trace.owners)
    Ms = tuple(trace.per_linear.get(id(module), ()))
    called = trace.module_calls.get(id(module), 0)
    if called and not Ms:
        # Called, but no mm/addmm on its weight (a 1-D input, or a subclass that skips it): its input rows.
        Ms = tuple(trace.module_rows.get(id(module), ()))
    status, reason = LayerStatus.TRACED, None
    if not called:
        if trace.stopped is not None:
            M, reason = assumed or (trace.assumed_M, f"M assumed: {_stopped_before(trace)}")
            status, Ms = LayerStatus.ASSUMED, (M,)
        else:
            status = LayerStatus.NOT_CALLED
            outside = trace.outside_linear.get(id(module))
            used = f"; its weight is used directly (M {max(outside)})" if outside else ""
            reason = f"the forward never calls it{used}: converting it changes nothing"
    structural = None
    if type(module).forward is not nn.Linear.forward:
        structural = f"{cls} overrides nn.Linear.forward: conversion would silently drop that forward"
    else:
        swapped = trace.torchao_names.get(id(module), [])
        skipped = [n for n in names if n not in swapped]
        if skipped:
            kept = swapped[0] if swapped else fqn
            structural = (
                f"one module under two names ({', '.join(names)}): torchao swaps only {kept}; "
                f"calls through {', '.join(skipped)} stay bf16"
            )
    if status is not LayerStatus.NOT_CALLED:
        problem = structural or _divisibility_reason(K, N, Ms)
        if problem is not None:
            if status is LayerStatus.ASSUMED:
                problem = f"{problem}; {reason}"
            status, reason = LayerStatus.NOT_CONVERTIBLE, problem
    return GemmLayer(
        fqn=fqn,
        cls=cls,
        K=K,
        N=N,
        M_per_call=Ms,
        status=status,
        reason=reason,
        is_linear=True,
        tied_to=tied_to,
        aliases=aliases,
    )


def _parameter_layer(module_fqn: str, module, name: str, found: list, owners: dict) -> GemmLayer:
    parameter = getattr(module, name)
    fqn = f"{module_fqn}.{name}" if module_fqn else name
    owner_cls = type(module).__name__
    first = found[0]
    if parameter.dim() >= 3:
        cls = owner_cls
        reason = (
            f"{parameter.dim()}-D expert weights in torch.{first.op}: routed experts, converted as a group "
            "(torchtitan's Float8GroupedExpertsConverter, torchao's moe_training), not by Float8Linear "
            "conversion; M: rows over all experts (see the routed experts section)"
        )
    else:
        cls = "Parameter"
        reason = f"bare parameter of {owner_cls} in aten.{first.op}, not nn.Linear: never converted"
    others = [
        f"{f}.{n}" if f else n for f, m, n in owners.get(id(parameter), []) if not (m is module and n == name)
    ]
    return GemmLayer(
        fqn=fqn,
        cls=cls,
        K=first.K,
        N=first.N,
        M_per_call=tuple(c.M for c in found),
        status=LayerStatus.NOT_CONVERTIBLE,
        reason=reason,
        is_linear=False,
        tied_to=others[0] if others else None,
    )


# ----------------------------------------------------------------------------------------------------
# Routed experts

#: Attribute names under which MoE code keeps the experts each token goes to, on the MoE module, its router
#: or the model's config: torchtitan (`router.top_k`), transformers (`num_experts_per_tok`, the router's
#: `top_k`), DeepSeek's reference code (`n_activated_experts`, `topk`), Megatron (`moe_router_topk`), others.
TOP_K_NAMES = (
    "top_k",
    "num_experts_per_tok",
    "topk",
    "n_activated_experts",
    "experts_per_token",
    "moe_top_k",
    "moe_router_topk",
    "router_top_k",
    "num_selected_experts",
)

#: An expert of a ModuleList holds a small MLP: at most this many Linear layers (a transformer block has
#: more), so a list of identical blocks is not taken for experts.
_MAX_EXPERT_LINEARS = 4

#: How far above the experts the router is looked for: torchtitan's `moe.router.gate` is two levels above
#: `moe.routed_experts.inner_experts`.
_ROUTER_LEVELS = 3

#: The start of a routed expert Linear's reason when its M is the balanced per-expert count.
_BALANCED_REASON = "M assumed per expert under balanced routing"


@dataclass
class _ExpertCandidate:
    """A module holding routed experts, before its router, top_k and M are known."""

    fqn: str
    module: Any
    form: ExpertForm
    n_experts: int
    gemms: tuple[ExpertGemm, ...]

    @property
    def members(self) -> set[str]:
        return {fqn for gemm in self.gemms for fqn in gemm.fqns}


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix and name else prefix or name


def _parent(fqn: str) -> str:
    return fqn.rpartition(".")[0]


def _is_under(fqn: str, ancestor: str) -> bool:
    return not ancestor or fqn == ancestor or fqn.startswith(ancestor + ".")


def untraced_expert_weights(modules, layers: Sequence[GemmLayer]) -> list[str]:
    """FQNs of the >= 3-D parameters no traced GEMM multiplied (each parameter once, by its first name):
    routed experts' weights when tracing stopped before their grouped GEMMs ran (e.g. at a torch.nonzero in
    the router), which `_grouped_candidates` cannot see."""
    seen = {layer.fqn for layer in layers} | {alias for layer in layers for alias in layer.aliases}
    found, ids = [], set()
    for fqn, module in modules:
        for name, parameter in module.named_parameters(recurse=False):
            if parameter.dim() >= 3 and id(parameter) not in ids:
                ids.add(id(parameter))
                if _join(fqn, name) not in seen:
                    found.append(_join(fqn, name))
    return found


def _grouped_candidates(modules, layer_by_fqn: dict[str, GemmLayer]) -> list[_ExpertCandidate]:
    """Modules owning 3-D weights that a grouped GEMM (torch._grouped_mm, _scaled_grouped_mm, bmm) multiplied:
    E = the weights' first dimension; K, N per expert as the GEMM saw them."""
    found = []
    for fqn, module in modules:
        if not fqn:
            continue  # weights of the model itself: no module of experts to name (or for a converter to swap)
        weights = [
            (name, parameter)
            for name, parameter in module.named_parameters(recurse=False)
            if parameter.dim() >= 3 and _join(fqn, name) in layer_by_fqn
        ]
        if not weights:
            continue
        n_experts = int(weights[0][1].shape[0])
        gemms = tuple(
            ExpertGemm(name, layer.K, layer.N, (layer.fqn,))
            for name, parameter in weights
            if parameter.shape[0] == n_experts
            for layer in (layer_by_fqn[_join(fqn, name)],)
        )
        found.append(_ExpertCandidate(fqn, module, ExpertForm.GROUPED, n_experts, gemms))
    return found


def _expert_signature(expert) -> tuple:
    """What makes two experts the same: their class and the (name, in, out) of each Linear inside."""
    from torch import nn

    linears = tuple(
        (name, m.in_features, m.out_features)
        for name, m in expert.named_modules()
        if isinstance(m, nn.Linear)
    )
    return type(expert), linears


def _linear_list_candidates(modules, layer_by_fqn: dict[str, GemmLayer]) -> list[_ExpertCandidate]:
    """ModuleLists / ModuleDicts of >= 2 structurally identical modules of at most `_MAX_EXPERT_LINEARS`
    Linears each (an MLP each): routed experts if `_looks_routed` agrees."""
    from torch import nn

    found = []
    for fqn, module in modules:
        if not isinstance(module, (nn.ModuleList, nn.ModuleDict)) or "shared" in fqn.lower():
            continue
        children = list(module.named_children())
        if len(children) < 2:
            continue
        signatures = {_expert_signature(child) for _, child in children}
        if len(signatures) != 1:
            continue
        _, linears = signatures.pop()
        if not linears or len(linears) > _MAX_EXPERT_LINEARS:
            continue
        gemms = []
        for name, K, N in linears:
            fqns = tuple(_join(_join(fqn, child_name), name) for child_name, _ in children)
            if not all(member in layer_by_fqn for member in fqns):
                break  # an expert registered first under another name: not this list's to group
            gemms.append(ExpertGemm(name or "linear", K, N, fqns))
        else:
            found.append(_ExpertCandidate(fqn, module, ExpertForm.LINEAR_LIST, len(children), tuple(gemms)))
    return found


def _layers_under(layers: Sequence[GemmLayer]) -> dict[str, list[GemmLayer]]:
    """Each module FQN ("" the model) -> the layers inside it, in module order."""
    under: dict[str, list[GemmLayer]] = {}
    for layer in layers:
        fqn = layer.fqn
        while True:
            fqn = _parent(fqn)
            under.setdefault(fqn, []).append(layer)
            if not fqn:
                break
    return under


def _find_router(
    candidate: _ExpertCandidate, layers_under: dict, taken: set[str], groups: Sequence[str], levels: int
) -> tuple[GemmLayer | None, str]:
    """(the router's GEMM layer, the MoE module's FQN): the first layer with N = E and the experts' K in the
    experts' own module (3-D weights on the MoE module itself) or the nearest of `levels` ancestors, not past
    an ancestor holding another group of experts. Without one the MoE module is the experts' parent, or the
    experts' module itself when the parent holds other groups too."""
    Ks = {gemm.K for gemm in candidate.gemms}
    ancestor = candidate.fqn
    # The experts' own module first: 3-D expert weights may sit on the MoE module itself, router beside them.
    for step in range(levels + 1):
        if step:
            if not ancestor:
                break
            ancestor = _parent(ancestor)
        if any(other != candidate.fqn and _is_under(other, ancestor) for other in groups):
            break  # a whole block or the model: its other MoE layers' routers are not this one's
        for layer in layers_under.get(ancestor, ()):
            if layer.N == candidate.n_experts and layer.K in Ks and layer.fqn not in taken:
                return layer, ancestor
    parent = _parent(candidate.fqn)
    if any(other != candidate.fqn and _is_under(other, parent) for other in groups):
        return None, candidate.fqn  # the parent holds other MoE layers (a ModuleList of blocks): not this one
    return None, parent


def _looks_routed(candidate: _ExpertCandidate, router: GemmLayer | None) -> bool:
    """A ModuleList is routed experts when its name says experts (and not shared ones) or a router with
    N = its length sits beside it."""
    name = candidate.fqn.rpartition(".")[2].lower()
    return router is not None or ("expert" in name and "shared" not in candidate.fqn.lower())


def _valid_top_k(value, n_experts: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= n_experts


def _find_top_k(model, modules_by_fqn: dict, places: Sequence[str], n_experts: int) -> tuple[int | None, str]:
    """(top_k, where it was read): an attribute in `TOP_K_NAMES` on the modules at `places` (the MoE module,
    its router, the experts), else on the model's config; (None, why) when none shows it."""
    for place in dict.fromkeys(places):
        module = modules_by_fqn.get(place)
        for name in TOP_K_NAMES:
            value = getattr(module, name, None) if module is not None else None
            if _valid_top_k(value, n_experts):
                return value, _join(place, name) if place else name
    for holder in _POSITION_HOLDERS:
        config = getattr(model, holder, None)
        for name in TOP_K_NAMES:
            value = getattr(config, name, None) if config is not None else None
            if _valid_top_k(value, n_experts):
                return value, f"{holder}.{name}"
    return None, "unknown: no top_k (or num_experts_per_tok, ...) on the MoE module, its router or the config"


def _module_path(fqn: str, stop: str) -> list[str]:
    """`fqn` and its ancestors up to `stop` (included), innermost first."""
    path = [fqn]
    while fqn and fqn != stop and _is_under(fqn, stop):
        fqn = _parent(fqn)
        path.append(fqn)
    return path


def _balanced_M(tokens: int, top_k: int, n_experts: int) -> tuple[int, str]:
    """(M of each expert under balanced routing, how): tokens x top_k / E, rounded up to a whole row (the
    busiest expert of the most even split)."""
    rows = tokens * top_k
    M = -(-rows // n_experts)
    rounded = "" if rows % n_experts == 0 else f" = {rows / n_experts:.1f}, rounded up"
    return M, f"{tokens} x {top_k} / {n_experts}{rounded}"


def find_expert_groups(
    model, modules, layers: list[GemmLayer], trace: _Trace
) -> tuple[list[ExpertGroup], list[GemmLayer]]:
    """The routed experts of every MoE layer, and `layers` with each member marked (`GemmLayer.expert_group`).

    Two forms: GROUPED, 3-D weights a grouped GEMM multiplied (their module is one group, E = the weights'
    first dimension, M total = the rows the GEMM multiplied); LINEAR_LIST, a ModuleList of identical expert
    MLPs (each GEMM of the group is E Linears). A ModuleList's dispatch usually depends on the routing
    (torch.where / nonzero), which stops the meta trace: its Linears, assumed M = batch x seq by default,
    get M = tokens x top_k / E, the rows of each expert under balanced routing. Routers (the GEMM with N = E
    next to the experts) and shared experts (Linears named "shared" in the MoE module) are never members.
    """
    layer_by_fqn = {layer.fqn: layer for layer in layers}
    modules_by_fqn = dict(modules)
    order = {fqn: index for index, (fqn, _) in enumerate(modules)}
    layers_under = _layers_under(layers)
    grouped = _grouped_candidates(modules, layer_by_fqn)
    listed = [  # a list of MoE blocks that hold grouped experts is not itself a list of experts
        candidate
        for candidate in _linear_list_candidates(modules, layer_by_fqn)
        if not any(_is_under(other.fqn, candidate.fqn) for other in grouped)
    ]
    members = {fqn for candidate in grouped + listed for fqn in candidate.members}
    everything = [c.fqn for c in grouped + listed]

    found: list[tuple[_ExpertCandidate, GemmLayer | None, str]] = []
    for candidate in grouped:
        router, moe = _find_router(candidate, layers_under, members, everything, _ROUTER_LEVELS)
        found.append((candidate, router, moe))
    for candidate in listed:
        if candidate.members & {fqn for c, _, _ in found for fqn in c.members}:
            continue  # nested inside a group already found
        router, moe = _find_router(candidate, layers_under, members, everything, 1)
        if _looks_routed(candidate, router):
            found.append((candidate, router, moe))
    found.sort(key=lambda item: order[item[0].fqn])

    groups: list[ExpertGroup] = []
    replaced: dict[str, GemmLayer] = {}
    for candidate, router, moe in found:
        group, updated = _expert_group(
            model, candidate, router, moe, layer_by_fqn, layers_under.get(moe, ()), modules_by_fqn, trace
        )
        groups.append(group)
        for layer in updated:
            replaced[layer.fqn] = layer
        for fqn in candidate.members:
            replaced[fqn] = replace(replaced.get(fqn, layer_by_fqn[fqn]), expert_group=candidate.fqn)
    return groups, [replaced.get(layer.fqn, layer) for layer in layers]


def _expert_group(
    model,
    candidate: _ExpertCandidate,
    router,
    moe: str,
    layer_by_fqn,
    in_moe: Sequence[GemmLayer],
    modules_by_fqn,
    trace: _Trace,
) -> tuple[ExpertGroup, list[GemmLayer]]:
    """One group with its top_k, M and shared experts (`in_moe`: the layers inside the MoE module); the
    member layers whose M had to be re-assumed."""
    E = candidate.n_experts
    tokens = trace.assumed_M
    router_module = None
    if router is not None:
        router_module = router.fqn if router.is_linear else _parent(router.fqn)
    places = [moe]
    if router_module is not None:
        places += _module_path(router_module, moe)
    places += _module_path(candidate.fqn, moe)
    top_k, top_k_source = _find_top_k(model, modules_by_fqn, places, E)
    shared = tuple(
        layer.fqn
        for layer in in_moe
        if layer.is_linear
        and "shared" in layer.fqn[len(moe) :].lower()
        and layer.fqn not in candidate.members
        and (router is None or layer.fqn != router.fqn)
    )
    notes: list[str] = []
    if router is None:
        notes.append(f"no router found: no GEMM with N = E = {E} beside the experts")
    updated: list[GemmLayer] = []
    others: tuple[str, ...] = ()
    if candidate.form is ExpertForm.GROUPED:
        M_total, more = _grouped_M_total(candidate, layer_by_fqn, tokens, top_k)
        notes += more
        others = _other_parameters(candidate)
        if others:
            notes.append(
                f"{candidate.fqn} also holds {', '.join(others[:3])}{', ...' if len(others) > 3 else ''}: "
                "torchao's quantize_ would swap those too, so a file naming expert modules keeps this group "
                "bf16"
            )
    else:
        M_total, updated, more = _linear_list_M(candidate, layer_by_fqn, modules_by_fqn, trace, top_k)
        notes += more
    group = ExpertGroup(
        fqn=candidate.fqn,
        cls=type(candidate.module).__name__,
        form=candidate.form,
        n_experts=E,
        top_k=top_k,
        top_k_source=top_k_source,
        tokens=tokens,
        M_total=M_total,
        gemms=candidate.gemms,
        router=None if router is None else router.fqn,
        shared=shared,
        notes=tuple(notes),
        other_parameters=others,
    )
    return group, updated


def _other_parameters(candidate: _ExpertCandidate) -> tuple[str, ...]:
    """The parameters under a grouped candidate's module (recursively) that are not its 3-D expert weights."""
    members = candidate.members
    return tuple(
        fqn
        for name, _ in candidate.module.named_parameters()
        for fqn in (_join(candidate.fqn, name),)
        if fqn not in members
    )


def _grouped_M_total(candidate: _ExpertCandidate, layer_by_fqn, tokens: int, top_k) -> tuple[int, list[str]]:
    """Rows through each grouped GEMM (the traced A's rows; bmm (E, m, K): E x m), and what to say of them."""
    first = layer_by_fqn[candidate.gemms[0].fqns[0]]
    M_total = sum(first.M_per_call)
    notes = []
    if first.calls > 1:
        notes.append(f"each grouped GEMM ran {first.calls} times in the forward: M total counts every call")
    if top_k is None:
        notes.append(f"top_k unknown: M per expert = the traced rows / E = {M_total} / {candidate.n_experts}")
    elif M_total != tokens * top_k:
        notes.append(
            f"the grouped GEMMs multiplied {M_total} rows, not tokens x top_k = {tokens * top_k} "
            "(the model's dispatch pads, caps or drops rows)"
        )
    return M_total, notes


def _linear_list_M(
    candidate: _ExpertCandidate, layer_by_fqn, modules_by_fqn, trace: _Trace, top_k
) -> tuple[int | None, list[GemmLayer], list[str]]:
    """M total of a ModuleList of experts, and its Linears re-assumed at the balanced M per expert.

    Traced (a static dispatch ran every expert): each Linear's traced M is already its expert's rows. Tracing
    stopped before them: M = tokens x top_k / E each (unknown top_k: they stay at batch x seq, M unknown).
    """
    E = candidate.n_experts
    tokens = trace.assumed_M
    first = candidate.gemms[0].fqns
    assumed = [
        fqn
        for fqn in candidate.members
        if layer_by_fqn[fqn].status is LayerStatus.ASSUMED
        or (trace.stopped is not None and not trace.module_calls.get(id(modules_by_fqn[fqn]), 0))
    ]
    if not assumed:
        M_total = sum(sum(layer_by_fqn[fqn].M_per_call) for fqn in first)
        return M_total, [], ["dispatch traced: each expert's M is the rows it multiplied"]
    if top_k is None:
        why = (
            f"M assumed: {_stopped_before(trace)}; a routed expert whose top_k the model does not show: "
            "M per expert unknown, batch x seq overestimates it"
        )
        updated = [_linear_layer(fqn, modules_by_fqn[fqn], trace, (tokens, why)) for fqn in sorted(assumed)]
        note = (
            "top_k unknown and the dispatch did not trace: M per expert unknown (members assumed batch x seq)"
        )
        return None, updated, [note]
    M, how = _balanced_M(tokens, top_k, E)
    why = (
        f"{_BALANCED_REASON} (tokens x top_k / E = {how}): {_stopped_before(trace)}; real counts "
        "vary per step, and float8's grad_weight GEMM needs each to be a multiple of 16 (pad_inner_dim=True "
        "pads it)"
    )
    updated = [_linear_layer(fqn, modules_by_fqn[fqn], trace, (M, why)) for fqn in sorted(assumed)]
    return tokens * top_k, updated, [f"dispatch did not trace: M per expert = tokens x top_k / E = {how}"]


def block_shape(fqn: str) -> str:
    """`layers.12.attention.wq` -> `layers.#.attention.wq`: the name with its block indices taken out."""
    return ".".join("#" if part.isdigit() else part for part in fqn.split("."))


def _ranges(numbers: Sequence[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0..2,5,7..8'."""
    runs: list[list[int]] = []
    for number in sorted(set(numbers)):
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    return ",".join(str(run[0]) if len(run) == 1 else f"{run[0]}..{run[-1]}" for run in runs)


@dataclass(frozen=True)
class Folded:
    """Items that differ only in their block indices and read the same: one table row.

    `pattern` writes the indices as ranges: `layers.{0..79}.attention.wq`.
    """

    pattern: str
    members: tuple[Any, ...]

    @property
    def first(self) -> Any:
        return self.members[0]

    @property
    def count(self) -> int:
        return len(self.members)

    @property
    def fqns(self) -> tuple[str, ...]:
        return tuple(member.fqn for member in self.members)


def fold_repeated(items: Iterable[Any], key: Callable[[Any], Hashable] = lambda item: ()) -> list[Folded]:
    """Fold items (anything with an `fqn`) whose names differ only in their block indices and whose `key` is
    equal into one row each, in order of first appearance; how 80 identical blocks read at a glance."""
    groups: dict[tuple, list[Any]] = {}
    for item in items:
        groups.setdefault((block_shape(item.fqn), key(item)), []).append(item)
    rows = []
    for (shape, _), members in groups.items():
        if len(members) == 1:
            rows.append(Folded(members[0].fqn, tuple(members)))
            continue
        indices = [[int(part) for part in member.fqn.split(".") if part.isdigit()] for member in members]
        words, position = [], 0
        for part in shape.split("."):
            if part != "#":
                words.append(part)
                continue
            values = [numbers[position] for numbers in indices]
            position += 1
            words.append(str(values[0]) if len(set(values)) == 1 else "{" + _ranges(values) + "}")
        rows.append(Folded(".".join(words), tuple(members)))
    return rows


def inspect_model(
    target: str, *, batch: int = DEFAULT_BATCH, seq: int = DEFAULT_SEQ, debug: bool = False
) -> ModelLayers:
    """Build TARGET without allocating weights and list every GEMM-bearing layer with the M it sees.

    The model is built on the meta device (explicit devices redirected) and run once on meta tensors of
    (batch, seq); an aten-level recorder ties each GEMM to the parameter it multiplies.
    """
    from fp8advisor.inspect.target import load_model

    loaded = load_model(target, "meta")
    return inspect_loaded(loaded, batch=batch, seq=seq, debug=debug)
