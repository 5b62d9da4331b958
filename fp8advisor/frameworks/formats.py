"""The training frameworks' float8 configs: one name for each, shared by the writer, the reader and the
simulation.

`suggest --format` writes them (`fp8advisor.emit`), `verify --config` reads them
(`fp8advisor.frameworks.reader`), and `fp8advisor.frameworks.filters` simulates which Linear layers each
converts. All three import `ConfigFormat` from here, so that the reader does not depend on the writer. One
member, `torchao-auto`, is a rule and not a file: torchao's `_auto_filter_for_recipe`, which torchtitan
applies for the `auto_filter_small_kn` entry; `FILE_FORMATS` are the others, the names `--format` takes.
`megatron` is written and recognised; `read_config` does not read it (Megatron's own model and Transformer
Engine's modules, not torchao's): `verification.megatron_check` checks it with Megatron's matcher.
`FORMAT_VERSIONS` is the one table of the framework versions each format's file is for and was checked with:
the header's "for:" line, docs/formats.md and the tests read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from fp8advisor.errors import ConfigError, quote
from fp8advisor.inspect.records import ExpertForm


class ConfigFormat(str, Enum):
    """A framework's float8 config, by the name `suggest --format` takes (plus the `torchao-auto` rule)."""

    TORCHTITAN_TOML = "torchtitan-toml"  # torchtitan 0.2.x job config: [quantize.linear.float8] filter_fqns
    TORCHTITAN_PY = "torchtitan-py"  # torchtitan 0.3 recipe: Float8LinearConverter.Config(filter_fqns=...)
    NEMO_AUTOMODEL = "nemo-automodel"  # YAML fp8.filter_fqns
    ACCELERATE = "accelerate"  # AORecipeKwargs(module_filter_func=exact set)
    TORCHAO = "torchao"  # convert_to_float8_training(module_filter_fn=exact set)
    FILTER = "filter"  # the bare filter_fqns list, matched as torchtitan and NeMo AutoModel match it
    MEGATRON = (
        "megatron"  # Megatron-Core + Transformer Engine: --te-precision-config-file YAML (glob matchers)
    )
    TORCHAO_AUTO = "torchao-auto"  # torchao's _auto_filter_for_recipe(recipe, filter_fqns): a rule, no file

    # The names `filters.Framework` gave the two torchtitan versions (aliases: the same members).
    TORCHTITAN = "torchtitan-toml"
    TORCHTITAN_0_3 = "torchtitan-py"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def _missing_(cls, value: object) -> ConfigFormat | None:
        """`filters.Framework`'s values, "torchtitan" and "torchtitan-0.3", still name their members."""
        for member in cls:
            if member.framework_name == value:
                return member
        return None

    @property
    def framework_name(self) -> str:
        """The framework as messages name it: "torchtitan" (0.2.x), "torchtitan-0.3", else the value."""
        return _FRAMEWORK_NAMES.get(self, self.value)

    @property
    def has_file(self) -> bool:
        """False for the torchao-auto rule, which torchtitan applies and no file holds."""
        return self is not ConfigFormat.TORCHAO_AUTO

    @property
    def uses_substring_filter(self) -> bool:
        """True when the only layer control is a list of FQN substrings to keep in bf16."""
        return self in SUBSTRING_FORMATS


_FRAMEWORK_NAMES = {ConfigFormat.TORCHTITAN_TOML: "torchtitan", ConfigFormat.TORCHTITAN_PY: "torchtitan-0.3"}

#: Formats whose `filter_fqns` entries keep a layer in bf16 when the entry is a substring of its FQN.
SUBSTRING_FORMATS: frozenset[ConfigFormat] = frozenset(
    {
        ConfigFormat.TORCHTITAN_TOML,
        ConfigFormat.TORCHTITAN_PY,
        ConfigFormat.NEMO_AUTOMODEL,
        ConfigFormat.FILTER,
        ConfigFormat.TORCHAO_AUTO,
    }
)

#: What a filter_fqns list means, in the words the terminal prints beside one (suggest, verify).
FILTER_FQNS_MEANING = "keeps in bf16 every nn.Linear whose FQN contains an entry (substring match)"

#: The formats a file holds: what `suggest --format` writes and `verify --config` reads.
FILE_FORMATS: tuple[ConfigFormat, ...] = tuple(fmt for fmt in ConfigFormat if fmt.has_file)


@dataclass(frozen=True)
class FormatVersions:
    """Which framework versions the file of one format is for (`for_range`: the series its keys and calls are
    written for) and the versions it was checked with, by running that framework's own loader and conversion
    on the files `suggest` writes (`checked_with`: (package, version) pairs). The header's "for:" line says
    it (`line`); fixed text, never the versions installed here, so that a file is the same on any machine."""

    for_range: str  # e.g. "torchtitan 0.3.x"
    checked_with: tuple[tuple[str, str], ...]  # e.g. (("torchtitan", "0.3.0"), ("torchao", "0.18.0"))

    def line(self) -> str:
        """The header line: `for: torchtitan 0.3.x (checked with torchtitan 0.3.0, torchao 0.18.0)`."""
        checked = ", ".join(f"{package} {version}" for package, version in self.checked_with)
        return f"{FOR_PREFIX}{self.for_range} (checked with {checked})"


#: How the header line naming the versions a file is for starts (`FormatVersions.line`).
FOR_PREFIX = "for: "

_TORCHAO = ("torchao", "0.18.0")

#: The one table of the framework versions each format's file is for and was checked with: the header's
#: "for:" line (`emit.header.header_lines`), docs/formats.md and the tests read it. A new framework version
#: is added here once its own loader and conversion have run on the files (tests/test_file_settings.py and
#: the per-framework tests).
FORMAT_VERSIONS: dict[ConfigFormat, FormatVersions] = {
    ConfigFormat.TORCHTITAN_TOML: FormatVersions("torchtitan 0.2.x", (("torchtitan", "0.2.2"), _TORCHAO)),
    ConfigFormat.TORCHTITAN_PY: FormatVersions("torchtitan 0.3.x", (("torchtitan", "0.3.0"), _TORCHAO)),
    ConfigFormat.NEMO_AUTOMODEL: FormatVersions(
        "NeMo AutoModel 0.7.x", (("nemo-automodel", "0.7.0"), _TORCHAO)
    ),
    ConfigFormat.ACCELERATE: FormatVersions("accelerate 1.15.x", (("accelerate", "1.15.0"), _TORCHAO)),
    ConfigFormat.TORCHAO: FormatVersions("torchao 0.18.x", (_TORCHAO,)),
    ConfigFormat.MEGATRON: FormatVersions(
        "Megatron-Core 0.16.x with Transformer Engine", (("megatron-core", "0.16.1"),)
    ),
    ConfigFormat.FILTER: FormatVersions(
        "the filter_fqns substring rule of torchtitan 0.2.x and 0.3.x and NeMo AutoModel 0.7.x",
        (("torchtitan", "0.2.2"), ("torchtitan", "0.3.0"), ("nemo-automodel", "0.7.0")),
    ),
}


def parse_format(name: str | ConfigFormat) -> ConfigFormat:
    """The file format called `name`; a ConfigError listing the valid names otherwise."""
    try:
        fmt = ConfigFormat(name)
    except ValueError:
        fmt = None
    if fmt is None or not fmt.has_file:
        valid = ", ".join(fmt.value for fmt in FILE_FORMATS)
        raise ConfigError(f"unknown --format {quote(name)}", hint=f"use one of: {valid}")
    return fmt


#: Formats whose file can hold the decision for grouped experts (3-D weights run through grouped GEMMs):
#: torchtitan 0.2 `[quantize.grouped_mm.float8] fqns` (substring), torchtitan 0.3
#: `Float8GroupedExpertsConverter` (every GroupedExperts, or none), torchao `quantize_(...,
#: Float8TrainingOpConfig(), filter_fn=...)` (exact). The others (NeMo AutoModel, accelerate, the filter list,
#: megatron) convert nn.Linear only: grouped experts stay bf16 there.
EXPERT_FORMATS: frozenset[ConfigFormat] = frozenset(
    {ConfigFormat.TORCHTITAN_TOML, ConfigFormat.TORCHTITAN_PY, ConfigFormat.TORCHAO}
)
#: Formats whose expert conversion has no filter: torchtitan 0.3's converter swaps every GroupedExperts.
ALL_OR_NONE_EXPERT_FORMATS: frozenset[ConfigFormat] = frozenset({ConfigFormat.TORCHTITAN_PY})

#: Formats whose expert conversion names modules and swaps every parameter under a matched one (torchao's
#: `quantize_(..., Float8TrainingOpConfig(), filter_fn=...)`: `_swap_params` recurses into the children;
#: torchtitan 0.2's converter calls it): a group whose module holds other parameters stays bf16 there.
MODULE_NAMED_EXPERT_FORMATS: frozenset[ConfigFormat] = EXPERT_FORMATS - ALL_OR_NONE_EXPERT_FORMATS


def file_can_convert(group, fmt) -> bool:
    """Whether the file of `fmt` can convert the grouped `group` (an `ExpertAdvice`) without converting
    anything else: a format with an expert switch, and for one naming modules, a module that holds only the
    group's 3-D weights (`ExpertAdvice.other_parameters` empty)."""
    if fmt not in EXPERT_FORMATS:
        return False
    return not (fmt in MODULE_NAMED_EXPERT_FORMATS and getattr(group, "other_parameters", ()))


#: `ExpertAdvice.form` of experts held as 3-D weights (`inspect.records.ExpertForm.GROUPED`); the other form,
#: a list of nn.Linear, is converted Linear by Linear like any other layer.
GROUPED_FORM = ExpertForm.GROUPED.value

#: torchtitan 0.2.0's converter for MoE grouped GEMMs, its `[model] converters` entry and section name
#: (at tag v0.2.0: torchtitan/components/quantization/float8.py `Float8GroupedMMConverter`,
#: torchtitan/config/job_config.py `Float8GroupedMM.fqns`). emit writes it, configs reads it.
TORCHTITAN_0_2_EXPERTS_CONVERTER = "quantize.grouped_mm.float8"


def grouped_expert_groups(experts) -> tuple:
    """The groups of `Advice.experts` held as 3-D weights (the ones a grouped-experts converter handles)."""
    return tuple(group for group in experts if group.form == GROUPED_FORM)


def expert_modules(group) -> tuple[str, ...]:
    """The modules that hold a grouped group's 3-D weights (each member's parent FQN), sorted: what torchao's
    `quantize_` must match to swap their parameters (it swaps every parameter of a matched module)."""
    return tuple(sorted({member.rpartition(".")[0] for member in group.members}))


def experts_total_speedup(groups) -> float | None:
    """Sum of bf16 over sum of float8 predicted times of `groups` (None: no float8 time predicted)."""
    bf16 = sum(group.bf16_time_s for group in groups)
    float8 = sum(group.float8_time_s for group in groups)
    return bf16 / float8 if bf16 > 0 and float8 > 0 else None


def all_or_none_converts(groups, min_speedup: float) -> bool:
    """What a format that converts every expert group or none does with `groups` (grouped form): all when the
    advice converts all, none when it converts none; when it converts some, all exactly when their total
    predicted speedup (`experts_total_speedup`) reaches `min_speedup`."""
    decisions = {group.convert for group in groups}
    if len(decisions) <= 1:
        return decisions == {True}
    total = experts_total_speedup(groups)
    return total is not None and total >= min_speedup


__all__ = [
    "ALL_OR_NONE_EXPERT_FORMATS",
    "EXPERT_FORMATS",
    "GROUPED_FORM",
    "MODULE_NAMED_EXPERT_FORMATS",
    "FILE_FORMATS",
    "FILTER_FQNS_MEANING",
    "FORMAT_VERSIONS",
    "FOR_PREFIX",
    "FormatVersions",
    "SUBSTRING_FORMATS",
    "ConfigFormat",
    "TORCHTITAN_0_2_EXPERTS_CONVERTER",
    "all_or_none_converts",
    "expert_modules",
    "file_can_convert",
    "experts_total_speedup",
    "grouped_expert_groups",
    "parse_format",
]
