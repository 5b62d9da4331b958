"""`fp8advisor layers`: the table, --json, grouping, and one clear message with exit status 2 on bad input."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fp8advisor.cli import app, state
from fp8advisor.cli.layers_cmd import group_layers
from fp8advisor.inspect.records import GemmLayer, LayerStatus
from fp8advisor.paths import MODELS_DIR

sys.path.insert(0, str(Path(__file__).parent))
from _layers_helpers import line_of, write_model  # noqa: E402

LLAMA = str(MODELS_DIR / "llama3.py")


@pytest.fixture
def run():
    runner = CliRunner()

    def invoke(*args: str):
        try:
            return runner.invoke(app, list(args), env={"COLUMNS": "160"})
        finally:
            state.debug = False  # --debug is global state of the CLI

    return invoke


def test_json_lists_every_layer(run):
    result = run("layers", f"{LLAMA}:build_model(n_layers=3)", "--batch", "2", "--seq", "256", "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert set(payload) >= {"layers", "target", "batch", "seq", "notes"}
    assert (payload["batch"], payload["seq"], len(payload["layers"])) == (2, 256, 3 * 7 + 1)
    wk = payload["layers"][1]
    assert (wk["fqn"], wk["K"], wk["N"], wk["M"], wk["calls"], wk["status"]) == (
        "layers.0.attention.wk",
        256,
        64,
        512,
        1,
        "traced",
    )


def test_status_and_footnote_marks_stay_whole_at_80_columns():
    # The ViT has a long class name (NonDynamicallyQuantizableLinear) and long FQNs: the name columns fold,
    # the status column with its footnote marks must not be cropped at the right edge.
    result = CliRunner().invoke(
        app, ["layers", str(MODELS_DIR / "vit.py"), "--seq", "64"], env={"COLUMNS": "80"}
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    footnotes = [line.split("]")[0] + "]" for line in lines if line[:1] == "[" and line[1:2].isdigit()]
    assert footnotes, result.stdout
    table = "\n".join(line for line in lines if not line.startswith("["))
    for mark in footnotes:
        assert mark in table, f"{mark} cropped from the table:\n{result.stdout}"
    assert max(len(line) for line in lines) <= 80


def test_table_groups_repeated_blocks(run):
    result = run("layers", f"{LLAMA}:build_model(n_layers=4)", "--seq", "64")
    assert result.exit_code == 0, result.output
    assert "layers.{0..3}.attention.wq" in result.stdout
    assert "Linear x4" in result.stdout
    assert "layers.2.attention.wq" not in result.stdout
    assert "29 nn.Linear: 29 traced" in result.stdout


def test_all_expands_the_groups(run):
    result = run("layers", f"{LLAMA}:build_model(n_layers=4)", "--seq", "64", "--all")
    assert result.exit_code == 0, result.output
    assert "layers.2.attention.wq" in result.stdout and "{0..3}" not in result.stdout


def test_table_footnotes_reasons_and_ties(run):
    result = run("layers", str(MODELS_DIR / "vit.py"), "--batch", "16")
    assert result.exit_code == 0, result.output
    assert "blocks.{0..11}.attn.out_proj" in result.stdout
    assert "not called" in result.stdout
    assert "[3] N = 1000 is not a multiple of 16" in result.stdout


def _layer(fqn: str, M: int = 64, status: LayerStatus = LayerStatus.TRACED) -> GemmLayer:
    return GemmLayer(fqn=fqn, cls="Linear", K=64, N=64, M_per_call=(M,), status=status)


@pytest.mark.parametrize(
    ("fqns", "expected"),
    [
        # contiguous blocks merge
        (["layers.0.wq", "layers.1.wq", "layers.2.wq"], ["layers.{0..2}.wq"]),
        # gaps are listed
        (["layers.0.wq", "layers.1.wq", "layers.5.wq"], ["layers.{0..1,5}.wq"]),
        # a lone layer keeps its name; names without an index never merge
        (["layers.3.wq", "output"], ["layers.3.wq", "output"]),
        # ModuleList at the root: the index is the first part
        (["0.fc", "1.fc"], ["{0..1}.fc"]),
    ],
)
def test_group_names(fqns, expected):
    assert [name for name, _, _ in group_layers([_layer(f) for f in fqns])] == expected


def test_groups_keep_layers_that_differ_apart():
    rows = group_layers([_layer("layers.0.wq"), _layer("layers.1.wq", M=32), _layer("layers.2.wq")])
    assert [(name, count) for name, _, count in rows] == [("layers.{0,2}.wq", 2), ("layers.1.wq", 1)]


# ------------------------------------------------------------------------------------------ bad input


def _assert_clean_error(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.stdout == ""
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


def test_missing_file(run, tmp_path):
    _assert_clean_error(run("layers", str(tmp_path / "nope.py")), "no such file or directory")


def test_syntax_error(run, tmp_path):
    path = write_model(tmp_path, "def build_model(:\n    pass\n")
    _assert_clean_error(
        run("layers", str(path)), f"{path}:{line_of(path, 'def build_model(')}", "syntax error"
    )


def test_unknown_name(run, tmp_path):
    path = write_model(tmp_path, "def build_llama():\n    return nn.Linear(16, 16)\n")
    _assert_clean_error(
        run("layers", f"{path}:build_lama"), "has no name 'build_lama'", "build_llama (function)"
    )


def test_ambiguous_file(run, tmp_path):
    path = write_model(tmp_path, "a = nn.Linear(16, 16)\nb = nn.Linear(16, 16)\n")
    _assert_clean_error(run("layers", str(path)), "ambiguous", "(a, b)", f"{path}:a")


def test_not_a_module(run, tmp_path):
    path = write_model(tmp_path, "def build_model():\n    return 42\n")
    _assert_clean_error(run("layers", str(path)), "returned a int, not a torch.nn.Module")


def test_constructor_that_raises(run, tmp_path):
    path = write_model(
        tmp_path,
        """
        def helper(width):
            raise RuntimeError(f"unsupported width {width}")

        def build_model():
            return helper(7)
        """,
    )
    _assert_clean_error(
        run("layers", str(path)), f"{path}:{line_of(path, 'raise RuntimeError')}", "unsupported width 7"
    )


def test_no_linear(run, tmp_path):
    path = write_model(
        tmp_path, "def build_model():\n    return nn.Sequential(nn.Embedding(10, 16), nn.ReLU())\n"
    )
    _assert_clean_error(run("layers", str(path)), "has no nn.Linear")


def test_forward_needs_arguments(run, tmp_path):
    path = write_model(
        tmp_path,
        """
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(16, 16)

            def forward(self, x, attention_mask, position_ids):
                return self.fc(x)
        """,
    )
    _assert_clean_error(
        run("layers", str(path)),
        f"{path}:{line_of(path, 'def forward')}",
        "forward(x, attention_mask, position_ids) needs arguments the tool cannot guess",
        "def example_inputs(batch, seq):",
    )


def test_bad_keyword_value(run, tmp_path):
    path = write_model(tmp_path, "def build_model(n=1):\n    return nn.Linear(16, 16)\n")
    _assert_clean_error(run("layers", f"{path}:build_model(n=open('x'))"), "is not a literal")


def test_debug_shows_the_traceback(run, tmp_path):
    path = write_model(tmp_path, "def build_model():\n    raise ValueError('boom')\n")
    result = run("--debug", "layers", str(path))
    assert result.exit_code == 2  # bad input is exit 2, with or without --debug
    assert "Traceback (most recent call last)" in result.stderr
    assert "raise ValueError('boom')" in result.stderr  # the user's line, in the traceback
    assert result.stderr.rstrip().splitlines()[-2].startswith("error: ")  # then the one clear message


def test_hugging_face_config(run):
    pytest.importorskip("transformers")
    result = run("layers", str(MODELS_DIR / "tiny_llama_hf"), "--seq", "128", "--json")
    assert result.exit_code == 0, result.output
    layers = {row["fqn"]: row for row in json.loads(result.stdout)["layers"]}
    k_proj = layers["model.layers.1.self_attn.k_proj"]
    assert (k_proj["K"], k_proj["N"], k_proj["M"], k_proj["status"]) == (512, 256, 128, "traced")
    assert layers["lm_head"]["N"] == 32000


POSITIONS_MODEL = """
from dataclasses import dataclass

from torch import nn


@dataclass
class Args:
    dim: int = 64
    max_seq_len: int = 512


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.args = Args()
        self.embed = nn.Embedding(100, 64)
        self.proj = nn.Linear(64, 64)

    def forward(self, tokens):
        return self.proj(self.embed(tokens))


def build_model():
    return Net()
"""


def test_seq_longer_than_the_model_takes_is_warned(run, tmp_path):
    path = tmp_path / "positions.py"
    path.write_text(POSITIONS_MODEL)
    longer = run("layers", str(path), "--seq", "1024")
    assert longer.exit_code == 0, longer.output
    text = " ".join(longer.stdout.split())
    assert (
        "warning: --seq 1024 is longer than the model's maximum positions (512, its args.max_seq_len)" in text
    )
    assert "warning" not in run("layers", str(path), "--seq", "512").stdout
    unknown = path.with_name("unknown.py")
    unknown.write_text(POSITIONS_MODEL.replace("max_seq_len", "window"))
    assert "warning" not in run("layers", str(unknown), "--seq", "1024").stdout  # nothing known: nothing said


def test_max_positions_reads_a_hugging_face_config():
    from types import SimpleNamespace

    from torch import nn

    from fp8advisor.inspect.model_config import max_positions

    model = nn.Linear(2, 2)
    assert max_positions(model) is None
    model.config = SimpleNamespace(max_position_embeddings=8192, max_seq_len=True)
    assert max_positions(model) == (8192, "config.max_position_embeddings")
