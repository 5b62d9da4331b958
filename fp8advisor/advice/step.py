"""The time of one training step on one GPU, term by term, for bf16 and for any set of float8 layers.

Users compare step time and tokens per second, not Linear time. A step is modelled as the sum of the GPU
time of what it runs, each term priced from the traced forward (`fp8advisor.inspect.records.ModelLayers`, with
its `fp8advisor.inspect.census.OpCensus`) by a named formula and constant:

- **Linear layers**: the profile's figures, per layer and call (`fp8advisor.advice.records.LayerAdvice`):
  bf16 forward+backward time (the profile's measured kernel times where it has them, else torchao's
  roofline), and that time over the predicted float8 speedup for a converted layer. Provenance: the
  profile's. The expert Linears of a ModuleList of experts are Linear layers here (decided as their group).
- **Other GEMM layers**: the layers the forward multiplies that have no prediction (not convertible: K, N or M
  not a multiple of 16, an overridden forward; a bare weight multiplied without its Linear; a router), always
  bf16: torchao's GEMM roofline, forward plus two backward GEMMs per call (`OTHER_GEMMS`, a term only where
  there are such layers). Without it a step of 8 tokens, where no Linear can convert, would leave out every
  Linear. The grouped GEMMs of routed experts are theirs (below).
- **Routed experts** (grouped 3-D weights, `fp8advisor.advice.records.ExpertAdvice`): each group's grouped
  GEMMs' forward+backward time at its balanced per-expert M
  (`fp8advisor.predict.speedup.predict_expert_group`), per GPU: with expert parallelism P the E / P local
  experts at tokens x top_k x P / E rows each, bf16, or float8 in a strategy that converts the group (the
  advice when it does; "every convertible layer"; never torchao's auto filter, which sees Linear modules
  only). The census does not price them: GEMMs on parameters are the recorder's layers, not census matmuls,
  so nothing is counted twice. Only present for MoE models.
- **Attention**: forward FLOPs of each fused attention call (`AttentionCall.forward_flops`; causal counts
  only the unmasked scores), backward `ATTENTION_BACKWARD_FLOPS` times that, at `ATTENTION_PEAK_FRACTION` of
  the GPU's dense bf16 peak. Other activation-by-activation GEMMs (hand-written attention) at torchao's GEMM
  roofline, forward plus two backward GEMMs.
- **Memory-bound ops** (norms, activations, residual adds, rotary, casts: every fused region of the census):
  the bytes each region moves at torchao's achievable bandwidth, at least one kernel floor per region;
  backward `MEMORY_BACKWARD_FACTOR` times the forward.
- **Loss**: cross-entropy over the output's logits, `LOSS_BYTES_PER_LOGIT` bytes per logit.
- **Activation checkpointing** (`ac`): `selective` is torchtitan's per-op policy (in each block the output of
  every second Linear, in module order, and every memory-bound op are recomputed; attention is saved);
  `full` recomputes each block's whole forward. A Linear's forward is `LINEAR_FORWARD_SHARE` of its time.
- **Optimizer**: AdamW over this GPU's shard of the parameters, memory-bound, `ADAMW_TENSORS_MOVED` tensors
  of `optimizer_state_bytes` per parameter, once per `grad_accum` steps.
- **Parallelism and communication** (`fp8advisor.advice.step_parallel`): each GPU's share of the terms
  above under tensor, context and pipeline parallelism, and the traffic of FSDP / HSDP, TP and CP over the
  job's GPU system (`fp8advisor.advice.topology`), each with what the step's compute hides of it.

Every term above is a GPU kernel-time model. A real step runs slower than its kernels laid end to end (clock
limits under load, communication kernels sharing the SMs, launch gaps, imperfect fusion): all compute terms
are divided by one **in-step efficiency** per GPU family (`fp8advisor.advice.step_calibration`), the only
constant fitted, each to one published bf16 throughput of that family (`data/anchors/step_calibration.json`
names which; a family without one takes its architecture's, GB200 and B300 B200's, H200 H100's, else
H100's). Dividing every compute term by the same number leaves a predicted *speedup* untouched except where
communication shows (the communication terms are not divided): the published speedups are checks of the
model, not inputs to it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from fp8advisor.advice.step_calibration import Calibration
from fp8advisor.advice.step_parallel import (
    Communication,
    ComputeShares,
    bubble_fraction,
    cp_communication,
    fsdp_communication,
    tp_cast_adjustment,
    tp_communication,
)
from fp8advisor.advice.step_terms import (
    MODELLED,
    OTHER_GEMMS,
    Term,
    expert_terms,
    linear_terms,
    other_gemm_terms,
    speedups_provenance,
    weakest_or_modelled,
)
from fp8advisor.advice.topology import GpuSystem, Topology, system_of
from fp8advisor.advice.tp_plan import block_of
from fp8advisor.errors import AdvisorError
from fp8advisor.gpus import GpuSpecs
from fp8advisor.inspect.records import ExpertForm
from fp8advisor.paths import DATA_DIR
from fp8advisor.predict.roofline import BYTES_PER_BF16
from fp8advisor.recipes import Recipe
from fp8advisor.request import check_degree, check_positive_int

#: FlashAttention-2 on an H100 SXM5 reaches "up to 335 TFLOPs/s" forward+backward at head dimension 128
#: (Dao 2023, FlashAttention-2, section 4.1): 335/989 of the dense bf16 peak, used as that fraction of any
#: GPU's peak (torch's SDPA runs FlashAttention-2 kernels on Hopper).
ATTENTION_PEAK_FRACTION = 335e12 / 989e12
#: Backward FLOPs of fused attention over its forward FLOPs: 5 matmuls (with the recomputation of the scores)
#: against 2 (the same paper's FLOP count, also FlashAttention-3's).
ATTENTION_BACKWARD_FLOPS = 2.5
#: A fused region's backward reads the incoming gradient and the saved inputs and writes the outgoing
#: gradient: about twice the forward's bytes (modelled).
MEMORY_BACKWARD_FACTOR = 2.0
#: Cross-entropy over bf16 logits under torch.compile: the forward reads them once (log-sum-exp in float32
#: registers), the backward reads them again and writes their gradient: 3 x 2 bytes per logit (modelled).
LOSS_BYTES_PER_LOGIT = 3 * BYTES_PER_BF16
#: AdamW (torch's fused/foreach) reads parameter, gradient and both moments and writes parameter and both
#: moments: 7 tensors of the state's precision per parameter.
ADAMW_TENSORS_MOVED = 7
#: A Linear's forward is one of its three GEMMs of equal FLOPs (output, grad_input, grad_weight).
LINEAR_FORWARD_SHARE = 1 / 3

ANCHORS_PATH = DATA_DIR / "anchors" / "published_step_results.json"


class Checkpointing(str, Enum):
    """Activation checkpointing: what the backward recomputes (`--ac`)."""

    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class StepConfig:
    """How the step runs, beyond the model: parallelism, where the GPUs sit, recomputation, the optimizer.

    `world_size` is every GPU of the job; the FSDP degree is what the other degrees leave of it
    (`dp_shard`, as torchtitan's `data_parallel_shard_degree = -1`). `batch` x `seq` of the traced model is
    one data-parallel rank's micro-step (a TP / CP / PP group's); its sequence is already the rank's CP chunk.
    """

    world_size: int = 1  # GPUs in the job
    ac: Checkpointing = Checkpointing.NONE
    grad_accum: int = 1  # micro-steps per optimizer step; a "step" here is one micro-step
    float8_all_gather: bool = False  # FSDP all-gathers converted weights in float8 (tensorwise only)
    optimizer_state_bytes: int = 4  # float32 parameters, gradients and moments (FSDP2 mixed precision)
    gradient_reduce_bytes: int = 4  # FSDP2 reduces gradients in float32 (torchtitan's default)
    tp: int = 1  # tensor parallel (with sequence parallel)
    cp: int = 1  # context parallel
    pp: int = 1  # pipeline parallel (1F1B)
    dp_replicate: int = 1  # HSDP replicas
    async_tp: bool = False  # TP collectives overlapped with their GEMMs (torchtitan's async TP)
    #: the TP plan's activation all-gathers move converted layers' inputs in float8 (torchtitan 0.2's
    #: Float8ColwiseParallel / PrepareFloat8ModuleInput, used with tensorwise)
    float8_tensor_parallel: bool = False
    float8_recipe: Recipe | None = None  # the recipe of the converted layers (`for_recipe`)
    gpus_per_node: int | None = None  # None: the GPU system's NVLink domain
    inter_node_gbps: float | None = None  # None: the GPU system's network, per GPU

    @property
    def non_data_parallel(self) -> int:
        """GPUs one data-parallel rank spans: tp x cp x pp (torchtitan divides its tokens/s by this)."""
        return self.tp * self.cp * self.pp

    @property
    def dp_shard(self) -> int:
        """The FSDP degree: world_size / (dp_replicate x tp x cp x pp)."""
        return max(1, self.world_size // (self.dp_replicate * self.non_data_parallel))

    def check(self, recipe: Recipe | None) -> None:
        """An `AdvisorError` for a configuration no trainer runs: a degree that is no parallel degree
        (`request.check_degree`), degrees whose product does not divide `--world-size`, a `--grad-accum`
        below 1, float8 all-gather without tensorwise, or async TP without TP."""
        for option, value in (
            ("--world-size", self.world_size),
            ("--tp", self.tp),
            ("--cp", self.cp),
            ("--pp", self.pp),
            ("--dp-replicate", self.dp_replicate),
        ):
            check_degree(option, value)
        check_positive_int("--grad-accum", self.grad_accum, hint="micro-steps per optimizer step, e.g. 1")
        others = self.dp_replicate * self.non_data_parallel
        if self.world_size % others:
            raise AdvisorError(
                f"--world-size {self.world_size} is not a multiple of --dp-replicate x --tp x --cp x --pp = "
                f"{others}: the FSDP degree would not be whole",
                hint=f"use a --world-size that {others} divides (or --nodes x --gpus-per-node), "
                f"e.g. {others * 8}",
            )
        if self.float8_all_gather and recipe not in (None, Recipe.TENSORWISE):
            raise AdvisorError(
                f"float8 all-gather needs the tensorwise recipe, not {recipe.value}",
                hint="drop --float8-all-gather, or use --recipe tensorwise",
            )
        if self.async_tp and self.tp == 1:
            raise AdvisorError(
                "--async-tp needs tensor parallelism", hint="add --tp N (N > 1), or drop --async-tp"
            )

    def for_recipe(self, recipe: Recipe | None, *, float8_all_gather: bool | None = None) -> StepConfig:
        """This set-up as a run of `recipe` trains: float8 all-gather (FSDP) only where the recipe has it
        (tensorwise; `float8_all_gather` None keeps this set-up's wish), and TP's activation all-gathers in
        float8 for tensorwise (torchtitan 0.2 switches to torchao's Float8ColwiseParallel /
        PrepareFloat8ModuleInput when float8 is on and the recipe is not rowwise)."""
        tensorwise = recipe is Recipe.TENSORWISE
        wish = self.float8_all_gather if float8_all_gather is None else float8_all_gather
        return replace(
            self,
            float8_all_gather=wish and tensorwise,
            float8_tensor_parallel=tensorwise and self.tp > 1,
            float8_recipe=recipe,
        )

    def to_json(self) -> dict:
        return {
            "world_size": self.world_size,
            "dp_shard": self.dp_shard,
            "dp_replicate": self.dp_replicate,
            "tp": self.tp,
            "cp": self.cp,
            "pp": self.pp,
            "async_tp": self.async_tp,
            "float8_tensor_parallel": self.float8_tensor_parallel,
            "float8_recipe": None if self.float8_recipe is None else self.float8_recipe.value,
            "gpus_per_node": self.gpus_per_node,
            "inter_node_gbps": self.inter_node_gbps,
            "ac": self.ac.value,
            "grad_accum": self.grad_accum,
            "float8_all_gather": self.float8_all_gather,
            "optimizer_state_bytes": self.optimizer_state_bytes,
            "gradient_reduce_bytes": self.gradient_reduce_bytes,
        }


@dataclass(frozen=True)
class StepGpu:
    """The GPU the step runs on: torchao's roofline constants, and the system it is sold in (its links)."""

    specs: GpuSpecs
    system: GpuSystem

    @classmethod
    def of(cls, specs: GpuSpecs) -> StepGpu:
        return cls(specs, system_of(specs.family))

    def topology(self, config: StepConfig) -> Topology:
        """The system with the set-up's overrides (`--gpus-per-node`, `--inter-node-gbps`)."""
        return Topology.of(self.system, config.gpus_per_node, config.inter_node_gbps)

    @property
    def family(self) -> str:
        return self.specs.family

    def memory_time_s(self, num_bytes: float, kernels: float = 1.0) -> float:
        """Bytes at the achievable bandwidth, at least `kernels` kernel floors."""
        bandwidth = self.specs.bandwidth_bytes_per_s * self.specs.bandwidth_efficiency
        return max(num_bytes / bandwidth, kernels * self.specs.kernel_floor_s)


@dataclass(frozen=True)
class StepPrediction:
    """The predicted step of one strategy (bf16, this advice, every convertible layer, ...)."""

    name: str
    label: str
    converted: int  # layers in float8
    tokens: int  # tokens per GPU per step
    terms: tuple[Term, ...]
    communication_s: float = 0.0  # all FSDP traffic, overlapped or not
    speedup_provenance: str | None = None  # of the float8 layers' predicted speedups (None: none converted)
    expert_groups: int = 0  # groups of routed (grouped) experts in float8

    @property
    def step_s(self) -> float:
        return sum(term.seconds for term in self.terms)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.step_s if self.step_s > 0 else 0.0  # no kernel floor and nothing to run

    def speedup_over(self, baseline: StepPrediction) -> float:
        """`baseline`'s step time over this one's (1.0 when both are empty: never a NaN or an infinity)."""
        return baseline.step_s / self.step_s if self.step_s > 0 else 1.0

    def term(self, name: str) -> Term:
        return next(term for term in self.terms if term.name == name)

    def to_json(self, baseline: StepPrediction | None = None) -> dict:
        step_s = self.step_s
        return {
            "label": self.label,
            "converted": self.converted,
            "expert_groups_in_float8": self.expert_groups,
            "step_s": float(f"{step_s:.6g}"),
            "tokens_per_s_per_gpu": float(f"{self.tokens_per_s:.6g}"),
            "step_speedup": round(self.speedup_over(baseline), 4) if baseline is not None else None,
            "communication_s": float(f"{self.communication_s:.6g}"),
            "terms": [term.to_json(step_s) for term in self.terms],
        }


# --- the terms ----------------------------------------------------------------------------------------------


def _block_linears(layers: Sequence[Any]) -> list[str]:
    """Linear layers recomputed by torchtitan's per-op selective AC: in each block (an FQN with a numeric
    part, e.g. `layers.3.attention.wq`), every second one in module order."""
    position: dict[str, int] = {}
    chosen = []
    for layer in layers:
        block = block_of(layer.fqn)
        if block is None:
            continue  # outside the blocks: embedding, head
        position[block] = position.get(block, 0) + 1
        if position[block] % 2 == 0:
            chosen.append(layer.fqn)
    return chosen


def _in_blocks(fqn: str) -> bool:
    return block_of(fqn) is not None


@dataclass(frozen=True)
class _ComputeParts:
    """Kernel times (before the in-step efficiency) of everything but the Linear layers and communication."""

    attention_s: float
    attention_forward_s: float
    matmul_s: float
    matmul_forward_s: float
    memory_s: float
    memory_forward_s: float
    loss_s: float
    optimizer_s: float
    basis: dict[str, str]


def _compute_parts(census, parameters: int, gpu: StepGpu, config: StepConfig, token_scale: float):
    """The non-Linear compute terms from the census, at `token_scale` times the traced token count, each at
    its share on one GPU under the set-up's parallelism (`step_parallel.ComputeShares`)."""
    from fp8advisor.predict.roofline import gemm_time_s

    specs = gpu.specs
    shares = ComputeShares.of(config)
    attention_rate = specs.bf16_flops * ATTENTION_PEAK_FRACTION
    attention_forward_flops = (
        sum(call.forward_flops * call.count for call in census.attention) * token_scale * shares.attention
    )
    attention_calls = sum(call.count for call in census.attention)
    attention_forward = max(attention_forward_flops / attention_rate, attention_calls * specs.kernel_floor_s)
    attention = attention_forward + max(
        ATTENTION_BACKWARD_FLOPS * attention_forward_flops / attention_rate,
        attention_calls * specs.kernel_floor_s,
    )

    matmul_forward = 0.0
    for call in census.matmuls:
        # `batch` GEMMs priced as one of batch x M rows: the same FLOPs and rows, but the K x N operand
        # counted once (a batched GEMM reads one per batch): an undercount of bytes where it is memory-bound
        rows = max(1, round(call.batch * call.M * token_scale))
        matmul_forward += call.count * gemm_time_s(rows, call.K, call.N, "bf16", specs)
    matmul_forward *= shares.attention  # hand-written attention's GEMMs
    matmul = 3 * matmul_forward  # forward, and the two GEMMs of its backward

    memory_forward = 0.0
    for region in census.regions:
        region_bytes = region.activation_bytes * token_scale + region.parameter_bytes
        memory_forward += region.count * gpu.memory_time_s(region_bytes * shares.elementwise)
    memory = memory_forward * (1 + MEMORY_BACKWARD_FACTOR)

    logits = math.prod(census.output_shape) * token_scale * shares.elementwise if census.output_shape else 0
    loss = gpu.memory_time_s(LOSS_BYTES_PER_LOGIT * logits, kernels=2) if logits else 0.0

    shard = parameters / shares.optimizer_shard
    optimizer = (
        gpu.memory_time_s(ADAMW_TENSORS_MOVED * config.optimizer_state_bytes * shard) / config.grad_accum
    )
    bandwidth = f"{specs.bandwidth_bytes_per_s * specs.bandwidth_efficiency / 1e12:.3g} TB/s"
    basis = {
        "attention": (
            f"{attention_calls} fused call(s), {attention_forward_flops:.3g} forward FLOPs on this GPU x "
            f"(1 + {ATTENTION_BACKWARD_FLOPS}) at {attention_rate / 1e12:.0f} TFLOP/s "
            f"(FlashAttention-2 on H100: 335/989 of the bf16 peak)"
        ),
        "matmul": f"{sum(c.count for c in census.matmuls)} activation GEMM(s) at torchao's GEMM roofline, x3",
        "memory": (
            f"{sum(r.count for r in census.regions)} fused region(s), forward bytes at {bandwidth} "
            f"(torchao's achievable bandwidth), backward x{MEMORY_BACKWARD_FACTOR:g}"
        ),
        "loss": f"cross-entropy over {logits:.3g} logits x {LOSS_BYTES_PER_LOGIT} bytes at {bandwidth}",
        "optimizer": (
            f"AdamW over {shard:.3g} parameters (1/{shares.optimizer_shard} shard) x {ADAMW_TENSORS_MOVED} "
            f"tensors x {config.optimizer_state_bytes} bytes at {bandwidth}; per {config.grad_accum} step(s)"
        ),
    }
    return _ComputeParts(
        attention, attention_forward, matmul, matmul_forward, memory, memory_forward, loss, optimizer, basis
    )


def predict_step(
    name: str,
    label: str,
    model_layers,
    layer_advice: Sequence[Any],
    converted: Iterable[str],
    gpu: StepGpu,
    config: StepConfig,
    calibration: Calibration,
    *,
    token_scale: float = 1.0,
    experts: Sequence[Any] = (),
    converted_experts: Iterable[str] = (),
) -> StepPrediction:
    """The predicted step when exactly `converted` (FQNs) and the expert groups `converted_experts`
    (`ExpertAdvice.group`) run in float8.

    `layer_advice`: `LayerAdvice` of every layer at this token count (their bf16/float8 times); `experts`:
    the `ExpertAdvice` of every group at this token count (only grouped ones are priced here: a ModuleList's
    expert Linears are in `layer_advice`); the census and parameter count come from `model_layers`;
    `token_scale` prices the census at that multiple of the traced tokens (the Linear and expert times must
    already be at that size).
    """
    converted = frozenset(converted)
    converted_experts = frozenset(converted_experts)
    grouped = [e for e in experts if e.form == ExpertForm.GROUPED.value and e.predicted_speedup is not None]
    experts_float8 = [e for e in grouped if e.group in converted_experts]
    experts_bf16 = [e for e in grouped if e.group not in converted_experts]
    census = model_layers.census
    if census is None:
        raise AdvisorError("the step model needs the op census of the traced forward; none was recorded")
    parameters = model_layers.parameter_count
    timed = [layer for layer in layer_advice if layer.counts_in_linear_time]
    in_float8 = [layer for layer in timed if layer.fqn in converted]
    in_bf16 = [layer for layer in timed if layer.fqn not in converted]

    parts = _compute_parts(census, parameters, gpu, config, token_scale)
    recompute, recompute_words, recomputed_fqns = _recompute(
        config, parts, timed, converted, grouped, converted_experts
    )
    efficiency = calibration.in_step_efficiency
    stages = config.pp

    def scaled(seconds: float) -> float:
        return seconds / efficiency / stages

    in_step = f"; / in-step efficiency {efficiency:.3g} ({calibration.fitted_to})" + (
        f"; one of {stages} pipeline stages" if stages > 1 else ""
    )
    linear_provenance = weakest_or_modelled(
        p for layer in timed for p in (layer.provenance, layer.bf16_provenance) if p
    )
    terms = [
        *linear_terms(in_float8, in_bf16, scaled, in_step),
        *other_gemm_terms(model_layers, timed, gpu, scaled, in_step),
        *expert_terms(experts_float8, experts_bf16, scaled, in_step),
        Term("attention", scaled(parts.attention_s), MODELLED, parts.basis["attention"] + in_step),
        Term("matmul", scaled(parts.matmul_s), MODELLED, parts.basis["matmul"] + in_step),
        Term("memory_bound", scaled(parts.memory_s), MODELLED, parts.basis["memory"] + in_step),
        Term("loss", scaled(parts.loss_s), MODELLED, parts.basis["loss"] + in_step),
        Term(
            "recompute",
            scaled(recompute),
            linear_provenance if recomputed_fqns else MODELLED,
            (f"--ac {config.ac.value}: " + ", ".join(recompute_words) if recompute_words else "--ac none")
            + in_step,
        ),
        Term("optimizer", scaled(parts.optimizer_s), MODELLED, parts.basis["optimizer"] + in_step),
    ]
    if config.tp > 1:  # in every strategy's step alike, zero where nothing is in float8
        seconds, basis = tp_cast_adjustment(timed, converted, config, gpu.memory_time_s)
        terms.append(Term("tp_float8_casts", scaled(seconds), MODELLED, basis + in_step))

    def linear_s(layer) -> float:  # in-step seconds of one Linear (not a stage's share), for async TP
        return (layer.float8_time_s if layer.fqn in converted else layer.bf16_time_s) / efficiency

    communication = _communication_terms(
        terms, model_layers, timed, converted, linear_s, scaled(parts.attention_s), gpu, config
    )
    tokens = max(1, round(model_layers.tokens * token_scale / (config.tp * config.pp)))
    speedups = speedups_provenance(in_float8, experts_float8)
    return StepPrediction(
        name, label, len(in_float8), tokens, tuple(terms), communication, speedups, len(experts_float8)
    )


def _communication_terms(
    terms: list[Term], model_layers, timed, converted, linear_s, attention_s: float, gpu: StepGpu, config
) -> float:
    """Append the pipeline bubble and the communication terms to `terms` (what shows of each); return all the
    step's communication before overlap (`StepPrediction.communication_s`)."""
    topology = gpu.topology(config)
    parallel: list[Communication] = [
        c
        for c in (
            tp_communication(timed, converted, linear_s, topology, config),
            cp_communication(model_layers.census, attention_s, topology, config),
        )
        if c is not None
    ]
    terms.extend(Term(c.name, c.exposed_s, MODELLED, c.basis) for c in parallel)
    if config.pp > 1:  # the bubble idles the stage for a share of everything on its critical path
        stage_s = sum(term.seconds for term in terms)
        fraction = bubble_fraction(config, model_layers.batch)
        terms.append(
            Term(
                "pipeline_bubble",
                stage_s * fraction,
                MODELLED,
                f"1F1B over {config.pp} stages, {model_layers.batch} micro-batch(es) of one sequence: "
                f"(pp - 1) / m = {fraction:.3g} of the stage's time",
            )
        )
    fsdp_s, fsdp_basis = fsdp_communication(timed, converted, model_layers.parameter_count, topology, config)
    busy_s = sum(term.seconds for term in terms)
    terms.append(Term("communication", max(0.0, fsdp_s - busy_s), MODELLED, fsdp_basis))
    return fsdp_s + sum(c.total_s for c in parallel)


def _recompute(
    config: StepConfig,
    parts: _ComputeParts,
    timed: Sequence[Any],
    converted: frozenset[str],
    grouped: Sequence[Any],
    converted_experts: frozenset[str],
) -> tuple[float, list[str], set[str]]:
    """What activation checkpointing recomputes: its kernel seconds, the words that say what, and the FQNs of
    the Linear layers it recomputes (of `timed`; `grouped`: the priced groups of grouped experts)."""

    def linear_s(layer) -> float:
        return layer.float8_time_s if layer.fqn in converted else layer.bf16_time_s

    recomputed_fqns: set[str] = set()
    if config.ac is Checkpointing.SELECTIVE:
        recomputed_fqns = set(_block_linears(timed))
    elif config.ac is Checkpointing.FULL:
        recomputed_fqns = {layer.fqn for layer in timed if _in_blocks(layer.fqn)}
    recompute = LINEAR_FORWARD_SHARE * sum(linear_s(layer) for layer in timed if layer.fqn in recomputed_fqns)
    recompute_words = [f"the forward of {len(recomputed_fqns)} Linear layer(s)"] if recomputed_fqns else []
    if config.ac is not Checkpointing.NONE:
        recompute += parts.memory_forward_s
        recompute_words.append("every memory-bound region's forward")
    if config.ac is Checkpointing.FULL:
        recompute += parts.attention_forward_s + parts.matmul_forward_s
        recompute_words.append("attention's forward")
        in_blocks = [e for e in grouped if _in_blocks(e.group)]
        if in_blocks:
            recompute += LINEAR_FORWARD_SHARE * sum(
                e.float8_time_s if e.group in converted_experts else e.bf16_time_s for e in in_blocks
            )
            recompute_words.append(f"the forward of {len(in_blocks)} routed expert group(s)")
    return recompute, recompute_words, recomputed_fqns


__all__ = [
    "ADAMW_TENSORS_MOVED",
    "ATTENTION_BACKWARD_FLOPS",
    "ATTENTION_PEAK_FRACTION",
    "LINEAR_FORWARD_SHARE",
    "LOSS_BYTES_PER_LOGIT",
    "MEMORY_BACKWARD_FACTOR",
    "OTHER_GEMMS",
    "Calibration",
    "Checkpointing",
    "StepConfig",
    "StepGpu",
    "StepPrediction",
    "Term",
    "predict_step",
]
