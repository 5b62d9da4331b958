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
scale block, along K for the output, N for grad_input; `dims_supported`), and mxfp8_rceil M too (the tokens,
along which its weight-gradient casts run; `check_linear_dims`).
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
    MX_GROUPED_ALIGNMENT,
    Recipe,
    mx_unsupported_reason,
    parse_recipe,
    recipes_for_compute_capability,
)

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


def check_linear_dims(
    Ks: Iterable[int], Ns: Iterable[int], recipes: Iterable[str], *, Ms: Iterable[int] = ()
) -> None:
    """Raise `AdvisorError` (exit 2) when an MXFP8 recipe meets a K or N that is not a multiple of 32, or
    mxfp8_rceil (its weight gradient in MXFP8) a token count M that is not: the weight-gradient casts scale
    1x32 blocks along the tokens (torchao's CUDA cast asserts rows % 32, the emulated one "must be divisible
    by block_size 32"); mxfp8_rceil_wgrad_with_hp runs that GEMM in bf16 and takes any M."""
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
    mx_wgrad = [recipe for recipe in mx if not parse_recipe(recipe).grad_weight_in_bf16]
    bad = sorted({int(value) for value in Ms if int(value) % MX_BLOCK_SIZE})
    if mx_wgrad and bad:
        raise AdvisorError(
            f"--M {','.join(map(str, bad))}: {', '.join(mx_wgrad)} needs M (the tokens) a multiple of "
            f"{MX_BLOCK_SIZE}: its weight-gradient casts scale {MX_BLOCK_SIZE}-token blocks",
            hint=f"give M in multiples of {MX_BLOCK_SIZE}, or measure "
            f"{Recipe.MXFP8_RCEIL_WGRAD_WITH_HP.value} (a bf16 weight gradient), which takes any M",
        )


def grouped_alignment(recipe: str, *, emulate: bool) -> int:
    """What K, N and M_per_expert must be multiples of for a grouped point of `recipe` (module docstring)."""
    if recipe == BASELINE or not is_mx(recipe):
        return FLOAT8_GROUPED_ALIGNMENT
    return MX_BLOCK_SIZE if emulate else MX_GROUPED_ALIGNMENT


def aligned_tokens(tokens: Sequence[int], recipes: Sequence[str], *, emulate: bool) -> list[int]:
    """Each tokens-per-expert value rounded up to a multiple of what every recipe's grouped GEMM needs: what a
    named grid measures (the emulated grid's 16 per expert become 32 with an MXFP8 recipe)."""
    alignment = max(grouped_alignment(recipe, emulate=emulate) for recipe in recipes)
    return [-(-int(value) // alignment) * alignment for value in tokens]


def check_grouped_alignment(
    sizes: dict[str, Sequence[int]], recipes: Sequence[str], *, emulate: bool
) -> None:
    """Raise `AdvisorError` (exit 2) unless the `sizes` of each option ("M-per-expert", "K", "N": given, or
    the named grid's) are multiples of what every recipe's grouped GEMM needs (`grouped_alignment`)."""
    alignment = max(grouped_alignment(recipe, emulate=emulate) for recipe in recipes)
    mx = [recipe for recipe in recipes if is_mx(recipe)]
    for option, values in sizes.items():
        if any(int(value) % alignment for value in values):
            needs = f"{', '.join(mx)} on {'the CPU' if emulate else 'a GPU'}" if mx else "float8"
            raise AdvisorError(
                f"--{option} must be multiples of {alignment} with --grouped ({needs}), got {list(values)}",
                hint=f"torchao's {needs} grouped GEMM needs K, N and each expert's group of tokens to be "
                f"multiples of {alignment}, e.g. {alignment}, {alignment * 6}, {alignment * 16}",
            )


def grouped_recipes(
    recipes: Sequence[str] | None,
    defaults: Sequence[str],
    *,
    emulate: bool,
    capability: tuple[int, int] | None,
) -> tuple[str, ...]:
    """bf16 first, then the grouped recipes given (as `recipes.parse_recipe` names them: "mxfp8" is
    mxfp8_rceil), or the defaults of this device (`default_recipes` of the named grid's `defaults`)."""
    if not recipes:
        return default_recipes(defaults, capability, emulate=emulate)
    names = [name if name == BASELINE else parse_recipe(name).value for name in recipes]
    unknown = [name for name in names if name != BASELINE and name not in GROUPED_RECIPES]
    if unknown:
        raise AdvisorError(
            f"--recipes {','.join(unknown)}: grouped GEMMs have one float8 recipe, {GROUPED_RECIPES[0]} (and "
            f"MXFP8's {', '.join(r for r in GROUPED_RECIPES if is_mx(r))})",
            hint="leave --recipes out with --grouped (bf16, rowwise and what else this GPU runs)",
        )
    chosen = tuple(dict.fromkeys([BASELINE, *names]))
    check_recipes_on_device(chosen, None if emulate else capability)
    return chosen


#: The recipes torchao 0.18 runs grouped expert GEMMs with: float8 rowwise (`Float8TrainingRecipe.
#: FP8_ROWWISE`, its only float8 grouped recipe) and both MXFP8 recipes (`MXFP8TrainingOpConfig`).
GROUPED_RECIPES: tuple[str, ...] = (Recipe.ROWWISE.value, *(r.value for r in Recipe if r.is_mx))


__all__ = [
    "FLOAT8_GROUPED_ALIGNMENT",
    "GROUPED_RECIPES",
    "aligned_tokens",
    "check_grouped_alignment",
    "check_linear_dims",
    "check_recipes_on_device",
    "default_recipes",
    "gpu_capability",
    "grouped_alignment",
    "grouped_recipes",
    "is_mx",
]
