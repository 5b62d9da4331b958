"""Choose the default predictor by the evidence and write the evidence profiles (deterministic).

    python benchmarks/make_evidence_profiles.py          # writes data/profiles/<gpu>-evidence.json; prints
    python benchmarks/make_evidence_profiles.py --check  # exit 1 if a file differs from what would be written

Reads the evidence base (data/evidence, and the shipped measured profiles), runs leave-one-source-out for
every candidate predictor (`fp8advisor.predict.loso`; the step sources through the step model, a few seconds
each to inspect on the meta device), selects a candidate per GPU family and recipe, and prints the tables of
docs/benchmarks.md ("The default, chosen by the evidence").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fp8advisor.advice.evidence_default import evidence_report, markdown_tables  # noqa: E402
from fp8advisor.paths import PROFILES_DIR  # noqa: E402
from fp8advisor.predict.profile import dumps_profile  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a profile is stale; write nothing")
    args = parser.parse_args(argv)
    report = evidence_report()
    stale = []
    for profile in report.profiles:
        path = PROFILES_DIR / f"{profile.name}.json"
        text = dumps_profile(profile)
        if args.check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(path.name)
            continue
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}", file=sys.stderr)
    print(markdown_tables(report), end="")
    for line in report.skipped_steps:
        print(f"- not run by the step model: {line}")
    if stale:
        print(
            "stale: " + ", ".join(stale) + " (run python benchmarks/make_evidence_profiles.py)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
