"""The decision for each group of routed experts (MoE): the whole group runs in float8, or stays in bf16.

A group (`fp8advisor.inspect.records.ExpertGroup`) converts iff M per expert is known, every GEMM's K and N
are multiples of 16, and its predicted speedup (all its GEMMs' bf16 time / float8 time) reaches
`min_speedup`. Grouped experts (3-D weights) are predicted as grouped GEMMs
(`fp8advisor.predict.speedup.predict_expert_group`) in the grouped recipe that goes with the Linear recipe
(`predict.mx_grouped.grouped_recipe_for`: rowwise for float8, torchao's only float8 grouped recipe; the MXFP8
recipe itself for MXFP8, as torchtitan 0.3's `MXFP8GroupedExpertsConverter` does); a ModuleList of
expert Linears from its Linears' own predictions, and its Linears follow the group's decision. Routers are
never converted (their N is E). `--expert-imbalance` gives each group a speedup range; `--ep P` predicts and
decides each group as one GPU runs it, E / P experts (`local_experts`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from fp8advisor.advice.linears import HOW_RANK, Predictor, decide_layers
from fp8advisor.advice.records import ExpertAdvice, LayerAdvice
from fp8advisor.inspect.records import ExpertForm, ExpertGemm, ExpertGroup, ModelLayers
from fp8advisor.predict.figures import weakest_provenance
from fp8advisor.recipes import MX_GROUPED_ALIGNMENT, Recipe, dims_supported
from fp8advisor.request import check_expert_imbalance

#: `expert_predictor(group, imbalance, grouped_recipe)` -> `predict.speedup.GroupTimes` (None: M per expert
#: unknown).
ExpertPredictor = Callable[[ExpertGroup, float, Recipe], Any]


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
    def by_shape(
        n_experts: int,
        M_total: int | None,
        gemms: tuple[tuple[int, int], ...],
        imbalance: float,
        recipe: Recipe,
    ):
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
        return predict_expert_group(profile_choice, shape, imbalance, recipe)

    def predict(group: ExpertGroup, imbalance: float, recipe: Recipe):
        gemms = tuple((gemm.K, gemm.N) for gemm in group.gemms)
        return by_shape(group.n_experts, group.M_total, gemms, imbalance, recipe)

    return predict


def odd_gemms(group: ExpertGroup, tensor_parallel: int, recipe: Recipe = Recipe.ROWWISE) -> list[str]:
    """The GEMMs of `group` whose K or N is not a multiple of what the recipe's GEMMs need
    (`recipes.dims_supported`: 16 for float8, 32 for MXFP8 expert Linears, 128 for MXFP8 grouped experts),
    as "w1 KxN"; for ModuleList experts under tensor parallelism, also those whose 1/tp shard is not. Empty:
    convertible."""
    grouped = group.form is ExpertForm.GROUPED

    def fits(K: int, N: int) -> bool:
        return dims_supported(recipe, K, N, grouped=grouped)

    odd = [f"{gemm.name} {gemm.K}x{gemm.N}" for gemm in group.gemms if not fits(gemm.K, gemm.N)]
    if group.form is ExpertForm.LINEAR_LIST and tensor_parallel > 1 and not odd:
        odd = [
            f"{gemm.name} {gemm.K}x{gemm.N} in 1/{tensor_parallel} shards"
            for gemm in group.gemms
            if not (fits(gemm.K // tensor_parallel, gemm.N) and fits(gemm.K, gemm.N // tensor_parallel))
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
        how=max((t.speedup.how for t in times), key=lambda h: HOW_RANK.get(h, 9)),
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
    from fp8advisor.predict.mx_grouped import grouped_recipe_for

    grouped_recipe = grouped_recipe_for(recipe)
    grouped = group.form is ExpertForm.GROUPED
    local = local_experts(group, expert_parallel)
    common = dict(
        group=group.fqn,
        form=group.form.value,
        members=group.member_fqns,
        n_experts=group.n_experts,
        top_k=group.top_k,
        M_per_expert=local.M_per_expert,
        recipe=(grouped_recipe if grouped else recipe).value,
        E_local=None if expert_parallel == 1 else local.n_experts,
        other_parameters=group.other_parameters,
        tokens=group.tokens,
        M_total=local.M_total,
    )
    timing: dict[str, Any] = {}
    if grouped:
        times = expert_predictor(local, imbalance, grouped_recipe) if local.M_total else None
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
                how=max((layer.how or "modelled" for layer in timed), key=lambda h: HOW_RANK.get(h, 9)),
            )
    odd = odd_gemms(group, tensor_parallel, recipe)
    kind = f"grouped {grouped_recipe.value}" if grouped else f"expert Linears, {recipe.value}"
    if not timing:
        why = "top_k unknown and the dispatch did not trace" if group.top_k is None else "no rows traced"
        return ExpertAdvice(convert=False, reason=f"M per expert unknown ({why})", **common, **timing)
    speedup = timing["predicted_speedup"]
    if odd:
        size, kind_of = recipe.block_size, "MXFP8" if recipe.is_mx else "float8"
        if recipe.is_mx and group.form is ExpertForm.GROUPED:
            size = MX_GROUPED_ALIGNMENT
        reason = (
            f"K or N not divisible by {size} ({', '.join(odd)}): {kind_of} GEMMs need multiples of {size}"
        )
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


def decide_recipe(
    model_layers: ModelLayers,
    recipe: Recipe,
    min_speedup: float,
    predictor: Predictor,
    expert_predictor: ExpertPredictor | None,
    *,
    expert_imbalance: float = 1.0,
    tensor_parallel: int = 1,
    expert_parallel: int = 1,
) -> tuple[list[LayerAdvice], tuple[ExpertAdvice, ...]]:
    """Every Linear decided at its own shape (`linears.decide_layers`), then each group of routed experts as
    one (`decide_experts`); without expert groups, the Linear decisions alone (no expert predictor needed)."""
    decided = decide_layers(model_layers.layers, recipe, predictor, min_speedup, tensor_parallel)
    if not model_layers.expert_groups:
        return decided, ()
    return decide_experts(
        model_layers,
        decided,
        recipe,
        min_speedup,
        predictor,
        expert_predictor,
        expert_imbalance=expert_imbalance,
        tensor_parallel=tensor_parallel,
        expert_parallel=expert_parallel,
    )


__all__ = [
    "decide_recipe",
    "ExpertPredictor",
    "check_expert_imbalance",
    "check_expert_parallel",
    "decide_experts",
    "default_expert_predictor",
    "local_experts",
    "odd_gemms",
]
