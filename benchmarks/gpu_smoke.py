"""The first thing to run on a new GPU machine, in about 3 minutes: does `fp8advisor bench` measure right?

One log (`<out>/smoke.log`, also printed), in sections, then a verdict of one line per check, printed last:

1. the machine: GPU, driver, clocks, software versions;
2. the GPU kernel tests (`pytest -m gpu tests/test_kernels.py`): the casts bit-exact against torchao, the
   ceilings and breakdown probes;
3. the profiler drift check: 40 profiler sessions of the same 8 kernels without padding, then 40 with it
   (CUPTI 12.6u2..13.0 drops the first k kernel records of the k-th session of a process; padded sessions
   must all come back whole);
4. a sweep of the 4 configurations at 1024^3 (bf16, tensorwise, rowwise, rowwise_with_gw_hp) through
   `run_sweep` with 2 compile workers, results under `<out>/smoke-results`: per point, kernel and wall time,
   the compile record (seconds, inductor / AOTAutograd cache hits and misses) and the profiler checks;
5. the profiler rows of the bf16 and the rowwise point: every row, with what torchao's filter keeps, what
   it drops and what no row accounts for; the session's whole trace as `<out>/trace-<recipe>-MxKxN.json.gz`
   (Chrome/Kineto format, for the rows' causes and for `fp8advisor trace`);
6. a grouped expert GEMM point (`bench --grouped`: E=8, 256 tokens per expert, K=2048, N=768, bf16
   `torch._grouped_mm` and torchao's float8 rowwise grouped GEMM) through `run_sweep`, results under
   `<out>/smoke-grouped`: both ok, SQNR of output and both gradients, kernel and wall time, the speedup.

Run from a checkout, with torchao's wheel carried (no internet needed):

    python3 -m pip install -q --no-index --no-deps --target /tmp/site torchao-0.18.0-*.whl
    PYTHONPATH=/tmp/site:. TORCHAO_FORCE_SKIP_LOADING_SO_FILES=1 python3 benchmarks/gpu_smoke.py --out $OUT

`--rows-at M,K,N` runs only the machine section and section 5 at that shape, for bf16 and tensorwise: what
a sweep point marked suspect ("the rows hold more device time than the kernels took") holds, row by row and
in its trace (the first H200 sweep's two largest bf16 points, docs/benchmarks.md).

Without a GPU with FP8 tensor cores it exits with status 2 and says so.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
SHAPE = (1024, 1024, 1024)
DRIFT_SESSIONS = 40
DRIFT_KERNELS = 8  # per session
# Limits that keep the whole script well inside a 10-minute job, whatever hangs.
KERNEL_TESTS_TIMEOUT_S = 180
SWEEP_BUDGET_S = 180.0
SWEEP_COMPILE_TIMEOUT_S = 90.0
GROUPED_SHAPE = (8, 256, 2048, 768)  # E, tokens per expert, K, N: a Qwen3-30B-A3B-like expert
GROUPED_BUDGET_S = 120.0


class Log:
    """Print and append to the log file, line by line (a killed run keeps what it printed)."""

    def __init__(self, path: Path):
        self.file = path.open("a", encoding="utf-8")
        self.verdict: list[str] = []  # "ok   ...", "FAIL ...", "info ..."

    def __call__(self, text: str = "") -> None:
        print(text, flush=True)
        self.file.write(text + "\n")
        self.file.flush()

    def check(self, ok: bool, text: str) -> None:
        self.verdict.append(("ok   " if ok else "FAIL ") + text)
        self(self.verdict[-1])

    def info(self, text: str) -> None:
        self.verdict.append("info " + text)
        self(self.verdict[-1])

    @property
    def failed(self) -> bool:
        return any(line.startswith("FAIL") for line in self.verdict)

    def section(self, title: str, body: Callable[[], None]) -> None:
        self(f"\n=== {title} ===")
        started = time.perf_counter()
        try:
            body()
        except Exception:  # noqa: BLE001 - one broken section must not hide the others
            self(traceback.format_exc())
            self.check(False, f"{title}: raised (traceback above)")
        self(f"--- {title}: {time.perf_counter() - started:.1f} s")


def machine(log: Log) -> None:
    import importlib.util

    from fp8advisor.device import describe_gpu, software_versions

    log(json.dumps({"device": describe_gpu(), "software": software_versions()}, indent=1))
    needed = ("torchao", "triton", "typer", "rich", "numpy", "scipy", "yaml", "pytest")  # not matplotlib
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    log.check(not missing, f"packages bench and this script need: {'all there' if not missing else missing}")


def kernel_tests(log: Log) -> None:
    command = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider"]
    command.append("tests/test_kernels.py")
    completed = subprocess.run(
        command, cwd=REPOSITORY, capture_output=True, text=True, timeout=KERNEL_TESTS_TIMEOUT_S
    )
    log(completed.stdout[-6000:] + completed.stderr[-2000:])
    log.check(completed.returncode == 0, f"GPU kernel tests: exit {completed.returncode}")


def session_records(a, pad: bool) -> int:
    """Device records (padding excluded) of one profiler session of DRIFT_KERNELS matmuls of `a` by itself."""
    import torch

    from fp8advisor.measure.timers import padded_profile

    with padded_profile(pad=pad) as session:
        for _ in range(DRIFT_KERNELS):
            torch.mm(a, a)
        torch.cuda.synchronize()
    return session.summary(iterations=DRIFT_KERNELS).device_records


def drift(log: Log) -> None:
    import torch

    a = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    torch.mm(a, a)  # cuBLAS handle and workspace before the first session
    torch.cuda.synchronize()
    unpadded = [session_records(a, pad=False) for _ in range(DRIFT_SESSIONS)]
    padded = [session_records(a, pad=True) for _ in range(DRIFT_SESSIONS)]
    log(f"records per session of {DRIFT_KERNELS} matmuls (each one kernel or more):")
    log(f"  without padding: {unpadded}")
    log(f"  with padding:    {padded}")
    expected = max(unpadded + padded)
    lost = [index + 1 for index, count in enumerate(unpadded) if count < expected]
    log.info(f"unpadded sessions short of {expected} records: {len(lost)} of {DRIFT_SESSIONS} {lost[:10]}")
    whole = all(count == expected for count in padded)
    state = "all whole" if whole else "RECORDS LOST"
    log.check(whole, f"padded sessions: {state} ({min(padded)}..{max(padded)} records)")


def sweep(log: Log, out: Path) -> list[dict]:
    from fp8advisor import compat
    from fp8advisor.measure.linear import make_grid
    from fp8advisor.measure.protocol import BenchSettings
    from fp8advisor.measure.recipe_support import gpu_capability
    from fp8advisor.measure.sweep import run_sweep

    # every recipe this GPU runs: the float8 ones, and MXFP8 on Blackwell (10.x)
    grid = make_grid(M=[SHAPE[0]], K=[SHAPE[1]], N=[SHAPE[2]], capability=gpu_capability())
    settings = BenchSettings(compile_workers=2, compile_timeout_s=SWEEP_COMPILE_TIMEOUT_S)
    summary = run_sweep(grid, out / "smoke-results", settings, time_budget_s=SWEEP_BUDGET_S)
    for record in summary.records:
        compile_record = record.get("compile") or {}
        profiler = record.get("profiler") or {}
        wall = record.get("wall_time_s") or {}
        log(
            f"{record['recipe']:<20} {record['status']:<6} kernel {_us(record['kernel_time_s'])} "
            f"wall {_us(wall.get('median'))} x{wall.get('iterations')} "
            f"peak {record['peak_memory_bytes']} B sqnr {record['sqnr_db']} "
            f"gemm-only {record['gemm_only_speedup']} casts {_us(record['cast_overhead_s'])} "
            f"breakdown_error {record['breakdown_error']} reason {record['reason']}"
        )
        log(f"{'':<20} precompiled {record['precompiled']!r} duration {record['duration_s']:.1f} s")
        log(f"{'':<20} compile {compile_record}")
        log(f"{'':<20} profiler {profiler}")
    ok = [record for record in summary.records if record["status"] == "ok"]
    total = len(grid.points())
    log.check(
        len(ok) == total, f"sweep at {SHAPE}: {len(ok)} of {total} points ok ({', '.join(grid.recipes)})"
    )
    suspect = [record["recipe"] for record in summary.suspect]
    log.check(not suspect, f"profiler checks: suspect {suspect or 'none'}")
    log.check(
        summary.cold_compiles == 0,
        f"timing-process compiles: {summary.cold_compiles} cold of {len(summary.records)} "
        f"(not pre-compiled: {summary.not_precompiled or 'none'})",
    )
    few = [record["recipe"] for record in ok if (record["wall_time_s"] or {}).get("iterations", 0) < 5]
    log.check(not few, f"wall-clock windows of >= 5 calls: {'all' if not few else 'NOT ' + str(few)}")
    header = summary.runs[-1].header if summary.runs else {}
    log(f"ceilings: {header.get('ceilings')}")
    log(f"this process's compile cache counters in all: {compat.compile_cache_counters()}")
    return summary.records


def grouped(log: Log, out: Path) -> None:
    from fp8advisor.measure.grouped import GROUPED, make_grouped_grid, with_grouped_defaults
    from fp8advisor.measure.protocol import BenchSettings
    from fp8advisor.measure.speedups import pair_with_baseline
    from fp8advisor.measure.sweep import run_sweep

    E, M_per_expert, K, N = GROUPED_SHAPE
    from fp8advisor.measure.recipe_support import gpu_capability

    grid = make_grouped_grid(E=[E], M_per_expert=[M_per_expert], K=[K], N=[N], capability=gpu_capability())
    settings = with_grouped_defaults(BenchSettings(compile_workers=0))
    summary = run_sweep(
        grid, out / "smoke-grouped", settings, time_budget_s=GROUPED_BUDGET_S, workload=GROUPED
    )
    for record in summary.records:
        wall = record.get("wall_time_s") or {}
        log(
            f"{record['recipe']:<10} {record['status']:<6} kernel {_us(record['kernel_time_s'])} "
            f"wall {_us(wall.get('median'))} x{wall.get('iterations')} peak {record['peak_memory_bytes']} B "
            f"sqnr {record['sqnr_db']} reason {record['reason']}"
        )
        log(f"{'':<10} profiler {record.get('profiler')}")
    ok = [record for record in summary.records if record["status"] == "ok"]
    total = len(grid.recipes)
    log.check(len(ok) == total, f"grouped point {GROUPED_SHAPE}: {len(ok)} of {total} configurations ok")
    for record in [record for record in ok if record["recipe"] != "bf16"] or [{"recipe": "none"}]:
        sqnr = record.get("sqnr_db") or {}
        log.check(
            bool(sqnr) and all(value > 20 for value in sqnr.values()),
            f"grouped {record['recipe']} SQNR (dB) > 20 on output and gradients: {sqnr}",
        )
    for pair in pair_with_baseline(summary.runs, grouped=True):
        log.info(f"grouped speedup at {pair.shape}: {pair.speedup:.3f}x ({pair.basis})")


def rows(log: Log, out: Path, shape: tuple[int, int, int], recipes: tuple[str, ...]) -> None:
    """Profile a point of each recipe as bench does, show every row the profiler recorded and keep the
    session's trace."""
    import torch

    from fp8advisor.measure.linear import build_module, make_inputs, prepare_module
    from fp8advisor.measure.protocol import compile_module
    from fp8advisor.measure.timers import padded_profile, row_role

    M, K, N = shape
    x, grad_output = make_inputs(M, K, N, device="cuda", seed=0)
    for recipe in recipes:
        base = build_module(K, N, device="cuda", seed=0)
        step = _step(compile_module(prepare_module(base, recipe, emulate=False)), x, grad_output)
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        with padded_profile() as session:
            for _ in range(5):
                step()
                torch.cuda.synchronize()
        log(f"--- {recipe}: the profiler's table")
        log(session.table())
        log(f"--- {recipe}: rows as bench counts them (self CPU us, self device us, count)")
        for row in sorted(session.rows(), key=lambda row: -row.self_device_us):
            times = f"{row.self_cpu_us:>10.1f} {row.self_device_us:>10.1f} {row.count:>5}"
            log(f"  {row_role(row):<12} {times}  {row.key}")
        trace = out / f"trace-{recipe}-{M}x{K}x{N}.json.gz"
        session.profile.export_chrome_trace(str(trace))  # gzipped, as the name ends in .gz
        log(f"--- {recipe}: trace {trace.name}")
        summary = session.summary(iterations=5)
        log(f"--- {recipe}: {summary}")
        log.check(summary.suspect is None, f"{recipe} rows: suspect {summary.suspect}")
        dropped_us = {key: round(value * 1e6, 2) for key, value in summary.dropped_s.items()}
        log.check(
            abs(summary.unattributed_s) < 0.02 * summary.kernel_time_s,
            f"{recipe} rows: kernel {_us(summary.kernel_time_s)}, dropped (us/iteration) {dropped_us}, "
            f"unattributed {_us(summary.unattributed_s)}",
        )


def _shape(text: str) -> tuple[int, int, int]:
    try:
        shape = tuple(int(size) for size in text.split(","))
    except ValueError:
        shape = ()
    if len(shape) != 3 or min(shape) < 16:
        raise argparse.ArgumentTypeError(f"expected M,K,N (three sizes of at least 16), got {text!r}")
    return shape


def _step(module, x, grad_output) -> Callable[[], None]:
    def step() -> None:
        module(x).backward(grad_output)

    return step


def _us(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:.1f} us"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for smoke.log and smoke-results/")
    parser.add_argument(
        "--rows-at", type=_shape, metavar="M,K,N", help="only the profiler rows and traces at this shape"
    )
    arguments = parser.parse_args()
    sys.path.insert(0, str(REPOSITORY))
    from fp8advisor.device import has_fp8_gpu

    if not has_fp8_gpu():
        print("gpu_smoke.py needs a CUDA GPU with FP8 tensor cores (sm_89 or newer)", file=sys.stderr)
        return 2
    arguments.out.mkdir(parents=True, exist_ok=True)
    log = Log(arguments.out / "smoke.log")
    started = time.perf_counter()
    log.section("machine", lambda: machine(log))
    if arguments.rows_at:
        shape, recipes = arguments.rows_at, ("bf16", "tensorwise")
        log.section(f"profiler rows at {shape}", lambda: rows(log, arguments.out, shape, recipes))
    else:
        log.section("GPU kernel tests", lambda: kernel_tests(log))
        log.section("profiler drift", lambda: drift(log))
        log.section("sweep at 1024^3", lambda: sweep(log, arguments.out))
        log.section("profiler rows", lambda: rows(log, arguments.out, SHAPE, ("bf16", "rowwise")))
        log.section("grouped expert GEMMs", lambda: grouped(log, arguments.out))
    log(f"\n=== verdict ({time.perf_counter() - started:.0f} s) ===")
    for line in list(log.verdict):
        log(line)
    return 1 if log.failed else 0


if __name__ == "__main__":
    sys.exit(main())
