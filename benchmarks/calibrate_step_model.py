"""Fit the step model's one constant to the published anchors, and print published against predicted.

    python benchmarks/calibrate_step_model.py          # writes data/anchors/step_calibration.json; prints
    python benchmarks/calibrate_step_model.py --check  # exit 1 if the file differs from what would be written

Reads `data/anchors/published_step_results.json`, inspects each anchor's model on the meta device (no GPU, a
few seconds each), fits the in-step efficiency to the one `fit: true` figure (`fp8advisor.advice.published`),
then runs the step model on every anchor as published and prints the markdown table of docs/benchmarks.md. The
output is deterministic: two runs write identical bytes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fp8advisor.advice.published import (  # noqa: E402
    comparisons,
    fit_in_step_efficiency,
    load_anchors,
    markdown_table,
    predict_anchor,
)
from fp8advisor.advice.step_calibration import CALIBRATION_PATH, Calibration  # noqa: E402


def calibration_text(anchors, layers_by_anchor) -> str:
    data = fit_in_step_efficiency(anchors, layers_by_anchor)
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the calibration file is stale")
    args = parser.parse_args(argv)

    anchors = load_anchors()
    layers_by_anchor = {a.id: a.inspect() for a in anchors}
    text = calibration_text(anchors, layers_by_anchor)
    if args.check:
        current = CALIBRATION_PATH.read_text(encoding="utf-8") if CALIBRATION_PATH.exists() else ""
        if current != text:
            print(
                f"{CALIBRATION_PATH} is stale: run python benchmarks/calibrate_step_model.py", file=sys.stderr
            )
            return 1
        print(f"{CALIBRATION_PATH} is up to date", file=sys.stderr)
    else:
        CALIBRATION_PATH.parent.mkdir(parents=True, exist_ok=True)
        CALIBRATION_PATH.write_text(text, encoding="utf-8")
        print(f"wrote {CALIBRATION_PATH}", file=sys.stderr)

    rows = []
    for anchor in anchors:
        calibration = Calibration.of(json.loads(text), anchor.gpu)
        rows.extend(comparisons(predict_anchor(anchor, calibration, layers_by_anchor[anchor.id])))
    print(markdown_table(rows), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
