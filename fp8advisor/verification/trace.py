"""The trace of `verify`'s step: which GEMMs each nn.Linear ran in float8 and in high precision.

A TorchDispatchMode records every GEMM (`aten.mm`, `addmm`, `bmm`, `_scaled_mm`, ...) and every cast to a
float8 dtype, attributed to the nn.Linear that ran it: in forward by forward pre/post hooks, in backward by
the autograd node being executed (`torch._C._current_autograd_node()`), mapped to its Linear through the graph
that Linear's forward built. A GEMM is float8 when its operands are torchao `Float8TrainingTensor`s (their
`aten.mm` becomes `torch._scaled_mm` on a GPU, or the emulated matmul of float8 values on the CPU), torchao's
`MXTensor`s (MXFP8: the block-scaled GEMM, dequantized when emulated) or float8 tensors given to `_scaled_mm`
directly. Every converted layer must run float8 GEMMs forward and backward;
every other layer none (`fp8advisor.verification.differences`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from fp8advisor import compat

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


@dataclass
class LayerTrace:
    """What one nn.Linear ran in the traced step: its forward calls, GEMMs and float8 casts."""

    calls: int = 0
    forward_float8: int = 0
    forward_high_precision: int = 0
    backward_float8: int = 0
    backward_high_precision: int = 0
    float8_casts: int = 0


def _is_float8_dtype(dtype: torch.dtype | None) -> bool:
    return dtype is not None and "float8" in str(dtype)


def _is_float8_operand(value: Any) -> bool:
    """A low-precision GEMM operand: torchao's Float8TrainingTensor, its MXTensor (MXFP8: e4m3 elements and
    E8M0 block scales, which `aten.mm` receives from an MXFP8 layer), or a float8 tensor."""
    return isinstance(value, (compat.float8_training_tensor(), compat.mx_tensor_class())) or (
        isinstance(value, torch.Tensor) and _is_float8_dtype(value.dtype)
    )


class OpTrace:
    """Counts GEMMs (float8 or not) and float8 casts per nn.Linear, forward and backward (module docstring).

    Use as a context manager around one forward and backward of `model`; hooks are removed on exit.
    """

    def __init__(self, model: nn.Module):
        self.layers: dict[str, LayerTrace] = {}
        self.unattributed_float8_gemms = 0
        self._active: list[str] = []
        self._node_owner: dict[int, tuple[str, Any]] = {}  # id(node) -> (fqn, node): the node is kept alive
        self._handles: list[Any] = []
        for fqn, module in model.named_modules():
            if isinstance(module, nn.Linear):
                self.layers[fqn] = LayerTrace()
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


__all__ = ["LayerTrace", "OpTrace"]
