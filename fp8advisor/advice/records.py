"""The advice records: what `advise` (`fp8advisor.advice.decide`) decided, and what `suggest` prints from it.

One `LayerAdvice` per layer and one `ExpertAdvice` per group of routed experts; the `Strategy`s the summary
puts side by side (`fp8advisor.advice.strategies`); the `RecipeOption`s `--recipe auto` weighed
(`fp8advisor.advice.recipe_choice`); and the `Advice` that holds them all, whose `to_json` is
`suggest --json`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fp8advisor.frameworks.shortest_filter import FilterList
from fp8advisor.inspect.records import ExpertForm, LayerStatus
from fp8advisor.predict.figures import weakest_provenance
from fp8advisor.recipes import Recipe


@dataclass(frozen=True)
class LayerAdvice:
    """The decision for one layer. `predicted_speedup` is None where nothing was predicted (not run, not a
    Linear float8 can swap); `bf16_time_s`/`float8_time_s` are the predicted totals over all calls."""

    fqn: str
    M: int
    K: int
    N: int
    calls: int
    status: LayerStatus
    is_linear: bool
    convert: bool
    reason: str
    predicted_speedup: float | None = None
    bf16_time_s: float = 0.0
    float8_time_s: float = 0.0
    provenance: str | None = None  # of the speedup figure
    how: str | None = None  # interpolated / extrapolated / modelled
    bf16_provenance: str | None = None  # of the bf16 time: measured kernel times, or the roofline (modelled)
    aliases: tuple[str, ...] = ()  # other names of the same module (GemmLayer.aliases)
    decided_by: str = "profile"  # or "measured in context" (fp8advisor.advice.in_context)
    #: With tensor parallelism: the (K, N) slice of one GPU that the prediction is for
    #: (`fp8advisor.advice.linears._predict_layer`)
    shard: tuple[int, int] | None = None
    #: (low, high) speedup the profile's held-out error allows (None: the profile states no interval)
    speedup_interval: tuple[float, float] | None = None
    #: The interval holds the threshold: the decision could go either way (`bench` settles it)
    uncertain: bool = False

    @property
    def counts_in_linear_time(self) -> bool:
        """The forward runs it and float8 could swap it: its time is part of every strategy's total."""
        return self.predicted_speedup is not None

    def to_json(self) -> dict:
        return {
            "fqn": self.fqn,
            "M": self.M,
            "K": self.K,
            "N": self.N,
            "predicted_speedup": None if self.predicted_speedup is None else round(self.predicted_speedup, 4),
            "speedup_interval": None
            if self.speedup_interval is None
            else [round(value, 4) for value in self.speedup_interval],
            "uncertain": self.uncertain,
            "convert": self.convert,
            "reason": self.reason,
            "status": self.status.value,
            "calls": self.calls,
            "provenance": self.provenance,
            "how": self.how,
            "decided_by": self.decided_by,
            "shard": None if self.shard is None else self.shard_json(),
        }

    def shard_json(self) -> dict:
        assert self.shard is not None
        K, N = self.shard
        return {"K": K, "N": N, "split": "K" if K != self.K else "N"}


@dataclass(frozen=True)
class ExpertAdvice:
    """The decision for one group of routed experts (`inspect.records.ExpertGroup`): they convert together.

    `predicted_speedup` is the grouped GEMMs' forward+backward speedup under balanced routing;
    `speedup_range` (low, high) under the `--expert-imbalance` the user stated (None: balanced only).
    Times are summed over the group's GEMMs at M_total rows. With expert parallelism (`--ep P`) everything
    is per GPU: `E_local` = E / P experts, `M_per_expert` = M_total / E_local (balanced routing).
    `tokens` (batch x seq) and `M_total` (tokens x top_k, the rows through each of the group's GEMMs) are one
    GPU's; under --ep the rows its E / P experts receive from the P GPUs' tokens are, balanced, that same
    M_total, which is what was predicted.
    """

    group: str  # ExpertGroup.fqn
    form: str  # ExpertForm value
    members: tuple[str, ...]  # the FQNs that convert together (3-D parameters, or every expert's Linear)
    n_experts: int
    top_k: int | None
    M_per_expert: float | None
    convert: bool
    reason: str
    recipe: str | None = None  # the grouped recipe the figures are for (torchao's grouped float8 is rowwise)
    predicted_speedup: float | None = None
    speedup_range: tuple[float, float] | None = None
    bf16_time_s: float = 0.0
    float8_time_s: float = 0.0
    provenance: str | None = None  # "modelled" until a measured grouped profile exists
    how: str | None = None
    E_local: int | None = None  # experts per GPU under expert parallelism (None: all E on one GPU)
    #: `inspect.records.ExpertGroup.other_parameters`: parameters beside the 3-D weights under the experts'
    #: module (a file converting by module name, torchao's quantize_, would swap them too: it keeps the group
    #: bf16).
    other_parameters: tuple[str, ...] = ()
    tokens: int | None = None  # rows entering the MoE layer on one GPU (batch x seq)
    M_total: int | None = None  # rows through each of the group's GEMMs on one GPU; None: unknown

    @property
    def experts_per_gpu(self) -> int:
        """E / P: the experts each GPU holds (E without expert parallelism)."""
        return self.n_experts if self.E_local is None else self.E_local

    def to_json(self) -> dict:
        return {
            "group": self.group,
            "form": self.form,
            "members": list(self.members),
            "E": self.n_experts,
            "E_local": self.experts_per_gpu,
            "top_k": self.top_k,
            "M_per_expert": None if self.M_per_expert is None else round(self.M_per_expert, 3),
            "M_total": self.M_total,
            "tokens": self.tokens,
            "per_gpu": ["tokens", "M_total", "E_local", "M_per_expert"],  # one GPU's (see the docstring)
            "convert": self.convert,
            "reason": self.reason,
            "recipe": self.recipe,
            "predicted_speedup": None if self.predicted_speedup is None else round(self.predicted_speedup, 4),
            "speedup_range": [round(v, 4) for v in self.speedup_range] if self.speedup_range else None,
            "bf16_time_s": float(f"{self.bf16_time_s:.6g}"),
            "float8_time_s": float(f"{self.float8_time_s:.6g}"),
            "provenance": self.provenance,
            "how": self.how,
            "other_parameters": list(self.other_parameters),
        }


@dataclass(frozen=True)
class Strategy:
    """One way of choosing layers, and its predicted Linear-time speedup over all-bf16 (None: unavailable)."""

    name: str
    label: str
    converted: tuple[str, ...]
    predicted_speedup: float | None
    note: str = ""
    #: The groups of routed experts this strategy runs in float8 (`ExpertAdvice.group`): their grouped GEMMs
    #: are outside the Linear time above (a ModuleList's expert Linears are inside it, in `converted`).
    expert_groups: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {
            "label": self.label,
            "converted": len(self.converted),
            "predicted_speedup": None if self.predicted_speedup is None else round(self.predicted_speedup, 4),
            "note": self.note,
            "expert_groups": len(self.expert_groups),
        }


@dataclass(frozen=True)
class RecipeOption:
    """One recipe considered by `--recipe auto`."""

    recipe: Recipe
    provenance: str  # the weakest provenance among its layer figures
    predicted_linear_time_s: float
    predicted_speedup: float
    converted: int
    #: The step speedup over bf16 with this recipe's decisions (None: no step was predicted)
    predicted_step_speedup: float | None = None

    def to_json(self) -> dict:
        return {
            "recipe": self.recipe.value,
            "provenance": self.provenance,
            "predicted_linear_time_s": float(f"{self.predicted_linear_time_s:.6g}"),
            "predicted_speedup": round(self.predicted_speedup, 4),
            "predicted_step_speedup": None
            if self.predicted_step_speedup is None
            else round(self.predicted_step_speedup, 4),
            "converted": self.converted,
        }


@dataclass(frozen=True)
class Advice:
    """The advice for one model at one (batch, seq), recipe and profile; `to_json` is `suggest --json`."""

    target: str
    batch: int
    seq: int
    recipe: Recipe
    recipe_reason: str
    profile_name: str
    profile_provenance: str
    profile_description: str
    min_speedup: float
    tensor_parallel: int
    layers: tuple[LayerAdvice, ...]
    filter_list: FilterList
    strategies: tuple[Strategy, ...]
    warnings: tuple[str, ...] = ()
    recipe_options: tuple[RecipeOption, ...] = ()
    notes: tuple[str, ...] = field(default=())
    prediction_error: Any = None  # the profile's held-out error for this recipe (profile.FitError), if known
    #: The in-context results that decided some layers (`advice.in_context.InContext`), if any.
    in_context: Any = None
    #: The decisions the profile alone would have made for the layers decided in context: FQN -> convert.
    profile_decisions: Mapping[str, bool] = field(default_factory=dict)
    #: One decision per group of routed experts (MoE), in module order; empty for a dense model.
    experts: tuple[ExpertAdvice, ...] = ()
    #: `--expert-imbalance`: the busiest expert's rows over the mean, for the experts' speedup ranges.
    expert_imbalance: float = 1.0
    #: `--ep`: the expert-parallel degree; expert groups are predicted and decided per GPU (E / P experts).
    expert_parallel: int = 1
    #: The profile whose grouped expert GEMM figures predicted the grouped experts (`ProfileChoice.
    #: grouped_profile`: --grouped-profile, the profile's own, or found for its GPU family); None when the
    #: model has no grouped experts or no profile of this GPU measured them (the grouped roofline answers).
    grouped_profile: str | None = None

    @property
    def grouped_experts(self) -> tuple[ExpertAdvice, ...]:
        """The groups whose GEMMs are grouped (3-D weights): outside the Linear time, priced on their own."""
        return tuple(group for group in self.experts if group.form == ExpertForm.GROUPED.value)

    def gemm_speedup_with_experts(self, strategy: Strategy) -> float | None:
        """All-bf16 time / the strategy's time over the Linear layers AND the grouped experts (None: no
        grouped experts, or nothing predicted). The Linear-time speedups of `strategies` leave them out."""
        timed = [group for group in self.grouped_experts if group.predicted_speedup is not None]
        if not timed:
            return None
        linear = [layer for layer in self.layers if layer.counts_in_linear_time]
        converted = set(strategy.converted)
        bf16 = sum(layer.bf16_time_s for layer in linear) + sum(group.bf16_time_s for group in timed)
        chosen = sum(
            layer.float8_time_s if layer.fqn in converted else layer.bf16_time_s for layer in linear
        ) + sum(
            group.float8_time_s if group.group in strategy.expert_groups else group.bf16_time_s
            for group in timed
        )
        return bf16 / chosen if chosen > 0 else None

    @property
    def experts_share(self) -> float | None:
        """The grouped experts' share of the predicted all-bf16 GEMM time (Linear layers + grouped
        experts)."""
        experts = sum(group.bf16_time_s for group in self.grouped_experts if group.predicted_speedup)
        if not experts:
            return None
        linear = sum(layer.bf16_time_s for layer in self.layers if layer.counts_in_linear_time)
        return experts / (experts + linear)

    @property
    def converted_expert_groups(self) -> tuple[ExpertAdvice, ...]:
        """The expert groups advised to run in float8 (through the framework's grouped-experts converter)."""
        return tuple(group for group in self.experts if group.convert)

    @property
    def convert_fqns(self) -> tuple[str, ...]:
        """The advised float8 layers, sorted: what the exact (torchao, accelerate) module filters convert."""
        return tuple(sorted(layer.fqn for layer in self.layers if layer.convert))

    @property
    def module_filter_fqns(self) -> tuple[str, ...]:
        """The names an exact module filter must accept: every advised layer under each of its names. A module
        shared by two parents (`blocks.0.shared` is `blocks.1.shared`) is swapped once per parent, under that
        parent's name; a filter naming only the first leaves the calls through the other in bf16."""
        return tuple(
            sorted({name for layer in self.layers if layer.convert for name in (layer.fqn, *layer.aliases)})
        )

    @property
    def filter_fqns(self) -> tuple[str, ...]:
        """The substring list for torchtitan / NeMo AutoModel (exact unless `filter_list.exact` is False)."""
        return self.filter_list.entries

    @property
    def linear_fqns(self) -> tuple[str, ...]:
        return tuple(layer.fqn for layer in self.layers if layer.is_linear)

    def figures_provenance(self, fqns) -> str | None:
        """The weakest provenance of the speedup figures of the layers `fqns` (None: no figure among them)."""
        wanted = set(fqns)
        found = {layer.provenance for layer in self.layers if layer.fqn in wanted and layer.provenance}
        return weakest_provenance(found) if found else None

    def strategy(self, name: str) -> Strategy:
        return next(s for s in self.strategies if s.name == name)

    def proof_line(self) -> str:
        """The simulation result, for people: what the filter list provably does."""
        fl = self.filter_list
        advised = len(self.convert_fqns)
        linear = len(self.linear_fqns)
        simulated = f"simulated ({fl.framework.framework_name} substring rule on all {linear} nn.Linear FQNs)"
        # FilterList.shortest: False only when the search stopped at its step limit before a proof
        unproven = "" if fl.shortest else "; a shorter list may exist (the search stopped at its step limit)"
        if fl.exact:
            return f"{simulated}: converts exactly the {advised} advised layers{unproven}"
        return (
            f"{simulated}: converts "
            f"{len(fl.converted)} of the {advised} advised layers; no substring list can be exact "
            f"({len(fl.conflicts)} conflict(s)), the other {len(fl.demoted)} stay in bf16{unproven}"
        )

    def to_json(self) -> dict:
        return {
            "target": self.target,
            "batch": self.batch,
            "seq": self.seq,
            "recipe": self.recipe.value,
            "recipe_reason": self.recipe_reason,
            "profile": self.profile_name,
            "profile_provenance": self.profile_provenance,
            "min_speedup": self.min_speedup,
            "tensor_parallel": self.tensor_parallel,
            "expert_parallel": self.expert_parallel,
            "filter_fqns": list(self.filter_fqns),
            "convert_fqns": list(self.convert_fqns),
            "layers": [layer.to_json() for layer in self.layers],
            "summary": {
                "linear_layers": len(self.linear_fqns),
                "runs_in_forward": sum(1 for layer in self.layers if layer.counts_in_linear_time),
                "converted": len(self.convert_fqns),
                "strategies": {
                    s.name: {**s.to_json(), "provenance": self.figures_provenance(s.converted)}
                    for s in self.strategies
                },
                "filter": {
                    "exact": self.filter_list.exact,
                    "shortest": self.filter_list.shortest,
                    "entries": len(self.filter_list.entries),
                    "proof": self.proof_line(),
                    "conflicts": [c.to_json() for c in self.filter_list.conflicts],
                    "kept_bf16_by_conflict": sorted(self.filter_list.demoted),
                },
                "recipe_options": [option.to_json() for option in self.recipe_options],
                "weights": "predicted bf16 forward+backward time of each layer (see each layer's provenance)",
                "with_grouped_experts": self._with_experts_json(),
            },
            "prediction_error": self.prediction_error.to_json() if self.prediction_error else None,
            "in_context": self._in_context_json(),
            "experts": [group.to_json() for group in self.experts],
            "expert_imbalance": self.expert_imbalance,
            "grouped_profile": self.grouped_profile,
            "warnings": list(self.warnings),
            "notes": list(self.notes),
        }

    def _with_experts_json(self) -> dict | None:
        """The grouped experts' share of the bf16 GEMM time and each strategy's speedup counting them too."""
        share = self.experts_share
        if share is None:
            return None
        return {
            "experts_share_of_bf16_gemm_time": round(share, 4),
            "gemm_speedup": {
                s.name: None if (v := self.gemm_speedup_with_experts(s)) is None else round(v, 4)
                for s in self.strategies
                if s.predicted_speedup is not None
            },
        }

    def _in_context_json(self) -> dict | None:
        if self.in_context is None:
            return None
        return {
            "source": str(self.in_context.source),
            "automatic": self.in_context.automatic,
            "decided": sorted(self.profile_decisions),
            "profile_would_convert": sorted(
                fqn for fqn, convert in self.profile_decisions.items() if convert
            ),
            "blocks": [
                {
                    "block": choice.pattern,
                    "recipe": choice.recipe,
                    "device": choice.device,
                    "float8": sorted(choice.float8),
                    "time_s": choice.time.median,
                    "bf16_time_s": choice.bf16_time.median,
                    "profile_advice_float8": None
                    if choice.advice_float8 is None
                    else sorted(choice.advice_float8),
                    "profile_advice_time_s": None
                    if choice.advice_time is None
                    else choice.advice_time.median,
                }
                for choice in self.in_context.choices
            ],
            "fallback_to_profile": sorted(
                layer.fqn
                for layer in self.layers
                if layer.counts_in_linear_time and layer.fqn not in self.profile_decisions
            ),
        }


__all__ = [
    "Advice",
    "ExpertAdvice",
    "LayerAdvice",
    "RecipeOption",
    "Strategy",
]
