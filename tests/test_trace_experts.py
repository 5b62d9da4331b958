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
EXPERT_WEIGHTS = {f"layers.{block}.moe.experts.{name}" for block in (0, 1) for name in ("w1", "w2", "w3")}
BLOCK_0 = {fqn for fqn in EXPERT_WEIGHTS if fqn.startswith("layers.0.")}


def _manifest(name: str) -> dict:
    return json.loads((CPU / "MANIFEST.json").read_text())["files"][name]


def _model_of(name: str) -> str:
    """The trace's model as `--model` takes it (the manifest's factory call, rooted here)."""
    return f"{ROOT}/{_manifest(name)['model']}"


def _toml(
    path: Path,
    *,
    linear: list[str] | None,
    experts: bool,
    recipe: str = "rowwise",
    expert_fqns: tuple[str, ...] = ("experts",),
) -> Path:
    """A torchtitan 0.2 TOML: the Linear converter with `linear` as filter_fqns (None: no Linear converter),
    the grouped-experts converter on `expert_fqns` when `experts`."""
    converters = (['"quantize.linear.float8"'] if linear is not None else []) + (
        ['"quantize.grouped_mm.float8"'] if experts else []
    )
    text = f"[model]\nconverters = [{', '.join(converters)}]\n\n"
    text += '[compile]\nenable = true\ncomponents = ["model"]\n'
    if linear is not None:
        fqns = ", ".join(f'"{fqn}"' for fqn in linear)
        text += f'\n[quantize.linear.float8]\nrecipe_name = "{recipe}"\nfilter_fqns = [{fqns}]\n'
    if experts:
        fqns = ", ".join(f'"{fqn}"' for fqn in expert_fqns)
        text += f"\n[quantize.grouped_mm.float8]\nfqns = [{fqns}]\n"
    path.write_text(text)
    return path


def _differing(result) -> set[str]:
    return {layer["fqn"] for layer in json.loads(result.stdout)["layers"] if not layer["ok"]}


#: `_scaled_grouped_mm`'s inputs after the two operands and their two scales: offs, bias, scale_result,
#: out_dtype, use_fast_accum (aten's schema).
_FLOAT8_TYPES = ["c10::Float8_e4m3fn", "c10::Float8_e4m3fn", "float", "float", "int", "", "", "", ""]


def _as_float8_grouped(source: Path, target: Path, only_block: int | None = None) -> Path:
    """The real trace with its `aten::_grouped_mm(a, b, offs)` ops renamed to the float8 grouped GEMM torchao
    calls on a GPU (module docstring): float8 operands, one scale per row of A and per column of each
    expert's B (2-D x 3-D), or per row of each group (2-D x 2-D, the weight gradient); the offsets fifth.
    `only_block`: only that block's (of each step's grouped GEMMs, block 0 runs the first 3 forward and the
    last 6 backward ones; block 1 the others)."""
    data = json.loads(gzip.decompress(source.read_bytes()))
    events = data["traceEvents"]
    chosen = [event for event in events if event.get("name") == "aten::_grouped_mm"]
    if only_block is not None:
        chosen = [event for event in chosen if _block_of(event, events) == only_block]
    for event in chosen:
        args = event["args"]
        a, b, offs = args["Input Dims"][:3]
        scales = ([a[0]], [b[0], b[-1]]) if len(b) == 3 else ([offs[0] * a[0]], [offs[0] * b[-1]])
        event["name"] = "aten::_scaled_grouped_mm"
        args["Input Dims"] = [a, b, *scales, offs, [], [], [], []]
        args["Input type"] = list(_FLOAT8_TYPES)
    # 2 blocks x (3 grouped GEMMs forward and 6 backward) in each of the two steps
    assert len(chosen) == (36 if only_block is None else 18)
    target.write_bytes(gzip.compress(json.dumps(data).encode()))
    return target


def _block_of(op: dict, events: list[dict]) -> int:
    """Which of the two MoE blocks ran a grouped GEMM op: by its place among its step's forward (block 0
    first) or backward (block 1 first) grouped GEMMs."""
    step = next(
        e
        for e in events
        if e.get("name", "").startswith("ProfilerStep#") and e["ts"] <= op["ts"] < e["ts"] + e["dur"]
    )
    backward = [
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("name") == "autograd::engine::evaluate_function: GroupedMmBackward0"
    ]
    in_step = sorted(
        (
            e
            for e in events
            if e.get("name") == "aten::_grouped_mm" and step["ts"] <= e["ts"] < step["ts"] + step["dur"]
        ),
        key=lambda e: e["ts"],
    )
    is_backward = lambda e: any(start <= e["ts"] < end for start, end in backward)  # noqa: E731
    forward = [e for e in in_step if not is_backward(e)]
    if not is_backward(op):
        return 0 if forward.index(op) < 3 else 1
    later = [e for e in in_step if is_backward(e)]
    return 1 if later.index(op) < 6 else 0


def test_grouped_gemms_are_one_gemm_each_with_their_shapes_and_groups():
    """On the CPU `_grouped_mm` runs one `aten::mm` per expert inside it: the trace must count one grouped
    GEMM of all the routed rows, not its per-expert `mm` calls as bf16 GEMMs."""
    result = analyse(read_trace(MOE_TRACE))
    for step in result.steps:
        assert step.counts[Kind.GROUPED_GEMM] == 2 * 9  # w1, w2, w3: forward, input and weight gradient
        assert step.counts[Kind.GEMM] == 3 * 17  # per block attention 4, router, shared 3; the output
        grouped = [gemm for gemm in step.gemms if gemm.kind is Kind.GROUPED_GEMM]
        forward = sorted(gemm.shape for gemm in grouped if gemm.forward)
        # 128 tokens x top 3 = 384 rows through 4 experts of dim 256 -> hidden 512 (w1, w3) and back (w2)
        assert forward == sorted(
            [GemmShape(384, 256, 512, groups=4)] * 4 + [GemmShape(384, 512, 256, groups=4)] * 2
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
    assert EXPERT_WEIGHTS <= set(layers) and len(layers) == 2 * 11 + 1
    shapes = {"w1": [384, 256, 512], "w2": [384, 512, 256], "w3": [384, 256, 512]}
    assert {fqn: (layers[fqn]["shape"], layers[fqn]["groups"]) for fqn in EXPERT_WEIGHTS} == {
        fqn: (shapes[fqn[-2:]], 4) for fqn in EXPERT_WEIGHTS
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
    assert "in 4 groups" in result.stdout and "FAIL: 6 layer(s)" in result.stdout
    assert "layers.1.moe.experts.w2: its forward GEMMs ran in float8" in result.stdout


def test_each_blocks_experts_are_told_apart(cli, tmp_path):
    """Only block 0's experts in float8 (derived: block 0's grouped GEMMs are each step's first three forward
    and last six backward ones): PASS with a config converting block 0's, FAIL naming both blocks' weights
    with one converting block 1's."""
    float8 = _as_float8_grouped(MOE_TRACE, tmp_path / "f8.json.gz", only_block=0)
    model = _model_of("moe-bf16.json.gz")
    block0 = _toml(tmp_path / "block0.toml", linear=None, experts=True, expert_fqns=["layers.0.moe.experts"])
    result = cli("trace", float8, "--model", model, "--config", block0, "--json")
    assert result.exit_code == 0, result.output
    ran = {layer["fqn"]: layer["ran"] for layer in json.loads(result.stdout)["layers"]}
    assert {fqn for fqn, what in ran.items() if what == "float8"} == BLOCK_0
    block1 = _toml(tmp_path / "block1.toml", linear=None, experts=True, expert_fqns=["layers.1.moe.experts"])
    result = cli("trace", float8, "--model", model, "--config", block1, "--json")
    assert result.exit_code == 1
    assert _differing(result) == EXPERT_WEIGHTS


def test_expert_rows_and_local_experts_are_read_off_the_trace(cli, tmp_path):
    """A framework that pads each expert's rows (torchtitan, to an alignment) multiplies more rows than
    tokens x top_k, and a rank under expert parallelism holds E / ep experts: the expert weights are matched
    at the rows and groups the trace's grouped GEMMs have (derived: 384 rows made 512, 4 experts made 2)."""
    data = json.loads(gzip.decompress(MOE_TRACE.read_bytes()))
    for event in data["traceEvents"]:
        if event.get("name") == "aten::_grouped_mm":
            dims = event["args"]["Input Dims"]
            dims[:2] = [[512 if size == 384 else size for size in operand] for operand in dims[:2]]
            dims[1][0] = 2 if len(dims[1]) == 3 else dims[1][0]
            dims[2] = [2]
    local = tmp_path / "local.json.gz"
    local.write_bytes(gzip.compress(json.dumps(data).encode()))
    keep = _toml(tmp_path / "keep.toml", linear=None, experts=False)
    result = cli("trace", local, "--model", _model_of("moe-bf16.json.gz"), "--config", keep, "--json")
    assert result.exit_code == 0, result.output
    layers = {layer["fqn"]: layer for layer in json.loads(result.stdout)["layers"]}
    shapes = {"w1": [512, 256, 512], "w2": [512, 512, 256], "w3": [512, 256, 512]}
    assert {fqn: (layers[fqn]["shape"], layers[fqn]["groups"]) for fqn in EXPERT_WEIGHTS} == {
        fqn: (shapes[fqn[-2:]], 2) for fqn in EXPERT_WEIGHTS
    }


def test_experts_run_through_bmm_are_found_by_their_batch():
    """Experts held as 3-D weights but run through `bmm` (rows per expert, in a batch of E) are found as
    such; GEMMs whose groups or batch do not divide E are not theirs (unit: Gemm records built here)."""
    from fp8advisor.traces.analysis import Gemm
    from fp8advisor.traces.layer_match import expert_gemm_in_trace

    def gemm(shape, kind=Kind.GEMM):
        return (1, Gemm(kind, shape, 1e-3, "aten::bmm", None))

    bmm = [gemm(GemmShape(96, 256, 512, batch=4)), gemm(GemmShape(96, 512, 256, batch=4))]
    assert expert_gemm_in_trace(bmm, 256, 512, 4) == (96, 4, 1)
    assert expert_gemm_in_trace(bmm, 256, 512, 6) is None  # a batch of 4 is not 6 experts' (nor local ones)
    grouped = [gemm(GemmShape(384, 256, 512, groups=3), Kind.GROUPED_GEMM)]
    assert expert_gemm_in_trace(grouped, 256, 512, 6) == (384, 1, 3)  # 3 local experts of 6
    assert expert_gemm_in_trace(grouped, 256, 512, 4) is None


def test_experts_held_as_linear_layers_are_judged_as_one_unit(cli, tmp_path):
    """Experts held as E nn.Linear (Mixtral's form) multiply the rows routed to each: each of their GEMMs is
    judged over the trace's GEMMs of its (K, N) at fewer rows than the tokens, not at a balanced M."""
    trace = CPU / "moe-linear-list-bf16.json.gz"
    model = _model_of(trace.name)
    keep = _toml(tmp_path / "keep.toml", linear=None, experts=False)
    result = cli("trace", trace, "--model", model, "--config", keep, "--json")
    assert result.exit_code == 0, result.output
    layers = {layer["fqn"]: layer for layer in json.loads(result.stdout)["layers"]}
    units = {f"layers.{b}.block_sparse_moe.experts.*.{w}" for b in (0, 1) for w in ("w1", "w2", "w3")}
    assert units <= set(layers) and not any(".experts.0." in fqn for fqn in layers)
    assert all(layers[fqn]["ran"] == "bf16" and layers[fqn]["matched_by"] == "experts" for fqn in units)
    # the Linear converter on everything but attention, router and head: the experts convert
    experts = _toml(tmp_path / "experts.toml", linear=["attention", "gate", "output"], experts=False)
    result = cli("trace", trace, "--model", model, "--config", experts, "--json")
    assert result.exit_code == 1
    assert _differing(result) == units


def test_an_expert_group_whose_backward_stayed_bf16_is_caught(cli, tmp_path):
    """Forward float8, backward bf16 (a conversion that missed the backward): FAIL, said of the group's
    backward GEMMs."""
    float8 = _as_float8_grouped(MOE_TRACE, tmp_path / "f8.json.gz")
    data = json.loads(gzip.decompress(float8.read_bytes()))
    backward = [
        (event["ts"], event["ts"] + event["dur"])
        for event in data["traceEvents"]
        if event.get("name") == "autograd::engine::evaluate_function: GroupedMmBackward0"
    ]
    for event in data["traceEvents"]:
        if event.get("name") == "aten::_scaled_grouped_mm" and any(a <= event["ts"] < b for a, b in backward):
            dims = event["args"]["Input Dims"]
            event["name"], event["args"]["Input Dims"] = "aten::_grouped_mm", [*dims[:2], dims[4]]
            event["args"]["Input type"] = ["c10::BFloat16", "c10::BFloat16", "int"]
    mixed = tmp_path / "mixed.json.gz"
    mixed.write_bytes(gzip.compress(json.dumps(data).encode()))
    convert = _toml(tmp_path / "convert.toml", linear=None, experts=True)
    result = cli("trace", mixed, "--model", _model_of("moe-bf16.json.gz"), "--config", convert, "--json")
    assert result.exit_code == 1, result.output
    assert _differing(result) == EXPERT_WEIGHTS
    details = {layer["detail"] for layer in json.loads(result.stdout)["layers"] if not layer["ok"]}
    # 12 backward GEMMs a step (6 a block), counted over the trace's 2 steps
    assert details == {
        "its forward GEMMs ran in float8; 0 of the group's 24 backward GEMMs ran in float8 (config: 24)"
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


def test_bf16_weight_gradients_with_activation_checkpointing(cli, tmp_path):
    """Checkpointing recomputes each block's forward inside the backward: one bf16 weight gradient per
    forward GEMM still, the recomputed forwards float8. Recorded here: the one-block Llama in
    rowwise_with_gw_hp with its block under torch.utils.checkpoint."""
    import functools

    import torch
    from torch.profiler import ProfilerActivity, profile
    from torch.utils.checkpoint import checkpoint
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    from fp8advisor.inspect.target import load_model

    torch.manual_seed(0)
    model = load_model(LLAMA, "cpu").model.to(torch.bfloat16)
    kept = ("wk", "wv", "output")
    convert_to_float8_training(
        model,
        config=Float8LinearConfig.from_recipe_name("rowwise_with_gw_hp"),
        module_filter_fn=lambda module, fqn: fqn.rsplit(".", 1)[-1] not in kept,
    )
    block = model.layers["0"]
    block.forward = functools.partial(checkpoint, block.forward, use_reentrant=False)
    tokens = torch.randint(0, 2048, (1, 128))
    path = tmp_path / "checkpointed.json"
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as session:
        model(tokens).float().sum().backward()
    session.export_chrome_trace(str(path))
    config = _toml(tmp_path / "gw_hp.toml", linear=list(kept), experts=False, recipe="rowwise_with_gw_hp")
    result = cli("trace", path, "--model", LLAMA, "--config", config, "--json")
    assert result.exit_code == 0, result.output
    ran = {layer["fqn"]: layer["ran"] for layer in json.loads(result.stdout)["layers"]}
    assert sum(what == "float8" for what in ran.values()) == 5


def test_bf16_weight_gradients_without_forward_and_backward(cli, tmp_path):
    """A trace without autograd engine calls is judged by each group's float8 share: two of three GEMMs
    float8 with rowwise_with_gw_hp (PASS), not three (rowwise: FAIL); a note says how it was judged."""
    data = json.loads(gzip.decompress(GW_HP_TRACE.read_bytes()))
    data["traceEvents"] = [
        event for event in data["traceEvents"] if not event.get("name", "").startswith("autograd::engine")
    ]
    flat = tmp_path / "no-engine.json.gz"
    flat.write_bytes(gzip.compress(json.dumps(data).encode()))
    kept = ["wk", "wv", "output"]
    good = _toml(tmp_path / "good.toml", linear=kept, experts=False, recipe="rowwise_with_gw_hp")
    result = cli("trace", flat, "--model", LLAMA, "--config", good)
    assert result.exit_code == 0, result.output
    assert "judged together, by the group's float8 share" in result.stderr
    plain = _toml(tmp_path / "plain.toml", linear=kept, experts=False, recipe="rowwise")
    assert cli("trace", flat, "--model", LLAMA, "--config", plain).exit_code == 1


def test_the_recipe_is_read_off_the_float8_gemms():
    for recipe in ("tensorwise", "rowwise", "rowwise_with_gw_hp"):
        assert detected_recipe([analyse(read_trace(CPU / f"llama-float8-{recipe}.json.gz"))]) == recipe
    # torchao's float8 experts keep their weight gradients float8: they must not make it read as rowwise
    from dataclasses import replace

    from fp8advisor.traces.analysis import Gemm

    result = analyse(read_trace(GW_HP_TRACE))
    shape = GemmShape(384, 256, 512, groups=4)
    experts = tuple(
        Gemm(
            Kind.FLOAT8_GROUPED_GEMM,
            shape,
            1e-3,
            "aten::_scaled_grouped_mm",
            None,
            0.0,
            ("Float8_e4m3fn",),
            f,
        )
        for f in (True, False, False)
    )
    steps = tuple(replace(step, gemms=step.gemms + experts) for step in result.steps)
    assert detected_recipe([replace(result, steps=steps)]) == "rowwise_with_gw_hp"


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
