"""`suggest`'s step section: the predicted step of bf16 and of each strategy side by side, and the advice's
break-even.

Each strategy of the advice (`fp8advisor.advice.strategies`) is priced by the step model
(`fp8advisor.advice.step.predict_step`), routed expert groups in float8 where the strategy converts them. The
break-even is the smallest number of tokens per GPU step (a multiple of 16) at which the advice reaches
`BREAK_EVEN_SPEEDUP` step speedup; at each token count tried, the layers and expert groups are re-decided as
the advice would decide them there (`scale_layers`, `fp8advisor.advice.linears`, `fp8advisor.advice.experts`),
a layer's M judged again there (`fp8advisor.inspect.rows.at_rows`: at seq 8 no Linear converts, at 16 tokens
a step of two sequences may).

The advice's step is always predicted (a strategy that converts nothing, or only expert groups, is the bf16
step with those groups); another strategy without a prediction (torchao's auto filter where it is not
available, or where no layer it converts has figures) is left out.

Where the Linear speedups carry intervals (a profile chosen by the evidence), each strategy's step speedup
carries one too (`StepReport.intervals`): the step predicted again with every float8 layer at the low end of
its interval, then at the high end (the errors of one predictor move together, so the ends are not
averaged away). Layers whose interval holds the threshold (`LayerAdvice.uncertain`) are what is at stake
(`Stake`): the advice's step with them in float8 and with them in bf16.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from fp8advisor.advice.experts import decide_recipe, default_expert_predictor
from fp8advisor.advice.linears import default_predictor
from fp8advisor.advice.step import Calibration, StepConfig, StepGpu, StepPrediction, predict_step
from fp8advisor.advice.step_parallel import check_pipeline
from fp8advisor.inspect.records import ExpertForm
from fp8advisor.inspect.rows import at_rows

#: The break-even: the step speedup the advice must reach.
BREAK_EVEN_SPEEDUP = 1.05


#: Token counts are searched in multiples of this (float8 GEMMs need multiples of 16).
TOKEN_QUANTUM = 16


@dataclass(frozen=True)
class BreakEven:
    """The smallest tokens per GPU step (a multiple of 16) at which the advice reaches `target` step speedup.

    `tokens` is None when even `searched_up_to` tokens do not reach it.
    """

    target: float
    tokens: int | None
    seq: int
    speedup: float | None  # at `tokens`
    speedup_below: float | None  # at `tokens` - 16 (None when tokens is 16)
    searched_up_to: int

    @property
    def batch(self) -> int | None:
        """Sequences per GPU step at the given sequence length."""
        return None if self.tokens is None else max(1, math.ceil(self.tokens / self.seq))

    def to_json(self) -> dict:
        return {
            "target_step_speedup": self.target,
            "tokens_per_gpu_step": self.tokens,
            "seq": self.seq,
            "batch": self.batch,
            "step_speedup_at_tokens": None if self.speedup is None else round(self.speedup, 4),
            "step_speedup_16_tokens_fewer": None
            if self.speedup_below is None
            else round(self.speedup_below, 4),
            "searched_up_to_tokens": self.searched_up_to,
        }


def scale_layers(model_layers, tokens: int):
    """`model_layers` with every layer's rows scaled to `tokens` per step (rows grow with the tokens at a
    fixed sequence length, for dense and routed layers alike; each Linear's M judged again, `at_rows`), and
    each expert group's tokens and M total."""
    factor = tokens / model_layers.tokens
    layers = tuple(
        at_rows(layer, [max(1, round(m * factor)) for m in layer.M_per_call]) for layer in model_layers.layers
    )
    groups = tuple(
        replace(
            group,
            tokens=max(1, round(group.tokens * factor)),
            M_total=None if group.M_total is None else max(1, round(group.M_total * factor)),
        )
        for group in getattr(model_layers, "expert_groups", ())
    )
    return replace(model_layers, layers=layers, expert_groups=groups)


def find_break_even(
    speedup_at: Callable[[int], float],
    seq: int,
    *,
    target: float = BREAK_EVEN_SPEEDUP,
    limit: int = 2**27,
) -> BreakEven:
    """The smallest multiple of 16 tokens whose step speedup reaches `target`.

    Doubling from 16 tokens brackets it, bisection closes the bracket: exact when the speedup grows with the
    tokens (it does in this model: the Linear layers' share and speedup both grow with M, the fixed costs do
    not); the result carries the speedup 16 tokens below to show the boundary.
    """
    cache: dict[int, float] = {}

    def at(tokens: int) -> float:
        if tokens not in cache:
            cache[tokens] = speedup_at(tokens)
        return cache[tokens]

    low, high = 0, TOKEN_QUANTUM  # speedup(low) < target (0: nothing below), speedup(high) unknown
    while at(high) < target:
        if high >= limit:
            return BreakEven(target, None, seq, None, None, limit)
        low, high = high, min(2 * high, limit)
    while high - low > TOKEN_QUANTUM:
        middle = (low + high) // 2 // TOKEN_QUANTUM * TOKEN_QUANTUM
        if at(middle) >= target:
            high = middle
        else:
            low = middle
    below = at(high - TOKEN_QUANTUM) if high > TOKEN_QUANTUM else None
    return BreakEven(target, high, seq, at(high), below, limit)


@dataclass(frozen=True)
class Stake:
    """What the uncertain layers decide: the advice's step with them in float8 and with them in bf16."""

    layers: tuple[str, ...]
    with_float8_s: float
    with_bf16_s: float

    def to_json(self) -> dict:
        return {
            "layers": list(self.layers),
            "step_s_with_them_in_float8": float(f"{self.with_float8_s:.6g}"),
            "step_s_with_them_in_bf16": float(f"{self.with_bf16_s:.6g}"),
        }


@dataclass(frozen=True)
class StepReport:
    """`suggest`'s step section: each strategy's predicted step, and the advice's break-even."""

    gpu: str
    config: StepConfig
    calibration: Calibration
    predictions: tuple[StepPrediction, ...]
    break_even: BreakEven | None
    notes: tuple[str, ...] = field(default=())
    #: strategy name -> (low, high) step speedup at the ends of the Linear speedups' intervals
    intervals: dict = field(default_factory=dict)
    stake: Stake | None = None

    @property
    def baseline(self) -> StepPrediction:
        return self.predictions[0]

    def prediction(self, name: str) -> StepPrediction:
        return next(p for p in self.predictions if p.name == name)

    def speedup(self, name: str) -> float:
        return self.prediction(name).speedup_over(self.baseline)

    def to_json(self) -> dict:
        strategies = {p.name: p.to_json(self.baseline) for p in self.predictions}
        for name, body in strategies.items():
            if name in self.intervals:
                body["step_speedup_interval"] = [round(value, 4) for value in self.intervals[name]]
        return {
            "gpu": self.gpu,
            "config": self.config.to_json(),
            "in_step_efficiency": self.calibration.in_step_efficiency,
            "calibration": self.calibration.fitted_to,
            "strategies": strategies,
            "uncertain": None if self.stake is None else self.stake.to_json(),
            "break_even": None if self.break_even is None else self.break_even.to_json(),
            "notes": list(self.notes),
        }


def step_report(
    advice,
    model_layers,
    profile_choice,
    gpu: StepGpu,
    config: StepConfig,
    calibration: Calibration | None = None,
    *,
    predictor: Callable | None = None,
    break_even_target: float | None = BREAK_EVEN_SPEEDUP,
) -> StepReport:
    """Predicted steps of bf16 and of each of the advice's strategies, and the advice's break-even.

    Routed expert groups count in every step: bf16 in the bf16 step and where a strategy keeps them, float8
    where it converts them (`Strategy.expert_groups`). The break-even re-decides the layers and the expert
    groups at each token count, as the advice would there.
    """
    config.check(advice.recipe)
    check_pipeline(config, model_layers)
    config = config.for_recipe(advice.recipe)
    calibration = calibration or Calibration.load(family=gpu.family)
    experts = tuple(getattr(advice, "experts", ()))
    predictions = _strategy_steps(advice, model_layers, experts, gpu, config, calibration)
    notes = _step_notes(advice, model_layers, experts, config)  # config: as this recipe runs
    break_even = None
    if break_even_target is not None:
        speedup_at = _advice_speedup_at(
            advice, model_layers, profile_choice, predictor, gpu, config, calibration
        )
        break_even = find_break_even(speedup_at, model_layers.seq, target=break_even_target)
    setting = (model_layers, experts, gpu, config, calibration)
    return StepReport(
        gpu.family,
        config,
        calibration,
        tuple(predictions),
        break_even,
        tuple(notes),
        intervals=_step_intervals(advice, predictions, *setting),
        stake=_stake(advice, *setting),
    )


def _step_intervals(
    advice, predictions, model_layers, experts, gpu, config, calibration
) -> dict[str, tuple[float, float]]:
    """Each strategy's step speedup with every float8 layer at the low, then the high, end of its interval;
    empty when no layer has an interval."""
    if not any(layer.speedup_interval for layer in advice.layers):
        return {}
    bf16_s = predictions[0].step_s
    ends = []
    for end in (0, 1):
        layers = at_interval_end(advice.layers, end)
        steps = _strategy_steps(advice, model_layers, experts, gpu, config, calibration, layers)
        ends.append({step.name: bf16_s / step.step_s for step in steps[1:]})
    return {name: (ends[0][name], ends[1][name]) for name in ends[0]}


def at_interval_end(layers, end: int) -> list:
    """`layers` (`LayerAdvice`) with each float8 time at the low (`end` 0) or high (1) end of its speedup
    interval; a layer without one as it is."""
    return [
        replace(layer, float8_time_s=layer.bf16_time_s / layer.speedup_interval[end])
        if layer.speedup_interval
        else layer
        for layer in layers
    ]


def _stake(advice, model_layers, experts, gpu, config, calibration) -> Stake | None:
    """The advice's step with its uncertain layers in float8 and in bf16; None when no layer is uncertain."""
    uncertain = [layer.fqn for layer in advice.layers if layer.uncertain]
    if not uncertain:
        return None
    advised = {layer.fqn for layer in advice.layers if layer.convert}
    groups = [e.group for e in experts if e.convert]
    steps = [
        predict_step(
            "advice",
            "this advice",
            model_layers,
            advice.layers,
            sorted(converted),
            gpu,
            config,
            calibration,
            experts=experts,
            converted_experts=groups,
        ).step_s
        for converted in (advised | set(uncertain), advised - set(uncertain))
    ]
    return Stake(tuple(uncertain), steps[0], steps[1])


def step_speedup_of(model_layers, gpu: StepGpu, config: StepConfig, calibration: Calibration | None = None):
    """`StepSpeedup` for `--recipe auto` (`fp8advisor.advice.recipe_choice`): the step speedup over bf16 of a
    recipe's decided layers and expert groups in this set-up (float8 all-gather only where the recipe has it:
    tensorwise)."""
    calibration = calibration or Calibration.load(family=gpu.family)

    def step_speedup(recipe, layers, groups) -> float:
        setup = config.for_recipe(recipe)
        return _decided_speedup(model_layers, layers, groups, gpu=gpu, config=setup, calibration=calibration)

    return step_speedup


def _decided_speedup(model_layers, layers, groups, **common) -> float:
    """The step speedup over bf16 of `layers` and expert `groups` as decided (those that convert in float8);
    `common`: `predict_step`'s other keywords."""
    experts = tuple(groups)
    bf16 = predict_step("bf16", "bf16", model_layers, layers, (), experts=experts, **common)
    chosen = predict_step(
        "advice",
        "this advice",
        model_layers,
        layers,
        [layer.fqn for layer in layers if layer.convert],
        experts=experts,
        converted_experts=[e.group for e in experts if e.convert],
        **common,
    )
    return chosen.speedup_over(bf16)


def _strategy_steps(
    advice,
    model_layers,
    experts: tuple,
    gpu: StepGpu,
    config: StepConfig,
    calibration: Calibration,
    layers=None,
) -> list[StepPrediction]:
    """The predicted step of bf16, then of each strategy that has a prediction, in the advice's order
    (`layers`: the advice's layers with other float8 times, for the intervals)."""
    layers = advice.layers if layers is None else layers
    predictions = [
        predict_step("bf16", "bf16", model_layers, layers, (), gpu, config, calibration, experts=experts)
    ]
    for strategy in advice.strategies:
        if strategy.predicted_speedup is None and strategy.name != "advice" and not strategy.expert_groups:
            continue  # not available (e.g. torchao's auto filter for rowwise_with_gw_hp)
        predictions.append(
            predict_step(
                strategy.name,
                strategy.label,
                model_layers,
                layers,
                strategy.converted,
                gpu,
                config,
                calibration,
                experts=experts,
                converted_experts=getattr(strategy, "expert_groups", ()),
            )
        )
    return predictions


def _step_notes(advice, model_layers, experts: tuple, config: StepConfig) -> list[str]:
    """What a step is here, and what the step model leaves out (an incomplete trace, the experts' parts,
    what it gets wrong of rowwise recipes under tensor parallelism)."""
    notes = [
        "a step here is one micro-step of batch x seq tokens of one data-parallel rank; tokens/s is per GPU "
        "(over tp x cp x pp GPUs, as torchtitan counts them)",
        "speedups depend on the in-step efficiency only through communication that shows",
    ]
    if config.tp > 1 and advice.recipe.value.startswith("rowwise"):
        notes.append(
            "rowwise + tensor parallelism: on published runs (torchtitan issue 1207, its async-TP "
            "benchmarks) this model predicted the step speedup 2-10% too high (median 4.1%), on the wrong "
            "side of 1.0 in 2 of 5: small column-parallel shards (wk/wv) ran slower than their shapes "
            "predict there; treat a predicted gain under 10% as none (docs/benchmarks.md, the training "
            "step model)"
        )
    if config.tp > 1 and advice.recipe.value == "tensorwise":
        notes.append(
            "tensorwise + tensor parallelism: priced with torchtitan 0.2's float8 TP styles (activations "
            "all-gathered in float8, one shared input cast); a trainer whose TP moves them in bf16 "
            "(torchtitan 0.3 has no tensorwise; other frameworks' TP plans) gains less"
        )
    if config.tp > 1 and advice.recipe.is_mx:
        notes.append(
            "MXFP8 + tensor parallelism: priced with bf16 collectives (torchtitan 0.3's TP plans have no "
            "MX styles; torchao's MX training tensor shards under DTensor) and unfused casts; no published "
            "MXFP8 + TP run checks it"
        )
    if config.tp > 1 and any(e.form == ExpertForm.GROUPED.value for e in experts):
        notes.append(
            f"routed experts are priced whole on each GPU: --tp {config.tp} does not split them here"
        )
    census = model_layers.census
    if config.cp > 1 and census is not None and census.matmuls and not census.attention:
        notes.append(
            "context parallelism with hand-written attention: its GEMMs are priced over every chunk, but "
            "the K/V exchange is not (torch's context parallel runs fused attention: SDPA)"
        )
    if model_layers.census is not None and not model_layers.census.complete:
        notes.append("tracing stopped part-way: attention and memory-bound terms cover only what ran")
    expert_parallel = getattr(advice, "expert_parallel", 1)
    if any(e.form == ExpertForm.GROUPED.value for e in experts):
        notes.append(
            "routed experts: grouped GEMMs at balanced routing, modelled by the grouped roofline unless a "
            "measured grouped profile answers; "
            + (
                f"per GPU under --ep {expert_parallel} (E / {expert_parallel} experts, the rows of "
                f"{expert_parallel} GPUs' tokens); the all-to-all and the expert weights' smaller optimizer "
                "and FSDP share are not modelled"
                if expert_parallel > 1
                else "expert parallelism (all-to-all) is not modelled"
            )
        )
    unpriced = [e for e in experts if e.form == ExpertForm.GROUPED.value and e.predicted_speedup is None]
    if unpriced:
        notes.append(
            f"{len(unpriced)} routed expert group(s) left out of every step (no prediction): "
            + "; ".join(f"{e.group}: {e.reason}" for e in unpriced)
        )
    return notes


def _advice_speedup_at(
    advice,
    model_layers,
    profile_choice,
    predictor: Callable | None,
    gpu: StepGpu,
    config: StepConfig,
    calibration: Calibration,
) -> Callable[[int], float]:
    """The advice's step speedup over bf16 at a number of tokens, its layers and expert groups re-decided
    there as the advice would decide them."""
    experts = tuple(getattr(advice, "experts", ()))
    layer_predictor = functools.lru_cache(maxsize=None)(predictor or default_predictor(profile_choice))
    expert_predictor = default_expert_predictor(profile_choice) if experts else None

    def speedup_at(tokens: int) -> float:
        scaled = scale_layers(model_layers, tokens)
        decided, groups = decide_recipe(
            scaled,
            advice.recipe,
            advice.min_speedup,
            layer_predictor,
            expert_predictor,
            tensor_parallel=advice.tensor_parallel,
            expert_parallel=getattr(advice, "expert_parallel", 1),
        )
        scale = tokens / model_layers.tokens
        return _decided_speedup(
            scaled, decided, groups, gpu=gpu, config=config, calibration=calibration, token_scale=scale
        )

    return speedup_at


__all__ = [
    "BREAK_EVEN_SPEEDUP",
    "TOKEN_QUANTUM",
    "at_interval_end",
    "BreakEven",
    "Stake",
    "StepReport",
    "find_break_even",
    "scale_layers",
    "step_report",
    "step_speedup_of",
]
