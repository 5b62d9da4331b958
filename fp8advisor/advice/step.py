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
- **FSDP** (`world_size` > 1): per step the parameters are all-gathered twice (forward, and again for the
  backward: reshard after forward) and the gradients reduce-scattered once; each GPU moves (W-1)/W of the
  bytes over `INTERCONNECT_BYTES_PER_S` of its GPU. With float8 all-gather (tensorwise) converted weights
  move one byte per element instead of two. Overlap: FSDP2 prefetches, so only communication beyond the
  step's compute time shows (`exposed`); the first all-gather and last reduce-scatter are not added.

Every term above is a GPU kernel-time model. A real step runs slower than its kernels laid end to end (clock
limits under load, communication kernels sharing the SMs, launch gaps, imperfect fusion): all compute terms
are divided by one **in-step efficiency**, the only constant fitted, to one published figure (torchao's
Llama-3-8B bf16 throughput on 8xH100; `data/anchors/`). Dividing every term by the same number leaves every
predicted *speedup* untouched: the published speedups are checks of the model, not inputs to it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from fp8advisor.errors import AdvisorError, ProfileError
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
#: The term of the GEMM layers the advice has no prediction for (the module docstring).
OTHER_GEMMS = "other_gemms"

#: GPU-to-GPU bandwidth per direction per GPU, datasheet peaks (NCCL reaches less): NVLink 4 (H100/H200 SXM,
#: 900 GB/s bidirectional), NVLink 5 (Blackwell, 1.8 TB/s bidirectional), Infinity Fabric (MI300X, 7 links of
#: 64 GB/s per direction).
INTERCONNECT_BYTES_PER_S: dict[str, float] = {
    "H100": 450e9,
    "H200": 450e9,
    "B200": 900e9,
    "B300": 900e9,
    "GB200": 900e9,
    "MI300X": 448e9,
}

CALIBRATION_PATH = DATA_DIR / "anchors" / "step_calibration.json"
ANCHORS_PATH = DATA_DIR / "anchors" / "published_step_results.json"
CALIBRATION_SCHEMA = "fp8advisor.step-calibration/1"

MEASURED, PUBLISHED, MODELLED, CALIBRATED = "measured", "published", "modelled", "calibrated"


class Checkpointing(str, Enum):
    """Activation checkpointing: what the backward recomputes (`--ac`)."""

    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class StepConfig:
    """How the step runs, beyond the model: parallelism, recomputation, precision of the optimizer."""

    world_size: int = 1  # FSDP degree (data parallel, sharded)
    ac: Checkpointing = Checkpointing.NONE
    grad_accum: int = 1  # micro-steps per optimizer step; a "step" here is one micro-step
    float8_all_gather: bool = False  # FSDP all-gathers converted weights in float8 (tensorwise only)
    optimizer_state_bytes: int = 4  # float32 parameters, gradients and moments (FSDP2 mixed precision)
    gradient_reduce_bytes: int = 4  # FSDP2 reduces gradients in float32 (torchtitan's default)

    def check(self, recipe: Recipe | None) -> None:
        """An `AdvisorError` for a configuration no trainer runs: a `--world-size` that is no parallel degree
        (`request.check_degree`), a `--grad-accum` below 1, or float8 all-gather without tensorwise."""
        check_degree("--world-size", self.world_size)
        check_positive_int("--grad-accum", self.grad_accum, hint="micro-steps per optimizer step, e.g. 1")
        if self.float8_all_gather and recipe not in (None, Recipe.TENSORWISE):
            raise AdvisorError(
                f"float8 all-gather needs the tensorwise recipe, not {recipe.value}",
                hint="drop --float8-all-gather, or use --recipe tensorwise",
            )

    def to_json(self) -> dict:
        return {
            "world_size": self.world_size,
            "ac": self.ac.value,
            "grad_accum": self.grad_accum,
            "float8_all_gather": self.float8_all_gather,
            "optimizer_state_bytes": self.optimizer_state_bytes,
            "gradient_reduce_bytes": self.gradient_reduce_bytes,
        }


@dataclass(frozen=True)
class Calibration:
    """The one fitted constant: modelled kernel time / real step time of the fitting anchor."""

    in_step_efficiency: float
    fitted_to: str  # for people: which published figure
    path: Path | None = None

    @classmethod
    def load(cls, path: Path | str = CALIBRATION_PATH) -> Calibration:
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("schema") != CALIBRATION_SCHEMA:
                raise ValueError(f"schema is {data.get('schema')!r}, not {CALIBRATION_SCHEMA!r}")
            efficiency = float(data["in_step_efficiency"])
            if not 0 < efficiency <= 1:
                raise ValueError(f"in_step_efficiency {efficiency} is not in (0, 1]")
            return cls(efficiency, str(data["fitted_to"]), path)
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ProfileError(
                f"cannot read the step model's calibration {path}: {error}",
                hint="reinstall fp8advisor, or regenerate it: python benchmarks/calibrate_step_model.py",
            ) from None


@dataclass(frozen=True)
class StepGpu:
    """The GPU the step runs on: torchao's roofline constants and the interconnect."""

    specs: GpuSpecs
    interconnect_bytes_per_s: float

    @classmethod
    def of(cls, specs: GpuSpecs) -> StepGpu:
        return cls(specs, INTERCONNECT_BYTES_PER_S.get(specs.family, INTERCONNECT_BYTES_PER_S["H100"]))

    @property
    def family(self) -> str:
        return self.specs.family

    def memory_time_s(self, num_bytes: float, kernels: float = 1.0) -> float:
        """Bytes at the achievable bandwidth, at least `kernels` kernel floors."""
        bandwidth = self.specs.bandwidth_bytes_per_s * self.specs.bandwidth_efficiency
        return max(num_bytes / bandwidth, kernels * self.specs.kernel_floor_s)


@dataclass(frozen=True)
class Term:
    """One part of a step: its in-step seconds, where the figure comes from and how it is computed."""

    name: str
    seconds: float
    provenance: str  # measured / published / modelled (of the figures it rests on)
    basis: str  # the formula and constants, for people

    def to_json(self, step_s: float) -> dict:
        return {
            "name": self.name,
            "seconds": float(f"{self.seconds:.6g}"),
            "share": round(self.seconds / step_s, 4) if step_s > 0 else None,
            "provenance": self.provenance,
            "basis": self.basis,
        }


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
        parts = layer.fqn.split(".")
        digits = [i for i, part in enumerate(parts) if part.isdigit()]
        if not digits:
            continue  # outside the blocks: embedding, head
        block = ".".join(parts[: digits[-1] + 1])
        position[block] = position.get(block, 0) + 1
        if position[block] % 2 == 0:
            chosen.append(layer.fqn)
    return chosen


def _in_blocks(fqn: str) -> bool:
    return any(part.isdigit() for part in fqn.split("."))


def _weakest_or_modelled(provenances: Iterable[str]) -> str:
    from fp8advisor.predict.figures import weakest_provenance

    return weakest_provenance(provenances, empty=MODELLED)


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
    """The non-Linear compute terms from the census, at `token_scale` times the traced token count."""
    from fp8advisor.predict.roofline import gemm_time_s

    specs = gpu.specs
    attention_rate = specs.bf16_flops * ATTENTION_PEAK_FRACTION
    attention_forward_flops = sum(call.forward_flops * call.count for call in census.attention) * token_scale
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
    matmul = 3 * matmul_forward  # forward, and the two GEMMs of its backward

    memory_forward = 0.0
    for region in census.regions:
        region_bytes = region.activation_bytes * token_scale + region.parameter_bytes
        memory_forward += region.count * gpu.memory_time_s(region_bytes)
    memory = memory_forward * (1 + MEMORY_BACKWARD_FACTOR)

    logits = math.prod(census.output_shape) * token_scale if census.output_shape else 0
    loss = gpu.memory_time_s(LOSS_BYTES_PER_LOGIT * logits, kernels=2) if logits else 0.0

    shard = parameters / config.world_size
    optimizer = (
        gpu.memory_time_s(ADAMW_TENSORS_MOVED * config.optimizer_state_bytes * shard) / config.grad_accum
    )
    bandwidth = f"{specs.bandwidth_bytes_per_s * specs.bandwidth_efficiency / 1e12:.3g} TB/s"
    basis = {
        "attention": (
            f"{attention_calls} fused call(s), {attention_forward_flops:.3g} forward FLOPs x "
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
            f"AdamW over {shard:.3g} parameters (1/{config.world_size} shard) x {ADAMW_TENSORS_MOVED} "
            f"tensors x {config.optimizer_state_bytes} bytes at {bandwidth}; per {config.grad_accum} step(s)"
        ),
    }
    return _ComputeParts(
        attention, attention_forward, matmul, matmul_forward, memory, memory_forward, loss, optimizer, basis
    )


def _communication_s(
    layers: Sequence[Any], converted: frozenset[str], parameters: int, gpu: StepGpu, config: StepConfig
) -> float:
    """All FSDP traffic of one step on one GPU (before overlap): two all-gathers and one reduce-scatter."""
    if config.world_size == 1:
        return 0.0
    fraction = (config.world_size - 1) / config.world_size
    gathered = BYTES_PER_BF16 * parameters
    if config.float8_all_gather:
        float8_weights = sum(layer.K * layer.N for layer in layers if layer.fqn in converted)
        gathered -= (BYTES_PER_BF16 - 1) * float8_weights  # one byte per element instead of two
    reduced = config.gradient_reduce_bytes * parameters
    return fraction * (2 * gathered + reduced) / gpu.interconnect_bytes_per_s


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

    def scaled(seconds: float) -> float:
        return seconds / efficiency

    in_step = f"; / in-step efficiency {efficiency:.3g} ({calibration.fitted_to})"
    linear_provenance = _weakest_or_modelled(
        p for layer in timed for p in (layer.provenance, layer.bf16_provenance) if p
    )
    terms = [
        *_linear_terms(in_float8, in_bf16, scaled, in_step),
        *_other_gemm_terms(model_layers, timed, gpu, scaled, in_step),
        *_expert_terms(experts_float8, experts_bf16, scaled, in_step),
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
    compute_s = sum(term.seconds for term in terms)
    communication = _communication_s(timed, converted, parameters, gpu, config)
    terms.append(_communication_term(communication, compute_s, gpu, config))
    tokens = max(1, round(model_layers.tokens * token_scale))
    speedups = _speedups_provenance(in_float8, experts_float8)
    return StepPrediction(
        name, label, len(in_float8), tokens, tuple(terms), communication, speedups, len(experts_float8)
    )


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


def _linear_terms(in_float8, in_bf16, scaled: Callable[[float], float], in_step: str) -> list[Term]:
    """The Linear layers' two terms: those in float8, those in bf16."""
    return [
        Term(
            "linear_float8",
            scaled(sum(layer.float8_time_s for layer in in_float8)),
            _weakest_or_modelled(
                p for layer in in_float8 for p in (layer.provenance, layer.bf16_provenance) if p
            ),
            f"{len(in_float8)} Linear layer(s) in float8: the profile's bf16 time / predicted speedup"
            + in_step,
        ),
        Term(
            "linear_bf16",
            scaled(sum(layer.bf16_time_s for layer in in_bf16)),
            _weakest_or_modelled(layer.bf16_provenance for layer in in_bf16 if layer.bf16_provenance),
            f"{len(in_bf16)} Linear layer(s) in bf16: the profile's bf16 forward+backward time" + in_step,
        ),
    ]


def _other_gemm_terms(
    model_layers, timed: Sequence[Any], gpu: StepGpu, scaled: Callable[[float], float], in_step: str
) -> list[Term]:
    """The GEMM layers the forward runs that no prediction prices (`OTHER_GEMMS`), in bf16; none when every
    such layer is priced. Grouped experts' weights are the expert terms' (or, unpriced, noted by the step)."""
    from fp8advisor.predict.roofline import linear_gemm_time_s

    groups = getattr(model_layers, "expert_groups", ())
    skipped = {layer.fqn for layer in timed}
    skipped |= {fqn for group in groups if group.form is ExpertForm.GROUPED for fqn in group.member_fqns}
    others = [
        layer
        for layer in getattr(model_layers, "layers", ())
        if any(M > 0 for M in layer.M_per_call) and layer.fqn not in skipped
    ]
    if not others:
        return []
    seconds = sum(  # output, grad_input and grad_weight GEMMs
        linear_gemm_time_s(M, layer.K, layer.N, "bf16", gpu.specs)
        for layer in others
        for M in layer.M_per_call
        if M > 0
    )
    return [
        Term(
            OTHER_GEMMS,
            scaled(seconds),
            MODELLED,
            f"{len(others)} GEMM layer(s) without a prediction (not convertible, or not nn.Linear; e.g. "
            f"{others[0].fqn}), bf16 at torchao's GEMM roofline, forward and two backward GEMMs" + in_step,
        )
    ]


def _communication_term(communication: float, compute_s: float, gpu: StepGpu, config: StepConfig) -> Term:
    """The FSDP traffic that the step's compute does not hide (`communication`: all of it, before overlap)."""
    exposed = max(0.0, communication - compute_s)
    return Term(
        "communication",
        exposed,
        MODELLED,
        (
            f"FSDP over {config.world_size} GPUs: {communication * 1e3:.3g} ms of all-gather x2 + "
            f"reduce-scatter at {gpu.interconnect_bytes_per_s / 1e9:.0f} GB/s per direction; overlapped "
            "with compute, only the excess shows"
            + (" (float8 all-gather of converted weights)" if config.float8_all_gather else "")
        )
        if config.world_size > 1
        else "one GPU: no FSDP traffic",
    )


def _speedups_provenance(in_float8, experts_float8) -> str | None:
    """The weakest provenance of the float8 speedups the step rests on (None: nothing in float8)."""
    speedups = (
        _weakest_or_modelled(layer.provenance for layer in in_float8 if layer.provenance)
        if in_float8
        else None
    )
    if experts_float8:
        speedups = _weakest_or_modelled(
            [*([speedups] if speedups else []), *(e.provenance for e in experts_float8 if e.provenance)]
        )
    return speedups


def _expert_terms(experts_float8, experts_bf16, scaled: Callable[[float], float], in_step: str) -> list[Term]:
    """The routed experts' two terms (float8, bf16); none for a model without grouped experts."""
    if not experts_float8 and not experts_bf16:
        return []
    return [
        Term(
            "experts_float8",
            scaled(sum(e.float8_time_s for e in experts_float8)),
            # the weakest of the bf16 time's (always the grouped roofline: `predict.speedup.GroupTimes`) and
            # the speedups' provenance: a measured speedup over a modelled bf16 time gives modelled seconds
            _weakest_or_modelled([MODELLED, *(e.provenance for e in experts_float8 if e.provenance)]),
            f"{len(experts_float8)} routed expert group(s) in float8 (rowwise grouped GEMMs): the grouped "
            "roofline's bf16 time / predicted speedup at balanced routing" + in_step,
        ),
        Term(
            "experts_bf16",
            scaled(sum(e.bf16_time_s for e in experts_bf16)),
            MODELLED,
            f"{len(experts_bf16)} routed expert group(s) in bf16: the grouped roofline's forward+backward "
            "time at balanced routing" + in_step,
        ),
    ]


__all__ = [
    "ADAMW_TENSORS_MOVED",
    "ATTENTION_BACKWARD_FLOPS",
    "ATTENTION_PEAK_FRACTION",
    "INTERCONNECT_BYTES_PER_S",
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
