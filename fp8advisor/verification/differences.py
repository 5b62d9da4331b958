"""What `verify` reports as differing (`Difference`), and why.

The config as a whole against the request: its recipe against --recipe, its FSDP float8 all-gather against
the request's (`--float8-all-gather`, from the header's check command), and FP8 switched off while the
advice converts some layer. Each nn.Linear: the config's decision against `advise` for the same model, batch,
seq, recipe and profile; against what the trace saw run (every converted layer must run float8 GEMMs forward
and backward, every other layer none: `fp8advisor.verification.trace`); and its SQNR against the threshold
(`fp8advisor.verification.numerics`). And each filter entry that matches no nn.Linear FQN. Grouped MoE
experts are compared by `fp8advisor.verification.experts`.
"""

from __future__ import annotations

from collections.abc import Sequence

from fp8advisor.frameworks.config_record import FrameworkConfig
from fp8advisor.frameworks.filters import entries_matching_nothing
from fp8advisor.frameworks.module_rules import AUTO_FILTER_FLAG
from fp8advisor.inspect.records import LayerStatus
from fp8advisor.recipes import Recipe
from fp8advisor.verification.report import Difference, DifferenceKind, LayerCheck
from fp8advisor.verification.trace import LayerTrace


def config_differences(
    config: FrameworkConfig, requested_recipe: Recipe | None, *, advised_any: bool
) -> list[Difference]:
    """What differs in the config as a whole: the recipe, and FP8 switched off while the advice converts
    some layer (when it converts none, FP8 off is the advised outcome, and the recipe of nothing is moot)."""
    differences = []
    if config.enabled and requested_recipe is not None and config.recipe is not requested_recipe:
        assert config.recipe is not None
        differences.append(
            Difference(
                DifferenceKind.RECIPE,
                str(config.path),
                f"the config trains with {config.recipe.value}, --recipe asks {requested_recipe.value}",
            )
        )
    if not config.enabled and advised_any:
        differences.append(
            Difference(
                DifferenceKind.FP8_OFF,
                str(config.path),
                "; ".join(n for n in config.notes if n.startswith("FP8 is off")) or "FP8 is off",
            )
        )
    return differences


def setting_differences(config: FrameworkConfig, float8_all_gather: bool | None) -> list[Difference]:
    """The settings of a config that trains in float8 against the request's: FSDP float8 all-gather against
    `float8_all_gather` (`settings.requested_float8_all_gather`; None: nothing asks, not compared; nor where
    the file's format has no such setting, `FrameworkConfig.float8_all_gather` None)."""
    if not config.enabled or float8_all_gather is None or config.float8_all_gather is None:
        return []
    if config.float8_all_gather == float8_all_gather:
        return []
    says, asks = ("on", "off") if config.float8_all_gather else ("off", "on")
    return [
        Difference(
            DifferenceKind.SETTING,
            str(config.path),
            f"FSDP float8 all-gather is {says} in the config, the request (--float8-all-gather in its "
            f"header's check command) has it {asks}: the step was predicted with it {asks}",
        )
    ]


def check_layers(
    linear_layers: Sequence,
    advice,
    config: FrameworkConfig,
    converted: set[str],
    traced: dict[str, LayerTrace],
    sqnr: dict[str, tuple[float, float | None]],
    sqnr_threshold_db: float,
) -> tuple[list[LayerCheck], list[Difference]]:
    """`check_layer` of each nn.Linear, in order: the checks and all their differences."""
    advice_by_fqn = {layer.fqn: layer for layer in advice.layers}
    checks, differences = [], []
    for layer in linear_layers:
        check, layer_differences = check_layer(
            layer,
            advice_by_fqn.get(layer.fqn),
            config,
            converted,
            traced.get(layer.fqn, LayerTrace()),
            sqnr.get(layer.fqn, (None, None)),
            sqnr_threshold_db,
        )
        checks.append(check)
        differences.extend(layer_differences)
    return checks, differences


def check_layer(
    layer,
    layer_advice,
    config: FrameworkConfig,
    converted: set[str],
    traced: LayerTrace,
    sqnr: tuple[float | None, float | None],
    sqnr_threshold_db: float,
) -> tuple[LayerCheck, list[Difference]]:
    """One nn.Linear: the config's decision against the advice, against what the trace saw run, and its
    SQNR against the threshold."""
    advised = bool(layer_advice and layer_advice.convert)
    is_converted = layer.fqn in converted
    float8_gemms = traced.forward_float8 + traced.backward_float8
    high_precision = traced.forward_high_precision + traced.backward_high_precision
    problems: list[tuple[DifferenceKind, str]] = []
    never_called = layer.status is LayerStatus.NOT_CALLED or traced.calls == 0
    if is_converted and never_called:
        problems.append(
            (DifferenceKind.NEVER_CALLED, "the forward never calls it: no float8 ever runs there")
        )
    elif is_converted and (traced.forward_float8 == 0 or traced.backward_float8 == 0):
        problems.append(
            (
                DifferenceKind.NO_FLOAT8,
                f"float8 GEMMs forward {traced.forward_float8}, backward {traced.backward_float8}",
            )
        )
    # A module registered under several names is swapped per name: the calls through a name left
    # unconverted run in bf16 (a same-parent alias, or a shared module the filter names only once).
    left_bf16 = [alias for alias in layer.aliases if alias not in converted]
    if is_converted and left_bf16:
        problems.append(
            (
                DifferenceKind.NO_FLOAT8,
                f"the same module is also registered as {', '.join(left_bf16)}, which the config leaves "
                "in bf16: the calls through that name run in bf16",
            )
        )
    if is_converted and not advised and not never_called:
        reason = layer_advice.reason if layer_advice else "not advised"
        problems.append((DifferenceKind.AGAINST_ADVICE, f"advice: {reason}"))
    if advised and not is_converted:
        problems.append((DifferenceKind.LEFT_BF16, _why_not_converted(config, layer)))
    if not is_converted and (float8_gemms or traced.float8_casts):
        problems.append((DifferenceKind.UNEXPECTED_FLOAT8, f"{float8_gemms} float8 GEMM(s)"))
    output_sqnr, grad_sqnr = sqnr
    low = [
        f"{what} {value:.1f} dB"
        for what, value in (("output", output_sqnr), ("input gradient", grad_sqnr))
        if value is not None and value < sqnr_threshold_db
    ]
    if low:
        problems.append((DifferenceKind.NUMERICS, f"SQNR {', '.join(low)} < {sqnr_threshold_db:g} dB"))
    check = LayerCheck(
        fqn=layer.fqn,
        K=layer.K,
        N=layer.N,
        M=layer.M,
        status=layer.status,
        advised=advised,
        advice_reason=layer_advice.reason if layer_advice else "",
        predicted_speedup=(layer_advice.predicted_speedup if layer_advice else None),
        converted=is_converted,
        calls=traced.calls,
        float8_gemms=float8_gemms,
        high_precision_gemms=high_precision,
        float8_casts=traced.float8_casts,
        sqnr_output_db=output_sqnr,
        sqnr_grad_input_db=grad_sqnr,
        problems=tuple(f"{kind.value}: {detail}" for kind, detail in problems),
    )
    return check, [Difference(kind, layer.fqn, detail) for kind, detail in problems]


def _why_not_converted(config: FrameworkConfig, layer) -> str:
    if not config.enabled:
        return "FP8 is off in the config"
    entries = [entry for entry in (config.filter_fqns or ()) if entry in layer.fqn]
    if entries and config.rule.startswith(("substring", "torchao")):
        return f"filter entr{'y' if len(entries) == 1 else 'ies'} {', '.join(map(repr, entries))} match it"
    return f"the config's rule ({config.rule}) keeps it in bf16"


def unused_entry_differences(config: FrameworkConfig, linear_layers: Sequence) -> list[Difference]:
    """Filter entries (or names in a Python filter's literal set) that are a substring of no nn.Linear FQN
    (aliases included)."""
    every_name = [fqn for layer in linear_layers for fqn in (layer.fqn, *layer.aliases)]
    entries = [entry for entry in (config.filter_fqns or ()) if entry != AUTO_FILTER_FLAG]
    return [
        Difference(DifferenceKind.UNUSED_ENTRY, entry, "a substring of no nn.Linear FQN of this model")
        for entry in entries_matching_nothing(entries, every_name)
    ]


_KIND_ORDER = list(DifferenceKind)


def in_report_order(differences: list[Difference]) -> list[Difference]:
    """Sorted by kind, in `DifferenceKind`'s order (stable: each kind keeps the order it was found in)."""
    return sorted(differences, key=lambda d: _KIND_ORDER.index(d.kind))


__all__ = [
    "check_layer",
    "check_layers",
    "config_differences",
    "in_report_order",
    "setting_differences",
    "unused_entry_differences",
]
