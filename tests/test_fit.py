"""`fit`: the published table and its held-out error, bench results (synthetic fixtures), refusals, CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fp8advisor.cli import app
from fp8advisor.errors import ResultsError
from fp8advisor.gpus import GPU_SPECS
from fp8advisor.paths import RESULTS_DIR
from fp8advisor.predict.figures import SpeedupPoint
from fp8advisor.predict.fit import fit_profile
from fp8advisor.predict.fit_error import leave_one_out
from fp8advisor.predict.profile import dumps_profile
from fp8advisor.predict.profile_files import PROFILE_DIR_ENV, load_profile
from fp8advisor.predict.roofline import roofline_speedup
from fp8advisor.predict.thresholds import KNRule, _best_rule, threshold_table

TABLE = RESULTS_DIR / "torchao_rowwise_h100_2025-06.csv"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "fit"
H100_A = FIXTURES / "run-20261122T100000Z-h100aaaa.jsonl"  # torch 2.11.0, one failed tensorwise point
H100_B = FIXTURES / "run-20261122T100000Z-h100bbbb.jsonl"  # torch 2.12.0
H200 = FIXTURES / "run-20261122T100000Z-h200cccc.jsonl"
EMULATED = FIXTURES / "run-20261122T100000Z-emuldddd.jsonl"


@pytest.fixture(autouse=True)
def user_dir(tmp_path, monkeypatch):
    directory = tmp_path / "profiles"
    monkeypatch.setenv(PROFILE_DIR_ENV, str(directory))
    return directory


@pytest.fixture(scope="module")
def published_fit():
    return fit_profile([TABLE], device_name="NVIDIA H100", created="2026-11-22", name="published-test")


# ------------------------------------------------------------------------------------------ published table


def test_published_table_fits_with_a_small_held_out_error(published_fit):
    profile = published_fit.profile
    assert profile.provenance == "published" and profile.family == "H100"
    error = profile.recipe("rowwise").error
    assert error.method == "leave-one-out" and error.n == 216
    # bounds on both sides: a predictor that saw the held-out point would score 0% and 100%
    assert 0.02 < error.median_relative_error < 0.06  # measured: 3.0%
    assert 0.05 < error.worst_relative_error < 0.25  # measured: 13.4%
    assert 0.95 < error.sign_accuracy < 1.0  # measured: 98.1%
    # the unfitted roofline model is far worse on the same points: what measuring buys
    roofline = published_fit.roofline_errors["rowwise"]
    assert roofline.median_relative_error > 0.3 and roofline.sign_accuracy < 0.8  # 43% and 63%


def test_published_thresholds_and_torchao_agreement(published_fit):
    """FACTS.md: torchao's rule is right in 17/36 cells at M = 1024 and 2048, in all at M >= 16384."""
    rows = {row.M: row for row in published_fit.thresholds["rowwise"]}
    assert sorted(rows) == [1024, 2048, 4096, 8192, 16384, 32768]
    assert [rows[M].torchao_agreement for M in (1024, 2048, 16384, 32768)] == [17, 17, 36, 36]
    assert rows[1024].paying == 0 and rows[1024].rule_text == "never" and rows[1024].rule_agreement == 36
    assert rows[4096].rule_text == "K >= 4096 and N >= 8192" and rows[4096].rule_agreement == 36
    assert all(row.rule_agreement >= 34 for row in rows.values())


def test_leave_one_out_by_hand():
    """Three points along K: each is predicted from the other two, by the profile's own rule."""
    speedups = {1024: 0.6, 2048: 0.9, 4096: 1.2}
    points = [SpeedupPoint(1024, K, 4096, s) for K, s in speedups.items()]
    error = leave_one_out(points, "rowwise", GPU_SPECS["H100"])
    # K=1024 held out: below the others, the K=2048 value times the roofline ratio (capped at 1)
    ratio = roofline_speedup(1024, 1024, 4096, "rowwise", "H100") / roofline_speedup(
        1024, 2048, 4096, "rowwise", "H100"
    )
    first = 0.9 * min(ratio, 1.0)
    # K=2048 held out: halfway in log2 K between its neighbours, the geometric mean of their speedups
    middle = math.sqrt(0.6 * 1.2)
    # K=4096 held out: above the others, clamped to the K=2048 value
    last = 0.9
    errors = [abs(first - 0.6) / 0.6, abs(middle - 0.9) / 0.9, abs(last - 1.2) / 1.2]
    assert error.n == 3 and error.method == "leave-one-out"
    assert error.median_relative_error == pytest.approx(sorted(errors)[1], rel=1e-12)
    assert error.worst_relative_error == pytest.approx(max(errors), rel=1e-12)
    assert min(errors) > 0.05  # a point that was not held out would be predicted exactly
    assert error.sign_accuracy == pytest.approx(2 / 3)  # 1.2x predicted 0.9x: the wrong side of 1


def test_fitting_twice_gives_identical_bytes(published_fit):
    again = fit_profile([TABLE], device_name="NVIDIA H100", created="2026-11-22", name="published-test")
    assert dumps_profile(again.profile) == dumps_profile(published_fit.profile)


# ------------------------------------------------------------------------------------------- rule search

K_N = [(K, N) for K in (1024, 2048, 4096, 8192) for N in (1024, 2048, 4096, 8192)]


@pytest.mark.parametrize(
    ("pays", "expected"),
    [
        # a rectangle: the "and" rule, exactly
        (lambda K, N: K >= 4096 and N >= 2048, KNRule("and", min_K=4096, min_N=2048)),
        # one condition only: the other threshold sits at the smallest size
        (lambda K, N: N >= 8192, KNRule("and", min_K=1024, min_N=8192)),
        # an anti-diagonal: only the product rule fits
        (lambda K, N: K * N >= 2**24, KNRule("product", min_KN=2**24)),
        # everything pays / nothing does
        (lambda K, N: True, KNRule("and", min_K=1024, min_N=1024)),
        (lambda K, N: False, KNRule("product", min_KN=2**62)),
    ],
)
def test_best_rule(pays, expected):
    cells = [(K, N, pays(K, N)) for K, N in K_N]
    rule = _best_rule(cells)
    assert rule == expected
    assert all(rule.converts(K, N) == paying for K, N, paying in cells)


@pytest.mark.parametrize(
    ("rule", "text"),
    [
        (KNRule("and", min_K=4096, min_N=2048), "K >= 4096 and N >= 2048"),
        (KNRule("and", min_K=1024, min_N=8192), "N >= 8192"),
        (KNRule("and", min_K=1024, min_N=1024), "always"),
        (KNRule("product", min_KN=2**24), "K*N >= 16777216"),
        (KNRule("product", min_KN=2**62), "never"),
    ],
)
def test_rule_text_drops_conditions_every_cell_meets(rule, text):
    assert rule.text(1024, 1024) == text


def test_threshold_table_has_no_torchao_rule_for_gw_hp(published_fit):
    points = published_fit.profile.recipe("rowwise").points
    assert all(row.torchao_agreement is None for row in threshold_table(points, "rowwise_with_gw_hp"))


# ------------------------------------------------------------------------------------------ bench results


def test_results_fit_speedups_are_kernel_time_ratios():
    report = fit_profile([H100_A], created="2026-11-22")
    profile = report.profile
    assert profile.provenance == "measured"
    assert profile.name == "h100-measured-rowwise-tensorwise-2026-11-22"
    assert profile.device.name == "NVIDIA H100 80GB HBM3" and profile.device.compute_capability == (9, 0)
    assert profile.software["torch"] == "2.11.0"
    assert "synthetic test fixture" in profile.method
    rowwise, tensorwise = profile.recipe("rowwise"), profile.recipe("tensorwise")
    assert len(rowwise.points) == 27 and len(tensorwise.points) == 26  # the failed point is left out
    assert (16384, 16384, 16384) not in {p.shape for p in tensorwise.points}
    for point in rowwise.points:  # the fixture's times are the roofline's, so its speedups are too
        assert point.speedup == pytest.approx(roofline_speedup(*point.shape, "rowwise", "H100"), rel=1e-12)
        assert point.bf16_time_s is not None and point.float8_time_s is not None
    assert rowwise.error.n == 27 and tensorwise.error.n == 26


def test_a_results_directory_is_read_like_its_files(tmp_path):
    directory = tmp_path / "results"
    directory.mkdir()
    (directory / H100_A.name).write_bytes(H100_A.read_bytes())
    from_dir = fit_profile([directory], created="2026-11-22").profile
    from_file = fit_profile([H100_A], created="2026-11-22").profile
    assert from_dir.recipes == from_file.recipes


@pytest.mark.parametrize(
    ("paths", "message"),
    [
        ([H100_A, H200], "different GPUs"),
        ([H100_A, H100_B], "different software versions"),
        ([EMULATED], "emulated"),
        ([H100_A, EMULATED], "emulated"),
        ([H100_A, TABLE], "table and bench results"),  # the table's software versions are unknown
    ],
)
def test_refusals(paths, message):
    with pytest.raises(ResultsError, match=message) as error:
        fit_profile(paths)
    assert error.value.hint


def test_force_mixes_software_versions():
    profile = fit_profile([H100_A, H100_B], force=True, created="2026-11-22").profile
    assert len(profile.recipe("rowwise").points) == 27  # the same shapes, merged by median


def test_force_does_not_admit_emulated_results():
    # --force mixes GPUs or software versions; it never turns CPU emulation into a GPU profile.
    with pytest.raises(ResultsError, match="emulated"):
        fit_profile([H100_A, EMULATED], force=True)


def test_emulated_allowed_only_as_an_emulated_profile():
    profile = fit_profile([EMULATED], allow_emulated=True, created="2026-11-22").profile
    assert profile.provenance == "emulated"


def test_a_gpu_the_roofline_lacks_is_its_own_family(tmp_path):
    profile = fit_profile([TABLE], device_name="NVIDIA GeForce RTX 4090", created="2026-11-22").profile
    assert profile.family == "NVIDIA GeForce RTX 4090"
    assert profile.name == "nvidia-geforce-rtx-4090-published-rowwise-2026-11-22"


def test_table_needs_a_device():
    with pytest.raises(ResultsError, match="does not say which GPU") as error:
        fit_profile([TABLE])
    assert "--device" in error.value.hint


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("recipe,M,K,N\nrowwise,1,1,1\n", "lacks column"),
        ("recipe,M,K,N,speedup\nfp4,1024,1024,1024,1.0\n", "bad row"),
        ("recipe,M,K,N,speedup\nrowwise,1024,1024,1024,-1\n", "positive"),
        ("recipe,M,K,N,speedup\n", "no rows"),
    ],
)
def test_bad_tables(tmp_path, text, message):
    path = tmp_path / "table.csv"
    path.write_text(text)
    with pytest.raises(ResultsError, match=message):
        fit_profile([path], device_name="NVIDIA H100")


def test_missing_input_is_a_results_error(tmp_path):
    with pytest.raises(ResultsError, match="no such file"):
        fit_profile([tmp_path / "nothing.jsonl"])


# --------------------------------------------------------------------------------------------------- CLI


def test_cli_fits_the_published_table(tmp_path):
    out = tmp_path / "p.json"
    args = ["fit", str(TABLE), "--device", "NVIDIA H100", "--name", "cli-test", "--software", "torch=2.8.0a0"]
    result = CliRunner().invoke(app, [*args, "--created", "2026-11-22", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert (
        "leave-one-out" in result.output
        and "17/36" in result.output
        and "K >= 4096 and N >= 8192" in result.output
    )
    profile = load_profile(out)
    assert profile.name == "cli-test" and profile.software == {"torch": "2.8.0a0"}
    assert json.loads(out.read_text())["recipes"]["rowwise"]["error"]["n"] == 216


def test_cli_writes_to_the_user_profile_dir_by_default(user_dir):
    result = CliRunner().invoke(app, ["fit", str(H100_A), "--created", "2026-11-22"])
    assert result.exit_code == 0, result.output
    assert (user_dir / "h100-measured-rowwise-tensorwise-2026-11-22.json").is_file()


def test_cli_json_report(tmp_path):
    out = tmp_path / "p.json"
    result = CliRunner().invoke(
        app, ["fit", str(H100_A), "--json", "--created", "2026-11-22", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["profile"] == "h100-measured-rowwise-tensorwise-2026-11-22" and data["written"] == str(out)
    assert data["error"]["rowwise"]["n"] == 27
    assert {row["M"] for row in data["thresholds"]["tensorwise"]} == {1024, 4096, 16384}


def test_cli_refuses_emulated_with_exit_2():
    result = CliRunner().invoke(app, ["fit", str(EMULATED)])
    assert result.exit_code == 2
    assert "emulated" in result.output and "hint" in result.output
