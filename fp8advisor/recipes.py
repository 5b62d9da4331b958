"""The float8 training recipes of torchao, and the bf16 baseline they are measured against."""

from __future__ import annotations

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
