"""The low-precision training recipes of torchao (float8 with tensorwise or rowwise scales; MXFP8 with 1x32
block scales), the bf16 baseline they are measured against, and how far a low-precision result lies from the
baseline's (SQNR): `bench` and `verify` build and judge converted layers alike.

Float8 recipes are `Float8LinearConfig.from_recipe_name`'s names and run on FP8 tensor cores (sm_89 and
newer); MXFP8 recipes are torchao's `MXFP8TrainingRecipe` names (`torchao.prototype.moe_training.config`,
torchao 0.18), whose block-scaled GEMMs need Blackwell (compute capability 10.x). "mxfp8" is read as
torchao's default MXFP8 recipe, `mxfp8_rceil` (what torchtitan 0.3's MX converters build).
"""

from __future__ import annotations

import math
from enum import Enum


class Recipe(str, Enum):
    """A torchao recipe name: float8 (`Float8LinearConfig.from_recipe_name`) or MXFP8
    (`MXFP8TrainingRecipe`)."""

    TENSORWISE = "tensorwise"
    ROWWISE = "rowwise"
    ROWWISE_WITH_GW_HP = "rowwise_with_gw_hp"
    # MXFP8: e4m3 elements, one E8M0 scale per 32 elements, scales rounded up (RCEIL, cuBLAS's rule)
    MXFP8_RCEIL = "mxfp8_rceil"
    # the same with the weight-gradient GEMM in bf16
    MXFP8_RCEIL_WGRAD_WITH_HP = "mxfp8_rceil_wgrad_with_hp"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def _missing_(cls, value):
        return cls.MXFP8_RCEIL if value == MXFP8_ALIAS else None

    @property
    def is_mx(self) -> bool:
        """An MXFP8 recipe: 1x32 block scales, Blackwell's block-scaled GEMMs."""
        return self in MX_RECIPES

    @property
    def grad_weight_in_bf16(self) -> bool:
        """The recipe keeps the weight-gradient GEMM in bf16."""
        return self in (Recipe.ROWWISE_WITH_GW_HP, Recipe.MXFP8_RCEIL_WGRAD_WITH_HP)

    @property
    def block_size(self) -> int:
        """What K and N must be multiples of: 16 for torch._scaled_mm, 32 (the scale block) for MXFP8."""
        return MX_BLOCK_SIZE if self.is_mx else 16


#: The name users and torchtitan's docs give MXFP8 (`--model.converters=mx`): torchao's default recipe.
MXFP8_ALIAS = "mxfp8"

#: Elements per E8M0 scale in MXFP8 (OCP MX spec 1.0; torchao's block_size=32).
MX_BLOCK_SIZE = 32

#: What K, N and each expert's token group must be multiples of for torchao 0.18's MXFP8 grouped GEMM on a
#: GPU: its CuTeDSL 1x32 cast (`mxfp8_quantize_2d_1x32_cutedsl`) asserts K % 128 and M % 128 and asks for
#: groups of 128 rows; torchtitan 0.3's `pad_multiple` docstring says the same (its quantization/mx.py).
MX_GROUPED_ALIGNMENT = 128

#: Names of FP4 recipes (torchao's NVFP4 / MXFP4), refused with their own message: not advised.
FP4_PREFIXES = ("nvfp4", "mxfp4")

FLOAT8_RECIPES: tuple[Recipe, ...] = (Recipe.TENSORWISE, Recipe.ROWWISE, Recipe.ROWWISE_WITH_GW_HP)
MX_RECIPES: tuple[Recipe, ...] = (Recipe.MXFP8_RCEIL, Recipe.MXFP8_RCEIL_WGRAD_WITH_HP)

#: What every float8 figure is compared with: the same module in bf16, also under torch.compile.
BASELINE = "bf16"

ALL_RECIPES: tuple[Recipe, ...] = tuple(Recipe)


def recipes_for_compute_capability(capability: tuple[int, int] | None) -> tuple[Recipe, ...]:
    """The recipes a GPU of this compute capability runs: float8 from sm_89 (Ada, Hopper), MXFP8 on
    Blackwell datacenter parts (10.x); every recipe when the capability is unknown (a model, a table)."""
    if capability is None:
        return ALL_RECIPES
    major, minor = capability
    if major == 10:
        return ALL_RECIPES
    return FLOAT8_RECIPES if (major, minor) >= (8, 9) else ()


def mx_unsupported_reason(capability: tuple[int, int] | None) -> str | None:
    """Why MXFP8 cannot run on a GPU of this compute capability, or None when it can."""
    if capability is None or capability[0] == 10:
        return None
    return (
        f"MXFP8 needs Blackwell's block-scaled GEMMs (compute capability 10.x), not "
        f"{capability[0]}.{capability[1]}"
    )


def parse_recipe(name: str) -> Recipe:
    """`Recipe` from its name; a clear error listing the valid names otherwise."""
    from fp8advisor.errors import AdvisorError, parse_choice

    if isinstance(name, str) and name.lower().startswith(FP4_PREFIXES):
        raise AdvisorError(
            f"fp8advisor does not advise {name}: FP4 training (torchao's NVFP4, torchtitan 0.3's NVFP4 "
            "converter) has no profile, roofline or config format here",
            hint="use an FP8 recipe (tensorwise, rowwise, rowwise_with_gw_hp, mxfp8); README: 'Blackwell'",
        )
    return parse_choice(Recipe, name, "recipe")


def dims_divisible_by_16(K: int, N: int) -> bool:
    """torch._scaled_mm needs K and N divisible by 16; every framework skips other Linear layers."""
    return K % 16 == 0 and N % 16 == 0


def dims_supported(recipe: Recipe | str, K: int, N: int, *, grouped: bool = False) -> bool:
    """K and N fit the recipe's GEMMs: multiples of 16 for float8, of 32 (the scale block) for MXFP8, whose
    casts scale 1x32 blocks along K (forward), N (grad_input) and the tokens (grad_weight); `grouped`: of 128
    for MXFP8 grouped experts (`MX_GROUPED_ALIGNMENT`)."""
    recipe = parse_recipe(recipe)
    size = MX_GROUPED_ALIGNMENT if grouped and recipe.is_mx else recipe.block_size
    return K % size == 0 and N % size == 0


def mx_config(recipe: Recipe | str, *, emulate: bool):
    """torchao's `MXFP8TrainingOpConfig.from_recipe(MXFP8TrainingRecipe(recipe))`; `emulate`: torchao's
    EMULATED kernel preference (PyTorch-native casts and a dequantized GEMM), which runs on a CPU."""
    import dataclasses

    from fp8advisor import compat

    config_class, recipe_class, kernel_preference = compat.mx_training_api()
    config = config_class.from_recipe(recipe_class(parse_recipe(recipe).value))
    return dataclasses.replace(config, kernel_preference=kernel_preference.EMULATED) if emulate else config


def convert_linears(model, recipe: Recipe | str, module_filter, *, emulate: bool):
    """Convert `model`'s Linear layers that `module_filter(module, fqn)` accepts, as torchao does for the
    recipe: `convert_to_float8_training` (float8: Float8Linear modules) or `quantize_` with the MXFP8 config
    (the weights become torchao's MXFP8 training tensors). Returns the model."""
    recipe = parse_recipe(recipe)
    if recipe.is_mx:
        from torch import nn
        from torchao.quantization import quantize_

        def linear_filter(module, fqn: str) -> bool:
            return isinstance(module, nn.Linear) and module_filter(module, fqn)

        quantize_(model, mx_config(recipe, emulate=emulate), filter_fn=linear_filter)
        return model
    from torchao.float8 import convert_to_float8_training

    return convert_to_float8_training(
        model, config=float8_config(recipe, emulate=emulate), module_filter_fn=module_filter
    )


def is_converted(module) -> bool:
    """A Linear that runs in low precision: torchao's Float8Linear, or a Linear whose weight is torchao's
    MXFP8 training tensor."""
    from fp8advisor import compat

    if isinstance(module, compat.float8_linear()):
        return True
    weight = getattr(module, "weight", None)
    return weight is not None and isinstance(weight.data, compat.mx_weight_tensor_class())


def float8_config(recipe: Recipe | str, *, emulate: bool):
    """torchao's `Float8LinearConfig.from_recipe_name(recipe)`; `emulate`: torchao's emulated float8 (casts to
    float8 for real, multiplies the float8 values in float32), which runs on a CPU."""
    import dataclasses

    from torchao.float8 import Float8LinearConfig

    recipe = parse_recipe(recipe)
    if recipe.is_mx:
        raise ValueError(f"{recipe} is an MXFP8 recipe: use mx_config")
    config = Float8LinearConfig.from_recipe_name(recipe.value)
    return dataclasses.replace(config, emulate=True) if emulate else config


def sqnr_db(reference, actual) -> float:
    """Signal-to-quantization-noise ratio in dB, torchao's `compute_error`: 20 log10(|reference| /
    |reference - actual|), in float32. inf when the two are equal (no noise), even when both are zero."""
    import torch

    from fp8advisor import compat

    reference, actual = reference.detach().float(), actual.detach().float()
    value = float(compat.compute_error(reference, actual))
    if math.isnan(value) and torch.equal(reference, actual):  # 0 / 0: both all zeros
        return math.inf
    return value
