"""MXFP8 in each config format: which formats can express torchao 0.18's MXFP8 recipes, and the parts of the
files that differ from float8's.

Read from each framework's own installed source (the versions of `frameworks.formats.FORMAT_VERSIONS`):

- torchtitan 0.3 (torchtitan-py): `MXFP8LinearConverter.Config(fqns=[...])` converts the Linear.Config
  entries whose FQN contains an entry, every one when the list is empty, with no K / N check
  (torchtitan/components/quantization/mx.py:53-60, 82-83); its MXFP8Linear is torchao's
  `moe_training.mxfp8_linear.MXFP8Linear` with its defaults (mx.py:38-44: RCEIL scales, MXFP8 grad_weight),
  so `mxfp8_rceil_wgrad_with_hp` cannot be written. `MXFP8GroupedExpertsConverter.Config(recipe_name=
  "mxfp8_rceil", pad_multiple=32)` converts every GroupedExperts (no filter; recipe_name is a Literal of
  "mxfp8_rceil" alone, mx.py:154) and swaps the token dispatcher for one that pads each expert's token group
  to `pad_multiple` (mx.py:187, components/quantization/utils.py:33-58). The file carries an inclusion list
  (`shortest_filter.shortest_inclusion_filter`), never an empty one.
- torchtitan 0.2.x (torchtitan-toml): its `MXLinearConverter` builds torchao's
  `MXLinearConfig.from_recipe_name` (torchtitan 0.2.2 components/quantization/mx.py:55-61), which torchao
  0.13 to 0.16 define (torchao/prototype/mx_formats/config.py; pytorch/ao tags v0.13.0..v0.16.0) and 0.17
  removed: it cannot
  train with the torchao whose MXFP8 kernels the advice predicts (0.18), nor be checked here. Refused.
- torchao (torchao): `quantize_(model, MXFP8TrainingOpConfig.from_recipe(MXFP8TrainingRecipe.<NAME>),
  filter_fn=...)` (torchao/prototype/moe_training/config.py:29-35, 174-204): both recipes, an exact filter.
- Megatron-Core 0.16 with Transformer Engine (megatron): `fp8_quantization_recipe: mxfp8` in a per-module
  config maps to TE's `MXFP8BlockScaling(fp8_format=...)` (megatron/core/extensions/transformer_engine.py
  `_get_fp8_autocast_for_quant_recipe`), `--fp8-recipe mxfp8` on the command line (megatron/core/enums.py
  `Fp8Recipe.mxfp8`; megatron/core/fp8_utils.py `get_fp8_recipe`). torchao's MXFP8 casts every operand,
  gradients included, to e4m3 (mxfp8_linear.py:61-63): TE's `e4m3` format. TE has no MXFP8 recipe with a
  bf16 grad_weight GEMM: `mxfp8_rceil_wgrad_with_hp` is refused.
- NeMo AutoModel 0.7 (nemo-automodel): its `fp8:` section is torchao float8 only (components/quantization/
  fp8.py:34, `recipe_name: Literal["tensorwise", "rowwise", "rowwise_with_gw_hp"]`); its MXFP8 paths are
  Transformer Engine's MXFP8BlockScaling for its own TE-backed models (components/models/common/utils.py:
  243-270, `te_fp8.recipe`) and torchao's MXFP8 grouped GEMMs for MoE experts (utils.py:521,
  `experts="torch_mm_mxfp8"`), neither of which selects Linear layers. Refused.
- accelerate 1.15 (accelerate): `AORecipeKwargs` hands a torchao `Float8LinearConfig` to
  `convert_to_float8_training`; nothing in accelerate names MXFP8. Refused.
- the bare filter list (filter): an exclusion list (keep in bf16 what an entry names) under the float8
  frameworks' rule; torchtitan 0.3's MX list is an inclusion list, and the same entries would mean the
  opposite there. Refused rather than written to mislead.
"""

from __future__ import annotations

from fp8advisor.advice.records import Advice
from fp8advisor.emit.syntax import exact_set_literal, quoted, string_list_lines
from fp8advisor.errors import ConfigError
from fp8advisor.frameworks.formats import ConfigFormat
from fp8advisor.frameworks.shortest_filter import FilterList, shortest_inclusion_filter
from fp8advisor.recipes import MX_GROUPED_ALIGNMENT, Recipe

#: The formats that write MXFP8, as the refusals name them.
MX_WRITERS = "torchtitan-py (torchtitan 0.3), torchao or megatron"

#: torchtitan 0.3's `MXFP8GroupedExpertsConverter.Config(pad_multiple=...)`: each expert's token group padded
#: to 128 rows, what torchao's CuTeDSL cast on sm_100 needs (torchtitan's own docstring, mx.py:161-165:
#: "requires multiples of 128"; its default, 32, is the scale block alone).
TORCHTITAN_PAD_MULTIPLE = MX_GROUPED_ALIGNMENT

#: What each format that cannot write MXFP8 says, with the framework source it rests on.
_CANNOT = {
    ConfigFormat.TORCHTITAN_TOML: (
        "torchtitan 0.2.x's MX converter builds torchao's MXLinearConfig.from_recipe_name (torchtitan 0.2.2 "
        "components/quantization/mx.py:55-61), which only torchao 0.13 to 0.16 have (0.17 removed it): it "
        "cannot run the MXFP8 Linear of torchao 0.18 that this advice predicts, nor be checked by verify"
    ),
    ConfigFormat.NEMO_AUTOMODEL: (
        "NeMo AutoModel 0.7's fp8: section is torchao float8 only (components/quantization/fp8.py:34: "
        "recipe_name tensorwise, rowwise or rowwise_with_gw_hp); its MXFP8 paths (te_fp8.recipe: mxfp8 for "
        "its Transformer Engine models, experts: torch_mm_mxfp8 for MoE experts) select no Linear layers"
    ),
    ConfigFormat.ACCELERATE: (
        "accelerate 1.15 trains FP8 with torchao's Float8LinearConfig (AORecipeKwargs) or Transformer "
        "Engine / MS-AMP; it has no MXFP8 recipe for torchao"
    ),
    ConfigFormat.FILTER: (
        "a bare filter list is an exclusion list (keep in bf16 every Linear an entry names), while "
        "torchtitan 0.3's MX converter takes an inclusion list (fqns: convert what an entry names): one "
        "list would mean opposite things"
    ),
}


def check_mx_format(fmt: ConfigFormat, recipe: Recipe) -> None:
    """A ConfigError (exit 2) when the file of `fmt` cannot express the MX `recipe` (module docstring)."""
    if not recipe.is_mx:
        return
    if fmt in _CANNOT:
        raise ConfigError(
            f"--format {fmt.value} cannot write {recipe.value}: {_CANNOT[fmt]}",
            hint=f"write MXFP8 with --format {MX_WRITERS}",
        )
    if recipe is Recipe.MXFP8_RCEIL_WGRAD_WITH_HP and fmt in (
        ConfigFormat.TORCHTITAN_PY,
        ConfigFormat.MEGATRON,
    ):
        why = (
            "torchtitan 0.3's MXFP8LinearConverter builds torchao's MXFP8Linear with its defaults "
            "(mx.py:38-44: grad_weight in MXFP8) and its grouped converter takes recipe_name mxfp8_rceil "
            "only (mx.py:154)"
            if fmt is ConfigFormat.TORCHTITAN_PY
            else "Transformer Engine's MXFP8BlockScaling has no bf16 grad_weight GEMM option"
        )
        raise ConfigError(
            f"--format {fmt.value} cannot write {recipe.value}: {why}",
            hint="write it with --format torchao (MXFP8TrainingRecipe.MXFP8_RCEIL_WGRAD_WITH_HP), or use "
            "--recipe mxfp8_rceil",
        )


def inclusion_list(advice: Advice) -> FilterList:
    """torchtitan 0.3's `fqns` for the advised Linear layers: the shortest substrings that select exactly
    them (`shortest_filter.shortest_inclusion_filter`; a layer no list can name alone stays bf16)."""
    return shortest_inclusion_filter(advice.layers, advice.convert_fqns, advice.recipe)


def torchtitan_converters(advice: Advice, experts: bool) -> tuple[str, str]:
    """(the converter lines of the recipe function's `converters=[...]`, the names to import) for MX."""
    lines = ""
    names = []
    entries = inclusion_list(advice).entries if advice.convert_fqns else ()
    if entries:  # never an empty fqns: torchtitan would convert every Linear
        names.append("MXFP8LinearConverter")
        lines += (
            "            MXFP8LinearConverter.Config(\n"
            "                # convert each Linear whose FQN contains an entry (an empty list: all of them)\n"
            "                fqns=[\n" + string_list_lines(entries, " " * 20) + "                ],\n"
            "                model_compile_enabled=True,\n"
            "            ),\n"
        )
    if experts:
        names.insert(0, "MXFP8GroupedExpertsConverter")
        lines += (
            "            # every GroupedExperts: MXFP8 grouped GEMMs; each expert's token group is\n"
            "            # padded to 128 rows (pad_multiple): torchao's sm_100 MX cast needs groups of 128\n"
            "            MXFP8GroupedExpertsConverter.Config(\n"
            f"                recipe_name={quoted(Recipe.MXFP8_RCEIL.value)},\n"
            f"                pad_multiple={TORCHTITAN_PAD_MULTIPLE},\n"
            "                model_compile_enabled=True,\n"
            "            ),\n"
        )
    return lines, ", ".join(names)


def torchtitan_what(advice: Advice) -> str:
    """The recipe function's docstring lines on what the MX converters do."""
    if not advice.convert_fqns or not inclusion_list(advice).entries:
        return (
            "No Linear layer is converted (none is worth it, or no fqns entry can name one alone without\n"
            "another): no MXFP8LinearConverter, whose empty fqns would convert every Linear.\n"
        )
    return (
        "Keep the MXFP8LinearConverter.Config call as generated. fqns lists the Linear layers to\n"
        "convert (substring match): torchtitan converts every Linear whose FQN contains an entry.\n"
    )


def what_it_converts(advice: Advice) -> str:
    """The header line of the torchtitan-py MX file: its inclusion list, simulated."""
    fl = inclusion_list(advice)
    if fl.exact:
        return f"fqns simulated: converts exactly the {len(advice.convert_fqns)} advised Linear layers"
    if not fl.entries:
        return (
            f"fqns: no substring list names any of the {len(advice.convert_fqns)} advised layers alone: "
            "no MXFP8LinearConverter written, all kept in bf16"
        )
    return (
        f"fqns simulated: converts {len(fl.converted)} of the {len(advice.convert_fqns)} advised layers; no "
        f"substring list can name the others alone, {len(fl.demoted)} kept in bf16"
    )


def torchao_recipe_member(recipe: Recipe) -> str:
    """`MXFP8TrainingRecipe.MXFP8_RCEIL`: torchao's enum member for the recipe (config.py:29-35)."""
    return f"MXFP8TrainingRecipe.{recipe.name}"


def torchao_body(advice: Advice, fqns: tuple[str, ...], experts: tuple[str, ...]) -> tuple[str, str, str]:
    """(imports, constants and filter function, the call) of the torchao file for an MX recipe: one
    `quantize_` with torchao's MXFP8 config, whose filter names the advised Linear layers and expert modules
    exactly (torchao swaps the parameters of each module the filter accepts: conversion_utils.py:107-108)."""
    imports = (
        "from torchao.prototype.moe_training.config import MXFP8TrainingOpConfig, MXFP8TrainingRecipe\n"
        "from torchao.quantization.quant_api import quantize_\n"
    )
    gemms = (
        "the output and grad_input GEMMs (grad_weight in bf16)"
        if advice.recipe.grad_weight_in_bf16
        else "forward and backward"
    )
    config = f"MXFP8TrainingOpConfig.from_recipe({torchao_recipe_member(advice.recipe)})"
    if experts:  # from_recipe leaves the padding off (config.py:185, 193): unpadded groups would not run
        config = (
            f"dataclasses.replace(\n    {config},\n"
            "    # each expert's token group padded to the 32-row MX scale block inside the grouped GEMM\n"
            "    # (torchao pads and unpads; without it every group must already be a multiple of 32)\n"
            "    pad_token_groups_for_grouped_mm=True,\n)"
        )
    constants = (
        "# torchao's MXFP8 training config for the advised recipe: e4m3 elements with one E8M0 scale per 32\n"
        f"# (RCEIL rounding), {gemms}; K and N of every advised layer are multiples of 32.\n"
        f"MXFP8_CONFIG = {config}\n"
        "\n"
        f"MXFP8_LAYERS = {exact_set_literal(fqns)}\n"
    )
    test = "fqn in MXFP8_LAYERS"
    if experts:
        constants += f"MXFP8_EXPERTS = {exact_set_literal(experts)}\n"
        test += " or fqn in MXFP8_EXPERTS"
    constants += (
        "\n"
        "\n"
        "def mxfp8_filter_fn(module, fqn):\n"
        '    """True: swap this module\'s weights for MXFP8 training. An exact FQN match."""\n'
        f"    return {test}\n"
    )
    call = "    quantize_(model, config=MXFP8_CONFIG, filter_fn=mxfp8_filter_fn)\n"
    return imports, constants, call


__all__ = [
    "MX_WRITERS",
    "TORCHTITAN_PAD_MULTIPLE",
    "check_mx_format",
    "inclusion_list",
    "torchao_body",
    "torchao_recipe_member",
    "torchtitan_converters",
    "torchtitan_what",
    "what_it_converts",
]
