"""What a GPU sweep measured, set beside what was expected of it: the figures docs/benchmarks.md quotes.

    python benchmarks/sweep_report.py data/results/h200-2026-11-26/sweep \
        [--repeat data/results/h200-2026-11-26/smoke/smoke-results] [--json]

From the run files alone (no GPU), per recipe:
1. the measured speedups (kernel time, as torchao publishes) beside each reference profile on the same shapes:
   the published H100 rowwise table and the modelled roofline of the sweep's GPU family (`<family>-roofline`,
   where one ships); median and worst relative difference, how often both sides agree on "speedup > 1", and
   the largest differences by shape (the 3 largest and every one over 25%);
2. the GEMM-only speedup of the breakdown probes (the 3 GEMMs, torch.mm against torch._scaled_mm), beside
   the physical limit of 2.0x (the FP8 tensor cores' rate over bf16's), and the recipe's casts (unfused,
   an upper bound) as a share of the bf16 kernel time of the same shape (suspect bf16 points left out);
3. repeatability: every point measured more than once (a resume re-measuring a suspect point, or `--repeat`
   runs of another command, such as the smoke test's 1024^3 points), kernel and wall time side by side;
4. the cost of the sweep: per run, points, the timing process's compile seconds and cold compiles, the
   workers' compile seconds (`precompile_s`, where recorded: cold unless the on-disk caches held the
   configuration already) and the points' own durations; points left out as suspect, with why.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
#: FP8 over bf16 dense tensor-core rate on Hopper (and Ada): the most a GEMM can gain from float8.
GEMM_LIMIT = 2.0
#: Relative differences above this are listed shape by shape (and the largest few always).
LARGE = 0.25
LARGEST = 3


def relative(measured: float, reference: float) -> float:
    return (reference - measured) / measured


def against_profile(speedups, profile_name: str) -> dict:
    """Each measured speedup beside `profile_name`'s prediction at the same (M, K, N, recipe)."""
    from fp8advisor.predict.profile_files import load_profile
    from fp8advisor.predict.speedup import predict_speedup

    profile = load_profile(profile_name)
    by_recipe = defaultdict(list)
    for pair in speedups:
        if not profile.covers(pair.recipe):
            continue
        predicted = predict_speedup(profile, pair.recipe, pair.M, pair.K, pair.N).speedup
        by_recipe[pair.recipe].append((pair, predicted))
    out = {}
    for recipe, rows in sorted(by_recipe.items()):
        errors = [abs(relative(pair.speedup, predicted)) for pair, predicted in rows]
        sides = [(pair.speedup > 1) == (predicted > 1) for pair, predicted in rows]
        large = sorted(rows, key=lambda row: -abs(relative(row[0].speedup, row[1])))
        out[recipe] = {
            "points": len(rows),
            "median_rel_diff": statistics.median(errors),
            "worst_rel_diff": max(errors),
            "same_side_of_1": sum(sides) / len(sides),
            "large": [
                {"shape": [pair.M, pair.K, pair.N], "measured": pair.speedup, "reference": predicted}
                for index, (pair, predicted) in enumerate(large)
                if index < LARGEST or abs(relative(pair.speedup, predicted)) > LARGE
            ],
        }
    return out


def breakdown(runs, speedups) -> dict:
    """Per recipe: the GEMM-only speedups of the breakdown probes, and the recipe's casts (unfused Triton
    kernels, an upper bound) as a share of the bf16 kernel time of the same shape (from `speedups`, the
    paired points: suspect ones left out)."""
    bf16 = {(pair.M, pair.K, pair.N): pair.bf16_time_s for pair in speedups}
    values, casts = defaultdict(list), defaultdict(list)
    for run in runs:
        for point in run.points:
            shape = (point["M"], point["K"], point["N"])
            if point.get("status") != "ok":
                continue
            if point.get("gemm_only_speedup"):
                values[point["recipe"]].append((shape, point["gemm_only_speedup"]))
            if point.get("cast_overhead_s") and bf16.get(shape):
                casts[point["recipe"]].append(point["cast_overhead_s"] / bf16[shape])
    out = {}
    for recipe, rows in sorted(values.items()):
        speedups = [value for _, value in rows]
        best_shape, best = max(rows, key=lambda row: row[1])
        out[recipe] = {
            "points": len(rows),
            "min": min(speedups),
            "median": statistics.median(speedups),
            "max": best,
            "max_at": list(best_shape),
            "over_limit": sum(value > GEMM_LIMIT for value in speedups),
            "casts_over_bf16_median": statistics.median(casts[recipe]) if casts[recipe] else None,
        }
    return out


def spread(values: list) -> float | None:
    """Largest over smallest, minus 1; None when a value is missing."""
    return max(values) / min(values) - 1 if all(values) else None


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def repeats(runs) -> list[dict]:
    """Points measured ok in more than one run: kernel and wall time of each, and which were suspect."""
    from fp8advisor.measure.results import point_key, suspect_reason

    seen = defaultdict(list)
    for run in runs:
        for point in run.points:
            if point.get("status") == "ok":
                seen[point_key(point)].append((run.run_id, point))
    out = []
    for key, measured in sorted(seen.items()):
        if len(measured) < 2:
            continue
        kernel = [point.get("kernel_time_s") for _, point in measured]
        wall = [(point.get("wall_time_s") or {}).get("median") for _, point in measured]
        out.append(
            {
                "point": list(key),
                "runs": [run_id for run_id, _ in measured],
                "kernel_time_s": kernel,
                "wall_time_s": wall,
                "kernel_spread": spread(kernel),
                "wall_spread": spread(wall),
                "suspect": [bool(suspect_reason(point)) for _, point in measured],
            }
        )
    return out


def cost(runs) -> list[dict]:
    from fp8advisor.measure.results import suspect_reason

    out = []
    for run in runs:
        compiles = [point.get("compile") or {} for point in run.points]
        durations = [point.get("duration_s") or 0.0 for point in run.points]
        workers = [point["precompile_s"] for point in run.points if point.get("precompile_s") is not None]
        out.append(
            {
                "run": run.run_id,
                "started": run.header.get("started"),
                "points": len(run.points),
                "points_seconds": sum(durations),
                "longest_point_s": max(durations, default=0.0),
                "compile_seconds": sum(record.get("seconds") or 0.0 for record in compiles),
                # the workers' compiles and one run each (runs before 2026-11-26 did not record them)
                "worker_compile_seconds": sum(workers) if workers else None,
                "worker_compile_longest_s": max(workers, default=None),
                "cold_compiles": sum(bool(record.get("cold")) for record in compiles),
                "precompiled": sum(point.get("precompiled") == "ok" for point in run.points),
                "suspect": [
                    f"{point['M']}x{point['K']}x{point['N']} {point['recipe']}: {suspect_reason(point)}"
                    for point in run.points
                    if suspect_reason(point)
                ],
            }
        )
    return out


def report(results: Path, repeat: list[Path]) -> dict:
    from fp8advisor.gpus import gpu_family
    from fp8advisor.measure.results import load_results
    from fp8advisor.measure.speedups import pair_with_baseline
    from fp8advisor.predict.profile_files import list_profiles, load_profile

    runs = load_results([results])
    device_name = runs[0].device_name
    speedups = pair_with_baseline(runs, basis="kernel_time")
    family = gpu_family(device_name)
    references = ["h100-published-rowwise-2025-06"]
    if family and f"{family.lower()}-roofline" in {profile.name for profile in list_profiles()}:
        references.append(f"{family.lower()}-roofline")
    return {
        "device": runs[0].header["device"],
        "software": runs[0].header["software"],
        "ceilings": runs[0].header.get("ceilings"),
        "speedups": [pair.to_json() for pair in speedups],
        "against": {name: against_profile(speedups, name) for name in references},
        "reference_provenance": {name: load_profile(name).provenance for name in references},
        "breakdown": breakdown(runs, speedups),
        "repeats": repeats(runs + load_results(repeat) if repeat else runs),
        "cost": cost(runs),
    }


def print_report(data: dict) -> None:
    device = data["device"]
    print(f"{device['name']} (driver {device['driver']}), {data['software']}")
    print(f"ceilings: {data['ceilings']}")
    for name, recipes in data["against"].items():
        print(f"\nmeasured vs {name} ({data['reference_provenance'][name]}), same shapes:")
        for recipe, row in recipes.items():
            print(
                f"  {recipe:<20} {row['points']:>3} points: median {row['median_rel_diff']:.1%}, "
                f"worst {row['worst_rel_diff']:.1%}, same side of 1.0 {row['same_side_of_1']:.0%}"
            )
            for item in row["large"]:
                M, K, N = item["shape"]
                measured, reference = item["measured"], item["reference"]
                print(f"      {M}x{K}x{N}: measured {measured:.2f}, reference {reference:.2f}")
    print(f"\nGEMM-only speedup (3 GEMMs of fwd+bwd; physical limit {GEMM_LIMIT}x) and casts / bf16 time:")
    for recipe, row in data["breakdown"].items():
        casts = row["casts_over_bf16_median"]
        print(
            f"  {recipe:<20} {row['points']:>3} points: min {row['min']:.2f}, median {row['median']:.2f}, "
            f"max {row['max']:.2f} at {row['max_at']}, over the limit: {row['over_limit']}; "
            f"casts median {'-' if casts is None else f'{casts:.0%}'} of the bf16 time"
        )
    print("\nrepeated points (kernel time, wall time):")
    for row in data["repeats"]:
        kernel = ", ".join(f"{value * 1e6:.1f}" for value in row["kernel_time_s"] if value)
        wall = ", ".join(f"{value * 1e6:.1f}" for value in row["wall_time_s"] if value)
        print(
            f"  {row['point']}: kernel us {kernel} ({percent(row['kernel_spread'])}); wall us {wall} "
            f"({percent(row['wall_spread'])}); suspect {row['suspect']}"
        )
    print("\nruns:")
    for row in data["cost"]:
        print(
            f"  {row['run']} {row['started']}: {row['points']} points, "
            f"{row['points_seconds']:.0f} s in points (longest {row['longest_point_s']:.1f} s), "
            f"timing-process compiles {row['compile_seconds']:.0f} s, {row['cold_compiles']} cold, "
            f"{row['precompiled']} pre-compiled"
        )
        if row["worker_compile_seconds"] is not None:
            print(
                f"      compile workers {row['worker_compile_seconds']:.0f} s in all, "
                f"the longest {row['worker_compile_longest_s']:.1f} s"
            )
        for suspect in row["suspect"]:
            print(f"      suspect: {suspect}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a bench results directory (run files)")
    parser.add_argument("--repeat", type=Path, action="append", default=[], help="other runs of the same GPU")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead")
    arguments = parser.parse_args()
    sys.path.insert(0, str(REPOSITORY))
    data = report(arguments.results, arguments.repeat)
    if arguments.json:
        print(json.dumps(data, indent=1))
    else:
        print_report(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
