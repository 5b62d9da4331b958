"""The step model's parallelism: what each GPU computes of the traced step, and the communication it waits
for.

The traced model is one data-parallel rank's micro-step (`StepConfig`: `batch` x `seq`, the sequence already
the rank's context-parallel chunk). Over the GPUs of that rank (tp x cp x pp of them) and the ranks
(dp_replicate x dp_shard), following torchtitan's device mesh [pp, dp_replicate, dp_shard, cp, tp]:

**Compute per GPU** (`ComputeShares`), each compute term of `fp8advisor.advice.step` times its share:
- Linear layers: priced at the TP plan's local shapes already (`fp8advisor.advice.tp_plan`, `linears`).
- Attention: heads split over tp; under cp each GPU's queries (its chunk, load-balanced for causal masks)
  attend to all cp chunks' keys: cp times the attention of the traced chunk: share cp / tp.
- Memory-bound regions and the loss: split over tp (sequence parallel shards the norms and residuals, the
  column/row split the activations between, loss parallel the vocabulary): share 1 / tp. Activation GEMMs
  (hand-written attention's q @ k^T and p @ v) are attention's: share cp / tp.
- Optimizer: AdamW over the GPU's shard of the parameters, 1 / (tp x dp_shard x cp) of them, and of its
  stage's 1/pp (FSDP shards over dp_shard x cp, as torchtitan folds cp into its FSDP mesh; HSDP replicas each
  hold a shard).
- Pipeline (pp > 1): each stage holds 1/pp of the model: every compute term / pp, and the 1F1B schedule's
  bubble, (pp - 1) / m of the stage's time (its compute and the TP / CP traffic that shows) with m = `batch`
  micro-batches of one sequence (torchtitan's default micro-batch size 1; torch's 1F1B schedule needs
  m >= pp). The TP and CP traffic is the stage's: 1/pp of the model's. Point-to-point activation transfers
  are not modelled.

**Communication** (`fsdp_communication`, `tp_communication`, `cp_communication`), every collective a ring
over its group (`fp8advisor.advice.topology`):
- FSDP over dp_shard x cp GPUs (ranks tp apart): the stage's parameter shard P / (tp x pp) all-gathered
  twice (forward; again for the backward, reshard after forward; once under pp, where torchtitan keeps them)
  at 2 bytes (1 for converted weights with `--float8-all-gather`), gradients reduce-scattered at
  `gradient_reduce_bytes`. HSDP (dp_replicate > 1): the gradient shard all-reduced over the replicas.
  Overlapped with the step (FSDP2 prefetches): only what exceeds the step's other time shows.
- TP with sequence parallel, per row-parallel layer (wo, w2): the all-gather of its column-parallel
  partners' input (M x K) and the reduce-scatter of its output (M x N), forward; the backward runs the
  opposite collective of each on the gradients; `--ac full` repeats the forward's. bf16, except under
  `float8_tensor_parallel` (torchao's `float8_tensor_parallel.py`): the forward all-gather of converted
  partners' input (e4m3) and the backward all-gather of a converted row-parallel layer's output gradient
  (e5m2), 1 byte each. A column-parallel layer outside the blocks (the head) adds its input's all-gather.
  Vanilla TP blocks the compute: all of it shows.
  `--async-tp` overlaps each collective with the GEMM it feeds or follows (all-gather with the partners'
  GEMM, reduce-scatter with the row-parallel GEMM; forward GEMMs forward, grad_input GEMMs backward): only
  the excess of each over its GEMM shows.
- Float8 casts under TP (`tp_cast_adjustment`, priced with torchao's cast byte counts,
  `fp8advisor.predict.roofline.cast_kernel_bytes`): the profile prices each layer's casts as in torchao's
  LayerNorm -> Linear -> Sigmoid block, where input and grad_output casts fuse into the ops beside them.
  With bf16 TP collectives (rowwise recipes) a column-parallel layer's input and a row-parallel layer's
  output gradient come from a collective, so their casts cannot fuse: the unfused cast's extra bytes are
  added. With float8 TP (tensorwise) the column-parallel partners share one cast of their input, made
  before the all-gather on 1/tp of the rows and fused into the sequence-parallel norm: each partner's own
  input cast is taken off and that one cast added.
- CP, per attention call (torch's ring attention, its default all-gather rotation): the K and V chunks of
  all cp ranks gathered forward (bf16, as the attention receives them: torchtitan repeats K and V to every
  head first), gathered again in the backward, and their gradients passed round in float32 (twice the
  bytes): 4 bf16-sized collectives, 5 with `--ac full`; overlapped with the attention's compute: the excess
  shows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fp8advisor.advice.topology import Group, Topology, collective_time_s
from fp8advisor.advice.tp_plan import COLWISE, ROWWISE, block_of, tp_style
from fp8advisor.predict.roofline import BYTES_PER_BF16, cast_kernel_bytes

#: A Linear's forward, grad_input and grad_weight GEMMs have equal FLOPs: each is a third of its time.
GEMM_SHARE = 1 / 3


@dataclass(frozen=True)
class ComputeShares:
    """Each non-Linear compute term's multiple on one GPU of the traced step's (the module docstring)."""

    attention: float  # fused attention and the activation GEMMs of hand-written attention
    elementwise: float  # memory-bound regions, loss
    optimizer_shard: int  # the parameters are divided by this (and by the stages, as every compute term)

    @classmethod
    def of(cls, config) -> ComputeShares:
        return cls(
            attention=config.cp / config.tp,
            elementwise=1 / config.tp,
            optimizer_shard=config.tp * config.dp_shard * config.cp,
        )


def check_pipeline(config, model_layers) -> None:
    """An `AdvisorError` for a pipeline no schedule runs: fewer micro-batches (`batch`, of one sequence each)
    than stages (torch's `Schedule1F1B` refuses them), or more stages than the model has blocks."""
    from fp8advisor.errors import AdvisorError

    if config.pp == 1:
        return
    if model_layers.batch < config.pp:
        raise AdvisorError(
            f"--pp {config.pp} needs at least {config.pp} micro-batches: --batch {model_layers.batch} gives "
            f"{model_layers.batch} (micro-batches of one sequence, torchtitan's default)",
            hint=f"use --batch {config.pp} or more, or a smaller --pp",
        )
    blocks = {block_of(layer.fqn) for layer in model_layers.layers} - {None}
    if len(blocks) < config.pp:
        raise AdvisorError(
            f"--pp {config.pp} stages but the model has {len(blocks)} blocks: a stage would hold none",
            hint=f"use at most --pp {max(1, len(blocks))}",
        )


def bubble_fraction(config, microbatches: int) -> float:
    """The 1F1B bubble over the stage's time: (pp - 1) / m."""
    return (config.pp - 1) / max(1, microbatches)


@dataclass(frozen=True)
class Communication:
    """One kind of traffic of the step on one GPU: all of it, what shows, and how it is computed."""

    name: str
    total_s: float
    exposed_s: float
    basis: str


def groups(config) -> dict[str, Group]:
    """The job's collective groups, by torchtitan's mesh order (tp innermost)."""
    return {
        "fsdp": Group("FSDP", config.dp_shard * config.cp, stride=config.tp),
        "replicas": Group(
            "HSDP replicas", config.dp_replicate, stride=config.tp * config.cp * config.dp_shard
        ),
        "tp": Group("TP", config.tp),
        "cp": Group("CP", config.cp, stride=config.tp),
    }


def fsdp_communication(
    timed: Sequence[Any], converted: frozenset[str], parameters: int, topology: Topology, config
) -> tuple[float, str]:
    """All FSDP (and HSDP) traffic of one micro-step on one GPU, before overlap, and its basis."""
    group, replicas = (groups(config)[name] for name in ("fsdp", "replicas"))
    local = parameters / (config.tp * config.pp)
    gathered = BYTES_PER_BF16 * local
    if config.float8_all_gather:
        converted_weights = sum(layer.K * layer.N for layer in timed if layer.fqn in converted)
        float8_weights = converted_weights / (config.tp * config.pp)  # this stage's TP shard of them
        gathered -= (BYTES_PER_BF16 - 1) * float8_weights  # one byte per element instead of two
    gathers = 1 if config.pp > 1 else 2
    seconds = gathers * collective_time_s("all_gather", gathered, group, topology)
    seconds += collective_time_s("reduce_scatter", config.gradient_reduce_bytes * local, group, topology)
    shard = config.gradient_reduce_bytes * local / max(1, group.size)
    seconds += collective_time_s("all_reduce", shard, replicas, topology)
    if group.size == 1 and replicas.size == 1:
        return 0.0, "no data-parallel sharding: no FSDP traffic"
    words = (
        f"{topology.link_words(group)}: all-gather x{gathers} of {local:.3g} parameters"
        + (" (converted weights in float8)" if config.float8_all_gather else "")
        + f" + reduce-scatter of their gradients at {config.gradient_reduce_bytes} bytes"
    )
    if replicas.size > 1:
        words += f"; {topology.link_words(replicas)}: all-reduce of the gradient shard"
    return seconds, words + "; overlapped with the step, only the excess shows"


def tp_communication(
    timed: Sequence[Any],
    converted: frozenset[str],
    linear_s: Callable[[Any], float],
    topology: Topology,
    config,
) -> Communication | None:
    """The TP collectives of one micro-step on one GPU, its pipeline stage's share (the module docstring);
    None without TP. `linear_s(layer)`: the layer's in-step forward+backward seconds (for async TP's
    overlap, collective by collective)."""
    if config.tp == 1:
        return None
    group = groups(config)["tp"]
    passes = 2 if config.ac.value == "full" else 1  # forward collectives (a full recompute runs them again)
    total = exposed = 0.0
    collectives = 0

    def add(buffer_bytes: float, overlap_s: float, times: int = 1) -> None:
        nonlocal total, exposed, collectives
        kind = "all_gather"  # all-gather and reduce-scatter move the same bytes in a ring
        seconds = collective_time_s(kind, buffer_bytes, group, topology)
        total += times * seconds
        exposed += times * (max(0.0, seconds - overlap_s) if config.async_tp else seconds)
        collectives += times

    for row, partners in _tp_pairs(timed):
        rows = row.M * row.calls
        float8 = config.float8_tensor_parallel and any(p.fqn in converted for p in partners)
        gather_bytes = rows * partners[0].K * (1 if float8 else BYTES_PER_BF16) if partners else 0.0
        partners_s = sum(linear_s(p) for p in partners) * GEMM_SHARE
        row_s = linear_s(row) * GEMM_SHARE
        if partners:
            add(gather_bytes, partners_s, passes)  # forward: all-gather of the partners' input
            add(rows * partners[0].K * BYTES_PER_BF16, partners_s)  # backward: its gradient reduce-scattered
        add(rows * row.N * BYTES_PER_BF16, row_s, passes)  # forward: reduce-scatter of the output
        float8_gradient = config.float8_tensor_parallel and row.fqn in converted
        add(rows * row.N * (1 if float8_gradient else BYTES_PER_BF16), row_s)  # backward: output gradient
    for head in (layer for layer in timed if tp_style(layer.fqn) == COLWISE and block_of(layer.fqn) is None):
        rows = head.M * head.calls
        float8 = config.float8_tensor_parallel and head.fqn in converted
        add(rows * head.K * (1 if float8 else BYTES_PER_BF16), linear_s(head) * GEMM_SHARE, passes)
        add(rows * head.K * BYTES_PER_BF16, linear_s(head) * GEMM_SHARE)
    if not collectives:
        return None
    how = "overlapped with their GEMMs (async TP): the excess shows" if config.async_tp else "all show"
    stages = config.pp  # one stage holds 1/pp of the blocks
    return Communication(
        "tp_communication",
        total / stages,
        exposed / stages,
        f"{collectives} all-gathers / reduce-scatters of activations (sequence parallel), "
        f"{topology.link_words(group)}; {how}",
    )


def _tp_pairs(timed: Sequence[Any]) -> list[tuple[Any, list[Any]]]:
    """Each row-parallel layer of a block with the column-parallel layers that feed it: those under the same
    parent module (`attention.wo` with `attention.wq`/`wk`/`wv` or `attention.qkv_linear.wqkv`;
    `feed_forward.w2` with `w1` and `w3`, whatever their registration order; `mlp.down_proj` with
    `gate_proj` and `up_proj`; `mlp.linear_fc2` with `linear_fc1`)."""
    columns: dict[str, list[Any]] = {}  # block -> its column-parallel layers
    rows = []
    for layer in timed:
        block, style = block_of(layer.fqn), tp_style(layer.fqn)
        if block is not None and style == COLWISE:
            columns.setdefault(block, []).append(layer)
        elif block is not None and style == ROWWISE:
            rows.append((block, layer))
    pairs = []
    for block, layer in rows:
        parent = layer.fqn.rsplit(".", 1)[0] + "."
        pairs.append((layer, [column for column in columns.get(block, []) if column.fqn.startswith(parent)]))
    return pairs


def tp_cast_adjustment(
    timed: Sequence[Any], converted: frozenset[str], config, memory_time_s: Callable[[float], float]
) -> tuple[float, str]:
    """Kernel seconds the float8 casts cost under TP beyond (or, negative, short of) what the profile priced
    (the module docstring), and their basis; 0 without a float8 layer. `memory_time_s(bytes)`: seconds to
    move those bytes."""
    recipe = config.float8_recipe
    if recipe is None or not converted:
        return 0.0, "no float8 layer: no casts"
    if recipe.is_mx:  # torchao's MX casts never fuse: the profile priced them unfused already
        return 0.0, f"{recipe.value} casts under TP {config.tp}: unfused everywhere, as priced"

    def cast_bytes(role: str, numel: float, fused: bool) -> float:
        return float(sum(cast_kernel_bytes(role, int(numel), recipe, fused=fused)))

    extra = 0.0
    for row, partners in _tp_pairs(timed):
        rows = row.M * row.calls
        into = [p for p in partners if p.fqn in converted]
        if config.float8_tensor_parallel:
            if into:
                numel = rows * into[0].K
                extra += cast_bytes("input", numel / config.tp, True)
                extra -= sum(cast_bytes("input", rows * p.K, True) for p in into)
            continue
        for layer in into:
            extra += cast_bytes("input", rows * layer.K, False) - cast_bytes("input", rows * layer.K, True)
        if row.fqn in converted:
            numel = rows * row.N
            extra += cast_bytes("grad_output", numel, False) - cast_bytes("grad_output", numel, True)
    seconds = memory_time_s(abs(extra)) * (1 if extra > 0 else -1) if extra else 0.0
    how = (
        "one shared input cast per column-parallel group, before the float8 all-gather (saved)"
        if config.float8_tensor_parallel
        else "inputs and output gradients arriving from bf16 collectives: unfused casts (added)"
    )
    return seconds, f"{recipe.value} casts under TP {config.tp}: {how}, {extra / 1e9:+.3g} GB"


def cp_communication(census, attention_s: float, topology: Topology, config) -> Communication | None:
    """The CP exchange of K and V of one micro-step on one GPU, its pipeline stage's share (the module
    docstring); None without CP. `attention_s`: the stage's in-step attention seconds it overlaps with."""
    if config.cp == 1 or not census.attention:
        return None
    group = groups(config)["cp"]
    collectives = 5 if config.ac.value == "full" else 4
    total = 0.0
    for call in census.attention:
        kv = call.batch * call.kv_len * call.heads / config.tp * (call.head_dim + call.v_head_dim)
        total += (
            call.count
            * collectives
            * collective_time_s("all_gather", BYTES_PER_BF16 * kv * config.cp, group, topology)
        )
    total /= config.pp  # one stage holds 1/pp of the attention calls
    return Communication(
        "cp_communication",
        total,
        max(0.0, total - attention_s),
        f"K and V of {sum(c.count for c in census.attention)} attention call(s) gathered over the CP group "
        f"({collectives} collectives each), {topology.link_words(group)}; overlapped with attention "
        "(ring attention): the excess shows",
    )


__all__ = [
    "GEMM_SHARE",
    "Communication",
    "ComputeShares",
    "bubble_fraction",
    "check_pipeline",
    "cp_communication",
    "fsdp_communication",
    "groups",
    "tp_cast_adjustment",
    "tp_communication",
]
