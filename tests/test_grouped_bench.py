"""`bench --grouped` and the grouped profile: the emulated grouped GEMM sweep end to end through the CLI
(records, metadata, resume, time budget, bad input), the GPU path's operands as torchao requires them, the
emulation's casts against torchao's own reference, and `fit` of grouped results into `Profile.grouped`."""

from __future__ import annotations

import itertools
import json
import math
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from _bench_helpers import serial_inductor  # noqa: E402

from fp8advisor import compat
from fp8advisor.cli import app  # noqa: E402
from fp8advisor.errors import ProfileError  # noqa: E402
from fp8advisor.measure import grouped as grouped_bench  # noqa: E402
from fp8advisor.measure import sweep as bench
from fp8advisor.measure.grouped import GroupedPoint, make_grouped_grid  # noqa: E402
from fp8advisor.measure.protocol import Measurement  # noqa: E402
from fp8advisor.measure.results import GROUPED_WORKLOAD, load_results  # noqa: E402
from fp8advisor.measure.run_writer import RunWriter, make_header, new_run_id, utc_now  # noqa: E402
from fp8advisor.measure.schedule import FINISH_RESERVE_S  # noqa: E402
from fp8advisor.measure.speedups import pair_with_baseline  # noqa: E402
from fp8advisor.predict.fit import fit_profile  # noqa: E402
from fp8advisor.predict.fit_error import grouped_leave_one_out  # noqa: E402
from fp8advisor.predict.grouped_profile import GroupedProfile, GroupedSpeedupPoint  # noqa: E402
from fp8advisor.predict.interpolation import GroupedModel  # noqa: E402
from fp8advisor.predict.profile import Profile, dumps_profile  # noqa: E402
from fp8advisor.predict.profile_files import PROFILE_DIR_ENV, load_profile, save_profile  # noqa: E402
from fp8advisor.predict.selection import select_profile  # noqa: E402

runner = CliRunner()

#: The one shape every compiled test measures, so that inductor's on-disk cache makes the repeats cheap.
TINY = ["--E", "2", "--M-per-expert", "16", "--K", "32", "--N", "32"]
CLI = ["bench", "--grouped", "--emulate", *TINY, "--no-png"]


@pytest.fixture(autouse=True)
def user_dir(tmp_path, monkeypatch):
    directory = tmp_path / "profiles"
    monkeypatch.setenv(PROFILE_DIR_ENV, str(directory))
    return directory


# --- the emulated sweep through the CLI (compiled) ----------------------------------------------------------


@pytest.fixture(scope="module")
def emulated_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("grouped") / "results"
    with serial_inductor():
        result = runner.invoke(app, [*CLI, "--out", str(out)])
    return result, out


@pytest.mark.slow
def test_emulated_grouped_sweep_writes_labelled_grouped_records_with_metadata(emulated_sweep):
    result, out = emulated_sweep
    assert result.exit_code == 0, result.output
    assert "EMULATED" in result.output and "2 ok" in result.output
    [path] = list(out.glob("run-*.jsonl"))
    header, *points = [json.loads(line) for line in path.read_text().splitlines()]
    assert header["grid"]["workload"] == GROUPED_WORKLOAD
    assert header["grid"]["shapes"] == [[2, 16, 32, 32]] and header["grid"]["recipes"] == ["bf16", "rowwise"]
    assert header["device"]["emulated"] is True
    assert {"torch", "torchao", "fp8advisor"} <= set(header["software"]) and header["started"]
    assert "EMULATED" in header["method"]["compile"] and header["method"]["kernel_time"] is None
    assert "torch._scaled_grouped_mm" in header["method"]["workload"]
    assert header["ceilings"] is None  # no Linear breakdown probes for grouped GEMMs
    assert [point["recipe"] for point in points] == ["bf16", "rowwise"]
    for point in points:
        assert point["grouped"] is True and point["emulated"] is True and point["status"] == "ok"
        assert (point["E"], point["M_per_expert"], point["K"], point["N"]) == (2, 16, 32, 32)
        assert "M" not in point  # a grouped row is never read as a Linear (M, K, N)
        wall = point["wall_time_s"]
        assert 0 < wall["p20"] <= wall["median"] <= wall["p80"] and point["kernel_time_s"] is None
        assert point["compile"]["seconds"] > 0
    bf16, float8 = points
    assert bf16["sqnr_db"] is None
    # e4m3 rowwise keeps about 3 bits: tens of dB, on the output and both gradients
    assert all(20 < float8["sqnr_db"][key] < 40 for key in ("output", "grad_input", "grad_weight"))
    # the Linear pairing leaves grouped runs out; fit does not
    assert pair_with_baseline(load_results([out])) == []


@pytest.mark.slow
def test_the_same_grouped_command_again_has_nothing_to_measure(emulated_sweep):
    _, out = emulated_sweep
    result = runner.invoke(app, [*CLI, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "nothing to measure" in result.output and len(list(out.glob("run-*.jsonl"))) == 1


@pytest.mark.slow
def test_fit_refuses_the_emulated_grouped_run_unless_allowed_and_labels_it(emulated_sweep, tmp_path):
    _, out = emulated_sweep
    refused = runner.invoke(app, ["fit", str(out), "-o", str(tmp_path / "p.json")])
    assert refused.exit_code == 2 and "emulated" in refused.output
    allowed = runner.invoke(app, ["fit", str(out), "--allow-emulated", "-o", str(tmp_path / "p.json")])
    assert allowed.exit_code == 0, allowed.output
    profile = load_profile(tmp_path / "p.json")
    assert profile.provenance == "emulated" and profile.grouped.provenance == "emulated"
    assert profile.recipes == {} and [p.shape for p in profile.grouped.points] == [(2, 16, 32, 32)]


# --- the sweep machinery with a fake measurement (no compile) -----------------------------------------------


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fake_grouped_bench(measured: list, clock: FakeClock | None = None, interrupt_at: int | None = None):
    """A GroupedBench that measures nothing: each point takes 10 s on `clock`; the `interrupt_at`-th call
    raises KeyboardInterrupt (Ctrl-C)."""

    class FakeGroupedBench:
        def __init__(self, E, M_per_expert, K, N, settings):
            self.shape = (E, M_per_expert, K, N)

        def measure(self, recipe):
            if interrupt_at is not None and len(measured) + 1 == interrupt_at:
                raise KeyboardInterrupt
            if clock is not None:
                clock.now += 10.0
            measured.append((*self.shape, recipe))
            return Measurement(
                kernel_time_s=None,
                wall_time_s={"median": 1e-3, "p20": 1e-3, "p80": 1e-3, "iterations": 5},
                peak_memory_bytes=None,
                sqnr_db=None,
            )

        def release(self):
            pass

    return FakeGroupedBench


GRID_4 = ["bench", "--grouped", "--emulate", "--E", "2,4", "--M-per-expert", "16,32", "--K", "32", "--no-png"]


def test_an_interrupted_grouped_sweep_resumes_without_measuring_a_point_twice(tmp_path, monkeypatch):
    measured: list = []
    monkeypatch.setattr(grouped_bench, "GroupedBench", fake_grouped_bench(measured, interrupt_at=4))
    first = runner.invoke(app, [*GRID_4, "--out", str(tmp_path)])
    assert first.exit_code == 130 and "3 of 8 points are saved" in first.output
    assert len(measured) == 3
    monkeypatch.setattr(grouped_bench, "GroupedBench", fake_grouped_bench(measured))
    second = runner.invoke(app, [*GRID_4, "--out", str(tmp_path)])
    assert second.exit_code == 0, second.output
    assert "measured 5 points" in second.output and "3 already saved" in second.output
    expected = {p.key for p in make_grouped_grid(emulate=True, E=[2, 4], M_per_expert=[16, 32]).points()}
    assert sorted(measured) == sorted(expected)  # each point once, over both commands
    runs = load_results([tmp_path])
    saved = [(p["E"], p["M_per_expert"], p["K"], p["N"], p["recipe"]) for run in runs for p in run.points]
    assert sorted(saved) == sorted(expected)
    [resumed] = [run for run in runs if run.header["resumes"]]
    assert resumed.header["resumes"] == [run.run_id for run in runs if run is not resumed]


def test_a_grouped_sweep_stops_at_its_time_budget_and_says_how_to_resume(tmp_path, monkeypatch):
    clock, measured = FakeClock(), []
    monkeypatch.setattr(grouped_bench, "GroupedBench", fake_grouped_bench(measured, clock))
    real_run_sweep = bench.run_sweep

    def run_sweep_on_the_fake_clock(grid, out, settings, **kwargs):
        return real_run_sweep(grid, out, settings, **{**kwargs, "clock": clock, "started": 0.0})

    monkeypatch.setattr(bench, "run_sweep", run_sweep_on_the_fake_clock)
    result = runner.invoke(app, [*GRID_4, "--N", "32,64", "--out", str(tmp_path), "--time-budget", "70"])
    assert result.exit_code == 0, result.output
    assert "time budget" in result.output and "Resume with the same command" in result.output
    # nothing measured yet: the first point's estimate (60 s) and the 20 s reserve do not fit in 70 s
    assert measured == []
    clock.now = 0.0
    result = runner.invoke(app, [*GRID_4, "--N", "32,64", "--out", str(tmp_path), "--time-budget", "100"])
    assert result.exit_code == 0, result.output
    assert len(measured) == int((100 - FINISH_RESERVE_S) // 10) < 16
    assert "8 left" in result.output


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--grouped", "--M-per-expert", "20"], "multiples of 16"),
        (["--grouped", "--K", "100"], "multiples of 16"),
        (["--grouped", "--E", "0"], "positive integers"),
        (["--grouped", "--E", "eight"], "takes integers"),
        (["--grouped", "--recipes", "tensorwise"], "one float8 recipe"),
        (["--grouped", "--grid", "llama"], "unknown grouped grid"),
        (["--grouped", "--M", "1024"], "--M-per-expert"),
        (["--E", "8"], "goes with --grouped"),
        (["--grouped", "--model", "x.py"], "--grouped"),
        (
            ["--grouped", "--E", "100000", "--M-per-expert", "65536", "--K", "16384", "--N", "16384"],
            "too large",
        ),
    ],
)
def test_bad_grouped_grid_input_exits_2(tmp_path, arguments, message):
    result = runner.invoke(app, ["bench", "--emulate", "--out", str(tmp_path), *arguments])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not list(tmp_path.glob("run-*.jsonl"))


# --- the grid and the operands ------------------------------------------------------------------------------


def test_default_grouped_grid_spans_the_moe_models_and_fits_one_gpu():
    grid = make_grouped_grid()
    assert (grid.axis("E"), grid.axis("M_per_expert")) == ([8, 64, 256], [128, 1024, 8192])
    assert grid.axis("K") == grid.axis("N") == [768, 4096, 14336]
    assert len(grid.shapes) == 60 and len(grid.left_out) == 21 and grid.recipes == ("bf16", "rowwise")
    assert all(size % 16 == 0 for shape in grid.shapes for size in shape[1:])
    assert all(E * K * N <= 2**32 and E * m * (K + N) <= 2**32 for E, m, K, N in grid.shapes)
    # DeepSeek-V3's experts (256 x 7168 -> 2048) lie inside the grid's cell (256, *, 4096..14336, 768..4096)
    assert (256, 1024, 4096, 768) in grid.shapes and (256, 1024, 14336, 768) in grid.shapes


def test_the_gpu_path_hands_torchao_the_layouts_and_dtypes_it_asserts(monkeypatch):
    """Read from torchao 0.18's `_Float8GroupedMM.forward`: A row-major, B_t column-major per expert, offs
    int32 group ends, groups of multiples of 16, padding off, its config's dtypes."""
    from torchao.prototype.moe_training.utils import _is_column_major

    calls = []
    monkeypatch.setattr(compat, "fp8_rowwise_grouped_mm", lambda: lambda *args: calls.append(args))
    fn = grouped_bench.float8_grouped_mm(emulate=False)
    settings = bench.BenchSettings(emulate=True)
    shape_bench = grouped_bench.GroupedBench(4, 32, 48, 64, settings)
    A, weight, B_t = shape_bench._leaves()
    fn(A, B_t, shape_bench.operands["offs"])
    [(a, b_t, offs, out_dtype, float8_dtype, pad)] = calls
    assert a.shape == (128, 48) and a.is_contiguous() and a.dtype == torch.bfloat16 and a.requires_grad
    assert b_t.shape == (4, 48, 64) and _is_column_major(b_t) and b_t._base is weight and weight.requires_grad
    assert offs.dtype == torch.int32 and offs.tolist() == [32, 64, 96, 128]
    assert (out_dtype, float8_dtype, pad) == (torch.bfloat16, torch.float8_e4m3fn, False)


def test_grouped_points_order_and_memory_estimate():
    small, large = GroupedPoint(8, 128, 768, 768, "bf16"), GroupedPoint(8, 1024, 768, 768, "bf16")
    assert small.key == (8, 128, 768, 768, "bf16") and small.shape == (8, 128, 768, 768)
    assert large.estimated_peak_bytes() > small.estimated_peak_bytes()
    assert GroupedPoint(8, 128, 768, 768, "rowwise").estimated_peak_bytes() > small.estimated_peak_bytes()
    from fp8advisor.measure.precompile import estimated_peak_bytes

    assert estimated_peak_bytes(large) == large.estimated_peak_bytes()


# --- the CPU emulation of torchao's casts -------------------------------------------------------------------


def test_emulated_weight_gradient_casts_match_torchaos_per_group_reference():
    """The vectorised per-group, per-column scales of the weight gradient's operands reproduce torchao's own
    looped reference (`torch_to_float8_per_group_colwise`) exactly."""
    from torchao.prototype.moe_training.utils import torch_to_float8_per_group_colwise

    torch.manual_seed(0)
    # groups of rows 16, 32 and 16 at very different magnitudes, so that a row counted in the wrong group
    # changes that group's scale
    magnitude = torch.tensor([1.0] * 16 + [50.0] * 32 + [0.01] * 16)[:, None]
    x = (torch.randn(64, 48) * torch.linspace(0.1, 30, 48) * magnitude).to(torch.bfloat16)
    offs = torch.tensor([16, 48, 64], dtype=torch.int32)
    ours = grouped_bench._per_group_columns(x, offs, 3, torch.float8_e4m3fn, compat.float8_scaling())
    data, scales = torch_to_float8_per_group_colwise(x, offs, round_scales_to_power_of_2=True)
    rows = [16, 32, 16]
    per_row = torch.cat([scales.view(3, 48)[g].expand(n, 48) for g, n in enumerate(rows)])
    reference = (data.to(torch.float32) / per_row).to(torch.bfloat16)
    assert torch.equal(ours, reference)


def test_emulated_forward_is_the_grouped_gemm_of_rowwise_dequantized_operands():
    from torchao.float8.float8_utils import to_fp8_saturated

    torch.manual_seed(1)
    # magnitudes that differ by row of A and by column and row of B, so that a scale along the wrong axis
    # saturates or flushes values
    A = (torch.randn(32, 16) * torch.logspace(-2, 2, 32)[:, None]).to(torch.bfloat16)
    weight = torch.randn(2, 32, 16) * torch.logspace(-2, 2, 32)[:, None] * torch.logspace(4, -4, 16)
    B_t = weight.to(torch.bfloat16).transpose(-2, -1)  # (2, 16, 32), column-major
    offs = torch.tensor([16, 32], dtype=torch.int32)
    out = grouped_bench.emulated_float8_grouped_mm()(A, B_t, offs)

    def by_hand(x, dim):  # power-of-two scale from the amax along dim, e4m3 max 448
        scale = 448.0 / x.float().abs().amax(dim=dim, keepdim=True)
        scale = torch.exp2(torch.floor(torch.log2(scale)))
        return (to_fp8_saturated(x.float() * scale, torch.float8_e4m3fn).float() / scale).to(torch.bfloat16)

    a, b = by_hand(A, -1), by_hand(B_t, -2)
    expected = torch.cat([a[:16].float() @ b[0].float(), a[16:].float() @ b[1].float()]).to(torch.bfloat16)
    torch.testing.assert_close(out, expected, rtol=1e-2, atol=1e-2)
    assert not torch.equal(out, torch._grouped_mm(A, B_t, offs=offs))  # the casts did change the values
    # backward, the input gradient: grad_output per row (over N) @ B scaled per expert and K row (over N)
    A.requires_grad_()
    grad_output = (torch.randn(32, 32) * torch.logspace(1, -1, 32)).to(torch.bfloat16)
    grouped_bench.emulated_float8_grouped_mm()(A, B_t, offs).backward(grad_output)
    g, b = by_hand(grad_output, -1), by_hand(B_t, -1).transpose(-2, -1)
    expected = torch.cat([g[:16].float() @ b[0].float(), g[16:].float() @ b[1].float()]).to(torch.bfloat16)
    # column by column (K spans 8 decades): a scale along the wrong axis would flush the small columns
    error = (A.grad.float() - expected.float()).norm(dim=0) / expected.float().norm(dim=0)
    assert error.max() < 1e-2


# --- fit of grouped results ---------------------------------------------------------------------------------

H100 = "NVIDIA H100 80GB HBM3"


def synthetic_speedup(E: int, m: int, K: int, N: int) -> float:
    """Linear in log2 of the sizes (so log-linear interpolation is exact along M): grows with M per
    expert, K and N, barely with E."""
    return 0.4 + 0.08 * math.log2(m) + 0.02 * math.log2(K * N) / 2 + 0.001 * math.log2(E)


def write_grouped_run(directory: Path, shapes, *, speedup=synthetic_speedup) -> Path:
    """A GPU-like grouped results file: bf16 and rowwise kernel times whose ratio is `speedup`."""
    directory.mkdir(parents=True, exist_ok=True)
    grid = grouped_bench.GroupedGrid(name="test", shapes=tuple(shapes))
    header = make_header(
        run_id=new_run_id(),
        started=utc_now(),
        device={"name": H100, "emulated": False, "compute_capability": [9, 0]},
        software={"torch": "2.13.0", "torchao": "0.18.0"},
        method=dict(grouped_bench.GPU_METHOD),
        grid=grid.to_json(),
    )
    with RunWriter.create(directory, header) as writer:
        for point in grid.points():
            bf16_time = 1e-6 * point.E * point.M_per_expert * point.K * point.N / 1e6
            time_s = bf16_time if point.recipe == "bf16" else bf16_time / speedup(*point.shape)
            measurement = Measurement(
                kernel_time_s=time_s,
                wall_time_s={"median": time_s, "p20": time_s, "p80": time_s, "iterations": 5},
                peak_memory_bytes=1,
                sqnr_db=None,
            )
            record = bench.point_record(header["run_id"], point, emulated=False, measurement=measurement)
            writer.append(record)
    return writer.path


GRID_SHAPES = list(itertools.product((8, 64), (128, 512, 2048), (768, 4096), (768, 4096)))


@pytest.fixture
def grouped_fit(tmp_path):
    write_grouped_run(tmp_path / "results", GRID_SHAPES)
    return fit_profile([tmp_path / "results"], created="2026-11-23")


def test_fit_of_grouped_results_makes_a_measured_grouped_profile(grouped_fit):
    profile = grouped_fit.profile
    grouped = profile.grouped
    assert profile.provenance == "measured" and profile.family == "H100" and profile.recipes == {}
    assert profile.name == "h100-measured-grouped-2026-11-23"
    assert grouped.provenance == "measured" and grouped.recipe == "rowwise" and len(grouped.points) == 24
    # at a measured point: the measured speedup
    speedup, how = grouped.speedup_at(64, 512, 4096, 768)
    assert how == "interpolated" and speedup == pytest.approx(synthetic_speedup(64, 512, 4096, 768), rel=1e-5)
    # between measured points (M per expert 1024, between 512 and 2048; K 2048 between 768 and 4096):
    # log-linear, so between the neighbours and not equal to either
    speedup, how = grouped.speedup_at(8, 1024, 2048, 768)
    low, high = synthetic_speedup(8, 512, 768, 768), synthetic_speedup(8, 2048, 4096, 768)
    assert how == "interpolated" and low < speedup < high
    # along M alone the synthetic speedup is linear in log2 M; interpolation in log speedup is close to it
    speedup, _ = grouped.speedup_at(8, 1024, 768, 768)
    assert speedup == pytest.approx(synthetic_speedup(8, 1024, 768, 768), rel=0.01)
    # the held-out error: every point predicted from the others
    error = grouped.error
    # (two values on E, K and N: a held-out corner is filled from one side; a predictor that saw the point
    # would score 0)
    assert error.method == "leave-one-out" and error.n == 24 and 0.01 < error.median_relative_error < 0.2
    assert grouped_fit.to_json()["grouped"]["error"]["n"] == 24


def test_grouped_profile_answers_none_outside_the_measured_e_k_n_and_extrapolates_m(grouped_fit):
    grouped = grouped_fit.profile.grouped
    assert grouped.speedup_at(4, 512, 768, 768) is None  # E below the grid
    assert grouped.speedup_at(256, 512, 768, 768) is None  # E above
    assert grouped.speedup_at(8, 512, 14336, 768) is None  # K above
    assert grouped.speedup_at(8, 512, 768, 512) is None  # N below
    assert grouped.speedup_at(8, 0, 768, 768) is None
    edge_high = synthetic_speedup(8, 2048, 768, 768)
    assert grouped.speedup_at(8, 8192, 768, 768) == (pytest.approx(edge_high, rel=1e-5), "extrapolated")
    # below the smallest M per expert: the measured trend continued, below the edge
    speedup, how = grouped.speedup_at(8, 32, 768, 768)
    edge_low = synthetic_speedup(8, 128, 768, 768)
    assert how == "extrapolated" and speedup < edge_low
    trend = math.log(synthetic_speedup(8, 512, 768, 768) / edge_low) / 2  # per doubling of M
    assert speedup == pytest.approx(edge_low * math.exp(-2 * trend), rel=1e-4)
    assert isinstance(grouped.speedup_at(8, 700.5, 768, 768)[0], float)  # M per expert may be fractional


def test_grouped_profile_round_trips_and_old_profiles_load_unchanged(grouped_fit, tmp_path):
    path = save_profile(grouped_fit.profile, tmp_path / "grouped.json")
    loaded = load_profile(path)
    assert dumps_profile(loaded) == path.read_text()
    assert loaded.grouped.to_json() == grouped_fit.profile.grouped.to_json()
    assert loaded.grouped.speedup_at(8, 1024, 2048, 768)[0] == pytest.approx(
        grouped_fit.profile.grouped.speedup_at(8, 1024, 2048, 768)[0], rel=1e-5
    )
    # a profile without a grouped section writes none and reads back without one
    plain = Profile.from_json({k: v for k, v in json.loads(path.read_text()).items() if k != "grouped"})
    assert plain.grouped is None and "grouped" not in plain.to_json()
    from fp8advisor.predict.profile_files import list_profiles

    for shipped in list_profiles(include_user=False):
        assert shipped.grouped is None
        assert dumps_profile(shipped) == shipped.path.read_text()


def test_a_broken_grouped_section_is_refused_with_a_clear_error(grouped_fit):
    data = grouped_fit.profile.to_json()
    data["grouped"]["points"][0]["speedup"] = -1.0
    with pytest.raises(ProfileError, match="grouped: point"):
        Profile.from_json(data)


def test_grouped_leave_one_out_by_hand():
    """Three points along M per expert: the middle one is the geometric mean of its neighbours; the ends are
    the edge value (above) and the edge times the trend (below)."""
    points = [GroupedSpeedupPoint(8, m, 768, 768, s) for m, s in ((128, 0.5), (512, 0.8), (2048, 1.2))]
    error = grouped_leave_one_out(points)
    first = 0.8 * min(1.0, 0.8 / 1.2)  # held out 128: from 512 with the trend of 512 -> 2048 (same octaves)
    middle = math.sqrt(0.5 * 1.2)
    last = 0.8
    errors = [abs(first - 0.5) / 0.5, abs(middle - 0.8) / 0.8, abs(last - 1.2) / 1.2]
    assert error.n == 3
    assert error.median_relative_error == pytest.approx(sorted(errors)[1])
    assert error.worst_relative_error == pytest.approx(max(errors))
    assert error.sign_accuracy == pytest.approx(2 / 3)  # only 0.8 predicted for 1.2 is on the wrong side


def test_grouped_model_fills_holes_from_their_neighbours():
    """A hole (a shape too large for one GPU, a failed point) between measured points is interpolated along
    the axis that has neighbours on both sides; a corner hole takes its nearest measured neighbour."""
    inner, corner = (64, 512, 4096, 4096), (64, 2048, 4096, 4096)
    for hole in (inner, corner):
        shapes = [s for s in GRID_SHAPES if s != hole]
        model = GroupedModel(shapes, [synthetic_speedup(*s) for s in shapes])
        assert model.fill_fraction == pytest.approx(23 / 24)
        speedup, how = model.speedup_at(*hole)
        assert how == "interpolated"
        if hole == inner:  # between M per expert 128 and 2048: exact for a speedup linear in log2 M, nearly
            assert speedup == pytest.approx(synthetic_speedup(*hole), rel=0.01)
        else:  # nearest: M per expert 512 (2 octaves; E is 3 away, K and N 2.4)
            assert speedup == pytest.approx(synthetic_speedup(64, 512, 4096, 4096), rel=1e-6)


def test_a_grouped_only_profile_does_not_replace_the_linear_profile_but_answers_for_experts(
    grouped_fit, user_dir
):
    save_profile(grouped_fit.profile, user_dir / "grouped.json")
    choice = select_profile(device_name=H100)
    assert choice.primary.recipes and choice.primary.name != grouped_fit.profile.name
    assert isinstance(choice.grouped, GroupedProfile)
    assert choice.grouped.to_json() == grouped_fit.profile.grouped.to_json()
    # as --profile it is refused (it has no Linear figures), with the way to use it; as --grouped-profile it
    # answers for the experts
    with pytest.raises(ProfileError, match="grouped-only profile") as refused:
        select_profile(user_dir / "grouped.json")
    assert "--grouped-profile" in refused.value.hint
    assert select_profile(grouped=user_dir / "grouped.json").grouped is not None


def test_suggest_predicts_experts_from_a_grouped_only_profile_selected_for_the_gpu(grouped_fit, user_dir):
    """The selection finds a grouped-only user profile beside the Linear profile, and the expert prediction
    takes its measured figure rather than the roofline."""
    from fp8advisor.inspect.records import ExpertForm, ExpertGemm, ExpertGroup
    from fp8advisor.predict.speedup import predict_expert_group

    save_profile(grouped_fit.profile, user_dir / "grouped.json")
    choice = select_profile(device_name=H100)
    group = ExpertGroup(
        fqn="layers.0.moe.experts",
        cls="GroupedExperts",
        form=ExpertForm.GROUPED,
        n_experts=64,
        top_k=4,
        top_k_source="test",
        tokens=8192,
        M_total=8192 * 4,  # 512 rows per expert: a measured point
        gemms=(ExpertGemm("w1", 4096, 768, ("layers.0.moe.experts.w1",)),),
    )
    times = predict_expert_group(choice, group)
    assert times.provenance == "measured"
    assert times.bf16_s / times.float8_s == pytest.approx(synthetic_speedup(64, 512, 4096, 768), rel=1e-5)


def test_results_identify_grouped_points_by_e_m_per_expert_k_n_and_check_them():
    from fp8advisor.measure.results import grid_point_keys, point_key, point_problem

    grid = make_grouped_grid(emulate=True)
    assert grid_point_keys(grid.to_json()) == frozenset(point.key for point in grid.points())
    record = bench.point_record("run", GroupedPoint(2, 16, 32, 32, "rowwise"), emulated=True)
    record.update(status="ok", wall_time_s={"median": 1e-3})
    assert point_key(record) == (2, 16, 32, 32, "rowwise") and point_problem(record) is None
    assert point_problem({**record, "M_per_expert": 0}) == "M_per_expert is 0, not a positive integer"
