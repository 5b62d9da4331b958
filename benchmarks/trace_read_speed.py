"""How fast, and in how much memory, `fp8advisor trace` reads a 500 MB trace: the streaming reader against
loading the JSON whole (the standard library's json, and orjson when installed), side by side in one run.

    python benchmarks/trace_read_speed.py [--mb 500] [--source TRACE] [--keep DIR]

The big trace is built from a real one (default: this project's H200 float8 step,
data/results/h200-2026-11-26/traces/tensorwise/step-8192-float8_all_convertible-tensorwise.json.gz): its
events repeated with each copy shifted in time and given its own correlation ids, External ids and
ProfilerStep number, until the JSON reaches --mb megabytes; written gzipped, as torchtitan writes its traces.
Each reader runs in a fresh process (peak resident memory from getrusage, which includes the interpreter and
torch-free imports); the figures are printed as a table. The `fp8advisor` row is `read_trace` + `analyse`:
everything `trace` does to a file.
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = (
    ROOT
    / "data/results/h200-2026-11-26/traces/tensorwise"
    / "step-8192-float8_all_convertible-tensorwise.json.gz"
)

READERS = {
    "fp8advisor (ijson stream)": (
        "from fp8advisor.traces.analysis import analyse; from fp8advisor.traces.events import read_trace; "
        "a = analyse(read_trace(PATH)); n = sum(len(s.gemms) for s in a.steps)"
    ),
    "json.load (whole)": "import gzip, json; d = json.load(gzip.open(PATH)); n = len(d['traceEvents'])",
    "orjson.loads (whole)": (
        "import gzip, orjson; d = orjson.loads(gzip.open(PATH).read()); n = len(d['traceEvents'])"
    ),
}


def build(source: Path, megabytes: int, target: Path) -> dict:
    """Write a trace of about `megabytes` MB of JSON made of copies of `source`'s events."""
    data = json.loads(gzip.decompress(source.read_bytes()))
    events = data.pop("traceEvents")
    header = json.dumps(data)[:-1]
    one_copy = sum(len(json.dumps(event)) + 2 for event in events)
    copies = max(1, megabytes * 1_000_000 // one_copy)
    start = min(event["ts"] for event in events if "ts" in event)
    span = max(event["ts"] + event.get("dur", 0) for event in events if "ts" in event) - start
    written = 0
    with gzip.open(target, "wt", compresslevel=6) as out:
        out.write(header + ', "traceEvents": [\n')
        for copy in range(copies):
            for index, event in enumerate(events):
                text = json.dumps(_shifted(event, copy, span + 1000.0))
                out.write(("" if copy == 0 and index == 0 else ",\n") + text)
                written += len(text) + 2
        out.write("\n]}\n")
    return {"copies": copies, "json_mb": written / 1e6, "gz_mb": target.stat().st_size / 1e6}


def _shifted(event: dict, copy: int, span: float) -> dict:
    if copy == 0:
        return event
    event = dict(event)
    if "ts" in event:
        event["ts"] = event["ts"] + copy * span
    args = event.get("args")
    if isinstance(args, dict):
        args = dict(args)
        for key in ("correlation", "External id"):
            if isinstance(args.get(key), int):
                args[key] += copy * 10_000_000
        event["args"] = args
    if isinstance(event.get("id"), int):
        event["id"] += copy * 10_000_000
    if str(event.get("name", "")).startswith("ProfilerStep#"):
        event["name"] = f"ProfilerStep#{copy + 1}"
    return event


def measure(code: str, path: Path) -> dict:
    """Run `code` in a fresh interpreter; its wall time and peak resident memory."""
    script = (
        "import resource, time\n"
        f"PATH = {str(path)!r}\n"
        "t = time.perf_counter()\n"
        f"{code}\n"
        "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, n)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    seconds, rss_kb, count = done.stdout.split()
    return {"seconds": float(seconds), "peak_rss_mb": int(rss_kb) / 1024, "count": int(count)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=500, help="size of the trace's JSON in MB")
    parser.add_argument("--source", type=Path, default=SOURCE, help="the real trace to repeat")
    parser.add_argument("--keep", type=Path, default=None, help="keep the big trace in this folder")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="fp8advisor-trace-speed-"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"trace-{args.mb}mb.json.gz"
    began = time.perf_counter()
    built = build(args.source, args.mb, path)
    print(
        f"built {path}: {built['json_mb']:.0f} MB of JSON ({built['gz_mb']:.0f} MB gzipped), "
        f"{built['copies']} copies of {args.source.name}, in {time.perf_counter() - began:.0f} s"
    )
    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}")
    rows = {name: measure(code, path) for name, code in READERS.items()}
    ours = rows["fp8advisor (ijson stream)"]
    print(f"{'reader':28} {'seconds':>8} {'peak RSS MB':>12} {'x ours (time)':>14} {'x ours (memory)':>16}")
    for name, row in rows.items():
        if "error" in row:
            print(f"{name:28} {row['error']}")
            continue
        print(
            f"{name:28} {row['seconds']:8.1f} {row['peak_rss_mb']:12.0f} "
            f"{row['seconds'] / ours['seconds']:14.2f} {row['peak_rss_mb'] / ours['peak_rss_mb']:16.2f}"
        )
    if args.keep is None:
        path.unlink()
        folder.rmdir()


if __name__ == "__main__":
    main()
