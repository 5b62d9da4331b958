"""What ran in each step of a trace: the device's time split by kind, and every GEMM with its shape.

A step is a `ProfilerStep#N` span; a device record belongs to the step whose CPU span holds its launch (its
CUDA runtime or driver call), as in HolisticTraceAnalysis (a record launched before the trace began is left
out, as there); in a trace with no launch calls at all, the step's device-side annotation holds the record
itself. Without any ProfilerStep span the whole trace is one step, with a warning. Times are the device
records': the step's time runs from the first start to the last end of its records on its main stream (the
one with the most device time: side streams of input copies run ahead of the step); busy is the union of
its records over every stream within that time, idle the rest; each kind's time is the sum
of its records (kinds on different streams overlap). Communication not overlapped by any other kernel is
`exposed`. A float8 cast counts for the next float8 GEMM on its stream (the GEMM it feeds, in launch order).
A GEMM launched outside every autograd engine call is a forward one (each micro-batch's forward; a forward
recomputed in the backward counts as backward).

A trace with no device records (a CPU run) is read from its CPU-side ops instead: which GEMMs ran, float8
or not, with their CPU times, and no speedups.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from fp8advisor.errors import TraceError
from fp8advisor.traces.events import DeviceRecord, Op, RawTrace, Span
from fp8advisor.traces.gemms import GemmShape, gemm_shape
from fp8advisor.traces.kernel_rules import RULES, Kind, Rule, classify

US = 1e-6  # trace times are microseconds


@dataclass(frozen=True)
class Gemm:
    """One GEMM of a step: its kind, shape (None without record_shapes), time, and the casts that fed it."""

    kind: Kind
    shape: GemmShape | None
    seconds: float
    op: str | None
    kernel: str | None
    cast_s: float = 0.0
    float8_inputs: tuple[str, ...] = ()  # the float8 dtypes of its inputs, e.g. ("Float8_e4m3fn",)
    forward: bool | None = None  # launched outside every autograd engine call; None: the trace does not say


@dataclass(frozen=True)
class StepFigures:
    """One step: its time, busy and idle device time, time and count per kind, exposed communication."""

    number: int | None  # ProfilerStep#N; None: the whole trace
    step_s: float
    busy_s: float
    seconds: dict[Kind, float]
    counts: dict[Kind, int]
    communication_exposed_s: float
    gemms: tuple[Gemm, ...]
    top_kernels: dict[Kind, tuple[tuple[str, int, float], ...]] = field(default_factory=dict)

    @property
    def idle_s(self) -> float:
        return max(self.step_s - self.busy_s, 0.0)

    @property
    def gemm_s(self) -> float:
        return sum(self.seconds.get(kind, 0.0) for kind in Kind if kind.is_gemm)

    @property
    def float8_gemm_share(self) -> float:
        """The float8 GEMMs' share of all GEMM time (CPU time on a CPU trace)."""
        total = self.gemm_s
        return (
            sum(self.seconds.get(kind, 0.0) for kind in Kind if kind.is_float8_gemm) / total if total else 0.0
        )


@dataclass(frozen=True)
class TraceAnalysis:
    """What one trace file says, step by step."""

    path: str
    device_names: tuple[str, ...]
    rank: int | None
    on_device: bool  # False: a CPU-only trace, times are CPU op times
    has_shapes: bool
    steps: tuple[StepFigures, ...]
    warnings: tuple[str, ...] = ()

    @property
    def step_numbers(self) -> tuple[int | None, ...]:
        return tuple(step.number for step in self.steps)


def mean_over_steps(analyses: Sequence[TraceAnalysis], value) -> float:
    """The mean of `value(step)` over every step of every rank's analysis (0 without steps)."""
    steps = [step for analysis in analyses for step in analysis.steps]
    return sum(value(step) for step in steps) / len(steps) if steps else 0.0


def step_gemms(analyses: Sequence[TraceAnalysis]) -> list[tuple[int | None, Gemm]]:
    """Every GEMM of every step, with its step's number."""
    return [(step.number, gemm) for analysis in analyses for step in analysis.steps for gemm in step.gemms]


def analyse(trace: RawTrace, rules: Sequence[Rule] = RULES) -> TraceAnalysis:
    """Per-step figures of `trace` (module docstring)."""
    warnings: list[str] = []
    if len({record.device for record in trace.records}) > 1:
        warnings.append("the trace holds several devices' records: they are added up as one")
    if trace.has_device_records:
        steps = _device_steps(trace, rules, warnings)
    else:
        warnings.append(
            "no device records (a CPU run, or a trace without CUDA activity): what ran comes from the CPU "
            "ops, "
            "their CPU times are no GPU times, and no speedup follows from them"
        )
        steps = _cpu_steps(trace, rules, warnings)
    if not steps:
        raise TraceError(
            f"{trace.path}: no device record or GEMM op falls in a ProfilerStep span",
            hint="profile whole training steps: call prof.step() once per step under a profiler schedule",
        )
    return TraceAnalysis(
        str(trace.path),
        trace.device_names,
        trace.rank,
        trace.has_device_records,
        trace.has_shapes,
        tuple(steps),
        tuple(warnings),
    )


def _spans(trace: RawTrace, warnings: list[str]) -> list[Span] | None:
    """The steps' CPU spans, or None (with a warning) when the trace has none."""
    if trace.steps:
        return trace.steps
    warnings.append(
        "no ProfilerStep#N span: the whole trace is taken as one step (call prof.step() once per training "
        "step under torch.profiler's schedule)"
    )
    return None


def _step_of(spans: list[Span], starts: list[float], when: float) -> int | None:
    """The index of the span holding time `when`, or None."""
    index = bisect.bisect_right(starts, when) - 1
    return index if index >= 0 and when <= spans[index].end else None


def _device_steps(trace: RawTrace, rules: Sequence[Rule], warnings: list[str]) -> list[StepFigures]:
    spans = _spans(trace, warnings)
    by_step: dict[int | None, list[_Item]] = defaultdict(list)
    unplaced = unlaunched = 0
    in_backward = _backward_test(trace)
    cpu_starts = [span.ts for span in spans] if spans else []
    device_spans = trace.device_steps if not trace.launches else []  # no launch calls at all: by device time
    device_starts = [span.ts for span in device_spans]
    for record in trace.records:
        launch = trace.launches.get(record.correlation) if record.correlation is not None else None
        external = record.external_id if record.external_id is not None else (launch[1] if launch else None)
        op = trace.ops.get(external) if external is not None else None
        index = None
        if spans is not None and launch is not None:
            index = _step_of(spans, cpu_starts, launch[0])
        elif spans is not None and device_spans:
            found = _step_of(device_spans, device_starts, record.ts)
            index = None if found is None else _index_of(spans, device_spans[found].number)
        elif spans is not None:
            unlaunched += 1
            continue
        if spans is not None and index is None:
            unplaced += 1
            continue
        number = None if spans is None else spans[index].number
        forward = None if in_backward is None or launch is None else not in_backward(launch[0])
        by_step[number].append((record, op, forward))
    if unlaunched:
        warnings.append(f"{unlaunched} device record(s) launched before the trace began: left out")
    if unplaced:
        warnings.append(f"{unplaced} device record(s) launched outside every ProfilerStep span: left out")
    return [_figures(number, items, rules) for number, items in sorted(by_step.items(), key=_step_key)]


#: A device record, the op that launched it, and whether it was launched in the forward.
_Item = tuple[DeviceRecord, "Op | None", "bool | None"]


def _backward_test(trace: RawTrace):
    """`in_backward(t)`: whether CPU time t lies inside an autograd engine call (the backward, with any
    recomputed forward; every micro-batch's forward lies outside); None for a trace without such calls."""
    if not trace.backward_calls:
        return None
    merged = _merged(trace.backward_calls)
    starts = [start for start, _ in merged]

    def in_backward(when: float) -> bool:
        index = bisect.bisect_right(starts, when) - 1
        return index >= 0 and when <= merged[index][1]

    return in_backward


def _step_key(item) -> int:
    return -1 if item[0] is None else item[0]


def _index_of(spans: list[Span], number: int) -> int | None:
    return next((index for index, span in enumerate(spans) if span.number == number), None)


def _figures(number: int | None, items: list[_Item], rules: Sequence[Rule]) -> StepFigures:
    """One step's figures from its device records and the ops that launched them."""
    kinds = [classify(op.name if op else None, record.name, rules) for record, op, _ in items]
    seconds: dict[Kind, float] = defaultdict(float)
    counts: Counter[Kind] = Counter()
    names: dict[Kind, Counter] = defaultdict(Counter)
    name_time: dict[tuple[Kind, str], float] = defaultdict(float)
    for (record, _, _), kind in zip(items, kinds, strict=True):
        seconds[kind] += record.dur * US
        counts[kind] += 1
        names[kind][record.name] += 1
        name_time[(kind, record.name)] += record.dur * US
    start, end = _main_stream_span(items, kinds)
    clipped = [(max(r.ts, start), min(r.end, end)) for r, _, _ in items]  # empty where outside the step
    inside = [iv for iv in clipped if iv[1] > iv[0]]
    communication = [
        iv for iv, k in zip(clipped, kinds, strict=True) if k is Kind.COMMUNICATION and iv[1] > iv[0]
    ]
    compute = [
        iv for iv, k in zip(clipped, kinds, strict=True) if k is not Kind.COMMUNICATION and iv[1] > iv[0]
    ]
    top = {
        kind: tuple(
            (name, count, name_time[(kind, name)])
            for name, count in sorted(counter.items(), key=lambda item: -name_time[(kind, item[0])])[:5]
        )
        for kind, counter in names.items()
    }
    return StepFigures(
        number,
        (end - start) * US,
        _union_length(inside) * US,
        dict(seconds),
        dict(counts),
        _exposed(communication, compute) * US,
        tuple(_gemms_with_casts(items, kinds)),
        top,
    )


def _main_stream_span(items: list[_Item], kinds: list[Kind]) -> tuple[float, float]:
    """First start and last end of the step's records on its main stream (the one with the most compute
    time; collectives have their own streams): side streams (input copies, prefetches) run ahead of the step
    and would stretch it."""
    busy: dict[int, float] = defaultdict(float)
    for (record, _, _), kind in zip(items, kinds, strict=True):
        busy[record.stream] += record.dur if kind is not Kind.COMMUNICATION else 0.0
    main = max(busy, key=lambda stream: busy[stream])
    on_main = [record for record, _, _ in items if record.stream == main]
    return min(record.ts for record in on_main), max(record.end for record in on_main)


def _gemms_with_casts(items: list[_Item], kinds: list[Kind]) -> list[Gemm]:
    """The step's GEMMs, each with the time of the float8 casts that precede it on its stream since the
    last float8 GEMM there (the casts feeding it)."""
    order = sorted(range(len(items)), key=lambda index: (items[index][0].stream, items[index][0].ts))
    pending: dict[int, float] = defaultdict(float)
    gemms: list[tuple[int, Gemm]] = []
    for index in order:
        record, op, forward = items[index]
        kind = kinds[index]
        if kind is Kind.FLOAT8_CAST:
            pending[record.stream] += record.dur * US
        elif kind.is_gemm:
            cast = pending.pop(record.stream, 0.0) if kind.is_float8_gemm else 0.0
            gemms.append((index, _gemm(kind, op, record.dur * US, record.name, cast, forward)))
    return [gemm for _, gemm in sorted(gemms, key=lambda item: items[item[0]][0].ts)]


def _gemm(
    kind: Kind,
    op: Op | None,
    seconds: float,
    kernel: str | None,
    cast_s: float = 0.0,
    forward: bool | None = None,
) -> Gemm:
    shape = gemm_shape(op.name, op.dims) if op is not None else None
    float8 = tuple(
        sorted(
            {text.split("::")[-1] for text in (op.types or ()) if isinstance(text, str) and "Float8" in text}
        )
        if op is not None
        else ()
    )
    return Gemm(kind, shape, seconds, op.name if op else None, kernel, cast_s, float8, forward)


def _cpu_steps(trace: RawTrace, rules: Sequence[Rule], warnings: list[str]) -> list[StepFigures]:
    """Steps of a CPU-only trace from its ops. Nested GEMM ops are one GEMM: the float8 one when a
    `_scaled_mm` runs inside (torchao's float8 `mm` calls it, and the CPU's `_scaled_mm` its own float32
    `mm`), else the innermost (`linear` runs `matmul` runs `mm`)."""
    spans = _spans(trace, warnings)
    classified = [
        (op, classify(op.name, "", rules)) for op in sorted(trace.ops.values(), key=lambda op: op.ts)
    ]
    innermost = [_one_of(nest) for nest in _nests([item for item in classified if item[1] is not Kind.OTHER])]
    groups: dict[int | None, list[tuple[Op, Kind]]] = defaultdict(list)
    in_backward = _backward_test(trace)
    starts = [span.ts for span in spans] if spans else []
    for op, kind in innermost:
        index = _step_of(spans, starts, op.ts) if spans else None
        if spans is None or index is not None:
            groups[None if spans is None else spans[index].number].append((op, kind))
    figures = []
    for number, items in sorted(groups.items(), key=_step_key):
        span = next((s for s in spans or () if s.number == number), None)
        seconds: dict[Kind, float] = defaultdict(float)
        counts: Counter[Kind] = Counter()
        names: dict[Kind, Counter] = defaultdict(Counter)
        for op, kind in items:
            seconds[kind] += op.dur * US
            counts[kind] += 1
            names[kind][op.name] += 1
        step_s = span.dur * US if span else sum(seconds.values())
        top = {
            kind: tuple((name, count, 0.0) for name, count in c.most_common(3)) for kind, c in names.items()
        }
        gemms = tuple(
            _gemm(
                kind, op, op.dur * US, None, forward=None if in_backward is None else not in_backward(op.ts)
            )
            for op, kind in items
            if kind.is_gemm
        )
        figures.append(
            StepFigures(number, step_s, sum(seconds.values()), dict(seconds), dict(counts), 0.0, gemms, top)
        )
    return figures


def _nests(items: list[tuple[Op, Kind]]) -> list[list[tuple[Op, Kind]]]:
    """Ops sorted by start, grouped under each outermost op (an op starting before the outermost one ends)."""
    nests: list[list[tuple[Op, Kind]]] = []
    end = float("-inf")
    for op, kind in items:
        if op.ts < end:
            nests[-1].append((op, kind))
        else:
            nests.append([(op, kind)])
            end = op.ts + op.dur
    return nests


def _one_of(nest: list[tuple[Op, Kind]]) -> tuple[Op, Kind]:
    """The op that stands for a nest: its float8 GEMM if any, else its grouped GEMM (the CPU's
    `_grouped_mm` runs one `mm` per group inside it), else its innermost (last started) op; timed as the
    outermost op (the whole GEMM as the CPU ran it)."""
    op, kind = next(
        ((op, kind) for op, kind in nest if kind.is_float8_gemm),
        next(((op, kind) for op, kind in nest if kind is Kind.GROUPED_GEMM), nest[-1]),
    )
    return Op(op.name, nest[0][0].ts, nest[0][0].dur, op.dims, op.types), kind


def _union_length(intervals: Iterable[tuple[float, float]]) -> float:
    total, current_start, current_end = 0.0, None, None
    for start, end in sorted(intervals):
        if current_end is None or start > current_end:
            if current_end is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    return total + (current_end - current_start if current_end is not None else 0.0)


def _exposed(inner: list[tuple[float, float]], cover: list[tuple[float, float]]) -> float:
    """How much of the union of `inner` no interval of `cover` overlaps."""
    if not inner:
        return 0.0
    return _union_length(inner) - _overlap(_merged(inner), _merged(cover))


def _merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(start, end) for start, end in merged]


def _overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Total overlap of two sorted lists of disjoint intervals."""
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        total += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


__all__ = ["Gemm", "StepFigures", "TraceAnalysis", "analyse", "mean_over_steps", "step_gemms"]
