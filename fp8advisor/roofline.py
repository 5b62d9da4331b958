"""torchao's roofline model of a float8 Linear's forward+backward, in plain Python (no sympy, no torch).

This is `torchao/testing/training/roofline_utils.py` (torchao 0.18) as `benchmarks/float8/float8_roofline.py`
uses it with `--enable_fusion_modeling`, term for term:

- one GEMM takes `max(2*M*K*N / (peak * gemm_efficiency), bytes / (bandwidth * bandwidth_efficiency), floor)`
  with bytes = (M*K + K*N) * b + 2*M*N (b = 2 for bf16, 1 for float8; the output is bf16 either way);
- a Linear's forward+backward is three GEMMs: output (M, K, N), grad_input (M, N, K), grad_weight (K, M, N);
  `rowwise_with_gw_hp` keeps the grad_weight GEMM in bf16;
- the float8 cast overhead is one `max(bytes / (bandwidth * bandwidth_efficiency), floor)` per cast kernel of
  input (M x K), weight (K x N) and grad_output (M x N), with the per-recipe kernel lists of
  `_cast_kernel_bytes`; every listed kernel pays at least the floor, even one that moves no bytes (torchao
  counts it so);
- roofline speedup = bf16 GEMM time / (float8 GEMM time + cast overhead). LayerNorm and Sigmoid are not
  modelled; `fused=True` (torchao's `enable_fusion_modeling`) assumes the casts of input and grad_output fuse
  into the LayerNorm and Sigmoid kernels before them, as in the published LNLinearSigmoid benchmark.

GPU constants are torchao's `gpu_name_to_specs`, keyed here by family ("H100", "B200", ...). torchao has no
H200 entry: ours uses H100's compute peaks and achievable fractions with H200's 4.8e12 B/s memory bandwidth.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from fp8advisor.errors import ProfileError
from fp8advisor.recipes import BASELINE, Recipe

BYTES_PER_BF16 = 2
BYTES_PER_FLOAT8 = 1

#: torchao's KERNEL_LAUNCH_OVERHEAD_SEC: the GPU time of a one-element Triton kernel on an H100.
KERNEL_FLOOR_S = 2e-6


@dataclass(frozen=True)
class GpuSpecs:
    """The roofline constants of one GPU family (FLOP/s are dense, without sparsity)."""

    family: str
    bf16_flops: float
    fp8_flops: float
    bandwidth_bytes_per_s: float
    gemm_efficiency: float = (
        0.78  # achievable fraction of peak FLOP/s (torchao: observed on large H100 GEMMs)
    )
    bandwidth_efficiency: float = (
        0.92  # achievable fraction of peak bandwidth (torchao: Triton pointwise on H100)
    )
    kernel_floor_s: float = KERNEL_FLOOR_S
    note: str = ""

    def to_json(self) -> dict:
        data = asdict(self)
        data.pop("family")
        data.pop("note")
        return data

    @classmethod
    def from_json(cls, data: dict, *, family: str, note: str = "") -> GpuSpecs:
        try:
            return cls(
                family=family,
                bf16_flops=float(data["bf16_flops"]),
                fp8_flops=float(data["fp8_flops"]),
                bandwidth_bytes_per_s=float(data["bandwidth_bytes_per_s"]),
                gemm_efficiency=float(data.get("gemm_efficiency", 0.78)),
                bandwidth_efficiency=float(data.get("bandwidth_efficiency", 0.92)),
                kernel_floor_s=float(data.get("kernel_floor_s", KERNEL_FLOOR_S)),
                note=note,
            )
        except (KeyError, TypeError, ValueError) as error:
            raise ProfileError(
                f"roofline constants are incomplete or not numbers ({error})",
                hint="a roofline section needs bf16_flops, fp8_flops and bandwidth_bytes_per_s",
            ) from None


_TORCHAO = "torchao/testing/training/roofline_utils.py"

#: Family -> constants. The keys are what `gpu_family` returns for a CUDA device name.
GPU_SPECS: dict[str, GpuSpecs] = {
    "H100": GpuSpecs(
        "H100",
        989e12,
        1979e12,
        2.4e12,
        0.78,
        0.92,
        note=f"torchao {_TORCHAO} 'NVIDIA H100' (2.4e12 B/s: Meta's H100)",
    ),
    "H200": GpuSpecs(
        "H200",
        989e12,
        1979e12,
        4.8e12,
        0.78,
        0.92,
        note=f"not in torchao: H100 compute peaks and fractions of {_TORCHAO}, H200's 4.8e12 B/s bandwidth",
    ),
    "B200": GpuSpecs(
        "B200",
        2.25e15,
        4.5e15,
        (7680 / 8) * 3.996e9 * 2,
        0.78,
        0.92,
        note=f"torchao {_TORCHAO} 'NVIDIA B200' (fractions copied from H100 there)",
    ),
    "B300": GpuSpecs(
        "B300", 2.25e15, 4.5e15, 8e12, 0.82, 0.84, note=f"torchao {_TORCHAO} 'NVIDIA B300 SXM6 AC'"
    ),
    "GB200": GpuSpecs(
        "GB200",
        2.25e15,
        4.5e15,
        8.0e12,
        0.78,
        0.92,
        note=f"torchao {_TORCHAO} 'NVIDIA GB200' (fractions from H100)",
    ),
    "MI300X": GpuSpecs(
        "MI300X",
        1307e12,
        2614e12,
        5.3e12,
        0.78,
        0.92,
        note=f"torchao {_TORCHAO} 'AMD Instinct MI300X' (fractions from H100)",
    ),
}

#: CUDA compute capability per NVIDIA family, for profiles built without a device at hand (tables, models).
FAMILY_COMPUTE_CAPABILITY: dict[str, tuple[int, int]] = {
    "H100": (9, 0),
    "H200": (9, 0),
    "B200": (10, 0),
    "GB200": (10, 0),
    "B300": (10, 3),
}

# CUDA device-name prefixes per family, most specific first ("NVIDIA GB200" must not read as B200).
_NAME_PREFIXES: tuple[tuple[str, str], ...] = (
    ("NVIDIA GB200", "GB200"),
    ("NVIDIA B300", "B300"),
    ("NVIDIA B200", "B200"),
    ("NVIDIA H200", "H200"),
    ("NVIDIA GH200", "H100"),  # Grace Hopper: an H100 die (HBM3 96 GB or HBM3e 144 GB)
    ("NVIDIA H100", "H100"),
    ("AMD Instinct MI300X", "MI300X"),
)


def gpu_family(device_name: str | None) -> str | None:
    """'NVIDIA H100 80GB HBM3' -> 'H100'; a family name is returned as is; None for a GPU the model lacks."""
    if not device_name:
        return None
    if device_name in GPU_SPECS:
        return device_name
    for prefix, family in _NAME_PREFIXES:
        if device_name.startswith(prefix):
            return family
    return None


def get_specs(gpu: str | GpuSpecs) -> GpuSpecs:
    """Constants for a family ("H100") or a CUDA device name ("NVIDIA H100 80GB HBM3") or GpuSpecs."""
    if isinstance(gpu, GpuSpecs):
        return gpu
    family = gpu_family(gpu)
    if family is None:
        raise ProfileError(
            f"the roofline model has no constants for GPU {gpu!r}",
            hint=f"known: {', '.join(GPU_SPECS)}; measure this GPU with `fp8advisor bench` and `fit`",
        )
    return GPU_SPECS[family]


def _floored_memory_time_s(num_bytes: float, specs: GpuSpecs) -> float:
    return max(num_bytes / (specs.bandwidth_bytes_per_s * specs.bandwidth_efficiency), specs.kernel_floor_s)


def gemm_time_s(M: int, K: int, N: int, dtype: str, gpu: str | GpuSpecs) -> float:
    """Roofline time of one (M x K) @ (K x N) GEMM, inputs in `dtype` ("bf16" or "fp8"), output bf16."""
    specs = get_specs(gpu)
    if dtype == "bf16":
        peak, input_bytes = specs.bf16_flops, BYTES_PER_BF16
    elif dtype == "fp8":
        peak, input_bytes = specs.fp8_flops, BYTES_PER_FLOAT8
    else:
        raise ValueError(f"dtype must be 'bf16' or 'fp8', not {dtype!r}")
    compute_s = 2 * M * K * N / (peak * specs.gemm_efficiency)
    memory_bytes = (M * K + K * N) * input_bytes + M * N * BYTES_PER_BF16
    memory_s = memory_bytes / (specs.bandwidth_bytes_per_s * specs.bandwidth_efficiency)
    return max(compute_s, memory_s, specs.kernel_floor_s)


def linear_gemm_time_s(M: int, K: int, N: int, recipe: Recipe | str, gpu: str | GpuSpecs) -> float:
    """The three GEMMs of a Linear's forward+backward: output, grad_input and grad_weight."""
    if recipe == BASELINE:
        dtypes = ("bf16", "bf16", "bf16")
    else:
        recipe = Recipe(recipe)
        # rowwise_with_gw_hp keeps the grad_weight GEMM in high precision
        dtypes = ("fp8", "fp8", "bf16" if recipe is Recipe.ROWWISE_WITH_GW_HP else "fp8")
    return (
        gemm_time_s(M, K, N, dtypes[0], gpu)  # input @ weight.t = output
        + gemm_time_s(M, N, K, dtypes[1], gpu)  # grad_output @ weight = grad_input
        + gemm_time_s(K, M, N, dtypes[2], gpu)  # input.t @ grad_output = grad_weight
    )


def cast_kernel_bytes(role: str, numel: int, recipe: Recipe | str, *, fused: bool) -> list[int]:
    """Bytes read+written by each cast kernel of one tensor (torchao's `get_tensor_memory_traffic_ovhd_s`).

    `role` is "input", "weight" or "grad_output"; `fused` says the first read fuses into the op before
    (torchao passes it for input and grad_output only, never for the weight).
    """
    recipe = Recipe(recipe)
    n, bf16, fp8 = numel, BYTES_PER_BF16, BYTES_PER_FLOAT8
    if role not in ("input", "weight", "grad_output"):
        raise ValueError(f"role must be input, weight or grad_output, not {role!r}")
    if recipe is Recipe.TENSORWISE:
        amax_read = 0 if fused else bf16 * n  # kernel 1: amax stage 1; kernel 2 (amax stage 2) moves ~0 bytes
        if role == "weight":
            return [amax_read, 0, bf16 * n + fp8 * n, bf16 * n + fp8 * n]  # cast for fwd, cast for bwd
        return [amax_read, 0, bf16 * n + 2 * fp8 * n]  # one cast writing both layouts
    if recipe is Recipe.ROWWISE:
        if role == "weight":
            first = fp8 * n if fused else bf16 * n + fp8 * n
            return [first, 2 * bf16 * n, bf16 * n + fp8 * n]  # cast dim0, transpose, cast dim1
        first = fp8 * n + bf16 * n if fused else 2 * bf16 * n + fp8 * n  # cast dim0 + write transposed bf16
        return [first, bf16 * n + fp8 * n]
    # rowwise_with_gw_hp: input and grad_output are cast once (the grad_weight GEMM is bf16)
    if role == "weight":
        return [
            bf16 * n + fp8 * n,
            0,
            bf16 * n + fp8 * n,
        ]  # the middle kernel turns row scales into one scale
    return [fp8 * n if fused else bf16 * n + fp8 * n]


def cast_overhead_s(
    M: int, K: int, N: int, recipe: Recipe | str, gpu: str | GpuSpecs, *, fused: bool = True
) -> float:
    """Time of every float8 cast kernel of a Linear's forward+backward; each costs at least the floor."""
    specs = get_specs(gpu)
    kernels = (
        cast_kernel_bytes("input", M * K, recipe, fused=fused)
        + cast_kernel_bytes("weight", K * N, recipe, fused=False)
        + cast_kernel_bytes("grad_output", M * N, recipe, fused=fused)
    )
    return sum(_floored_memory_time_s(num_bytes, specs) for num_bytes in kernels)


def linear_fwd_bwd_time_s(
    M: int, K: int, N: int, recipe_or_bf16: Recipe | str, gpu: str | GpuSpecs, *, fused: bool = True
) -> float:
    """Modelled forward+backward time of one Linear: its three GEMMs plus, for float8, the cast overhead."""
    gemms = linear_gemm_time_s(M, K, N, recipe_or_bf16, gpu)
    if recipe_or_bf16 == BASELINE:
        return gemms
    return gemms + cast_overhead_s(M, K, N, recipe_or_bf16, gpu, fused=fused)


def roofline_speedup(
    M: int, K: int, N: int, recipe: Recipe | str, gpu: str | GpuSpecs, *, fused: bool = True
) -> float:
    """torchao's `r_fp8_gemm_and_ovhd_spdp`: bf16 GEMM time / (float8 GEMM time + cast overhead)."""
    return linear_fwd_bwd_time_s(M, K, N, BASELINE, gpu) / linear_fwd_bwd_time_s(
        M, K, N, recipe, gpu, fused=fused
    )


__all__ = [
    "FAMILY_COMPUTE_CAPABILITY",
    "GPU_SPECS",
    "GpuSpecs",
    "cast_kernel_bytes",
    "cast_overhead_s",
    "gemm_time_s",
    "get_specs",
    "gpu_family",
    "linear_fwd_bwd_time_s",
    "linear_gemm_time_s",
    "roofline_speedup",
]
