"""Routed experts in `fp8advisor.inspect.experts`: both forms (3-D grouped weights; a ModuleList of expert
Linears), E, top_k and where it was read, M per expert under balanced routing and M total, routers and shared
experts kept apart, Hugging Face MoE configs, the `layers` section and --json."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fp8advisor.cli import app
from fp8advisor.inspect.layers import inspect_model
from fp8advisor.inspect.records import ExpertForm, LayerStatus, ModelLayers
from fp8advisor.paths import MODELS_DIR

sys.path.insert(0, str(Path(__file__).parent))
from _layers_helpers import write_model  # noqa: E402

MOE = MODELS_DIR / "moe.py"
TRACED, ASSUMED = LayerStatus.TRACED, LayerStatus.ASSUMED
NOT_CONVERTIBLE = LayerStatus.NOT_CONVERTIBLE


def by_fqn(inspected: ModelLayers) -> dict:
    return {layer.fqn: layer for layer in inspected.layers}


def groups_by_fqn(inspected: ModelLayers) -> dict:
    return {group.fqn: group for group in inspected.expert_groups}


def assert_router_and_shared_stay_out(inspected: ModelLayers) -> None:
    layers = by_fqn(inspected)
    for group in inspected.expert_groups:
        members = set(group.member_fqns)
        assert group.router not in members and not members & set(group.shared)
        assert all(layers[fqn].expert_group == group.fqn for fqn in members)
        for fqn in (group.router, *group.shared):
            if fqn is not None:
                assert layers[fqn].expert_group is None


# --------------------------------------------------------------------------------------- grouped form


def test_grouped_experts_of_the_moe_example():
    inspected = inspect_model(str(MOE), batch=2, seq=1024)
    groups = groups_by_fqn(inspected)
    assert list(groups) == ["layers.0.moe.experts", "layers.1.moe.experts"]
    group = groups["layers.1.moe.experts"]
    assert (group.form, group.cls, group.n_experts, group.top_k) == (
        ExpertForm.GROUPED,
        "GroupedExperts",
        8,
        2,
    )
    assert group.top_k_source == "layers.1.moe.top_k"
    # 2 x 1024 tokens, each to 2 of 8 experts: 4096 rows through each grouped GEMM, 512 per expert
    assert (group.tokens, group.M_total, group.M_per_expert) == (2048, 4096, 512)
    assert [(g.name, g.K, g.N, g.fqns) for g in group.gemms] == [
        ("w1", 1024, 1536, ("layers.1.moe.experts.w1",)),
        ("w2", 1536, 1024, ("layers.1.moe.experts.w2",)),
        ("w3", 1024, 1536, ("layers.1.moe.experts.w3",)),
    ]
    assert group.router == "layers.1.moe.router.gate"
    assert group.shared == tuple(f"layers.1.moe.shared_experts.w{i}" for i in (1, 2, 3))
    assert_router_and_shared_stay_out(inspected)
    w2 = by_fqn(inspected)["layers.1.moe.experts.w2"]
    assert (w2.is_linear, w2.status) == (False, NOT_CONVERTIBLE)
    assert (
        "routed experts, converted as a group" in w2.reason and "Float8GroupedExpertsConverter" in w2.reason
    )


BMM_EXPERTS = """
class Experts(nn.Module):
    def __init__(self):
        super().__init__()
        self.w_in = nn.Parameter(torch.empty(4, 64, 128))
        self.w_out = nn.Parameter(torch.empty(4, 128, 64))

    def forward(self, x):  # (4 experts, rows each, 64)
        return torch.bmm(F.silu(torch.bmm(x, self.w_in)), self.w_out)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(64, 64)
        self.experts = Experts()

    def forward(self, x):  # (batch, seq, 64): capacity-style, seq/4 rows to each expert
        h = self.proj(x).reshape(4, -1, 64)
        return self.experts(h).reshape(x.shape)
"""


def test_bmm_experts_without_top_k_take_m_from_the_trace(tmp_path):
    path = write_model(tmp_path, BMM_EXPERTS)
    inspected = inspect_model(f"{path}:Net", batch=2, seq=96)
    (group,) = inspected.expert_groups
    assert (group.fqn, group.form, group.n_experts) == ("experts", ExpertForm.GROUPED, 4)
    assert group.top_k is None and group.top_k_source.startswith("unknown")
    # bmm (E, m, K): 4 experts x 48 rows = 192 = 2 x 96 rows in all, 48 each
    assert (group.M_total, group.M_per_expert) == (192, 48)
    assert [(g.name, g.K, g.N) for g in group.gemms] == [("w_in", 64, 128), ("w_out", 128, 64)]
    assert group.router is None and any("no router" in note for note in group.notes)
    assert any("top_k unknown" in note and "192 / 4" in note for note in group.notes)


def test_an_expert_gemm_with_n_equal_to_e_is_not_taken_for_the_router(tmp_path):
    # w_in (4 experts, 64 -> 4): N = E and K = the experts' K, as a router's; it is a member, not the router.
    body = BMM_EXPERTS.replace("torch.empty(4, 64, 128)", "torch.empty(4, 64, 4)")
    path = write_model(tmp_path, body.replace("torch.empty(4, 128, 64)", "torch.empty(4, 4, 64)"))
    inspected = inspect_model(f"{path}:Net", batch=1, seq=64)
    (group,) = inspected.expert_groups
    assert [(g.name, g.K, g.N) for g in group.gemms] == [("w_in", 64, 4), ("w_out", 4, 64)]
    assert group.router is None
    assert_router_and_shared_stay_out(inspected)


@pytest.mark.parametrize(
    ("attributes", "top_k", "source"),
    [
        ("self.config = SimpleNamespace(num_experts_per_tok=2)", 2, "config.num_experts_per_tok"),
        ("self.experts.topk = 1; self.config = SimpleNamespace(num_experts_per_tok=2)", 1, "experts.topk"),
        ("self.experts.top_k = 5", None, None),  # more than E = 4: not a top_k
        ("self.experts.top_k = True", None, None),
    ],
)
def test_top_k_is_read_where_the_model_shows_it(tmp_path, attributes, top_k, source):
    body = BMM_EXPERTS.replace("self.experts = Experts()", f"self.experts = Experts(); {attributes}")
    path = write_model(tmp_path, "from types import SimpleNamespace\n" + body)
    (group,) = inspect_model(f"{path}:Net", batch=1, seq=64).expert_groups
    assert group.top_k == top_k
    assert group.top_k_source == source if source else group.top_k_source.startswith("unknown")


def test_grouped_mm_on_fp32_meta_weights_traces_in_bf16(tmp_path):
    # transformers 5 builds its MoE in fp32 and calls torch._grouped_mm, whose meta kernel wants bf16.
    path = write_model(
        tmp_path,
        """
        class Experts(nn.Module):
            def __init__(self):
                super().__init__()
                self.w = nn.Parameter(torch.empty(4, 64, 32))

            def forward(self, flat):
                offs = torch.full((4,), flat.shape[0] // 4, dtype=torch.int32, device=flat.device).cumsum(0)
                out = torch._grouped_mm(flat, self.w, offs=offs.to(torch.int32))
                assert out.dtype == flat.dtype == torch.float32  # the caller's dtype
                return out


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.experts = Experts()
                self.after = nn.Linear(32, 32)

            def forward(self, x):
                return self.after(self.experts(x.reshape(-1, 64)))


        def example_inputs(batch, seq):
            return (torch.zeros(batch, seq, 64),)
        """,
    )
    inspected = inspect_model(f"{path}:Net", batch=1, seq=64)
    assert not any("tracing stopped" in note for note in inspected.notes)
    layers = by_fqn(inspected)
    assert layers["after"].status is TRACED and layers["experts.w"].M == 64
    assert inspected.expert_groups[0].M_total == 64


# --------------------------------------------------------------------------------------- ModuleList form


@pytest.mark.parametrize(
    ("seq", "per_expert", "status"),
    [
        (1024, 256, ASSUMED),  # 1024 x 2 / 8
        (1000, 250, NOT_CONVERTIBLE),  # 250: not a multiple of 16
        (1001, 251, NOT_CONVERTIBLE),  # 2002 / 8 = 250.25, rounded up
    ],
)
def test_linear_list_experts_get_m_per_expert_under_balanced_routing(seq, per_expert, status):
    inspected = inspect_model(f"{MOE}:mixtral_style", batch=1, seq=seq)
    groups = groups_by_fqn(inspected)
    assert list(groups) == [f"layers.{i}.block_sparse_moe.experts" for i in (0, 1)]
    group = groups["layers.0.block_sparse_moe.experts"]
    assert (group.form, group.cls, group.n_experts, group.top_k) == (
        ExpertForm.LINEAR_LIST,
        "ModuleList",
        8,
        2,
    )
    assert group.top_k_source == "layers.0.block_sparse_moe.top_k"
    assert group.router == "layers.0.block_sparse_moe.gate" and group.shared == ()
    assert group.M_total == seq * 2
    w1 = group.gemms[0]
    assert (w1.name, w1.K, w1.N) == ("w1", 1024, 1536)
    assert w1.fqns == tuple(f"layers.0.block_sparse_moe.experts.{e}.w1" for e in range(8))
    layers = by_fqn(inspected)
    for fqn in group.member_fqns:
        member = layers[fqn]
        assert (member.M_per_call, member.status, member.is_linear) == ((per_expert,), status, True)
        assert "per expert under balanced routing" in member.reason
    if status is NOT_CONVERTIBLE:
        assert f"M = {per_expert} is not a multiple of 16" in layers[w1.fqns[0]].reason
    # Layers outside the experts keep batch x seq; the router is not a member
    assert layers["layers.1.attention.wq"].M_per_call == (seq,)
    assert layers["layers.0.block_sparse_moe.gate"].expert_group is None
    assert_router_and_shared_stay_out(inspected)


LIST_EXPERTS = """
class Expert(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(64, 128, bias=False)
        self.down = nn.Linear(128, 64, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.up(x)))


class Moe(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(64, 4, bias=False)
        self.experts = nn.ModuleList(Expert() for _ in range(4))
        self.shared_expert = Expert()
        self.mix = nn.Linear(64, 64, bias=False)  # neither router nor shared expert

    def forward(self, x):
        flat = x.reshape(-1, 64)
        {dispatch}
        return self.mix(out.view(x.shape)) + self.shared_expert(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.moe = Moe()
        self.head = nn.Linear(64, 64)

    def forward(self, x):
        return self.head(self.moe(x))
"""

DATA_DEPENDENT = """chosen = self.gate(flat).argmax(-1)
        out = torch.zeros_like(flat)
        for index, expert in enumerate(self.experts):
            rows = torch.where(chosen == index)[0]
            out[rows] = expert(flat[rows])"""

STATIC = """self.gate(flat)
        out = torch.cat([e(part) for e, part in zip(self.experts, flat.chunk(4))])"""


def test_linear_list_with_unknown_top_k_stays_assumed(tmp_path):
    path = write_model(tmp_path, LIST_EXPERTS.replace("{dispatch}", DATA_DEPENDENT))
    inspected = inspect_model(f"{path}:Net", batch=1, seq=128)
    (group,) = inspected.expert_groups
    assert (group.fqn, group.form, group.n_experts) == ("moe.experts", ExpertForm.LINEAR_LIST, 4)
    assert group.top_k is None and group.top_k_source.startswith("unknown")
    assert group.M_total is None and group.M_per_expert is None
    assert group.router == "moe.gate"
    assert group.shared == ("moe.shared_expert.up", "moe.shared_expert.down")
    layers = by_fqn(inspected)
    up = layers["moe.experts.2.up"]
    assert (up.status, up.M_per_call) == (ASSUMED, (128,))
    assert "top_k the model does not show" in up.reason
    assert any("M per expert unknown" in note for note in group.notes)
    assert_router_and_shared_stay_out(inspected)


def test_linear_list_with_a_static_dispatch_keeps_the_traced_m(tmp_path):
    path = write_model(tmp_path, LIST_EXPERTS.replace("{dispatch}", STATIC))
    inspected = inspect_model(f"{path}:Net", batch=2, seq=128)
    (group,) = inspected.expert_groups
    layers = by_fqn(inspected)
    assert {layers[fqn].M_per_call for fqn in group.member_fqns} == {(64,)}  # 256 rows in 4 chunks
    assert {layers[fqn].status for fqn in group.member_fqns} == {TRACED}
    assert (group.M_total, group.M_per_expert) == (256, 64)
    assert any("dispatch traced" in note for note in group.notes)


def test_identical_blocks_are_not_experts():
    # A ModuleDict of identical transformer blocks (7 Linears each, no router) is no expert group.
    inspected = inspect_model(f"{MODELS_DIR / 'llama3.py'}:build_model(n_layers=3)", batch=1, seq=64)
    assert inspected.expert_groups == ()
    assert all(layer.expert_group is None for layer in inspected.layers)


def test_a_list_of_two_mlps_beside_a_two_way_head_is_not_taken_for_experts(tmp_path):
    # No "expert" in the name and no router with N = 2: the list is two ordinary MLP branches.
    path = write_model(
        tmp_path,
        """
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                mlp = lambda: nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 64))  # noqa: E731
                self.branches = nn.ModuleList(mlp() for _ in range(2))
                self.head = nn.Linear(64, 3)

            def forward(self, x):
                return self.head(sum(branch(x) for branch in self.branches))
        """,
    )
    assert inspect_model(f"{path}:Net", batch=1, seq=64).expert_groups == ()


# --------------------------------------------------------------------------------------- Hugging Face


def _hf_config(tmp_path, kind: str) -> tuple[Path, dict]:
    transformers = pytest.importorskip("transformers", reason="transformers builds the MoE configs")
    common = dict(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=1024,
    )
    if kind == "mixtral":
        config = transformers.MixtralConfig(num_local_experts=8, num_experts_per_tok=2, **common)
        expected = dict(E=8, top_k=2, gate_up=(256, 1024), down=(512, 256), top_k_source="mlp.top_k")
    else:
        config = transformers.Qwen3MoeConfig(
            num_experts=16, num_experts_per_tok=4, moe_intermediate_size=128, head_dim=64, **common
        )
        expected = dict(E=16, top_k=4, gate_up=(256, 256), down=(128, 256), top_k_source="mlp.gate.top_k")
    config.save_pretrained(tmp_path / kind)
    return tmp_path / kind, expected


@pytest.mark.parametrize("kind", ["mixtral", "qwen3_moe"])
def test_hugging_face_moe_configs_trace_through_their_experts(tmp_path, kind):
    folder, expected = _hf_config(tmp_path, kind)
    inspected = inspect_model(str(folder), batch=1, seq=1024)
    assert not any("tracing stopped" in note for note in inspected.notes)  # used to stop at the first expert
    assert {layer.status for layer in inspected.layers if layer.is_linear} <= {TRACED, NOT_CONVERTIBLE}
    groups = groups_by_fqn(inspected)
    assert list(groups) == [f"model.layers.{i}.mlp.experts" for i in (0, 1)]
    group = groups["model.layers.1.mlp.experts"]
    assert (group.form, group.n_experts, group.top_k) == (
        ExpertForm.GROUPED,
        expected["E"],
        expected["top_k"],
    )
    assert group.top_k_source == f"model.layers.1.{expected['top_k_source']}"
    assert group.M_total == 1024 * expected["top_k"]
    assert group.M_per_expert == 1024 * expected["top_k"] / expected["E"]
    gemms = {gemm.name: (gemm.K, gemm.N) for gemm in group.gemms}
    assert gemms == {"gate_up_proj": expected["gate_up"], "down_proj": expected["down"]}
    assert group.router == "model.layers.1.mlp.gate.weight"  # a bare parameter, never a member
    assert_router_and_shared_stay_out(inspected)


# --------------------------------------------------------------------------------------- DeepSeek-V3-like


@pytest.fixture(scope="module")
def deepseek_small() -> ModelLayers:
    return inspect_model(f"{MOE}:deepseek_v3_small", batch=1, seq=4096)


def test_deepseek_v3_small_example(deepseek_small):
    layers = by_fqn(deepseek_small)
    # MLA attention in every block: torchtitan's names and DeepSeek-V3's widths
    mla = {
        "wq_a": (7168, 1536),
        "wq_b": (1536, 128 * (128 + 64)),
        "wkv_a": (7168, 512 + 64),
        "wkv_b": (512, 128 * (128 + 128)),
        "wo": (128 * 128, 7168),
    }
    for block in range(5):
        for name, shape in mla.items():
            layer = layers[f"layers.{block}.attention.{name}"]
            assert ((layer.K, layer.N), layer.status) == (shape, TRACED)
    # the first 3 blocks dense, the last 2 MoE: 256 routed experts top 8, one shared expert
    assert all(f"layers.{block}.feed_forward.w1" in layers for block in range(3))
    groups = groups_by_fqn(deepseek_small)
    assert list(groups) == ["layers.3.moe.experts", "layers.4.moe.experts"]
    group = groups["layers.3.moe.experts"]
    assert (group.n_experts, group.top_k, group.M_total, group.M_per_expert) == (256, 8, 4096 * 8, 128)
    assert [(g.K, g.N) for g in group.gemms] == [(7168, 2048), (2048, 7168), (7168, 2048)]
    assert group.router == "layers.3.moe.router.gate" and layers[group.router].N == 256
    assert group.shared == tuple(f"layers.3.moe.shared_experts.w{i}" for i in (1, 2, 3))
    assert layers["layers.3.moe.shared_experts.w1"].N == 2048  # one shared expert of hidden 2048
    assert_router_and_shared_stay_out(deepseek_small)


# --------------------------------------------------------------------------------------- the command


def test_layers_json_carries_the_expert_groups():
    result = CliRunner().invoke(app, ["layers", f"{MOE}:mixtral_style", "--seq", "1024", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    group = payload["expert_groups"][1]
    assert {key: group[key] for key in ("fqn", "form", "E", "top_k", "M_per_expert", "M_total")} == {
        "fqn": "layers.1.block_sparse_moe.experts",
        "form": "linear_list",
        "E": 8,
        "top_k": 2,
        "M_per_expert": 256,
        "M_total": 2048,
    }
    assert group["router"] == "layers.1.block_sparse_moe.gate"
    member = next(
        layer for layer in payload["layers"] if layer["fqn"] == "layers.1.block_sparse_moe.experts.7.w2"
    )
    assert (member["expert_group"], member["M"], member["K"], member["N"]) == (
        "layers.1.block_sparse_moe.experts",
        256,
        1536,
        1024,
    )


def test_layers_prints_a_routed_experts_section_at_80_columns(tmp_path):
    result = CliRunner().invoke(
        app, ["layers", f"{MOE}:deepseek_v3_small", "--seq", "1024"], env={"COLUMNS": "80"}
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines)
    start = next(i for i, line in enumerate(lines) if line.startswith("routed experts"))
    row = next(line for line in lines[start:] if line.startswith("layers.{3..4}.moe.experts"))
    # form, E, top_k, M per expert (1024 x 8 / 256), M total, the first GEMM
    assert row.split()[1:7] == ["grouped", "256", "8", "32", "8192", "w1"]
    section = "\n".join(lines[start:])
    assert "top_k from layers.{3..4}.moe.top_k" in section
    assert "router layers.{3..4}.moe.router.gate" in section
    assert "shared experts layers.{3..4}.moe.shared_experts" in section


def test_layers_section_says_top_k_unknown(tmp_path):
    path = write_model(tmp_path, LIST_EXPERTS.replace("{dispatch}", DATA_DEPENDENT))
    result = CliRunner().invoke(app, ["layers", f"{path}:Net", "--seq", "128"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if line.startswith("moe.experts "))
    assert row.split()[1:6] == ["linear_list", "4", "unknown", "unknown", "unknown"]
