"""How long `fp8advisor layers` takes on the Llama-3-70B-shaped example, Python start-up included,
and how much memory it holds at its peak.

Runs the command as a fresh subprocess several times (one untimed warm-up first, so that the files are
in the OS cache), and reads each run's CPU time and peak resident set size from `os.wait4` (the child's own
`ru_maxrss`). Prints each run, the median, the machine and the software versions. Goal (issue 2): at most
5 s and 600 MB.

    python benchmarks/inspect_speed.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET = "data/models/llama3.py:llama3_70b"
ARGS = ["layers", TARGET, "--batch", "1", "--seq", "8192", "--json"]
GOAL_SECONDS = 5.0
GOAL_MB = 600.0


def command() -> list[str]:
    script = shutil.which("fp8advisor")
    if script is not None:
        return [script, *ARGS]
    return [sys.executable, "-c", "from fp8advisor.cli import main; main()", *ARGS]


def run_once(argv: list[str]) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak RSS in MB) of one run; raises if the command fails."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({process.returncode}): {process.stderr.read().decode()}")
    process.stderr.close()
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
    for package in ("torch", "fp8advisor", "typer", "rich"):
        try:
            found.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            found.append(f"{package} (not installed)")
    return ", ".join(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs after one warm-up run")
    options = parser.parse_args()
    argv = command()
    print(f"command: fp8advisor {' '.join(ARGS)}")
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}")
    print(f"software: {versions()}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    run_once(argv)  # warm-up: file cache
    # Other processes share the cores: wall time grows with the load, CPU time much less. Both are printed.
    walls, cpus, peaks = [], [], []
    for number in range(1, options.runs + 1):
        wall, cpu, peak = run_once(argv)
        walls.append(wall)
        cpus.append(cpu)
        peaks.append(peak)
        print(f"run {number}: {wall:.2f} s wall, {cpu:.2f} s CPU (user + sys), {peak:.0f} MB peak RSS")
    children_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    median_wall = statistics.median(walls)
    print(
        f"median {median_wall:.2f} s wall (min {min(walls):.2f}, max {max(walls):.2f}), "
        f"median {statistics.median(cpus):.2f} s CPU; "
        f"peak RSS {max(peaks):.0f} MB (RUSAGE_CHILDREN max {children_peak:.0f} MB)"
    )
    wall_ok = "met" if median_wall <= GOAL_SECONDS else "NOT met"
    memory_ok = "met" if max(peaks) <= GOAL_MB else "NOT met"
    print(f"goal <= {GOAL_SECONDS:.0f} s: {wall_ok}; goal <= {GOAL_MB:.0f} MB: {memory_ok}")


if __name__ == "__main__":
    main()
