"""fp8advisor.inspect.census: the op census of the traced forward, each figure against a hand computation.

Pricing in every test (see census.py): a floating-point element costs 2 bytes (the models are built in float32
on meta; the census prices a bf16 step), an int64 token id 8.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fp8advisor.inspect.census import AttentionCall, MatmulCall, MemoryRegion, OpCensus
from fp8advisor.inspect.layers import inspect_model
from fp8advisor.inspect.records import ModelLayers
from fp8advisor.paths import MODELS_DIR

sys.path.insert(0, str(Path(__file__).parent))
from _layers_helpers import write_model  # noqa: E402

BF16 = 2  # bytes per floating-point element
INT64 = 8


def census_of(tmp_path, body: str, batch: int, seq: int) -> OpCensus:
    census = inspect_model(str(write_model(tmp_path, body)), batch=batch, seq=seq).census
    assert census is not None and census.complete and census.tokens == batch * seq
    return census


# ------------------------------------------------------------------------------------------- regions


MLP = """
    K, N = 16, 32

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.RMSNorm(K)
            self.up = nn.Linear(K, N, bias=False)
            self.down = nn.Linear(N, K, bias=False)

        def forward(self, x):
            return x + self.down(F.silu(self.up(self.norm(x))))

    def build_model():
        return Block()

    def example_inputs(batch, seq):
        return (torch.randn(batch, seq, K),)
"""


def test_norm_linear_silu_linear_residual_regions(tmp_path):
    census = census_of(tmp_path, MLP, batch=2, seq=8)
    x = 2 * 8 * 16 * BF16  # 512: x, norm(x), down(...), x + down(...) are (2, 8, 16)
    hidden = 2 * 8 * 32 * BF16  # 1024: up(...) and silu(...) are (2, 8, 32)
    norm_weight = 16 * BF16  # 32
    assert census.regions == (
        # up is the first extern kernel. The norm's ops (pow, mean, add eps, rsqrt, mul, mul by the weight)
        # read x and the weight and write norm(x), which `up` reads; their intermediates stay in the kernel.
        MemoryRegion(activation_bytes=x + x, parameter_bytes=norm_weight, ops=6),
        # between up and down: silu reads up's output and writes its own, which `down` reads
        MemoryRegion(activation_bytes=hidden + hidden, parameter_bytes=0, ops=1),
        # after down: the residual add reads x and down's output and writes the forward's output
        MemoryRegion(activation_bytes=x + x + x, parameter_bytes=0, ops=1),
    )
    assert census.forward_memory_bytes == 1024 + 32 + 2048 + 1536
    assert census.region_count == 3
    assert census.attention == () and census.matmuls == ()
    assert census.output_shape == (2, 8, 16)


def test_an_in_place_op_is_a_memory_op_and_a_view_is_none(tmp_path):
    census = census_of(
        tmp_path,
        """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(16, 32, bias=False)
                self.b = nn.Linear(32, 32, bias=False)
                self.c = nn.Linear(32, 8, bias=False)

            def forward(self, x):
                h = self.a(x)
                h.mul_(2.0)  # in place: reads h, writes it back (b reads it)
                h = self.b(h).view(-1, 32).unsqueeze(0).transpose(0, 1)  # views only: no region
                return self.c(h)

        def build_model():
            return Model()

        def example_inputs(batch, seq):
            return (torch.randn(batch, seq, 16),)
        """,
        batch=2,
        seq=8,
    )
    h = 2 * 8 * 32 * BF16  # 1024
    # One region, between a and b: mul_ reads a's output and writes it back in place. Between b and c nothing
    # but views (view, unsqueeze, transpose, and matmul's own views): no region at all.
    assert census.regions == (MemoryRegion(activation_bytes=h + h, parameter_bytes=0, ops=1),)
    assert census.output_shape == (16, 1, 8)


def test_embedding_reads_only_the_gathered_rows(tmp_path):
    census = census_of(
        tmp_path,
        """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = nn.Embedding(50000, 64)  # a 6.4 MB table (bf16), of which 16 rows are read
                self.head = nn.Linear(64, 128, bias=False)

            def forward(self, tokens):
                return self.head(self.embed(tokens))

        def build_model():
            return Model()

        def example_inputs(batch, seq):
            return (torch.zeros(batch, seq, dtype=torch.long),)
        """,
        batch=2,
        seq=8,
    )
    tokens = 2 * 8 * INT64  # 128
    rows = 2 * 8 * 64 * BF16  # 2048: the gathered rows, as many bytes as the embedding's output
    # The region reads the token ids and the 16 rows, and writes the embedding's output, which head reads.
    # The table is neither read whole (50000 * 64 * 2 = 6.4 MB) nor counted as parameter bytes.
    assert census.regions == (MemoryRegion(activation_bytes=tokens + rows + rows, parameter_bytes=0, ops=1),)


def test_index_select_of_a_parameter_reads_only_the_selected_rows(tmp_path):
    census = census_of(
        tmp_path,
        """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.table = nn.Parameter(torch.zeros(1000, 64))
                self.head = nn.Linear(64, 128, bias=False)

            def forward(self, tokens):
                return self.head(self.table.index_select(0, tokens.flatten()))

        def build_model():
            return Model()

        def example_inputs(batch, seq):
            return (torch.zeros(batch, seq, dtype=torch.long),)
        """,
        batch=2,
        seq=8,
    )
    # as the embedding: token ids 128 bytes, 16 rows of 64 (2048 bytes) read and written; no parameter bytes
    assert census.regions == (MemoryRegion(activation_bytes=128 + 2048 + 2048, parameter_bytes=0, ops=1),)


def test_a_cast_between_floating_dtypes_is_no_op(tmp_path):
    census = census_of(
        tmp_path,
        """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.w = nn.Parameter(torch.zeros(16, 32))
                self.head = nn.Linear(32, 8, bias=False)

            def forward(self, x):
                h = x.to(torch.bfloat16) @ self.w.to(torch.bfloat16)  # as MoE code casts for grouped GEMMs
                return self.head(h.float())

        def build_model():
            return Model()

        def example_inputs(batch, seq):
            return (torch.randn(batch, seq, 16),)
        """,
        batch=2,
        seq=8,
    )
    # Built in float32, run in bf16: in the bf16 step the census prices, each cast is the tensor itself. Were
    # they copies, the weight's cast alone would be a region reading and writing 16 x 32 x 2 parameter bytes.
    assert census.regions == ()


# ----------------------------------------------------------------------------------------- attention

ATTENTION = """
    H, KV, D = 8, 2, 16  # query heads, key/value heads (GQA), head dim

    class Attention(nn.Module):
        def __init__(self, v_dim=D):
            super().__init__()
            self.v_dim = v_dim
            self.wq = nn.Linear(64, H * D, bias=False)
            self.wk = nn.Linear(64, KV * D, bias=False)
            self.wv = nn.Linear(64, KV * v_dim, bias=False)
            self.wo = nn.Linear(H * v_dim, 64, bias=False)

        def forward(self, x, memory=None, mask=None):
            batch, seq, _ = x.shape
            memory = x if memory is None else memory
            q = self.wq(x).view(batch, seq, H, D).transpose(1, 2)
            k = self.wk(memory).view(batch, memory.shape[1], KV, D).transpose(1, 2)
            v = self.wv(memory).view(batch, memory.shape[1], KV, self.v_dim).transpose(1, 2)
            if mask is None:
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            else:
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
            return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))
"""


def test_sdpa_causal_gqa_is_one_fused_call(tmp_path):
    census = census_of(
        tmp_path,
        ATTENTION
        + """
    def build_model():
        return Attention()

    def example_inputs(batch, seq):
        return (torch.randn(batch, seq, 64),)
    """,
        batch=2,
        seq=32,
    )
    call = AttentionCall(batch=2, heads=8, q_len=32, kv_len=32, head_dim=16, v_head_dim=16, causal=True)
    assert census.attention == (call,)
    # causal, q_len == kv_len: 1 + 2 + ... + 32 = 32 * 33 / 2 = 528 scores per (batch, head)
    assert call.scores == 528
    # q @ k^T and p @ v: 2 FLOPs per multiply-add, over (head_dim + v_head_dim) = 32 per score
    assert call.forward_flops == 2 * 2 * 8 * 528 * (16 + 16)
    # None of the math path that sdpa decomposes into on meta (bmm, the mask's tril, softmax over the whole
    # score matrix) is a matmul or a region; nor is the transpose-reshape of its output, a view of the
    # (batch, seq, heads, dim) memory a GPU kernel writes. Between wq, wk, wv, sdpa and wo: views only.
    assert census.matmuls == ()
    assert census.regions == ()


def test_sdpa_with_an_explicit_mask_is_not_causal(tmp_path):
    census = census_of(
        tmp_path,
        ATTENTION
        + """
    def build_model():
        return Attention(v_dim=24)

    def example_inputs(batch, seq):
        memory = torch.randn(batch, 48, 64)
        mask = torch.ones(seq, 48, dtype=torch.bool).tril()
        return {"x": torch.randn(batch, seq, 64), "memory": memory, "mask": mask}
    """,
        batch=2,
        seq=32,
    )
    call = AttentionCall(batch=2, heads=8, q_len=32, kv_len=48, head_dim=16, v_head_dim=24, causal=False)
    assert census.attention == (call,)
    assert call.scores == 32 * 48  # every entry: the mask is not causal to the census
    assert call.forward_flops == 2 * 2 * 8 * (32 * 48) * (16 + 24)
    assert census.matmuls == () and census.regions == ()


@pytest.mark.parametrize(("q_len", "kv_len"), [(5, 5), (4, 6), (6, 4), (1, 7), (7, 1)])
def test_causal_scores_follow_torch_top_left_alignment(q_len, kv_len):
    import torch

    call = AttentionCall(batch=1, heads=1, q_len=q_len, kv_len=kv_len, head_dim=8, v_head_dim=8, causal=True)
    assert call.scores == int(torch.ones(q_len, kv_len).tril().sum())
    assert call.scores == sum(min(i + 1, kv_len) for i in range(q_len))


def test_hand_written_attention_is_two_matmuls_and_a_softmax_region(tmp_path):
    census = census_of(
        tmp_path,
        """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.out = nn.Linear(16, 64, bias=False)

            def forward(self, q, k, v):  # (batch, heads, seq, head_dim) each
                scores = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
                return self.out(scores.softmax(dim=-1) @ v)

        def build_model():
            return Model()

        def example_inputs(batch, seq):
            return tuple(torch.randn(batch, 4, seq, 16) for _ in range(3))
        """,
        batch=2,
        seq=32,
    )
    # q @ k^T: bmm over batch x heads = 8 of (32, 16) @ (16, 32); p @ v: 8 of (32, 32) @ (32, 16)
    assert census.matmuls == (MatmulCall(batch=8, M=32, K=16, N=32), MatmulCall(batch=8, M=32, K=32, N=16))
    assert census.matmuls[0].forward_flops == 2 * 8 * 32 * 16 * 32
    scores = 2 * 4 * 32 * 32 * BF16  # 16384
    # Between the two bmm: the scaling and the softmax, one region reading the scores and writing the
    # probabilities, which the second bmm reads.
    assert census.regions == (MemoryRegion(activation_bytes=scores + scores, parameter_bytes=0, ops=2),)
    assert census.attention == ()


# -------------------------------------------------------------------------------------- a real model


@pytest.fixture(scope="module")
def llama8b() -> ModelLayers:
    return inspect_model(f"{MODELS_DIR / 'llama3.py'}:llama3_8b", batch=1, seq=8192)


def test_llama3_8b_census(llama8b):
    census = llama8b.census
    assert census.complete and census.tokens == 8192
    assert census.attention == (
        AttentionCall(
            batch=1, heads=32, q_len=8192, kv_len=8192, head_dim=128, v_head_dim=128, causal=True, count=32
        ),
    )
    assert census.matmuls == ()
    assert census.output_shape == (1, 8192, 128256)

    # Hand estimate, bf16. T tokens, D model dim, Dkv = 8 KV heads x 128, F the FFN's hidden dim.
    T, D, Dkv, F, b = 8192, 4096, 1024, 14336, BF16
    per_block = (
        4 * T * D * b  # residual add + attention_norm: read h and the last output, write h' and norm(h')
        + 2 * T * (D + Dkv) * b  # rotary of q and k: read wq's and wk's outputs, write the rotated ones
        + 4 * T * D * b  # residual add + ffn_norm: read h' and wo's output, write h'' and norm(h'')
        + 2 * T * F * b  # silu between w1 and w3: read w1's output, write silu's
        + 3 * T * F * b  # the product after w3: read silu's and w3's outputs, write the product w2 reads
    )
    # Block 0 starts with the embedding instead of a residual add: it reads the token ids and the gathered
    # rows (T x D) where the others read two T x D tensors. The final norm after the last add writes only
    # norm(h), which `output` reads: 3 T x D. Then parameters: two norm weights per block and the last one.
    first_block_difference = (8 * T + T * D * b) - 2 * T * D * b
    final_norm = 3 * T * D * b
    norm_weights = (2 * 32 + 1) * D * b
    estimate = 32 * per_block + first_block_difference + final_norm + norm_weights
    # The estimate has every term of the fusion rule, so the census should hit it to the byte; the bound
    # (1e-4, 6 MB of 60 GB) only leaves room for a storage of a few KiB that a torch release might add to a
    # decomposition, while a single T x Dkv tensor missing or extra in every block (32 x 16.8 MB, 0.9%) fails.
    assert census.forward_memory_bytes == pytest.approx(estimate, rel=1e-4)
    # five fused kernels per block (the two norm regions, rotary, silu, product), and the final norm's
    assert census.region_count == 5 * 32 + 1
    assert sum(r.parameter_bytes * r.count for r in census.regions) == norm_weights


# --------------------------------------------------------------------------------------------- JSON


def test_json_round_trip(tmp_path):
    inspected = inspect_model(str(write_model(tmp_path, MLP)), batch=2, seq=8)
    census = inspected.census
    payload = json.loads(json.dumps(inspected.to_json()))  # plain JSON all the way
    assert payload["census"] == census.to_json()
    assert OpCensus.from_json(payload["census"]) == census
    assert payload["census"]["forward_memory_bytes"] == census.forward_memory_bytes == 4640
    assert payload["census"]["region_count"] == 3

    attention = AttentionCall(
        batch=2, heads=8, q_len=4, kv_len=6, head_dim=16, v_head_dim=8, causal=True, count=3
    )
    matmul = MatmulCall(batch=8, M=32, K=16, N=32, count=2)
    other = OpCensus(
        tokens=64,
        attention=(attention,),
        matmuls=(matmul,),
        regions=(),
        output_shape=None,
        complete=False,
        notes=("tracing stopped part-way",),
    )
    written = json.loads(json.dumps(other.to_json()))
    assert written["attention"][0]["forward_flops"] == attention.forward_flops
    assert OpCensus.from_json(written) == other

    without = ModelLayers("m.py", 1, 8, inspected.layers)
    assert without.census is None and without.to_json()["census"] is None


def test_tracing_stopped_part_way_keeps_what_it_saw(tmp_path):
    inspected = inspect_model(
        str(
            write_model(
                tmp_path,
                """
                class Model(nn.Module):
                    def __init__(self):
                        super().__init__()
                        self.a = nn.Linear(16, 16, bias=False)
                        self.b = nn.Linear(16, 16, bias=False)

                    def forward(self, x):
                        h = torch.relu(self.a(x))
                        if h.sum() > 0:  # data-dependent: meta tensors have no values
                            h = h * 2
                        return self.b(h)

                def build_model():
                    return Model()

                def example_inputs(batch, seq):
                    return (torch.randn(batch, seq, 16),)
                """,
            )
        ),
        batch=2,
        seq=8,
    )
    census = inspected.census
    assert not census.complete and census.output_shape is None
    assert any("tracing stopped part-way" in note for note in census.notes)
    # relu, sum and the comparison ran after a, one region; reading the comparison's value stopped the trace.
    # The region read a's output (2 x 8 x 16, 512 bytes) and nothing read its results after it: no writes.
    assert census.regions == (MemoryRegion(activation_bytes=2 * 8 * 16 * BF16, parameter_bytes=0, ops=3),)
    assert "stop" in inspected.notes[-1]


# ------------------------------------------------------------------------------ what the census cannot see


def test_notes_say_what_is_not_counted_as_fused_attention():
    vit = inspect_model(
        f"{MODELS_DIR / 'vit.py'}:build_model(depth=2, dim=64, heads=4, mlp_dim=128)", batch=2
    )
    census = vit.census
    # nn.MultiheadAttention calls sdpa inside F.multi_head_attention_forward, a Python torch function whose
    # body runs with every function mode popped: the math path is all the census sees, and it says so.
    assert census.attention == () and census.matmuls[0] == MatmulCall(
        batch=2 * 4, M=197, K=16, N=197, count=2
    )
    assert any("2 nn.MultiheadAttention call(s)" in note for note in census.notes)
    assert any("1 convolution(s)" in note for note in census.notes)  # the patch embedding


def test_hugging_face_eager_attention_is_noted():
    pytest.importorskip("transformers")
    census = inspect_model(str(MODELS_DIR / "tiny_llama_hf"), batch=1, seq=64).census
    assert census.complete and census.attention == () and census.matmuls
    assert any("eager attention" in note for note in census.notes)


def test_an_op_the_census_cannot_read_ends_the_census_not_the_trace(tmp_path, monkeypatch):
    import fp8advisor.inspect.census

    real = fp8advisor.inspect.census._classify

    def failing(func, gemm_ops):
        if func.overloadpacket.__name__ == "silu":
            raise ValueError("an op nobody foresaw")
        return real(func, gemm_ops)

    monkeypatch.setattr(fp8advisor.inspect.census, "_classify", failing)
    inspected = inspect_model(str(write_model(tmp_path, MLP)), batch=2, seq=8)
    assert len(inspected.layers) == 2  # the layer table is whole
    census = inspected.census
    assert not census.complete
    assert census.notes == (
        "the census gave up at aten.silu (ValueError: an op nobody foresaw): it covers the ops before it",
    )
    assert census.regions == (
        MemoryRegion(activation_bytes=2 * 8 * 16 * BF16 * 2, parameter_bytes=16 * BF16, ops=6),
    )


def test_an_attention_call_the_census_cannot_read_ends_the_census_not_the_trace(tmp_path, monkeypatch):
    import fp8advisor.inspect.census

    def failing(*args):
        raise ValueError("a layout nobody foresaw")

    monkeypatch.setattr(fp8advisor.inspect.census.CensusTracer, "_attention_call", failing)
    body = (
        ATTENTION
        + """
    def build_model():
        return Attention()

    def example_inputs(batch, seq):
        return (torch.randn(batch, seq, 64),)
    """
    )
    inspected = inspect_model(str(write_model(tmp_path, body)), batch=2, seq=32)
    assert [layer.fqn for layer in inspected.layers] == ["wq", "wk", "wv", "wo"]  # traced on past sdpa
    census = inspected.census
    assert not census.complete and census.attention == ()
    assert census.notes == (
        "the census gave up at F.scaled_dot_product_attention (ValueError: a layout nobody foresaw): "
        "it covers the ops before it",
    )
