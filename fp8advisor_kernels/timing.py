"""GPU measurements built on the kernels: device ceilings, GEMM-only times and the cost of the casts.

Every timing goes through `triton.testing.do_bench` (warm-up, L2 flush before each call, CUDA events,
quantiles). All of this needs a CUDA GPU; FP8 GEMMs need compute capability 8.9 or newer.

- `measure_ceilings`: the device's own bf16 and fp8 matmul rate (8192^3, `torch.mm` / `torch._scaled_mm`) and
  its copy bandwidth (1 GiB, the Triton copy kernel), the roofline terms measured instead of taken from a data
  sheet.
- `gemm_times`: the three GEMMs of a Linear's forward + backward, bf16 against float8, laid out as torchao's
  `benchmarks/float8/float8_roofline.py::get_gemm_times` lays them out (output with fast accumulation;
  rowwise_with_gw_hp keeps the grad_weight GEMM in bf16).
- `cast_times`: the dynamic-quantization kernels a recipe needs for one forward + backward, unfused (an upper
  bound: under torch.compile inductor fuses the activation casts into their neighbours).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from fp8advisor import compat
from fp8advisor_kernels.bandwidth import copy, copy_bytes_moved
from fp8advisor_kernels.quantize import quantize_rowwise, quantize_tensorwise

E4M3 = torch.float8_e4m3fn


def do_bench_seconds(
    fn: Callable[[], object],
    *,
    warmup_ms: int = 25,
    rep_ms: int = 100,
    grad_to_none: list[torch.Tensor] | None = None,
) -> dict[str, float]:
    """Median and 20th/80th percentile of one call of `fn`, in seconds, via `triton.testing.do_bench`."""
    from triton.testing import do_bench

    median, p20, p80 = do_bench(
        fn, warmup=warmup_ms, rep=rep_ms, grad_to_none=grad_to_none, quantiles=[0.5, 0.2, 0.8]
    )
    return {"median": median / 1e3, "p20": p20 / 1e3, "p80": p80 / 1e3}


def do_bench_samples(
    fn: Callable[[], object],
    *,
    warmup_ms: float = 25,
    rep_ms: float = 100,
    grad_to_none: list[torch.Tensor] | None = None,
) -> list[float]:
    """Every timed call of `fn`, in seconds, via `triton.testing.do_bench` (return_mode "all"): how many
    there were is the caller's to check (do_bench times int(rep / estimated call time) calls, at least 1)."""
    from triton.testing import do_bench

    times_ms = do_bench(fn, warmup=warmup_ms, rep=rep_ms, grad_to_none=grad_to_none, return_mode="all")
    return [time_ms / 1e3 for time_ms in times_ms]


def measure_bandwidth(*, buffer_bytes: int = 1 << 30, device: str = "cuda") -> float:
    """Copy bandwidth in bytes/s (bytes read + written per second) over a buffer far larger than L2."""
    src = torch.empty(buffer_bytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    seconds = do_bench_seconds(lambda: copy(src, dst))["median"]
    return copy_bytes_moved(src) / seconds


def _fp8_operands(M: int, K: int, N: int, rowwise: bool, device: str):
    """A (M, K) row-major and B (K, N) column-major in e4m3, with tensorwise or rowwise scales."""
    finfo = torch.finfo(E4M3)
    a = torch.empty(M, K, device=device).uniform_(finfo.min, finfo.max).to(E4M3)
    b = torch.empty(N, K, device=device).uniform_(finfo.min, finfo.max).to(E4M3).t()
    if rowwise:
        scale_a = torch.rand(M, 1, device=device) + 0.5
        scale_b = torch.rand(1, N, device=device) + 0.5
    else:
        scale_a = torch.tensor(1.0, device=device)
        scale_b = torch.tensor(1.0, device=device)
    return a, b, scale_a, scale_b


def fp8_gemm_seconds(
    M: int, K: int, N: int, *, rowwise: bool, fast_accum: bool, device: str = "cuda", **budget: int
) -> float:
    """Median time of one `torch._scaled_mm` (M, K) x (K, N) -> bf16."""
    a, b, scale_a, scale_b = _fp8_operands(M, K, N, rowwise, device)
    scaled_mm = compat.scaled_mm()

    def run():
        return scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, use_fast_accum=fast_accum)

    return do_bench_seconds(run, **budget)["median"]


def bf16_gemm_seconds(
    M: int, K: int, N: int, *, layout: str = "row_major:col_major", device: str = "cuda", **budget: int
) -> float:
    """Median time of one `torch.mm` (M, K) x (K, N) in bf16 with the operand layouts torchao uses per
    GEMM. `budget`: do_bench's warmup_ms / rep_ms."""
    a = torch.randn(M, K, dtype=torch.bfloat16, device=device)
    b = torch.randn(K, N, dtype=torch.bfloat16, device=device)
    if layout == "row_major:col_major":
        b = b.t().contiguous().t()
    elif layout == "col_major:row_major":
        a = a.t().contiguous().t()
    elif layout != "row_major:row_major":
        raise ValueError(f"unknown layout {layout!r}")
    return do_bench_seconds(lambda: torch.mm(a, b), **budget)["median"]


def measure_matmul_rate(kind: str, *, size: int = 8192, device: str = "cuda") -> float:
    """Achieved FLOP/s of a size^3 matmul: kind "bf16" (torch.mm) or "fp8" (torch._scaled_mm, tensorwise)."""
    if kind == "bf16":
        seconds = bf16_gemm_seconds(size, size, size, device=device)
    elif kind == "fp8":
        seconds = fp8_gemm_seconds(size, size, size, rowwise=False, fast_accum=True, device=device)
    else:
        raise ValueError(f"kind must be 'bf16' or 'fp8', not {kind!r}")
    return 2 * size**3 / seconds


def measure_ceilings(device: str = "cuda") -> dict:
    """The device's measured matmul rates and bandwidth, for the roofline terms of a profile."""
    return {
        "bf16_flops": measure_matmul_rate("bf16", device=device),
        "fp8_flops": measure_matmul_rate("fp8", device=device),
        "bandwidth_bytes_per_s": measure_bandwidth(device=device),
        "method": "triton.testing.do_bench medians: 8192^3 torch.mm (bf16) and torch._scaled_mm (e4m3, "
        "tensorwise, fast accumulation); 1 GiB Triton copy kernel (bytes read + written)",
    }


#: The three GEMMs of a Linear's forward + backward: (role, (rows, inner, columns) as a function of M, K, N,
#: bf16 operand layout, fast accumulation in float8). Mirrors torchao's float8_roofline.py.
GEMMS = (
    ("output", lambda M, K, N: (M, K, N), "row_major:col_major", True),
    ("grad_input", lambda M, K, N: (M, N, K), "row_major:row_major", False),
    ("grad_weight", lambda M, K, N: (K, M, N), "col_major:row_major", False),
)


def _once(cache: dict | None, key: tuple, measure: Callable[[], float]) -> float:
    """`measure()`, remembered in `cache` under `key` (no memory when `cache` is None): the recipes of one
    shape share most of their GEMMs and casts, and each is timed once."""
    if cache is None:
        return measure()
    if key not in cache:
        cache[key] = measure()
    return cache[key]


def gemm_times(
    M: int, K: int, N: int, recipe: str, *, device: str = "cuda", cache: dict | None = None, **budget: int
) -> tuple[float, float]:
    """(bf16 seconds, float8 seconds) of the three GEMMs of a Linear's forward + backward under `recipe`.

    `cache`: a dict shared across calls to time each distinct GEMM once; `budget`: do_bench's warmup_ms /
    rep_ms."""
    bf16_total = float8_total = 0.0
    for role, dims, layout, fast_accum in GEMMS:
        rows, inner, columns = dims(M, K, N)
        bf16 = _once(
            cache,
            ("mm", rows, inner, columns, layout),
            functools.partial(
                bf16_gemm_seconds, rows, inner, columns, layout=layout, device=device, **budget
            ),
        )
        bf16_total += bf16
        if recipe == "rowwise_with_gw_hp" and role == "grad_weight":
            float8_total += bf16  # this recipe keeps the grad_weight GEMM in bf16
            continue
        rowwise = recipe != "tensorwise"
        float8_total += _once(
            cache,
            ("scaled_mm", rows, inner, columns, rowwise, fast_accum),
            functools.partial(
                fp8_gemm_seconds,
                rows,
                inner,
                columns,
                rowwise=rowwise,
                fast_accum=fast_accum,
                device=device,
                **budget,
            ),
        )
    return bf16_total, float8_total


#: The casts each recipe makes in one forward + backward: (tensor, scaling dim or None for tensorwise).
#: tensor is "input" (M, K), "weight" (N, K) or "grad_output" (M, N); dim -1 scales along the last axis.
#: As torchao's `Float8LinearConfig.from_recipe_name` sets them: rowwise_with_gw_hp scales input, weight and
#: grad_output per row for the output and grad_input GEMMs, casts the weight *tensorwise* for grad_input
#: (`cast_config_weight_for_grad_input`), and keeps the grad_weight GEMM in bf16 (no cast).
RECIPE_CASTS: dict[str, tuple[tuple[str, int | None], ...]] = {
    "tensorwise": (("input", None), ("weight", None), ("grad_output", None)),
    "rowwise": (
        ("input", -1),
        ("input", 0),
        ("weight", -1),
        ("weight", 0),
        ("grad_output", -1),
        ("grad_output", 0),
    ),
    "rowwise_with_gw_hp": (("input", -1), ("weight", -1), ("weight", None), ("grad_output", -1)),
}


def cast_times(
    M: int, K: int, N: int, recipe: str, *, device: str = "cuda", cache: dict | None = None, **budget: int
) -> float:
    """Seconds the recipe's dynamic-quantization kernels take for one forward + backward, unfused.

    `cache` and `budget` as for `gemm_times`."""
    shapes = {"input": (M, K), "weight": (N, K), "grad_output": (M, N)}

    def cast_seconds(name: str, dim: int | None) -> float:
        tensor = torch.randn(*shapes[name], dtype=torch.bfloat16, device=device)
        if dim is None:
            return do_bench_seconds(lambda: quantize_tensorwise(tensor), **budget)["median"]
        return do_bench_seconds(lambda: quantize_rowwise(tensor, dim=dim), **budget)["median"]

    return sum(
        _once(cache, ("cast", shapes[name], dim), functools.partial(cast_seconds, name, dim))
        for name, dim in RECIPE_CASTS[recipe]
    )


__all__ = [
    "GEMMS",
    "RECIPE_CASTS",
    "bf16_gemm_seconds",
    "cast_times",
    "do_bench_samples",
    "do_bench_seconds",
    "fp8_gemm_seconds",
    "gemm_times",
    "measure_bandwidth",
    "measure_ceilings",
    "measure_matmul_rate",
]
