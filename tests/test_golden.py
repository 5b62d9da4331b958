"""Golden outputs: a fixed set of commands must print byte for byte what they printed when the files in
`tests/golden/` were recorded (paths and timings masked).

They pin the behaviour of the whole pipeline (layers, suggest in every format and --json, verify, bench
--emulate, fit, the messages of bad input) across refactors: a change that moves code must not change what a
user sees. A change that means to change an output re-records them and shows the difference in review:

    FP8ADVISOR_GOLDEN=update pytest tests/test_golden.py
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fp8advisor.cli import app

GOLDEN = Path(__file__).parent / "golden"
REPO = Path(__file__).parent.parent
LLAMA = "data/models/llama3.py:llama3_8b"
MOE = "data/models/moe.py:deepseek_v3_small"
SMALL = "data/models/llama3.py:build_model"
FIT_RESULTS = "tests/fixtures/fit/run-20261122T100000Z-h100aaaa.jsonl"
FORMATS = (
    "torchtitan-toml",
    "torchtitan-py",
    "nemo-automodel",
    "accelerate",
    "torchao",
    "filter",
    "megatron",
)

#: name -> the command line after `fp8advisor`. Each runs in a fresh folder of the test's own, where `data`
#: and `tests` link to the checkout's: paths stay relative and short, so that no output depends on where the
#: checkout or the temporary folder is (Rich wraps a long path at another place).
CASES: dict[str, list[str]] = {
    "layers-llama3-8b": ["layers", LLAMA, "--seq", "8192"],
    "layers-llama3-8b-all-json": ["layers", LLAMA, "--seq", "2048", "--all", "--json"],
    "layers-moe": ["layers", MOE, "--seq", "4096"],
    "layers-hf-config": ["layers", "data/models/llama31_8b_hf", "--seq", "8192"],
    "layers-hf-config-json": ["layers", "data/models/tiny_llama_hf", "--seq", "256", "--json"],
    "suggest-llama3-8b": ["suggest", LLAMA, "--seq", "8192"],
    "suggest-llama3-8b-json": ["suggest", LLAMA, "--seq", "8192", "--json"],
    "suggest-h100-step": [
        "suggest",
        LLAMA,
        "--recipe",
        "tensorwise",
        "--gpu",
        "H100",
        "--world-size",
        "8",
        "--ac",
        "selective",
        "--float8-all-gather",
        "--batch",
        "2",
        "--seq",
        "4096",
    ],
    "suggest-tp": ["suggest", LLAMA, "--tp", "4", "--recipe", "rowwise", "--gpu", "H100"],
    "suggest-moe": ["suggest", MOE, "--seq", "4096", "--ep", "2", "--expert-imbalance", "1.5"],
    "suggest-moe-json": ["suggest", MOE, "--seq", "4096", "--json"],
    **{f"suggest-format-{name}": ["suggest", LLAMA, "--gpu", "H100", "--format", name] for name in FORMATS},
    "suggest-moe-format-torchtitan-py": ["suggest", MOE, "--seq", "4096", "--format", "torchtitan-py"],
    "suggest-written-then-checked": [
        "suggest",
        SMALL,
        "--seq",
        "1024",
        "--gpu",
        "H100",
        "--format",
        "torchtitan-toml",
        "-o",
        "job.toml",
    ],
    "verify-written-config": ["verify", SMALL, "--config", "job.toml"],
    "fit-results": ["fit", FIT_RESULTS, "-o", "profile.json"],
    "bench-emulate": [
        "bench",
        "--emulate",
        "--M",
        "64",
        "--K",
        "64",
        "--N",
        "64",
        "--recipes",
        "tensorwise",
        "--out",
        "results",
    ],
    "error-missing-model": ["suggest", "no/such/model.py"],
    "error-unknown-format": ["suggest", LLAMA, "--format", "yaml"],
    "error-unknown-profile": ["suggest", LLAMA, "--profile", "nope"],
    "error-bad-seq": ["layers", LLAMA, "--seq", "0"],
    "error-verify-missing-config": ["verify", SMALL, "--config", "missing.toml"],
}

#: Cases that need the file an earlier case wrote: name -> the case that writes it (run first, same folder).
NEEDS = {"verify-written-config": "suggest-written-then-checked"}

_NUMBER = re.compile(r"\d+\.\d+")


def _mask(text: str, tmp: Path, name: str) -> str:
    text = text.replace(str(tmp), "<tmp>").replace(str(REPO), "<repo>")
    text = re.sub(r"run-\d{8}T\d{6}Z-[0-9a-f]{8}", "run-<stamp>", text)
    if name.startswith("bench"):  # CPU timings, the speedups from them and the progress bar differ run to run
        text = _NUMBER.sub("<x>", text)
        text = re.sub(r"\d+:\d\d:\d\d", "<t>", text)
        text = re.sub(r"\d+ s\b", "<n> s", text)
        text = re.sub(r"\d+ cold (.*), \d+ from cache", r"<n> cold \1, <n> from cache", text)
        text = "".join(line for line in text.splitlines(keepends=True) if not line.startswith("measure "))
    return text


def _run(name: str, tmp: Path) -> str:
    result = CliRunner().invoke(app, CASES[name], env={"COLUMNS": "100"})
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return _mask(
        f"exit {result.exit_code}\n--- stdout\n{result.stdout}--- stderr\n{result.stderr}", tmp, name
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_output_is_unchanged(name, tmp_path, monkeypatch):
    for folder in ("data", "tests"):
        (tmp_path / folder).symlink_to(REPO / folder)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FP8ADVISOR_PROFILE_DIR", str(tmp_path / "profiles"))  # no user profile answers
    if name in NEEDS:
        _run(NEEDS[name], tmp_path)
    seen = _run(name, tmp_path)
    golden = GOLDEN / f"{name}.txt"
    if os.environ.get("FP8ADVISOR_GOLDEN") == "update":
        golden.write_text(seen)
        return
    assert golden.exists(), f"no golden output for {name}: record it with FP8ADVISOR_GOLDEN=update"
    assert seen == golden.read_text(), f"{name}: output changed (re-record with FP8ADVISOR_GOLDEN=update)"


def test_every_golden_file_has_a_case():
    stale = sorted(path.stem for path in GOLDEN.glob("*.txt") if path.stem not in CASES)
    assert not stale, f"golden files with no case: {stale}"
