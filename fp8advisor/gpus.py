"""The GPU catalogue: the roofline constants of each GPU family, and which family a CUDA device name is.

GPU constants are torchao's `gpu_name_to_specs` (`torchao/testing/training/roofline_utils.py`), keyed here by
family ("H100", "B200", ...). torchao has no H200 entry: ours uses H100's compute peaks and achievable
fractions with H200's 4.8e12 B/s memory bandwidth. The roofline model that uses them is
`fp8advisor.predict.roofline`; a profile names its GPU by family (`gpu_family`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from fp8advisor.errors import ProfileError

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
        note=f"torchao {_TORCHAO} 'NVIDIA GB200' (fractions from H100; NVIDIA's GB200 NVL72 datasheet gives "
        "2.5 / 5 PFLOP/s dense bf16 / FP8 per GPU, torchao's B200 rates kept)",
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


def recipes_for_family(family: str | None) -> tuple:
    """The recipes a GPU family runs (`recipes.recipes_for_compute_capability`); AMD's MI300X: the float8
    recipes (no MXFP8 tensor cores before CDNA4); an unknown family: every recipe."""
    from fp8advisor.recipes import FLOAT8_RECIPES, recipes_for_compute_capability

    if family == "MI300X":
        return FLOAT8_RECIPES
    return recipes_for_compute_capability(FAMILY_COMPUTE_CAPABILITY.get(family or ""))


def sibling_family(family: str | None, available) -> str | None:
    """A family in `available` of the same GPU architecture as `family` (the same compute capability major:
    GB200 and B300 are Blackwell like B200, H200 is Hopper like H100), when `family` itself is not in it;
    None otherwise. What a GPU without its own profile or calibration borrows."""
    major = FAMILY_COMPUTE_CAPABILITY.get(family or "", (None,))[0]
    if family is None or family in available or major is None:
        return None
    return next((f for f in sorted(available) if FAMILY_COMPUTE_CAPABILITY.get(f, (None,))[0] == major), None)


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


__all__ = [
    "FAMILY_COMPUTE_CAPABILITY",
    "GPU_SPECS",
    "KERNEL_FLOOR_S",
    "GpuSpecs",
    "get_specs",
    "gpu_family",
    "recipes_for_family",
    "sibling_family",
]
