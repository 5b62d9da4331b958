"""Which recipes a `bench` sweep may measure on this device, and the shapes each recipe's kernels take.

Float8 recipes run on FP8 tensor cores (compute capability 8.9 and newer); MXFP8 recipes need Blackwell's
block-scaled GEMMs (10.x: B200, GB200, B300), so on any other GPU `bench --recipes mxfp8...` stops before
measuring, with `recipes.mx_unsupported_reason`'s message (exit 2). `--emulate` runs every recipe on the CPU
(torchao's emulated float8, and MXFP8's EMULATED kernel preference).

The default recipes of a grid are the float8 recipes everywhere (the named grids' lists, as before MX), plus
the MXFP8 recipes on a GPU that runs them (`recipes.recipes_for_compute_capability`); `--emulate` keeps the
float8 list (each MX graph costs about 7 to 11 s to compile on one CPU, `bench`'s emulated grid would double
its time), and measures MXFP8 where `--recipes` names it.

Shapes: a float8 GEMM needs K and N multiples of 16 (`torch._scaled_mm`); an MXFP8 Linear multiples of 32 (the
scale block, along K for the output, N for grad_input, the tokens M for grad_weight; `dims_supported`).
torchao 0.18's MXFP8 grouped GEMM (`mxfp8_grouped_mm._compute_fwd_sm100` / `_compute_dgrad_sm100`) casts the
token rows A (M_total, K) and the output gradient (M_total, N) with `mxfp8_quantize_2d_1x32_cutedsl`, which
asserts "K must be divisible by 128" and "M must be divisible by 128" (so N too, for the gradient), and whose
docstring asks group sizes in multiples of 128 (its scales come out in one 128-row blocked layout for all the
groups); the weight-gradient casts divide the group offsets by 32 (`offs // 32`). So on a GPU
an MX grouped point needs K, N and M_per_expert multiples of 128; the EMULATED path (`to_mx` per row, a
dequantized `torch._grouped_mm`) needs 32, as its weight-gradient blocks run along the tokens and must not
straddle two experts' groups.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from fp8advisor.errors import AdvisorError
from fp8advisor.recipes import (
    BASELINE,
    MX_BLOCK_SIZE,
    Recipe,
    mx_unsupported_reason,
    parse_recipe,
    recipes_for_compute_capability,
)

#: What torchao 0.18's MXFP8 grouped GEMM asserts of K, the token rows and (through grad_output) N on a GPU
#: (`mxfp8_quantize_2d_1x32_cutedsl`); its emulated path needs the scale block only.
MX_GROUPED_GPU_ALIGNMENT = 128
#: torchao's float8 grouped GEMM: K, N and every group's size multiples of 16.
FLOAT8_GROUPED_ALIGNMENT = 16


def gpu_capability() -> tuple[int, int]:
    """The compute capability of the CUDA GPU this process measures on."""
    import torch

    major, minor = torch.cuda.get_device_capability()
    return (int(major), int(minor))


def is_mx(recipe: str) -> bool:
    """An MXFP8 recipe name ("bf16" is not a recipe: False)."""
    return recipe != BASELINE and parse_recipe(recipe).is_mx


def check_recipes_on_device(recipes: Iterable[str], capability: tuple[int, int] | None) -> None:
    """Raise `AdvisorError` (exit 2) when `recipes` hold an MXFP8 recipe and the GPU of `capability` cannot
    run it (None: emulated or unknown, every recipe allowed)."""
    mx = [recipe for recipe in recipes if is_mx(recipe)]
    reason = mx_unsupported_reason(capability) if mx else None
    if reason is not None:
        raise AdvisorError(
            f"--recipes {','.join(mx)}: {reason}",
            hint="run MXFP8 on a B200, GB200 or B300; --emulate runs it on the CPU; "
            f"on this GPU: {', '.join(r.value for r in recipes_for_compute_capability(capability))}",
        )


def default_recipes(
    named: Sequence[str], capability: tuple[int, int] | None, *, emulate: bool
) -> tuple[str, ...]:
    """A grid's recipes when --recipes is not given: the named grid's (float8) list, plus the MXFP8 recipes
    on a GPU that runs them (not under --emulate, not when the capability is unknown)."""
    if emulate or capability is None:
        return tuple(named)
    supported = {recipe.value for recipe in recipes_for_compute_capability(capability)}
    extra = [recipe.value for recipe in Recipe if recipe.is_mx and recipe.value in supported]
    return tuple(dict.fromkeys([*(r for r in named if r == BASELINE or r in supported), *extra]))


def check_linear_dims(Ks: Iterable[int], Ns: Iterable[int], recipes: Iterable[str]) -> None:
    """Raise `AdvisorError` (exit 2) when an MXFP8 recipe meets a K or N that is not a multiple of 32."""
    mx = [recipe for recipe in recipes if is_mx(recipe)]
    if not mx:
        return
    for axis, values in (("K", Ks), ("N", Ns)):
        bad = sorted({int(value) for value in values if int(value) % MX_BLOCK_SIZE})
        if bad:
            raise AdvisorError(
                f"--{axis} {','.join(map(str, bad))}: {', '.join(mx)} needs K and N multiples of "
                f"{MX_BLOCK_SIZE} (the MXFP8 scale block)",
                hint=f"give multiples of {MX_BLOCK_SIZE}, or measure MXFP8 in a separate --out",
            )


def grouped_alignment(recipe: str, *, emulate: bool) -> int:
    """What K, N and M_per_expert must be multiples of for a grouped point of `recipe` (module docstring)."""
    if recipe == BASELINE or not is_mx(recipe):
        return FLOAT8_GROUPED_ALIGNMENT
    return MX_BLOCK_SIZE if emulate else MX_GROUPED_GPU_ALIGNMENT


#: The recipes torchao 0.18 runs grouped expert GEMMs with: float8 rowwise (`Float8TrainingRecipe.
#: FP8_ROWWISE`, its only float8 grouped recipe) and both MXFP8 recipes (`MXFP8TrainingOpConfig`).
GROUPED_RECIPES: tuple[str, ...] = (Recipe.ROWWISE.value, *(r.value for r in Recipe if r.is_mx))


__all__ = [
    "FLOAT8_GROUPED_ALIGNMENT",
    "GROUPED_RECIPES",
    "MX_GROUPED_GPU_ALIGNMENT",
    "check_linear_dims",
    "check_recipes_on_device",
    "default_recipes",
    "gpu_capability",
    "grouped_alignment",
    "is_mx",
]
