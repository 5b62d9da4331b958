"""Every GEMM-bearing layer of a model, with the (M, K, N) it really multiplies.

`inspect_model` builds the user's model on the meta device, runs one forward on fake tensors and records each
aten-level GEMM (mm, addmm, bmm, _grouped_mm, _scaled_mm) against the parameter it multiplies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


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
        }


@dataclass(frozen=True)
class ModelLayers:
    """The inspection of one model at one (batch, seq)."""

    target: str  # as the user typed it
    batch: int
    seq: int
    layers: tuple[GemmLayer, ...]
    notes: tuple[str, ...] = field(default=())  # e.g. "tracing stopped at model.py:42 (.item()); 3 layers assumed"

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
        }


def inspect_model(target: str, *, batch: int = 1, seq: int = 8192, debug: bool = False) -> ModelLayers:
    """Build TARGET without allocating weights and list every GEMM-bearing layer with the M it sees."""
    raise NotImplementedError  # issue 2
