"""MoE layouts from the second review (tests/fixtures/moe_layouts.py): 3-D experts on the MoE module itself,
experts that never ran before tracing stopped, expert Linears that need pad_inner_dim, the stderr lines."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _verify_helpers import advise_with_predictor  # noqa: E402

from fp8advisor.emit.config_file import format_warnings, render  # noqa: E402
from fp8advisor.frameworks import reader as configs
from fp8advisor.inspect.layers import inspect_model  # noqa: E402
from fp8advisor.recipes import Recipe  # noqa: E402
from fp8advisor.request import SuggestRequest  # noqa: E402
from fp8advisor.verification import experts as verify_experts  # noqa: E402
from fp8advisor.verification.report import LayerCheck  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "moe_layouts.py"
SEQ = 256


def _advice(target: str, convert_experts: bool = True):
    layers = inspect_model(f"{FIXTURE}:{target}", batch=1, seq=SEQ)
    advice = advise_with_predictor(layers)
    experts = tuple(replace(group, convert=convert_experts) for group in advice.experts)
    return layers, replace(advice, experts=experts)


def _request(target: str) -> SuggestRequest:
    return SuggestRequest(f"{FIXTURE}:{target}", 1, SEQ, recipe="rowwise", profile="stub")


@pytest.fixture(scope="module")
def flat():
    return _advice("FlatNet")


def test_router_and_shared_expert_of_a_flat_moe_module_are_its_own(flat):
    layers, _ = flat
    groups = {group.fqn: group for group in layers.expert_groups}
    assert set(groups) == {"layers.0", "layers.1"}
    for index in (0, 1):
        group = groups[f"layers.{index}"]
        assert group.router == f"layers.{index}.gate"
        assert group.shared == (f"layers.{index}.shared_expert",)
        assert group.other_parameters == (
            f"layers.{index}.gate.weight",
            f"layers.{index}.shared_expert.weight",
        )


def test_torchao_file_never_swaps_a_router_or_shared_expert(flat, tmp_path):
    import torch

    _, advice = flat
    assert all(group.convert for group in advice.experts)
    text = render(advice, "torchao", _request("FlatNet"))
    assert "FLOAT8_EXPERTS" not in text and "quantize_(" not in text
    assert "keeps these expert groups bf16" in " ".join(line.lstrip("# ") for line in text.splitlines())
    warnings = format_warnings(advice, "torchao")
    assert any(
        w.startswith("--format torchao: layers.0, layers.1 also hold layers.0.gate.weight") for w in warnings
    )
    path = tmp_path / "float8.py"
    path.write_text(text)
    read = configs.read_config(path)
    sys.path.insert(0, str(FIXTURE.parent))
    from moe_layouts import FlatNet

    with torch.device("meta"):
        model = FlatNet()
    checks, differences, _ = verify_experts.check_experts(advice, read, model)
    assert differences == [] and all(check.converted is False and not check.expected for check in checks)
    assert verify_experts.swapped_expert_modules(model) == set()


def test_a_file_naming_a_flat_moe_module_is_reported_for_its_router(flat, tmp_path):
    """A hand-written torchao file matching layers.0 wraps its router: verify reports the router."""
    import torch

    _, advice = flat
    path = tmp_path / "float8.py"
    path.write_text(
        "from torchao.prototype.moe_training.config import Float8TrainingOpConfig\n"
        "from torchao.quantization.quant_api import quantize_\n\n\n"
        "def convert(model):\n"
        "    quantize_(model, config=Float8TrainingOpConfig(), filter_fn=lambda m, fqn: fqn == 'layers.0')\n"
    )
    read = configs.read_config(path)
    sys.path.insert(0, str(FIXTURE.parent))
    from moe_layouts import FlatNet

    with torch.device("meta"):
        model = FlatNet()
    _, differences, _ = verify_experts.check_experts(advice, read, model)
    flagged = {d.subject for d in differences if d.detail == verify_experts.NOT_AN_EXPERT_GROUP}
    assert flagged == {"layers.0.gate", "layers.0.shared_expert"}
    check = LayerCheck("layers.0.gate", 64, 4, 256, None, False, "", None, False, 1, 0, 2, 0)
    (marked,) = verify_experts.mark_expert_wrapped([check], differences)
    assert not marked.ok and verify_experts.NOT_AN_EXPERT_GROUP in marked.problems[0]


def test_experts_that_never_ran_before_tracing_stopped_are_warned():
    layers = inspect_model(f"{FIXTURE}:StopNet", batch=1, seq=SEQ)
    assert layers.expert_groups == ()
    (note,) = [note for note in layers.notes if "look like routed experts" in note]
    assert note.startswith("WARNING: layers.0.w1, layers.0.w2, layers.1.w1, layers.1.w2:")
    assert "stay bf16" in note


def test_converted_expert_linears_get_pad_inner_dim(tmp_path):
    _, advice = _advice("ListNet")
    (group, *_) = advice.experts
    assert group.form == "linear_list"
    converting = replace(
        advice,
        layers=tuple(replace(layer, convert=layer.fqn in group.members) for layer in advice.layers),
    )
    for fmt in ("torchao", "accelerate"):
        text = render(converting, fmt, _request("ListNet"))
        config = 'FLOAT8_CONFIG = dataclasses.replace(\n    Float8LinearConfig.from_recipe_name("rowwise"),'
        assert config in text
        assert "\n    pad_inner_dim=True,\n)" in text
        assert "import dataclasses" in text
        path = tmp_path / f"{fmt}.py"
        path.write_text(text)
        assert configs.read_config(path).recipe.value == "rowwise"
        assert not any("pad_inner_dim" in w for w in format_warnings(converting, fmt))
    for fmt in ("torchtitan-py", "nemo-automodel"):
        warnings = format_warnings(converting, fmt)
        assert any(w.startswith(f"--format {fmt}: the routed expert Linears") for w in warnings)
    kept = replace(advice, experts=tuple(replace(g, convert=False) for g in advice.experts))
    assert "pad_inner_dim=False," in render(kept, "torchao", _request("ListNet"))  # written out, off


def test_stderr_lines_carry_no_warning_prefix_of_their_own(flat):
    _, advice = flat
    for fmt in ("torchao", "accelerate", "nemo-automodel", "torchtitan-toml"):
        for warning in format_warnings(advice, fmt):
            assert not warning.lower().startswith("warning")


def test_grouped_rows_say_their_m_is_over_all_experts(flat):
    layers, _ = flat
    row = next(layer for layer in layers.layers if layer.fqn == "layers.0.w1")
    assert row.reason.endswith("M: rows over all experts (see the routed experts section)")


def test_verify_summary_says_the_experts_were_checked_on_the_meta_model():
    from types import SimpleNamespace

    def check(converted, problems=()):
        return SimpleNamespace(converted=converted, problems=problems)

    assert verify_experts.experts_summary(SimpleNamespace(experts=())) == ""
    assert verify_experts.experts_summary(SimpleNamespace(experts=(check(None),))) == ""
    rowwise = Recipe.ROWWISE
    said = verify_experts.experts_summary(
        SimpleNamespace(experts=(check(True), check(False)), recipe=rowwise)
    )
    assert said == (
        "; the 2 expert group(s): converted as advised, checked on the meta model (not run: torchao's float8 "
        "grouped GEMM needs a CUDA GPU)"
    )
    mx = SimpleNamespace(experts=(check(True),), recipe=Recipe.MXFP8_RCEIL)
    assert verify_experts.experts_summary(mx).endswith("(not run: the step runs them in bf16)")
    assert "see the differences" in verify_experts.experts_summary(
        SimpleNamespace(experts=(check(True, ("x",)),), recipe=rowwise)
    )


def test_one_name_for_the_grouped_form_and_the_torchtitan_0_2_converter():
    """Each is spelled once in the package: the converter's name in formats, the form's word in
    inspect.records."""
    import fp8advisor

    package = Path(fp8advisor.__file__).parent
    sources = {path.relative_to(package).as_posix(): path.read_text() for path in package.rglob("*.py")}
    assert [name for name, text in sources.items() if '"quantize.grouped_mm.float8"' in text] == [
        "frameworks/formats.py"
    ]
    for name in (name for name in sources if name.split("/")[0] in ("frameworks", "emit", "verification")):
        assert '= "grouped"' not in sources[name] and '== "grouped"' not in sources[name], name
