"""Record HolisticTraceAnalysis' (HTA's) own figures for the public GPU traces in tests/data/traces/hta/.

The peer check of issue 29 compares `fp8advisor trace`'s breakdown of these real A100/V100 traces with HTA's
breakdown of the same files. HTA is not a dependency of this project, so its figures are recorded here, once,
by running HTA itself; the tests read the json this writes. Run it with a throwaway venv that has HTA, never
with the project's environment (this script does not import fp8advisor):

    python3 -m venv /tmp/htavenv && /tmp/htavenv/bin/pip install HolisticTraceAnalysis==0.5.0
    /tmp/htavenv/bin/python benchmarks/hta_peer_figures.py

    options: [TRACE ...] (default: every tests/data/traces/hta/*.json.gz)
             [-o FILE]   (default: tests/data/traces/hta_figures.json)

Each trace is copied into its own temporary folder as `rank-<R>.json.gz` (R from the trace's
distributedInfo.rank, which is where HTA itself reads the rank from) and loaded with
`hta.trace_analysis.TraceAnalysis(trace_dir=...)`, twice: with HTA's default
(`include_last_profiler_step=False`: HTA drops the last ProfilerStep, see
`Trace._filter_irrelevant_gpu_kernels`) and with `include_last_profiler_step=True` (and, for traces with
ns-resolution timestamps, once more with HTA_DISABLE_NS_ROUNDING=1). What each figure is, and which HTA
function or column gave it, is written into the json itself (`definitions`).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gzip
import hashlib
import json
import logging
import math
import os
import platform
import re
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

import hta
import numpy as np
import pandas as pd
from hta.analyzers.breakdown_analysis import BreakdownAnalysis
from hta.analyzers.straggler import extract_iteration_info
from hta.trace_analysis import TraceAnalysis
from hta.utils.utils import get_kernel_type, merge_kernel_intervals

ROOT = Path(__file__).resolve().parent.parent
TRACE_DIR = ROOT / "tests" / "data" / "traces" / "hta"
DEFAULT_OUT = ROOT / "tests" / "data" / "traces" / "hta_figures.json"

NS_ROUNDING_ENV = "HTA_DISABLE_NS_ROUNDING"  # hta.configs.env_options.HTA_DISABLE_NS_ROUNDING_ENV

#: The columns of HTA's per-kernel-name table kept here (count is added by this script).
NAME_COLUMNS = ["name", "kernel_type", "count", "sum (us)", "mean (us)", "min (us)", "max (us)", "stddev"]

#: HTA's kernel types, in the order get_gpu_kernel_breakdown analyses them (include_memory_kernels=True).
HTA_TYPES = ["COMPUTATION", "COMMUNICATION", "MEMORY"]

DEFINITIONS = {
    "units": (
        "microseconds (the trace's own unit). HTA shifts every timestamp so that the earliest event of "
        "the trace is 0 (Trace._align_all_ranks): *_ts / *_end figures here are those HTA-relative times;"
        " add `hta_min_ts_us` to get the trace's absolute ts. For traces with fractional (ns-resolution) "
        "timestamps HTA rounds every event inward on load (ts = ceil(ts), end = floor(ts + dur), dur = "
        "end - ts; trace_parser.round_down_time_stamps), so its durations can be up to 1-2 us per event "
        "shorter than the raw file's."
    ),
    "hta_device_event": (
        "HTA's own test for a GPU-side event in its breakdowns: `stream != -1` in the parsed dataframe "
        "(`analyzer.t.get_trace(rank)`). That is every event with a CUDA stream: cat 'kernel', "
        "'gpu_memcpy' and 'gpu_memset' (gpu_user_annotation rows have stream -1 and are not counted)."
    ),
    "what_hta_keeps": (
        "On load HTA keeps only the CPU events that start before the last ProfilerStep starts (default) "
        "or before it ends (include_last_profiler_step=True), and only the GPU events whose correlation "
        "id matches one of those kept CPU events (Trace._filter_irrelevant_gpu_kernels: GPU events "
        "without a CPU-side launch in the trace are dropped). Every figure below is of what HTA kept; "
        "`raw_trace` counts the file."
    ),
    "temporal_breakdown": (
        "TraceAnalysis.get_temporal_breakdown(visualize=False), one row per rank: kernel_time = last end "
        "- first start of all HTA device events; idle_time = kernel_time - union of all device events; "
        "compute_time = union of COMPUTATION events; non_compute_time = kernel_time - compute - idle."
    ),
    "kernel_type_breakdown": (
        "TraceAnalysis.get_gpu_kernel_breakdown(visualize=False, duration_ratio=1.0, num_kernels=10**9, "
        "include_memory_kernels=True), first dataframe (columns kernel_type, sum, percentage). NOT a sum "
        "of durations: HTA merges the intervals of each type and splits the timeline by which types run "
        "(rows like 'COMPUTATION overlapping COMMUNICATION'); the rows add up to the union of the device "
        "events of the three types. Kernels of HTA type OTHER are left out of it."
    ),
    "kernel_name_table": (
        "same call, second dataframe, in full (duration_ratio=1.0 and a huge num_kernels turn off HTA's "
        "grouping into 'others'): name (full, not shortened), kernel_type, sum/max/min/mean (us, sums of "
        "durations), stddev; count = round(sum / mean) (HTA gives no count column; mean = sum / count)."
    ),
    "hta_profiler_steps": (
        "hta.analyzers.straggler.extract_iteration_info(analyzer.t): the CPU-side ProfilerStep#N spans "
        "HTA sees (ts, dur, end), one per iteration kept."
    ),
    "per_iteration_hta": (
        "HTA has no public per-iteration breakdown. Figures here come from HTA's `iteration` column "
        "(hta.common.trace.add_iteration: a CPU event gets the ProfilerStep whose [ts, ts+dur) holds its "
        "ts; a GPU event gets the iteration of the CPU event its correlation points to, i.e. of the "
        "launching cudaLaunchKernel / cudaMemcpyAsync, NOT of where the kernel ran in time; -1 = none) "
        "with HTA's hta.utils.utils.get_kernel_type for the kernel type. sum_dur_by_type: sum of "
        "durations per type; kernel_type_breakdown: HTA's (private) "
        "BreakdownAnalysis._get_gpu_kernel_type_time, the same function get_gpu_kernel_breakdown uses for"
        " the whole trace, applied to the iteration's device events; temporal: "
        "BreakdownAnalysis._get_idle_time_for_kernels (idle, kernel_time) plus the merged COMPUTATION "
        "time, as in get_temporal_breakdown, applied to the iteration's device events."
    ),
    "per_iteration_direct": (
        "Computed in this script straight from HTA's parsed dataframe (columns iteration, stream, ts, "
        "dur, cat, name): a device event is `stream >= 0`; `kernels_only` further restricts to cat == "
        "'kernel' (no memcpy/memset). count, sum_dur (sum of dur), first_ts, last_end (max of ts + dur), "
        "span = last_end - first_ts, per HTA iteration, and per CUDA stream."
    ),
    "per_step_window_direct": (
        "Also from HTA's dataframe, for comparison with a reader that cuts the device timeline by the CPU"
        " ProfilerStep spans: device events (stream >= 0) whose ts lies in [step.ts, step.end) of "
        "hta_profiler_steps. Where the CPU runs ahead of the GPU this differs a lot from the launch-based"
        " `iteration` (and the first step misses the device work HTA dropped because its launch predates "
        "the trace)."
    ),
    "modes": (
        "hta_default: TraceAnalysis(include_last_profiler_step=False), HTA's default (last ProfilerStep "
        "dropped); hta_include_last_profiler_step: include_last_profiler_step=True (every ProfilerStep); "
        "hta_include_last_profiler_step_no_ns_rounding (only for traces with fractional timestamps): the "
        "same with HTA_DISABLE_NS_ROUNDING=1, so durations are the raw float ones."
    ),
}


def _py(x):
    """numpy/pandas scalars -> plain json values."""
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating, float)):
        f = float(x)
        if math.isnan(f):
            return None
        return int(f) if f.is_integer() else round(f, 6)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


def _records(df: pd.DataFrame) -> list[dict]:
    return [{str(k): _py(v) for k, v in row.items()} for row in df.to_dict("records")]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def raw_counts(path: Path) -> dict:
    """What the file itself holds (stdlib json only), to show what HTA's load keeps."""
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    device_cats = ("kernel", "gpu_memcpy", "gpu_memset")
    launch_corr = {
        e["args"]["correlation"]
        for e in events
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    dev = [e for e in events if e.get("cat") in device_cats]
    steps = sorted(
        (e for e in events if re.match(r"ProfilerStep#\d+$", str(e.get("name", ""))) and e.get("ph") == "X"),
        key=lambda e: e["ts"],
    )
    return {
        "events": len(events),
        "device_events_by_cat": dict(Counter(e["cat"] for e in dev)),
        "device_events_without_cuda_runtime_launch": sum(
            1 for e in dev if e.get("args", {}).get("correlation") not in launch_corr
        ),
        "streams": sorted({e["args"]["stream"] for e in dev if "stream" in e.get("args", {})}),
        "sum_dur_device_events_us": _py(sum(float(e.get("dur", 0)) for e in dev)),
        "profiler_steps": [{"name": e["name"], "ts": _py(e["ts"]), "dur": _py(e["dur"])} for e in steps],
        "device_properties": sorted({p.get("name") for p in doc.get("deviceProperties", [])}),
        "distributed_info": {
            k: v
            for k, v in (doc.get("distributedInfo") or {}).items()
            if k in ("backend", "rank", "world_size")
        },
    }


def _span(g: pd.DataFrame) -> dict:
    first = g["ts"].min()
    last = (g["ts"] + g["dur"]).max()
    return {
        "count": int(len(g)),
        "sum_dur": _py(g["dur"].sum()),
        "first_ts": _py(first),
        "last_end": _py(last),
        "span": _py(last - first),
    }


def per_iteration(df: pd.DataFrame, sym: list[str]) -> tuple[list[dict], list[dict]]:
    dev = df[df["stream"] >= 0].copy()
    dev["kernel_type"] = dev["name"].map(lambda n: get_kernel_type(sym[n]))
    dev["cat_s"] = dev["cat"].map(lambda c: sym[c])
    hta_rows, direct_rows = [], []
    for it, g in sorted(dev.groupby("iteration"), key=lambda kv: kv[0]):
        it = int(it)
        # HTA's own helpers on this iteration's device events (they sort / add columns: give them copies).
        types_present = [t for t in HTA_TYPES if (g["kernel_type"] == t).any()]
        ktt = BreakdownAnalysis._get_gpu_kernel_type_time(g.copy(), types_present)
        idle, kernel_time = BreakdownAnalysis._get_idle_time_for_kernels(g.copy())
        comp = g[g["kernel_type"] == "COMPUTATION"].copy()
        if len(comp):
            m = merge_kernel_intervals(comp)
            compute_time = m["end"].sum() - m["ts"].sum()
        else:
            compute_time = 0
        hta_rows.append(
            {
                "iteration": it,
                "sum_dur_by_type": {t: _py(v) for t, v in g.groupby("kernel_type")["dur"].sum().items()},
                "count_by_type": {t: int(v) for t, v in g.groupby("kernel_type").size().items()},
                "first_ts": _py(g["ts"].min()),
                "last_end": _py((g["ts"] + g["dur"]).max()),
                "kernel_type_breakdown": _records(ktt.sort_values("sum", ascending=False)),
                "temporal": {
                    "kernel_time": _py(kernel_time),
                    "idle_time": _py(idle),
                    "compute_time": _py(compute_time),
                    "non_compute_time": _py(kernel_time - compute_time - idle),
                },
            }
        )
        k = g[g["cat_s"] == "kernel"]
        direct_rows.append(
            {
                "iteration": it,
                "device_events": _span(g),
                "kernels_only": _span(k) if len(k) else None,
                "by_stream": {
                    str(int(s)): _span(gs) for s, gs in sorted(g.groupby("stream"), key=lambda kv: kv[0])
                },
            }
        )
    return hta_rows, direct_rows


def per_step_window(df: pd.DataFrame, steps: pd.DataFrame) -> list[dict]:
    """Device events (stream >= 0) of HTA's dataframe whose ts lies in a ProfilerStep's CPU span [ts, end)."""
    dev = df[df["stream"] >= 0]
    rows = []
    for step in steps.itertuples():
        g = dev[(dev["ts"] >= step.ts) & (dev["ts"] < step.end)]
        rows.append(
            {
                "iteration": int(step.iter),
                "step_ts": _py(step.ts),
                "step_end": _py(step.end),
                "device_events": _span(g) if len(g) else None,
            }
        )
    return rows


def _fractional_ts(path: Path) -> bool:
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    return any(
        isinstance(e.get("ts"), float) and not float(e["ts"]).is_integer()
        for e in doc["traceEvents"]
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    )


def analyse(trace: Path, include_last: bool, ns_rounding: bool = True) -> dict:
    rank = json.load(gzip.open(trace, "rt")).get("distributedInfo", {}).get("rank", 0)
    old = os.environ.get(NS_ROUNDING_ENV)
    os.environ[NS_ROUNDING_ENV] = "0" if ns_rounding else "1"
    try:
        with tempfile.TemporaryDirectory(prefix="hta_peer_") as tmp:
            shutil.copyfile(trace, Path(tmp) / f"rank-{rank}.json.gz")
            analyzer = TraceAnalysis(trace_dir=tmp, include_last_profiler_step=include_last)
    finally:
        if old is None:
            os.environ.pop(NS_ROUNDING_ENV, None)
        else:
            os.environ[NS_ROUNDING_ENV] = old
    temporal = analyzer.get_temporal_breakdown(visualize=False)
    ktype, knames = analyzer.get_gpu_kernel_breakdown(
        visualize=False, duration_ratio=1.0, num_kernels=10**9, include_memory_kernels=True
    )
    iters = extract_iteration_info(analyzer.t)
    sym = analyzer.t.symbol_table.get_sym_table()
    out = {
        "call": f"TraceAnalysis(trace_dir=<tmp>/ holding rank-{rank}.json.gz, "
        f"include_last_profiler_step={include_last}) with {NS_ROUNDING_ENV}={'0' if ns_rounding else '1'}",
        "hta_min_ts_us": _py(analyzer.t.min_ts),
        "hta_iterations": [int(i) for i in analyzer.t.get_iterations()],
        "ranks": {},
    }
    for r in analyzer.t.get_ranks():
        df = analyzer.t.get_trace(r)
        names = knames[knames["rank"] == r].copy()
        names["count"] = (names["sum (us)"] / names["mean (us)"]).round().astype(int)
        names = names.sort_values(["kernel_type", "sum (us)", "name"], ascending=[True, False, True])
        dev = df[df["stream"] != -1]
        other = dev[dev["name"].map(lambda n: get_kernel_type(sym[n]) == "OTHER")]
        hta_it, direct_it = per_iteration(df, sym)
        windows = per_step_window(df, iters[iters["rank"] == r])
        out["ranks"][str(r)] = {
            "temporal_breakdown": _records(temporal[temporal["rank"] == r])[0],
            # HTA's table adds up all ranks; each run here holds one rank, so it is this rank's
            "kernel_type_breakdown": _records(ktype),
            "kernel_type_breakdown_total": _py(ktype["sum"].sum()),
            "kernel_name_table": _records(names[NAME_COLUMNS]),
            "device_events_kept": int(len(dev)),
            "device_events_sum_dur": _py(dev["dur"].sum()),
            "other_type_device_events_left_out_of_kernel_breakdown": {
                "count": int(len(other)),
                "sum_dur": _py(other["dur"].sum()),
                "names": sorted({sym[n] for n in other["name"]}),
            },
            "hta_profiler_steps": _records(iters[iters["rank"] == r][["iter", "ts", "dur", "end"]]),
            "per_iteration_hta": hta_it,
            "per_iteration_direct": direct_it,
            "per_step_window_direct": windows,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*", type=Path)
    ap.add_argument("-o", "--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    logging.getLogger("hta").setLevel(logging.ERROR)
    traces = args.traces or sorted(TRACE_DIR.glob("*.json.gz"))
    result = {
        "what": "HolisticTraceAnalysis' own figures for the public GPU traces in tests/data/traces/hta/ "
        "(peer check of issue 29); written by benchmarks/hta_peer_figures.py, do not edit by hand",
        "command": " ".join([sys.executable, *sys.argv]),
        "cwd": str(Path.cwd()),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "hta_version": getattr(hta, "__version__", None) or _hta_version(),
        "python": platform.python_version(),
        "pandas": pd.__version__,
        "numpy": np.__version__,
        "definitions": DEFINITIONS,
        "traces": {},
    }
    for trace in traces:
        trace = trace.resolve()
        key = trace.relative_to(ROOT).as_posix() if trace.is_relative_to(ROOT) else str(trace)
        print(f"{key}: HTA ...", file=sys.stderr)
        result["traces"][trace.name] = {
            "path": key,
            "sha256": _sha256(trace),
            "bytes": trace.stat().st_size,
            "raw_trace": raw_counts(trace),
            "hta_default": analyse(trace, include_last=False),
            "hta_include_last_profiler_step": analyse(trace, include_last=True),
        }
        if _fractional_ts(trace):
            result["traces"][trace.name]["hta_include_last_profiler_step_no_ns_rounding"] = analyse(
                trace, include_last=True, ns_rounding=False
            )
    args.out.write_text(json.dumps(result, indent=1, sort_keys=False) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def _hta_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("HolisticTraceAnalysis")
    except Exception:  # pragma: no cover
        return None


if __name__ == "__main__":
    sys.exit(main())
