"""Issue 32's third step set beside what fp8advisor predicted: the figures docs/benchmarks.md quotes.

    python benchmarks/measured_vs_predicted.py data/results/h200-2026-11-26 [--json]

From the committed files alone (no GPU), three sections:
1. **The training step** (`train-step/train-step-<name>.json`, written by `benchmarks/train_step.py`, with
   the profiler traces of `traces/<name>/`): per token count, recipe and variant, the measured step time
   and speedup beside the step model's (its report carries the prediction); the step model before its in-step
   efficiency divides it (`raw`: the sum of its terms for the GPU alone); and, from each variant's one-step
   trace, the device time by kind of kernel beside the step model's term for the same work (Linear GEMMs
   and float8 casts, attention, the optimizer, the rest), with the count of float8 GEMM ops against three
   per converted layer (forward, input gradient, weight gradient: proof that float8 ran where it was set).
2. **The in-context block** (`model/run-*.jsonl`, `bench --model`): per block and recipe, bf16, every
   convertible layer, the advice, torchao's auto filter and the search's choice, with the layers each holds.
3. **The grouped GEMMs** (`grouped/run-*.jsonl`, `bench --grouped`, and the smoke test's one point): per
   shape measured in bf16 and rowwise (suspect points left out), the kernel times and speedup beside the
   grouped roofline's.

A trace's kernels are sorted by the CPU op that launched them (the trace's `External id`): `aten::mm` is a
bf16 GEMM, `aten::_scaled_mm` a float8 GEMM, cuDNN/flash attention ops attention, fused AdamW the
optimizer, and inductor's Triton kernels that take an absolute maximum, clamp a conversion or feed
`_scaled_mm` float8 casts, with whatever inductor fused into them (a norm, an activation, a residual add, a
rotary embedding's or attention's backward): in float8 variants the Linear class therefore holds some work
that bf16 variants count under "the rest" or attention.
A first reading until `fp8advisor trace` (issue 29) reads traces properly.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_step  # noqa: E402  (its report's own lookup of the prediction beside each result)

#: Which step-model terms price the work of each kind of kernel in a trace.
TERMS_OF_CLASS = {
    "Linear (GEMMs + casts)": ("linear_bf16", "linear_float8"),
    "attention": ("attention",),
    "optimizer": ("optimizer",),
    "the rest": ("memory_bound", "loss", "matmul", "recompute"),
}
LINEAR_CLASSES = ("bf16 GEMM", "float8 GEMM", "float8 cast")


def relative(measured: float, predicted: float) -> float:
    return (predicted - measured) / measured


# --- 1. the training step ----------------------------------------------------------------------------------


def kernel_class(op: str, kernel: str) -> str:
    """The kind of work a device record does, from the op that launched it and its own name."""
    if op == "aten::_scaled_mm":
        return "float8 GEMM"
    if op in ("aten::mm", "aten::addmm", "aten::bmm"):
        return "bf16 GEMM"
    amax = "abs" in kernel and "max" in kernel
    saturating_cast = "clamp" in kernel and "_to_copy" in kernel  # x * scale, clamped, to float8
    if op.startswith("triton") and (amax or saturating_cast or "_scaled_mm" in kernel):
        return "float8 cast"  # before attention: a cast fused onto attention's backward names attention too
    if "attention" in op or "flash" in kernel:
        return "attention"
    if "adam" in op:
        return "optimizer"
    return "other"


def trace_breakdown(path: Path) -> dict:
    """Device milliseconds by kernel class over a one-step trace, and the GEMM ops it launched."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    ops = {
        event["args"].get("External id"): event["name"] for event in events if event.get("cat") == "cpu_op"
    }
    device_ms: Counter = Counter()
    for event in events:
        if event.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            op = ops.get(event["args"].get("External id"), "")
            device_ms[kernel_class(op, event["name"])] += event["dur"] / 1e3
    gemm_ops = Counter(
        event["name"]
        for event in events
        if event.get("cat") == "cpu_op" and event["name"] in ("aten::mm", "aten::_scaled_mm")
    )
    return {
        "device_ms": {key: round(value, 2) for key, value in sorted(device_ms.items())},
        "busy_ms": round(sum(device_ms.values()), 2),
        "float8_gemm_ops": gemm_ops["aten::_scaled_mm"],
        "bf16_gemm_ops": gemm_ops["aten::mm"],
    }


def _modelled_ms(terms: list[dict], efficiency: float) -> dict[str, float]:
    """The step model's seconds per trace class, before the in-step efficiency divided them."""
    seconds = {term["name"]: term["seconds"] for term in terms}
    return {
        label: round(sum(seconds.get(name, 0.0) for name in names) * efficiency * 1e3, 2)
        for label, names in TERMS_OF_CLASS.items()
    }


def _measured_by_term(device_ms: dict) -> dict[str, float]:
    linear = sum(device_ms.get(name, 0.0) for name in LINEAR_CLASSES)
    return {
        "Linear (GEMMs + casts)": round(linear, 2),
        "attention": device_ms.get("attention", 0.0),
        "optimizer": device_ms.get("optimizer", 0.0),
        "the rest": device_ms.get("other", 0.0),
    }


def train_steps(folder: Path) -> list[dict]:
    """Every variant of every train_step.py report in `folder/train-step`, beside its prediction."""
    rows = []
    for path in sorted((folder / "train-step").glob("*.json")):
        report = json.loads(path.read_text())
        traces = folder / "traces" / path.stem.removeprefix("train-step-")
        for result in report["results"]:
            if result["status"] != "ok":
                continue
            step = train_step.prediction_of(report, result)["step"]
            strategy = step["strategies"][train_step.step_strategy_of(result["variant"])]
            efficiency = step["in_step_efficiency"]
            row = {
                "report": path.name,
                "tokens": result["tokens_per_step"],
                "recipe": result["recipe"],
                "variant": result["variant"],
                "converted": result["converted"],
                "layers": result["linear_layers"],
                "measured_ms": round(result["median_s"] * 1e3, 1),
                "predicted_ms": round(strategy["step_s"] * 1e3, 1),
                "raw_predicted_ms": round(strategy["step_s"] * efficiency * 1e3, 1),
                "in_step_efficiency": efficiency,
                "measured_speedup": result["measured_step_speedup"],
                "predicted_speedup": None if result["variant"] == "bf16" else strategy["step_speedup"],
            }
            trace = traces / (result.get("trace") or "")
            if result.get("trace") and trace.is_file():
                breakdown = trace_breakdown(trace)
                row["trace"] = breakdown
                row["trace_by_term_ms"] = _measured_by_term(breakdown["device_ms"])
                row["model_by_term_ms"] = _modelled_ms(strategy["terms"], efficiency)
            rows.append(row)
    return rows


# --- 2. the in-context block -------------------------------------------------------------------------------


def _ms(wall: dict) -> float:
    return round(wall["median"] * 1e3, 2)


def in_context(folder: Path) -> list[dict]:
    """Per block and recipe: what bench --model measured for each seed and what its search chose."""
    rows = []
    for path in sorted((folder / "model").glob("run-*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record.get("kind") != "block_choice":
                continue
            seeds = record["seeds"]
            bf16_ms = _ms(record["bf16_wall_time_s"])
            row = {
                "block": record["block"],
                "recipe": record["recipe"],
                "bf16_ms": bf16_ms,
                "chosen_ms": _ms(record["wall_time_s"]),
                "chosen": sorted(record["float8"]),
            }
            for seed in ("all", "advice", "auto"):
                row[f"{seed}_ms"] = _ms(seeds[seed]["wall_time_s"])
                row[seed] = sorted(seeds[seed]["float8"])
            for seed in ("all", "advice", "auto", "chosen"):
                row[f"{seed}_speedup"] = round(bf16_ms / row[f"{seed}_ms"], 3)
            rows.append(row)
    return rows


# --- 3. the grouped GEMMs ----------------------------------------------------------------------------------


def grouped(folders: list[Path], gpu: str) -> list[dict]:
    """Each grouped shape measured in bf16 and rowwise, beside the grouped roofline of `gpu`."""
    from fp8advisor.measure.results import suspect_reason
    from fp8advisor.predict import roofline

    kernel_s: dict[tuple, dict[str, float]] = defaultdict(dict)
    for folder in folders:
        for path in sorted(folder.glob("run-*.jsonl")):
            for line in path.read_text().splitlines():
                record = json.loads(line)
                if record.get("kind") == "run" or record.get("status") != "ok" or suspect_reason(record):
                    continue
                shape = (record["E"], record["M_per_expert"], record["K"], record["N"])
                kernel_s[shape][record["recipe"]] = record["kernel_time_s"]
    rows = []
    for (E, M, K, N), times in sorted(kernel_s.items()):
        if not {"bf16", "rowwise"} <= set(times):
            continue
        groups = (M,) * E
        modelled_bf16 = roofline.grouped_fwd_bwd_time_s(groups, K, N, "bf16", gpu)
        modelled_float8 = roofline.grouped_fwd_bwd_time_s(groups, K, N, "rowwise", gpu)
        measured = times["bf16"] / times["rowwise"]
        predicted = modelled_bf16 / modelled_float8
        rows.append(
            {
                "E": E,
                "M_per_expert": M,
                "K": K,
                "N": N,
                "bf16_ms": round(times["bf16"] * 1e3, 3),
                "rowwise_ms": round(times["rowwise"] * 1e3, 3),
                "roofline_bf16_ms": round(modelled_bf16 * 1e3, 3),
                "roofline_rowwise_ms": round(modelled_float8 * 1e3, 3),
                "measured_speedup": round(measured, 3),
                "roofline_speedup": round(predicted, 3),
                "rel_diff": relative(measured, predicted),
            }
        )
    return rows


def report(folder: Path, gpu: str = "H200") -> dict:
    grouped_folders = [folder / "grouped", folder / "smoke" / "smoke-grouped"]
    steps = train_steps(folder)
    float8 = [row for row in steps if row["predicted_speedup"] is not None]
    errors = [abs(relative(row["measured_speedup"], row["predicted_speedup"])) for row in float8]
    return {
        "train_step": steps,
        "train_step_summary": {
            "variants": len(float8),
            "median_rel_diff": round(statistics.median(errors), 3) if errors else None,
            "worst_rel_diff": round(max(errors), 3) if errors else None,
            "same_side_of_1": sum(
                (row["measured_speedup"] > 1) == (row["predicted_speedup"] > 1) for row in float8
            ),
        },
        "in_context": in_context(folder),
        "grouped": grouped([path for path in grouped_folders if path.is_dir()], gpu),
    }


# --- printing ----------------------------------------------------------------------------------------------


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}x"


def _names(layers: list[str]) -> str:
    """A block's float8 layers by their names in the block ('' is a unit that is one Linear itself)."""
    return ", ".join(name or "(the layer itself)" for name in layers) or "none"


def print_report(data: dict) -> None:
    print("## The training step: measured beside the step model")
    print("| tokens | recipe | variant | float8 | step ms | predicted | raw model | speedup | predicted |")
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|")
    for row in data["train_step"]:
        print(
            f"| {row['tokens']} | {row['recipe'] or '-'} | {row['variant']} "
            f"| {row['converted']}/{row['layers']} | {row['measured_ms']} | {row['predicted_ms']} "
            f"| {row['raw_predicted_ms']} "
            f"| {_x(row['measured_speedup'])} | {_x(row['predicted_speedup'])} |"
        )
    summary = data["train_step_summary"]
    print(
        f"\nstep speedups: {summary['variants']} float8 variants, median difference "
        f"{summary['median_rel_diff']:.1%}, worst {summary['worst_rel_diff']:.1%}, same side of 1.0 for "
        f"{summary['same_side_of_1']}"
    )
    print("\n## The training step's trace by kind of work (ms of device time; model = before the efficiency)")
    print("| tokens | variant | recipe | float8 GEMM ops | " + " | ".join(TERMS_OF_CLASS) + " |")
    print("|---:|---|---|---:|" + "---|" * len(TERMS_OF_CLASS))
    for row in data["train_step"]:
        if "trace" not in row:
            continue
        cells = [f"{row['trace_by_term_ms'][k]} / {row['model_by_term_ms'][k]}" for k in TERMS_OF_CLASS]
        ops = f"{row['trace']['float8_gemm_ops']} (3 x {row['converted']})"
        print(
            f"| {row['tokens']} | {row['variant']} | {row['recipe'] or '-'} | {ops} | "
            + " | ".join(cells)
            + " |"
        )
    print("\n## The in-context block (wall ms, median)")
    print("| block | recipe | bf16 | all | advice | auto | chosen | chosen layers | advice layers |")
    print("|---|---|---:|---:|---:|---:|---:|---|---|")
    for row in data["in_context"]:
        times = " | ".join(str(row[f"{seed}_ms"]) for seed in ("bf16", "all", "advice", "auto", "chosen"))
        layers = f"{_names(row['chosen'])} | {_names(row['advice'])}"
        print(f"| {row['block']} | {row['recipe']} | {times} | {layers} |")
    print("\n## The grouped GEMMs: kernel time beside the grouped roofline")
    print(
        "| E | M/expert | K | N | bf16 ms | rowwise ms | speedup | roofline bf16 | rowwise | speedup | diff |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in data["grouped"]:
        print(
            f"| {row['E']} | {row['M_per_expert']} | {row['K']} | {row['N']} | {row['bf16_ms']} "
            f"| {row['rowwise_ms']} | {row['measured_speedup']:.2f}x | {row['roofline_bf16_ms']} "
            f"| {row['roofline_rowwise_ms']} | {row['roofline_speedup']:.2f}x | {row['rel_diff']:+.0%} |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a GPU visit's results folder (data/results/<gpu>-<date>)")
    parser.add_argument("--gpu", default="H200", help="the GPU the grouped roofline models (default H200)")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead")
    args = parser.parse_args()
    if not args.folder.is_dir():
        print(f"error: {args.folder} is not a folder of results", file=sys.stderr)
        return 2
    data = report(args.folder, args.gpu)
    if args.json:
        print(json.dumps(data, indent=1))
    else:
        print_report(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
