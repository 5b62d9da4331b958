"""Block discovery for `bench --model` (fp8advisor.inspect.blocks): one unit per distinct block, with its
input."""

from __future__ import annotations

import pytest

from fp8advisor.errors import TargetError
from fp8advisor.inspect.blocks import (
    BLOCK,
    HEAD,
    discover_blocks,
    make_inputs,
    materialize,
    model_fingerprint,
)
from fp8advisor.inspect.target import load_model
from fp8advisor.paths import MODELS_DIR


def discover(target: str, batch: int = 1, seq: int = 64):
    return discover_blocks(load_model(str(target), "meta"), batch=batch, seq=seq)


def test_llama_one_unit_per_distinct_block_and_the_head():
    found = discover(f"{MODELS_DIR / 'llama3.py'}:llama3_8b(n_layers=3)", seq=8192)
    block, head = found.units
    assert (block.pattern, block.kind, block.cls) == ("layers.{0..2}", BLOCK, "TransformerBlock")
    assert block.instances == ("layers.0", "layers.1", "layers.2")
    assert block.inputs == {"args": [{"tensor": [1, 8192, 4096], "dtype": "float32"}], "kwargs": {}}
    # the Linear layers that read one tensor are one group: wq, wk, wv after the norm; w1, w3 in the SwiGLU
    assert block.groups == (
        ("attention.wq", "attention.wk", "attention.wv"),
        ("attention.wo",),
        ("feed_forward.w1", "feed_forward.w3"),
        ("feed_forward.w2",),
    )
    assert {(linear.name, linear.K, linear.N) for linear in block.linears} >= {
        ("attention.wk", 4096, 1024),
        ("feed_forward.w2", 14336, 4096),
    }
    assert (head.pattern, head.kind, head.instances, head.groups) == ("output", HEAD, ("output",), (("",),))
    assert head.inputs["args"] == [{"tensor": [1, 8192, 4096], "dtype": "float32"}]
    assert block.everywhere({"attention.wo"}) == {
        "layers.0.attention.wo",
        "layers.1.attention.wo",
        "layers.2.attention.wo",
    }
    assert block.relative({"layers.0.attention.wq", "layers.1.attention.wk"}) == {"attention.wq"}


def test_moe_block_groups_the_shared_expert_and_leaves_the_grouped_experts_out():
    found = discover(MODELS_DIR / "moe.py", batch=2, seq=64)
    block = found.units[0]
    assert block.pattern == "layers.{0..1}" and block.inputs["args"][0]["tensor"] == [2, 64, 1024]
    groups = set(block.groups)
    assert ("moe.shared_experts.w1", "moe.shared_experts.w3") in groups
    names = {linear.name: linear.convertible for linear in block.linears}
    assert not any("experts.w" in name and "shared" not in name for name in block.convertible)  # 3-D weights
    assert names  # the router's gate is a Linear of the block
    assert "moe.router.gate" in names


def test_vit_blocks_are_found_inside_a_sequential_and_their_rows_are_the_patches():
    found = discover(MODELS_DIR / "vit.py", batch=16)
    block = found.units[0]
    assert block.pattern == "blocks.{0..11}" and block.cls == "EncoderBlock"
    assert block.inputs["args"] == [{"tensor": [16, 197, 768], "dtype": "float32"}]
    # nn.MultiheadAttention multiplies its in_proj as a bare parameter: only the MLP is convertible
    assert block.convertible == {"mlp.0", "mlp.2"}
    assert all(unit.pattern != "head" for unit in found.units)  # N = 1000 is not a multiple of 16


def test_vit_with_nothing_convertible_is_a_clear_error():
    with pytest.raises(TargetError, match="no block or Linear that float8 could convert"):
        discover(MODELS_DIR / "vit.py", batch=2)


def test_positional_rotary_tables_are_recorded_as_inputs():
    found = discover(f"{MODELS_DIR / 'hf_decoder.py'}:llama32_1b(num_hidden_layers=2)", seq=256)
    block = found.units[0]
    assert block.pattern == "model.layers.{0..1}"
    assert block.inputs["args"] == [
        {"tensor": [1, 256, 2048], "dtype": "float32"},
        {"tensor": [256, 64], "dtype": "float32"},
        {"tensor": [256, 64], "dtype": "float32"},
    ]
    assert found.units[1].pattern == "lm_head"


def test_hugging_face_config_block_gets_its_keyword_inputs():
    pytest.importorskip("transformers")
    found = discover(MODELS_DIR / "tiny_llama_hf", seq=64)
    block = found.units[0]
    assert block.cls == "LlamaDecoderLayer"
    assert block.inputs["args"][0] == {"tensor": [1, 64, 512], "dtype": "bfloat16"}
    assert "position_embeddings" in block.inputs["kwargs"]
    args, kwargs, x = make_inputs(block.inputs, device="cpu", seed=0)
    assert x is args[0] and x.requires_grad
    cos, sin = kwargs["position_embeddings"]
    assert not cos.requires_grad  # only the hidden state carries a gradient
    mask = kwargs.get("attention_mask")
    assert mask is None or not mask.any()  # an additive mask that hides nothing
    # built with eager attention for the meta trace; measured with sdpa, as training runs it
    module, _, switched = materialize(found.module(block), device="cpu", seed=0)
    assert switched and module.self_attn.config._attn_implementation == "sdpa"
    assert found.module(block).self_attn.config._attn_implementation == "eager"  # the traced one untouched
    out = module(*args, **kwargs)
    out = out[0] if isinstance(out, tuple) else out
    assert out.shape == (1, 64, 512)


def test_blocks_that_differ_are_distinct_units(tmp_path):
    model = tmp_path / "mixed.py"
    model.write_text(
        "import torch\nfrom torch import nn\n\n"
        "class Block(nn.Module):\n"
        "    def __init__(self, width):\n"
        "        super().__init__()\n"
        "        self.up = nn.Linear(64, width)\n"
        "        self.down = nn.Linear(width, 64)\n"
        "    def forward(self, x):\n"
        "        return x + self.down(torch.relu(self.up(x)))\n\n"
        "def build_model():\n"
        "    return nn.Sequential(Block(128), Block(128), Block(256), Block(128))\n\n"
        "def example_inputs(batch, seq):\n"
        "    return (torch.randn(batch, seq, 64),)\n"
    )
    found = discover(model, batch=2, seq=16)
    assert [(unit.pattern, unit.instances) for unit in found.units] == [
        ("{0..1,3}", ("0", "1", "3")),
        ("2", ("2",)),
    ]
    assert [unit.groups for unit in found.units] == [(("up",), ("down",))] * 2


def test_fingerprint_names_the_model_its_batch_and_its_seq():
    target = f"{MODELS_DIR / 'llama3.py'}:build_model"
    a, b, c = discover(target, seq=64), discover(target, seq=64), discover(target, seq=128)
    assert model_fingerprint(a.model_layers) == model_fingerprint(b.model_layers)
    assert model_fingerprint(a.model_layers) != model_fingerprint(c.model_layers)
    # the same rows per GEMM, not the same attention: a split of the tokens is another measurement
    split = discover(target, batch=2, seq=32)
    assert [layer.M for layer in split.model_layers.layers] == [layer.M for layer in a.model_layers.layers]
    assert model_fingerprint(split.model_layers) != model_fingerprint(a.model_layers)


def test_materialize_builds_one_block_for_real_in_bf16():
    import torch

    found = discover(f"{MODELS_DIR / 'llama3.py'}:build_model", seq=64)
    block = found.units[0]
    module, zeroed, switched = materialize(found.module(block), device="cpu", seed=0)
    parameters = dict(module.named_parameters())
    assert all(p.device.type == "cpu" and p.dtype == torch.bfloat16 for p in parameters.values())
    assert torch.all(parameters["attention_norm.weight"] == 1)
    wq = parameters["attention.wq.weight"].float()
    assert 0.5 < wq.std().item() * 256**0.5 < 1.5  # N(0, 1/fan_in)
    assert zeroed == [] and not switched
    args, kwargs, x = make_inputs(block.inputs, device="cpu", seed=0)
    out = module(*args, **kwargs)
    assert out.shape == (1, 64, 256) and torch.isfinite(out.float()).all()
    assert found.loaded.model.layers["0"].attention.wq.weight.is_meta  # the model itself stays on meta
