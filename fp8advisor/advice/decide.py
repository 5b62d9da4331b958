"""Per-layer float8 advice: which Linear layers to convert, with which recipe, and what that should buy.

For each Linear the forward calls, the profile predicts the float8 forward+backward speedup at the layer's own
(M, K, N) (`fp8advisor.predict.speedup.predicted_times_s`); a layer called several times is judged on its
total time over its calls. A layer is converted when float8 conversion would swap it, the forward runs it
(status `traced` or `assumed`), K and N are divisible by 16 and the predicted speedup reaches `min_speedup`.

The summary puts three strategies side by side, each as predicted Linear time of all-bf16 / predicted Linear
time of the strategy, over the Linear layers the forward runs: this advice; converting every convertible
layer; and torchao's own `_auto_filter_for_recipe` (its rule as `fp8advisor.frameworks.filters` copies it,
pinned by a test against the installed torchao; torchao's function itself, called on meta-device `nn.Linear`
layers of the same shapes, for a torchao release the copy was not read from).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from fp8advisor import compat
from fp8advisor.device import MIN_FP8_CAPABILITY
from fp8advisor.frameworks.filters import (
    FilterList,
    Framework,
    converted_by_framework,
    dims_divisible_by_16,
    shortest_exact_filter,
)
from fp8advisor.inspect.layers import (
    ExpertForm,
    ExpertGemm,
    ExpertGroup,
    Folded,
    GemmLayer,
    LayerStatus,
    ModelLayers,
    fold_repeated,
)
from fp8advisor.predict.profile import PROVENANCE_RANK, weakest_provenance
from fp8advisor.recipes import ALL_RECIPES, Recipe, parse_recipe
from fp8advisor.request import AUTO, DEFAULT_MIN_SPEEDUP

#: A profile whose held-out median error exceeds this gets a warning with every advice made from it.
LARGE_PROFILE_ERROR = 0.10


#: `predictor(recipe, M, K, N)` -> an object with bf16_s, float8_s and speedup (a `predict.Prediction`), as
#: `fp8advisor.predict.speedup.LayerTimes`.
Predictor = Callable[[Recipe, int, int, int], Any]


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
    #: With tensor parallelism: the (K, N) slice of one GPU that the prediction is for (`_predict_layer`)
    shard: tuple[int, int] | None = None

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
    """The decision for one group of routed experts (`layers.ExpertGroup`): they convert together.

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
    #: `layers.ExpertGroup.other_parameters`: parameters beside the 3-D weights under the experts' module (a
    #: file converting by module name, torchao's quantize_, would swap them too: it keeps the group bf16).
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

    def to_json(self) -> dict:
        return {
            "recipe": self.recipe.value,
            "provenance": self.provenance,
            "predicted_linear_time_s": float(f"{self.predicted_linear_time_s:.6g}"),
            "predicted_speedup": round(self.predicted_speedup, 4),
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
    in_context: Any = None  # the in-context results that decided some layers (measured.InContext), if any
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


# --- prediction ---------------------------------------------------------------------------------------------


def default_predictor(profile_choice) -> Predictor:
    """Predictions of `fp8advisor.predict.speedup.predicted_times_s` for a `ProfileChoice` (or a
    `Profile`)."""
    from fp8advisor.predict.speedup import predicted_times_s

    # A model repeats a few shapes many times, and the step model asks again at each batch it tries: each
    # distinct question is answered once (the answers are immutable).
    @functools.cache
    def predict(recipe: Recipe, M: int, K: int, N: int):
        return predicted_times_s(profile_choice, recipe, M, K, N)

    return predict


_HOW_RANK = {"interpolated": 0, "modelled": 1, "extrapolated": 2}


def _predict_layer(
    layer: GemmLayer, recipe: Recipe, predictor: Predictor, tensor_parallel: int
) -> tuple[float, float, str, str, str, tuple[int, int]]:
    """(bf16 seconds, float8 seconds, provenance, how, bf16 provenance) summed over the layer's calls, and the
    (K, N) they are for.

    With tensor parallelism each GPU multiplies a 1/tp slice of K (row-parallel) or of N (column-parallel);
    which one is not known here, so both are predicted and the slower float8 outcome (and its slice) is kept.
    """
    shapes = [(layer.K, layer.N)]
    if tensor_parallel > 1:
        shapes = [(layer.K // tensor_parallel, layer.N), (layer.K, layer.N // tensor_parallel)]
    worst: tuple[float, float, str, str, str, tuple[int, int]] | None = None
    for K, N in shapes:
        bf16 = float8 = 0.0
        provenances: set[str] = set()
        hows: set[str] = set()
        bf16_provenances: set[str] = set()
        for M in layer.M_per_call:
            times = predictor(recipe, M, K, N)
            bf16 += times.bf16_s
            float8 += times.float8_s
            provenances.add(times.speedup.provenance)
            hows.add(times.speedup.how)
            bf16_provenances.add(getattr(times, "bf16_provenance", None) or times.speedup.provenance)
        provenance = weakest_provenance(provenances)
        how = max(hows, key=lambda h: _HOW_RANK.get(h, 9))
        if worst is None or bf16 / float8 < worst[0] / worst[1]:
            worst = (bf16, float8, provenance, how, weakest_provenance(bf16_provenances), (K, N))
    assert worst is not None
    return worst


def decide_layers(
    layers: Sequence[GemmLayer],
    recipe: Recipe,
    predictor: Predictor,
    min_speedup: float,
    tensor_parallel: int,
) -> list[LayerAdvice]:
    """The decision for each layer at its own (M, K, N): convert when convertible and predicted to reach
    `min_speedup` (the module docstring's rule)."""
    decided = []
    for layer in layers:
        common = dict(
            fqn=layer.fqn,
            M=layer.M,
            K=layer.K,
            N=layer.N,
            calls=layer.calls,
            status=layer.status,
            is_linear=layer.is_linear,
            aliases=layer.aliases,
        )
        if not layer.convertible or not layer.is_linear:
            if layer.status is LayerStatus.NOT_CALLED:
                reason = "not called by the forward"
            else:
                reason = layer.reason or "float8 conversion does not apply"
            decided.append(LayerAdvice(convert=False, reason=reason, **common))
            continue
        if not layer.M_per_call or not all(m > 0 for m in layer.M_per_call):
            decided.append(LayerAdvice(convert=False, reason="no rows multiplied", **common))
            continue
        bf16, float8, provenance, how, bf16_provenance, shape = _predict_layer(
            layer, recipe, predictor, tensor_parallel
        )
        speedup = bf16 / float8
        timing = dict(
            predicted_speedup=speedup,
            bf16_time_s=bf16,
            provenance=provenance,
            how=how,
            bf16_provenance=bf16_provenance,
            shard=shape if tensor_parallel > 1 else None,
        )
        sharded = [(layer.K // tensor_parallel, layer.N), (layer.K, layer.N // tensor_parallel)]
        if not dims_divisible_by_16(layer.K, layer.N):
            reason = f"K={layer.K} or N={layer.N} not divisible by 16 (float8 GEMMs need multiples of 16)"
            decided.append(LayerAdvice(convert=False, reason=reason, float8_time_s=bf16, **timing, **common))
        elif tensor_parallel > 1 and not all(dims_divisible_by_16(k, n) for k, n in sharded):
            reason = f"a 1/{tensor_parallel} shard of K or N is not divisible by 16"
            decided.append(LayerAdvice(convert=False, reason=reason, float8_time_s=bf16, **timing, **common))
        elif speedup >= min_speedup:
            reason = f"predicted {speedup:.2f}x >= {min_speedup:.2f}"
            decided.append(LayerAdvice(convert=True, reason=reason, float8_time_s=float8, **timing, **common))
        else:
            reason = f"predicted {speedup:.2f}x < {min_speedup:.2f}"
            decided.append(
                LayerAdvice(convert=False, reason=reason, float8_time_s=float8, **timing, **common)
            )
    return decided


def predicted_linear_speedup(
    layers: Sequence[LayerAdvice], converted: set[str] | frozenset[str]
) -> float | None:
    """All-bf16 Linear time / Linear time when exactly `converted` run in float8 (layers the forward runs)."""
    timed = [layer for layer in layers if layer.counts_in_linear_time]
    bf16_total = sum(layer.bf16_time_s for layer in timed)
    if bf16_total <= 0:
        return None
    strategy_total = sum(
        layer.float8_time_s if layer.fqn in converted else layer.bf16_time_s for layer in timed
    )
    return bf16_total / strategy_total


# --- routed experts (MoE) -----------------------------------------------------------------------------------

#: `expert_predictor(group, imbalance)` -> `predict.GroupTimes` (None: M per expert unknown).
ExpertPredictor = Callable[[ExpertGroup, float], Any]


def check_expert_imbalance(imbalance: float) -> float:
    """`--expert-imbalance` as a float >= 1 (1.0: balanced routing), or one clear error."""
    from fp8advisor.errors import AdvisorError

    try:
        value = float(imbalance)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value >= 1.0):
        raise AdvisorError(
            f"--expert-imbalance must be a number >= 1.0, not {imbalance}",
            hint="the busiest expert's rows over the mean: 1.0 is balanced routing, e.g. 1.5",
        )
    return value


def check_expert_parallel(expert_parallel: int, groups: Sequence[ExpertGroup]) -> int:
    """`--ep P` as an int >= 1 that divides every group's E (each GPU holds E / P whole experts), or one clear
    error naming the first group it does not divide."""
    from fp8advisor.errors import AdvisorError

    if isinstance(expert_parallel, bool) or not isinstance(expert_parallel, int) or expert_parallel < 1:
        raise AdvisorError(
            f"--ep must be 1 or more, not {expert_parallel}", hint="the expert-parallel degree (1: no EP)"
        )
    for group in groups:
        if group.n_experts % expert_parallel:
            raise AdvisorError(
                f"--ep {expert_parallel} does not divide the {group.n_experts} experts of {group.fqn}",
                hint="expert parallelism gives each GPU E / P whole experts: choose a divisor of E",
            )
    return expert_parallel


def local_experts(group: ExpertGroup, expert_parallel: int) -> ExpertGroup:
    """The part of `group` one GPU runs under expert parallelism P: E / P experts.

    After the all-to-all dispatch a GPU multiplies the rows its P peers' tokens routed to its E / P experts;
    under balanced routing that is tokens x top_k x P x (1/P) = the same M_total rows per GEMM, now over E / P
    experts, so M per expert = M_total x P / E. The weight casts cover the local experts only.
    """
    if expert_parallel == 1:
        return group
    return replace(group, n_experts=group.n_experts // expert_parallel)


def default_expert_predictor(profile_choice) -> ExpertPredictor:
    """`fp8advisor.predict.speedup.predict_expert_group` for a profile, each distinct question answered once.

    The answer depends on the group's shape alone (E, M_total, its GEMMs' K x N) and the imbalance: the 58 MoE
    layers of DeepSeek-V3 ask one question, asked again at each token count the break-even search tries.
    """
    from fp8advisor.predict.speedup import predict_expert_group

    @functools.cache
    def by_shape(n_experts: int, M_total: int | None, gemms: tuple[tuple[int, int], ...], imbalance: float):
        shape = ExpertGroup(
            fqn="",
            cls="",
            form=ExpertForm.GROUPED,
            n_experts=n_experts,
            top_k=None,
            top_k_source="",
            tokens=0,
            M_total=M_total,
            gemms=tuple(ExpertGemm(f"gemm{i}", K, N, ()) for i, (K, N) in enumerate(gemms)),
        )
        return predict_expert_group(profile_choice, shape, imbalance)

    def predict(group: ExpertGroup, imbalance: float):
        gemms = tuple((gemm.K, gemm.N) for gemm in group.gemms)
        return by_shape(group.n_experts, group.M_total, gemms, imbalance)

    return predict


def _odd_gemms(group: ExpertGroup, tensor_parallel: int) -> list[str]:
    """The GEMMs of `group` whose K or N is not a multiple of 16 (float8 GEMMs need them), as "w1 KxN"; for
    ModuleList experts under tensor parallelism, also those whose 1/tp shard is not. Empty: convertible."""
    odd = [
        f"{gemm.name} {gemm.K}x{gemm.N}" for gemm in group.gemms if not dims_divisible_by_16(gemm.K, gemm.N)
    ]
    if group.form is ExpertForm.LINEAR_LIST and tensor_parallel > 1 and not odd:
        odd = [
            f"{gemm.name} {gemm.K}x{gemm.N} in 1/{tensor_parallel} shards"
            for gemm in group.gemms
            if not (
                dims_divisible_by_16(gemm.K // tensor_parallel, gemm.N)
                and dims_divisible_by_16(gemm.K, gemm.N // tensor_parallel)
            )
        ]
    return odd


def _router_reason(group: ExpertGroup) -> str:
    return f"MoE router: N = E = {group.n_experts}, never converted"


def _linear_list_range(
    group: ExpertGroup, recipe: Recipe, predictor: Predictor, imbalance: float
) -> tuple[float, float] | None:
    """The speedup range of a ModuleList of expert Linears under `imbalance` (`roofline.routed_rows`), each
    expert's Linears predicted at its rows with the Linear recipe; None for balanced routing or unknown M."""
    from fp8advisor.predict.roofline import routed_rows
    from fp8advisor.predict.speedup import IMBALANCE_SAMPLES

    highest = min(imbalance, group.n_experts)
    if highest <= 1.0 or group.M_total is None:
        return None
    speedups = []
    for i in range(IMBALANCE_SAMPLES):
        rows = routed_rows(group.M_total, group.n_experts, highest ** (i / (IMBALANCE_SAMPLES - 1)))
        bf16 = float8 = 0.0
        for gemm in group.gemms:
            for m in rows:
                if m >= 0.5:  # an expert with no rows runs no Linear
                    times = predictor(recipe, max(1, round(m)), gemm.K, gemm.N)
                    bf16 += times.bf16_s
                    float8 += times.float8_s
        speedups.append(bf16 / float8)
    return min(speedups), max(speedups)


def _linear_list_per_gpu(
    local: ExpertGroup, recipe: Recipe, predictor: Predictor, imbalance: float
) -> dict[str, Any]:
    """The timing of a ModuleList of experts as one GPU runs it under expert parallelism (`local`: its E / P
    experts): each GEMM's Linear predicted at the per-GPU M per expert, times E / P. Empty: M unknown."""
    if not local.M_total:
        return {}
    rows = max(1, round(local.M_total / local.n_experts))
    times = [predictor(recipe, rows, gemm.K, gemm.N) for gemm in local.gemms]
    bf16 = local.n_experts * sum(t.bf16_s for t in times)
    float8 = local.n_experts * sum(t.float8_s for t in times)
    return dict(
        predicted_speedup=bf16 / float8,
        speedup_range=_linear_list_range(local, recipe, predictor, imbalance),
        bf16_time_s=bf16,
        float8_time_s=float8,
        provenance=weakest_provenance({t.speedup.provenance for t in times}),
        how=max((t.speedup.how for t in times), key=lambda h: _HOW_RANK.get(h, 9)),
    )


def _decide_group(
    group: ExpertGroup,
    by_fqn: Mapping[str, LayerAdvice],
    recipe: Recipe,
    min_speedup: float,
    imbalance: float,
    predictor: Predictor,
    expert_predictor: ExpertPredictor,
    tensor_parallel: int,
    expert_parallel: int = 1,
) -> ExpertAdvice:
    """One decision for a whole group: convert iff M per expert is known, every GEMM's K and N are multiples
    of 16, and the group's predicted speedup (all its GEMMs' bf16 time / float8 time) reaches min_speedup.
    With expert parallelism the group is predicted as one GPU runs it (`local_experts`)."""
    from fp8advisor.predict.roofline import GROUPED_RECIPE

    grouped = group.form is ExpertForm.GROUPED
    local = local_experts(group, expert_parallel)
    common = dict(
        group=group.fqn,
        form=group.form.value,
        members=group.member_fqns,
        n_experts=group.n_experts,
        top_k=group.top_k,
        M_per_expert=local.M_per_expert,
        recipe=(GROUPED_RECIPE if grouped else recipe).value,
        E_local=None if expert_parallel == 1 else local.n_experts,
        other_parameters=group.other_parameters,
        tokens=group.tokens,
        M_total=local.M_total,
    )
    timing: dict[str, Any] = {}
    if grouped:
        times = expert_predictor(local, imbalance) if local.M_total else None
        if times is not None:
            timing = dict(
                predicted_speedup=times.bf16_s / times.float8_s,
                speedup_range=times.speedup_range,
                bf16_time_s=times.bf16_s,
                float8_time_s=times.float8_s,
                provenance=times.provenance,
                how=times.how,
            )
    elif expert_parallel > 1:
        timing = _linear_list_per_gpu(local, recipe, predictor, imbalance)
    else:
        members = [by_fqn[fqn] for fqn in group.member_fqns if fqn in by_fqn]
        timed = [layer for layer in members if layer.counts_in_linear_time]
        if group.M_total and timed:
            bf16 = sum(layer.bf16_time_s for layer in timed)
            float8 = sum(
                layer.bf16_time_s / layer.predicted_speedup for layer in timed if layer.predicted_speedup
            )
            timing = dict(
                predicted_speedup=bf16 / float8,
                speedup_range=_linear_list_range(group, recipe, predictor, imbalance),
                bf16_time_s=bf16,
                float8_time_s=float8,
                provenance=weakest_provenance({layer.provenance for layer in timed if layer.provenance}),
                how=max((layer.how or "modelled" for layer in timed), key=lambda h: _HOW_RANK.get(h, 9)),
            )
    odd = _odd_gemms(group, tensor_parallel)
    kind = f"grouped {GROUPED_RECIPE.value}" if grouped else f"expert Linears, {recipe.value}"
    if not timing:
        why = "top_k unknown and the dispatch did not trace" if group.top_k is None else "no rows traced"
        return ExpertAdvice(convert=False, reason=f"M per expert unknown ({why})", **common, **timing)
    speedup = timing["predicted_speedup"]
    if odd:
        reason = f"K or N not divisible by 16 ({', '.join(odd)}): float8 GEMMs need multiples of 16"
        return ExpertAdvice(convert=False, reason=reason, **common, **timing)
    if speedup >= min_speedup:
        return ExpertAdvice(
            convert=True, reason=f"predicted {speedup:.2f}x >= {min_speedup:.2f} ({kind})", **common, **timing
        )
    return ExpertAdvice(
        convert=False, reason=f"predicted {speedup:.2f}x < {min_speedup:.2f} ({kind})", **common, **timing
    )


def decide_experts(
    model_layers: ModelLayers,
    decided: Sequence[LayerAdvice],
    recipe: Recipe,
    min_speedup: float,
    predictor: Predictor,
    expert_predictor: ExpertPredictor,
    *,
    expert_imbalance: float = 1.0,
    tensor_parallel: int = 1,
    expert_parallel: int = 1,
) -> tuple[list[LayerAdvice], tuple[ExpertAdvice, ...]]:
    """Decide each group of routed experts as one, and make the layer decisions follow.

    Returns `decided` with: each router kept in bf16 (its N is E, whatever its size: never converted); each
    ModuleList group's expert Linears converted all or none, as their group (each keeps its own per-expert M
    and prediction); and the groups' decisions. Grouped (3-D) experts are not Linear layers: `decided` keeps
    them as they were (not convertible by a Linear converter) and the group decision is what converts them.
    `expert_parallel` P (checked by `check_expert_parallel`): each group is predicted and decided as one GPU
    runs it, E / P experts at M total x P / E rows each (`local_experts`).
    """
    by_fqn = {layer.fqn: layer for layer in decided}
    check_expert_parallel(expert_parallel, model_layers.expert_groups)
    experts = tuple(
        _decide_group(
            group,
            by_fqn,
            recipe,
            min_speedup,
            expert_imbalance,
            predictor,
            expert_predictor,
            tensor_parallel,
            expert_parallel,
        )
        for group in model_layers.expert_groups
    )
    overrides: dict[str, tuple[bool, str]] = {}
    for group, choice in zip(model_layers.expert_groups, experts, strict=True):
        if group.router is not None:
            overrides[group.router] = (False, _router_reason(group))
        if group.form is ExpertForm.LINEAR_LIST:
            for fqn in group.member_fqns:
                overrides[fqn] = (
                    choice.convert,
                    f"routed experts {group.fqn} decided as one: {choice.reason}",
                )
    followed = [
        replace(
            layer,
            convert=overrides[layer.fqn][0] and layer.counts_in_linear_time,
            reason=overrides[layer.fqn][1],
        )
        if layer.fqn in overrides
        else layer
        for layer in decided
    ]
    return followed, experts


def _expert_warnings(
    model_layers: ModelLayers,
    experts: Sequence[ExpertAdvice],
    recipe: Recipe,
    tensor_parallel: int,
    expert_parallel: int = 1,
) -> tuple[list[str], list[str]]:
    """(warnings, notes) about the routed experts."""
    from fp8advisor.predict.roofline import GROUPED_RECIPE

    warnings: list[str] = []
    notes: list[str] = []
    if not experts:
        if expert_parallel > 1:
            notes.append(f"--ep {expert_parallel} has no effect: the model has no routed experts")
        return warnings, notes
    unknown = [group.fqn for group in model_layers.expert_groups if group.top_k is None]
    if unknown:
        warnings.append(
            f"top_k unknown for {len(unknown)} expert group(s) (e.g. {unknown[0]}): the model does not show "
            "it, so M per expert is the traced rows / E, or unknown"
        )
    small = sorted(
        {round(e.M_per_expert, 1) for e in experts if e.M_per_expert is not None and e.M_per_expert < 16}
    )
    if small:
        warnings.append(
            f"M per expert below 16 ({', '.join(map(str, small[:3]))}): each expert multiplies fewer rows "
            "than one float8 token group (padded to 16); its GEMMs are memory-bound and gain little: raise "
            "batch x seq"
        )
    modelled = [e for e in experts if e.predicted_speedup is not None and e.provenance == "modelled"]
    if modelled:
        warnings.append(
            f"{len(modelled)} expert group figure(s) come from the grouped roofline model, not a "
            "measurement: measure this GPU with `fp8advisor bench --grouped` and `fit` before relying on them"
        )
    grouped_convert = [e for e in experts if e.convert and e.form == ExpertForm.GROUPED.value]
    if grouped_convert and recipe is not GROUPED_RECIPE:
        notes.append(
            f"routed experts run {GROUPED_RECIPE.value}: torchao's float8 grouped GEMMs are rowwise only, "
            f"whatever the Linear recipe ({recipe.value})"
        )
    if tensor_parallel > 1:
        notes.append(
            f"--tp {tensor_parallel}: routed experts are predicted with every expert's full K x N; "
            "tensor-parallel expert shards are not modelled"
        )
    if expert_parallel > 1:
        notes.append(
            f"--ep {expert_parallel}: routed experts are predicted per GPU, E / {expert_parallel} experts "
            f"each multiplying tokens x top_k x {expert_parallel} / E rows (balanced routing). The "
            "all-to-all dispatch and combine are not modelled: torchtitan 0.3's float8 MoE path sends the "
            "bf16 tokens (TorchAOTokenDispatcher; the float8 casts run inside the grouped GEMMs), the same "
            "bytes as bf16"
        )
        if any(e.form == ExpertForm.LINEAR_LIST.value for e in experts):
            notes.append(
                f"--ep {expert_parallel}: a ModuleList of expert Linears is decided per GPU, but its Linears "
                "keep their one-GPU M in the Linear table, the Linear-time speedups and the step"
            )
    return warnings, notes


# --- torchao's own auto filter ------------------------------------------------------------------------------


@contextlib.contextmanager
def _quiet_loggers(*names: str) -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def torchao_auto_filter_converts(layers: Sequence[GemmLayer], recipe: Recipe) -> set[str]:
    """The FQNs torchao's `_auto_filter_for_recipe(recipe, filter_fqns=[])` would convert.

    When the installed torchao is a release whose rule `filters.auto_filter_keeps` copies (a test pins the
    copy against torchao's own function), the copy answers: importing torchao costs 2 s, which is most of
    what `suggest` would spend. Otherwise torchao's real function is called on `nn.Linear(K, N)` layers built
    on the meta device (no memory), one per layer with its FQN, as `convert_to_float8_training` would call it.
    Raises NotImplementedError for rowwise_with_gw_hp, as torchao does.
    """
    if compat.auto_filter_copy_matches_installed():
        return converted_by_framework(layers, [], Framework.TORCHAO_AUTO, recipe=recipe)
    import torch
    from torch import nn

    with _quiet_loggers(*compat.TORCHAO_IMPORT_LOGGERS):  # its optional C extensions warn on every import
        module_filter = compat.auto_filter_for_recipe(recipe.value, filter_fqns=[])
    modules: dict[tuple[int, int], nn.Module] = {}
    converted = set()
    for layer in layers:
        if not layer.is_linear:
            continue
        key = (layer.K, layer.N)
        if key not in modules:
            modules[key] = nn.Linear(layer.K, layer.N, bias=False, device=torch.device("meta"))
        if module_filter(modules[key], layer.fqn):
            converted.add(layer.fqn)
    return converted


# --- the advice ---------------------------------------------------------------------------------------------


def _detect_capability() -> tuple[int, int] | None:
    try:
        import torch

        if torch.cuda.is_available():
            return tuple(torch.cuda.get_device_capability(0))  # type: ignore[return-value]
    except Exception:  # no usable CUDA: advice from profiles still works
        return None
    return None


def _fit_error(profile_choice, recipe: Recipe):
    """The held-out error of the profile answering for `recipe`, None when unknown."""
    from fp8advisor.errors import ProfileError

    try:
        profile = (
            profile_choice.profile_for(recipe) if hasattr(profile_choice, "profile_for") else profile_choice
        )
        return profile.recipe(recipe).error
    except (AttributeError, ProfileError):  # a stand-in without figures, or no figures for this recipe
        return None


def _choose_recipe(
    model_layers: ModelLayers,
    profile_choice,
    predictor: Predictor,
    min_speedup: float,
    tensor_parallel: int,
    candidates: Sequence[Recipe] = ALL_RECIPES,
    expert_predictor: ExpertPredictor | None = None,
    expert_parallel: int = 1,
) -> tuple[Recipe, str, tuple[RecipeOption, ...]]:
    """`--recipe auto`: the recipe with the lowest predicted Linear time, compared within one provenance."""
    options = []
    for recipe in candidates:
        if hasattr(profile_choice, "covers") and not profile_choice.covers(recipe):
            continue
        decided = decide_layers(model_layers.layers, recipe, predictor, min_speedup, tensor_parallel)
        if model_layers.expert_groups:  # expert Linears convert as their group, routers never
            decided, _ = decide_experts(
                model_layers,
                decided,
                recipe,
                min_speedup,
                predictor,
                expert_predictor,
                tensor_parallel=tensor_parallel,
                expert_parallel=expert_parallel,
            )
        timed = [layer for layer in decided if layer.counts_in_linear_time]
        if not timed:
            continue
        total = sum(layer.float8_time_s if layer.convert else layer.bf16_time_s for layer in timed)
        bf16_total = sum(layer.bf16_time_s for layer in timed)
        provenance = weakest_provenance({layer.provenance for layer in timed if layer.provenance})
        converted = sum(1 for layer in decided if layer.convert)
        options.append(RecipeOption(recipe, provenance, total, bf16_total / total, converted))
    if not options:
        fallback = Recipe.ROWWISE if Recipe.ROWWISE in candidates else candidates[0]
        return fallback, f"no recipe could be predicted for this model: {fallback.value} by default", ()
    best_rank = min(PROVENANCE_RANK.get(o.provenance, 9) for o in options)
    comparable = [o for o in options if PROVENANCE_RANK.get(o.provenance, 9) == best_rank]
    others = [o for o in options if o not in comparable]
    chosen = min(comparable, key=lambda o: (o.predicted_linear_time_s, ALL_RECIPES.index(o.recipe)))
    figures = ", ".join(f"{o.recipe.value} {o.predicted_speedup:.3f}x" for o in comparable)
    if len(comparable) > 1:
        reason = f"lowest predicted Linear time among {figures} ({chosen.provenance} figures for each)"
    else:
        reason = f"the only recipe with {chosen.provenance} figures ({figures})"
    if others:
        skipped = ", ".join(f"{o.recipe.value} ({o.provenance}: {o.predicted_speedup:.3f}x)" for o in others)
        reason += (
            f"; not compared with {skipped}: figures of different provenance cannot be ranked against each "
            f"other, so the recipe with the stronger evidence ({chosen.provenance}) wins"
        )
    return chosen.recipe, reason, tuple(options)


def advise(
    model_layers: ModelLayers,
    profile_choice,
    recipe: Recipe | str = AUTO,
    min_speedup: float = DEFAULT_MIN_SPEEDUP,
    *,
    tensor_parallel: int = 1,
    device_capability: tuple[int, int] | None | str = "detect",
    compare_torchao_auto: bool = True,
    framework: Framework | str = Framework.TORCHTITAN,
    predictor: Predictor | None = None,
    auto_recipes: Sequence[Recipe] = ALL_RECIPES,
    in_context: Callable[[Recipe], Any] | None = None,
    expert_imbalance: float = 1.0,
    expert_predictor: ExpertPredictor | None = None,
    expert_parallel: int = 1,
) -> Advice:
    """Decide, layer by layer, whether float8 pays, and build the filter list that realises the decision.

    `profile_choice`: a `fp8advisor.predict.profile.ProfileChoice` (or `Profile`). `recipe`: a recipe name or
    "auto". `device_capability`: the GPU's compute capability for the sm_89 warning ("detect": CUDA device 0;
    None: no GPU). `framework`: the substring framework the filter list is simulated under (all three follow
    the same rule). `predictor`: replaces the profile's predictions (tests). `auto_recipes`: the recipes
    "auto" may pick (torchtitan 0.3 has no tensorwise). `in_context(recipe)`: the in-context results for the
    chosen recipe (`fp8advisor.advice.in_context.InContext`) or None; the layers they decide are decided by
    them.

    Routed experts (`model_layers.expert_groups`) are decided one group at a time (`decide_experts`), on
    their prediction under balanced routing; `expert_imbalance` (>= 1: the busiest expert's rows over the
    mean) gives each group's speedup range. `expert_predictor(group, imbalance)` replaces the profile's
    grouped predictions (tests). The strategies' Linear-time speedups leave grouped experts out (see
    `Advice.gemm_speedup_with_experts`). `expert_parallel` P: each group as one GPU runs it, E / P experts
    at M total x P / E rows each under balanced routing (`local_experts`); P must divide every group's E.
    The dense Linear layers do not depend on P; the all-to-all dispatch and combine are not modelled.
    """
    if not (min_speedup > 0 and math.isfinite(min_speedup)):
        from fp8advisor.errors import AdvisorError

        raise AdvisorError(f"--min-speedup must be a positive number, not {min_speedup}", hint="e.g. 1.05")
    if tensor_parallel < 1:
        from fp8advisor.errors import AdvisorError

        raise AdvisorError(
            f"--tp must be 1 or more, not {tensor_parallel}", hint="the tensor-parallel degree"
        )
    expert_imbalance = check_expert_imbalance(expert_imbalance)
    expert_parallel = check_expert_parallel(expert_parallel, model_layers.expert_groups)
    predictor = predictor or default_predictor(profile_choice)
    expert_predictor = expert_predictor or default_expert_predictor(profile_choice)
    profile_name = getattr(profile_choice, "name", str(profile_choice))
    profile_provenance = getattr(profile_choice, "provenance", "unknown")
    describe = getattr(profile_choice, "describe", None)
    profile_description = describe() if callable(describe) else profile_name

    if str(recipe) == AUTO:
        chosen, recipe_reason, options = _choose_recipe(
            model_layers,
            profile_choice,
            predictor,
            min_speedup,
            tensor_parallel,
            tuple(auto_recipes),
            expert_predictor,
            expert_parallel,
        )
    else:
        chosen, recipe_reason, options = parse_recipe(str(recipe)), "requested with --recipe", ()

    decided = decide_layers(model_layers.layers, chosen, predictor, min_speedup, tensor_parallel)
    measured = in_context(chosen) if in_context is not None else None
    profile_decisions: dict[str, bool] = {}
    if measured is not None:
        decided, profile_decisions = _decide_in_context(decided, measured)
    decided, experts = decide_experts(
        model_layers,
        decided,
        chosen,
        min_speedup,
        predictor,
        expert_predictor,
        expert_imbalance=expert_imbalance,
        tensor_parallel=tensor_parallel,
        expert_parallel=expert_parallel,
    )
    advised = {layer.fqn for layer in decided if layer.convert}
    filter_list = shortest_exact_filter(model_layers.layers, advised, framework)

    routers = {group.router for group in model_layers.expert_groups if group.router is not None}
    convertible = {
        layer.fqn
        for layer in decided
        if layer.counts_in_linear_time and dims_divisible_by_16(layer.K, layer.N) and layer.fqn not in routers
    }
    advised_groups = tuple(e.group for e in experts if e.convert)
    convertible_groups = tuple(
        e.group
        for e, group in zip(experts, model_layers.expert_groups, strict=True)
        if e.predicted_speedup is not None and not _odd_gemms(group, tensor_parallel)
    )
    strategies = [
        Strategy(
            "advice",
            "this advice",
            tuple(sorted(advised)),
            predicted_linear_speedup(decided, advised),
            expert_groups=advised_groups,
        ),
        Strategy(
            "all_convertible",
            "every convertible layer",
            tuple(sorted(convertible)),
            predicted_linear_speedup(decided, convertible),
            expert_groups=convertible_groups,
        ),
    ]
    if not filter_list.exact:
        strategies.insert(
            1,
            Strategy(
                "advice_filter",
                "this advice via filter_fqns",
                tuple(sorted(filter_list.converted)),
                predicted_linear_speedup(decided, filter_list.converted),
                note="torchtitan / NeMo AutoModel: conflicting layers kept in bf16",
                expert_groups=advised_groups,
            ),
        )
    strategies.append(_torchao_strategy(model_layers, chosen, decided, compare_torchao_auto))

    warnings = _warnings(
        options,
        model_layers,
        decided,
        chosen,
        min_speedup,
        tensor_parallel,
        device_capability,
        filter_list,
        strategies,
        profile_choice,
    )
    expert_warnings, expert_notes = _expert_warnings(
        model_layers, experts, chosen, tensor_parallel, expert_parallel
    )
    return Advice(
        target=model_layers.target,
        batch=model_layers.batch,
        seq=model_layers.seq,
        recipe=chosen,
        recipe_reason=recipe_reason,
        profile_name=profile_name,
        profile_provenance=profile_provenance,
        profile_description=profile_description,
        min_speedup=min_speedup,
        tensor_parallel=tensor_parallel,
        layers=tuple(decided),
        filter_list=filter_list,
        strategies=tuple(strategies),
        warnings=tuple(warnings + expert_warnings),
        recipe_options=options,
        notes=tuple(model_layers.notes) + tuple(expert_notes),
        prediction_error=_fit_error(profile_choice, chosen),
        in_context=measured,
        profile_decisions=profile_decisions,
        experts=experts,
        expert_imbalance=expert_imbalance,
        expert_parallel=expert_parallel,
        grouped_profile=_grouped_profile_name(profile_choice, model_layers),
    )


def _grouped_profile_name(profile_choice, model_layers: ModelLayers) -> str | None:
    """The name of the profile whose grouped figures predict the model's grouped experts (`Advice.
    grouped_profile`), None when it has none or no profile has such figures."""
    if not any(group.form is ExpertForm.GROUPED for group in model_layers.expert_groups):
        return None
    source = getattr(profile_choice, "grouped_profile", None)
    return None if source is None else source.name


def _decide_in_context(decided: list[LayerAdvice], measured) -> tuple[list[LayerAdvice], dict[str, bool]]:
    """`decided` with the layers the in-context results decide replaced by their decision, and what the
    profile had decided for those layers."""
    from fp8advisor.advice.in_context import MEASURED_IN_CONTEXT

    convertible = {
        layer.fqn
        for layer in decided
        if layer.counts_in_linear_time and dims_divisible_by_16(layer.K, layer.N)
    }
    decisions = measured.decisions(convertible)
    profile = {layer.fqn: layer.convert for layer in decided if layer.fqn in decisions}
    replaced = [
        replace(
            layer,
            convert=decisions[layer.fqn][0],
            reason=decisions[layer.fqn][1],
            decided_by=MEASURED_IN_CONTEXT,
        )
        if layer.fqn in decisions
        else layer
        for layer in decided
    ]
    return replaced, profile


def _torchao_strategy(
    model_layers: ModelLayers, recipe: Recipe, decided: Sequence[LayerAdvice], enabled: bool
) -> Strategy:
    label = "torchao auto filter"
    if not enabled:
        return Strategy("torchao_auto", label, (), None, note="not computed")
    try:
        converted = torchao_auto_filter_converts(model_layers.layers, recipe)
    except NotImplementedError:
        return Strategy(
            "torchao_auto",
            label,
            (),
            None,
            note=f"not available: torchao's _auto_filter_for_recipe raises NotImplementedError for "
            f"{recipe.value}",
        )
    except ImportError as error:
        return Strategy(
            "torchao_auto", label, (), None, note=f"not available: torchao cannot be imported ({error})"
        )
    timed = {layer.fqn for layer in decided if layer.counts_in_linear_time}
    return Strategy(
        "torchao_auto",
        label,
        tuple(sorted(converted)),
        predicted_linear_speedup(decided, converted & timed),
        note="(K, N) thresholds; M ignored",
    )


def _warnings(
    options: Sequence[RecipeOption],
    model_layers: ModelLayers,
    decided: Sequence[LayerAdvice],
    recipe: Recipe,
    min_speedup: float,
    tensor_parallel: int,
    device_capability,
    filter_list: FilterList,
    strategies: Sequence[Strategy],
    profile_choice,
) -> list[str]:
    warnings = [model_layers.seq_warning] if model_layers.seq_warning else []
    capability = _detect_capability() if device_capability == "detect" else device_capability
    if capability is not None and tuple(capability) < MIN_FP8_CAPABILITY:
        warnings.append(
            f"this GPU (compute capability {capability[0]}.{capability[1]}) has no FP8 tensor cores "
            "(sm_89 or newer: Ada, Hopper, Blackwell): float8 training will not run here; the advice is for "
            "the profile's GPU"
        )
    converted = [layer for layer in decided if layer.convert]
    # every called Linear float8 could swap: a layer kept in bf16 only because of M needs the same fix
    odd = sorted(
        {
            m
            for layer in model_layers.layers
            if layer.is_linear and dims_divisible_by_16(layer.K, layer.N)
            for m in layer.M_per_call
            if m % 16
        }
    )
    if odd:
        warnings.append(
            f"{len(odd)} token count(s) per call not divisible by 16 (M = {', '.join(map(str, odd[:5]))}): "
            "float8's "
            "grad_weight GEMM multiplies over the tokens, which must be a multiple of 16; pad sequences to a "
            "multiple of 16 (NeMo AutoModel examples: dataloader collate_fn pad_seq_len_divisible: 16) "
            "or set "
            "Float8LinearConfig(pad_inner_dim=True)"
        )
    if tensor_parallel > 1:
        warnings.append(
            f"tensor parallelism {tensor_parallel}: each GPU multiplies a 1/{tensor_parallel} slice of K "
            "or N; "
            "predictions take the slower of the two slicings per layer. torchtitan runs rowwise recipes with "
            "tensor parallelism in bf16 all-gathers (float8 all-gather needs tensorwise); smaller shards "
            "gain less "
            "(pytorch/torchtitan#1207)"
        )
    if not converted:
        timed = [layer for layer in decided if layer.counts_in_linear_time]
        best = max(timed, key=lambda layer: layer.predicted_speedup or 0, default=None)
        detail = f" (best: {best.fqn} at {best.predicted_speedup:.2f}x)" if best else ""
        others = [o for o in options if o.recipe is not recipe and o.converted and o.predicted_speedup > 1]
        hint = "".join(
            f"; {o.provenance} figures predict {o.recipe.value} at {o.predicted_speedup:.2f}x: measure it "
            "(fp8advisor bench) before relying on it"
            for o in others
        )
        warnings.append(
            f"nothing worth converting: no layer is predicted to reach {min_speedup:.2f}x with {recipe.value}"
            f"{detail}; train in bf16, or a larger batch x seq{hint}"
        )
    if not filter_list.exact:
        advice = next(s for s in strategies if s.name == "advice")
        via = next(s for s in strategies if s.name == "advice_filter")
        names = "; ".join(c.describe() for c in filter_list.conflicts)
        cost = ""
        if advice.predicted_speedup and via.predicted_speedup:
            cost = f": predicted {via.predicted_speedup:.3f}x instead of {advice.predicted_speedup:.3f}x"
        warnings.append(
            f"no filter_fqns list can be exact: {names}. torchtitan / NeMo AutoModel keep "
            f"{', '.join(sorted(filter_list.demoted))} in bf16 too (the safe choice){cost}; the torchao and "
            "accelerate configs convert exactly the advised set"
        )
    modelled = [layer for layer in decided if layer.counts_in_linear_time and layer.provenance == "modelled"]
    if modelled:
        warnings.append(
            f"{len(modelled)} layer figure(s) for {recipe.value} come from the roofline model, not a "
            "measurement: measure this GPU with `fp8advisor bench` and `fit` before relying on them"
        )
    extrapolated = sum(1 for layer in converted if layer.how == "extrapolated")
    if extrapolated:
        warnings.append(
            f"{extrapolated} converted layer(s) are predicted outside the profile's measured grid "
            "(extrapolated)"
        )
    error = _fit_error(profile_choice, recipe)
    if error is not None and error.median_relative_error > LARGE_PROFILE_ERROR:
        warnings.append(
            f"the profile's held-out median error for {recipe.value} is "
            f"{error.median_relative_error:.1%}: layers predicted near {min_speedup:.2f}x may be misjudged; "
            "measure this GPU with `fp8advisor bench` and `fp8advisor fit`"
        )
    return warnings


def group_layers(layers: Sequence[LayerAdvice]) -> list[Folded]:
    """Fold repeated blocks with one decision into one row each: `layers.{0..79}.attention.wq`."""

    def decision(layer: LayerAdvice) -> tuple:
        speedup = None if layer.predicted_speedup is None else round(layer.predicted_speedup, 2)
        return (layer.M, layer.K, layer.N, speedup, layer.convert, layer.reason, layer.status)

    return fold_repeated(layers, decision)


__all__ = [
    "AUTO",
    "DEFAULT_MIN_SPEEDUP",
    "Advice",
    "LayerAdvice",
    "RecipeOption",
    "Strategy",
    "ExpertAdvice",
    "advise",
    "check_expert_imbalance",
    "check_expert_parallel",
    "decide_experts",
    "decide_layers",
    "default_expert_predictor",
    "default_predictor",
    "group_layers",
    "local_experts",
    "predicted_linear_speedup",
    "torchao_auto_filter_converts",
]
