"""Time `fp8advisor bench --grid default` against torchao's float8_roofline.py on the same shapes and GPU.

Usage (on a GPU with FP8 tensor cores, sm_89+):

    git clone https://github.com/pytorch/ao /tmp/ao     # the script is not in the torchao wheel
    python benchmarks/sweep_vs_torchao.py --ao /tmp/ao [--grid default] [--out fp8advisor-results/vs-torchao]

What it runs, each from a cold compile cache of its own (TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR point to
fresh directories, so that neither tool profits from the other's compiled kernels):

1. `fp8advisor bench --grid GRID --out OUT/fp8advisor`: bf16 + tensorwise + rowwise + rowwise_with_gw_hp.
2. torchao's `benchmarks/float8/float8_roofline.py` with `enable_fusion_modeling=True` (its LayerNorm ->
   Linear -> Sigmoid block, the published method), once per float8 recipe as the script takes one recipe per
   run, over the same shapes: the script's shape generator is replaced by the grid's shape list (the script
   offers no CLI for an arbitrary list), everything else is torchao's own code from the checkout.

It prints both wall times and their ratio, and how closely the two tools' speedups agree per recipe, and
writes all of it to OUT/sweep_vs_torchao.json. Nothing of torchao is copied into this repository.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

RECIPES = ("tensorwise", "rowwise", "rowwise_with_gw_hp")

#: Runs torchao's script inside a fresh interpreter: put its folder on sys.path, stand in for the two
#: console-only dependencies when they are missing (`fire` parses argv, `tqdm` draws a bar; we call run()
#: directly), give it our shapes, and call its run().
TORCHAO_DRIVER = """
import json, sys, types
sys.path.insert(0, sys.argv[1])
for name in ("fire", "tqdm"):
    try:
        __import__(name)
    except ImportError:
        stub = types.ModuleType(name)
        stub.Fire = lambda *a, **k: None
        stub.tqdm = lambda iterable, *a, **k: iterable
        sys.modules[name] = stub
import float8_roofline as roofline
shapes = [tuple(shape) for shape in json.loads(sys.argv[2])]
roofline.get_name_to_shapes_iter = lambda *args, **kwargs: list(enumerate(shapes))
roofline.run(outfile=sys.argv[3], float8_recipe_name=sys.argv[4], enable_fusion_modeling=True)
"""


def fail(message: str) -> None:
    print(f"sweep_vs_torchao: {message}", file=sys.stderr)
    raise SystemExit(2)


def check_gpu() -> dict:
    import torch

    if not torch.cuda.is_available():
        fail("needs a CUDA GPU with FP8 tensor cores (sm_89+); this machine has none. Nothing was measured.")
    capability = torch.cuda.get_device_capability()
    if capability < (8, 9):
        fail(f"{torch.cuda.get_device_name()} is sm_{capability[0]}{capability[1]}: no FP8 tensor cores.")
    from fp8advisor.device import describe_gpu, software_versions

    return {"device": describe_gpu(), "software": software_versions()}


def timed(command: list[str], environment: dict) -> float:
    """Wall seconds of `command`, which must succeed."""
    print("$", " ".join(command), flush=True)
    start = time.perf_counter()
    subprocess.run(command, env=environment, check=True)
    return time.perf_counter() - start


def fresh_caches(root: Path, name: str) -> dict:
    """The environment with inductor and Triton caches in empty directories of their own."""
    inductor, triton = root / name / "inductor", root / name / "triton"
    inductor.mkdir(parents=True)
    triton.mkdir(parents=True)
    return dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(inductor), TRITON_CACHE_DIR=str(triton))


def torchao_speedups(csv_path: Path) -> dict[tuple[int, int, int], float]:
    with csv_path.open() as file:
        return {
            (int(row["fwd_M"]), int(row["fwd_K"]), int(row["fwd_N"])): float(row["b_fp8_e2e_spdp"])
            for row in csv.DictReader(file)
        }


def agreement(ours: dict, theirs: dict) -> dict | None:
    """Median and worst |our speedup / torchao's - 1| over the shapes both measured."""
    common = [key for key in ours if key in theirs and theirs[key] > 0]
    if not common:
        return None
    errors = [abs(ours[key] / theirs[key] - 1) for key in common]
    return {
        "shapes": len(common),
        "median_relative_difference": statistics.median(errors),
        "worst": max(errors),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ao", type=Path, required=True, help="a checkout of https://github.com/pytorch/ao")
    parser.add_argument("--grid", default="default", help="fp8advisor grid (default: default)")
    parser.add_argument("--out", type=Path, default=Path("fp8advisor-results/vs-torchao"))
    arguments = parser.parse_args()

    machine = check_gpu()
    script_dir = arguments.ao / "benchmarks" / "float8"
    if not (script_dir / "float8_roofline.py").is_file():
        fail(f"{script_dir / 'float8_roofline.py'} not found: pass --ao a checkout of pytorch/ao")
    from fp8advisor.measure.linear import make_grid
    from fp8advisor.measure.results import load_results
    from fp8advisor.measure.speedups import pair_with_baseline

    grid = make_grid(arguments.grid)
    out = arguments.out
    out.mkdir(parents=True, exist_ok=True)
    started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    with tempfile.TemporaryDirectory(prefix="fp8advisor-caches-") as caches:
        ours_dir = out / "fp8advisor"
        ours_s = timed(
            [
                sys.executable,
                "-c",
                "from fp8advisor.cli import main; main()",
                "bench",
                "--grid",
                arguments.grid,
                "--out",
                str(ours_dir),
                "--no-png",
            ],
            fresh_caches(Path(caches), "fp8advisor"),
        )
        environment = fresh_caches(Path(caches), "torchao")
        shapes = json.dumps([list(shape) for shape in grid.shapes])
        torchao_s, torchao_csv = 0.0, {}
        for recipe in RECIPES:
            csv_path = out / f"torchao_float8_roofline_{recipe}.csv"
            torchao_s += timed(
                [sys.executable, "-c", TORCHAO_DRIVER, str(script_dir), shapes, str(csv_path), recipe],
                environment,
            )
            torchao_csv[recipe] = torchao_speedups(csv_path)

    ours = {}
    for pair in pair_with_baseline(load_results([ours_dir]), basis="kernel_time"):
        ours.setdefault(pair.recipe, {})[(pair.M, pair.K, pair.N)] = pair.speedup
    commit = subprocess.run(
        ["git", "-C", str(arguments.ao), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    report = {
        "started": started,
        **machine,
        "grid": grid.to_json(),
        "fp8advisor_bench_wall_s": ours_s,
        "torchao_float8_roofline_wall_s": torchao_s,
        "torchao_over_fp8advisor": torchao_s / ours_s,
        "torchao_commit": commit or None,
        "speedup_agreement": {
            recipe: agreement(ours.get(recipe, {}), torchao_csv[recipe]) for recipe in RECIPES
        },
        "method": "wall time of each tool from a cold inductor/Triton cache; torchao run once per recipe "
        "(enable_fusion_modeling=True) over the same shapes",
    }
    (out / "sweep_vs_torchao.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    shapes_text = f"{len(grid.shapes)} shapes, bf16 + {len(RECIPES)} recipes"
    print(f"\n{machine['device']['name']}: grid {grid.name!r}, {shapes_text}")
    print(f"fp8advisor bench:            {ours_s:8.1f} s")
    print(f"torchao float8_roofline.py:  {torchao_s:8.1f} s  ({torchao_s / ours_s:.2f}x fp8advisor's time)")
    for recipe, result in report["speedup_agreement"].items():
        if result:
            print(
                f"  {recipe:<20} speedups differ by {result['median_relative_difference']:.1%} (median), "
                f"{result['worst']:.1%} (worst) over {result['shapes']} shapes"
            )
    print(f"written: {out / 'sweep_vs_torchao.json'}")


if __name__ == "__main__":
    main()
