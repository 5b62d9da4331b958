"""torchao's roofline with three factors fitted to published measurements: the `fitted-roofline` predictor.

torchao's roofline (`fp8advisor.predict.roofline`) prices a float8 Linear from datasheet peaks and two
achievable fractions observed once on one H100. Real float8 kernels differ from it in three ways the published
measurements show, so the fitted roofline has one factor for each, per recipe:

- `fp8_throughput`: the float8 GEMMs reach this multiple of the roofline's float8 rate (scaled GEMMs with
  rowwise scales run below tensorwise's rate; compute-bound shapes show it);
- `cast_cost`: the cast kernels take this multiple of the roofline's cast time (their real kernels read and
  write more than the minimum, or fuse less);
- `float8_overhead_s`: a fixed time per float8 Linear forward+backward (the extra kernel launches and scale
  reductions that small shapes show).

    float8 time = sum over the GEMMs of max(compute / fp8_throughput, memory, floor)
                  + cast_cost x torchao's cast overhead + float8_overhead_s
    speedup = bf16 GEMM time (torchao's roofline, unchanged) / float8 time

A figure of torchao's LNLinearSigmoid benchmark is fitted with its LayerNorm and Sigmoid kernels in both
times (`neighbours_s`: they dilute the speedup there); predictions for a model's Linear leave them out (the
step model prices a model's norms and activations as terms of their own), so the factors describe the
Linear alone and a bare-Linear benchmark and an LNLinearSigmoid one inform the same three numbers.

The factors are fitted by least squares on log(speedup) (`fit_factors`, scipy), each source weighted equally
(a 216-point table counts as much as a 6-point PR), within bounds that keep them physical. Every GPU uses its
own peaks and bandwidth (`fp8advisor.gpus`); the factors are shared by the GPUs of the figures fitted.
`fp8advisor.predict.loso` decides by held-out error whether this predictor is the default.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from fp8advisor.gpus import GpuSpecs, get_specs
from fp8advisor.predict.roofline import cast_overhead_s, gemm_time_s, linear_gemm_time_s
from fp8advisor.recipes import BASELINE, Recipe

#: The `kind` of a recipe's model section that this module predicts.
FITTED_KIND = "fitted-roofline"
#: The fewest figures a recipe needs for its factors to be fitted (fewer: torchao's constants, unfitted).
MIN_FIGURES = 3
#: Bounds of the factors: (fp8_throughput, cast_cost, float8_overhead_s).
LOWER = (0.25, 0.25, 0.0)
UPPER = (1.5, 8.0, 100e-6)


@dataclass(frozen=True)
class RooflineFactors:
    """The fitted factors of one recipe (1, 1, 0: torchao's roofline unchanged)."""

    fp8_throughput: float = 1.0
    cast_cost: float = 1.0
    float8_overhead_s: float = 0.0
    n_figures: int = 0

    def to_model(self) -> dict:
        return {
            "kind": FITTED_KIND,
            "fp8_throughput": float(f"{self.fp8_throughput:.6g}"),
            "cast_cost": float(f"{self.cast_cost:.6g}"),
            "float8_overhead_s": float(f"{self.float8_overhead_s:.6g}"),
            "fitted_to_figures": self.n_figures,
        }

    @classmethod
    def from_model(cls, model: Mapping) -> RooflineFactors:
        return cls(
            fp8_throughput=float(model.get("fp8_throughput", 1.0)),
            cast_cost=float(model.get("cast_cost", 1.0)),
            float8_overhead_s=float(model.get("float8_overhead_s", 0.0)),
            n_figures=int(model.get("fitted_to_figures", 0) or 0),
        )


@dataclass(frozen=True)
class _Terms:
    """The parts of one Linear's roofline that do not depend on the factors (seconds)."""

    bf16_s: float  # the bf16 forward+backward (three GEMMs)
    compute_s: tuple[float, ...]  # each float8 GEMM's compute time at the roofline's float8 rate
    memory_s: tuple[float, ...]  # each float8 GEMM's memory time
    bf16_gemms_s: float  # GEMMs the recipe keeps in bf16 (rowwise_with_gw_hp's grad_weight)
    cast_s: float  # torchao's cast overhead
    floor_s: float
    neighbours_s: float = 0.0  # LayerNorm and Sigmoid of an LNLinearSigmoid benchmark, in both precisions


def neighbours_s(M: int, K: int, N: int, specs: GpuSpecs) -> float:
    """The LayerNorm and Sigmoid kernels of torchao's LNLinearSigmoid benchmark, forward and backward, at
    the roofline's achievable bandwidth (each at least the kernel floor), in bf16 and float8 alike:
    LayerNorm reads and writes M x K forward (4 bytes per element) and reads two, writes one backward (6);
    Sigmoid the same over M x N. They dilute the Linear's speedup in the benchmark and belong to other
    terms in a real model."""
    kernels = (4 * M * K, 6 * M * K, 4 * M * N, 6 * M * N)
    rate = specs.bandwidth_bytes_per_s * specs.bandwidth_efficiency
    return sum(max(num_bytes / rate, specs.kernel_floor_s) for num_bytes in kernels)


def _terms(
    M: int, K: int, N: int, recipe: Recipe, specs: GpuSpecs, fused: bool, with_neighbours: bool = False
) -> _Terms:
    """The factor-free parts, from torchao's roofline functions: compute alone (no memory limit, no floor) and
    memory alone, per float8 GEMM; with `with_neighbours`, the LNLinearSigmoid benchmark's other kernels."""
    compute_only = replace(specs, bandwidth_bytes_per_s=1e30, kernel_floor_s=0.0)
    memory_only = replace(specs, fp8_flops=1e30, kernel_floor_s=0.0)
    shapes = [(M, K, N), (M, N, K), (K, M, N)]  # output, grad_input, grad_weight
    float8 = shapes[:2] if recipe.grad_weight_in_bf16 else shapes
    kept = shapes[2:] if recipe.grad_weight_in_bf16 else []
    low = "mxfp8" if recipe.is_mx else "fp8"
    return _Terms(
        bf16_s=linear_gemm_time_s(M, K, N, BASELINE, specs),
        compute_s=tuple(gemm_time_s(*shape, low, compute_only) for shape in float8),
        memory_s=tuple(gemm_time_s(*shape, low, memory_only) for shape in float8),
        bf16_gemms_s=sum(gemm_time_s(*shape, "bf16", specs) for shape in kept),
        cast_s=cast_overhead_s(M, K, N, recipe, specs, fused=fused),
        floor_s=specs.kernel_floor_s,
        neighbours_s=neighbours_s(M, K, N, specs) if with_neighbours else 0.0,
    )


def fitted_speedup(
    M: int,
    K: int,
    N: int,
    recipe: Recipe | str,
    specs: GpuSpecs,
    factors: RooflineFactors,
    *,
    fused: bool,
    with_neighbours: bool = False,
) -> float:
    """The fitted roofline's forward+backward speedup of one Linear (the formula of the module docstring);
    `with_neighbours`: of torchao's LNLinearSigmoid benchmark around it (`neighbours_s` in both times)."""
    terms = _terms(int(M), int(K), int(N), Recipe(recipe), specs, fused, with_neighbours)
    float8 = _float8_s(terms, factors.fp8_throughput, factors.cast_cost, factors.float8_overhead_s)
    return (terms.bf16_s + terms.neighbours_s) / float8


def _float8_s(terms: _Terms, throughput: float, cast_cost: float, overhead_s: float) -> float:
    gemms = sum(
        max(compute / throughput, memory, terms.floor_s)
        for compute, memory in zip(terms.compute_s, terms.memory_s, strict=True)
    )
    return gemms + terms.bf16_gemms_s + cast_cost * terms.cast_s + overhead_s + terms.neighbours_s


def fit_factors(figures: Sequence, recipe: Recipe | str) -> RooflineFactors | None:
    """The factors of `recipe` that best reproduce `figures` (`evidence.LinearFigure`s; those of other recipes
    are ignored): least squares on log(speedup), each figure weighted 1/sqrt(its source's count) so that
    every source weighs the same. None when fewer than `MIN_FIGURES` figures are of this recipe."""
    from scipy.optimize import least_squares

    recipe = Recipe(recipe)
    chosen = [f for f in figures if f.recipe is recipe]
    if len(chosen) < MIN_FIGURES:
        return None
    per_source = Counter(f.source for f in chosen)
    weights = np.array([1.0 / math.sqrt(per_source[f.source]) for f in chosen])
    # an LNLinearSigmoid figure is the benchmark with its LayerNorm and Sigmoid; casts fused for every figure
    # (as `predict.speedup.WORKLOADS` prices them)
    terms = [_terms(f.M, f.K, f.N, recipe, get_specs(f.gpu), True, f.ln_sigmoid) for f in chosen]
    observed = np.log([f.speedup for f in chosen])

    def residuals(x: np.ndarray) -> np.ndarray:
        throughput, cast_cost, overhead_us = x
        predicted = [
            (t.bf16_s + t.neighbours_s) / _float8_s(t, throughput, cast_cost, overhead_us * 1e-6)
            for t in terms
        ]
        return weights * (np.log(predicted) - observed)

    lower = np.array([LOWER[0], LOWER[1], LOWER[2] * 1e6])
    upper = np.array([UPPER[0], UPPER[1], UPPER[2] * 1e6])
    start = np.clip(np.array([1.0, 1.0, 1.0]), lower, upper)
    result = least_squares(residuals, start, bounds=(lower, upper), x_scale=np.array([0.1, 0.5, 5.0]))
    throughput, cast_cost, overhead_us = (float(v) for v in result.x)
    return RooflineFactors(throughput, cast_cost, overhead_us * 1e-6, len(chosen))


__all__ = [
    "FITTED_KIND",
    "LOWER",
    "MIN_FIGURES",
    "UPPER",
    "RooflineFactors",
    "fit_factors",
    "fitted_speedup",
    "neighbours_s",
]
