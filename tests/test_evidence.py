"""The evidence base (data/evidence) and the default chosen by it: the files' figures exactly as published,
leave-one-source-out on a synthetic evidence set with a known answer, the selection, the intervals, and the
shipped evidence profiles and docs table regenerated from the evidence."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from fp8advisor.errors import ProfileError
from fp8advisor.gpus import get_specs
from fp8advisor.predict.evidence import (
    EVIDENCE_DIR,
    LinearFigure,
    derived_speedup,
    derived_step_speedup,
    load_evidence,
    numbers_missing_from_excerpt,
)
from fp8advisor.predict.fitted import RooflineFactors, fit_factors, fitted_speedup
from fp8advisor.predict.loso import (
    FITTED_ROOFLINE,
    ROOFLINE,
    TABLE,
    Residual,
    candidate_profile,
    fit_candidates,
    interval_ratios,
    leave_one_source_out,
    scores,
    select,
)
from fp8advisor.predict.speedup import predict_speedup
from fp8advisor.recipes import Recipe

ROOT = Path(__file__).resolve().parent.parent


# --- the files ----------------------------------------------------------------------------------------------


def test_every_evidence_file_reads_and_prints_every_figure_it_holds():
    sources = [s for s in load_evidence(measured=False)]
    assert len(sources) >= 20
    for source in sources:
        assert numbers_missing_from_excerpt(source) == [], source.id


def test_figures_round_trip_exactly_as_the_files_write_them():
    """What the loader holds is what the file says, number for number (nothing rounded or derived)."""
    for path in sorted(EVIDENCE_DIR.glob("*.json")):
        raw = json.loads(path.read_text(encoding="utf-8"))
        source = next(s for s in load_evidence(measured=False) if s.id == raw["id"])
        assert list(source.points[: len(raw["points"])]) == raw["points"], path.name


def test_the_transcribed_table_is_the_csv_point_for_point():
    source = next(s for s in load_evidence(measured=False) if s.id == "torchao-fp8-rowwise-perf-png-2025-06")
    rows = (ROOT / "data/results/torchao_rowwise_h100_2025-06.csv").read_text().splitlines()[1:]
    assert len(source.points) == len(rows) == 216
    first = rows[0].split(",")
    assert source.points[0] == {
        "recipe": first[0],
        "M": int(first[1]),
        "K": int(first[2]),
        "N": int(first[3]),
        "speedup": float(first[4]),
    }


def test_derived_speedups_are_computed_from_the_published_figures():
    assert derived_speedup({"bf16_us": 300.0, "float8_us": 200.0, "speedup": 9.9}) == 1.5
    assert derived_speedup({"speedup": 1.43}) == 1.43
    points = [
        {"recipe": None, "tokens_per_s_per_gpu": 6150},
        {"recipe": "rowwise", "tokens_per_s_per_gpu": 6768},
    ]
    assert derived_step_speedup(points[1], points) == pytest.approx(6768 / 6150)
    assert derived_step_speedup({"recipe": "rowwise", "speedup_percent": 10.0}, []) == pytest.approx(1.1)
    assert derived_step_speedup(points[0], points) is None


def _write(directory: Path, body: dict) -> Path:
    path = directory / f"{body['id']}.json"
    path.write_text(json.dumps(body), encoding="utf-8")
    return path


def _source(**overrides) -> dict:
    body = {
        "schema": "fp8advisor.evidence/1",
        "id": "example",
        "kind": "linear",
        "source": {"repository": "pytorch/ao", "pr": 1},
        "date": "2025-05",
        "gpu": "H100",
        "software": {},
        "method": {"timed": "a bare Linear"},
        "excerpt": "| 16384 | 1024 | 8192 | 1.43 |",
        "points": [{"recipe": "rowwise", "M": 16384, "K": 1024, "N": 8192, "speedup": 1.43}],
    }
    body.update(overrides)
    return body


@pytest.mark.parametrize(
    "overrides, words",
    [
        ({"id": "other"}, "is not the file's name"),
        ({"kind": "table"}, "kind"),
        ({"gpu": "Voodoo3"}, "not a GPU family"),
        ({"excerpt": None}, "neither an excerpt nor transcribed_from"),
        ({"points": [{"recipe": "rowwise", "M": 16384, "K": 1024, "N": 8192, "speedup": -1}]}, "positive"),
        ({"points": [{"recipe": "rowwise", "M": 16384, "speedup": 1.2}]}, "needs recipe, M, K and N"),
    ],
)
def test_a_bad_evidence_file_is_one_clear_error(tmp_path, overrides, words):
    body = _source(**overrides)
    path = tmp_path / "example.json"
    path.write_text(json.dumps(body), encoding="utf-8")
    with pytest.raises(ProfileError, match=words):
        load_evidence(tmp_path, measured=False)


def test_a_figure_missing_from_its_excerpt_is_found(tmp_path):
    _write(tmp_path, _source(excerpt="| 16384 | 1024 | 8192 | 1.42 |"))
    (source,) = load_evidence(tmp_path, measured=False)
    assert numbers_missing_from_excerpt(source) == ["points[0].speedup = 1.43"]


# --- the fitted roofline ------------------------------------------------------------------------------------


SHAPES = [(m, k, n) for m in (1024, 4096, 16384) for k in (1024, 4096, 8192) for n in (1024, 4096, 8192)]


def _synthetic(factors: RooflineFactors, source: str, gpu="H100", ln_sigmoid=False, scale=1.0):
    specs = get_specs(gpu)
    return [
        LinearFigure(
            source,
            gpu,
            Recipe.ROWWISE,
            m,
            k,
            n,
            scale
            * fitted_speedup(m, k, n, Recipe.ROWWISE, specs, factors, fused=True, with_neighbours=ln_sigmoid),
            ln_sigmoid=ln_sigmoid,
        )
        for m, k, n in SHAPES
    ]


def test_fit_factors_recovers_the_factors_that_made_the_figures():
    truth = RooflineFactors(fp8_throughput=0.7, cast_cost=2.0, float8_overhead_s=10e-6)
    figures = _synthetic(truth, "a") + _synthetic(truth, "b", gpu="H200", ln_sigmoid=True)
    found = fit_factors(figures, Recipe.ROWWISE)
    assert found.fp8_throughput == pytest.approx(0.7, rel=1e-3)
    assert found.cast_cost == pytest.approx(2.0, rel=1e-3)
    assert found.float8_overhead_s == pytest.approx(10e-6, rel=1e-2)
    assert fit_factors(figures[:2], Recipe.ROWWISE) is None  # too few to fit


def test_the_fitted_roofline_with_unit_factors_is_torchaos_roofline():
    from fp8advisor.predict.roofline import roofline_speedup

    for shape in SHAPES[:5]:
        expected = roofline_speedup(*shape, Recipe.ROWWISE, get_specs("H100"), fused=True)
        assert fitted_speedup(*shape, Recipe.ROWWISE, get_specs("H100"), RooflineFactors(), fused=True) == (
            pytest.approx(expected, rel=1e-12)
        )


# --- leave-one-source-out, selection, intervals -----------------------------------------------------------


def test_leave_one_source_out_on_a_known_answer_picks_the_model_that_made_the_evidence():
    """Three sources measured on a GPU whose float8 kernels are the fitted roofline with known factors: held
    out one at a time, the fitted roofline predicts each exactly from the other two, torchao's unfitted
    roofline does not, and the selection picks the fitted roofline with a (near) zero held-out error."""
    truth = RooflineFactors(fp8_throughput=0.75, cast_cost=1.8, float8_overhead_s=5e-6)
    figures = _synthetic(truth, "a") + _synthetic(truth, "b") + _synthetic(truth, "c", ln_sigmoid=True)
    residuals = leave_one_source_out(figures, candidates=(TABLE, ROOFLINE, FITTED_ROOFLINE))
    table = scores(residuals, Recipe.ROWWISE, "H100")
    assert table[FITTED_ROOFLINE][0] < 1e-3
    assert table[ROOFLINE][0] > 0.05
    assert select(residuals, "H100", Recipe.ROWWISE, (TABLE, ROOFLINE, FITTED_ROOFLINE))[0] == FITTED_ROOFLINE
    # each held-out figure was predicted without its own source
    held_out = [r for r in residuals if r.source == "c" and r.candidate == FITTED_ROOFLINE]
    assert len(held_out) == len(SHAPES)
    assert all(abs(r.relative_error) < 1e-3 for r in held_out)


def _residual(source: str, candidate: str, error: float, level: str = "linear") -> Residual:
    return Residual(source, "H100", Recipe.ROWWISE, candidate, 1.0 + error, 1.0, level=level)


def test_the_selection_is_the_lowest_held_out_score_each_source_one_vote():
    residuals = (
        # candidate "x" is better on the large source, "y" on both small ones: every source one vote
        [_residual("big", "x", 0.01) for _ in range(100)]
        + [_residual("big", "y", 0.10) for _ in range(100)]
        + [_residual("s1", "x", 0.20), _residual("s1", "y", 0.02)]
        + [_residual("s2", "x", 0.20), _residual("s2", "y", 0.02)]
    )
    assert select(residuals, "H100", Recipe.ROWWISE, ("x", "y"))[0] == "y"
    assert select(residuals, "H100", Recipe.ROWWISE, ("y", "x"))[0] == "y"
    # a step source weighs as much as every benchmark source together
    residuals += [_residual("run", "x", 0.0, "step"), _residual("run", "y", 0.5, "step")]
    assert select(residuals, "H100", Recipe.ROWWISE, ("x", "y"))[0] == "x"


def test_a_gpu_without_sources_is_scored_on_every_gpu():
    residuals = [_residual("a", "x", 0.3), _residual("a", "y", 0.1)]
    candidate, why = select(residuals, "B200", Recipe.ROWWISE, ("x", "y"))
    assert candidate == "y" and "every GPU" in why


def test_intervals_widen_when_sources_disagree():
    def residuals(spread: float) -> list[Residual]:
        found = []
        for index, source in enumerate("abcd"):
            bias = spread * (index - 1.5)
            found += [_residual(source, "x", bias + 0.01 * j) for j in range(5)]
        return found

    agree = interval_ratios(residuals(0.01), Recipe.ROWWISE, "x")
    disagree = interval_ratios(residuals(0.2), Recipe.ROWWISE, "x")
    assert agree[1] - agree[0] < 0.1
    assert disagree[1] - disagree[0] > 0.4
    assert disagree[0] < agree[0] <= 1.0 <= agree[1] < disagree[1]
    assert interval_ratios(residuals(0.2)[:3], Recipe.ROWWISE, "x") is None  # too few figures


def test_a_prediction_carries_its_profiles_interval_and_knows_when_it_straddles():
    figures = _synthetic(RooflineFactors(0.8, 1.5, 0.0), "a")
    profile = candidate_profile(
        fit_candidates(figures), FITTED_ROOFLINE, "H100", intervals={Recipe.ROWWISE: (0.9, 1.2, 20)}
    )
    prediction = predict_speedup(profile, Recipe.ROWWISE, 8192, 4096, 4096)
    assert prediction.how == "fitted" and prediction.provenance == "evidence"
    low, high = prediction.interval
    assert low == pytest.approx(prediction.speedup * 0.9) and high == pytest.approx(prediction.speedup * 1.2)
    assert prediction.straddles(prediction.speedup)
    assert not prediction.straddles(high * 1.01)


def test_a_blend_is_the_geometric_mean_of_the_table_and_the_fitted_roofline():
    factors = RooflineFactors(0.8, 1.5, 0.0)
    table = _synthetic(factors, "table", ln_sigmoid=True, scale=0.9)
    fitted = fit_candidates(table)
    shape = (4096, 4096, 4096)
    answers = {
        name: predict_speedup(candidate_profile(fitted, name, "H100"), Recipe.ROWWISE, *shape).speedup
        for name in (TABLE, FITTED_ROOFLINE, "blend-fitted")
    }
    assert answers["blend-fitted"] == pytest.approx(math.sqrt(answers[TABLE] * answers[FITTED_ROOFLINE]))


# --- the shipped default ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def report():
    from fp8advisor.advice.evidence_default import evidence_report

    return evidence_report()


def shipped_defaults(report):
    from fp8advisor.advice.evidence_default import shipped_defaults as defaults

    return defaults(report)


def test_a_blend_without_a_table_is_the_fitted_roofline():
    figures = _synthetic(RooflineFactors(0.8, 1.5, 0.0), "bare", ln_sigmoid=False)  # no LNLinearSigmoid table
    fitted = fit_candidates(figures)
    answers = {
        name: predict_speedup(
            candidate_profile(fitted, name, "H100"), Recipe.ROWWISE, 4096, 4096, 4096
        ).speedup
        for name in (FITTED_ROOFLINE, "blend-fitted", ROOFLINE)
    }
    assert answers["blend-fitted"] == answers[FITTED_ROOFLINE]
    assert abs(answers[FITTED_ROOFLINE] / answers[ROOFLINE] - 1) > 0.05  # fitted, not torchao's


def test_the_shipped_evidence_profiles_are_what_the_evidence_chooses(report):
    from fp8advisor.paths import PROFILES_DIR
    from fp8advisor.predict.profile import dumps_profile

    for profile in report.profiles:
        path = PROFILES_DIR / f"{profile.name}.json"
        assert path.read_text(encoding="utf-8") == dumps_profile(profile), (
            f"{path.name} is stale: run python benchmarks/make_evidence_profiles.py"
        )


def test_the_docs_table_is_what_the_evidence_gives(report):
    from fp8advisor.advice.evidence_default import markdown_tables

    docs = (ROOT / "docs/benchmarks.md").read_text(encoding="utf-8")
    assert markdown_tables(report) in docs, (
        "run python benchmarks/make_evidence_profiles.py, paste its tables"
    )


def test_every_choice_is_the_gpus_own_measured_table_or_the_lowest_held_out_score(report):
    from fp8advisor.advice.evidence_default import measured_tables

    measured = measured_tables(report.sources)
    assert {gpu for gpu, _ in measured} == {"H200"}  # this project's H200 sweep
    for (gpu, recipe), (candidate, _) in report.choices.items():
        if (gpu, recipe) in measured:
            assert candidate == TABLE
            continue
        table = scores(report.residuals, recipe, gpu) or scores(report.residuals, recipe)
        assert table[candidate][0] == min(score for score, _ in table.values())


def test_the_held_out_defaults_never_saw_their_source(report):
    """Every figure of the nested table was predicted by a candidate chosen without its source: with the
    H200 sweep held out, H200 has no table of its own left, so the choice is not the shipped default's."""
    held_out = {(r.source, r.recipe): r.candidate for r, _ in report.held_out}
    shipped = {(r.source, r.recipe): r.candidate for r, _ in shipped_defaults(report)}
    assert report.choices[("H200", Recipe.ROWWISE)][0] == TABLE  # the shipped H200 table is the sweep itself
    assert ("h200-measured-2026-11-26", Recipe.ROWWISE) not in shipped
    assert held_out[("h200-measured-2026-11-26", Recipe.ROWWISE)] != TABLE
    assert set(shipped) < set(held_out)


def test_suggest_picks_the_evidence_profile_where_the_user_measured_nothing(tmp_path, monkeypatch):
    from fp8advisor.predict.selection import select_profile

    monkeypatch.setenv("FP8ADVISOR_PROFILE_DIR", str(tmp_path))
    for device, name in (("NVIDIA H100 80GB HBM3", "h100-evidence"), ("NVIDIA H200", "h200-evidence")):
        assert select_profile(None, device_name=device, detect_device=False).name == name
    assert select_profile(None, device_name="NVIDIA A100", detect_device=False).name == "h100-evidence"
    pinned = select_profile("h100-published-rowwise-2025-06", device_name="NVIDIA H100", detect_device=False)
    assert pinned.name == "h100-published-rowwise-2025-06"


def test_a_measured_profile_of_the_users_own_gpu_wins_over_the_evidence(tmp_path, monkeypatch):
    import shutil

    from fp8advisor.paths import PROFILES_DIR
    from fp8advisor.predict.selection import select_profile

    monkeypatch.setenv("FP8ADVISOR_PROFILE_DIR", str(tmp_path))
    shutil.copy(PROFILES_DIR / "h200-measured-2026-11-26.json", tmp_path / "mine.json")
    choice = select_profile(None, device_name="NVIDIA H200", detect_device=False)
    assert choice.name == "h200-measured-2026-11-26" and "your own profile" in choice.reason


def test_a_held_out_source_is_never_predicted_from_its_own_figures():
    """Three LNLinearSigmoid tables of one GPU, each 10% above the one before: held out, each is predicted
    from another (off by about 10%), never from itself (which would be exact)."""
    base = RooflineFactors(0.8, 1.5, 0.0)
    figures = [
        figure
        for index, name in enumerate("abc")
        for figure in _synthetic(base, name, ln_sigmoid=True, scale=1.1**index)
    ]
    residuals = [r for r in leave_one_source_out(figures, candidates=(TABLE,)) if r.candidate == TABLE]
    for source in "abc":
        errors = [abs(r.relative_error) for r in residuals if r.source == source]
        assert min(errors) > 0.05, source


def test_every_source_weighs_the_same_in_an_interval():
    """A 100-figure source that the predictor fits does not hide four small ones it misses by 30%."""
    residuals = [_residual("big", "x", 0.0 + 0.001 * j) for j in range(100)]
    residuals += [_residual(name, "x", error) for name, error in (("s1", 0.4), ("s2", 0.3), ("s3", -0.3))]
    residuals += [_residual("s4", "x", -0.25)]
    low, high, n = interval_ratios(residuals, Recipe.ROWWISE, "x")
    assert n == 104
    assert low < 0.85 and high > 1.2
