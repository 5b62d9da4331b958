"""Issue 25, the files the tool writes and reads back (profiles, results, in-context results, seeds) and every
JSON document it prints: each read field by field, a bad file in a directory scan named and passed over, a
bad file the user names an error, what is written readable again, every JSON document valid JSON.

One test per class of defect, each trying several members of its class:

- class 5, one bad file breaks everything: bad in-context results or profiles in the profile directory, a bad
  run file beside good ones in a results directory `fit` reads;
- class 1, untrusted text: control characters and path separators in a profile's string fields;
- class 8, odd values: every field of a profile and of an in-context record replaced by a value of another
  type or out of range;
- class 9, outputs that look successful and are not: `fit` from absurd rows, JSON with non-finite figures;
- class 10, `fit --name` outside the profile directory;
- names: what `fit` writes is a plain name, what is read (a profile's `name`, `--profile NAME`) any safe name,
  so that profiles named by older versions (`my h100 (table)`) are read, picked and checked again.
"""

from __future__ import annotations

import copy
import json
import math
import os
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fp8advisor.advice.in_context import find_in_context
from fp8advisor.cli import app
from fp8advisor.errors import AdvisorError, ProfileError, ResultsError
from fp8advisor.json_output import dumps
from fp8advisor.measure.results import read_run
from fp8advisor.measure.run_writer import RunWriter, make_header
from fp8advisor.paths import PROFILES_DIR
from fp8advisor.predict.fit import fit_profile
from fp8advisor.predict.profile import Profile, dumps_profile
from fp8advisor.predict.profile_files import PROFILE_DIR_ENV, load_profile, profiles_in
from fp8advisor.predict.selection import select_profile
from fp8advisor.predict.speedup import predict_speedup

runner = CliRunner()
FIXTURES = Path(__file__).parent / "fixtures" / "fit"
H100_RUN = FIXTURES / "run-20261122T100000Z-h100aaaa.jsonl"
H200 = json.loads((PROFILES_DIR / "h200-measured-2026-11-26.json").read_text())
FINGERPRINT = "0123456789abcdef"
TINY_MODEL = (
    "import torch.nn as nn\n\ndef build():\n    return nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 64))\n"
)


@pytest.fixture(autouse=True)
def user_dir(tmp_path, monkeypatch):
    """Every test has a profile directory of its own (empty until the test writes to it)."""
    directory = tmp_path / "profiles"
    monkeypatch.setenv(PROFILE_DIR_ENV, str(directory))
    return directory


def _profile(**changes) -> dict:
    """The shipped measured H200 profile as a user's own, renamed, with `changes` applied (dotted keys)."""
    doc = copy.deepcopy(H200)
    doc["name"] = "mine"
    for dotted, value in changes.items():
        *parents, last = dotted.split(".")
        target = doc
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        target[int(last) if isinstance(target, list) else last] = value
    return doc


def _write(path: Path, document) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return path


def _wall(ms: float) -> dict:
    return {"median": ms / 1e3, "p20": (ms - 0.01) / 1e3, "p80": (ms + 0.01) / 1e3}


def _in_context_run(directory: Path, *, header_changes=None, **choice_changes) -> Path:
    """A finished in-context run of a model with fingerprint `FINGERPRINT` on an H100, with its header and
    its one block choice record changed as given (written raw: a forged file, as a user could edit it)."""
    header = make_header(
        run_id="forged01",
        started="2026-11-22T10:00:00Z",
        device={"name": "NVIDIA H100 80GB HBM3", "emulated": False},
        software={"torch": "2.11.0"},
        method={},
        grid={"shapes": [], "recipes": ["bf16", "rowwise"]},
    )
    header.update(context="block", model={"fingerprint": FINGERPRINT, "target": "model.py"})
    header.update(header_changes or {})
    choice = {
        "kind": "block_choice",
        "block": "layers.*",
        "instances": ["layers.0", "layers.1"],
        "recipe": "rowwise",
        "float8": ["wo"],
        "wall_time_s": _wall(9.0),
        "bf16_wall_time_s": _wall(10.0),
        "seeds": {"all": {"float8": ["wo", "wq"], "wall_time_s": _wall(9.5)}},
        "measured_at": "2026-11-22T10:00:01Z",
        **choice_changes,
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"run-20261122T100000Z-{len(list(directory.iterdir())):08d}.jsonl"
    path.write_text(json.dumps(header) + "\n" + json.dumps(choice) + "\n")
    return path


def _find(directory: Path, *, automatic: bool, passed_over: list | None = None):
    return find_in_context(
        directory,
        fingerprint=FINGERPRINT,
        family="H100",
        recipe="rowwise",
        automatic=automatic,
        passed_over=passed_over,
    )


def _strict_json(text: str):
    """`json.loads` that refuses NaN and Infinity, as every JSON parser but Python's does."""

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


# --- class 5: one bad file must not break everything -----------------------------------------------------

FORGED_CHOICES = {
    "header model a string": {"header_changes": {"model": "just a string"}},
    "header model fingerprint a list": {"header_changes": {"model": {"fingerprint": [1]}}},
    "header emulated a string": {"header_changes": {"device": {"name": "x", "emulated": "no"}}},
    "seeds a string": {"seeds": "x"},
    "seeds a list": {"seeds": []},
    "seed advice a list": {"seeds": {"advice": [1]}},
    "seed advice a string": {"seeds": {"advice": "float8"}},
    "seed advice float8 an int": {"seeds": {"advice": {"float8": 5}}},
    "seed all an int": {"seeds": {"all": 3}},
    "seed all float8 nested lists": {"seeds": {"all": {"float8": [[1]]}}},
    "seed advice float8 an object": {"seeds": {"advice": {"float8": {"a": [1]}}}},
    "seed wall time a string": {"seeds": {"advice": {"float8": [], "wall_time_s": "x"}}},
    "measured_at an object": {"measured_at": {"a": 1}},
    "instances a string": {"instances": "layers.0"},
    "wall time infinite": {"wall_time_s": {"median": math.inf, "p20": 1e-3, "p80": 1e-3}},
}


@pytest.mark.parametrize("case", list(FORGED_CHOICES))
@pytest.mark.parametrize("automatic", [True, False], ids=["found", "named with --measured"])
def test_a_forged_in_context_file_is_passed_over_and_named_in_a_directory_found_or_named(
    tmp_path, case, automatic
):
    changes = FORGED_CHOICES[case]
    directory = tmp_path / "in-context"
    good = _in_context_run(directory)
    bad = _in_context_run(directory, **changes)
    assert good.name < bad.name  # the forged run is the later one: it would win
    # the profile directory's in-context/, or a directory named with --measured: the good run decides, the
    # forged file (or line) is named once, for the CLI to warn of
    passed_over: list[str] = []
    found = _find(directory, automatic=automatic, passed_over=passed_over)
    assert found is not None and found.choices[0].float8 == frozenset({"wo"})
    assert len(passed_over) == 1 and str(bad) in passed_over[0], passed_over
    # a --measured directory left with nothing usable is one error saying what it holds
    if not automatic:
        good.unlink()
        with pytest.raises(ResultsError) as refused:
            _find(directory, automatic=False, passed_over=[])
        assert str(directory) in refused.value.message and refused.value.hint


def test_plain_suggest_survives_bad_files_in_the_profile_directory_and_says_so_once(tmp_path, user_dir):
    model = _write(tmp_path / "tiny.py", TINY_MODEL)
    results = _in_context_run(user_dir / "in-context", header_changes={"model": "just a string"})
    broken = {
        "family-list.json": _profile(**{"device.family": ["H200"]}),
        "name-newline.json": _profile(name="x\nimport os; os.system('id')\n#"),
        "not-json.json": "{ oops",
        "speedup-inf.json": _profile(**{"recipes.rowwise.points.0.speedup": 1e999}),
    }
    for file_name, document in broken.items():
        _write(user_dir / file_name, document)
    (user_dir / "a-directory.json").mkdir()
    result = runner.invoke(app, ["suggest", f"{model}:build", "--gpu", "H200", "--json"])
    assert result.exit_code == 0, result.output
    advice = _strict_json(result.stdout)
    assert advice["profile"] == "h200-evidence"  # none of the broken ones was picked
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: passed over")]
    named = [*broken, "a-directory.json", results.name]
    for file_name in named:  # each named once, though the directory is scanned for several purposes
        assert sum(file_name in line for line in warnings) == 1, (file_name, result.stderr)
    assert len(warnings) == len(named)
    # the one the user names is an error
    named_profile = user_dir / "family-list.json"
    result = runner.invoke(app, ["suggest", f"{model}:build", "--profile", str(named_profile), "--json"])
    assert result.exit_code == 2 and "device.family" in result.stderr and result.stdout == ""


BAD_RUN_FILES = {
    # what a results directory may hold beside good runs, under a run file's name
    "binary": lambda path: path.write_bytes(bytes(range(256))),
    "empty": lambda path: path.write_bytes(b""),
    "a JSON list": lambda path: path.write_bytes(b"[1, 2, 3]\n"),
    "device a number": lambda path: path.write_bytes(
        b'{"kind": "run", "schema": "fp8advisor.results/1", "run_id": "x", "device": 5}\n'
    ),
    "torn in its header": lambda path: path.write_bytes(H100_RUN.read_bytes()[:100]),
    "another tool's JSON Lines": lambda path: path.write_bytes(b'{"event": "start"}\n{"event": "stop"}\n'),
    "a directory": lambda path: path.mkdir(),
    "a pipe": lambda path: os.mkfifo(path),
    "a device": lambda path: path.symlink_to("/dev/null"),
    "a dangling link": lambda path: path.symlink_to(path.parent / "gone.jsonl"),
}


@pytest.mark.parametrize("case", list(BAD_RUN_FILES))
def test_one_bad_file_in_a_results_directory_is_passed_over_by_fit_and_named_once(tmp_path, case):
    results = tmp_path / "res"
    results.mkdir()
    (results / H100_RUN.name).write_bytes(H100_RUN.read_bytes())
    bad = results / "run-20261122T110000Z-bad00001.jsonl"  # the later run: read after the good one
    BAD_RUN_FILES[case](bad)
    # found by scanning the directory: passed over, named in one warning line on stderr; the good run fitted
    result = runner.invoke(app, ["fit", str(results), "-o", str(tmp_path / "p.json")])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(warnings) == 1 and warnings[0].startswith("warning: passed over ") and str(bad) in warnings[0]
    written = json.loads((tmp_path / "p.json").read_text())
    assert written["source"] == str(results / H100_RUN.name)
    # the library says the same: `FitReport.passed_over`
    report = fit_profile([results])
    assert len(report.passed_over) == 1 and str(bad) in report.passed_over[0]
    # named by the user: an error naming it (a pipe refused, never waited on), nothing written
    result = runner.invoke(app, ["fit", str(bad), "-o", str(tmp_path / "q.json")])
    assert result.exit_code == 2 and str(bad) in result.stderr and "hint:" in result.stderr, result.output
    assert "Traceback" not in result.output and not (tmp_path / "q.json").exists()
    # a directory left with no readable run: one error naming what was passed over
    (results / H100_RUN.name).unlink()
    result = runner.invoke(app, ["fit", str(results), "-o", str(tmp_path / "q.json")])
    assert result.exit_code == 2 and "holds no readable results file" in result.stderr, result.output
    assert str(bad) in result.stderr and not (tmp_path / "q.json").exists()


# --- class 1: the text fields of a profile ----------------------------------------------------------------

BAD_TEXTS = {
    "name": [  # a name is read when safe (`a b`, `.hidden` are: see OLD_STYLE_NAMES)
        "x\nimport os",
        "x\x1b[31mred",
        "../../etc/x",
        "a/b",
        "a\\b",
        "..",
        "-x",
        "",
        " ",
        "x" * 256,
        "x\u2028y",
    ],
    "device.name": ["NVIDIA\nH100", "H100\x00", "H100\u202e", "x" * 201],
    "device.family": ["H200\r", "H200\x1b]0;pwned\x07"],
    "source": ["a\nb", "a\u2029b"],
    "method": ["line one\nline two"],
    "created": ["2026-11-01\n"],
    "software.torch": ["2.11\x1b[2J"],
    "recipes.rowwise.error.method": ["leave-one-out\r"],
    "recipes.rowwise.model.kind": ["log\x00"],
}


@pytest.mark.parametrize(
    ("field", "value"), [(field, value) for field, values in BAD_TEXTS.items() for value in values]
)
def test_a_profile_whose_text_could_leave_its_place_is_refused_on_reading(field, value, user_dir):
    document = _profile(**{field: value}, provenance="measured")
    with pytest.raises(ProfileError) as refused:
        Profile.from_json(document)
    # the message names the field, and shows the value escaped (no raw control character in it)
    assert field.split(".")[-1] in refused.value.message
    assert str(refused.value).isprintable() or "\n  hint:" in str(refused.value)
    assert all(c.isprintable() for c in refused.value.message)
    # in the profile directory, claiming `measured`, it is never picked
    _write(user_dir / "mine.json", document)
    choice = select_profile(device_name="NVIDIA H200")
    assert choice.name == "h200-evidence"
    assert [p.startswith(str(user_dir / "mine.json")) for p in choice.passed_over] == [True]


# --- class 8: odd values in any field ---------------------------------------------------------------------

ODD_VALUES = [None, True, "2", [], {}, [1, 2], -1, 0, 1e999, -1e999, 1e300, 2**70, "x\ny"]


def _leaves(value, path=()):
    """The paths of every leaf and container of a JSON document (only the first item of each list)."""
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list) and value:
        yield from _leaves(value[0], (*path, 0))


def _replaced(document, path, value):
    document = copy.deepcopy(document)
    target = document
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return document


def _grouped_profile() -> dict:
    """A profile with every section: recipes (a 2 x 2 x 2 grid each, small to copy), roofline, grouped."""
    doc = _profile()
    for body in doc["recipes"].values():
        smallest = {axis: sorted({point[axis] for point in body["points"]})[:2] for axis in "MKN"}
        body["points"] = [p for p in body["points"] if all(p[axis] in smallest[axis] for axis in "MKN")]
    point = {"E": 8, "M_per_expert": 512, "K": 1024, "N": 1024, "speedup": 1.2, "bf16_time_s": 1e-4}
    doc["grouped"] = {
        "provenance": "measured",
        "recipe": "rowwise",
        "points": [point, {**point, "M_per_expert": 1024, "speedup": 1.3}],
        "model": {"kind": "log-linear-interpolation"},
        "error": {
            "method": "leave-one-out",
            "median_relative_error": 0.1,
            "worst_relative_error": 0.2,
            "sign_accuracy": 1.0,
            "n": 2,
        },
    }
    roofline = json.loads((PROFILES_DIR / "h200-roofline.json").read_text())["roofline"]
    doc["roofline"] = roofline
    return doc


def test_any_field_of_a_profile_of_another_type_or_out_of_range_is_a_profile_error_never_a_traceback():
    base = _grouped_profile()
    for path in [p for p in _leaves(base) if p]:
        for value in ODD_VALUES:
            document = _replaced(base, path, value)
            try:
                profile = Profile.from_json(document)
            except ProfileError as error:
                assert error.hint and all(c.isprintable() for c in error.message), (path, value, error)
                continue
            # accepted: then it is a profile every part of the tool can use, and write back
            Profile.from_json(json.loads(dumps_profile(profile)))
            assert isinstance(profile.name, str) and isinstance(profile.device.family, str | None)
            for recipe in profile.recipes:
                speedup = predict_speedup(profile, recipe, 4096, 4096, 4096).speedup
                assert math.isfinite(speedup) and speedup > 0, (path, value)
            if profile.grouped is not None:
                answer = profile.grouped.speedup_at(8, 700, 1024, 1024)
                assert answer is None or math.isfinite(answer[0]), (path, value)


def test_any_field_of_an_in_context_record_of_another_type_is_passed_over_never_a_traceback(tmp_path):
    header_fields = ["model", "device", "software", "grid", "run_id", "context"]
    choice_fields = ["block", "instances", "recipe", "float8", "wall_time_s", "bf16_wall_time_s", "seeds"]
    for index, value in enumerate(ODD_VALUES):
        directory = tmp_path / f"case-{index}"
        for field in header_fields:
            _in_context_run(directory, header_changes={field: value})
        for field in choice_fields:
            _in_context_run(directory, **{field: value})
        passed_over: list[str] = []
        try:
            _find(directory, automatic=True, passed_over=passed_over)
        except AdvisorError as error:  # pragma: no cover - reported below with the value
            pytest.fail(f"{value!r}: {error}")
        for problem in passed_over:
            assert problem.isprintable(), problem
        named: list[str] = []
        try:  # named with --measured: the same records passed over, or one error if none is left
            _find(directory, automatic=False, passed_over=named)
        except ResultsError:
            pass
        assert named == passed_over, value


# --- class 9: what is written reads back; what is printed is JSON ----------------------------------------


def _results_with(tmp_path: Path, change) -> Path:
    """The H100 fixture run with `change(point)` applied to each point (returns the changed point or None to
    keep it)."""
    lines = H100_RUN.read_text().splitlines()
    out = [lines[0]]
    for line in lines[1:]:
        point = json.loads(line)
        out.append(json.dumps(change(point) or point))
    path = tmp_path / "results" / H100_RUN.name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(out) + "\n")
    return path


ABSURD_ROWS = {
    "a float8 time of 1e-320 s (an infinite speedup)": (
        lambda p: dict(p, kernel_time_s=1e-320) if p["recipe"] == "rowwise" and p["M"] == 1024 else None,
        "kernel_time_s is 1e-320",
    ),
    "an absurd M": (lambda p: dict(p, M=10**30) if p["M"] == 1024 else None, "larger than any GEMM"),
    "a NaN time": (lambda p: dict(p, kernel_time_s=math.nan) if p["N"] == 1024 else None, "kernel_time_s is"),
    "times in range, an impossible ratio": (
        lambda p: dict(p, kernel_time_s=1e-9) if p["recipe"] == "bf16" and p["K"] == 1024 else None,
        "give no possible speedup",
    ),
}


@pytest.mark.parametrize("case", list(ABSURD_ROWS))
def test_fit_leaves_absurd_rows_out_with_a_note_and_writes_a_profile_suggest_reads(tmp_path, case):
    change, why = ABSURD_ROWS[case]
    results = _results_with(tmp_path, change)
    out = tmp_path / "fitted.json"
    result = runner.invoke(app, ["fit", str(results), "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    report = _strict_json(result.stdout)
    assert any(why in note for note in report["notes"]), report["notes"]
    profile = load_profile(out)  # what fit wrote, suggest reads
    for recipe in profile.recipes:
        for point in profile.recipe(recipe).points:
            assert 0 < point.speedup < math.inf and max(point.shape) <= 2**40


@pytest.mark.parametrize(
    ("option", "value", "field"),
    [
        ("--source", "a\nb", "source"),
        ("--method", "x\x1b[2J", "method"),
        ("--device", "NVIDIA H100\r", "device.name"),
        ("--created", "2026/11/01", "name"),  # the default name would be a path
        ("--software", "torch=2.11\x1b[2J", "software.torch"),
    ],
)
def test_fit_refuses_to_write_a_profile_it_could_not_read_back(tmp_path, option, value, field):
    out = tmp_path / "fitted.json"
    args = ["fit", str(H100_RUN), "-o", str(out), option, value]
    if option == "--device":
        args.append("--force")
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "could not be read back" in result.stderr and field in result.stderr
    assert not out.exists()


def test_every_json_document_is_valid_json_with_extreme_but_valid_figures(tmp_path, user_dir):
    # the instance of the issue: figures at the edge of their ranges, a model far beyond the grid
    extreme = _profile()
    for body in extreme["recipes"].values():
        for point in body["points"]:
            point.update(speedup=1e-4, bf16_time_s=1e6, float8_time_s=1e6)
    _write(user_dir / "mine.json", extreme)
    big = "import torch.nn as nn\n\ndef build():\n    return nn.Sequential(nn.Linear(65536, 65536))\n"
    model = _write(tmp_path / "big.py", big)
    result = runner.invoke(app, ["suggest", f"{model}:build", "--seq", "1000000", "--gpu", "H200", "--json"])
    assert result.exit_code == 0, result.output
    advice = _strict_json(result.stdout)
    assert advice["profile"] == "mine" and advice["layers"][0]["predicted_speedup"] == pytest.approx(1e-4)
    # the one place every document goes through: a non-finite figure is null, never NaN or Infinity
    document = {"a": math.nan, "b": [math.inf, (-math.inf, 1.5)], "c": {"d": 2}}
    assert _strict_json(dumps(document)) == {"a": None, "b": [None, [None, 1.5]], "c": {"d": 2}}
    for command in (["layers", f"{model}:build", "--json"], ["fit", str(H100_RUN), "--json", "--name", "x"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 0, result.output
        _strict_json(result.stdout)


def test_the_profile_writer_reads_back_what_it_writes():
    profile = Profile.from_json(_profile())
    for bad in ({"name": "a/b"}, {"source": "x\ny"}):
        with pytest.raises(ProfileError):
            dumps_profile(Profile(**{**profile.__dict__, **bad}))


# --- class 10: fit --name stays in the profile directory --------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "../../escaped",
        "../escaped",
        "sub/escaped",
        "..",
        ".hidden",
        "a b",
        "x\ny",
        "",
        "x" * 101,
        # names a profile may be READ with (an older fit wrote them), but fit no longer writes
        "my h100",
        "my h100 (table)",
        "h100-müller",
        "team@lab#2",
        "-x",
    ],
)
def test_fit_name_is_a_plain_name(tmp_path, user_dir, name):
    result = runner.invoke(app, ["fit", str(H100_RUN), "--name", name])
    assert result.exit_code == 2, result.output
    assert "--name" in result.stderr and "plain name" in result.stderr
    assert "hint: name a profile with letters, digits and . _ + -" in result.stderr  # what is allowed
    assert not user_dir.exists() or list(user_dir.iterdir()) == []
    # the profile directory is tmp_path/profiles: ../escaped and ../../escaped would land here
    assert not (tmp_path / "escaped.json").exists() and not (tmp_path.parent / "escaped.json").exists()
    with pytest.raises(ProfileError, match="plain name"):
        fit_profile([H100_RUN], name=name)


def test_writing_a_results_header_that_would_not_read_back_is_refused(tmp_path):
    header = make_header(
        run_id="r1",
        started="2026-11-22T10:00:00Z",
        device={"name": "cpu\nx"},
        software={},
        method={},
        grid={"shapes": [], "recipes": ["bf16"]},
    )
    with pytest.raises(ResultsError, match="device.name"):
        RunWriter.create(tmp_path, header)
    assert list(tmp_path.iterdir()) == []
    header["device"]["name"] = "cpu"
    with RunWriter.create(tmp_path, header) as writer:
        writer.append({"kind": "point", "x": math.nan})
    assert read_run(writer.path).header["device"]["name"] == "cpu"


@pytest.mark.parametrize("created", ["2026 11 01", "2026(11)", "2026-11-01,x"])
def test_fit_writes_a_default_name_only_when_it_is_plain(tmp_path, user_dir, created):
    # the default name is made from the device and --created: it reads back (a safe name), but fit writes
    # plain names only
    result = runner.invoke(app, ["fit", str(H100_RUN), "--created", created])
    assert result.exit_code == 2, result.output
    assert "not a plain name" in result.stderr and "--created" in result.stderr and "--name" in result.stderr
    assert not user_dir.exists() or list(user_dir.iterdir()) == []


# --- names: read any safe name, write plain names -----------------------------------------------------------

LLAMA = Path(__file__).resolve().parents[1] / "data" / "models" / "llama3.py"
#: Names an older `fit --name` wrote (its file `<name>.json`): each is read, picked and checked again.
OLD_STYLE_NAMES = [
    "my h100 (table)",
    "h100 müller 日本",
    "team@lab #2",
    "a, b",
    'bob\'s h100 "x"',
    ".hidden",
    "x" * 200,
]
#: Names no profile may be read with: a path, a line break, a control character, an option, blank, too long.
UNSAFE_NAMES = [
    "a/b",
    "../x",
    "..",
    ".",
    "a\\b",
    "x\ny",
    "x\ry",
    "x\x1b[2Jy",
    "x\x00y",
    "x\u2028y",
    "x\u202ey",
    "-x",
    "--format",
    "",
    "   ",
    "x" * 256,
]


@pytest.mark.parametrize("name", OLD_STYLE_NAMES)
def test_a_profile_named_by_an_older_fit_is_read_picked_and_checked(tmp_path, user_dir, monkeypatch, name):
    _write(user_dir / f"{name}.json", _profile(name=name))
    assert load_profile(name).name == name  # --profile NAME, a lookup in the profile directory
    # picked automatically for its GPU, no file passed over
    model = _write(tmp_path / "tiny.py", TINY_MODEL)
    result = runner.invoke(app, ["suggest", f"{model}:build", "--gpu", "H200", "--json"])
    assert result.exit_code == 0, result.output
    assert _strict_json(result.stdout)["profile"] == name and "passed over" not in result.stderr
    # named with --profile: the header names it, its check command quotes it, and that command checks
    monkeypatch.chdir(tmp_path)
    target = f"{LLAMA}:llama3_8b"
    args = ["suggest", target, "--profile", name, "--format", "torchtitan-toml"]
    result = runner.invoke(app, [*args, "-o", "x.toml"])
    assert result.exit_code == 0, result.output
    header = (tmp_path / "x.toml").read_text().splitlines()[:6]
    assert any(f"profile: {name} (measured)" in line for line in header), header
    (check,) = [line.removeprefix("# check in CI: ") for line in header if line.startswith("# check in CI:")]
    assert f"--profile {shlex.quote(name)} " in check
    words = shlex.split(check.replace("<this file>", "x.toml"))
    assert words[:2] == ["fp8advisor", "suggest"] and words[words.index("--profile") + 1] == name
    result = runner.invoke(app, words[1:])  # the header's own check command
    assert result.exit_code == 0, result.output
    assert "up to date" in result.output
    result = runner.invoke(app, [*args, "--check", "x.toml"])
    assert result.exit_code == 0 and "up to date" in result.output, result.output


@pytest.mark.parametrize("name", UNSAFE_NAMES)
def test_an_unsafe_profile_name_is_refused_on_reading_and_by_profile(tmp_path, user_dir, name):
    # the name field: refused by the reader, passed over and named in a scan
    with pytest.raises(ProfileError, match="malformed profile: name") as refused:
        Profile.from_json(_profile(name=name))
    assert "\n" not in refused.value.message and "\x1b" not in refused.value.message
    _write(user_dir / "evil.json", _profile(name=name))
    passed_over: list[str] = []
    assert profiles_in(user_dir, passed_over) == []
    assert len(passed_over) == 1 and "evil.json" in passed_over[0] and "name" in passed_over[0]
    # --profile NAME: refused, even where <name>.json is a good profile in the profile directory
    try:
        _write(user_dir / f"{name}.json", _profile())
    except (OSError, ValueError):
        pass  # not a file name at all (NUL, a path that is a directory, too long)
    model = _write(tmp_path / "tiny.py", TINY_MODEL)
    result = runner.invoke(app, ["suggest", f"{model}:build", "--profile", name, "--json"])
    assert result.exit_code == 2, result.output
    # a name, or a path (`..`: a directory, refused as such)
    assert "error: no profile" in result.stderr or "is a directory, not a file" in result.stderr
    assert "Traceback" not in result.output and "\x1b" not in result.stderr
    with pytest.raises(ProfileError):
        load_profile(name)


def test_a_safe_name_too_long_for_a_file_is_not_found_not_a_crash(tmp_path, user_dir):
    user_dir.mkdir()
    for name in ("x" * 255, "日" * 100):  # 259 and 305 bytes with .json: no file can have that name
        with pytest.raises(ProfileError, match="no profile named"):
            load_profile(name)
        model = _write(tmp_path / "tiny.py", TINY_MODEL)
        result = runner.invoke(app, ["suggest", f"{model}:build", "--profile", name])
        assert result.exit_code == 2 and "no profile named" in result.stderr, result.output
