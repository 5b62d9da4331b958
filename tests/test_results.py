"""The results store: schema, file naming, durable appends, torn lines, resume keys, pairing with bf16."""

from __future__ import annotations

import json
import re

import pytest

from fp8advisor.errors import AdvisorError, ResultsError
from fp8advisor.measure.results import (
    SCHEMA,
    done_keys,
    grid_point_keys,
    load_results,
    read_run,
    resumable_runs,
    same_setup,
    setup_changes,
)
from fp8advisor.measure.run_writer import RunWriter, make_header, run_file_name
from fp8advisor.measure.speedups import pair_with_baseline

SOFTWARE = {"torch": "2.11.0", "torchao": "0.18.0", "triton": "3.6.0", "cuda": "13.0", "fp8advisor": "0.1.0"}
H100 = {"name": "NVIDIA H100 80GB HBM3", "compute_capability": [9, 0], "sm_count": 132, "emulated": False}
GRID = {"name": "test", "M": [1024], "K": [1024], "N": [1024, 2048], "recipes": ["bf16", "rowwise"]}


def header(run_id="r1", started="2026-11-22T10:00:00Z", device=H100, software=SOFTWARE, grid=GRID):
    return make_header(
        run_id=run_id,
        started=started,
        device=device,
        software=software,
        method={"kernel_time": "x"},
        grid=grid,
    )


def point(M, K, N, recipe, kernel=None, wall=None, status="ok", run_id="r1"):
    return {
        "kind": "point",
        "run_id": run_id,
        "M": M,
        "K": K,
        "N": N,
        "recipe": recipe,
        "status": status,
        "reason": None if status == "ok" else "CUDA out of memory",
        "kernel_time_s": kernel,
        "wall_time_s": None if wall is None else {"median": wall, "p20": wall, "p80": wall},
        "peak_memory_bytes": 1,
        "sqnr_db": None,
        "gemm_only_speedup": None,
        "cast_overhead_s": None,
        "measured_at": "2026-11-22T10:00:01Z",
    }


def write_run(directory, run_header, points):
    with RunWriter.create(directory, run_header) as writer:
        for record in points:
            writer.append(record)
    return writer.path


def test_file_name_is_start_time_and_run_id():
    assert run_file_name("2026-11-22T10:00:00Z", "1a2b3c4d") == "run-20261122T100000Z-1a2b3c4d.jsonl"


def test_round_trip_keeps_header_then_points_one_json_per_line(tmp_path):
    path = write_run(tmp_path, header(), [point(1024, 1024, 1024, "bf16", kernel=2e-3)])
    assert re.fullmatch(r"run-\d{8}T\d{6}Z-r1\.jsonl", path.name)
    lines = path.read_text().splitlines()
    assert [json.loads(line)["kind"] for line in lines] == ["run", "point"]
    run = read_run(path)
    assert run.header["schema"] == SCHEMA and run.run_id == "r1" and run.device_name == H100["name"]
    assert run.points[0]["kernel_time_s"] == 2e-3 and not run.emulated


def test_non_finite_floats_are_written_as_null(tmp_path):
    record = point(1024, 1024, 1024, "rowwise", kernel=float("nan"), wall=1e-3)
    record["sqnr_db"] = {"output": float("inf"), "grad_input": 20.0}
    path = write_run(tmp_path, header(), [record])
    stored = read_run(path).points[0]
    assert stored["kernel_time_s"] is None and stored["sqnr_db"] == {"output": None, "grad_input": 20.0}


def test_torn_last_line_is_ignored(tmp_path):
    path = write_run(tmp_path, header(), [point(1024, 1024, 1024, "bf16", kernel=1.0)])
    with path.open("ab") as file:
        file.write(b'{"kind": "point", "M": 1024, "K": 10')  # killed mid-write
    assert len(read_run(path).points) == 1


def test_a_complete_last_record_without_newline_is_kept(tmp_path):
    path = write_run(tmp_path, header(), [])
    with path.open("ab") as file:
        file.write(json.dumps(point(1024, 1024, 1024, "bf16", kernel=1.0)).encode())
    assert len(read_run(path).points) == 1


def test_a_bad_line_in_the_middle_is_named_with_its_location_and_the_other_points_stay(tmp_path):
    path = write_run(
        tmp_path,
        header(),
        [point(1024, 1024, 1024, "bf16", kernel=1.0), point(1024, 1024, 2048, "bf16", kernel=2.0)],
    )
    text = path.read_text().splitlines()
    path.write_text("\n".join([text[0], text[1], "not json", text[2]]) + "\n")
    run = read_run(path)
    assert [p["N"] for p in run.points] == [1024, 2048]  # the valid points before and after it count
    [problem] = run.problems
    assert problem.startswith(f"{path}:3: not JSON")


BAD_POINTS = {
    "nan kernel time": ({"kernel_time_s": float("nan")}, "kernel_time_s is nan"),
    "infinite kernel time": ({"kernel_time_s": float("inf")}, "kernel_time_s is inf"),
    "negative kernel time": ({"kernel_time_s": -1e-3}, "kernel_time_s is -0.001"),
    "string kernel time": ({"kernel_time_s": "fast"}, "kernel_time_s is 'fast'"),
    "string median": ({"kernel_time_s": None, "wall_time_s": {"median": "1"}}, "wall_time_s.median is '1'"),
    "missing M": ({"M": None}, "M is None"),
    "float K": ({"K": 1024.5}, "K is 1024.5"),
    "boolean N": ({"N": True}, "N is True"),
    "missing recipe": ({"recipe": None}, "recipe is None"),
    "unknown status": ({"status": "maybe"}, "status is 'maybe'"),
    "no time at all": ({"kernel_time_s": None, "wall_time_s": None}, "an ok point with neither"),
}


@pytest.mark.parametrize("case", list(BAD_POINTS))
def test_unusable_points_are_left_out_and_named(tmp_path, case):
    changes, why = BAD_POINTS[case]
    good = point(1024, 1024, 1024, "bf16", kernel=1.0, wall=1.0)
    path = write_run(tmp_path, header(), [good])
    bad = {**point(1024, 1024, 2048, "bf16", kernel=1.0, wall=1.0), **changes}
    with path.open("a") as file:  # written as JSON parses it back: NaN and Infinity tokens included
        file.write(json.dumps(bad) + "\n")
    run = read_run(path)
    assert [p["N"] for p in run.points] == [1024]
    [problem] = run.problems
    assert problem.startswith(f"{path}:3: {why}")
    # fit and resume leave the point out: a resume measures it again
    assert done_keys([run]) == {(1024, 1024, 1024, "bf16")}


def test_resume_keeps_a_files_valid_points_and_names_its_bad_lines(tmp_path):
    """A corrupt line must not make resume skip the whole file and measure its valid points again."""
    path = write_run(tmp_path, header("old"), [point(1024, 1024, 1024, "bf16", kernel=1.0)])
    with path.open("ab") as file:
        file.write(b"\x00\x01 binary garbage\n")
        file.write(b"\xff\xfe not utf-8\n")
        file.write((json.dumps(point(1024, 1024, 2048, "bf16", kernel=1.0)) + "\n").encode())
    problems: list[str] = []
    found = resumable_runs(tmp_path, header("new"), problems)
    assert done_keys(found) == {(1024, 1024, 1024, "bf16"), (1024, 1024, 2048, "bf16")}
    assert problems == [f"{path}:3: not JSON (Expecting value)", f"{path}:4: not UTF-8 text"]


@pytest.mark.parametrize(
    "content",
    [
        b"",  # empty
        b'{"kind": "point", "M": 1}\n',  # no header
        b'{"kind": "run", "schema": "other/1"}\n',  # another schema
        b"\x89PNG\r\n\x1a\n\x00\x00binary",  # a binary file
        b"[1, 2]\n",  # a header that is not an object
        b'{"kind": "run", "schema": "fp8advisor.results/1"}\n',  # a header without device, grid, run id
        b'{"kind": "run", "schema": "fp8advisor.results/1", "run_id": "x", "device": {"name": "G"}, '
        b'"grid": {"recipes": ["bf16"], "M": "many"}}\n',  # a grid that is not a grid
    ],
)
def test_files_that_are_not_results_are_refused(tmp_path, content):
    path = tmp_path / "run-x.jsonl"
    path.write_bytes(content)
    with pytest.raises(ResultsError):
        read_run(path)


def test_load_results_reads_files_and_directories_and_refuses_missing_or_empty(tmp_path):
    first = write_run(tmp_path / "a", header("r1", "2026-11-22T10:00:00Z"), [])
    write_run(tmp_path / "a", header("r2", "2026-11-22T11:00:00Z"), [])
    assert [run.run_id for run in load_results([tmp_path / "a"])] == ["r1", "r2"]  # oldest first
    assert [run.run_id for run in load_results([str(first)])] == ["r1"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(ResultsError, match="no results"):
        load_results([tmp_path / "empty"])
    with pytest.raises(ResultsError, match="does not exist"):
        load_results([tmp_path / "missing"])


def test_grid_point_keys_from_shapes_or_product():
    assert grid_point_keys(GRID) == {(1024, 1024, N, r) for N in (1024, 2048) for r in ("bf16", "rowwise")}
    shaped = dict(GRID, shapes=[[1024, 1024, 2048]])
    assert grid_point_keys(shaped) == {(1024, 1024, 2048, "bf16"), (1024, 1024, 2048, "rowwise")}


@pytest.mark.parametrize(
    ("other", "resumes"),
    [
        (header("old"), True),  # same device, software and grid
        (header("old", software=dict(SOFTWARE, torch="2.12.0")), False),  # other software
        (header("old", device=dict(H100, name="NVIDIA H200")), False),  # other GPU
        (header("old", grid=dict(GRID, N=[1024])), False),  # other grid points
        (header("old", device=dict(H100, emulated=True)), False),  # emulated is another setup
    ],
)
def test_resume_continues_only_runs_of_the_same_setup_and_grid(tmp_path, other, resumes):
    write_run(tmp_path, other, [point(1024, 1024, 1024, "bf16", kernel=1.0, status="failed")])
    found = resumable_runs(tmp_path, header("new", started="2026-11-22T12:00:00Z"))
    assert bool(found) is resumes
    assert done_keys(found) == ({(1024, 1024, 1024, "bf16")} if resumes else set())


@pytest.mark.parametrize(
    ("earlier", "changes"),
    [
        (header("old"), []),
        (
            header("old", software=dict(SOFTWARE, torch="2.12.0", triton="3.5.0")),
            ["torch 2.12.0", "triton 3.5.0"],
        ),
        (header("old", device=dict(H100, name="NVIDIA H200")), ["device NVIDIA H200"]),
        (header("old", device=dict(H100, emulated=True)), ["emulated"]),
        ({**header("old"), "software": {**SOFTWARE, "python": "3.12.1"}}, ["python 3.12.1"]),  # one more name
        (
            {**header("old"), "software": {"torch": "2.11.0"}},
            [f"{name} not recorded" for name in sorted(SOFTWARE) if name != "torch"],
        ),
    ],
)
def test_setup_changes_name_what_the_earlier_run_differs_in(earlier, changes):
    now = header("new")
    assert setup_changes(earlier, now) == changes
    assert (changes == []) is same_setup(earlier, now)
    assert setup_changes(now, dict(now, device=dict(H100, emulated=True))) == ["on a GPU"]


def test_resume_passes_over_a_file_that_is_not_results_and_names_it(tmp_path):
    dead = tmp_path / "run-20261122T090000Z-dead.jsonl"
    dead.write_bytes(b'{"kind": "run", "sch')
    write_run(tmp_path, header("old"), [])
    problems: list[str] = []
    assert [run.run_id for run in resumable_runs(tmp_path, header("new"), problems)] == ["old"]
    assert problems == [
        f"{dead}: the file is not an fp8advisor results file (line 1 must be a run "
        f"header with schema {SCHEMA})"
    ]


def test_pairing_divides_bf16_by_float8_kernel_time(tmp_path):
    points = [
        point(1024, 1024, 1024, "bf16", kernel=3.0, wall=4.0),
        point(1024, 1024, 1024, "rowwise", kernel=2.0, wall=8.0),
        point(1024, 1024, 2048, "rowwise", kernel=1.0),  # no baseline: left out
        point(1024, 1024, 2048, "bf16", status="failed"),
    ]
    [pair] = pair_with_baseline(load_results([write_run(tmp_path, header(), points)]))
    assert (pair.M, pair.K, pair.N, pair.recipe) == (1024, 1024, 1024, "rowwise")
    assert pair.speedup == pytest.approx(1.5) and pair.basis == "kernel_time"
    assert pair.to_json()["bf16_time_s"] == 3.0


def test_pairing_falls_back_to_wall_time_when_there_is_no_kernel_time(tmp_path):
    emulated = header(device={"name": "CPU emulation", "emulated": True})
    points = [point(32, 32, 32, "bf16", wall=6.0), point(32, 32, 32, "tensorwise", wall=3.0)]
    [pair] = pair_with_baseline(load_results([write_run(tmp_path, emulated, points)]))
    assert pair.speedup == pytest.approx(2.0) and pair.basis == "wall_time_median" and pair.emulated
    assert pair_with_baseline(load_results([tmp_path]), basis="kernel_time") == []


def test_pairing_crosses_runs_of_one_setup_only(tmp_path):
    write_run(tmp_path, header("a", "2026-11-22T10:00:00Z"), [point(1024, 1024, 1024, "bf16", kernel=4.0)])
    write_run(tmp_path, header("b", "2026-11-22T11:00:00Z"), [point(1024, 1024, 1024, "rowwise", kernel=2.0)])
    other = header("c", "2026-11-22T12:00:00Z", software=dict(SOFTWARE, torch="2.12.0"))
    write_run(tmp_path, other, [point(1024, 1024, 1024, "rowwise", kernel=1.0)])
    [pair] = pair_with_baseline(load_results([tmp_path]))
    assert pair.run_id == "b" and pair.speedup == pytest.approx(2.0)


def test_pairing_leaves_out_points_whose_profiler_session_lost_records(tmp_path):
    lost = {"suspect": "38 device records is not a multiple of 5 iterations: the profiler lost records"}
    points = [
        point(1024, 1024, 1024, "bf16", kernel=3.0),
        {**point(1024, 1024, 1024, "rowwise", kernel=2.0), "profiler": lost},  # float8 point suspect
        {**point(1024, 1024, 2048, "bf16", kernel=3.0), "profiler": lost},  # baseline suspect
        point(1024, 1024, 2048, "rowwise", kernel=2.0),
        point(1024, 2048, 1024, "bf16", kernel=3.0, wall=1.0),
        {**point(1024, 2048, 1024, "rowwise", kernel=1.0), "profiler": {"suspect": None}},  # checked, fine
    ]
    runs = load_results([write_run(tmp_path, header(), points)])
    assert [(pair.K, pair.N) for pair in pair_with_baseline(runs)] == [(2048, 1024)]


def test_fit_says_how_many_suspect_points_it_left_out(tmp_path):
    from fp8advisor.predict.fit import fit_profile

    lost = {"suspect": "all 17 padding kernels lost: records of the timed iterations may be lost too"}
    points = [
        point(1024, 1024, 1024, "bf16", kernel=3.0),
        point(1024, 1024, 1024, "rowwise", kernel=2.0),
        point(1024, 1024, 2048, "bf16", kernel=3.0),
        {**point(1024, 1024, 2048, "rowwise", kernel=2.0), "profiler": lost},
    ]
    report = fit_profile([write_run(tmp_path, header(), points)], created="2026-11-23")
    assert [point.shape for point in report.profile.recipe("rowwise").points] == [(1024, 1024, 1024)]
    assert any("1 point(s) left out" in note and "padding kernels lost" in note for note in report.notes)


def test_a_suspect_point_is_not_done_so_the_next_sweep_measures_it_again(tmp_path):
    from fp8advisor.predict.measurements import measurements_from_runs

    lost = {"suspect": "38 device records is not a multiple of 5 iterations: the profiler lost records"}
    first = [
        point(1024, 1024, 1024, "bf16", kernel=3.0),
        {**point(1024, 1024, 1024, "rowwise", kernel=9.0), "profiler": lost},
    ]
    write_run(tmp_path, header("a", "2026-11-22T10:00:00Z"), first)
    assert done_keys(resumable_runs(tmp_path, header("x"))) == {(1024, 1024, 1024, "bf16")}
    write_run(tmp_path, header("b", "2026-11-22T11:00:00Z"), [point(1024, 1024, 1024, "rowwise", kernel=2.0)])
    runs = load_results([tmp_path])
    [pair] = pair_with_baseline(runs)
    assert pair.speedup == pytest.approx(1.5) and pair.run_id == "b"  # the later, whole measurement
    [measurements] = measurements_from_runs(runs)
    assert measurements.notes == ()  # measured again: nothing is left out


def test_a_failed_append_is_cut_back_off_and_the_earlier_points_stay(tmp_path, monkeypatch):
    """A full disk in the middle of a line: the half-written line is removed, the error says so."""
    import errno
    import os

    path = write_run(tmp_path, header(), [point(1024, 1024, 1024, "bf16", kernel=1.0)])
    before = path.read_bytes()
    real_write = os.write
    calls = []

    def half_then_full(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    writer = RunWriter(path)
    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(ResultsError, match="No space left on device; the points before it are intact"):
        writer.append(point(1024, 1024, 2048, "bf16", kernel=1.0))
    monkeypatch.undo()
    writer.close()
    assert path.read_bytes() == before  # no torn line left behind
    assert len(read_run(path).points) == 1 and not read_run(path).problems


def test_a_run_file_appears_with_its_header_whole_or_not_at_all(tmp_path, monkeypatch):
    import os

    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    with pytest.raises(AdvisorError, match="No space left on device"):
        RunWriter.create(tmp_path, header())
    assert list(tmp_path.iterdir()) == []  # neither a headerless run file nor a temporary
