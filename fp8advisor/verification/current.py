"""`suggest --current FILE`: the user's existing config, read as `verify` reads it, and its predicted training
step beside the advice's.

Reading (`read_current`, before any model is built): the file's format and what its framework does with it
(`fp8advisor.frameworks.reader.read_config`: any format `verify` reads, a bare filter list included), or a
Megatron-Core precision config (recognised by `reader.detect_framework`; `read_config` refuses it, as `verify`
checks it on a path of its own). A file that cannot be read, of no known format, or that its reader refuses
is one ConfigError naming `--current` and the file. The file is only ever read.

Which layers it trains in float8 (`current_conversion`), found as `verify` finds them:

- Linear layers: torchao's own `convert_to_float8_training` with the config's recipe and the framework's
  exact module filter, on the model built on the meta device (`verification.conversion.convert`); nothing
  when the file leaves FP8 off;
- grouped MoE experts: torchao's `quantize_` with the file's expert filter, or every group for torchtitan
  0.3 (`frameworks.expert_conversion`); a group is in float8 when every module holding its weights was
  swapped;
- a Megatron precision config: Megatron-Core's own matcher on a real GPTModel's module names where
  megatron-core is installed, else the simulated matcher (`megatron_check.file_float8_modules`); a module in
  float8 puts the traced Linear layers it fuses in float8 (`emit.megatron.plan`'s mapping), priced as those
  layers (the fused GEMM is not priced as one); Megatron's `output_layer` is never float8. Transformer
  Engine's tensorwise is priced with torchao's tensorwise figures, its mxfp8 with torchao's mxfp8_rceil
  figures (`megatron_check.file_recipe`);
- a bare filter list names no recipe: it trains with the advice's (`--recipe`'s when given).

The step (`predict_current`): `fp8advisor.advice.step.predict_step` with the step configuration, GPU and
calibration of the advice's step (`fp8advisor.advice.step_comparison.step_report`), and the Linear and expert
times of the config's own recipe: the advice's layers when the recipe is the advice's, else the layers decided
again for the config's recipe with the same predictors (`advice.experts.decide_recipe`). FSDP's float8
all-gather is the file's where it says (tensorwise only: torchao refuses it with the rowwise recipes), else
the step's. Speedups are over the step report's bf16 step: bf16 times do not depend on the recipe, so a config
with nothing in float8 predicts exactly the bf16 step, and the advice's and the config's speedups compare
directly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fp8advisor.errors import ConfigError
from fp8advisor.frameworks.config_record import FrameworkConfig
from fp8advisor.frameworks.formats import FILE_FORMATS, ConfigFormat
from fp8advisor.recipes import Recipe

#: What `--current` takes, for the hint of its errors.
CURRENT_HINT = (
    "--current takes the training config you use now, in any format `fp8advisor verify` reads: "
    + ", ".join(f.value for f in FILE_FORMATS)
    + " (a torchtitan .toml or .py, a NeMo AutoModel .yaml, a torchao or accelerate .py, a filter list "
    ".yaml/.json, a Megatron precision config .yaml)"
)
#: The name of the current config's step (`StepPrediction.name`) and its label.
CURRENT, CURRENT_LABEL = "current", "your config"


@dataclass(frozen=True)
class CurrentFile:
    """A `--current` file, read before the work: its format and what its framework does with it (None for a
    Megatron precision config, whose modules are matched once the advice maps the model onto Megatron's)."""

    path: Path
    format: ConfigFormat
    config: FrameworkConfig | None


def read_current(path: str | Path) -> CurrentFile:
    """Read the `--current` file as `verify` reads a config (a bare filter list without a recipe: it trains
    with the advice's); one ConfigError naming --current and the file when it cannot be read or used."""
    from fp8advisor.frameworks.reader import detect_framework, read_config
    from fp8advisor.reading import MAX_CONFIG_BYTES, read_text

    path = Path(path)
    try:
        text = read_text(
            path,
            "config file",
            error=ConfigError,
            max_bytes=MAX_CONFIG_BYTES,
            hint="check the path given to --current",
        )
        fmt = detect_framework(path, text)
        config = None if fmt is ConfigFormat.MEGATRON else read_config(path)
    except ConfigError as error:
        raise ConfigError(
            f"--current: {error.message}",
            location=error.location or str(path),
            hint=error.hint or CURRENT_HINT,
        ) from None
    return CurrentFile(path, fmt, config)


@dataclass(frozen=True)
class CurrentConfig:
    """What the `--current` file trains in float8, on the traced model's names."""

    path: Path
    format: ConfigFormat
    enabled: bool  # False: the file leaves FP8 off for the Linear layers (grouped experts may still convert)
    recipe: Recipe  # its Linear layers' recipe (a bare filter list: the advice's); grouped experts: rowwise
    recipe_from: str  # where the recipe comes from, in words
    converted: tuple[str, ...]  # Linear FQNs in float8, in the model's order
    expert_groups: tuple[str, ...]  # grouped expert groups (`ExpertAdvice.group`) in float8
    float8_all_gather: bool | None  # as the file sets it up; None: the file cannot say
    conversion: str  # who found `converted`, in words
    notes: tuple[str, ...] = ()

    @property
    def in_float8(self) -> bool:
        return bool(self.converted or self.expert_groups)

    @property
    def linear_recipe(self) -> Recipe | None:
        """The recipe its Linear layers train with; None when none is in float8 (grouped experts run
        torchao's rowwise grouped GEMMs whatever the Linear recipe)."""
        return self.recipe if self.converted else None

    def to_json(self) -> dict:
        return {
            "path": str(self.path),
            "format": self.format.value,
            "enabled": self.enabled,
            "recipe": None if self.linear_recipe is None else self.linear_recipe.value,
            "recipe_from": self.recipe_from,
            "converted": len(self.converted),
            "converted_fqns": list(self.converted),
            "expert_groups_in_float8": list(self.expert_groups),
            "float8_all_gather": self.float8_all_gather,
            "conversion": self.conversion,
            "notes": list(self.notes),
        }


def current_conversion(current: CurrentFile, target: str, advice) -> CurrentConfig:
    """What the file trains in float8 for TARGET (see the module docstring); `advice`: the advice for TARGET
    (a bare filter list trains with its recipe; a Megatron file's modules map through its layers). A file
    its framework would refuse on this model (a filter that fails on a module, a Megatron config Megatron
    rejects or a model Megatron's names cannot hold) is one ConfigError naming --current."""
    try:
        if current.config is None:
            return _megatron_conversion(current, advice)
        return _linear_conversion(current, current.config, target, advice)
    except ConfigError as error:
        raise ConfigError(
            f"--current: {error.message}",
            location=error.location or str(current.path),
            hint=error.hint or CURRENT_HINT,
        ) from None


def _linear_conversion(current: CurrentFile, config: FrameworkConfig, target: str, advice) -> CurrentConfig:
    """A torchao-converted config: its Linear layers and grouped expert groups in float8, converted on the
    meta model as `verify` converts them."""
    from fp8advisor.frameworks.expert_conversion import groups_in_float8
    from fp8advisor.frameworks.formats import grouped_expert_groups
    from fp8advisor.inspect.target import load_model
    from fp8advisor.verification.conversion import convert

    recipe_from = "the file"
    if config.recipe is None:  # a bare filter list trains with the advised recipe, as under `verify`
        config, recipe_from = config.with_recipe(advice.recipe), "the advice: a filter list names none"
    assert config.recipe is not None
    model = load_model(target, "meta").model
    converted = convert(model, config, config.recipe, emulate=True)  # which swap: the same on any device
    groups = grouped_expert_groups(advice.experts)
    in_float8 = tuple(group.group for group in groups_in_float8(model, config, groups))
    how = (
        f"{_swap(config)} with the file's filter ({config.rule})"
        if config.enabled
        else "FP8 is off in the file: no Linear layer converts"
    )
    return CurrentConfig(
        current.path,
        current.format,
        config.enabled,
        config.recipe,
        recipe_from,
        _in_model_order(converted, advice),
        in_float8,
        config.float8_all_gather,
        how,
        tuple(config.notes),
    )


def _megatron_conversion(current: CurrentFile, advice) -> CurrentConfig:
    """The traced Linear layers a Megatron precision config puts in float8: those fused in each Transformer
    Engine module its matcher quantizes (`emit.megatron.plan` maps the model onto Megatron's GPTModel)."""
    from fp8advisor.emit.megatron import plan, te_recipe
    from fp8advisor.verification.megatron_check import file_float8_modules
    from fp8advisor.verification.native import NotRun

    mapped = plan(replace(advice, recipe=Recipe.TENSORWISE))  # names only: every decision is the file's
    modules = {module.name: module for module in mapped.modules}
    float8, native, recipe, other_recipes = file_float8_modules(current.path, list(modules), mapped.n_layers)
    converted = {part.fqn for name in float8 if name in modules for part in modules[name].parts}
    how = (
        f"{native.note()}; the first-match glob rule on Megatron's module names"
        if isinstance(native, NotRun)
        else f"{native.framework}'s own matcher on a real GPTModel's module names"
    )
    notes = [
        "Megatron's fused linear_qkv and linear_fc1 are priced as the Linear layers they fuse",
        "assumes --fp8-format on Megatron's command line (the config turns no module on without it)",
    ]
    notes += [f"{detail}: priced with torchao's {recipe.value} figures" for detail in other_recipes]
    return CurrentConfig(
        current.path,
        current.format,
        bool(float8),
        recipe,
        f"the file (Transformer Engine's {te_recipe(recipe)})",
        _in_model_order(converted, advice),
        (),
        None,
        how,
        tuple(notes),
    )


def _in_model_order(fqns: set[str], advice) -> tuple[str, ...]:
    """`fqns` in the order of the model's layers (`advice.layers`), any other after them, sorted."""
    order = {layer.fqn: index for index, layer in enumerate(advice.layers)}
    return tuple(sorted(fqns, key=lambda fqn: (order.get(fqn, len(order)), fqn)))


@dataclass(frozen=True)
class CurrentStep:
    """The current config's predicted step beside the bf16 step and the advice's (`step` None: the step
    model does not cover this set-up, `why_not` says why)."""

    current: CurrentConfig
    advice_converted: tuple[str, ...]  # the advice's Linear layers in float8, in the model's order
    advice_expert_groups: tuple[str, ...]
    step: Any = None  # StepPrediction of the current config
    bf16: Any = None  # the step report's bf16 step
    advice: Any = None  # the step report's step of the advice
    why_not: str | None = None
    notes: tuple[str, ...] = ()
    #: The current config's step speedup with every float8 layer at the low, then the high end of its
    #: interval (None: the profile states none)
    interval: tuple[float, float] | None = None

    @property
    def speedup(self) -> float | None:
        """The current config's step speedup over bf16."""
        return None if self.step is None else self.step.speedup_over(self.bf16)

    @property
    def advice_speedup(self) -> float | None:
        return None if self.advice is None else self.advice.speedup_over(self.bf16)

    @property
    def gain(self) -> float | None:
        """What changing the config to the advice gives: the current step time over the advice's, - 1 (the
        throughput change; positive: the advice is faster)."""
        if self.step is None or self.advice is None or self.advice.step_s <= 0:
            return None
        return self.step.step_s / self.advice.step_s - 1

    @property
    def only_in_advice(self) -> tuple[str, ...]:
        """Linear layers the advice trains in float8 and the current config does not."""
        kept = set(self.current.converted)
        return tuple(fqn for fqn in self.advice_converted if fqn not in kept)

    @property
    def only_in_current(self) -> tuple[str, ...]:
        """Linear layers the current config trains in float8 and the advice does not."""
        advised = set(self.advice_converted)
        return tuple(fqn for fqn in self.current.converted if fqn not in advised)

    def to_json(self) -> dict:
        def figures(step) -> dict:
            if step is None:
                return {"step_s": None, "tokens_per_s_per_gpu": None, "speedup": None}
            return {
                "step_s": float(f"{step.step_s:.6g}"),
                "tokens_per_s_per_gpu": float(f"{step.tokens_per_s:.6g}"),
                "speedup": round(step.speedup_over(self.bf16), 4),
            }

        gain = self.gain
        return {
            **self.current.to_json(),
            **figures(self.step),
            "step_speedup_interval": None if self.interval is None else [round(v, 4) for v in self.interval],
            "step": None if self.step is None else self.step.to_json(self.bf16),
            "step_not_predicted": self.why_not,
            "advice": {
                **figures(self.advice),
                "converted": len(self.advice_converted),
                "expert_groups_in_float8": list(self.advice_expert_groups),
            },
            "to_advice": {
                "step_s_from": None if self.step is None else float(f"{self.step.step_s:.6g}"),
                "step_s_to": None if self.advice is None else float(f"{self.advice.step_s:.6g}"),
                "tokens_per_s_change": None if gain is None else round(gain, 4),
                "converts_in_addition": list(self.only_in_advice),
                "keeps_in_bf16": list(self.only_in_current),
                "expert_groups_in_addition": sorted(
                    set(self.advice_expert_groups) - set(self.current.expert_groups)
                ),
                "expert_groups_kept_in_bf16": sorted(
                    set(self.current.expert_groups) - set(self.advice_expert_groups)
                ),
            },
            "step_notes": list(self.notes),
        }


def predict_current(
    current: CurrentConfig,
    advice,
    model_layers,
    report,
    gpu,
    profile_choice,
    *,
    predictor: Callable | None = None,
    why_not: str | None = None,
) -> CurrentStep:
    """The current config's step beside the advice's (see the module docstring). `report`: the advice's
    `StepReport` (None: not predicted, `why_not` says why); `gpu`: the `StepGpu` it was predicted on;
    `predictor`: the advice's layer predictor (default: the profile's)."""
    from fp8advisor.advice.step import predict_step
    from fp8advisor.advice.step_comparison import at_interval_end

    strategy = next(s for s in advice.strategies if s.name == "advice")
    advice_groups = tuple(getattr(strategy, "expert_groups", ()))
    base = CurrentStep(current, _in_model_order(set(advice.convert_fqns), advice), advice_groups)
    if report is None:
        return replace(base, why_not=why_not or "the training step is not predicted here")
    layers, experts = advice.layers, tuple(advice.experts)
    own_recipe = current.linear_recipe not in (None, advice.recipe)
    if own_recipe:
        layers, experts = _layers_for(current.recipe, advice, model_layers, profile_choice, predictor)
    all_gather = current.float8_all_gather
    if all_gather is None:
        all_gather = report.config.float8_all_gather
    notes = []
    if all_gather and current.linear_recipe is not Recipe.TENSORWISE:
        all_gather = False  # nothing to gather in float8, or a recipe torchao refuses it with
        if current.converted:
            notes.append(
                f"float8 all-gather needs tensorwise: {current.recipe.value} is predicted without it"
            )
    elif all_gather != report.config.float8_all_gather and current.converted:
        notes.append(
            f"your config's step: FSDP float8 all-gather {'on' if all_gather else 'off'}, as the file sets it"
        )
    if own_recipe:
        notes.append(
            f"your config is predicted with its own recipe, {current.recipe.value}; the advice with "
            f"{advice.recipe.value}"
        )

    def step_with(times) -> Any:
        return predict_step(
            CURRENT,
            CURRENT_LABEL,
            model_layers,
            times,
            current.converted,
            gpu,
            report.config.for_recipe(current.linear_recipe or advice.recipe, float8_all_gather=all_gather),
            report.calibration,
            experts=experts,
            converted_experts=current.expert_groups,
        )

    step = step_with(layers)
    interval = None
    if current.converted and any(layer.speedup_interval for layer in layers):
        low, high = (step_with(at_interval_end(layers, end)) for end in (0, 1))
        interval = (low.speedup_over(report.baseline), high.speedup_over(report.baseline))
    return replace(
        base,
        step=step,
        bf16=report.baseline,
        advice=report.prediction("advice"),
        notes=tuple(notes),
        interval=interval,
    )


def _layers_for(recipe: Recipe, advice, model_layers, profile_choice, predictor: Callable | None):
    """The Linear and expert decisions (their times) for `recipe`, with the advice's predictors and
    settings."""
    from fp8advisor.advice.experts import decide_recipe, default_expert_predictor
    from fp8advisor.advice.linears import default_predictor

    decided, experts = decide_recipe(
        model_layers,
        recipe,
        advice.min_speedup,
        predictor or default_predictor(profile_choice),
        default_expert_predictor(profile_choice),
        expert_imbalance=advice.expert_imbalance,
        tensor_parallel=advice.tensor_parallel,
        expert_parallel=advice.expert_parallel,
    )
    return tuple(decided), tuple(experts)


def _swap(config: FrameworkConfig) -> str:
    """Who converts the file's Linear layers, in words: torchao's `convert_to_float8_training`, or for MXFP8
    torchtitan 0.3's MXFP8LinearConverter (a torchtitan-py file) or torchao's `quantize_`."""
    if not config.recipe.is_mx:
        return "torchao's convert_to_float8_training"
    if config.framework is ConfigFormat.TORCHTITAN_PY:
        return "torchtitan 0.3's MXFP8LinearConverter (torchao's MXFP8 quantize_, MXFP8TrainingOpConfig)"
    return "torchao's MXFP8 quantize_ with MXFP8TrainingOpConfig"


__all__ = [
    "CURRENT",
    "CURRENT_HINT",
    "CURRENT_LABEL",
    "CurrentConfig",
    "CurrentFile",
    "CurrentStep",
    "current_conversion",
    "predict_current",
    "read_current",
]
