"""The framework's own conversion against the simulated one: `verify`'s check that the framework converts
what the file's header says.

`verify` reads a config with fp8advisor's readers (`fp8advisor.frameworks.reader`) and converts the model with
torchao's swap and the framework's filter as those readers understand it: a simulation of the framework. Where
the framework itself is installed, `native_conversion` also runs the framework's own loader and converter on
the model (torchtitan's converters on its model built on the meta device, NeMo AutoModel's and accelerate's
float8 paths, torchao's calls as the file writes them), and
`native_differences` names every Linear layer and expert module where it differs from the simulation, which
`verify` checked against the advice. Where it is not installed (or is another version than the file is for),
`NotRun` says why, and `verify` says that its check is a simulation.

Each framework has its module: `native_torchtitan` (torchtitan-toml: 0.2.x, torchtitan-py: 0.3.x),
`native_torchao` (torchao, accelerate, nemo-automodel); their records are in `native`. A Megatron precision
config is not read as a torchao conversion: `megatron_check` checks it, with `native_megatron` (Megatron's
matcher on GPTModel's names). A bare filter list has no framework of its own: it is always simulated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fp8advisor.verification.native import NativeConversion, NotRun
from fp8advisor.verification.report import Difference, DifferenceKind

if TYPE_CHECKING:
    from torch import nn

    from fp8advisor.frameworks.config_record import FrameworkConfig


def native_conversion(
    config: FrameworkConfig, target: str, meta_model: nn.Module
) -> NativeConversion | NotRun:
    """Run the framework's own loader and conversion for the file `config` was read from, on the model of
    `target` (`meta_model`: that model built on the meta device, unconverted; it stays so: each framework
    gets a copy, which it may convert). Never raises for a framework that is missing or of another version:
    `NotRun`."""
    import copy

    from fp8advisor.frameworks.formats import ConfigFormat

    meta_model = copy.deepcopy(meta_model)  # meta tensors: no memory

    fmt = config.framework
    if fmt in (ConfigFormat.TORCHTITAN_TOML, ConfigFormat.TORCHTITAN_PY):
        from fp8advisor.verification.native_torchtitan import torchtitan_conversion

        return torchtitan_conversion(config, target, meta_model)
    if fmt in (ConfigFormat.TORCHAO, ConfigFormat.ACCELERATE, ConfigFormat.NEMO_AUTOMODEL):
        from fp8advisor.verification.native_torchao import torchao_family_conversion

        return torchao_family_conversion(config, target, meta_model)
    return NotRun(
        "torchtitan / NeMo AutoModel", "a bare filter_fqns list names no framework: matched as they match it"
    )


def native_differences(
    native: NativeConversion | NotRun,
    linear_fqns: list[str],
    simulated: set[str],
    simulated_experts: set[str] | None,
    advised: set[str],
) -> list[Difference]:
    """Where the framework's own conversion differs from the simulated one `verify` checked against the
    advice (which the file's header describes): one `DifferenceKind.FRAMEWORK` per differing Linear layer
    (`linear_fqns`, the model's, in order) and per differing expert module, saying what the framework does
    and what the advice says. `simulated_experts`: the expert modules the simulation converts (None: the
    model has no grouped experts). Nothing when the framework did not run."""
    if not isinstance(native, NativeConversion):
        return []
    differences = []
    if native.other_model:
        differences.append(Difference(DifferenceKind.FRAMEWORK, "the file's model", native.other_model))
    for fqn in linear_fqns:
        if (fqn in native.linear_fqns) == (fqn in simulated):
            continue
        does = "converts it to float8" if fqn in native.linear_fqns else "keeps it in bf16"
        wanted = "advised for float8" if fqn in advised else "advised to stay bf16"
        differences.append(
            Difference(DifferenceKind.FRAMEWORK, fqn, f"{native.framework}'s own conversion {does}; {wanted}")
        )
    if simulated_experts is not None and native.expert_modules is not None:
        for module in sorted(native.expert_modules ^ simulated_experts):
            does = "converts" if module in native.expert_modules else "keeps in bf16"
            differences.append(
                Difference(
                    DifferenceKind.FRAMEWORK,
                    module,
                    f"{native.framework}'s own conversion {does} these grouped experts, unlike fp8advisor's "
                    "reading of the file",
                )
            )
    return differences


def framework_line(native: NativeConversion | NotRun, differences: int, has_expert_groups: bool) -> str:
    """What `verify` says about the framework's own conversion, in one line (the report's `framework`).
    `has_expert_groups`: the file can convert grouped experts of this model, which a framework run that
    reports none (`expert_modules` None) has not checked."""
    if isinstance(native, NotRun):
        return native.note()
    unchecked = (
        "; the grouped experts were not checked by it (simulated)"
        if has_expert_groups and native.expert_modules is None
        else ""
    )
    if differences:
        return (
            f"{native.framework}'s own conversion ran: it converts otherwise than fp8advisor's reading of "
            f"the file, in {differences} place(s){unchecked}"
        )
    experts = "" if not native.expert_modules else f" and {len(native.expert_modules)} expert module(s)"
    return (
        f"{native.framework}'s own conversion ran: it converts the same {len(native.linear_fqns)} Linear "
        f"layer(s){experts} as fp8advisor's reading of the file, checked below{unchecked}"
    )


def framework_notes(native: NativeConversion | NotRun) -> tuple[str, ...]:
    """What the framework's run said (its warnings, what was lifted or left out), each as a report note."""
    return native.notes if isinstance(native, NativeConversion) else ()


__all__ = ["framework_line", "framework_notes", "native_conversion", "native_differences"]
