"""`fp8advisor trace` on CPU traces of routed experts and of a recipe that keeps weight gradients in bf16.

The traces (tests/data/traces/cpu, `benchmarks/make_cpu_traces.py`, torch.profiler on the CPU):
- `moe-bf16.json.gz`: the project's MoE example, one block, 4 experts (top 3) whose 3-D weights run through
  `torch._grouped_mm` (on the CPU one `aten::mm` per expert inside it), in bf16;
- `llama-float8-rowwise_with_gw_hp.json.gz`: the one-block Llama in torchao's rowwise_with_gw_hp recipe (real
  CPU `_scaled_mm` for the forward and input-gradient GEMMs, the weight gradients in bf16), with `output` and
  every `wk` / `wv` kept in bf16.

A float8 grouped trace cannot be recorded on the CPU: torch's `_scaled_grouped_mm` has no CPU kernel. The
float8 expert cases are therefore DERIVED from the real MoE trace (`_as_float8_grouped`): each
`aten::_grouped_mm` op becomes the op torchao's float8 grouped GEMM calls on a GPU,
`aten::_scaled_grouped_mm(A_fp8, B_fp8, scale_A, scale_B, offs, ...)` with float8 operand types and rowwise
scale shapes; everything else (the nesting, the autograd calls, the order, the times) is the real trace's.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

from fp8advisor.traces.analysis import analyse
from fp8advisor.traces.comparison import detected_recipe
from fp8advisor.traces.events import read_trace
from fp8advisor.traces.gemms import GemmShape
from fp8advisor.traces.kernel_rules import Kind

ROOT = Path(__file__).resolve().parent.parent
CPU = ROOT / "tests/data/traces/cpu"
MOE_TRACE = CPU / "moe-bf16.json.gz"
GW_HP_TRACE = CPU / "llama-float8-rowwise_with_gw_hp.json.gz"
LLAMA = f"{ROOT}/data/models/llama3.py:build_model(n_layers=1, vocab_size=2048)"
EXPERT_WEIGHTS = {f"layers.0.moe.experts.{name}" for name in ("w1", "w2", "w3")}


def _manifest(name: str) -> dict:
    return json.loads((CPU / "MANIFEST.json").read_text())["files"][name]


def _model_of(name: str) -> str:
    """The trace's model as `--model` takes it (the manifest's factory call, rooted here)."""
    return f"{ROOT}/{_manifest(name)['model']}"


def _toml(path: Path, *, linear: list[str] | None, experts: bool, recipe: str = "rowwise") -> Path:
    """A torchtitan 0.2 TOML: the Linear converter with `linear` as filter_fqns (None: no Linear converter),
    the grouped-experts converter on `experts` when `experts`."""
    converters = (['"quantize.linear.float8"'] if linear is not None else []) + (
        ['"quantize.grouped_mm.float8"'] if experts else []
    )
    text = f"[model]\nconverters = [{', '.join(converters)}]\n\n"
    text += '[compile]\nenable = true\ncomponents = ["model"]\n'
    if linear is not None:
        fqns = ", ".join(f'"{fqn}"' for fqn in linear)
        text += f'\n[quantize.linear.float8]\nrecipe_name = "{recipe}"\nfilter_fqns = [{fqns}]\n'
    if experts:
        text += '\n[quantize.grouped_mm.float8]\nfqns = ["experts"]\n'
    path.write_text(text)
    return path


def _differing(result) -> set[str]:
    return {layer["fqn"] for layer in json.loads(result.stdout)["layers"] if not layer["ok"]}


#: `_scaled_grouped_mm`'s inputs after the two operands and their two scales: offs, bias, scale_result,
#: out_dtype, use_fast_accum (aten's schema).
_FLOAT8_TYPES = ["c10::Float8_e4m3fn", "c10::Float8_e4m3fn", "float", "float", "int", "", "", "", ""]


def _as_float8_grouped(source: Path, target: Path) -> Path:
    """The real trace with every `aten::_grouped_mm(a, b, offs)` op renamed to the float8 grouped GEMM torchao
    calls on a GPU (module docstring): float8 operands, one scale per row of A and per column of each
    expert's B (2-D x 3-D), or per row of each group (2-D x 2-D, the weight gradient); the offsets fifth."""
    data = json.loads(gzip.decompress(source.read_bytes()))
    renamed = 0
    for event in data["traceEvents"]:
        if event.get("name") != "aten::_grouped_mm":
            continue
        args = event["args"]
        a, b, offs = args["Input Dims"][:3]
        scales = ([a[0]], [b[0], b[-1]]) if len(b) == 3 else ([offs[0] * a[0]], [offs[0] * b[-1]])
        event["name"] = "aten::_scaled_grouped_mm"
        args["Input Dims"] = [a, b, *scales, offs, [], [], [], []]
        args["Input type"] = list(_FLOAT8_TYPES)
        renamed += 1
    assert renamed == 18  # 3 grouped GEMMs forward and 6 backward, in each of the two steps
    target.write_bytes(gzip.compress(json.dumps(data).encode()))
    return target


def test_grouped_gemms_are_one_gemm_each_with_their_shapes_and_groups():
    """On the CPU `_grouped_mm` runs one `aten::mm` per expert inside it: the trace must count one grouped
    GEMM of all the routed rows, not its per-expert `mm` calls as bf16 GEMMs."""
    result = analyse(read_trace(MOE_TRACE))
    for step in result.steps:
        assert step.counts[Kind.GROUPED_GEMM] == 9  # w1, w2, w3: forward, input and weight gradient
        assert step.counts[Kind.GEMM] == 3 * 9  # 9 Linear layers (attention 4, router, shared 3, output)
        grouped = [gemm for gemm in step.gemms if gemm.kind is Kind.GROUPED_GEMM]
        forward = sorted(gemm.shape for gemm in grouped if gemm.forward)
        # 128 tokens x top 3 = 384 rows through 4 experts of dim 256 -> hidden 512 (w1, w3) and back (w2)
        assert forward == sorted(
            [GemmShape(384, 256, 512, groups=4)] * 2 + [GemmShape(384, 512, 256, groups=4)]
        )
        assert {gemm.shape.group.sizes for gemm in grouped} == {(256, 384, 512)}
        assert all(gemm.shape.groups == 4 for gemm in grouped)


def test_expert_weights_are_checked_against_the_config(cli, tmp_path):
    """bf16 experts: PASS when the config leaves them bf16, FAIL naming each 3-D weight when it converts them;
    the derived float8 grouped trace: the other way round. The Linear layers are judged as before."""
    model = _model_of("moe-bf16.json.gz")
    keep = _toml(tmp_path / "keep.toml", linear=None, experts=False)
    convert = _toml(tmp_path / "convert.toml", linear=None, experts=True)
    result = cli("trace", MOE_TRACE, "--model", model, "--config", keep, "--json")
    assert result.exit_code == 0, result.output
    layers = {layer["fqn"]: layer for layer in json.loads(result.stdout)["layers"]}
    assert EXPERT_WEIGHTS <= set(layers) and len(layers) == 12
    assert {fqn: (layers[fqn]["shape"], layers[fqn]["groups"]) for fqn in EXPERT_WEIGHTS} == {
        "layers.0.moe.experts.w1": ([384, 256, 512], 4),
        "layers.0.moe.experts.w2": ([384, 512, 256], 4),
        "layers.0.moe.experts.w3": ([384, 256, 512], 4),
    }
    assert all(layer["ran"] == "bf16" for layer in layers.values())
    result = cli("trace", MOE_TRACE, "--model", model, "--config", convert, "--json")
    assert result.exit_code == 1, result.output
    assert _differing(result) == EXPERT_WEIGHTS

    float8 = _as_float8_grouped(MOE_TRACE, tmp_path / "moe-float8-grouped.json.gz")
    result = cli("trace", float8, "--model", model, "--config", convert, "--json")
    assert result.exit_code == 0, result.output
    ran = {layer["fqn"]: layer["ran"] for layer in json.loads(result.stdout)["layers"]}
    assert {fqn for fqn, what in ran.items() if what == "float8"} == EXPERT_WEIGHTS
    result = cli("trace", float8, "--model", model, "--config", keep)
    assert result.exit_code == 1
    assert "in 4 groups" in result.stdout and "FAIL: 3 layer(s)" in result.stdout
    assert "layers.0.moe.experts.w2: its forward GEMMs ran in float8" in result.stdout


def test_expert_rows_are_read_off_the_trace(cli, tmp_path):
    """A framework that pads each expert's rows (torchtitan, to an alignment) multiplies more rows than
    tokens x top_k: the expert weights are matched at the rows the trace's grouped GEMMs have."""
    data = json.loads(gzip.decompress(MOE_TRACE.read_bytes()))
    for event in data["traceEvents"]:
        if event.get("name") == "aten::_grouped_mm":
            dims = event["args"]["Input Dims"]
            dims[:2] = [[512 if size == 384 else size for size in operand] for operand in dims[:2]]
    padded = tmp_path / "padded.json.gz"
    padded.write_bytes(gzip.compress(json.dumps(data).encode()))
    keep = _toml(tmp_path / "keep.toml", linear=None, experts=False)
    result = cli("trace", padded, "--model", _model_of("moe-bf16.json.gz"), "--config", keep, "--json")
    assert result.exit_code == 0, result.output
    shapes = {layer["fqn"]: layer["shape"] for layer in json.loads(result.stdout)["layers"]}
    assert [shapes[fqn] for fqn in sorted(EXPERT_WEIGHTS)] == [
        [512, 256, 512],
        [512, 512, 256],
        [512, 256, 512],
    ]


def test_an_expert_group_whose_backward_stayed_bf16_is_caught(cli, tmp_path):
    """Forward float8, backward bf16 (a conversion that missed the backward): FAIL, said of the group's
    backward GEMMs."""
    float8 = _as_float8_grouped(MOE_TRACE, tmp_path / "f8.json.gz")
    data = json.loads(gzip.decompress(float8.read_bytes()))
    backward = [
        event
        for event in data["traceEvents"]
        if event.get("name") == "autograd::engine::evaluate_function: GroupedMmBackward0"
    ]
    spans = [(event["ts"], event["ts"] + event["dur"]) for event in backward]
    for event in data["traceEvents"]:
        if event.get("name") == "aten::_scaled_grouped_mm" and any(a <= event["ts"] < b for a, b in spans):
            event["name"], event["args"]["Input type"][:2] = "aten::_grouped_mm", ["c10::BFloat16"] * 2
            event["args"]["Input Dims"] = event["args"]["Input Dims"][:2] + [event["args"]["Input Dims"][4]]
    mixed = tmp_path / "mixed.json.gz"
    mixed.write_bytes(gzip.compress(json.dumps(data).encode()))
    convert = _toml(tmp_path / "convert.toml", linear=None, experts=True)
    result = cli("trace", mixed, "--model", _model_of("moe-bf16.json.gz"), "--config", convert, "--json")
    assert result.exit_code == 1, result.output
    assert _differing(result) == EXPERT_WEIGHTS
    details = {layer["detail"] for layer in json.loads(result.stdout)["layers"] if not layer["ok"]}
    # 6 backward GEMMs a step, counted over the trace's 2 steps
    assert details == {
        "its forward GEMMs ran in float8; 0 of the group's 12 backward GEMMs ran in float8 (config: 12)"
    }


def test_weight_gradients_kept_in_bf16_pass_with_rowwise_with_gw_hp(cli, tmp_path):
    """rowwise_with_gw_hp runs each converted layer's weight gradient in bf16: two float8 GEMMs a layer, and
    the check must expect exactly that (it failed every converted layer before)."""
    entry = _manifest(GW_HP_TRACE.name)
    converted = entry["converted_fqns"]
    result = analyse(read_trace(GW_HP_TRACE))
    for step in result.steps:
        assert step.counts[Kind.FLOAT8_GEMM] == 2 * len(converted)
        assert step.counts[Kind.GEMM] == 3 * (8 - len(converted)) + len(converted)
    kept = ["wk", "wv", "output"]
    good = _toml(tmp_path / "good.toml", linear=kept, experts=False, recipe="rowwise_with_gw_hp")
    result = cli("trace", GW_HP_TRACE, "--model", LLAMA, "--config", good, "--json")
    assert result.exit_code == 0, result.output
    ran = {layer["fqn"]: layer["ran"] for layer in json.loads(result.stdout)["layers"]}
    assert {fqn for fqn, what in ran.items() if what != "bf16"} == set(converted)
    # the same trace read as plain rowwise (every backward GEMM float8): its weight gradients differ
    plain = _toml(tmp_path / "plain.toml", linear=kept, experts=False, recipe="rowwise")
    result = cli("trace", GW_HP_TRACE, "--model", LLAMA, "--config", plain, "--json")
    assert result.exit_code == 1
    assert _differing(result) == set(converted)


def test_the_recipe_is_read_off_the_float8_gemms():
    for recipe in ("tensorwise", "rowwise", "rowwise_with_gw_hp"):
        assert detected_recipe([analyse(read_trace(CPU / f"llama-float8-{recipe}.json.gz"))]) == recipe


def test_the_moe_trace_is_what_the_script_records(tmp_path, monkeypatch):
    """The committed MoE trace is reproducible: `make_cpu_traces.py --only moe-bf16.json.gz` records the same
    GEMM ops with the same shapes, in the same order (times differ), and a manifest entry saying so."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_cpu_traces", ROOT / "benchmarks/make_cpu_traces.py")
    script = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "make_cpu_traces", script)  # its dataclasses look their module up
    monkeypatch.setattr(sys, "path", list(sys.path))  # it puts benchmarks/ on the path
    spec.loader.exec_module(script)
    assert script.main(["--only", MOE_TRACE.name, "--out", str(tmp_path)]) == 0

    def gemm_ops(path: Path) -> list:
        events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
        return [
            (event["name"], event["args"].get("Input Dims"))
            for event in sorted(events, key=lambda event: (event.get("ts", 0), -event.get("dur", 0)))
            if event.get("name") in ("aten::_grouped_mm", "aten::mm")
        ]

    assert gemm_ops(tmp_path / MOE_TRACE.name) == gemm_ops(MOE_TRACE)
    entry = json.loads((tmp_path / "MANIFEST.json").read_text())["files"][MOE_TRACE.name]
    assert entry["model"] == _manifest(MOE_TRACE.name)["model"]
    assert entry["losses"] == pytest.approx(_manifest(MOE_TRACE.name)["losses"], rel=1e-3)
