"""Issue 25, reading the user's files: every input file goes through `fp8advisor.reading`, every parse is
bounded, every field read is checked by type, and a byte-order mark is read as every editor reads it.

One test per class of defect, each trying several members of the class:

- unbounded work from a small input (class 6): YAML alias bombs and deep nesting, refused at once; pipes and
  devices given as a config, a model, a Hugging Face config or a CSV table, refused, never waited on;
- tracebacks from odd but legal values (class 8): a value of the wrong type anywhere in a config (a string
  where the framework reads a list included), a YAML key that is not a name, a document nested thousands
  deep, a CSV table that is binary or has broken rows; a YAML syntax error as one line with its line number;
- small but real (class 10): UTF-8 byte-order marks on models, configs, CSV tables and Hugging Face configs;
  a NUL byte located by its line, raw or written as an escape; a Hugging Face config that needs its
  repository's code refused without transformers ever prompting.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fp8advisor.errors import ConfigError, ResultsError, TargetError
from fp8advisor.frameworks.reader import read_config
from fp8advisor.paths import MODELS_DIR
from fp8advisor.reading import MAX_YAML_VALUES, parse_json, parse_toml, parse_yaml

sys.path.insert(0, str(Path(__file__).parent))
from _layers_helpers import write_model  # noqa: E402

BOM = b"\xef\xbb\xbf"

TOML = textwrap.dedent("""
    [model]
    converters = ["quantize.linear.float8"]

    [quantize.linear.float8]
    recipe_name = "rowwise"
    filter_fqns = ["output"]

    [compile]
    enable = true
    components = ["model", "loss"]
""").lstrip()

NEMO = textwrap.dedent("""
    fp8:
      enabled: true
      recipe_name: rowwise
      filter_fqns: [lm_head]
    compile:
      enabled: true
""").lstrip()

TITAN_PY = textwrap.dedent("""
    from torchtitan.components.quantization import Float8LinearConverter


    def float8_advised():
        return Float8LinearConverter.Config(
            recipe_name="rowwise", filter_fqns=["output"], model_compile_enabled=True
        )
""").lstrip()

TABLE = b"recipe,M,K,N,speedup\nrowwise,4096,4096,4096,1.25\nrowwise,8192,8192,8192,1.4\n"


@pytest.fixture
def no_hang():
    """Fail a test that blocks (on a pipe, a prompt) instead of hanging the run: SIGALRM after 20 s."""

    def alarm(signum, frame):
        raise TimeoutError("blocked for 20 s: a read or a prompt waited forever")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(20)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def write(directory: Path, name: str, content: str | bytes) -> Path:
    path = directory / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


# --- class 6: unbounded work from a small input -------------------------------------------------------------


def _laughs(levels: int, width: int = 9) -> list[str]:
    """The anchors of a "billion laughs" document: level n aliases level n-1 `width` times."""
    lines = ["l0: &l0 [" + ", ".join(['"lol"'] * width) + "]"]
    for level in range(1, levels + 1):
        lines.append(f"l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * width) + "]")
    return lines


YAML_BOMBS = {
    # 400 bytes, 9**9 = 387 million strings once expanded: as recipe_name (the instance)
    "laughs as recipe_name": "\n".join([*_laughs(8), "fp8:\n  enabled: true\n  recipe_name: *l8"]),
    "laughs as filter_fqns": "\n".join([*_laughs(8), "fp8:\n  enabled: true\n  filter_fqns: [*l8]"]),
    # one wide anchor aliased many times: each alias costs the anchor's size
    "wide anchor repeated": "a: &a [" + ", ".join(["x"] * 2000) + "]\nb: [" + ", ".join(["*a"] * 200) + "]",
    "an alias inside its own anchor": "fp8: &a\n  enabled: true\n  filter_fqns: [*a]",
    "nested 150 deep": "fp8: " + "[" * 150 + "]" * 150,
    "nested 150 deep, block style": "fp8:\n" + "".join("  " * level + "- \n" for level in range(1, 150)),
    "deep through aliases": "\n".join(
        [
            "a: &a " + "[" * 60 + "x" + "]" * 60,
            "b: &b " + "[" * 30 + "*a" + "]" * 30,
            "fp8: " + "[" * 30 + "*b" + "]" * 30,
        ]
    ),
}


@pytest.mark.parametrize("case", sorted(YAML_BOMBS))
def test_yaml_that_would_expand_without_bound_is_refused_at_once(tmp_path, case):
    text = YAML_BOMBS[case]
    started = time.perf_counter()
    with pytest.raises(ConfigError, match="YAML refused") as caught:
        parse_yaml(text, tmp_path / "recipe.yaml", error=ConfigError)
    assert time.perf_counter() - started < 1.0
    assert f"{tmp_path / 'recipe.yaml'}:" in caught.value.location  # the file and the line
    assert len(str(caught.value)) < 1000
    # the same file given to verify --config: one ConfigError, not minutes of work
    with pytest.raises(ConfigError, match="YAML refused"):
        read_config(write(tmp_path, "recipe.yaml", text))


def test_yaml_counts_every_value_not_only_aliases(tmp_path, monkeypatch):
    """A plain document larger than the bound is refused too (the bound lowered: the real one is 250000)."""
    monkeypatch.setattr("fp8advisor.reading.MAX_YAML_VALUES", 1000)
    text = "fp8:\n  enabled: true\n  filter_fqns:\n" + "".join(f"    - layer{i}\n" for i in range(1200))
    with pytest.raises(ConfigError, match="more than 1000 values"):
        read_config(write(tmp_path, "recipe.yaml", text))


def test_real_yaml_with_anchors_and_merge_keys_still_loads(tmp_path):
    text = textwrap.dedent("""
        defaults: &fp8_defaults
          enabled: true
          recipe_name: rowwise
        skipped: &skipped [lm_head, router]
        fp8:
          <<: *fp8_defaults
          filter_fqns: *skipped
        other_run:
          fp8:
            <<: *fp8_defaults
        compile:
          enabled: true
    """).lstrip()
    config = read_config(write(tmp_path, "recipe.yaml", text))
    assert config.enabled and config.recipe.value == "rowwise"
    assert config.filter_fqns == ("lm_head", "router")
    # just under the bound loads: a long filter list is a real config
    long_list = "fp8:\n  enabled: true\n  filter_fqns:\n" + "".join(f"    - l{i}\n" for i in range(3000))
    assert len(read_config(write(tmp_path, "long.yaml", long_list)).filter_fqns) == 3000
    assert MAX_YAML_VALUES >= 100_000


def _fifo(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    os.mkfifo(path)
    return path


def _read_as_config(path: Path):
    return read_config(path)


def _read_header_settings(path: Path):
    from fp8advisor.verification.settings import advice_settings

    return advice_settings(path)


def _load_model_file(path: Path):
    from fp8advisor.inspect.target import load_model

    return load_model(str(path))


def _fit_table(path: Path):
    from fp8advisor.predict.measurements import load_measurements

    return load_measurements([path])


NOT_FILES = {
    # (what is given, how it is read, the error class)
    "a pipe as --config (yaml)": (lambda tmp: _fifo(tmp, "cfg.yaml"), _read_as_config, ConfigError, "a pipe"),
    "a pipe as --config (toml), header read first": (
        lambda tmp: _fifo(tmp, "job.toml"),
        _read_header_settings,
        ConfigError,
        "a pipe",
    ),
    "/dev/null as --config": (lambda tmp: Path("/dev/null"), _read_as_config, ConfigError, "a device"),
    # (not /dev/zero: were the guard broken, reading it would fill the memory of the machine running tests)
    "/dev/null, header read first": (
        lambda tmp: Path("/dev/null"),
        _read_header_settings,
        ConfigError,
        "a device",
    ),
    "a directory as --config": (lambda tmp: tmp, _read_as_config, ConfigError, "a directory"),
    "a pipe as the model file": (lambda tmp: _fifo(tmp, "model.py"), _load_model_file, TargetError, "a pipe"),
    "a pipe as config.json": (lambda tmp: _fifo(tmp, "config.json"), _load_model_file, TargetError, "a pipe"),
    "a pipe as the config.json of a folder": (
        lambda tmp: _fifo(tmp, "config.json").parent,
        _load_model_file,
        TargetError,
        "a pipe",
    ),
    "a pipe as a CSV table": (lambda tmp: _fifo(tmp, "table.csv"), _fit_table, ResultsError, "a pipe"),
}


@pytest.mark.parametrize("case", sorted(NOT_FILES))
def test_pipes_and_devices_are_refused_never_waited_on(tmp_path, case, no_hang):
    make, read, error, kind = NOT_FILES[case]
    if "config.json" in case:
        pytest.importorskip("transformers")
    path = make(tmp_path)
    started = time.perf_counter()
    with pytest.raises(error) as caught:
        read(path)
    assert f"is {kind}" in caught.value.message
    assert time.perf_counter() - started < 10
    assert "refusing to read it" in caught.value.message
    assert "regular file" in caught.value.hint


def test_a_file_larger_than_any_input_is_refused_before_it_is_read(tmp_path, monkeypatch):
    """The size bound (16 MiB for a config, lowered here to 1 KiB): refused from its size, not parsed."""
    monkeypatch.setattr("fp8advisor.frameworks.reader.MAX_CONFIG_BYTES", 1024)
    path = write(tmp_path, "filter.yaml", "- layer\n" * 200)
    with pytest.raises(ConfigError) as caught:
        read_config(path)
    assert "larger than any config file this tool reads" in caught.value.message


def test_the_cli_refuses_a_pipe_or_a_device_as_config_model_or_check(tmp_path, monkeypatch, no_hang):
    """Through the commands: `verify --config`, `suggest --check` and a model file (`layers`), each one exit 2
    with one message, before any work starts."""
    from typer.testing import CliRunner

    import fp8advisor.inspect.layers
    from fp8advisor.cli import app

    monkeypatch.setattr(
        fp8advisor.inspect.layers, "inspect_model", lambda *a, **k: pytest.fail("work started")
    )
    model = write_model(tmp_path, "def build_model():\n    return nn.Linear(64, 64)\n")
    fifo = _fifo(tmp_path, "fp8.yaml")
    for args, message in (
        (["verify", model, "--config", fifo], "config file"),
        (["verify", model, "--config", "/dev/null"], "config file"),
        (["suggest", model, "--format", "nemo-automodel", "--check", "/dev/null"], "--check file"),
        (["suggest", model, "--format", "nemo-automodel", "--check", fifo], "--check file"),
    ):
        result = CliRunner().invoke(app, [str(arg) for arg in args])
        assert result.exit_code == 2, (args, result.output)
        assert "refusing to read it" in result.stderr and message in result.stderr, result.stderr
        assert "Traceback" not in result.output
    monkeypatch.undo()  # `layers` reads the model inside inspect_model
    result = CliRunner().invoke(app, ["layers", str(_fifo(tmp_path, "net.py"))])
    assert result.exit_code == 2 and "model file" in result.stderr and "refusing to read it" in result.stderr


# --- class 8: odd but legal values --------------------------------------------------------------------------

WRONG_TYPES = [
    # (file name, text, the key path the error names)
    ("job.toml", TOML.replace('components = ["model", "loss"]', "components = 5"), "[compile] components"),
    ("job.toml", TOML.replace("enable = true", 'enable = "false"'), "[compile] enable"),
    ("job.toml", TOML.replace('recipe_name = "rowwise"', "recipe_name = 5"), "recipe_name must be a string"),
    ("job.toml", TOML.replace('filter_fqns = ["output"]', "filter_fqns = 3"), "filter_fqns"),
    (
        "job.toml",
        TOML.replace('filter_fqns = ["output"]', 'filter_fqns = ["output"]\nemulate = "yes"'),
        "[quantize.linear.float8] emulate",
    ),
    (
        "job.toml",
        TOML.replace('converters = ["quantize.linear.float8"]', "converters = {a = 1}"),
        "converters",
    ),
    ("recipe.yaml", NEMO.replace("recipe_name: rowwise", "recipe_name: [rowwise]"), "recipe_name must be"),
    ("recipe.yaml", NEMO.replace("enabled: true\n  recipe", 'enabled: "yes"\n  recipe'), "fp8.enabled"),
    ("recipe.yaml", NEMO.replace("compile:\n  enabled: true", "compile: [1]"), "compile must be a mapping"),
    ("recipe.yaml", NEMO.replace("compile:\n  enabled: true", "compile:\n  enabled: 3"), "compile.enabled"),
    ("filter.json", json.dumps({"filter_fqns": ["a"], "recipe": 5}), "recipe_name must be a string"),
    ("filter.yaml", "filter_fqns: [a]\nrecipe: {x: 1}\n", "recipe_name must be a string"),
    ("titan.py", TITAN_PY.replace('recipe_name="rowwise"', "recipe_name=5"), "recipe_name must be a string"),
]

#: A string where torchtitan reads a list (issue 25: `converters = "quantize.linear.float8"` passed verify;
#: torchtitan iterates a string's characters), a date or a string where it reads a name or a switch: every key
#: the torchtitan and NeMo readers read, refused naming its key path.
WRONG_TYPES += [
    (
        "job.toml",
        TOML.replace('converters = ["quantize.linear.float8"]', 'converters = "quantize.linear.float8"'),
        "[model] converters must be a list of strings, not a string",
    ),
    (
        "job.toml",
        TOML.replace('filter_fqns = ["output"]', 'filter_fqns = "output"'),
        "[quantize.linear.float8] filter_fqns must be a list of strings, not a string",
    ),
    (
        "job.toml",
        TOML.replace('components = ["model", "loss"]', 'components = "model"'),
        "[compile] components must be a list of strings, not a string",
    ),
    (
        "job.toml",
        TOML.replace('"quantize.linear.float8"]', '"quantize.linear.float8", "quantize.grouped_mm.float8"]')
        + '\n[quantize.grouped_mm.float8]\nfqns = "experts"\n',
        "[quantize.grouped_mm.float8] fqns must be a list of strings",
    ),
    ("job.toml", TOML.replace('recipe_name = "rowwise"', "recipe_name = 1979-05-27"), "not a date"),
    (
        "job.toml",
        TOML.replace(
            'filter_fqns = ["output"]', 'filter_fqns = ["output"]\nenable_fsdp_float8_all_gather = 1'
        ),
        "[quantize.linear.float8] enable_fsdp_float8_all_gather must be true or false",
    ),
    ("recipe.yaml", NEMO.replace("filter_fqns: [lm_head]", "filter_fqns: [1, 2]"), "fp8.filter_fqns"),
    ("recipe.yaml", NEMO.replace("filter_fqns:", 'emulate: "false"\n  filter_fqns:'), "fp8.emulate must be"),
    (
        "recipe.yaml",
        NEMO.replace("filter_fqns:", "enable_fsdp_float8_all_gather: 1\n  filter_fqns:"),
        "fp8.enable_fsdp_float8_all_gather must be true or false",
    ),
    (
        "titan.py",
        TITAN_PY.replace('filter_fqns=["output"]', 'filter_fqns="output"'),
        "filter_fqns=...) must be a list of strings, not a string",
    ),
    (
        "titan.py",
        TITAN_PY.replace("model_compile_enabled=True", "model_compile_enabled=1"),
        "model_compile_enabled=...) must be true or false",
    ),
]


@pytest.mark.parametrize(("name", "text", "key"), WRONG_TYPES)
def test_a_value_of_the_wrong_type_is_one_error_naming_its_key(tmp_path, name, text, key):
    path = write(tmp_path, name, text)
    with pytest.raises(ConfigError) as caught:
        read_config(path)
    assert key in caught.value.message, caught.value.message
    assert str(path) in str(caught.value)
    assert caught.value.hint


@pytest.mark.parametrize(
    ("keys", "named"),
    [
        ("1: x\n  zz: y", ["1", "zz"]),
        ("null: 3\n  2001-01-01: d\n  true: t", ["None", "datetime.date(2001, 1, 1)", "True"]),
        ("3.5: f\n  a: 1", ["3.5", "a"]),
    ],
)
def test_yaml_keys_that_are_not_names_are_ignored_as_nemo_ignores_them(tmp_path, keys, named):
    """NeMo AutoModel reads the fp8 fields it knows by name: any other key, a number or null too, is ignored;
    the note names them all, whatever their types (no comparison of a number with a string)."""
    text = NEMO.replace("recipe_name: rowwise", f"recipe_name: rowwise\n  {keys}")
    config = read_config(write(tmp_path, "recipe.yaml", text))
    assert config.enabled and config.filter_fqns == ("lm_head",)
    (note,) = [note for note in config.notes if "ignores unknown fp8 keys" in note]
    assert all(name in note for name in named), note


DEEP = 3000
TOO_DEEP = [
    ("filter.yaml", "[" * DEEP + "]" * DEEP),
    ("filter.yaml", "a:\n" + "".join("  " * level + "- \n" for level in range(1, 200))),
    ("filter.json", "[" * DEEP + "]" * DEEP),
    ("filter.json", '{"a": ' * DEEP + "1" + "}" * DEEP),
    ("job.toml", "a = " + "[" * DEEP + "]" * DEEP),
    ("job.toml", "a = " + "{b = " * DEEP + "1" + "}" * DEEP),
    # deeper than a config ever is, yet within what the parsers themselves handle: the bound's own refusal
    ("filter.json", "[" * 150 + "]" * 150),
    ("job.toml", "a = " + "[" * 150 + "]" * 150),
]


@pytest.mark.parametrize(("name", "text"), TOO_DEEP, ids=lambda value: str(value)[:20])
def test_a_document_nested_thousands_deep_is_one_error(tmp_path, name, text):
    with pytest.raises(ConfigError) as caught:
        read_config(write(tmp_path, name, text))
    assert "nest" in caught.value.message  # the message: the test's folder, in the path, is named "nested"
    assert str(tmp_path) in str(caught.value)


@pytest.mark.parametrize("expression", ["not " * 3000 + "1", "-" * 100_000 + "1", "[" * 3000 + "]" * 3000])
def test_a_model_file_nested_thousands_deep_is_one_error(tmp_path, expression):
    path = write_model(tmp_path, f"x = {expression}\n")
    with pytest.raises(TargetError) as caught:
        _load_model_file(path)
    assert "compile" in caught.value.message or "syntax error" in caught.value.message
    assert str(path) in str(caught.value)


def test_parsers_refuse_values_their_libraries_raise_on():
    """Values the parsing libraries raise ValueError on (beyond Python's integer digit limit, an impossible
    date) are the parser's error, not a traceback."""
    for parse, text in (
        (parse_json, "[" + "1" * 5000 + "]"),
        (parse_yaml, "a: " + "1" * 5000),
        (parse_yaml, "a: 2001-13-45"),
        (parse_yaml, "a: !!python/object/apply:os.system [id]"),
        (parse_toml, "a = " + "1" * 5000),
    ):
        with pytest.raises(ConfigError):
            parse(text, "f", error=ConfigError)


BAD_TABLES = [
    # (content, what the message says, the line it names)
    (bytes(range(256)) * 4, "not UTF-8 text", None),
    (TABLE + b"rowwise,40\x0096,4096,4096,1.1\n", "NUL byte", 4),
    (TABLE + b"rowwise,4096,4096\n", "3 fields, the header has 5", 4),
    (TABLE + b"rowwise,4096,4096,4096,1.1,extra\n", "6 fields, the header has 5", 4),
    (TABLE + b"rowwise,4096,4096,4096,nan\n", "not a finite number", 4),
    (TABLE + b"rowwise,4096,4096,4096,inf\n", "not a finite number", 4),
    (TABLE + b"rowwise,4096,4096,4096,1e400\n", "not a finite number", 4),
    (TABLE + b"rowwise," + b"9" * 5000 + b",4096,4096,1.1\n", "not a positive integer", 4),
    (TABLE + b"rowwise,0,4096,4096,1.1\n", "not a positive integer", 4),
    (TABLE + b"rowwise,4096,4096,4096,1e9\n", "out of range", 4),
    (TABLE + b'rowwise,4096,4096,4096,"' + b"9" * 200_000 + b'"\n', "not a readable CSV", 4),
    (TABLE + b"fp4,4096,4096,4096,1.1\n", "unknown recipe", 4),
]


@pytest.mark.parametrize(("content", "message", "line"), BAD_TABLES, ids=lambda value: repr(value)[:24])
def test_a_csv_table_that_is_binary_or_broken_is_refused_with_its_line(tmp_path, content, message, line):
    from fp8advisor.predict.measurements import read_speedup_table

    path = write(tmp_path, "table.csv", content)
    with pytest.raises(ResultsError) as caught:
        read_speedup_table(path)
    assert message in caught.value.message
    assert caught.value.location == (f"{path}:{line}" if line else str(path))
    assert caught.value.hint


# --- class 10: byte-order marks, NUL bytes, remote code -----------------------------------------------------

BOM_CONFIGS = [
    ("job.toml", TOML, "torchtitan-toml"),
    ("recipe.yaml", NEMO, "nemo-automodel"),
    ("filter.json", '["output"]', "filter"),
    ("filter.yaml", "- output\n", "filter"),
    ("titan.py", TITAN_PY, "torchtitan-py"),
]


HEADER = (
    "# Generated by fp8advisor 9.9 (fp8advisor suggest). Do not edit: regenerate it.\n"
    "# model: m.py  batch: 4  seq: 2048\n"
    "# recipe: rowwise  profile: mine (measured)  min speedup: 1.05\n"
    "# check in CI: fp8advisor suggest m.py --batch 4 --seq 2048 --recipe rowwise --profile mine "
    "--min-speedup 1.05 --format nemo-automodel --check <this file>\n"
)


@pytest.mark.parametrize(("name", "text", "framework"), BOM_CONFIGS)
def test_a_byte_order_mark_is_read_as_editors_read_it(tmp_path, name, text, framework):
    plain = read_config(write(tmp_path, name, text), recipe="rowwise")
    (tmp_path / "bom").mkdir()
    marked = read_config(write(tmp_path / "bom", name, BOM + text.encode()), recipe="rowwise")
    assert marked.framework.value == framework
    assert (marked.enabled, marked.recipe, marked.filter_fqns) == (
        plain.enabled,
        plain.recipe,
        plain.filter_fqns,
    )


def test_a_byte_order_mark_on_a_header_a_model_and_a_table(tmp_path):
    from fp8advisor.inspect.target import load_model
    from fp8advisor.predict.measurements import read_speedup_table
    from fp8advisor.verification.settings import advice_settings

    # the header `suggest` wrote is still read: verify advises with its settings
    config = write(tmp_path, "recipe.yaml", BOM + (HEADER + NEMO).encode())
    settings, from_header, _ = advice_settings(config)
    assert (settings.batch, settings.seq, settings.profile) == (4, 2048, "mine")
    # a model file saved with a mark (Windows editors) builds
    model = write_model(tmp_path, "def build_model():\n    return nn.Linear(64, 64)\n")
    model.write_bytes(BOM + model.read_bytes())
    assert isinstance(load_model(str(model)).model, __import__("torch").nn.Linear)
    # a CSV table saved by Excel ("CSV UTF-8") has the mark before its header
    table = read_speedup_table(write(tmp_path, "table.csv", BOM + TABLE))
    assert [point.speedup for point in table.speedups["rowwise"]] == [1.25, 1.4]


def test_a_byte_order_mark_on_a_hugging_face_config(tmp_path):
    pytest.importorskip("transformers")
    from fp8advisor.inspect.target import load_model

    folder = tmp_path / "hf"
    folder.mkdir()
    write(folder, "config.json", BOM + (MODELS_DIR / "tiny_llama_hf" / "config.json").read_bytes())
    loaded = load_model(str(folder))
    assert type(loaded.model).__name__ == "LlamaForCausalLM"
    assert (folder / "config.json").read_bytes().startswith(BOM)  # read, never rewritten


NUL_FILES = [
    # (name, content, how it is read, the error class, the line named)
    ("model.py", b"import torch\n\nx = 1\x00\n", _load_model_file, TargetError, 3),
    ("job.toml", TOML.encode().replace(b"[compile]", b"[comp\x00ile]"), _read_as_config, ConfigError, 8),
    ("titan.py", TITAN_PY.encode().replace(b"def ", b"def\x00 "), _read_as_config, ConfigError, 4),
    ("table.csv", TABLE.replace(b"8192,1.4", b"8192,1.\x004"), _fit_table, ResultsError, 3),
]


@pytest.mark.parametrize(("name", "content", "read", "error", "line"), NUL_FILES, ids=lambda v: str(v)[:12])
def test_a_nul_byte_is_located_by_its_line(tmp_path, name, content, read, error, line):
    path = write(tmp_path, name, content)
    with pytest.raises(error) as caught:
        read(path)
    assert "NUL byte" in caught.value.message
    assert caught.value.location == f"{path}:{line}"
    assert "None" not in str(caught.value)


#: (file, text, the line it names): a NUL character written as an escape, in a string, in a key, in a table
#: name, in every config format with escapes (issue 25: a TOML filter entry "spa\\u0000re" gave a verify FAIL,
#: exit 1: the raw byte was refused, the escape read).
NUL_ESCAPES = [
    ("job.toml", TOML.replace('["output"]', '["out\\u0000put"]'), 6),
    ("job.toml", TOML.replace('["output"]', '["out\\U00000000put"]'), 6),
    ("job.toml", TOML.replace("recipe_name =", '"recipe\\u0000name" = "x"\nrecipe_name ='), 5),
    ("job.toml", TOML.replace("[compile]", '["comp\\u0000ile"]'), 8),
    ("recipe.yaml", NEMO.replace("[lm_head]", '["lm\\0head"]'), 4),
    ("recipe.yaml", NEMO.replace("[lm_head]", '["lm\\x00head"]'), 4),
    ("recipe.yaml", NEMO.replace("recipe_name:", '"recipe\\u0000name": x\n  recipe_name:'), 3),
    ("filter.json", '{"filter_fqns": ["a", "b\\u0000"]}', 1),
    ("filter.yaml", '- a\n- "b\\0"\n', 2),
]


@pytest.mark.parametrize(("name", "text", "line"), NUL_ESCAPES, ids=lambda v: str(v)[:30])
def test_a_nul_written_as_an_escape_is_refused_as_the_raw_byte_is(tmp_path, name, text, line):
    """Guard: `reading.check_nesting` (every parsed key and value of a JSON, TOML or YAML document) refuses a
    string holding NUL, located at the escape's line: `decode_text` refused only the raw byte."""
    path = write(tmp_path, name, text)
    with pytest.raises(ConfigError) as caught:
        read_config(path, recipe="rowwise")
    assert "NUL character" in caught.value.message, caught.value.message
    assert caught.value.location == f"{path}:{line}"
    assert "\n" not in caught.value.message and "\x00" not in str(caught.value)


def test_verify_refuses_a_toml_config_with_a_nul_escape(tmp_path):
    """The issue's instance through the CLI: exit 2 (a refusal), not exit 1 (a FAIL naming the entry)."""
    from typer.testing import CliRunner

    from fp8advisor.cli import app

    model = write_model(tmp_path, "import torch\n\ndef build_model():\n    return torch.nn.Linear(64, 64)\n")
    config = write(tmp_path, "c.toml", TOML.replace('["output"]', '["spa\\u0000re"]'))
    result = CliRunner().invoke(app, ["verify", str(model), "--config", str(config), "--seq", "64"])
    assert result.exit_code == 2, result.output
    assert "c.toml:6: TOML holds a string with a NUL character" in " ".join(result.output.split())


#: Syntax PyYAML refuses, with the line each error must name: nesting past libyaml's own limit, keys that
#: are lists or mappings (unhashable), a control character, an unclosed flow, an unknown escape, an alias of
#: nothing, two documents.
YAML_ERRORS = [
    ("fp8: " + "[" * 3000 + "]" * 3000 + "\n", 1, "nests a few levels deep"),
    ("compile:\n  enabled: true\nfp8:\n  ? [a, b]\n  : 1\n  enabled: true\n", 4, "cannot be a key"),
    ("fp8:\n  enabled: true\n  ? {a: 1}\n  : x\n", 3, "cannot be a key"),
    ("fp8:\n  [1]: x\n", 2, "cannot be a key"),
    ("fp8:\n  enabled: true\n  recipe_name: a\x01b\n", 3, "safe_load"),
    ("fp8:\n  filter_fqns: [a, b\n", 3, "safe_load"),
    ('fp8:\n  recipe_name: "\\q"\n', 2, "safe_load"),
    ("fp8:\n  recipe_name: *nothing\n", 2, "safe_load"),
    ("fp8: {}\n---\nfp8: {}\n", 2, "safe_load"),
]


@pytest.mark.parametrize(("text", "line", "hint"), YAML_ERRORS, ids=lambda v: repr(v)[:24])
def test_a_yaml_syntax_error_is_one_line_with_its_line(tmp_path, text, line, hint):
    """Guard: `reading._yaml_error` (PyYAML's message is a block of lines with "<unicode string>" marks; the
    CLI printed it under `error:`). Now: what, the column, the file and line in the location, a hint."""
    path = write(tmp_path, "recipe.yaml", text)
    with pytest.raises(ConfigError) as caught:
        read_config(path)
    error = caught.value
    assert error.message.startswith("not valid YAML: ") and "\n" not in error.message, error.message
    assert "unicode string" not in str(error) and "  in " not in str(error)
    assert error.location == f"{path}:{line}", (error.location, error.message)
    assert hint in error.hint and "\n" not in error.hint
    assert str(error).count("\n") == 1  # the message line, then the hint


def test_every_parser_message_is_one_line():
    """The same for JSON and TOML, whose messages are one line already: the line in the location."""
    for parse, text, line in (
        (parse_json, '{"a": 1,\n}', 2),
        (parse_toml, "a = 1\na = 2\n", 2),
        (parse_toml, "[model\nconverters = 1", 1),
        (parse_yaml, "a: [\n", 2),
    ):
        with pytest.raises(ConfigError) as caught:
            parse(text, "f.cfg", error=ConfigError)
        assert "\n" not in caught.value.message, caught.value.message
        assert caught.value.location == f"f.cfg:{line}", caught.value.location


REMOTE_CODE = {
    "AutoConfig": {"AutoConfig": "configuration_mine.MyConfig", "AutoModel": "modeling_mine.MyModel"},
    "AutoModelForCausalLM only": {"AutoModelForCausalLM": "modeling_mine.MyModelForCausalLM"},
}


@pytest.mark.parametrize("auto_map", sorted(REMOTE_CODE))
def test_a_config_that_needs_remote_code_is_refused_without_a_prompt(
    tmp_path, monkeypatch, auto_map, no_hang
):
    pytest.importorskip("transformers")
    import builtins

    from fp8advisor.inspect.target import load_model

    def prompted(*args, **kwargs):
        raise AssertionError(f"transformers prompted: {args}")

    monkeypatch.setattr(builtins, "input", prompted)
    config = json.loads((MODELS_DIR / "tiny_llama_hf" / "config.json").read_text())
    # an unknown model_type: only the repository's code could build it
    unknown = {**config, "model_type": "my_own_llama", "auto_map": REMOTE_CODE[auto_map]}
    write(tmp_path, "config.json", json.dumps(unknown))
    with pytest.raises(TargetError) as caught:
        load_model(str(tmp_path / "config.json"))
    assert "never runs" in caught.value.message and "model.py" in caught.value.hint
    # a model_type transformers knows: built by transformers' own class, the auto_map ignored, no prompt
    known = {**config, "auto_map": REMOTE_CODE[auto_map]}
    write(tmp_path, "config.json", json.dumps(known))
    assert type(load_model(str(tmp_path / "config.json")).model).__name__ == "LlamaForCausalLM"


# --- class 6: a Hugging Face config's sizes are bounded before transformers builds anything ---------------

ABSURD_SIZES = {
    # what the config says (merged into the tiny Llama's), the key and the words the error says
    "a billion layers": ({"num_hidden_layers": 10**9}, "num_hidden_layers", "at most 4,096 layers"),
    "1e9 layers, a float": ({"num_hidden_layers": 1e9}, "num_hidden_layers", "not a whole number"),
    "no layer": ({"num_hidden_layers": 0}, "num_hidden_layers", "not a positive number"),
    "layers as text": ({"num_hidden_layers": "32"}, "num_hidden_layers", "not a whole number"),
    "layers true": ({"num_hidden_layers": True}, "num_hidden_layers", "not a whole number"),
    "a trillion wide": ({"hidden_size": 10**12}, "hidden_size", "at most 1,048,576 for a width"),
    "a huge FFN": ({"intermediate_size": 2**21}, "intermediate_size", "at most 1,048,576"),
    "a huge FFN in a per-layer list": ({"intermediate_size": [1408, 10**9]}, "intermediate_size", "at most"),
    "a huge vocabulary": ({"vocab_size": 10**9}, "vocab_size", "at most 1,048,576"),
    "negative heads of keys": ({"num_key_value_heads": -4}, "num_key_value_heads", "negative"),
    "a million experts": ({"num_local_experts": 10**6}, "num_local_experts", "at most 65,536 experts"),
    "layers of a sub-config": (
        {"text_config": {"num_hidden_layers": 10**9}},
        "text_config.num_hidden_layers",
        "at most 4,096",
    ),
    "a width of a per-layer sub-config": (
        {"block_configs": [{"ffn": {"intermediate_size": 10**9}}]},
        "block_configs[0].ffn.intermediate_size",
        "at most 1,048,576",
    ),
}


@pytest.mark.parametrize("case", list(ABSURD_SIZES))
def test_a_hugging_face_config_with_sizes_no_model_has_is_refused_before_transformers_reads_it(
    tmp_path, monkeypatch, case, no_hang
):
    transformers = pytest.importorskip("transformers")
    from fp8advisor.inspect.target import load_model

    def built(*args, **kwargs):
        raise AssertionError("transformers was given a config with absurd sizes")

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", built)
    changes, key, words = ABSURD_SIZES[case]
    config = {**json.loads((MODELS_DIR / "tiny_llama_hf" / "config.json").read_text()), **changes}
    path = write(tmp_path, "config.json", json.dumps(config))
    started = time.monotonic()
    with pytest.raises(TargetError) as caught:
        load_model(str(path))
    assert time.monotonic() - started < 5
    message = caught.value.message
    assert f" {key} is " in message and words in message, message
    assert str(path) in message and key in caught.value.hint
    # the same values given as overrides on the target (config.json:(key=value)) are refused the same way
    if "." not in key and not isinstance(changes[key], str | bool):
        write(tmp_path, "config.json", (MODELS_DIR / "tiny_llama_hf" / "config.json").read_bytes())
        with pytest.raises(TargetError) as caught:
            load_model(f"{path}:({key}={changes[key]!r})")
        assert f" {key} is " in caught.value.message and words in caught.value.message


def test_the_size_bounds_admit_every_real_config_shape():
    from fp8advisor.inspect.hf import check_config_sizes

    real = {
        "Llama 3.1 405B": {"num_hidden_layers": 126, "hidden_size": 16384, "intermediate_size": 53248},
        "DeepSeek V3": {
            "num_hidden_layers": 61, "n_routed_experts": 256, "n_shared_experts": 1, "q_lora_rank": 1536,
            "kv_lora_rank": 512, "num_nextn_predict_layers": 1, "moe_intermediate_size": 2048,
        },
        "Qwen3-Next": {"num_experts": 512, "num_experts_per_tok": 10, "head_dim": 256},
        "Gemma 3": {"text_config": {"vocab_size": 262144, "num_hidden_layers": 62}, "vision_config": {}},
        "unset and zero where real configs have them": {
            "num_key_value_heads": None, "head_dim": 0, "num_shared_experts": 0, "q_lora_rank": None,
        },
        "per-layer lists": {"intermediate_size": [1408, 2816], "num_attention_heads": (1, 2, 5, 8)},
        "the repository's configs": json.loads((MODELS_DIR / "llama31_8b_hf" / "config.json").read_text()),
    }  # fmt: skip
    for name, config in real.items():
        check_config_sizes(config, name)  # no error
