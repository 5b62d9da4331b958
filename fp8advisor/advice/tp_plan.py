"""The tensor-parallel plan: which dimension of each Linear layer a framework splits over a TP group's GPUs.

A column-parallel layer splits its output features N (each GPU multiplies M x K by K x N/tp), a row-parallel
one its input features K (M x K/tp by K/tp x N, then a reduce-scatter of the partial outputs). The frameworks'
own plans, matched by the last part of a layer's FQN (`TP_PLAN`):

- torchtitan Llama 3 (`torchtitan/models/llama3/infra/parallelize.py::apply_tp` in 0.2; 0.3's
  `models/common/decoder_sharding.py`: `colwise_config` / `rowwise_config`): `attention.wq`, `wk`, `wv` (0.3:
  the fused `qkv_linear.wqkv`, or `wq` + `wkv`), `feed_forward.w1`, `w3` column-wise; `attention.wo`,
  `feed_forward.w2` row-wise; the head `output` (0.3: `lm_head`) column-wise; norms sequence-parallel.
- Hugging Face names (transformers' `base_model_tp_plan` of Llama-style models, which torchtitan's HF models
  follow): `q_proj`, `k_proj`, `v_proj`, `gate_proj`, `up_proj` colwise; `o_proj`, `down_proj` rowwise;
  `lm_head` colwise.
- Megatron-Core (`ColumnParallelLinear` / `RowParallelLinear` in `megatron/core/tensor_parallel/layers.py`,
  as the GPT layer specs use them): `linear_qkv`, `linear_fc1`, `output_layer` column-parallel;
  `linear_proj`, `linear_fc2` row-parallel.

A layer no plan names (a model with other names) is split neither way for certain: the advice then judges it
on the slower of the two splits, as before (`fp8advisor.advice.linears.tensor_parallel_slices`), and the step
model counts no TP collective for it.
"""

from __future__ import annotations

COLWISE, ROWWISE = "colwise", "rowwise"

#: Last FQN part -> how the frameworks' plans split that layer.
TP_PLAN: dict[str, str] = {
    # torchtitan 0.2 / 0.3 Llama 3
    "wq": COLWISE,
    "wk": COLWISE,
    "wv": COLWISE,
    "wkv": COLWISE,
    "wqkv": COLWISE,
    "w1": COLWISE,
    "w3": COLWISE,
    "output": COLWISE,
    "wo": ROWWISE,
    "w2": ROWWISE,
    # Hugging Face
    "q_proj": COLWISE,
    "k_proj": COLWISE,
    "v_proj": COLWISE,
    "gate_proj": COLWISE,
    "up_proj": COLWISE,
    "lm_head": COLWISE,
    "o_proj": ROWWISE,
    "down_proj": ROWWISE,
    # Megatron-Core
    "linear_qkv": COLWISE,
    "linear_fc1": COLWISE,
    "output_layer": COLWISE,
    "linear_proj": ROWWISE,
    "linear_fc2": ROWWISE,
}


def tp_style(fqn: str) -> str | None:
    """`COLWISE`, `ROWWISE` or None (no plan names this layer) for a Linear layer's FQN."""
    return TP_PLAN.get(fqn.rsplit(".", 1)[-1])


def block_of(fqn: str) -> str | None:
    """The transformer block a layer belongs to (its FQN up to the last numeric part), None outside blocks."""
    parts = fqn.split(".")
    digits = [i for i, part in enumerate(parts) if part.isdigit()]
    return ".".join(parts[: digits[-1] + 1]) if digits else None


__all__ = ["COLWISE", "ROWWISE", "TP_PLAN", "block_of", "tp_style"]
