"""The GEMM recorder: an aten dispatch mode that ties each GEMM of the traced forward to the parameter it
multiplies, with the (M, K, N) it multiplies.

The GEMM ops (`gemm_ops`: mm, addmm, bmm, baddbmm, _addmm_activation, _scaled_mm, _grouped_mm,
_scaled_grouped_mm) are told apart from the rest at the aten level, below every module and function, so a
hand-written `x @ self.weight` counts as surely as an nn.Linear. An operand is a parameter when it lives in
a parameter's storage, or in that of a copy of one (a weight cast to bf16 is still it). Meta kernels are
answered from a memo where that is exact; torch._grouped_mm's bf16-only meta kernel runs in bf16 on other
dtypes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fp8advisor import compat

if TYPE_CHECKING:
    from fp8advisor.inspect.census import CensusTracer


class TracingStopped(Exception):
    """The forward hit an op whose result depends on tensor values (`.item()`, `nonzero`): meta has none."""

    def __init__(self, op: str, cause: BaseException | None = None):
        super().__init__(op)
        self.op = op
        self.cause = cause


@dataclass
class GemmCall:
    """One aten GEMM that multiplies a parameter."""

    parameter: object  # the nn.Parameter
    op: str
    M: int
    K: int
    N: int
    inside: object | None  # the nn.Linear owning `parameter` that was running when the GEMM ran, if any


def gemm_ops() -> dict:
    """aten GEMM op -> (index of A, index of B) among its arguments; the ops this torch has."""
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


def _value_ops() -> set:
    """Copies: ops after which the output's storage holds the input's parameter too."""
    import torch

    aten = torch.ops.aten
    # Ops whose output holds the same values as the input in a new storage: a weight cast to bf16 is still it.
    private = [compat.aten_op(name) for name in ("_to_copy", "_unsafe_view")]
    return {aten.clone.default, aten.contiguous.default} | {op.default for op in private if op is not None}


def make_recorder(
    parameters_by_storage: dict,
    active_linears: list,
    calls: list,
    *,
    memo: bool = True,
    census: CensusTracer | None = None,
):
    """A TorchDispatchMode that records every GEMM on a parameter (or a view or copy of one).

    `memo` answers repeated meta-kernel calls from a cache (see `_MetaKernels`); off only to test it.
    `census`, when given, observes every op after it ran (`fp8advisor.inspect.census`).
    """
    import torch

    gemm_table = gemm_ops()
    value_ops = _value_ops()
    kernels = _MetaKernels(memo)
    keep_alive: list = []  # copies of parameters: their storages must not be freed and reused while we trace

    class GemmRecorder(compat.eager_dispatch_mode()):  # never runs under torch.compile
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            operands = gemm_table.get(func)
            on_parameter = operands is not None and self._record(func, args, operands)
            out = kernels.run(func, args, kwargs)
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
            calls.append(GemmCall(parameter, op, int(M), int(K), int(N), inside))
            return True

    return GemmRecorder()


class _MetaKernels:
    """Runs the aten ops of the traced forward, answering repeated meta-kernel calls from a memo.

    Meta kernels of most ops are Python refs (~300 us each); a model repeats the same op on the same shapes
    once per block. The output's metadata is a function of the inputs' metadata, so a cached answer is exact.
    """

    def __init__(self, memo: bool):
        import torch

        self.memo = memo
        self.meta = torch.device("meta")
        self.bf16_only = _bf16_only_ops()
        self.data_dependent_tags = {torch.Tag.data_dependent_output, torch.Tag.dynamic_output_shape}
        # op -> whether its output is a fresh tensor whose metadata depends on its inputs
        self.cacheable: dict = {}
        self.outputs_by_inputs: dict = {}  # (op, input metadata) -> output metadata

    def run(self, func, args, kwargs):
        """`func(*args, **kwargs)`, from the memo when it holds the answer."""
        key = _metadata_key(func, args, kwargs, self.meta) if self.memo and self.is_cacheable(func) else None
        cached = self.outputs_by_inputs.get(key) if key is not None else None
        if cached is not None:
            return _materialize(cached, self.meta)
        out = self._call(func, args, kwargs)
        if key is not None:
            self._remember(func, key, out, (*args, *kwargs.values()))
        return out

    def is_cacheable(self, func) -> bool:
        """Whether the output of `func` is a fresh tensor whose metadata is a function of its inputs'."""
        found = self.cacheable.get(func)
        if found is None:
            schema = compat.op_schema(func)
            found = not (
                func.is_view
                or schema.is_mutable
                or any(r.alias_info is not None for r in schema.returns)
                or self.data_dependent_tags.intersection(func.tags)
            )
            self.cacheable[func] = found
        return found

    def _call(self, func, args, kwargs):
        """Run the kernel; `TracingStopped` when a data-dependent op fails (meta tensors hold no values)."""
        try:
            if func in self.bf16_only and _off_bf16_on_meta(args, self.meta):
                return _run_in_bf16(func, args, kwargs)
            return func(*args, **kwargs)
        except Exception as error:
            if self.data_dependent_tags.intersection(func.tags):
                raise TracingStopped(str(func.overloadpacket.__name__), error) from error
            raise

    def _remember(self, func, key: tuple, out, inputs: tuple) -> None:
        if _shares_a_storage(out, inputs):
            # An alias its schema does not declare (_unsafe_view): a fresh tensor from the cache would cut it
            # off from its input's storage, which the op census follows.
            self.cacheable[func] = False
        else:
            described = _describe_output(out)
            if described is not None:
                self.outputs_by_inputs[key] = described


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
