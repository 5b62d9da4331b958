"""The machine a measurement was taken on: GPU, driver, clocks and software versions, for every run header.

Everything here is best effort except `require_fp8_gpu`: a field that cannot be read is `None`, never guessed.
The emulated CPU description (`emulated_device`) carries `"emulated": true` so that nothing downstream can
take an emulated figure for a GPU measurement.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
from importlib import metadata

from fp8advisor.errors import DeviceError

#: The first compute capability with FP8 tensor cores (Ada Lovelace, sm_89); Hopper is (9, 0).
MIN_FP8_CAPABILITY = (8, 9)


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def software_versions() -> dict:
    """Versions of everything that changes a figure: torch, torchao, triton, CUDA, Python, fp8advisor."""
    import torch

    from fp8advisor import __version__

    return {
        "torch": torch.__version__,
        "torchao": _version("torchao"),
        "triton": _version("triton") or _version("pytorch-triton"),
        "cuda": torch.version.cuda,
        "fp8advisor": __version__,
        "python": platform.python_version(),
    }


def _nvidia_smi(gpu_id: str) -> dict:
    """Driver and clocks of GPU `gpu_id` (a UUID "GPU-..." or an index) from nvidia-smi; {} when it is missing
    or fails (containers often lack it)."""
    if shutil.which("nvidia-smi") is None:
        return {}
    fields = ["driver_version", "clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem"]
    try:
        completed = subprocess.run(
            [
                "nvidia-smi",
                f"--id={gpu_id}",
                f"--query-gpu={','.join(fields)}",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    lines = completed.stdout.strip().splitlines()
    values = [value.strip() for value in lines[0].split(",")] if lines else []
    if len(values) != len(fields):
        return {}
    parsed = dict(zip(fields, values, strict=True))

    def megahertz(value: str) -> int | None:
        try:
            return int(float(value))
        except ValueError:  # "[N/A]"
            return None

    clocks = {
        "sm": megahertz(parsed["clocks.sm"]),
        "memory": megahertz(parsed["clocks.mem"]),
        "sm_max": megahertz(parsed["clocks.max.sm"]),
        "memory_max": megahertz(parsed["clocks.max.mem"]),
    }
    return {
        "driver": parsed["driver_version"] or None,
        "clocks_mhz": clocks if any(value is not None for value in clocks.values()) else None,
    }


def describe_gpu(index: int | None = None) -> dict:
    """The CUDA device `index` (default: the current one) as the run header records it."""
    import torch

    if not torch.cuda.is_available():
        raise DeviceError("no CUDA GPU is visible", hint="use --emulate to run the pipeline on the CPU")
    index = torch.cuda.current_device() if index is None else index
    properties = torch.cuda.get_device_properties(index)
    # nvidia-smi numbers GPUs in PCI order, CUDA (and CUDA_VISIBLE_DEVICES) may not: ask by UUID where known.
    uuid = getattr(properties, "uuid", None)
    smi = _nvidia_smi(f"GPU-{uuid}" if uuid is not None else str(index))
    return {
        "name": properties.name,
        "compute_capability": [properties.major, properties.minor],
        "sm_count": properties.multi_processor_count,
        "memory_bytes": properties.total_memory,
        "driver": smi.get("driver"),
        "clocks_mhz": smi.get("clocks_mhz"),
        "emulated": False,
    }


def emulated_device() -> dict:
    """The CPU standing in for a GPU under `--emulate`: torchao's emulated float8, wall time only."""
    return {
        "name": f"CPU emulation ({platform.machine() or 'unknown'}; {platform.processor() or 'cpu'})",
        "compute_capability": None,
        "sm_count": None,
        "memory_bytes": None,
        "driver": None,
        "clocks_mhz": None,
        "emulated": True,
    }


def describe_device(*, emulate: bool = False) -> dict:
    """The device a run measures: the emulated CPU, or the current CUDA GPU."""
    return emulated_device() if emulate else describe_gpu()


def has_fp8_gpu() -> bool:
    """True when a CUDA GPU with FP8 tensor cores (compute capability >= 8.9) is visible."""
    import torch

    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= MIN_FP8_CAPABILITY


#: The extra that installs what a GPU measurement needs beyond the inspecting commands (triton).
BENCH_EXTRA = "fp8advisor[bench]"


def require_triton() -> None:
    """Raise `DeviceError` (exit 2) unless triton can be imported: a GPU measurement times with
    `triton.testing.do_bench` and casts with the Triton kernels of `fp8advisor_kernels`. `suggest`, `layers`,
    `verify` and `bench --emulate` do without it, so the base install leaves it out (a 285 MB download on a
    CPU machine)."""
    try:
        import triton  # noqa: F401
    except ImportError as error:
        raise DeviceError(
            f"fp8advisor bench on a GPU needs triton, which cannot be imported ({error})",
            hint=f"pip install '{BENCH_EXTRA}' (it adds triton>=3.3; CUDA builds of torch usually bring it)",
        ) from None


def require_fp8_gpu() -> None:
    """Raise `DeviceError` (exit 2) unless a CUDA GPU with FP8 tensor cores is visible and triton, which
    times it, can be imported."""
    import torch

    if not torch.cuda.is_available():
        cuda = "torch was built without CUDA" if torch.version.cuda is None else "no CUDA GPU is visible"
        raise DeviceError(
            f"fp8advisor bench needs a CUDA GPU with FP8 tensor cores (sm_89 or newer); {cuda}",
            hint="use --emulate to run the pipeline on the CPU (its figures are labelled emulated)",
        )
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) < MIN_FP8_CAPABILITY:
        raise DeviceError(
            f"{torch.cuda.get_device_name()} is sm_{major}{minor}: it has no FP8 tensor cores "
            f"(they start at sm_89: Ada, Hopper, Blackwell)",
            hint="run bench on an sm_89+ GPU, or use --emulate to run the pipeline on the CPU",
        )
    require_triton()
