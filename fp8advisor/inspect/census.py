"""An op census of the traced forward: what the GPU does besides the Linear layers, for a step-time model.

`fp8advisor.inspect.forward` runs one forward of the model on the meta device under a dispatch mode
(`fp8advisor.inspect.recorder`) that records every GEMM on a parameter. The same trace feeds a `CensusTracer`,
which sorts every other op into fused attention calls, matmuls of activations and fused regions of
memory-bound ops: the `OpCensus`. No second forward.

The census models a bf16 training forward compiled by an idealised torch.compile (inductor). Its assumptions:

- Pricing: a floating-point tensor costs 2 bytes per element (bf16 training, whatever dtype the meta model was
  built in: models are usually built in float32 on meta); any other dtype its own element size. A storage
  costs its full size priced so, not the size of the view an op happens to touch.
- Extern kernels, the boundaries of fusion: the parameter GEMMs `layers` records; GEMMs of activations by
  activations (mm, bmm, addmm, baddbmm: a `MatmulCall`; other GEMM ops and convolutions are boundaries too,
  with no record); fused attention, `F.scaled_dot_product_attention`, caught at the function level by a
  `TorchFunctionMode`. On meta, attention decomposes into the math path (bmm, a softmax over the whole score
  matrix, ...); a GPU runs one flash kernel, so none of those inner ops counts. The attention's output is
  written by it, in the layout GPU kernels give it ((batch, seq, heads, dim) in memory, as the flash kernel's
  `empty_like(query)` when query is so laid out): transposing it back to (batch, seq, heads x dim) is a view,
  as on the GPU, not a copy. Its q, k, v (and mask) are read by it.
- Memory op: any other op that mutates an input (`add_`) or creates an output storage none of its inputs has.
  Views and aliases (view, transpose, expand, _unsafe_view, detach, ...) share their input's storage and are
  no ops. Allocations (`empty`, `empty_strided`, ...) write nothing and are no ops either. A cast from one
  floating dtype to another that keeps every element where it was (`w.to(torch.bfloat16)` of a model built in
  float32) is the identity in a bf16 step: an alias too, not an op.
- Fusion: the op stream is cut at every extern kernel; the memory ops between two consecutive extern kernels
  form ONE region, one fused kernel. A region reads each distinct storage produced outside it (by an extern
  kernel, another region, or before the trace: parameters, buffers, model inputs) once, and writes each
  distinct storage it produces that is read later outside it (by an extern kernel or a later region), that is
  part of the forward's output, or that existed before the trace (an in-place update of a buffer). Storages
  produced and consumed inside the region cost nothing. Inductor's scheduler may do better: it can move a
  pointwise op past an extern kernel that does not depend on it (`silu(w1(x)) * w3(x)` makes two regions here,
  one fused kernel there), so the census errs towards more bytes.
- Embedding (`aten.embedding`, and `index_select` of a parameter) reads only the gathered rows: as many bytes
  as its output, counted as activation bytes; the table is not read whole and is not in `parameter_bytes`.
- Bytes of parameters (and of copies of them, such as a weight cast to another dtype) go to
  `parameter_bytes`: they do not scale with the tokens of a step. Everything else goes to `activation_bytes`.
- Identical calls and regions are folded into one, with `count`, in order of first appearance.
- When tracing stops part-way (a data-dependent op), the census keeps what it saw: `complete` is False.
- The census is of the forward alone: a tensor saved for the backward is not a write of the forward here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields, replace
from typing import Any

from fp8advisor import compat
from fp8advisor.errors import CompatError

#: Bytes per element of a floating-point tensor: the census prices a bf16 training step.
FLOAT_BYTES = 2


@dataclass(frozen=True)
class AttentionCall:
    """One fused attention call (`F.scaled_dot_product_attention`); identical calls folded into `count`."""

    batch: int  # product of the leading dims of q (everything before heads)
    heads: int  # query heads (GQA: k and v may have fewer; the FLOPs are the query heads')
    q_len: int
    kv_len: int
    head_dim: int  # last dim of q and k
    v_head_dim: int  # last dim of v
    causal: bool  # is_causal=True and no attn_mask
    count: int = 1

    @property
    def scores(self) -> int:
        """Entries of the score matrix computed: all of them, or for causal attention those torch keeps with
        its top-left alignment (`tril(ones(q_len, kv_len))`), sum over i < q_len of min(i + 1, kv_len)."""
        if not self.causal:
            return self.q_len * self.kv_len
        square = min(self.q_len, self.kv_len)  # rows i < kv_len keep i + 1 entries, later rows all kv_len
        return square * (square + 1) // 2 + (self.q_len - square) * self.kv_len

    @property
    def forward_flops(self) -> float:
        """FLOPs of ONE call: q @ k^T and p @ v over the computed scores."""
        return 2.0 * self.batch * self.heads * self.scores * (self.head_dim + self.v_head_dim)


@dataclass(frozen=True)
class MatmulCall:
    """A GEMM of activations by activations (no parameter) outside fused attention, e.g. hand-written
    attention's q @ k^T and p @ v; identical calls folded into `count`."""

    batch: int
    M: int
    K: int
    N: int
    count: int = 1

    @property
    def forward_flops(self) -> float:
        """FLOPs of ONE call."""
        return 2.0 * self.batch * self.M * self.K * self.N


@dataclass(frozen=True)
class MemoryRegion:
    """One fused region of memory-bound ops (see the module docstring); identical regions folded."""

    activation_bytes: int  # bytes of non-parameter tensors the region reads from and writes to memory
    parameter_bytes: int  # bytes of parameters the region reads (e.g. a norm's weight)
    ops: int  # aten ops in the region
    count: int = 1

    @property
    def bytes(self) -> int:
        """Bytes moved by ONE run of the region."""
        return self.activation_bytes + self.parameter_bytes


@dataclass(frozen=True)
class OpCensus:
    """What one traced forward does besides its parameter GEMMs, at `tokens` = batch x seq."""

    tokens: int
    attention: tuple[AttentionCall, ...]
    matmuls: tuple[MatmulCall, ...]
    regions: tuple[MemoryRegion, ...]
    output_shape: tuple[int, ...] | None  # of the forward's output (the first tensor found in it)
    complete: bool  # False when tracing stopped part-way (a data-dependent op)
    notes: tuple[str, ...] = ()

    @property
    def forward_memory_bytes(self) -> int:
        """Bytes all memory regions of the forward move."""
        return sum(region.bytes * region.count for region in self.regions)

    @property
    def region_count(self) -> int:
        """Fused memory-bound kernels the forward runs."""
        return sum(region.count for region in self.regions)

    def to_json(self) -> dict:
        return {
            "tokens": self.tokens,
            "attention": [
                {**_fields_of(call), "scores": call.scores, "forward_flops": call.forward_flops}
                for call in self.attention
            ],
            "matmuls": [{**_fields_of(call), "forward_flops": call.forward_flops} for call in self.matmuls],
            "regions": [_fields_of(region) for region in self.regions],
            "output_shape": list(self.output_shape) if self.output_shape is not None else None,
            "complete": self.complete,
            "notes": list(self.notes),
            "forward_memory_bytes": self.forward_memory_bytes,
            "region_count": self.region_count,
        }

    @classmethod
    def from_json(cls, data: dict) -> OpCensus:
        """The census `to_json` wrote; derived figures (FLOPs, scores, totals) are recomputed, not read."""
        shape = data.get("output_shape")
        return cls(
            tokens=int(data["tokens"]),
            attention=tuple(_from_fields(AttentionCall, item) for item in data["attention"]),
            matmuls=tuple(_from_fields(MatmulCall, item) for item in data["matmuls"]),
            regions=tuple(_from_fields(MemoryRegion, item) for item in data["regions"]),
            output_shape=tuple(int(n) for n in shape) if shape is not None else None,
            complete=bool(data["complete"]),
            notes=tuple(data.get("notes", ())),
        )


def _fields_of(item) -> dict:
    return {f.name: getattr(item, f.name) for f in fields(item)}


def _from_fields(cls, data: dict):
    return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


def fold(items: Iterable[Any]) -> tuple:
    """Equal items (ignoring `count`) as one with the sum of their counts, in order of first appearance."""
    counts: dict[Any, int] = {}
    for item in items:
        single = _with_count(item, 1)
        counts[single] = counts.get(single, 0) + item.count
    return tuple(_with_count(item, count) for item, count in counts.items())


def _with_count(item, count: int):
    return item if item.count == count else replace(item, count=count)


# ----------------------------------------------------------------------------------------------------
# Tracing


class _Region:
    """The memory ops between two extern kernels, as they are seen."""

    __slots__ = ("ops", "reads", "gathered", "writes", "needed")

    def __init__(self) -> None:
        self.ops = 0
        self.reads: dict[int, int] = {}  # storage produced outside the region -> priced bytes
        self.gathered = 0  # bytes of embedding rows read
        self.writes: dict[int, int] = {}  # storage the region produced or mutated -> priced bytes
        self.needed: set[int] = set()  # of `writes`, those read after the region or kept: written to memory


# How the census treats an aten op, decided once per op overload.
_SKIP = "skip"  # a view or alias: no op
_ALLOCATION = "allocation"  # a fresh storage with nothing written to it
_GEMM = "gemm"  # an extern GEMM (the recorder's table)
_MATMUL = "matmul"  # an extern GEMM that, without a parameter, is a MatmulCall
_CONVOLUTION = "convolution"  # an extern kernel the census does not price
_CAST = "cast"  # _to_copy: a memory op, or an alias when it only changes a floating dtype (all is bf16)
_MEMORY = "memory"  # a memory op, if it mutates or creates a storage


@dataclass(frozen=True)
class _OpKind:
    kind: str
    written: tuple[tuple[int, str], ...] = ()  # (position, name) of the arguments it mutates
    unread: tuple[tuple[int, str], ...] = ()  # of those, the ones whose old values it never reads (copy_)
    gathers: str | None = None  # "embedding" or "index_select": reads rows of its first argument


def _classify(func, gemm_ops) -> _OpKind:
    import torch

    aten = torch.ops.aten
    schema = compat.op_schema(func)
    packet = func.overloadpacket
    if func in gemm_ops:
        matmuls = (aten.mm, aten.bmm, aten.addmm, aten.baddbmm)
        return _OpKind(_MATMUL if packet in matmuls else _GEMM)
    if packet in (aten.convolution, compat.aten_op("_convolution")):
        return _OpKind(_CONVOLUTION)
    if packet is compat.aten_op("_to_copy"):
        return _OpKind(_CAST)
    written = tuple(
        (position, argument.name)
        for position, argument in enumerate(schema.arguments)
        if argument.alias_info is not None and argument.alias_info.is_write
    )
    if not written and (func.is_view or all(r.alias_info is not None for r in schema.returns)):
        return _OpKind(_SKIP)  # views, and ops returning an input (detach, alias, lift_fresh)
    name = packet.__name__
    if not written and name in ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"):
        return _OpKind(_ALLOCATION)
    overwrites = name in ("copy_", "fill_", "zero_")  # the destination's old values are not read
    unread = tuple(
        (position, argument.name)
        for position, argument in enumerate(schema.arguments)
        if (position, argument.name) in written and (overwrites or getattr(argument, "is_out", False))
    )
    gathers = name if name in ("embedding", "index_select") else None
    return _OpKind(_MEMORY, written, unread, gathers)


def tensors_in(value, depth: int = 0) -> Iterator:
    """The tensors in `value`, in order: itself, or inside tuples, lists and dicts (a model's output)."""
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif depth < 8 and isinstance(value, (tuple, list)):
        for item in value:
            yield from tensors_in(item, depth + 1)
    elif depth < 8 and isinstance(value, dict):
        for item in value.values():
            yield from tensors_in(item, depth + 1)


def _tensor_type() -> type:
    import torch

    return torch.Tensor


def _priced_bytes(tensor) -> int:
    """The whole storage behind `tensor`, at 2 bytes per floating-point element (see the module docstring)."""
    nbytes = tensor.untyped_storage().nbytes()
    if tensor.is_floating_point():
        return nbytes // tensor.element_size() * FLOAT_BYTES
    return nbytes


class CensusTracer:
    """Builds the `OpCensus` of one forward from the ops the GEMM recorder sees.

    The recorder calls `observe` after each aten op; `attention_mode()` must be entered around the forward so
    that fused attention is seen whole. `finish` turns what was seen into the census.
    """

    def __init__(self, parameters_by_storage: dict, gemm_ops: dict):
        self._parameters = parameters_by_storage  # storage -> parameter, copies included (the recorder's)
        self._gemm_ops = gemm_ops
        self._tensor_type = _tensor_type()
        self._kinds: dict = {}
        self._producer: dict[int, _Region | None] = {}  # storage -> region that last wrote it (None: extern)
        self._sizes: dict[int, int] = {}  # storage -> priced bytes
        self._alive: list = []  # every storage in these dicts stays allocated, so no address is reused
        self._regions: list[_Region] = []
        self._region: _Region | None = None  # the region being built: no extern kernel since its first op
        self._attention: list[AttentionCall] = []
        self._matmuls: list[MatmulCall] = []
        self._same_as: dict[int, int] = {}  # storage of a floating-point cast -> storage of its source
        self._inside_attention = 0
        self._gave_up: str | None = None  # the op the census could not read, if any
        self._convolutions = 0
        self._hidden_attention = 0  # F.multi_head_attention_forward calls that attend through sdpa

    # --- what the recorder calls

    def observe(self, func, args, kwargs, out, on_parameter: bool) -> None:
        """One aten op with its inputs and output; `on_parameter`: the recorder saw a GEMM on a parameter.

        An op the census cannot read (a bug of ours on an op nobody foresaw) ends the census, not the trace:
        the layer table is what `layers` is for. The census then says where it gave up."""
        if self._inside_attention:
            return  # the math path of what the GPU runs as one kernel
        self._safely(func, self._observe, func, args, kwargs, out, on_parameter)

    def _safely(self, where, action, *args) -> None:
        """`action(*args)`, unless the census gave up already; an error in it makes the census give up at
        `where` (an aten op, or a name)."""
        if self._gave_up is not None:
            return
        try:
            action(*args)
        except CompatError:
            raise  # a torch name of ours moved: every trace would fail here
        except Exception as error:
            what = where if isinstance(where, str) else f"aten.{where.overloadpacket.__name__}"
            self._gave_up = f"{what} ({type(error).__name__}: {error})"

    def _observe(self, func, args, kwargs, out, on_parameter: bool) -> None:
        kind = self._kinds.get(func)
        if kind is None:
            kind = self._kinds[func] = _classify(func, self._gemm_ops)
        if kind.kind is _SKIP:
            return
        if kind.kind is _MEMORY:
            self._memory_op(kind, args, kwargs, out)
        elif kind.kind is _CAST:
            if not self._float_cast(args[0], out):
                self._memory_op(kind, args, kwargs, out)
        elif kind.kind is _ALLOCATION:
            self._made_outside_regions(self._keys((out,)))  # a later op may write it
        else:
            if kind.kind is _MATMUL and not on_parameter:
                self._matmuls.append(_matmul_call(self._gemm_ops[func], args))
            elif kind.kind is _CONVOLUTION:
                self._convolutions += 1
            self._extern(self._arguments(args, kwargs), self._keys((out,)))

    def attention_mode(self):
        """A `TorchFunctionMode` that sees `F.scaled_dot_product_attention` whole, as the one kernel it is."""
        import torch
        import torch.nn.functional as F
        from torch.overrides import TorchFunctionMode

        tracer = self
        sdpa = F.scaled_dot_product_attention
        multi_head = F.multi_head_attention_forward

        class AttentionMode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                if func is not sdpa:
                    if func is multi_head and not _argument(args, kwargs, 15, "need_weights", True):
                        tracer._hidden_attention += 1
                    return func(*args, **kwargs)
                tracer._inside_attention += 1
                try:
                    out = func(*args, **kwargs)
                    if isinstance(out, torch.Tensor) and out.is_meta:
                        out = _fused_layout(out, args[0] if args else kwargs["query"])
                finally:
                    tracer._inside_attention -= 1
                tracer._safely("F.scaled_dot_product_attention", tracer._attention_call, args, kwargs, out)
                return out

        return AttentionMode()

    def finish(self, output, *, tokens: int, stopped: str | None) -> OpCensus:
        """The census of everything observed; `output` is what the forward returned (None if it stopped)."""
        output_tensors = list(tensors_in(output))
        for _, key in self._keys(output_tensors):
            self._mark_read(key)
        regions = [self._priced(region) for region in self._regions if region.ops]
        notes = []
        if stopped is not None:
            notes.append(f"tracing stopped part-way ({stopped}): the census covers the ops before it")
        if self._gave_up is not None:
            notes.append(f"the census gave up at {self._gave_up}: it covers the ops before it")
        if self._convolutions:
            notes.append(
                f"{self._convolutions} convolution(s): extern kernels, boundaries of fusion, not priced here"
            )
        if self._hidden_attention:
            notes.append(
                f"{self._hidden_attention} nn.MultiheadAttention call(s) attend through "
                "F.scaled_dot_product_attention inside F.multi_head_attention_forward, where no function "
                "mode sees it: counted on the math path (matmuls and memory regions), not as fused attention"
            )
        census = OpCensus(
            tokens=tokens,
            attention=fold(self._attention),
            matmuls=fold(self._matmuls),
            regions=fold(regions),
            output_shape=tuple(int(n) for n in output_tensors[0].shape) if output_tensors else None,
            complete=stopped is None and self._gave_up is None,
            notes=tuple(notes),
        )
        self._alive.clear()
        return census

    # --- bookkeeping

    def _keys(self, values: Iterable) -> list[tuple[Any, int]]:
        """(tensor, storage key) of each tensor among `values` or in a list among them (an aten op's arguments
        and results nest no deeper) that has a storage; a float cast's storage is its source's. Runs several
        times for every op of the forward: plain loops."""
        tensor_type, same_as = self._tensor_type, self._same_as
        found = []
        for value in values:
            if isinstance(value, tensor_type):
                key = compat.storage_key(value)
                if key is not None:
                    found.append((value, same_as.get(key, key)))
            elif isinstance(value, (tuple, list)):
                for item in value:
                    if isinstance(item, tensor_type):
                        key = compat.storage_key(item)
                        if key is not None:
                            found.append((item, same_as.get(key, key)))
        return found

    def _arguments(self, args, kwargs, skip: tuple[tuple[int, str], ...] = ()) -> list[tuple[Any, int]]:
        """`_keys` of an op's arguments, less the (position, name)s in `skip`."""
        if skip:
            positions = {position for position, _ in skip}
            names = {name for _, name in skip}
            args = [value for position, value in enumerate(args) if position not in positions]
            kwargs = {name: value for name, value in kwargs.items() if name not in names}
        if kwargs:
            return self._keys(args) + self._keys(kwargs.values())
        return self._keys(args)

    def _float_cast(self, source, out) -> bool:
        """Record `out` as `source` itself when it is `source` in another floating dtype, element for element:
        priced as bf16 either way, the cast is the identity. A copy that changes anything else is no cast."""
        if not (source.is_floating_point() and out.is_floating_point() and source.dtype != out.dtype):
            return False
        if source.shape != out.shape or source.stride() != out.stride():
            return False
        elements = source.untyped_storage().nbytes() // source.element_size()
        if elements != out.untyped_storage().nbytes() // out.element_size():
            return False  # a part of its storage: copied out
        (_, source_key), (_, out_key) = self._keys((source, out))
        self._same_as[out_key] = source_key
        self._alive.append(out)
        return True

    def _memory_op(self, kind: _OpKind, args, kwargs, out) -> None:
        inputs = self._arguments(args, kwargs, kind.unread)
        mutated = self._keys([_argument(args, kwargs, *written, None) for written in kind.written])
        fresh = self._keys((out,))
        if inputs:
            input_keys = {key for _, key in inputs}
            fresh = [(tensor, key) for tensor, key in fresh if key not in input_keys]
        if not fresh and not mutated:
            return  # returns its input's storage: an alias
        region = self._region
        if region is None:
            region = self._region = _Region()
            self._regions.append(region)
        region.ops += 1
        table = args[0] if kind.gathers else None
        for tensor, key in inputs:
            if tensor is table:
                self._gather(region, kind.gathers, tensor, key, out)
            else:
                self._read(region, tensor, key)
        for tensor, key in fresh:
            self._write(region, tensor, key)
        for tensor, key in mutated:
            if key not in self._producer:
                region.needed.add(key)  # state that outlives the forward (a buffer's in-place update)
            self._write(region, tensor, key)

    def _read(self, region: _Region, tensor, key: int) -> None:
        if key in region.reads:
            return
        producer = self._producer.get(key)
        if producer is region:
            return  # made inside this region: free
        if producer is not None:
            producer.needed.add(key)
        region.reads[key] = self._size(key, tensor)

    def _gather(self, region: _Region, op: str, table, key: int, out) -> None:
        """Embedding rows: as many bytes as the output; index_select so only of a parameter."""
        if op == "index_select" and key not in self._parameters:
            self._read(region, table, key)
            return
        self._mark_read(key)
        region.gathered += _priced_bytes(out)

    def _write(self, region: _Region, tensor, key: int) -> None:
        self._producer[key] = region
        region.writes[key] = self._size(key, tensor)

    def _extern(self, inputs: list[tuple[Any, int]], outputs: list[tuple[Any, int]]) -> None:
        """An extern kernel: it ends the region being built, reads `inputs` and writes `outputs`."""
        self._region = None
        for _, key in inputs:
            self._mark_read(key)
        self._made_outside_regions(outputs)

    def _made_outside_regions(self, outputs: list[tuple[Any, int]]) -> None:
        """Storages the trace made that no region wrote: an extern kernel's outputs, allocations."""
        for tensor, key in outputs:
            self._producer[key] = None
            self._alive.append(tensor)

    def _mark_read(self, key: int | None) -> None:
        """A storage read outside the region that produced it: that region writes it."""
        producer = self._producer.get(key)
        if producer is not None:
            producer.needed.add(key)

    def _size(self, key: int, tensor) -> int:
        size = self._sizes.get(key)
        if size is None:
            size = self._sizes[key] = _priced_bytes(tensor)
            self._alive.append(tensor)
        return size

    def _attention_call(self, args, kwargs, out) -> None:
        q = _argument(args, kwargs, 0, "query", None)
        k = _argument(args, kwargs, 1, "key", None)
        v = _argument(args, kwargs, 2, "value", None)
        mask = _argument(args, kwargs, 3, "attn_mask", None)
        is_causal = bool(_argument(args, kwargs, 5, "is_causal", False))
        self._extern(self._arguments(args, kwargs), self._keys((out,)))
        leading = q.shape[:-3]
        self._attention.append(
            AttentionCall(
                batch=math.prod(leading),
                heads=q.shape[-3] if q.dim() >= 3 else 1,
                q_len=q.shape[-2],
                kv_len=k.shape[-2],
                head_dim=q.shape[-1],
                v_head_dim=v.shape[-1],
                causal=is_causal and mask is None,
            )
        )

    def _priced(self, region: _Region) -> MemoryRegion:
        activation = region.gathered
        parameter = 0
        for key, size in region.reads.items():
            if key in self._parameters:
                parameter += size
            else:
                activation += size
        for key in region.needed:
            if key in self._parameters:
                parameter += region.writes[key]
            else:
                activation += region.writes[key]
        return MemoryRegion(activation_bytes=activation, parameter_bytes=parameter, ops=region.ops)


def _argument(args, kwargs, position: int, name: str, default):
    if position < len(args):
        return args[position]
    return kwargs.get(name, default)


def _matmul_call(operands: tuple[int, int], args) -> MatmulCall:
    a, b = args[operands[0]], args[operands[1]]
    return MatmulCall(batch=math.prod(a.shape[:-2]), M=a.shape[-2], K=a.shape[-1], N=b.shape[-1])


def _fused_layout(out, query):
    """The attention output as a GPU kernel lays it out: (batch, seq, heads, dim) in memory when query is,
    viewed as (batch, heads, seq, dim) (flash attention's `empty_like(query)`), so that the usual
    `out.transpose(1, 2).reshape(batch, seq, -1)` is a view, not a copy the GPU never makes."""
    import torch

    if out.dim() != 4 or query.dim() != 4 or query.stride(1) >= query.stride(2):
        return out
    batch, heads, length, dim = out.shape
    return torch.empty(batch, length, heads, dim, dtype=out.dtype, device=out.device).transpose(1, 2)


__all__ = [
    "FLOAT_BYTES",
    "AttentionCall",
    "CensusTracer",
    "MatmulCall",
    "MemoryRegion",
    "OpCensus",
    "fold",
    "tensors_in",
]
