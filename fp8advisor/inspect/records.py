"""The records an inspection gives: a model's GEMM-bearing layers and routed experts at one (batch, seq).

`GemmLayer`: one layer (or bare parameter) that feeds a GEMM, its K, N and the M of each call, and its
`LayerStatus` (traced, assumed, not called, not convertible, with the reason). `ExpertGroup`: the routed
experts of one MoE layer, in one `ExpertForm`, each GEMM every expert runs an `ExpertGemm`. `ModelLayers`: all
of them, with the op census of the same forward. `fp8advisor.inspect.layers.inspect_model` makes them; the
advice, the config writers and `verify` read them; each `to_json` is what `layers --json` prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fp8advisor.inspect.census import OpCensus


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

    @property
    def members(self) -> tuple[str, ...]:
        """The FQNs that convert together, as `ExpertAdvice.members` names them
        (`frameworks.formats.expert_modules` reads either)."""
        return self.member_fqns

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
