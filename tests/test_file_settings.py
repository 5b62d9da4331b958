"""Every suggest option that changes what a written file should do is in the file and in its check command
(issue 26, point 5), and every file says which framework versions it is for.

`--float8-all-gather` (a flag of `SuggestRequest`): the check command carries it, `verify` advises with it,
and each format that can express it writes it, read back by its own framework's code: NeMo AutoModel's YAML
loader and `build_fp8_config`, accelerate's `Accelerator` (the config `_prepare_ao` hands torchao,
pad_inner_dim included), torchao's `convert_to_float8_training` (the Float8LinearConfig of each converted
layer), and our readers (`FrameworkConfig.float8_all_gather`), `verify` naming a file that says otherwise.
`--expert-imbalance` (the MoE notes state its range) likewise. The step model's other options change no byte.
The header's "for:" line is `frameworks.formats.FORMAT_VERSIONS`' in every format.
"""

from __future__ import annotations

import runpy
import shlex
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fp8advisor.cli import app
from fp8advisor.frameworks.formats import FILE_FORMATS, FOR_PREFIX, FORMAT_VERSIONS, ConfigFormat
from fp8advisor.frameworks.header import CHECK_PREFIX, read_header, read_header_lines
from fp8advisor.frameworks.reader import read_config
from fp8advisor.request import SuggestRequest
from fp8advisor.verification.differences import setting_differences
from fp8advisor.verification.report import DifferenceKind
from fp8advisor.verification.settings import advice_settings, requested_float8_all_gather

sys.path.insert(0, str(Path(__file__).parent))  # the tests' own helpers (_verify_helpers)

runner = CliRunner()

#: A one-block Llama wide enough that the published H100 figures convert 6 of its 8 Linear layers at seq 8192.
SMALL = "data/models/llama3.py:build_model(dim=2048, n_layers=1, vocab_size=4096, multiple_of=1024)"
MOE = "data/models/moe.py:deepseek_v3_small"
PINNED = ("--seq", "8192", "--gpu", "H100", "--profile", "h100-published-rowwise-2025-06")
GATHER = ("--recipe", "tensorwise", "--float8-all-gather")
#: The formats whose file can say FSDP float8 all-gather (torchtitan 0.3 has no tensorwise; the filter list
#: and megatron have no such key).
GATHER_FORMATS = ("nemo-automodel", "accelerate", "torchao", "torchtitan-toml")
SUFFIX = {"nemo-automodel": "yaml", "torchtitan-toml": "toml", "filter": "yaml", "megatron": "yaml"}


def _suggest(*args: str) -> str:
    result = runner.invoke(app, ["suggest", *args])
    assert result.exit_code == 0, result.output
    return result.stdout


def _write(folder: Path, name: str, fmt: str, *args: str) -> Path:
    path = folder / f"{name}.{SUFFIX.get(fmt, 'py')}"
    _suggest(SMALL, *PINNED, *args, "--format", fmt, "-o", str(path))
    return path


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[tuple[str, bool], Path]:
    """(format, float8 all-gather asked) -> the file suggest wrote, tensorwise, for SMALL."""
    folder = tmp_path_factory.mktemp("settings")
    files = {}
    for fmt in GATHER_FORMATS:
        files[fmt, True] = _write(folder, f"{fmt}-gather", fmt, *GATHER)
        files[fmt, False] = _write(folder, f"{fmt}-plain", fmt, "--recipe", "tensorwise")
    return files


def _check_command(path: Path) -> list[str]:
    """The header's check command as words, `<this file>` replaced by `path`."""
    line = next(line for line in read_header_lines(path.read_text()) if line.startswith(CHECK_PREFIX))
    words = shlex.split(line[len(CHECK_PREFIX) :].replace("<this file>", shlex.quote(str(path))))
    assert words[:2] == ["fp8advisor", "suggest"]
    return words[2:]


# --- the request: a flag among the settings -------------------------------------------------------------


def test_the_flag_round_trips_through_the_check_command():
    request = SuggestRequest("m.py", recipe="tensorwise", float8_all_gather=True, expert_imbalance=1.5)
    words = request.command_words("nemo-automodel")
    assert words[words.index("--float8-all-gather") + 1] == "--format"  # a flag: no value after it
    assert words[words.index("--expert-imbalance") + 1] == "1.5"
    back, given, fmt = SuggestRequest.from_command(request.command("nemo-automodel") + " --check <this file>")
    assert back == request and fmt == "nemo-automodel"  # the flag takes no value: --format is still read
    assert {"float8_all_gather", "expert_imbalance"} <= given
    # the header's request wins where the command line gives nothing (verify has no such option)
    merged, from_header, _ = SuggestRequest("m.py").merge_with_header({}, {"float8_all_gather": True})
    assert merged.float8_all_gather and from_header == ("float8_all_gather",)


def test_a_check_command_written_before_the_flag_still_reads_back():
    line = (
        "fp8advisor suggest m.py --batch 1 --seq 8192 --recipe rowwise "
        "--profile h100-published-rowwise-2025-06 --format nemo-automodel --check <this file>"
    )
    request, given, fmt = SuggestRequest.from_command(line)
    assert not request.float8_all_gather and request.expert_imbalance == 1.0 and fmt == "nemo-automodel"
    assert "float8_all_gather" not in given
    plain = SuggestRequest("m.py").command_words("filter")
    assert (
        "--float8-all-gather" not in plain and "--expert-imbalance" not in plain
    )  # defaults: bytes as before


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"expert_imbalance": 0.5}, "--expert-imbalance must be a number >= 1.0"),
        ({"expert_imbalance": float("nan")}, "--expert-imbalance"),
        ({"float8_all_gather": "yes"}, "--float8-all-gather is a flag"),
    ],
)
def test_the_request_refuses_values_no_run_has(settings, words):
    from fp8advisor.errors import AdvisorError

    with pytest.raises(AdvisorError, match=words):
        SuggestRequest("m.py", **settings)


# --- suggest: the flag in the file, its header and its check command -------------------------------------


@pytest.mark.parametrize("fmt", GATHER_FORMATS)
def test_the_file_and_its_check_command_carry_the_flag(written, fmt):
    path = written[fmt, True]
    header = read_header(path.read_text())
    assert header is not None and header.request.float8_all_gather
    assert "--float8-all-gather" in _check_command(path)
    request, from_header, _ = advice_settings(path)  # what verify advises with
    assert request.float8_all_gather and "float8_all_gather" in from_header
    assert read_config(path).float8_all_gather is True  # our reader, as the framework reads it
    assert read_config(written[fmt, False]).float8_all_gather is False
    result = runner.invoke(app, ["suggest", *_check_command(path)])  # the check command regenerates it
    assert result.exit_code == 0, result.output


def test_nemo_automodel_builds_its_fp8_config_with_it(written):
    """NeMo AutoModel's own YAML loader and `build_fp8_config`, as its train_ft recipe calls them."""
    pytest.importorskip("nemo_automodel")
    from nemo_automodel.components.config.loader import load_yaml_config
    from nemo_automodel.components.quantization.fp8 import build_fp8_config

    for asked in (True, False):
        fp8 = build_fp8_config(load_yaml_config(str(written["nemo-automodel", asked])).get("fp8"))
        assert fp8.enabled and fp8.recipe_name == "tensorwise"
        assert fp8.enable_fsdp_float8_all_gather is asked
        assert fp8.precompute_float8_dynamic_scale_for_fsdp is asked  # NeMo runs it only with all-gather


def test_accelerate_uses_the_config_as_written(written):
    """The file run as written (our own output): the config accelerate's `_prepare_ao` hands torchao says
    all-gather as asked and no padding, never accelerate's own defaults (True, True)."""
    pytest.importorskip("accelerate")
    from fp8advisor.verification import lifted_checks

    for asked in (True, False):
        with lifted_checks.accelerate_state_isolated():
            accelerator = runpy.run_path(str(written["accelerate", asked]))["accelerator"]
            config = accelerator.ao_recipe_handler.config
        assert config.enable_fsdp_float8_all_gather is asked
        assert config.pad_inner_dim is False
    text = written["accelerate", False].read_text()
    assert "MUST be a multiple of 16" in text.replace("\n    # ", " ")


def test_torchao_converts_with_it(written):
    """torchao's own convert_to_float8_training, as the file calls it, on the model on the meta device: every
    converted layer's Float8LinearConfig says all-gather as asked, and no padding."""
    pytest.importorskip("torchao")
    from torchao.float8.float8_linear import Float8Linear

    from fp8advisor.inspect.target import load_model

    for asked in (True, False):
        model = load_model(SMALL, "meta").model
        runpy.run_path(str(written["torchao", asked]))["convert_model"](model)
        configs = [module.config for module in model.modules() if isinstance(module, Float8Linear)]
        assert len(configs) == 6
        assert {config.enable_fsdp_float8_all_gather for config in configs} == {asked}
        assert {config.pad_inner_dim for config in configs} == {False}


def test_auto_chooses_tensorwise_for_it_and_torchtitan_py_refuses_it(tmp_path):
    text = _suggest(SMALL, *PINNED, "--float8-all-gather", "--format", "nemo-automodel")
    assert yaml.safe_load(text)["fp8"]["recipe_name"] == "tensorwise"
    assert yaml.safe_load(text)["fp8"]["enable_fsdp_float8_all_gather"] is True
    result = runner.invoke(app, ["suggest", SMALL, "--float8-all-gather", "--format", "torchtitan-py"])
    assert result.exit_code == 2
    assert "torchtitan 0.3 does not have" in result.output


# --- verify: a file that says otherwise -------------------------------------------------------------------


def test_verify_names_a_file_whose_all_gather_differs(written, tmp_path):
    path = written["nemo-automodel", True]
    edited = tmp_path / "edited.yaml"
    edited.write_text(
        path.read_text().replace(
            "enable_fsdp_float8_all_gather: true", "enable_fsdp_float8_all_gather: false"
        )
    )
    request, _, _ = advice_settings(edited)
    found = setting_differences(read_config(edited), requested_float8_all_gather(edited, request))
    assert [d.kind for d in found] == [DifferenceKind.SETTING]
    assert "FSDP float8 all-gather is off in the config" in found[0].detail
    assert not setting_differences(read_config(path), requested_float8_all_gather(path, request))


def test_a_hand_written_file_is_not_held_to_a_setting_nobody_asked_for(tmp_path):
    """accelerate without config= all-gathers in float8 (its default): no header asks otherwise."""
    path = tmp_path / "hand.py"
    path.write_text(
        "from accelerate import Accelerator\nfrom accelerate.utils import AORecipeKwargs\n\n"
        'accelerator = Accelerator(mixed_precision="fp8", kwargs_handlers=[AORecipeKwargs()])\n'
    )
    config = read_config(path)
    assert config.float8_all_gather is True
    request = SuggestRequest("m.py")
    assert requested_float8_all_gather(path, request) is None
    assert not setting_differences(config, requested_float8_all_gather(path, request))


# --- the other options --------------------------------------------------------------------------------


def test_expert_imbalance_is_in_the_check_command_of_the_file_it_changes(tmp_path):
    """The MoE notes state the speedup range under the imbalance: the check command carries it, so the file
    regenerates from it, and verify advises with it."""
    path = tmp_path / "moe.py"
    _suggest(
        MOE,
        "--seq",
        "4096",
        "--gpu",
        "H100",
        "--expert-imbalance",
        "2",
        "--format",
        "torchao",
        "-o",
        str(path),
    )
    assert "under the stated imbalance" in path.read_text()
    words = _check_command(path)
    assert words[words.index("--expert-imbalance") + 1] == "2"
    assert runner.invoke(app, ["suggest", *words]).exit_code == 0
    assert advice_settings(path)[0].expert_imbalance == 2.0


def test_the_step_options_change_no_byte_of_the_file():
    """--world-size, --ac and --grad-accum change the printed step only: the file is the same without them,
    so its check command needs none of them."""
    base = _suggest(SMALL, *PINNED, "--format", "accelerate")
    assert base == _suggest(
        SMALL, *PINNED, "--world-size", "8", "--ac", "full", "--grad-accum", "4", "--format", "accelerate"
    )


# --- which framework versions each file is for ----------------------------------------------------------


@pytest.mark.parametrize("fmt", [fmt.value for fmt in FILE_FORMATS])
def test_every_format_says_which_versions_it_is_for(fmt, tmp_path):
    recipe = "tensorwise" if fmt == "megatron" else "rowwise"
    outputs = [tmp_path / f"f.{SUFFIX.get(fmt, 'py')}"] + ([tmp_path / "f.json"] if fmt == "filter" else [])
    for output in outputs:
        _suggest(SMALL, *PINNED, "--recipe", recipe, "--format", fmt, "-o", str(output))
        lines = read_header_lines(output.read_text())
        check = next(i for i, line in enumerate(lines) if line.startswith(CHECK_PREFIX))
        assert lines[check + 1] == FORMAT_VERSIONS[ConfigFormat(fmt)].line()  # the line after the command
    # a file that leaves FP8 off says it too
    off = _suggest("data/models/llama3.py:build_model", "--gpu", "H100", "--recipe", recipe, "--format", fmt)
    assert f"{FOR_PREFIX}{FORMAT_VERSIONS[ConfigFormat(fmt)].for_range} (checked with " in off


def test_the_version_table_covers_every_format_and_names_no_installed_version():
    assert set(FORMAT_VERSIONS) == set(FILE_FORMATS)
    assert FORMAT_VERSIONS[ConfigFormat.TORCHTITAN_PY].line() == (
        "for: torchtitan 0.3.x (checked with torchtitan 0.3.0, torchao 0.18.0)"
    )
    for versions in FORMAT_VERSIONS.values():
        assert all(version.count(".") == 2 for _, version in versions.checked_with)  # exact releases


def test_verify_fails_a_file_whose_all_gather_differs_from_its_header(tmp_path):
    """The whole of verify, on a tiny model decided by a test predictor: the file suggest would write passes,
    the same file with the switch turned off fails with the setting named."""
    from _verify_helpers import predictor, write_tiny_model

    from fp8advisor.advice.decide import advise
    from fp8advisor.emit.config_file import render
    from fp8advisor.inspect.layers import inspect_model
    from fp8advisor.verification.settings import _TestProfile
    from fp8advisor.verification.verifier import verify

    target = write_tiny_model(tmp_path) + ":build_model"
    request = SuggestRequest(target, 1, 64, recipe="tensorwise", float8_all_gather=True)
    layers = inspect_model(target, batch=1, seq=64)
    advice = advise(
        layers,
        _TestProfile(),
        "tensorwise",
        predictor=predictor,
        device_capability=None,
        compare_torchao_auto=False,
    )
    path = tmp_path / "fp8.yaml"
    path.write_text(render(advice, "nemo-automodel", request))
    header_request = replace(advice_settings(path)[0], profile=None)  # the test predictor, not a profile
    assert header_request.float8_all_gather
    assert verify(header_request, path, predictor=predictor).passed
    path.write_text(path.read_text().replace("all_gather: true", "all_gather: false"))
    report = verify(header_request, path, predictor=predictor)
    assert [d.kind for d in report.differences] == [DifferenceKind.SETTING]


def test_the_docs_table_is_the_version_table():
    """docs/formats.md's table of versions, row by row, says what `FORMAT_VERSIONS` says."""
    text = (Path(__file__).parent.parent / "docs" / "formats.md").read_text()
    table = text.split("#### Which framework versions each file is for", 1)[1].split("| `--format` |", 1)[1]
    rows = {}
    for line in table.splitlines()[2:]:
        if not line.startswith("| `"):
            break
        fmt, for_range, checked = (cell.strip() for cell in line.strip("|").split("|"))
        rows[ConfigFormat(fmt.strip("`"))] = (for_range, checked)
    assert rows == {
        fmt: (
            versions.for_range,
            ", ".join(f"{package} {version}" for package, version in versions.checked_with),
        )
        for fmt, versions in FORMAT_VERSIONS.items()
    }
