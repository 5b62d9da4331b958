"""Regenerate the shipped profiles in data/profiles/ (deterministic: run it twice, get identical bytes).

    python benchmarks/make_shipped_profiles.py [--check]

- h100-published-rowwise-2025-06.json: `fp8advisor fit` of the published torchao H100 rowwise table, exactly
  as   fp8advisor fit data/results/torchao_rowwise_h100_2025-06.csv --device "NVIDIA H100" \
        --name h100-published-rowwise-2025-06 --created 2026-11-22 --software torch=2.8.0a0 \
        --source "..." --method "..." -o data/profiles/h100-published-rowwise-2025-06.json
  (the options below are the exact values);
- h200-measured-2026-11-26.json: `fp8advisor fit` of this project's first GPU sweep (the default grid on one
  H200, data/results/h200-2026-11-26/sweep/, issue 32), exactly as
      fp8advisor fit data/results/h200-2026-11-26/sweep --name h200-measured-2026-11-26 --created 2026-11-26 \
        --source "<MEASURED_H200['source'] in the script>" -o data/profiles/h200-measured-2026-11-26.json
  (device, software and method come from the results' own headers);
- <gpu>-roofline.json: torchao's roofline model for every recipe, per GPU family (provenance "modelled").

`--check` exits 1 when a file on disk differs from what would be written (for CI).
"""

from __future__ import annotations

import sys
from pathlib import Path

from fp8advisor.paths import DATA_DIR
from fp8advisor.predict.fit import fit_profile, roofline_profile
from fp8advisor.predict.profile import dumps_profile

#: The date stamped in every shipped profile; bump it when the profiles are regenerated with new content.
CREATED = "2026-11-22"

PUBLISHED_TABLE = DATA_DIR / "results" / "torchao_rowwise_h100_2025-06.csv"
PUBLISHED = {
    "name": "h100-published-rowwise-2025-06",
    "device_name": "NVIDIA H100",
    "software": {"torch": "2.8.0a0"},
    "source": "pytorch/ao docs/static/fp8-rowwise-perf.png (H100, PyTorch 2.8.0a0, rowwise, June 2025), "
    "transcribed to 2 decimals in data/results/torchao_rowwise_h100_2025-06.csv",
    "method": "torch.profiler GPU kernel time (2 warm-up + 5 profiled iterations) of LNLinearSigmoid "
    "(LayerNorm(K, elementwise_affine=False) -> Linear(K, N, bias=False) -> Sigmoid, bf16) "
    "forward+backward under "
    "torch.compile, torchao benchmarks/float8/float8_roofline.py --enable_fusion_modeling; "
    "speedup = bf16 time / float8 time",
}
MEASURED_H200 = {
    "results": DATA_DIR / "results" / "h200-2026-11-26" / "sweep",
    "name": "h200-measured-2026-11-26",
    "created": "2026-11-26",
    "source": "fp8advisor bench --grid default on one NVIDIA H200 (141 GB, driver 580.159.04), 2026-11-26, "
    "this project's first GPU sweep (issue 32): the run files in data/results/h200-2026-11-26/sweep/",
}
ROOFLINE_FAMILIES = ("H100", "H200", "B200")


def shipped_profiles() -> dict[str, str]:
    """File name -> JSON text of every shipped profile."""
    published = fit_profile([PUBLISHED_TABLE], created=CREATED, **PUBLISHED).profile
    texts = {f"{published.name}.json": dumps_profile(published)}
    measured = fit_profile(
        [MEASURED_H200["results"]],
        name=MEASURED_H200["name"],
        created=MEASURED_H200["created"],
        source=MEASURED_H200["source"],
    ).profile
    texts[f"{measured.name}.json"] = dumps_profile(measured)
    for family in ROOFLINE_FAMILIES:
        profile = roofline_profile(family, created=CREATED)
        texts[f"{profile.name}.json"] = dumps_profile(profile)
    return texts


def main(argv: list[str]) -> int:
    out_dir = DATA_DIR / "profiles"
    stale = []
    for file_name, text in shipped_profiles().items():
        path: Path = out_dir / file_name
        if "--check" in argv:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(file_name)
            continue
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    if stale:
        print("stale: " + ", ".join(stale) + " (run python benchmarks/make_shipped_profiles.py)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
