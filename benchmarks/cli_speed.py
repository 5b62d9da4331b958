"""How long the inspecting commands take on the large example models, Python start-up included, and how much
memory they hold at their peak: `layers` and `suggest` on Llama-3-70B, Llama 3.1 405B and a DeepSeek-V3-sized
MoE, `suggest` on Llama 3.1 8B's Hugging Face config.json (the path that imports transformers), `verify` on
405B, all at batch 1 x seq 8192.

Each command runs as a fresh subprocess several times (one untimed warm-up first, so that the files are in
the OS cache); each run's CPU time and peak resident set size come from `os.wait4` (the child's own
`ru_maxrss`), its wall time from a monotonic clock around it. Prints each run, the median, the machine and
the software versions. Goals (issues 2 and 14): `layers` and `suggest` at most 5 s, `verify` at most 15 s,
each at most 600 MB.

    python benchmarks/cli_speed.py [--runs 5] [--case suggest-70b --case verify-405b ...]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHAPE = ["--batch", "1", "--seq", "8192"]
LLAMA_70B = "data/models/llama3.py:llama3_70b"
LLAMA_405B = "data/models/llama3.py:llama3_405b"
MOE_671B = "data/models/moe.py:deepseek_v3_671b"
LLAMA_31_8B_HF = "data/models/llama31_8b_hf"  # Llama 3.1 8B's config.json, built through transformers
GOAL_MB = 600.0


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...]  # after `fp8advisor`; {config} stands for the config the setup wrote
    goal_s: float
    setup: tuple[str, ...] = ()  # run once, untimed, before the case (writes {config})


CASES = [
    Case("layers-70b", ("layers", LLAMA_70B, *SHAPE, "--json"), 5.0),
    Case("suggest-70b", ("suggest", LLAMA_70B, *SHAPE), 5.0),
    Case("suggest-405b", ("suggest", LLAMA_405B, *SHAPE), 5.0),
    Case("suggest-671b-moe", ("suggest", MOE_671B, *SHAPE), 5.0),
    Case("suggest-hf-llama31-8b", ("suggest", LLAMA_31_8B_HF, *SHAPE), 5.0),
    Case(
        "verify-405b",
        ("verify", LLAMA_405B, *SHAPE, "--config", "{config}"),
        15.0,
        setup=("suggest", LLAMA_405B, *SHAPE, "-o", "{config}", "--force"),
    ),
]


def command(args: tuple[str, ...], config: str) -> list[str]:
    args = tuple(arg.replace("{config}", config) for arg in args)
    script = shutil.which("fp8advisor")
    if script is not None:
        return [script, *args]
    return [sys.executable, "-c", "from fp8advisor.cli import main; main()", *args]


def run_once(argv: list[str]) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak RSS in MB) of one run; raises if the command fails."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # Read stderr while the child runs (a full pipe would stall it), then reap it with its own usage.
    errors = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    process.stderr.close()
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({process.returncode}): {errors.decode()}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024  # Linux reports kilobytes


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def versions() -> str:
    import importlib.metadata as metadata

    found = [f"python {platform.python_version()}"]
    for package in ("torch", "torchao", "triton", "numpy", "scipy", "fp8advisor", "typer", "rich"):
        try:
            found.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            found.append(f"{package} (not installed)")
    return ", ".join(found)


def measure(case: Case, runs: int, config: str) -> bool:
    """Print the runs and the medians of one case; True when both goals are met."""
    argv = command(case.args, config)
    print(f"\n[{case.name}] fp8advisor {' '.join(case.args).replace('{config}', config)}")
    if case.setup:
        run_once(command(case.setup, config))
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    run_once(argv)  # warm-up: file cache
    # Other processes share the cores: wall time grows with the load, CPU time much less. Both are printed.
    walls, cpus, peaks = [], [], []
    for number in range(1, runs + 1):
        wall, cpu, peak = run_once(argv)
        walls.append(wall)
        cpus.append(cpu)
        peaks.append(peak)
        print(f"run {number}: {wall:.2f} s wall, {cpu:.2f} s CPU (user + sys), {peak:.0f} MB peak RSS")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    median_wall = statistics.median(walls)
    print(
        f"median {median_wall:.2f} s wall (min {min(walls):.2f}, max {max(walls):.2f}), "
        f"median {statistics.median(cpus):.2f} s CPU; peak RSS {max(peaks):.0f} MB (largest run)"
    )
    met = median_wall <= case.goal_s and max(peaks) <= GOAL_MB
    wall_ok = "met" if median_wall <= case.goal_s else "NOT met"
    memory_ok = "met" if max(peaks) <= GOAL_MB else "NOT met"
    print(f"goal <= {case.goal_s:.0f} s: {wall_ok}; goal <= {GOAL_MB:.0f} MB: {memory_ok}")
    return met


def main() -> None:
    names = [case.name for case in CASES]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each case after one warm-up run")
    parser.add_argument("--case", action="append", choices=names, help="the cases to run (default: all)")
    options = parser.parse_args()
    chosen = [case for case in CASES if case.name in (options.case or names)]
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}")
    print(f"software: {versions()}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    with tempfile.TemporaryDirectory() as directory:
        config = str(Path(directory) / "fp8.toml")
        met = {case.name: measure(case, options.runs, config) for case in chosen}
    print("\n" + ", ".join(f"{name}: {'met' if ok else 'NOT met'}" for name, ok in met.items()))


if __name__ == "__main__":
    main()
