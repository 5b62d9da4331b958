"""Bad input and misbehaving user code, through the CLI: one clear message on stderr and exit 2, never a
traceback, never a false success, never a lost or damaged file.

Where the process exit itself is the point (a model that calls `sys.exit(0)` or `os._exit(0)`), the CLI runs
in a subprocess; everything else runs through Typer's CliRunner.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from _bench_helpers import CLI_GRID  # noqa: E402
from _layers_helpers import write_model  # noqa: E402

from fp8advisor.cli import app  # noqa: E402
from fp8advisor.files import DirectoryLock  # noqa: E402
from fp8advisor.paths import PROFILES_DIR  # noqa: E402

FIT_FIXTURES = Path(__file__).parent / "fixtures" / "fit"
H100_RESULTS = FIT_FIXTURES / "run-20261122T100000Z-h100aaaa.jsonl"

#: A small model `suggest` advises in about a second: two layers big enough to convert, one too small.
SMALL_MODEL = """
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(4096, 16384)
        self.down = nn.Linear(16384, 4096)
        self.gate = nn.Linear(4096, 16)

    def forward(self, x):
        return self.down(torch.relu(self.up(x))) + self.gate(x).sum(-1, keepdim=True)


def build_model():
    return Block()
"""


def assert_clean_error(result, *fragments: str, stdout_empty: bool = True) -> str:
    """Exit 2, nothing on stdout, no traceback, and one message holding every fragment; returns stderr."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output
    if stdout_empty:
        assert result.stdout == ""
    assert result.stderr.startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr
    return result.stderr


def small_model(tmp_path: Path, prelude: str = "", name: str = "model.py") -> Path:
    return write_model(tmp_path, prelude + SMALL_MODEL, name)


# --- user code that ends the process ------------------------------------------------------------------------

ENDINGS = {
    "sys.exit(0) while building": ("import sys\n", "return Block()", "sys.exit(0)", "called sys.exit(0)"),
    "os._exit(0) while building": ("import os\n", "return Block()", "os._exit(0)", "called os._exit(0)"),
    "a BaseException subclass": (
        "class Stop(BaseException):\n    pass\n",
        "return Block()",
        "raise Stop('halt')",
        "raised Stop: halt",
    ),
    "sys.exit(0) in forward": (
        "import sys\n",
        "return self.down(",
        "sys.exit(0)\n        return self.down(",
        "called sys.exit(0) while running the forward",
    ),
}


def _ending_model(tmp_path: Path, case: str) -> tuple[Path, str]:
    prelude, old, new, message = ENDINGS[case]
    path = small_model(tmp_path, prelude)
    path.write_text(path.read_text().replace(old, new, 1))
    return path, message


def _fp8advisor(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fp8advisor", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "160"},
    )


@pytest.fixture(scope="module")
def committed_config(tmp_path_factory) -> bytes:
    """A config `suggest` wrote for a well-behaved model: what CI has committed (written once, in-process:
    what is checked is the processes below)."""
    folder = tmp_path_factory.mktemp("committed")
    config = folder / "fp8.toml"
    written = CliRunner().invoke(
        app, ["suggest", str(small_model(folder)), "--seq", "1024", "-o", str(config)]
    )
    assert written.exit_code == 0, written.output
    return config.read_bytes()


@pytest.mark.parametrize("case", ["sys.exit(0) while building", "os._exit(0) while building"])
def test_a_model_ending_the_process_fails_suggest_check_and_writes_nothing(tmp_path, case, committed_config):
    """The real process: `suggest --check` in CI must never exit 0 because the model file exited 0."""
    config = tmp_path / "fp8.toml"
    config.write_bytes(committed_config)
    committed = config.read_bytes()

    path, message = _ending_model(tmp_path, case)
    checked = _fp8advisor("suggest", path, "--seq", 1024, "--check", config, cwd=tmp_path)
    assert checked.returncode == 2, (checked.stdout, checked.stderr)
    assert message in checked.stderr and checked.stdout == ""
    rewritten = _fp8advisor("suggest", path, "--seq", 1024, "-o", config, cwd=tmp_path)
    assert rewritten.returncode == 2 and message in rewritten.stderr
    assert config.read_bytes() == committed  # untouched
    verified = _fp8advisor("verify", path, "--seq", 1024, "--config", config, cwd=tmp_path)
    assert verified.returncode == 2 and message in verified.stderr, (verified.stdout, verified.stderr)


@pytest.mark.parametrize("case", list(ENDINGS))
def test_every_way_user_code_ends_the_process_is_one_clear_error(cli, tmp_path, case):
    path, message = _ending_model(tmp_path, case)
    for command in (["layers", path, "--seq", 64], ["suggest", path, "--seq", 64, "--json"]):
        stderr = assert_clean_error(cli(*command), message)
        assert f"{path}:" in stderr  # where: the user's line


def test_a_model_ending_the_process_only_on_real_tensors_fails_verify(cli, tmp_path):
    """verify also runs the model for real (small ones): that run is guarded as the meta trace is."""
    path, _ = _ending_model(tmp_path, "sys.exit(0) in forward")
    text = path.read_text().replace("sys.exit(0)\n", "if not x.is_meta:\n            sys.exit(0)\n")
    path.write_text(text.replace("16384", "8192"))  # 67 M parameters: small enough to be run for real
    config = tmp_path / "fp8.toml"
    assert cli("suggest", path, "--seq", 64, "-o", config).exit_code == 0  # the meta trace is fine
    result = cli("verify", path, "--seq", 64, "--config", config)
    assert_clean_error(result, "called sys.exit(0) while running the model for real", f"{path}:")


def test_the_models_prints_go_to_stderr_so_json_and_configs_stay_clean(cli, tmp_path):
    path = small_model(tmp_path, 'print("importing the model")\n')
    path.write_text(path.read_text().replace("return Block()", 'print("building")\n    return Block()'))
    result = cli("suggest", path, "--seq", 1024, "--json")
    assert result.exit_code == 0, result.output
    advice = json.loads(result.stdout)  # stdout is the JSON document alone
    assert advice["batch"] == 1 and "importing the model" in result.stderr and "building" in result.stderr
    result = cli("suggest", path, "--seq", 1024, "--format", "filter")
    assert result.exit_code == 0 and "building" not in result.stdout
    assert result.stdout.startswith("# Generated by fp8advisor")
    result = cli("layers", path, "--seq", 1024, "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)


def test_a_model_that_parses_sys_argv_sees_only_its_own_file(cli, tmp_path):
    prelude = (
        "import argparse\n"
        "parser = argparse.ArgumentParser()\n"
        "parser.add_argument('--width', type=int, default=4096)\n"
        "ARGS = parser.parse_args()\n"
    )
    path = small_model(tmp_path, prelude)
    result = cli("layers", path, "--seq", 1024, "--json")
    assert result.exit_code == 0, result.output
    assert {layer["fqn"] for layer in json.loads(result.stdout)["layers"]} == {"up", "down", "gate"}
    assert sys.argv[0] != str(path)  # restored afterwards


# --- targets and sizes --------------------------------------------------------------------------------------


def test_unhashable_literal_arguments(cli, tmp_path):
    path = small_model(tmp_path)
    assert_clean_error(cli("layers", f"{path}:build_model(x={{[1]: 2}})"), "is not a literal")


def test_a_bare_linear_as_the_whole_model(cli, tmp_path):
    path = write_model(tmp_path, "def build_model():\n    return nn.Linear(4096, 4096)\n")
    for command in ("layers", "suggest"):
        assert_clean_error(cli(command, path), "a single nn.Linear", "nn.Sequential")


def test_batch_times_seq_beyond_int64(cli, tmp_path):
    path = small_model(tmp_path)
    assert_clean_error(
        cli("suggest", path, "--batch", 2**40, "--seq", 2**40), "tokens per step is more than 2147483648"
    )


# --- -o and --check -----------------------------------------------------------------------------------------


def test_o_refuses_a_file_it_did_not_write_and_force_replaces_it(cli, tmp_path):
    path = small_model(tmp_path)
    theirs = tmp_path / "train.toml"
    theirs.write_text("[training]\nsteps = 1000\n")
    assert_clean_error(
        cli("suggest", path, "--seq", 1024, "-o", theirs), "was not written by fp8advisor", "--force"
    )
    assert theirs.read_text() == "[training]\nsteps = 1000\n"
    result = cli("suggest", path, "--seq", 1024, "-o", theirs, "--force")
    assert result.exit_code == 0 and theirs.read_text().startswith("# Generated by fp8advisor")
    result = cli("suggest", path, "--seq", 2048, "-o", theirs)  # ours now: regenerated without --force
    assert result.exit_code == 0 and "seq: 2048" in theirs.read_text()


def test_o_never_writes_over_an_input(cli, tmp_path):
    path = small_model(tmp_path)
    source = path.read_text()
    assert_clean_error(
        cli("suggest", path, "--format", "torchao", "-o", path, "--force"), "one of this command"
    )
    profile = tmp_path / "profile.json"
    shutil.copy(PROFILES_DIR / "h100-roofline.json", profile)
    assert_clean_error(
        cli("suggest", path, "--profile", profile, "--format", "filter", "-o", profile, "--force"),
        "one of this command",
    )
    assert path.read_text() == source


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("{tmp}", "is a directory"),
        ("/dev/full", "is not a regular file"),
        ("/sys/fp8advisor/fp8.toml", "no file can be created in /sys"),
    ],
)
def test_o_into_a_place_that_cannot_hold_it_fails_before_the_work(
    cli, tmp_path, output, message, monkeypatch
):
    import fp8advisor.inspect.layers

    monkeypatch.setattr(
        fp8advisor.inspect.layers, "inspect_model", lambda *a, **k: pytest.fail("the work started")
    )
    path = small_model(tmp_path)
    assert_clean_error(cli("suggest", path, "--format", "filter", "-o", output.format(tmp=tmp_path)), message)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda tmp: tmp, "is a directory"),
        (lambda tmp: tmp / "missing.toml", "does not exist"),
        (
            lambda tmp: (
                (tmp / "binary.toml").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe") and tmp / "binary.toml"
            ),
            "not a UTF-8",
        ),
    ],
)
def test_check_on_what_cannot_be_a_config_is_an_error_not_stale(cli, tmp_path, make, message, monkeypatch):
    import fp8advisor.inspect.layers

    monkeypatch.setattr(
        fp8advisor.inspect.layers, "inspect_model", lambda *a, **k: pytest.fail("the work started")
    )
    path = small_model(tmp_path)
    assert_clean_error(cli("suggest", path, "--format", "filter", "--check", make(tmp_path)), message)


# --- results and fit ----------------------------------------------------------------------------------------


def _results_copy(tmp_path: Path, extra_lines: list[bytes]) -> Path:
    path = tmp_path / H100_RESULTS.name
    path.write_bytes(H100_RESULTS.read_bytes() + b"".join(extra_lines))
    return path


def test_fit_names_each_unreadable_line_and_keeps_the_rest(cli, tmp_path):
    good_lines = H100_RESULTS.read_bytes().count(b"\n")
    point = json.loads(H100_RESULTS.read_text().splitlines()[1])
    bad = [
        b"not json\n",
        (json.dumps({**point, "kernel_time_s": float("nan")}) + "\n").encode(),
        (json.dumps({**point, "kernel_time_s": -1.0}) + "\n").encode(),
        (json.dumps({**point, "kernel_time_s": "slow"}) + "\n").encode(),
        (json.dumps({k: v for k, v in point.items() if k != "M"}) + "\n").encode(),
    ]
    path = _results_copy(tmp_path, bad)
    result = cli("fit", path, "-o", tmp_path / "profile.json", "--json")
    assert result.exit_code == 0, result.output
    notes = " ".join(json.loads(result.stdout[: result.stdout.rindex("}") + 1])["notes"])
    for offset in range(len(bad)):
        assert f"{path}:{good_lines + 1 + offset}:" in notes, notes
    assert "5 results file(s) or line(s) could not be read" in notes


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x89PNG\r\n\x1a\n\x00binary\n", "is not an fp8advisor results file"),
        (b"[1, 2, 3]\n", "line 1 is not a run header"),
        (b'{"kind": "run", "schema": "fp8advisor.results/1", "run_id": "x"}\n', "no device name"),
    ],
)
def test_fit_refuses_files_that_are_not_results(cli, tmp_path, content, message):
    path = tmp_path / "run-x.jsonl"
    path.write_bytes(content)
    assert_clean_error(cli("fit", path, "-o", tmp_path / "p.json"), message)


def test_fit_o_never_replaces_an_input_or_a_file_that_is_not_a_profile(cli, tmp_path):
    results = _results_copy(tmp_path, [])
    before = results.read_bytes()
    assert_clean_error(cli("fit", results, "-o", results), "one of this command's inputs")
    notes = tmp_path / "notes.json"
    notes.write_text('{"my": "notes"}')
    stderr = assert_clean_error(cli("fit", results, "-o", notes), "was not written by fp8advisor")
    assert "--force" not in stderr  # fit's --force mixes machines; it never replaces files
    assert results.read_bytes() == before and notes.read_text() == '{"my": "notes"}'
    assert cli("fit", results, "-o", tmp_path / "p.json").exit_code == 0
    assert cli("fit", results, "-o", tmp_path / "p.json").exit_code == 0  # a profile: replaced


# --- profiles -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x01a\x94K\x01s.", "not UTF-8 text"),
        (bytes(range(256)), "not UTF-8 text"),
        (b"[1, 2]", "a profile must be a JSON object"),
        (
            b'{"schema": "fp8advisor.profile/1", "name": "x", "provenance": "measured", "device": {}, '
            b'"recipes": 5}',
            "recipes is 5, not an object",
        ),
    ],
)
def test_profiles_that_are_not_profiles(cli, tmp_path, content, message):
    path = small_model(tmp_path)
    profile = tmp_path / "bad.json"
    profile.write_bytes(content)
    assert_clean_error(cli("suggest", path, "--profile", profile), message)


def test_negative_profile_figures_are_refused(cli, tmp_path):
    data = json.loads((PROFILES_DIR / "h100-roofline.json").read_text())
    data["roofline"]["bandwidth_bytes_per_s"] = -3.35e12
    profile = tmp_path / "negative.json"
    profile.write_text(json.dumps(data))
    assert_clean_error(
        cli("suggest", small_model(tmp_path), "--profile", profile), "roofline.bandwidth_bytes_per_s is -3"
    )


def test_a_stray_file_in_the_profile_directory_does_not_block_advice(tmp_path, monkeypatch):
    from fp8advisor.predict.profile_files import PROFILE_DIR_ENV
    from fp8advisor.predict.selection import select_profile

    (tmp_path / "notes.json").write_bytes(b"\xff\xfe not a profile")
    monkeypatch.setenv(PROFILE_DIR_ENV, str(tmp_path))
    choice = select_profile(device_name="NVIDIA H100 80GB HBM3")
    assert choice.primary.family == "H100"
    (passed_over,) = choice.passed_over  # named for the caller to warn about (suggest: once, on stderr)
    assert passed_over.startswith(f"{tmp_path / 'notes.json'}: profile is not UTF-8 text")


# --- bench --------------------------------------------------------------------------------------------------


def test_negative_compile_workers(cli, tmp_path):
    assert_clean_error(cli("bench", *CLI_GRID, "--out", tmp_path, "--compile-workers", "-1"), "0 or more")


@pytest.mark.parametrize(
    ("out", "message"),
    [
        ("{tmp}/file", "is not a directory"),
        ("/dev/full", "is not a directory"),
        ("/sys/fp8", "no file can be"),
    ],
)
def test_bench_out_that_cannot_hold_results(cli, tmp_path, out, message):
    (tmp_path / "file").write_text("x")
    assert_clean_error(cli("bench", *CLI_GRID, "--out", out.format(tmp=tmp_path)), message)


def test_two_benches_cannot_measure_into_one_directory(cli, tmp_path):
    with DirectoryLock(tmp_path):  # another bench holds it
        result = cli("bench", *CLI_GRID, "--out", tmp_path)
        assert_clean_error(result, f"another bench is writing to {tmp_path}", stdout_empty=False)
    assert not list(tmp_path.glob("run-*.jsonl"))  # nothing measured, nothing written


# --- long values --------------------------------------------------------------------------------------------


def test_an_error_quotes_at_most_a_few_hundred_characters_of_a_value(cli, tmp_path):
    path = small_model(tmp_path)
    huge = "x" * 100_000
    stderr = assert_clean_error(cli("layers", f"{path}:build_model(n={huge})"))
    assert len(stderr) < 2000


def test_any_bare_base_exception_escaping_a_command_is_an_error_not_success(monkeypatch):
    """The CLI's last line of defence, for user code that ends the process outside the guarded places."""
    import typer

    import fp8advisor.cli.application as cli_module

    monkeypatch.setattr(cli_module, "app", typer.Typer())  # a scratch app: `command` registers on it

    @cli_module.command("ends")
    def ends(how: str) -> None:
        if how == "exit0":
            sys.exit(0)
        raise GeneratorExit("stop")

    for how, name in (("exit0", "SystemExit(0)"), ("gen", "GeneratorExit('stop')")):
        result = CliRunner().invoke(cli_module.app, [how])
        assert_clean_error(result, f"the run was ended by {name} before it finished")
