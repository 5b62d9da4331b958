"""`verify`: prove that float8 really runs where the advice says, and nowhere else.

Four checks on one model and one training config file (`fp8advisor.frameworks.reader` reads it as its
framework would), each in its own module of this package:

1. Conversion (`conversion`; grouped MoE experts: `experts`). The model is built on the meta device (no
   memory) and converted by torchao's own swap with the config's recipe and the framework's exact module
   filter. The layers it converts are compared with `advise` for the same model, batch, seq, recipe and
   profile (`settings`), and each filter entry that matches no nn.Linear FQN is named. Where the config's
   framework is installed, its own loader and converter run too (`framework_check`), and every layer or
   expert group it converts otherwise than that reading of the file is a difference.
2. Execution (`execution`; a model too large to build here: `shadow`). One forward and backward on small
   real tensors, on a GPU with FP8 tensor cores when there is one, else with torchao's emulated float8 on the
   CPU.
3. Trace (`trace`). Every GEMM and every cast to float8 of that step, attributed to the nn.Linear that ran
   it: every converted layer must run float8 GEMMs forward and backward; every other layer none.
4. Numerics (`numerics`). Each converted layer runs alone, float8 against its bf16 twin, on the input and
   output gradient it saw in the bf16 model: the SQNR of its output and of its input gradient.

`differences` says what differs; `report` holds the records `verify` returns. This module runs the steps in
order. A Megatron-Core precision config (`suggest --format megatron`) is checked by `megatron_check` instead:
which Transformer Engine modules Megatron's matcher puts in float8, against the advice; nothing runs.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fp8advisor.frameworks.config_record import FrameworkConfig
from fp8advisor.frameworks.formats import ConfigFormat
from fp8advisor.frameworks.reader import detect_framework, read_config, read_config_text
from fp8advisor.inspect.records import ModelLayers
from fp8advisor.recipes import Recipe, parse_recipe
from fp8advisor.request import AUTO, SuggestRequest
from fp8advisor.verification.conversion import convert
from fp8advisor.verification.differences import (
    check_layers,
    config_differences,
    in_report_order,
    setting_differences,
    unused_entry_differences,
)
from fp8advisor.verification.execution import (
    REAL_MODEL_MAX_PARAMETERS,
    RUN_SEQ,
    Step,
    StepPlan,
    execution_device,
    one_cpu_thread,
    run_step,
    step_tokens,
)
from fp8advisor.verification.experts import check_experts, mark_expert_wrapped
from fp8advisor.verification.megatron_check import verify_megatron
from fp8advisor.verification.numerics import SQNR_THRESHOLD_DB, converted_layer_sqnr
from fp8advisor.verification.report import DifferenceKind, VerifyReport
from fp8advisor.verification.settings import advice_for, requested_float8_all_gather

if TYPE_CHECKING:
    from fp8advisor.advice.records import Advice
    from fp8advisor.inspect.spec import LoadedModel


def verify(
    request: SuggestRequest,
    config_path: str | Path,
    *,
    predictor: Callable | None = None,
    trust_config: bool = False,
    run_seq: int = RUN_SEQ,
    real_model_max_parameters: int = REAL_MODEL_MAX_PARAMETERS,
    sqnr_threshold_db: float = SQNR_THRESHOLD_DB,
    seed: int = 0,
) -> VerifyReport:
    """Check that the config at `config_path` converts exactly the layers `advise` picks for the request's
    target at its (batch, seq), that they run float8 GEMMs and nothing else does, and that their numerics are
    sound.

    `request`: the settings to advise with, as `suggest` takes them (`advice_settings` merges a command line
    with the config's header); its recipe "auto" means the one the config names (for a bare filter list:
    "auto"); its in-context results (`measured`) decide the blocks they measured, and are never picked up
    automatically, as under --check. `predictor` replaces the profile's predictions (tests).
    `trust_config`: run a Python config's filter function instead of evaluating it from its syntax
    (`fp8advisor.frameworks.reader.read_config`).
    Raises AdvisorError subclasses (exit 2) for unusable input; the report's `exit_code` is 0 or 1.
    """
    if _is_megatron_file(config_path):  # Transformer Engine modules of Megatron's GPTModel: nothing to run
        return verify_megatron(request, config_path, predictor=predictor)
    # 1. The model at the advised batch x seq, and the advice.
    advised = _advised(request, config_path, predictor, trust_config)
    config, advice, meta = advised.config, advised.advice, advised.meta
    run_recipe = config.recipe
    assert run_recipe is not None
    differences = config_differences(config, advised.requested_recipe, advised_any=bool(advice.convert_fqns))
    differences += setting_differences(config, requested_float8_all_gather(config_path, request))

    # 2. Which layers the framework converts: torchao's own swap on the real-shaped meta model.
    shapes_model = copy.deepcopy(meta.model)  # meta tensors: no memory; kept unconverted for the shadow
    device = execution_device(run_recipe)
    converted = convert(meta.model, config, run_recipe, emulate=device.emulate)
    expert_checks, expert_differences, expert_notes = check_experts(advice, config, meta.model)
    differences.extend(expert_differences)
    linear_layers = [layer for layer in advised.model_layers.layers if layer.is_linear]
    framework_differences, framework, framework_notes = _framework_check(
        advised, shapes_model, linear_layers, converted, expert_checks
    )
    differences.extend(framework_differences)

    # 3. Run one traced step: the model itself when small enough, else its shadow.
    run_tokens = step_tokens(run_seq, request.seq, run_recipe)
    plan = StepPlan(
        meta.spec,  # parsed once: a Hub id is not looked up again
        config,
        shapes_model,
        linear_layers,
        converted,
        device,
        run_tokens,
        real_model_max_parameters,
        seed,
    )
    with one_cpu_thread(device):
        step = run_step(plan)

        # 4. Numerics of each converted layer, alone, on what it saw in the bf16 model.
        sqnr = converted_layer_sqnr(step, linear_layers, converted)

    # 5. Per layer: the config against the advice, against the trace and against the threshold.
    checks, layer_differences = check_layers(
        linear_layers, advice, config, converted, step.trace.layers, sqnr, sqnr_threshold_db
    )
    differences.extend(layer_differences)
    checks = mark_expert_wrapped(checks, expert_differences)
    checks = _mark_framework_differences(checks, framework_differences)

    # 6. Filter entries that match nothing, and the report.
    differences.extend(unused_entry_differences(config, linear_layers))
    return VerifyReport(
        target=request.target,
        config=config,
        recipe=run_recipe,
        profile=advice.profile_name,
        batch=request.batch,
        seq=request.seq,
        min_speedup=request.min_speedup,
        layers=tuple(checks),
        differences=tuple(in_report_order(differences)),
        execution=step.execution,
        sqnr_threshold_db=sqnr_threshold_db,
        notes=_notes(advised, step, [*expert_notes, *framework_notes]),
        experts=expert_checks,
        framework=framework,
    )


def _mark_framework_differences(checks: list, framework_differences: list) -> list:
    """The Linear checks where the framework's own conversion differs, with that problem (the table shows
    it)."""
    from dataclasses import replace

    detail = {difference.subject: difference.detail for difference in framework_differences}
    return [
        replace(check, problems=(*check.problems, f"{DifferenceKind.FRAMEWORK.value}: {detail[check.fqn]}"))
        if check.fqn in detail
        else check
        for check in checks
    ]


def _framework_check(
    advised: _Advised, shapes_model, linear_layers: list, simulated: set[str], expert_checks
) -> tuple[list, str, tuple[str, ...]]:
    """The framework's own conversion of the config (`native`: where it is installed) against the simulated
    one (`simulated` Linear FQNs, the expert groups of `expert_checks` it converts): the differences, the
    line the report says about it, and what the framework's run said (notes)."""
    from fp8advisor.verification.framework_check import (
        framework_line,
        framework_notes,
        native_conversion,
        native_differences,
    )

    native = native_conversion(advised.config, advised.target, shapes_model)
    judged = [check for check in expert_checks if check.converted is not None]
    simulated_experts = (
        {module for check in judged if check.converted for module in check.modules} if judged else None
    )
    differences = native_differences(
        native,
        [layer.fqn for layer in linear_layers],
        simulated,
        simulated_experts,
        set(advised.advice.convert_fqns),
    )
    line = framework_line(native, len(differences), has_expert_groups=simulated_experts is not None)
    return differences, line, framework_notes(native)


def _is_megatron_file(config_path: str | Path) -> bool:
    """Whether the config is a Megatron-Core precision config, which `read_config` refuses and
    `megatron_check` checks."""
    path = Path(config_path)
    return detect_framework(path, read_config_text(path)) is ConfigFormat.MEGATRON


@dataclass(frozen=True)
class _Advised:
    """What `verify` checks against: the config, the model on the meta device and the advice for it."""

    config: FrameworkConfig  # with its recipe (a bare filter list: the advised one)
    requested_recipe: Recipe | None  # --recipe, None for "auto"
    target: str  # the TARGET
    meta: LoadedModel  # the model on the meta device
    model_layers: ModelLayers  # its layers at the advised batch x seq
    advice: Advice


def _advised(
    request: SuggestRequest, config_path: str | Path, predictor: Callable | None, trust_config: bool
) -> _Advised:
    """Read the config, build the model on the meta device at the advised batch x seq, and advise for it."""
    from fp8advisor.inspect.layers import inspect_loaded
    from fp8advisor.inspect.target import load_model

    target, batch, seq, recipe = request.target, request.batch, request.traced_seq, request.recipe
    requested_recipe = parse_recipe(str(recipe)) if recipe not in (None, AUTO) else None
    config = read_config(config_path, recipe=requested_recipe, trust_config=trust_config)
    meta = load_model(target, "meta")
    model_layers: ModelLayers = inspect_loaded(meta, batch=batch, seq=seq)
    advice = advice_for(model_layers, config, requested_recipe, request, predictor)
    if config.recipe is None:  # a bare filter list trains with the advised recipe
        config = config.with_recipe(advice.recipe)
    return _Advised(config, requested_recipe, target, meta, model_layers, advice)


def _notes(advised: _Advised, step: Step, expert_notes: list[str]) -> tuple[str, ...]:
    """The report's notes, each once: the config's, the model's, the step's, the experts', and the model's
    warning about the seq."""
    model_layers = advised.model_layers
    return tuple(
        dict.fromkeys(
            (*advised.config.notes, *model_layers.notes, *step.notes, *expert_notes)
            + ((model_layers.seq_warning,) if model_layers.seq_warning else ())
        )
    )


__all__ = ["verify"]
