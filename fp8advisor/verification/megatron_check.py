"""`verify` of a Megatron-Core precision config (`suggest --format megatron`, a `--te-precision-config-file`):
which of Megatron's Transformer Engine linear modules the file puts in float8, against the advice.

The advice is computed as `suggest` computed it (same model, batch, seq, profile, min speedup and parallel
degrees, from the file's header or the command line; `settings.advice_for`), for torchao's tensorwise recipe,
or mxfp8_rceil when the file's float8 config names TE's mxfp8 (`file_recipe`; Transformer Engine has no
rowwise: `emit.megatron.check_recipe`), and mapped onto Megatron's GPTModel
by `emit.megatron.plan` with the profile's own predictor, as `suggest` writes the file: its `float8_names`
are the modules the file must put in float8, and every other module must stay bf16.

Which modules the file puts in float8:

- with megatron-core installed, Megatron's own loader, first-match matcher and config parser on a real
  GPTModel's module names (`native_megatron.megatron_float8_modules`);
- without it, a simulation: the first-match glob rule `suggest` proves each file with
  (`emit.megatron.first_match_config`) over the plan's module names, after the checks Megatron's loader
  makes (megatron/core/quantization/quant_config.py `RecipeConfig._build_matchers`); the report says it is
  simulated.

Every module where the file and the plan differ is a difference (exit 1) naming the module and the traced
model's Linear layers it fuses (`linear_fc1 = layers.3.feed_forward.w1 + layers.3.feed_forward.w3`), as is a
float8 config with another Transformer Engine recipe than tensorwise (`RECIPE`) or another fp8_format than
hybrid (`SETTING`: torchao's tensorwise figures are e4m3 forward, e5m2 gradients). Nothing is run: Transformer
Engine has no CPU build, and Megatron's own model is not the traced one; the report's `Execution` says "not
run" and why, and its `LayerCheck`s have no calls, GEMMs or SQNR.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fp8advisor.emit.megatron import (
    MegatronModule,
    MegatronPlan,
    check_recipe,
    first_match_config,
    plan,
    te_format,
    te_recipe,
)
from fp8advisor.errors import ConfigError, quote
from fp8advisor.frameworks.config_record import FrameworkConfig
from fp8advisor.frameworks.formats import ConfigFormat
from fp8advisor.frameworks.reader import read_config_text
from fp8advisor.frameworks.yaml_reader import load_yaml
from fp8advisor.recipes import Recipe, parse_recipe
from fp8advisor.request import AUTO, SuggestRequest
from fp8advisor.verification.differences import in_report_order
from fp8advisor.verification.native import NativeConversion, NotRun
from fp8advisor.verification.native_megatron import FRAMEWORK, megatron_conversion
from fp8advisor.verification.report import (
    Difference,
    DifferenceKind,
    Execution,
    LayerCheck,
    VerifyReport,
)

if TYPE_CHECKING:
    from fp8advisor.advice.records import Advice, LayerAdvice

#: `Execution.mode` of a report for which no step ran (the CLI words its verdict by it).
NOT_RUN_MODE = "not run"
NOT_RUN_WHY = (
    "Transformer Engine has no CPU build and Megatron runs its own GPTModel, not the traced model: which "
    "modules the file puts in float8 is checked, no float8 GEMM is run"
)
#: Transformer Engine's fp8_format that matches torchao's tensorwise casts (e4m3 forward, e5m2 gradients).
HYBRID = "hybrid"
_ASSUMES_FP8_FORMAT = "assumes --fp8-format on the command line, as the file's header says"


def verify_megatron(
    request: SuggestRequest, config_path: str | Path, *, predictor: Callable | None = None
) -> VerifyReport:
    """Check the Megatron-Core precision config at `config_path` against the advice for `request` (see the
    module docstring). `predictor` replaces the profile's predictions (tests), for the advice and for the
    fused modules. Raises ConfigError (exit 2) for a file Megatron (or, without it, its loader's checks)
    rejects, a recipe other than tensorwise, and a model whose Linear layers have no Megatron names."""
    from fp8advisor.inspect.layers import inspect_loaded
    from fp8advisor.inspect.target import load_model
    from fp8advisor.verification.settings import advice_for

    path = Path(config_path)
    document = load_yaml(path, read_config_text(path))
    requested = parse_recipe(str(request.recipe)) if request.recipe not in (None, AUTO) else None
    if requested is not None:
        check_recipe(requested)  # before the model is built
    recipe = requested or file_recipe(document)
    config = _config(path, enabled=True, recipe=recipe)
    meta = load_model(request.target, "meta")
    model_layers = inspect_loaded(meta, batch=request.batch, seq=request.traced_seq)
    advice = advice_for(model_layers, config, requested, request, predictor)
    megatron_plan = plan(advice, predictor or _profile_predictor(request))
    names = [module.name for module in megatron_plan.modules]
    float8, native = _float8_modules(path, document, names, megatron_plan.n_layers)
    source = (
        f"{native.framework}'s matcher" if isinstance(native, NativeConversion) else "the simulated matcher"
    )
    module_differences = _module_differences(megatron_plan, float8, source)
    differences = [*_config_differences(path, document, recipe), *module_differences]
    return VerifyReport(
        target=request.target,
        config=_config(path, enabled=bool(float8), recipe=recipe),
        recipe=recipe,
        profile=advice.profile_name,
        batch=request.batch,
        seq=request.seq,
        min_speedup=request.min_speedup,
        layers=_layer_checks(advice, megatron_plan, float8, module_differences),
        differences=tuple(in_report_order(differences)),
        execution=Execution("none", False, NOT_RUN_MODE, 0, 0, NOT_RUN_WHY, "none: nothing ran"),
        notes=tuple(
            dict.fromkeys(
                (_ASSUMES_FP8_FORMAT, *_head_note(megatron_plan), *model_layers.notes)
                + ((model_layers.seq_warning,) if model_layers.seq_warning else ())
            )
        ),
        framework=_framework_line(native, names, float8, len(module_differences)),
    )


def file_recipe(document: Any) -> Recipe:
    """The torchao recipe the file's float8 configs stand for (`emit.megatron.TE_RECIPES`): mxfp8_rceil when
    one names Transformer Engine's mxfp8, else tensorwise (what any other file is checked against)."""
    configs = document.get("configs") if isinstance(document, dict) else None
    for value in (configs or {}).values() if isinstance(configs, dict) else ():
        training = value.get("training_recipe") if isinstance(value, dict) else None
        if isinstance(training, dict) and training.get("fp8_quantization_recipe") == te_recipe(
            Recipe.MXFP8_RCEIL
        ):
            return Recipe.MXFP8_RCEIL
    return Recipe.TENSORWISE


def _config(path: Path, *, enabled: bool, recipe: Recipe = Recipe.TENSORWISE) -> FrameworkConfig:
    """The file as a FrameworkConfig: the Transformer Engine recipe it stands for, Megatron's matcher rule."""
    return FrameworkConfig(
        ConfigFormat.MEGATRON,
        path,
        enabled,
        recipe,
        None,
        "Megatron-Core's first enabled glob matcher (fnmatch) on each Transformer Engine module's name; "
        "float8 where its config has an fp8 recipe",
        notes=(_ASSUMES_FP8_FORMAT,) if enabled else ("no module's config has an fp8 recipe",),
    )


def _profile_predictor(request: SuggestRequest):
    """The predictor `suggest` decides a fused module with: `default_predictor` of the request's profile."""
    from fp8advisor.advice.linears import default_predictor
    from fp8advisor.predict.selection import select_profile

    return default_predictor(select_profile(request.profile, grouped=request.grouped_profile))


def _float8_modules(
    path: Path, document: Any, names: list[str], n_layers: int
) -> tuple[frozenset[str], NativeConversion | NotRun]:
    """The modules the file puts in float8, and who said so: Megatron-Core itself (`NativeConversion`), else
    the simulation (`NotRun`: why Megatron did not run)."""
    native = megatron_conversion(path, n_layers)
    if isinstance(native, NativeConversion):
        return native.linear_fqns, native
    configs, matchers = _checked_document(path, document)
    simulated = {name for name in names if _quantized(configs, first_match_config(matchers, name), path)}
    return frozenset(simulated), native


def file_float8_modules(
    path: Path, names: list[str], n_layers: int
) -> tuple[frozenset[str], NativeConversion | NotRun, Recipe, tuple[str, ...]]:
    """For `suggest --current`: the modules of `names` the precision config at `path` puts in float8 and who
    said so (`_float8_modules`: Megatron-Core's own matcher, else the simulation), the torchao recipe its
    float8 configs stand for (`file_recipe`: tensorwise, or mxfp8_rceil for TE's mxfp8), and the details of
    its float8 configs that train otherwise than that recipe (`_config_differences`)."""
    document = load_yaml(path, read_config_text(path))
    float8, native = _float8_modules(path, document, names, n_layers)
    recipe = file_recipe(document)
    details = tuple(difference.detail for difference in _config_differences(path, document, recipe))
    return float8, native, recipe, details


def _checked_document(path: Path, document: Any) -> tuple[dict, dict]:
    """The configs and the matchers, refused where Megatron's loader refuses them
    (megatron/core/quantization/quant_config.py `RecipeConfig._build_matchers`: an enabled matcher needs a
    `type`, only "glob" is implemented, and it needs a `pattern` and a `config`; `from_config_dict`: absent
    matchers are none) or where its matching would fail (a pattern or config key that is not a string)."""
    configs, matchers = document.get("configs"), document.get("matchers") or {}
    if not isinstance(configs, dict) or not isinstance(matchers, dict):
        raise _rejected(path, "configs and matchers must be mappings")
    for key, matcher in matchers.items():
        if not isinstance(matcher, dict):
            raise _rejected(path, f"matcher {quote(key)} is not a mapping")
        if not matcher.get("enabled", False):
            continue
        kind = matcher.get("type")
        if kind != "glob":
            has = "no type" if kind is None else f"type {quote(kind)}"
            raise _rejected(path, f"matcher {quote(key)} has {has}; Megatron-Core implements only glob")
        for field in ("pattern", "config"):
            if not isinstance(matcher.get(field), str):
                raise _rejected(path, f"matcher {quote(key)} has no string {field}")
    return configs, {"matchers": matchers}


def _quantized(configs: dict, key: str | None, path: Path) -> bool:
    """Whether the config a matcher picked runs the module quantized: its training_recipe names an fp8 or an
    fp4 recipe (megatron/core/extensions/transformer_engine.py `_get_fp8_autocast_for_quant_recipe`); no
    matcher, or `training_recipe: {}`, is bf16."""
    if key is None:
        return False
    if key not in configs:  # Megatron: `self.configs[config_key]` in `RecipeConfig.match`
        raise _rejected(path, f"a matcher names config {quote(key)}, which configs does not have")
    training = (configs[key] or {}).get("training_recipe") if isinstance(configs[key], dict) else None
    if not isinstance(training, dict):  # TEQuantizationParams.parse_from_config needs a training_recipe
        raise _rejected(path, f"config {quote(key)} has no training_recipe mapping")
    return any(
        training.get(recipe) is not None for recipe in ("fp8_quantization_recipe", "fp4_quantization_recipe")
    )


def _rejected(path: Path, why: str) -> ConfigError:
    return ConfigError(
        f"{FRAMEWORK} would reject this precision config (simulated: {FRAMEWORK} did not run): {why}",
        location=str(path),
        hint="write it again with `fp8advisor suggest --format megatron`",
    )


def _config_differences(path: Path, document: Any, advised: Recipe = Recipe.TENSORWISE) -> list[Difference]:
    """The float8 configs an enabled matcher names, where they train otherwise than the advice's recipe:
    another Transformer Engine recipe (or fp4), or another fp8_format than the recipe's (`TE_RECIPES`:
    hybrid for tensorwise, e4m3 for mxfp8)."""
    wanted, wanted_format = te_recipe(advised), te_format(advised)
    configs = document.get("configs") if isinstance(document.get("configs"), dict) else {}
    matchers = document.get("matchers") if isinstance(document.get("matchers"), dict) else {}
    named = dict.fromkeys(
        m["config"]
        for m in matchers.values()
        if isinstance(m, dict) and m.get("enabled", False) and isinstance(m.get("config"), str)
    )
    differences = []
    for key in named:
        training = configs.get(key, {}).get("training_recipe") if isinstance(configs.get(key), dict) else None
        if not isinstance(training, dict):
            continue
        recipe, fp4 = training.get("fp8_quantization_recipe"), training.get("fp4_quantization_recipe")
        if fp4 is not None or (recipe is not None and recipe != wanted):
            differences.append(
                Difference(
                    DifferenceKind.RECIPE,
                    f"{path} (configs.{key})",
                    f"Transformer Engine recipe {quote(recipe if fp4 is None else f'fp4 {fp4}')}; the advice "
                    f"is for {wanted} (torchao's {advised.value} figures)",
                )
            )
        elif recipe is not None and training.get("fp8_format", "e4m3") != wanted_format:  # TE's default: e4m3
            why = (
                "gradients in e4m3; the advice's tensorwise figures cast gradients to e5m2 "
                "(fp8_format: hybrid)"
                if wanted_format == HYBRID
                else "torchao's MXFP8 casts every operand, gradients included, to e4m3 (fp8_format: e4m3)"
            )
            differences.append(
                Difference(
                    DifferenceKind.SETTING,
                    f"{path} (configs.{key})",
                    f"fp8_format {quote(training.get('fp8_format', 'e4m3'))}; {why}",
                )
            )
    return differences


def parts_in_words(module: MegatronModule) -> str:
    """`linear_fc1 = layers.3.feed_forward.w1 + layers.3.feed_forward.w3`: a module and the traced model's
    Linear layers it fuses."""
    return f"{module.name.rpartition('.')[2]} = {' + '.join(part.fqn for part in module.parts)}"


def _module_differences(megatron_plan: MegatronPlan, float8: frozenset[str], source: str) -> list[Difference]:
    """One difference per module where the file (as `source` matched it) and the plan differ; and one per
    float8 name the plan does not have."""
    differences = []
    for module in megatron_plan.modules:
        in_file = module.name in float8
        if in_file == module.float8:
            continue
        kind = DifferenceKind.AGAINST_ADVICE if in_file else DifferenceKind.LEFT_BF16
        puts, advised = ("float8", "bf16") if in_file else ("bf16", "float8")
        detail = f"{source} puts it in {puts}, the advice in {advised}; {parts_in_words(module)}"
        differences.append(Difference(kind, module.name, detail))
    known = {module.name for module in megatron_plan.modules}
    for name in sorted(float8 - known):
        differences.append(
            Difference(DifferenceKind.AGAINST_ADVICE, name, f"{source} puts it in float8; not in the advice")
        )
    return differences


def _layer_checks(
    advice: Advice, megatron_plan: MegatronPlan, float8: frozenset[str], differences: list[Difference]
) -> tuple[LayerCheck, ...]:
    """A check per traced Linear layer: converted where its Megatron module is in float8, advised where the
    plan puts that module in float8 (the head never: Megatron's own ColumnParallelLinear); nothing ran."""
    module_of = {part.fqn: module for module in megatron_plan.modules for part in module.parts}
    # in the layer's own words, without its index: repeated blocks fold into one row of the table
    problems = {
        difference.subject: f"{difference.kind.value}: in {difference.subject.rpartition('.')[2]}"
        for difference in differences
    }
    checks = []
    for layer in advice.layers:
        if not layer.is_linear:
            continue
        module = module_of.get(layer.fqn)
        checks.append(
            LayerCheck(
                fqn=layer.fqn,
                K=layer.K,
                N=layer.N,
                M=layer.M,
                status=layer.status,
                advised=module is not None and module.float8,
                advice_reason=_reason(layer, module, megatron_plan),
                predicted_speedup=layer.predicted_speedup,
                converted=module is not None and module.name in float8,
                calls=0,
                float8_gemms=0,
                high_precision_gemms=0,
                float8_casts=0,
                problems=(problems[module.name],) if module is not None and module.name in problems else (),
            )
        )
    return tuple(checks)


def _reason(layer: LayerAdvice, module: MegatronModule | None, megatron_plan: MegatronPlan) -> str:
    """The advice's reason for a layer, with what Megatron makes of it."""
    if module is None:
        head = megatron_plan.head is not None and layer.fqn == megatron_plan.head.parts[0].fqn
        if head:
            return f"{layer.reason}; Megatron's output_layer is its own ColumnParallelLinear: always bf16"
        return layer.reason
    if module.fused and module.float8 != layer.convert:
        decided = "float8" if module.float8 else "bf16"
        return f"{layer.reason}; fused in {module.name}, decided as one GEMM: {decided}"
    return layer.reason


def _head_note(megatron_plan: MegatronPlan) -> tuple[str, ...]:
    head = megatron_plan.head
    if head is None or not head.float8:
        return ()
    return (
        f"the advice converts {head.parts[0].fqn}; Megatron's output_layer is not a Transformer Engine "
        "module and stays bf16 (the file says so): not a difference",
    )


def _framework_line(
    native: NativeConversion | NotRun, names: list[str], float8: frozenset[str], differences: int
) -> str:
    """The report's `framework` line: who matched the file, on which names, and what it found."""
    found = f"{len(float8)} in float8, " + (
        f"{differences} module(s) differ from the advice" if differences else "exactly the advice's"
    )
    if isinstance(native, NotRun):
        return (
            f"{native.note()}; the first-match glob rule (fnmatch) simulated on the advice's "
            f"{len(names)} Megatron module names: {found}"
        )
    return (
        f"{native.framework}'s own matcher ran (load_quantization_recipe, get_quant_config_or_none, "
        f"TEQuantizationParams) on a real GPTModel's {len(names)} Transformer Engine linear module names: "
        f"{found}; nothing ran in float8"
    )


__all__ = ["NOT_RUN_MODE", "file_float8_modules", "parts_in_words", "verify_megatron"]
