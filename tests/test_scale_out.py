"""Scale-out (issue 28): the TP plan's local shapes, the topology's links, and each parallel term of the step
model against hand arithmetic on a made-up GPU and plan; `suggest`'s set-up options."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from fp8advisor.advice.linears import layer_slices, tensor_parallel_slices
from fp8advisor.advice.step import Calibration, Checkpointing, StepConfig, StepGpu, predict_step
from fp8advisor.advice.step_parallel import tp_communication
from fp8advisor.advice.topology import (
    NETWORK_BUS_EFFICIENCY,
    NVLINK_BUS_EFFICIENCY,
    GpuSystem,
    Group,
    Topology,
    collective_time_s,
)
from fp8advisor.advice.tp_plan import COLWISE, ROWWISE, tp_style
from fp8advisor.errors import AdvisorError
from fp8advisor.gpus import GpuSpecs
from fp8advisor.inspect.census import AttentionCall, OpCensus
from fp8advisor.recipes import Recipe

GIGA = 1e9
#: NCCL bus bandwidth 10 GB/s inside a node of 4 GPUs, 1 GB/s across nodes
SYSTEM = GpuSystem("test", 4, 10 * GIGA / NVLINK_BUS_EFFICIENCY, GIGA / NETWORK_BUS_EFFICIENCY, "made up")
SPECS = GpuSpecs("TEST", 1e12, 2e12, 1e12, gemm_efficiency=1.0, bandwidth_efficiency=1.0, kernel_floor_s=0.0)
GPU = StepGpu(SPECS, SYSTEM)
ONE = Calibration(1.0, "none")
EMPTY = OpCensus(tokens=1, attention=(), matmuls=(), regions=(), output_shape=None, complete=True)


def _layer(fqn, M, K, N, bf16_s=1e-3, float8_s=5e-4):
    return SimpleNamespace(
        fqn=fqn,
        M=M,
        K=K,
        N=N,
        calls=1,
        bf16_time_s=bf16_s,
        float8_time_s=float8_s,
        counts_in_linear_time=True,
        provenance="modelled",
        bf16_provenance="modelled",
    )


def _model(census=EMPTY, parameters=0, tokens=1024, batch=1):
    return SimpleNamespace(census=census, parameter_count=parameters, tokens=tokens, batch=batch, layers=())


# --- the plan -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fqn, style",
    [
        ("layers.3.attention.wq", COLWISE),  # torchtitan 0.2
        ("layers.3.attention.qkv_linear.wqkv", COLWISE),  # torchtitan 0.3
        ("layers.3.feed_forward.w2", ROWWISE),
        ("lm_head", COLWISE),
        ("model.layers.0.self_attn.o_proj", ROWWISE),  # Hugging Face
        ("model.layers.0.mlp.gate_proj", COLWISE),
        ("decoder.layers.0.self_attention.linear_qkv", COLWISE),  # Megatron-Core
        ("decoder.layers.0.self_attention.linear_proj", ROWWISE),
        ("decoder.layers.0.mlp.linear_fc1", COLWISE),
        ("decoder.layers.0.mlp.linear_fc2", ROWWISE),
        ("output_layer", COLWISE),
        ("blocks.0.mix", None),  # no plan names it
    ],
)
def test_the_plan_splits_each_layer_as_its_framework_does(fqn, style):
    assert tp_style(fqn) == style


def test_local_shapes_follow_the_plan_and_unplanned_layers_keep_both_candidates():
    wq = SimpleNamespace(fqn="layers.0.attention.wq", K=4096, N=4096)
    wo = SimpleNamespace(fqn="layers.0.attention.wo", K=4096, N=4096)
    fc2 = SimpleNamespace(fqn="decoder.layers.0.mlp.linear_fc2", K=14336, N=4096)
    other = SimpleNamespace(fqn="blocks.0.mix", K=4096, N=1024)
    assert layer_slices(wq, 8) == [(4096, 512)]
    assert layer_slices(wo, 8) == [(512, 4096)]
    assert layer_slices(fc2, 8) == [(1792, 4096)]
    assert layer_slices(other, 8) == [(512, 1024), (4096, 128)]
    assert tensor_parallel_slices(4096, 8, 16, COLWISE) == []  # the plan's dimension is narrower than tp


def test_a_megatron_gpt_model_is_split_by_its_column_and_row_parallel_layers():
    """A real Megatron-Core GPTModel (meta device): every ColumnParallelLinear / RowParallelLinear module's
    name gets the split Megatron builds it with."""
    pytest.importorskip("megatron.core", reason="the test extra (megatron-core) is not installed")
    from fp8advisor.verification.native_megatron import gpt_model_parallel_linears

    styles = gpt_model_parallel_linears(2)
    assert {name.split(".")[-1] for name in styles} >= {
        "linear_qkv",
        "linear_proj",
        "linear_fc1",
        "linear_fc2",
    }
    assert "output_layer" in styles
    assert {name: tp_style(name) for name in styles} == styles


# --- the links ----------------------------------------------------------------------------------------------


def test_a_group_spans_nodes_when_its_ranks_do():
    topology = Topology.of(SYSTEM)
    assert not topology.spans_nodes(Group("TP", 4))  # ranks 0-3: one node of 4
    assert topology.spans_nodes(Group("FSDP", 2, stride=4))  # ranks 0 and 4
    assert topology.spans_nodes(Group("FSDP", 8))
    assert topology.bus_bytes_per_s(Group("TP", 4)) == pytest.approx(10 * GIGA)
    # across nodes a ring runs a channel over each adapter its members in a node have: 4 here, 1 GB/s each
    assert topology.bus_bytes_per_s(Group("FSDP", 8)) == pytest.approx(4 * GIGA)
    assert topology.bus_bytes_per_s(Group("FSDP", 2, stride=4)) == pytest.approx(GIGA)  # one per node
    assert topology.bus_bytes_per_s(Group("FSDP", 8, stride=2)) == pytest.approx(2 * GIGA)
    fast = Topology.of(SYSTEM, inter_node_gbps=800)  # 100 GB/s adapters: capped at NVLink's 10 GB/s
    assert fast.bus_bytes_per_s(Group("FSDP", 8)) == pytest.approx(10 * GIGA)
    wider = Topology.of(SYSTEM, gpus_per_node=8, inter_node_gbps=16)
    assert not wider.spans_nodes(Group("FSDP", 8))
    assert wider.network_bytes_per_s == pytest.approx(2 * GIGA)  # 16 Gb/s = 2 GB/s


def test_ring_collectives_move_n_minus_1_over_n_of_the_buffer():
    topology = Topology.of(SYSTEM)
    assert collective_time_s("all_gather", 8e9, Group("TP", 4), topology) == pytest.approx(0.75 * 8e9 / 10e9)
    assert collective_time_s("all_reduce", 8e9, Group("TP", 4), topology) == pytest.approx(1.5 * 8e9 / 10e9)
    assert collective_time_s("all_gather", 8e9, Group("one", 1), topology) == 0


@pytest.mark.parametrize("value", [0, -3])
def test_topology_refuses_nonsense(value):
    with pytest.raises(AdvisorError):
        Topology.of(SYSTEM, gpus_per_node=value)
    with pytest.raises(AdvisorError):
        Topology.of(SYSTEM, inter_node_gbps=value)


# --- the terms ----------------------------------------------------------------------------------------------

M, H, F = 1000, 400, 1600
BLOCK = [
    _layer("layers.0.attention.wq", M, H, H),
    _layer("layers.0.attention.wk", M, H, H),
    _layer("layers.0.attention.wo", M, H, H),
    _layer("layers.0.feed_forward.w1", M, H, F),
    _layer("layers.0.feed_forward.w2", M, F, H),
    _layer("layers.0.feed_forward.w3", M, H, F),  # registered after w2, as torchtitan's FeedForward does
]


def _tp(config, converted=(), linear_s=lambda layer: 0.0):
    return tp_communication(BLOCK, frozenset(converted), linear_s, Topology.of(SYSTEM), config)


def test_tp_collectives_by_hand():
    """tp 4 (one node, 10 GB/s): per row-parallel layer a forward all-gather (M x H) and reduce-scatter
    (M x H), the backward's two again; two row-parallel layers: 8 collectives of M x H x 2 bytes."""
    config = StepConfig(world_size=4, tp=4)
    one = 0.75 * M * H * 2 / (10 * GIGA)
    tp = _tp(config)
    assert tp.total_s == pytest.approx(8 * one)
    assert tp.exposed_s == pytest.approx(8 * one)  # vanilla TP: all of it shows
    full = _tp(replace(config, ac=Checkpointing.FULL))
    assert full.total_s == pytest.approx(12 * one)  # the forward's four again


def test_float8_tp_moves_the_converted_partners_input_and_output_gradient_in_one_byte():
    config = StepConfig(world_size=4, tp=4).for_recipe(Recipe.TENSORWISE)
    assert config.float8_tensor_parallel
    one = 0.75 * M * H * 2 / (10 * GIGA)
    everything = {layer.fqn for layer in BLOCK}
    # each pair: forward all-gather and backward output-gradient all-gather at 1 byte, the other two at 2
    assert _tp(config, everything).total_s == pytest.approx(2 * (0.5 + 1 + 1 + 0.5) * one)
    assert _tp(config, ()).total_s == pytest.approx(8 * one)  # nothing converted: nothing in float8
    rowwise = StepConfig(world_size=4, tp=4).for_recipe(Recipe.ROWWISE)
    assert not rowwise.float8_tensor_parallel and _tp(rowwise, everything).total_s == pytest.approx(8 * one)


def test_async_tp_shows_only_what_each_collective_exceeds_its_gemm_by():
    config = StepConfig(world_size=4, tp=4, async_tp=True)
    one = 0.75 * M * H * 2 / (10 * GIGA)
    assert _tp(config, linear_s=lambda layer: 3 * one).exposed_s == pytest.approx(0)  # each GEMM = one
    # GEMMs half as long as a collective: each pair's partners (wq + wk; w1 + w3, w3 found under the same
    # parent though registered after w2) hide their two collectives; wo and w2 half of each of theirs
    half = _tp(config, linear_s=lambda layer: 1.5 * one)
    assert half.exposed_s == pytest.approx(4 * 0.5 * one)
    w1_alone = [layer for layer in BLOCK if not layer.fqn.endswith("w3")]
    alone = tp_communication(w1_alone, frozenset(), lambda layer: 1.5 * one, Topology.of(SYSTEM), config)
    assert alone.exposed_s == pytest.approx(6 * 0.5 * one)
    assert half.total_s == pytest.approx(8 * one)


def _step(config, layers=BLOCK, converted=(), census=EMPTY, parameters=0, batch=1):
    model = _model(census, parameters, batch=batch)
    return predict_step("s", "s", model, layers, converted, GPU, config, ONE)


def test_exposed_tp_traffic_is_a_term_of_the_step():
    config = StepConfig(world_size=4, tp=4)
    step = _step(config)
    one = 0.75 * M * H * 2 / (10 * GIGA)
    assert step.term("tp_communication").seconds == pytest.approx(8 * one)
    compute = sum(layer.bf16_time_s for layer in BLOCK)
    assert step.step_s == pytest.approx(compute + 8 * one)  # tp_float8_casts: 0, nothing in float8
    assert step.communication_s == pytest.approx(8 * one)


def test_fsdp_traffic_shows_exactly_when_it_exceeds_the_rest_of_the_step():
    """FSDP over 8 GPUs of nodes of 4 (the ring leaves the node over 4 adapters: 4 GB/s): 7/8 x (2 x 2 + 4)
    bytes x P."""
    traffic = lambda parameters: 7 / 8 * 8 * parameters / (4 * GIGA)  # noqa: E731
    hidden = _step(StepConfig(world_size=8), parameters=1000)
    assert hidden.communication_s == pytest.approx(traffic(1000))
    assert hidden.term("communication").seconds == 0
    exposed = _step(StepConfig(world_size=8), parameters=10**7)
    compute = sum(term.seconds for term in exposed.terms if term.name != "communication")
    assert compute > 0 and exposed.term("communication").seconds == pytest.approx(traffic(10**7) - compute)
    assert exposed.step_s == pytest.approx(traffic(10**7))
    # the same eight GPUs in one NVLink domain: 10 GB/s
    inside = _step(StepConfig(world_size=8, gpus_per_node=8), parameters=10**7)
    assert inside.communication_s == pytest.approx(traffic(10**7) * 4 / 10)


def test_hsdp_adds_the_all_reduce_of_the_gradient_shard_over_the_replicas():
    """2 replicas x FSDP 4 on nodes of 4: each FSDP group fills a node (10 GB/s), a replica group's ranks sit
    4 apart, one per node (1 GB/s): all-reduce of the shard P/4 x 4 bytes, 2 x 1/2 of it, across nodes."""
    parameters = 10**6
    plain = _step(StepConfig(world_size=4), parameters=parameters).communication_s
    hsdp = _step(StepConfig(world_size=8, dp_replicate=2), parameters=parameters).communication_s
    assert hsdp - plain == pytest.approx(2 * 0.5 * (4 * parameters / 4) / GIGA)


def test_context_parallel_prices_attention_over_every_chunk_and_its_kv_exchange():
    call = AttentionCall(batch=1, heads=4, q_len=1000, kv_len=1000, head_dim=64, v_head_dim=64, causal=True)
    census = replace(EMPTY, attention=(call,))
    alone = _step(StepConfig(world_size=1), layers=[], census=census)
    cp = _step(StepConfig(world_size=2, cp=2), layers=[], census=census)
    assert cp.term("attention").seconds == pytest.approx(2 * alone.term("attention").seconds)
    kv = 1 * 1000 * 4 * 128 * 2 * 2  # K and V of both chunks, bf16
    exchange = 4 * 0.5 * kv / (10 * GIGA)  # 4 collectives (forward, backward, float32 gradients)
    assert cp.communication_s == pytest.approx(exchange)
    assert cp.term("cp_communication").seconds == pytest.approx(
        max(0, exchange - cp.term("attention").seconds)
    )
    staged = _step(StepConfig(world_size=4, cp=2, pp=2), layers=[], census=census, batch=4)
    assert staged.communication_s == pytest.approx(exchange / 2)  # a stage's half of the attention calls


def test_pipeline_stages_divide_the_compute_and_add_the_1f1b_bubble():
    alone = _step(StepConfig(world_size=1))
    staged = _step(StepConfig(world_size=4, pp=4), batch=8)  # 8 micro-batches
    compute = alone.step_s / 4
    assert staged.term("pipeline_bubble").seconds == pytest.approx(compute * 3 / 8)
    assert staged.step_s == pytest.approx(compute * (1 + 3 / 8))
    assert staged.tokens == alone.tokens // 4  # tokens per GPU: torchtitan divides by tp x cp x pp


def test_tp_and_pp_divide_the_fsdp_shard_and_its_float8_weights():
    """tp 2 x pp 2 x FSDP 2 on nodes of 4, P = 10^7 parameters, every Linear converted with float8
    all-gather: the stage's TP shard P / 4 all-gathered once (pp keeps them), the converted weights'
    share of it at 1 byte; the optimizer over P / (2 x 2) / 2 stages; the TP traffic the stage's half."""
    parameters = 10**7
    everything = [layer.fqn for layer in BLOCK]
    config = StepConfig(world_size=8, tp=2, pp=2, float8_all_gather=True).for_recipe(Recipe.TENSORWISE)
    step = _step(config, converted=everything, parameters=parameters, batch=4)
    weights = sum(layer.K * layer.N for layer in BLOCK) / 4  # this GPU's TP shard of this stage's
    gathered = 2 * parameters / 4 - weights  # 2 bytes, 1 for the converted weights
    assert weights < parameters / 4 / 2  # the Linear weights are a part of the made-up model
    fsdp = Group("FSDP", 2, stride=2)  # ranks 0 and 2: one node
    topology = Topology.of(SYSTEM)
    expected = collective_time_s("all_gather", gathered, fsdp, topology)  # once under pp
    expected += collective_time_s("reduce_scatter", 4 * parameters / 4, fsdp, topology)
    tp = step.communication_s - expected
    assert tp == pytest.approx(_tp(config, everything).total_s)  # the TP traffic is the stage's
    assert _tp(config, everything).total_s == pytest.approx(
        _tp(replace(config, pp=1), everything).total_s / 2
    )
    optimizer = step.term("optimizer").seconds
    assert optimizer == pytest.approx(7 * 4 * parameters / (2 * 2) / 2 / 1e12)


def test_tokens_per_gpu_divide_by_the_non_data_parallel_degrees():
    assert _step(StepConfig(world_size=8, tp=4)).tokens == 1024 // 4
    assert _step(StepConfig(world_size=8, cp=2)).tokens == 1024  # the traced sequence is already the chunk


def test_rowwise_casts_under_bf16_tp_cost_the_unfused_casts_and_tensorwise_saves_the_shared_one():
    rowwise = _step(
        StepConfig(world_size=4, tp=4).for_recipe(Recipe.ROWWISE), converted=["layers.0.attention.wq"]
    )
    # wq's input arrives from an all-gather: rowwise's first input cast reads bf16 instead of fusing
    assert rowwise.term("tp_float8_casts").seconds == pytest.approx(2 * M * H / 1e12)
    both = ["layers.0.attention.wq", "layers.0.attention.wk"]
    tensorwise = _step(StepConfig(world_size=4, tp=4).for_recipe(Recipe.TENSORWISE), converted=both)
    # each partner's fused input cast (4 bytes an element) taken off, one on M/4 rows added
    assert tensorwise.term("tp_float8_casts").seconds == pytest.approx(-(2 - 0.25) * 4 * M * H / 1e12)


def test_step_config_refuses_degrees_the_world_size_cannot_hold():
    with pytest.raises(AdvisorError, match="not a multiple"):
        StepConfig(world_size=12, tp=8).check(None)
    with pytest.raises(AdvisorError, match="--async-tp needs tensor parallelism"):
        StepConfig(world_size=8, async_tp=True).check(None)
    assert StepConfig(world_size=64, tp=8, dp_replicate=2).dp_shard == 4


# --- suggest ------------------------------------------------------------------------------------------------


def _suggest(*args):
    from typer.testing import CliRunner

    from fp8advisor.cli import app

    return CliRunner().invoke(app, ["suggest", "torchtitan:llama3/debugmodel", "--gpu", "H100", *args])


@pytest.mark.parametrize(
    "args, message",
    [
        (["--world-size", "8", "--nodes", "2"], "given twice, differently"),
        (["--world-size", "12", "--tp", "8"], "not a multiple"),
        (["--cp", "3", "--seq", "1000"], "--seq 1000 is not a multiple of 2 x --cp 3"),
        (["--cp", "2", "--seq", "6"], "--seq 6 is not a multiple of 2 x --cp 2"),
        (["--pp", "4", "--world-size", "4"], "--pp 4 needs at least 4 micro-batches"),
        (["--pp", "8", "--world-size", "8", "--batch", "8"], "--pp 8 stages but the model has 6 blocks"),
        (["--async-tp"], "--async-tp needs tensor parallelism"),
        (["--gpus-per-node", "0", "--nodes", "2"], "--gpus-per-node must be at least 1"),
    ],
)
def test_suggest_refuses_a_set_up_no_trainer_runs(args, message):
    result = _suggest("--seq", "256", *args) if "--seq" not in args else _suggest(*args)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_suggest_predicts_the_step_under_tp_on_several_nodes():
    result = _suggest(
        "--seq", "256", "--batch", "4", "--recipe", "rowwise", "--tp", "2", "--nodes", "2", "--json"
    )
    assert result.exit_code == 0, result.output
    step = json.loads(result.stdout)["step"]
    assert (
        step["config"]["world_size"] == 16 and step["config"]["dp_shard"] == 8 and step["config"]["tp"] == 2
    )
    bf16 = step["strategies"]["bf16"]
    names = {term["name"] for term in bf16["terms"]}
    assert {"tp_communication", "communication"} <= names
    tp_term = next(term for term in bf16["terms"] if term["name"] == "tp_communication")
    assert tp_term["seconds"] > 0 and "TP over 2 GPU(s), NVLink" in tp_term["basis"]
    fsdp = next(term for term in bf16["terms"] if term["name"] == "communication")
    assert "FSDP over 8 GPU(s), across nodes" in fsdp["basis"]


def test_context_parallel_advises_at_each_gpus_chunk_and_the_written_file_keeps_it(tmp_path):
    """--cp 4 at seq 8192: every Linear is judged at M = 2048 (one GPU's chunk); the file's regenerate command
    names --cp 4, so --check and verify advise at the same M."""
    from typer.testing import CliRunner

    from fp8advisor.cli import app

    runner = CliRunner()
    target = "data/models/llama3.py:llama3_8b(n_layers=2)"
    common = [target, "--gpu", "H100", "--seq", "8192", "--recipe", "rowwise"]
    document = json.loads(runner.invoke(app, ["suggest", *common, "--cp", "4", "--json"]).stdout)
    assert {layer["M"] for layer in document["layers"] if layer["fqn"] != "output"} == {2048}
    path = tmp_path / "float8.toml"
    written = runner.invoke(
        app, ["suggest", *common, "--cp", "4", "--format", "torchtitan-toml", "-o", str(path)]
    )
    assert written.exit_code == 0, written.output
    assert "--cp 4" in path.read_text() and "context parallel: 4" in path.read_text()
    check = runner.invoke(
        app, ["suggest", *common, "--cp", "4", "--format", "torchtitan-toml", "--check", str(path)]
    )
    assert check.exit_code == 0, check.output
    verified = runner.invoke(app, ["verify", target, "--config", str(path), "--json"])
    assert verified.exit_code == 0, verified.output
