"""The float8 training recipes of torchao, the bf16 baseline they are measured against, and how far a
float8 result lies from the baseline's (SQNR): `bench` and `verify` build and judge float8 layers alike."""

from __future__ import annotations

import math
from enum import Enum


class Recipe(str, Enum):
    """A torchao float8 recipe name, as `Float8LinearConfig.from_recipe_name` accepts it."""

    TENSORWISE = "tensorwise"
    ROWWISE = "rowwise"
    ROWWISE_WITH_GW_HP = "rowwise_with_gw_hp"

    def __str__(self) -> str:
        return self.value


#: What every float8 figure is compared with: the same module in bf16, also under torch.compile.
BASELINE = "bf16"

ALL_RECIPES: tuple[Recipe, ...] = tuple(Recipe)


def parse_recipe(name: str) -> Recipe:
    """`Recipe` from its name; a clear error listing the valid names otherwise."""
    from fp8advisor.errors import parse_choice

    return parse_choice(Recipe, name, "recipe")


def dims_divisible_by_16(K: int, N: int) -> bool:
    """torch._scaled_mm needs K and N divisible by 16; every framework skips other Linear layers."""
    return K % 16 == 0 and N % 16 == 0


def float8_config(recipe: Recipe | str, *, emulate: bool):
    """torchao's `Float8LinearConfig.from_recipe_name(recipe)`; `emulate`: torchao's emulated float8 (casts to
    float8 for real, multiplies the float8 values in float32), which runs on a CPU."""
    import dataclasses

    from torchao.float8 import Float8LinearConfig

    config = Float8LinearConfig.from_recipe_name(parse_recipe(recipe).value)
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
