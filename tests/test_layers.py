"""fp8advisor.inspect.layers.inspect_model: the (M, K, N) each layer really multiplies, and each layer's
status."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fp8advisor.errors import ModelInputsError, TargetError
from fp8advisor.inspect.layers import inspect_model
from fp8advisor.inspect.records import LayerStatus, ModelLayers
from fp8advisor.paths import MODELS_DIR

sys.path.insert(0, str(Path(__file__).parent))
from _layers_helpers import line_of, write_model  # noqa: E402

TRACED, ASSUMED = LayerStatus.TRACED, LayerStatus.ASSUMED
NOT_CALLED, NOT_CONVERTIBLE = LayerStatus.NOT_CALLED, LayerStatus.NOT_CONVERTIBLE


def by_fqn(inspected: ModelLayers) -> dict:
    return {layer.fqn: layer for layer in inspected.layers}


# --------------------------------------------------------------------------------------- the examples


@pytest.fixture(scope="module")
def llama70b() -> ModelLayers:
    return inspect_model(f"{MODELS_DIR / 'llama3.py'}:llama3_70b", batch=1, seq=8192)


def test_llama3_70b_has_561_linear_all_traced(llama70b):
    assert len(llama70b.layers) == 561 == 80 * 7 + 1
    assert {layer.status for layer in llama70b.layers} == {TRACED}
    assert all(layer.M_per_call == (8192,) for layer in llama70b.layers)


@pytest.mark.parametrize(
    ("fqn", "K", "N"),
    [
        ("layers.0.attention.wq", 8192, 8192),
        ("layers.0.attention.wk", 8192, 1024),  # 8 KV heads x 128
        ("layers.41.attention.wv", 8192, 1024),
        ("layers.79.attention.wo", 8192, 8192),
        ("layers.0.feed_forward.w1", 8192, 28672),
        ("layers.0.feed_forward.w2", 28672, 8192),
        ("layers.0.feed_forward.w3", 8192, 28672),
        ("output", 8192, 128256),
    ],
)
def test_llama3_70b_exact_shapes(llama70b, fqn, K, N):
    layer = by_fqn(llama70b)[fqn]
    assert (layer.cls, layer.K, layer.N, layer.M, layer.calls) == ("Linear", K, N, 8192, 1)


def test_llama3_70b_json_round_trip(llama70b):
    payload = llama70b.to_json()
    assert (payload["batch"], payload["seq"], payload["tokens"]) == (1, 8192, 8192)
    wk = next(row for row in payload["layers"] if row["fqn"] == "layers.0.attention.wk")
    assert wk == {
        "fqn": "layers.0.attention.wk",
        "class": "Linear",
        "K": 8192,
        "N": 1024,
        "M": 8192,
        "M_per_call": [8192],
        "calls": 1,
        "status": "traced",
        "reason": None,
        "is_linear": True,
        "tied_to": None,
        "aliases": [],
        "expert_group": None,
    }


def test_llama3_8b_shapes_and_m_is_batch_times_seq():
    inspected = inspect_model(f"{MODELS_DIR / 'llama3.py'}:llama3_8b(n_layers=2)", batch=4, seq=2048)
    layers = by_fqn(inspected)
    assert (layers["layers.1.feed_forward.w1"].K, layers["layers.1.feed_forward.w1"].N) == (4096, 14336)
    assert (layers["layers.1.attention.wk"].K, layers["layers.1.attention.wk"].N) == (4096, 1024)
    assert {layer.M for layer in inspected.layers} == {4 * 2048}


def test_hf_named_decoder_shows_the_tied_head():
    layers = by_fqn(inspect_model(str(MODELS_DIR / "hf_decoder.py"), batch=1, seq=512))
    assert layers["lm_head"].tied_to == "model.embed_tokens"
    assert layers["model.layers.1.self_attn.k_proj"].N == 64
    assert layers["lm_head"].status is TRACED


def test_moe_router_and_grouped_experts():
    layers = by_fqn(inspect_model(str(MODELS_DIR / "moe.py"), batch=2, seq=1024))
    router = layers["layers.0.moe.router.gate"]
    assert (router.N, router.status, router.M) == (8, NOT_CONVERTIBLE, 2048)
    assert "N = 8 is not a multiple of 16" in router.reason
    experts = layers["layers.1.moe.experts.w2"]
    # (experts, hidden, dim) weights; every token goes to top-2 experts: 2 x 2048 rows across the experts
    assert (experts.cls, experts.K, experts.N, experts.M, experts.is_linear) == (
        "GroupedExperts",
        1536,
        1024,
        4096,
        False,
    )
    assert experts.status is NOT_CONVERTIBLE and "_grouped_mm" in experts.reason
    assert layers["layers.0.moe.shared_experts.w2"].status is TRACED


def test_llama3_405b_and_deepseek_v3_sizes_are_the_published_ones():
    # The speed benchmark's largest targets: Llama 3.1 405B and DeepSeek-V3 (its MLA attention included).
    from fp8advisor.inspect.target import load_model

    llama = load_model(f"{MODELS_DIR / 'llama3.py'}:llama3_405b", "meta").model
    assert round(sum(p.numel() for p in llama.parameters()) / 1e9, 1) == 405.9
    assert len(llama.layers) == 126 and llama.layers["0"].attention.n_heads == 128
    assert tuple(llama.layers["125"].attention.wk.weight.shape) == (8 * 128, 16384)
    assert tuple(llama.layers["0"].feed_forward.w1.weight.shape) == (53248, 16384)
    assert tuple(llama.output.weight.shape) == (128256, 16384)
    moe = load_model(f"{MODELS_DIR / 'moe.py'}:deepseek_v3_671b", "meta").model
    assert round(sum(p.numel() for p in moe.parameters()) / 1e9) == 671  # DeepSeek-V3's 671B (without MTP)
    assert tuple(moe.layers["0"].attention.wkv_b.weight.shape) == (128 * (128 + 128), 512)  # MLA
    assert len(moe.layers) == 61 and not hasattr(moe.layers["2"], "moe")
    assert tuple(moe.layers["2"].feed_forward.w1.weight.shape) == (18432, 7168)
    assert tuple(moe.layers["3"].moe.experts.w1.shape) == (256, 7168, 2048)
    assert tuple(moe.layers["60"].moe.shared_experts.w2.weight.shape) == (7168, 2048)
    assert tuple(moe.output.weight.shape) == (129280, 7168)
    routed = by_fqn(inspect_model(f"{MODELS_DIR / 'moe.py'}:deepseek_v3_671b(n_layers=4)", batch=1, seq=256))
    assert routed["layers.3.moe.experts.w1"].M == 256 * 8  # top 8 of 256 experts
    assert routed["layers.0.feed_forward.w1"].status is TRACED


def test_vit_patch_count_and_multihead_attention():
    layers = by_fqn(inspect_model(str(MODELS_DIR / "vit.py"), batch=16, seq=8192))
    out_proj = layers["blocks.3.attn.out_proj"]
    assert (out_proj.status, out_proj.calls, out_proj.is_linear) == (NOT_CALLED, 0, True)
    in_proj = layers["blocks.3.attn.in_proj_weight"]
    assert (in_proj.cls, in_proj.K, in_proj.N, in_proj.M, in_proj.is_linear) == (
        "Parameter",
        768,
        2304,
        16 * 197,
        False,
    )
    assert layers["blocks.0.mlp.0"].M == 16 * 197 and layers["blocks.0.mlp.0"].status is TRACED
    assert layers["head"].M == 16  # the class token only
    assert "N = 1000" in layers["head"].reason


def test_vit_batch_one_m_not_divisible_by_16():
    layer = by_fqn(inspect_model(str(MODELS_DIR / "vit.py"), batch=1))["blocks.0.mlp.2"]
    assert layer.status is NOT_CONVERTIBLE and layer.reason.startswith("M = 197 is not a multiple of 16")


# ---------------------------------------------------------------------------------------- each status


def test_assumed_after_data_dependent_code(tmp_path):
    path = write_model(
        tmp_path,
        """
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.first = nn.Linear(64, 64)
                self.second = nn.Linear(64, 128)
                self.third = nn.Linear(128, 32)

            def forward(self, x):
                x = self.first(x)
                if x.abs().max().item() > 100:  # data-dependent: a meta tensor has no values
                    x = x / 2
                return self.third(self.second(x))
        """,
    )
    inspected = inspect_model(str(path), batch=2, seq=16)
    layers = by_fqn(inspected)
    assert (layers["first"].status, layers["first"].M) == (TRACED, 32)
    assert (layers["second"].status, layers["second"].M) == (ASSUMED, 32)
    assert (layers["third"].status, layers["third"].M) == (ASSUMED, 32)
    where = f"{path}:{line_of(path, '.item()')}"
    assert where in layers["third"].reason
    assert any(where in note and "2 layer(s)" in note for note in inspected.notes)


def test_not_convertible_for_each_reason(tmp_path):
    path = write_model(
        tmp_path,
        """
        class OwnForward(nn.Linear):
            def forward(self, x):
                return super().forward(x) * 2

        class Experts(nn.Module):
            def __init__(self):
                super().__init__()
                self.w = nn.Parameter(torch.empty(4, 64, 32))

            def forward(self, x):  # (4, rows, 64) -> (4, rows, 32)
                return torch.bmm(x, self.w)

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.odd_k = nn.Linear(100, 64)
                self.odd_n = nn.Linear(64, 100)
                self.own = OwnForward(64, 64)
                self.shared = nn.Linear(64, 64)
                self.alias = self.shared  # the same module under a second name
                self.bare = nn.Parameter(torch.empty(64, 48))
                self.experts = Experts()

            def forward(self, x):
                x = self.odd_n(self.odd_k(x))[..., :64]  # x: (batch, seq, 100), read from odd_k
                x = self.alias(self.own(x))
                y = x @ self.bare
                e = self.experts(x.reshape(4, -1, 64))
                return y.sum() + e.sum()
        """,
    )
    layers = by_fqn(inspect_model(f"{path}:Net", batch=1, seq=64))
    assert "K = 100" in layers["odd_k"].reason
    assert "N = 100" in layers["odd_n"].reason
    assert "overrides nn.Linear.forward" in layers["own"].reason and layers["own"].cls == "OwnForward"
    assert layers["shared"].aliases == ("alias",) and "torchao swaps only shared" in layers["shared"].reason
    assert "alias" not in layers  # one row per module, under its first name
    bare = layers["bare"]
    assert (bare.cls, bare.K, bare.N, bare.M, bare.is_linear) == ("Parameter", 64, 48, 64, False)
    experts = layers["experts.w"]
    assert (experts.cls, experts.K, experts.N, experts.M) == ("Experts", 64, 32, 64)
    assert "3-D expert weights in torch.bmm" in experts.reason
    assert all(layer.status is NOT_CONVERTIBLE for layer in layers.values())


def test_m_counts_the_rows_each_call_multiplies(tmp_path):
    path = write_model(
        tmp_path,
        """
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(64, 64)
                self.pool = nn.Linear(64, 16)
                self.head = nn.Linear(64, 64, bias=False)
                self.head.weight = self.proj.weight  # tied

            def forward(self, x):
                x = self.proj(self.proj(x))  # called twice
                pooled = self.pool(x[:, 0])  # one row per sequence
                return self.head(x[:, :16]), pooled  # the first 16 positions only
        """,
    )
    layers = by_fqn(inspect_model(str(path), batch=2, seq=32))
    assert layers["proj"].M_per_call == (64, 64) and layers["proj"].calls == 2
    assert layers["pool"].M_per_call == (2,)
    assert layers["head"].M_per_call == (32,) and layers["head"].status is TRACED
    assert layers["head"].tied_to == "proj" and layers["proj"].tied_to == "head"


def test_not_called_linear(tmp_path):
    path = write_model(
        tmp_path,
        """
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.used = nn.Linear(64, 64)
                self.unused = nn.Linear(64, 64)

            def forward(self, x):
                return self.used(x)
        """,
    )
    layer = by_fqn(inspect_model(str(path), batch=1, seq=16))["unused"]
    assert (layer.status, layer.calls, layer.M) == (NOT_CALLED, 0, 0)
    assert not layer.convertible


def test_a_model_written_for_a_gpu(tmp_path):
    path = write_model(
        tmp_path,
        """
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(64, 128, device="cuda", dtype=torch.bfloat16)

            def forward(self, x):
                positions = torch.arange(x.shape[1], device="cuda")
                return self.a(x.cuda()) + positions[None, :, None]

        model = Net().cuda()
        """,
    )
    layer = by_fqn(inspect_model(str(path), batch=2, seq=64))["a"]
    assert (layer.K, layer.N, layer.M, layer.status) == (64, 128, 128, TRACED)


# ------------------------------------------------------------------------------------------- refusals


def test_model_without_linear(tmp_path):
    path = write_model(
        tmp_path, "def build_model():\n    return nn.Sequential(nn.LayerNorm(16), nn.ReLU())\n"
    )
    with pytest.raises(TargetError, match="has no nn.Linear"):
        inspect_model(str(path))


def test_forward_that_fails_on_guessed_inputs(tmp_path):
    path = write_model(
        tmp_path,
        """
        class Images(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 16, 3)
                self.fc = nn.Linear(16, 10)

            def forward(self, images):
                return self.fc(self.conv(images).mean((2, 3)))
        """,
    )
    with pytest.raises(ModelInputsError, match="the forward failed on float input") as caught:
        inspect_model(str(path), batch=1, seq=8)
    assert caught.value.location == f"{path}:{line_of(path, 'return self.fc')}"
    assert "def example_inputs(batch, seq):" in caught.value.hint


def test_bad_batch():
    with pytest.raises(TargetError, match="must be positive"):
        inspect_model(str(MODELS_DIR / "llama3.py"), batch=0)


def test_an_eval_mode_model_is_traced_as_in_training(tmp_path):
    path = write_model(
        tmp_path,
        """
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.attn = nn.MultiheadAttention(64, 4, batch_first=True)

            def forward(self, x):
                return self.attn(x, x, x, need_weights=False)[0]

        model = Net().eval()
        """,
    )
    layers = by_fqn(inspect_model(str(path), batch=2, seq=16))
    assert layers["attn.in_proj_weight"].M == 32 and layers["attn.out_proj"].status is NOT_CALLED


def _trace_forward(model, tokens, memo: bool):
    """Every GEMM the recorder sees, and the metadata of every op output, for one forward on meta."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from fp8advisor.compat import storage_key as _storage_key
    from fp8advisor.inspect.recorder import make_recorder

    parameters = {_storage_key(p): p for p in model.parameters()}
    calls: list = []
    outputs: list = []

    class Watch(TorchDispatchMode):  # above the recorder: sees every output, cached or not
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            inputs = {_storage_key(a) for a in args if isinstance(a, torch.Tensor)}
            for tensor in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(tensor, torch.Tensor):
                    # whether it aliases an input matters to the op census (an _unsafe_view is the input)
                    aliases = _storage_key(tensor) in inputs
                    outputs.append((str(func), tuple(tensor.shape), tensor.stride(), tensor.dtype, aliases))
            return out

    with torch.no_grad(), make_recorder(parameters, [], calls, memo=memo), Watch():
        model(tokens)
    return [(c.op, c.M, c.K, c.N, id(c.parameter)) for c in calls], outputs


def test_the_meta_kernel_memo_is_exact():
    # The memo answers repeated ops from a cache; the outputs' shapes, strides, dtypes and storage sharing and
    # the recorded GEMMs must be exactly those of running every meta kernel.
    import torch

    from fp8advisor.inspect.target import load_model

    model = load_model(f"{MODELS_DIR / 'moe.py'}:build_model(n_layers=3, dim=256, n_heads=4)").model
    tokens = torch.zeros(2, 64, dtype=torch.long, device="meta")
    with_memo = _trace_forward(model, tokens, memo=True)
    without_memo = _trace_forward(model, tokens, memo=False)
    assert with_memo == without_memo
    assert len(with_memo[0]) == 3 * (4 + 1 + 3 + 3) + 1  # attention 4, router 1, experts 3, shared 3; output


def test_one_module_in_two_parents_is_converted_under_both_names(tmp_path):
    path = write_model(
        tmp_path,
        """
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                shared = nn.Linear(64, 64)
                self.left = nn.Sequential(shared)
                self.right = nn.Sequential(shared)

            def forward(self, x):
                return self.right(self.left(x))
        """,
    )
    layers = by_fqn(inspect_model(str(path), batch=1, seq=16))
    # torchao visits it under both parents (named_children dedupes per parent only) and swaps it twice
    assert layers["left.0"].aliases == ("right.0",) and layers["left.0"].status is TRACED
    assert layers["left.0"].M_per_call == (16, 16)


def test_hugging_face_encoder_and_decoder_trace_fully(tmp_path):
    pytest.importorskip("transformers")
    import json

    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "bert",
                "hidden_size": 128,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "intermediate_size": 512,
                "vocab_size": 1000,
            }
        )
    )
    encoder = by_fqn(inspect_model(str(tmp_path), batch=2, seq=64))
    assert encoder["bert.encoder.layer.1.intermediate.dense"].status is TRACED
    assert encoder["bert.encoder.layer.1.intermediate.dense"].M == 128
    assert encoder["cls.predictions.decoder"].tied_to == "bert.embeddings.word_embeddings"
    decoder = inspect_model(str(MODELS_DIR / "tiny_llama_hf"), batch=1, seq=256)
    assert {layer.status for layer in decoder.layers} == {TRACED}
