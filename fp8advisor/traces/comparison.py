"""Two traces of one job, bf16 and float8: what float8 bought, shape group by shape group and in the step.

Per shape group (`gemms.ShapeGroup`: a Linear's three GEMMs; with a model, the layers whose shapes they are)
and per step (the mean over steps and ranks): the bf16 trace's GEMM time, the float8 trace's GEMM time (its
float8 GEMMs and any that stayed bf16) and the float8 casts that fed them. Casts the compiler fused into a
norm or an activation hold work bf16 does too: only their net cost (what they and the other kernels took
beyond the bf16 run's other kernels) counts, shared among the converted groups in proportion to their own
casts, and they are shown as their own part of the step. The measured speedup of a group is its converted
GEMMs' bf16 time over their float8 GEMMs, casts and share of the fused casts. The step's difference splits
into GEMMs, casts, fused casts, attention, communication (exposed), the rest and idle. `write_measured` keeps
it as a results file (`SCHEMA`) that `suggest --trace` takes as the strongest evidence there is: the user's
own step on the user's own GPU.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fp8advisor import __version__
from fp8advisor.errors import TraceError
from fp8advisor.files import write_atomic
from fp8advisor.reading import parse_json, read_text
from fp8advisor.traces.analysis import StepFigures, TraceAnalysis, mean_over_steps
from fp8advisor.traces.events import SHAPES_HOW
from fp8advisor.traces.gemms import ShapeGroup
from fp8advisor.traces.kernel_rules import Kind
from fp8advisor.traces.layer_match import ModelLinear

SCHEMA = "fp8advisor.trace-speedups/1"

#: The parts of a step's difference, in the order shown.
PARTS = (
    "GEMMs",
    "float8 casts",
    "casts fused into other work",
    "attention",
    "communication (exposed)",
    "other kernels",
    "idle",
)


@dataclass(frozen=True)
class GroupComparison:
    """One shape group: seconds per step on each side and the measured speedup."""

    group: ShapeGroup
    layers: tuple[str, ...]  # FQNs with these shapes (with a model), else ()
    layer_shapes: tuple[tuple[int, int, int], ...]  # their (M, K, N)
    bf16_s: float
    float8_gemm_s: float  # the float8 trace's float8 GEMMs of the group
    float8_bf16_gemm_s: float  # the float8 trace's GEMMs of the group that stayed bf16
    cast_s: float  # the casts feeding its float8 GEMMs
    bf16_gemms: float  # GEMMs per step
    float8_gemms: float
    fused_cast_s: float = 0.0  # its share of the step's net cost of casts fused into other work

    @property
    def speedup(self) -> float:
        """The converted GEMMs' bf16 time over their float8 GEMMs, casts and share of fused casts. A group's
        GEMMs all have the same three sizes, so the same FLOPs: in a group the float8 run kept partly in
        bf16, the converted GEMMs' bf16 time is the bf16 run's in proportion to their count."""
        converted_bf16 = self.bf16_s * self.float8_gemms / self.bf16_gemms if self.bf16_gemms else 0.0
        float8 = self.float8_gemm_s + self.cast_s + self.fused_cast_s
        return converted_bf16 / float8 if float8 and converted_bf16 else float("nan")

    @property
    def converted(self) -> bool:
        return self.float8_gemms > 0

    @property
    def leaf_names(self) -> str:
        """Its layers' last names, once each ("w1/w2/w3"): repeated blocks in a few letters; its sizes
        without a model."""
        return "/".join(sorted({fqn.rsplit(".", 1)[-1] for fqn in self.layers})) or str(self.group)


@dataclass(frozen=True)
class TraceComparison:
    bf16: Sequence[TraceAnalysis]
    float8: Sequence[TraceAnalysis]
    groups: tuple[GroupComparison, ...]
    parts: dict[str, tuple[float, float]]  # part -> (bf16 s, float8 s) per step
    bf16_step_s: float
    float8_step_s: float
    recipe: str

    @property
    def step_speedup(self) -> float:
        return self.bf16_step_s / self.float8_step_s


def step_parts(step: StepFigures) -> dict[str, float]:
    """The step's time split into `PARTS` (kinds on other streams overlap: communication counts only where
    nothing else runs; the parts add up to busy + idle when one stream does the compute)."""
    seconds = step.seconds
    other = sum(seconds.get(kind, 0.0) for kind in (Kind.OTHER, Kind.MEMORY))
    return {
        "GEMMs": step.gemm_s,
        "float8 casts": seconds.get(Kind.FLOAT8_CAST, 0.0),
        "casts fused into other work": seconds.get(Kind.FUSED_CAST, 0.0),
        "attention": seconds.get(Kind.ATTENTION, 0.0),
        "communication (exposed)": step.communication_exposed_s,
        "other kernels": other,
        "idle": step.idle_s,
    }


def compare(
    bf16: Sequence[TraceAnalysis],
    float8: Sequence[TraceAnalysis],
    layers: Sequence[ModelLinear] = (),
    recipe: str | None = None,
) -> TraceComparison:
    """Compare the two sides (module docstring). `layers`: the model's Linear layers (and expert weights), to
    name each group's layers. TraceError when a side has no device times or no shapes."""
    for side, analyses in (("bf16", bf16), ("float8", float8)):
        if not all(analysis.on_device for analysis in analyses):
            raise TraceError(
                f"the {side} trace has no device records: a CPU trace says what ran, not how fast",
                hint="compare two traces recorded on the GPU (torch.profiler with ProfilerActivity.CUDA)",
            )
        if not any(analysis.has_shapes for analysis in analyses):
            raise TraceError(
                f"the {side} trace has no input shapes: GEMMs cannot be grouped by shape", hint=SHAPES_HOW
            )
    bf16_groups = _group_times(bf16)
    float8_groups = _group_times(float8)
    named: dict[ShapeGroup, list[ModelLinear]] = defaultdict(list)
    for layer in layers:
        named[layer.group].append(layer)
    parts = {
        part: (
            mean_over_steps(bf16, lambda step, part=part: step_parts(step)[part]),
            mean_over_steps(float8, lambda step, part=part: step_parts(step)[part]),
        )
        for part in PARTS
    }
    groups = []
    for group in sorted(
        set(bf16_groups) | set(float8_groups), key=lambda g: -bf16_groups.get(g, {}).get("bf16", 0)
    ):
        b, f = bf16_groups.get(group, {}), float8_groups.get(group, {})
        groups.append(
            GroupComparison(
                group,
                tuple(layer.fqn for layer in named.get(group, ())),
                tuple((layer.M, layer.K, layer.N) for layer in named.get(group, ())),
                b.get("bf16", 0.0) + b.get("float8", 0.0),
                f.get("float8", 0.0),
                f.get("bf16", 0.0),
                f.get("cast", 0.0),
                b.get("count", 0.0),
                f.get("float8_count", 0.0),
            )
        )
    groups = _with_fused_casts(groups, parts)
    if not groups:
        raise TraceError("the bf16 trace ran no GEMM with recorded shapes: nothing to compare")
    return TraceComparison(
        tuple(bf16),
        tuple(float8),
        tuple(groups),
        parts,
        mean_over_steps(bf16, lambda step: step.step_s),
        mean_over_steps(float8, lambda step: step.step_s),
        recipe or detected_recipe(float8),
    )


def _with_fused_casts(groups: list[GroupComparison], parts: dict) -> list[GroupComparison]:
    """The step's net cost of the casts fused into other work (what those kernels and the other kernels
    took in the float8 run beyond the bf16 run's other kernels) shared among the converted groups in
    proportion to their own casts (cast time follows the tensors' sizes)."""
    from dataclasses import replace

    fused = "casts fused into other work"
    net = (parts[fused][1] + parts["other kernels"][1]) - (parts[fused][0] + parts["other kernels"][0])
    converted = [group for group in groups if group.converted]
    weights = [group.cast_s or group.float8_gemm_s for group in converted]
    if net <= 0 or not sum(weights):
        return groups
    share = {id(group): net * weight / sum(weights) for group, weight in zip(converted, weights, strict=True)}
    return [replace(group, fused_cast_s=share.get(id(group), 0.0)) for group in groups]


def _group_times(analyses: Sequence[TraceAnalysis]) -> dict[ShapeGroup, dict[str, float]]:
    """Per shape group, the mean per step of: bf16 and float8 GEMM seconds, cast seconds, GEMM counts."""
    totals: dict[ShapeGroup, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    steps = sum(len(analysis.steps) for analysis in analyses) or 1
    for analysis in analyses:
        for step in analysis.steps:
            for gemm in step.gemms:
                if gemm.shape is None:
                    continue
                entry = totals[gemm.shape.group]
                side = "float8" if gemm.kind.is_float8_gemm else "bf16"
                entry[side] += gemm.seconds / steps
                entry["cast"] += gemm.cast_s / steps
                entry["count"] += 1 / steps
                entry[f"{side}_count"] += 1 / steps
    return totals


def detected_recipe(analyses: Sequence[TraceAnalysis]) -> str:
    """torchao's recipe from the float8 GEMMs: tensorwise casts gradients to e5m2, the rowwise recipes keep
    e4m3 throughout; rowwise_with_gw_hp runs each converted layer's weight gradient in bf16: in every group
    with float8 GEMMs, the forwards all float8 and one backward bf16 GEMM per forward. "float8" when no GEMM
    says."""
    gemms = [gemm for analysis in analyses for step in analysis.steps for gemm in step.gemms]
    types = {name for gemm in gemms for name in gemm.float8_inputs}
    if not types:
        return "float8"
    if any("e5m2" in name for name in types):
        return "tensorwise"
    by_group: dict[ShapeGroup, list] = defaultdict(list)
    for gemm in gemms:  # the dense GEMMs: torchao's float8 experts keep their weight gradients float8
        if gemm.shape is not None and (gemm.shape.batch, gemm.shape.groups) == (1, 1):
            by_group[gemm.shape.group].append(gemm)
    converted = [group for group in by_group.values() if any(g.kind.is_float8_gemm for g in group)]
    return "rowwise_with_gw_hp" if converted and all(map(_weight_gradient_in_bf16, converted)) else "rowwise"


def _weight_gradient_in_bf16(gemms: list) -> bool:
    forwards = [gemm for gemm in gemms if gemm.forward]
    kept = [gemm for gemm in gemms if not gemm.kind.is_float8_gemm]
    return (
        bool(forwards)
        and all(gemm.kind.is_float8_gemm for gemm in forwards)
        and len(kept) == len(forwards)
        and all(gemm.forward is False for gemm in kept)
    )


def _digest(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def measured_record(comparison: TraceComparison, tokens: int | None) -> dict:
    """The results file's content (`SCHEMA`)."""
    device = sorted({name for analysis in comparison.bf16 for name in analysis.device_names})
    return {
        "schema": SCHEMA,
        "what": "measured: GEMM and float8 cast time per shape group in two profiler traces of one training "
        "job (bf16 and float8), by fp8advisor trace",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "fp8advisor": __version__,
        "gpu": device,
        "recipe": comparison.recipe,
        "tokens_per_gpu": tokens,
        "traces": {
            side: [
                {
                    "path": analysis.path,
                    "sha256": _digest(analysis.path),
                    "steps": list(analysis.step_numbers),
                }
                for analysis in analyses
            ]
            for side, analyses in (("bf16", comparison.bf16), ("float8", comparison.float8))
        },
        "step": {
            "bf16_s": comparison.bf16_step_s,
            "float8_s": comparison.float8_step_s,
            "speedup": comparison.step_speedup,
            "parts": {part: {"bf16_s": b, "float8_s": f} for part, (b, f) in comparison.parts.items()},
        },
        "groups": [
            {
                "sizes": list(group.group.sizes),
                "batch": group.group.batch,
                "groups": group.group.groups,
                "layers": list(group.layers),
                "layer_shapes": [list(shape) for shape in group.layer_shapes],
                "bf16_s": group.bf16_s,
                "float8_gemm_s": group.float8_gemm_s,
                "float8_bf16_gemm_s": group.float8_bf16_gemm_s,
                "cast_s": group.cast_s,
                "fused_cast_s": group.fused_cast_s,
                "bf16_gemms_per_step": group.bf16_gemms,
                "float8_gemms_per_step": group.float8_gemms,
                "speedup": group.speedup if group.converted else None,
            }
            for group in comparison.groups
        ],
    }


def is_measured_file(path: Path) -> bool:
    """Whether `path` is a results file `write_measured` wrote (what `-o` may replace)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8")).get("schema") == SCHEMA
    except (OSError, ValueError, AttributeError):
        return False


def write_measured(path: str | Path, comparison: TraceComparison, tokens: int | None) -> Path:
    return write_atomic(path, json.dumps(measured_record(comparison, tokens), indent=1) + "\n")


@dataclass(frozen=True)
class MeasuredSpeedups:
    """A results file of `write_measured`, read back: the measured speedup of each converted group."""

    path: str
    recipe: str
    gpu: tuple[str, ...]
    speedups: dict[ShapeGroup, float]

    def speedup(self, M: int, K: int, N: int) -> float | None:
        return self.speedups.get(ShapeGroup.of_layer(M, K, N))


def read_measured(path: str | Path) -> MeasuredSpeedups:
    """Read a results file of `write_measured`; TraceError (exit 2) when it is not one."""
    data = parse_json(read_text(path, "trace results file", error=TraceError), path, error=TraceError)
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise TraceError(
            f"{path} is not a results file of fp8advisor trace ({SCHEMA})",
            hint="write one with: fp8advisor trace BF16_TRACE FLOAT8_TRACE -o measured.json",
        )
    try:
        speedups = {
            ShapeGroup(tuple(entry["sizes"]), entry.get("batch", 1), entry.get("groups", 1)): float(
                entry["speedup"]
            )
            for entry in data["groups"]
            if entry.get("speedup") is not None
        }
    except (KeyError, TypeError, ValueError) as failure:
        raise TraceError(
            f"{path}: a group entry is malformed ({failure})", hint="write the file again"
        ) from None
    return MeasuredSpeedups(str(path), str(data.get("recipe")), tuple(data.get("gpu") or ()), speedups)


__all__ = [
    "PARTS",
    "SCHEMA",
    "GroupComparison",
    "MeasuredSpeedups",
    "TraceComparison",
    "compare",
    "detected_recipe",
    "is_measured_file",
    "measured_record",
    "read_measured",
    "step_parts",
    "write_measured",
]
