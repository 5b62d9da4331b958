"""Read a Chrome/Kineto profiler trace (torch.profiler, torchtitan) into the few records the analysis needs.

A training trace runs to hundreds of megabytes of JSON; loading it whole takes several times that in memory.
The file is streamed instead, event by event (ijson over its C backend, `.json.gz` decompressed on the fly),
and only what the analysis uses is kept: the `ProfilerStep#N` spans, the device records (kernels, memcpy,
memset), the launch of each (its CUDA runtime or driver call: when, and the op that made it), and the
CPU-side ops some rule of `fp8advisor.traces.kernel_rules` looks at (GEMMs, attention, collectives), with
their input shapes when the trace has them (`record_shapes=True`). Strings repeated across events are kept
once. `benchmarks/trace_read_speed.py` measures this reader against loading the JSON whole.

Kineto ties a device record to the CPU op that launched it by the record's `External id` (also on the launch
call, which shares the record's `correlation`); the launch call's time places a kernel in its step, as
HolisticTraceAnalysis does.
"""

from __future__ import annotations

import gzip
import re
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from fp8advisor.errors import TraceError, quote
from fp8advisor.reading import check_regular_file
from fp8advisor.traces.kernel_rules import RULES, Rule, op_pattern

#: The largest trace file read (compressed size for .gz): far above any profiler trace.
MAX_TRACE_BYTES = 64 * 2**30

DEVICE_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"})
LAUNCH_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver", "runtime", "driver"})
OP_CATEGORIES = frozenset({"cpu_op", "operator", "user_annotation"})
STEP = re.compile(r"^ProfilerStep#(\d+)$")
SHAPES_HOW = (
    "profile with input shapes: torch.profiler.profile(..., record_shapes=True) (torchtitan records them "
    "whenever profiling is on: profiling.enable_profiling in 0.2's TOML, profiler.enable_profiling in 0.3)"
)


@dataclass(frozen=True, slots=True)
class Op:
    """A CPU-side op that launched device work (or ran on the CPU): name, time (us) and input shapes."""

    name: str
    ts: float
    dur: float
    dims: tuple | None  # `Input Dims`, one list per input; None without record_shapes
    types: tuple | None  # `Input type`, e.g. "c10::Float8_e4m3fn"


@dataclass(frozen=True, slots=True)
class DeviceRecord:
    """One kernel, memcpy or memset on the device (us)."""

    name: str
    ts: float
    dur: float
    stream: int
    device: int
    correlation: int | None
    external_id: int | None

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass(frozen=True, slots=True)
class Span:
    """A `ProfilerStep#N` span (us)."""

    number: int
    ts: float
    dur: float

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass
class RawTrace:
    """What one trace file holds that the analysis reads."""

    path: Path
    device_names: tuple[str, ...] = ()
    rank: int | None = None
    world_size: int | None = None
    steps: list[Span] = field(default_factory=list)  # CPU-side ProfilerStep#N
    device_steps: list[Span] = field(default_factory=list)  # their device-side annotations
    ops: dict[int, Op] = field(default_factory=dict)  # External id -> op, for the ops the rules look at
    launches: dict[int, tuple[float, int | None]] = field(default_factory=dict)  # correlation -> (ts, ext id)
    records: list[DeviceRecord] = field(default_factory=list)
    backward_calls: list[tuple[float, float]] = field(default_factory=list)  # autograd engine calls (us)
    events: int = 0

    @property
    def has_device_records(self) -> bool:
        return bool(self.records)

    @property
    def has_shapes(self) -> bool:
        return any(op.dims for op in self.ops.values())


def read_trace(path: str | Path, rules: tuple[Rule, ...] = RULES) -> RawTrace:
    """Stream the trace at `path` (`.json` or `.json.gz`); TraceError (exit 2) when it cannot be read or is
    not a profiler trace."""
    path = check_regular_file(
        path, "trace", error=TraceError, max_bytes=MAX_TRACE_BYTES, hint="check the path"
    )
    trace = RawTrace(path)
    items_prefix = _read_header(path, trace)
    keep_op = op_pattern(rules).search
    strings: dict[str, str] = {}
    with _guarded(path):
        for event in _items(path, items_prefix):
            trace.events += 1
            if isinstance(event, dict) and event.get("ph") == "X":
                try:
                    _take(event, trace, keep_op, strings)
                except (TypeError, ValueError) as failure:
                    raise TraceError(
                        f"{path}: event {trace.events} is malformed ({failure}): {quote(event)}",
                        hint="torch.profiler's export_chrome_trace writes numbers for ts and dur",
                    ) from None
    if not (trace.records or trace.ops or trace.steps or trace.backward_calls):
        raise TraceError(
            f"{path} holds no profiler events ({trace.events} event(s): no kernel, op or ProfilerStep)",
            hint="give the file torch.profiler's export_chrome_trace wrote for a profiled training step",
        )
    trace.steps.sort(key=lambda span: span.ts)
    trace.device_steps.sort(key=lambda span: span.ts)
    return trace


def _take(event: dict, trace: RawTrace, keep_op, strings: dict[str, str]) -> None:
    """Keep what `event` (a complete "X" event) adds to `trace`."""
    category = str(event.get("cat", "")).lower()
    args = event.get("args")
    args = args if isinstance(args, dict) else {}
    if category in DEVICE_CATEGORIES:
        name = str(event.get("name", ""))
        trace.records.append(
            DeviceRecord(
                strings.setdefault(name, name),
                float(event.get("ts", 0.0)),
                float(event.get("dur", 0.0)),
                _int(args.get("stream"), -1),
                _int(args.get("device"), 0),
                _int(args.get("correlation"), None),
                _int(args.get("External id"), None),
            )
        )
    elif category in LAUNCH_CATEGORIES:
        correlation = _int(args.get("correlation"), None)
        if correlation is not None:
            trace.launches[correlation] = (float(event.get("ts", 0.0)), _int(args.get("External id"), None))
    elif category in OP_CATEGORIES or category == "gpu_user_annotation":
        name = str(event.get("name", ""))
        step = STEP.match(name)
        if step:
            span = Span(int(step.group(1)), float(event.get("ts", 0.0)), float(event.get("dur", 0.0)))
            (trace.device_steps if category == "gpu_user_annotation" else trace.steps).append(span)
        elif name.startswith("autograd::engine::evaluate_function"):
            start = float(event.get("ts", 0.0))
            trace.backward_calls.append((start, start + float(event.get("dur", 0.0))))
        elif category != "gpu_user_annotation" and keep_op(name):
            external = _int(args.get("External id"), None)
            if external is not None:
                trace.ops[external] = Op(
                    strings.setdefault(name, name),
                    float(event.get("ts", 0.0)),
                    float(event.get("dur", 0.0)),
                    _frozen(args.get("Input Dims")),
                    _frozen(args.get("Input type")),
                )


def _int(value: Any, default):
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _frozen(value: Any):
    """Lists as tuples, all the way down (hashable, smaller); None stays None."""
    if isinstance(value, list):
        return tuple(_frozen(item) for item in value)
    return value


def _open(path: Path) -> IO[bytes]:
    with open(path, "rb") as probe:
        compressed = probe.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rb") if compressed else open(path, "rb")


class _guarded:
    """Reading errors of a trace file as one TraceError that says what to do."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, error, traceback) -> bool:
        import ijson

        if error is None or isinstance(error, TraceError):
            return False
        if isinstance(error, (EOFError, gzip.BadGzipFile, zlib.error)):
            raise TraceError(
                f"{self.path} is a truncated or damaged gzip file ({error})",
                hint="copy the trace again (an interrupted copy or a profiler killed while writing it)",
            ) from None
        if isinstance(error, (ijson.JSONError, UnicodeDecodeError)):
            raise TraceError(
                f"{self.path} is not complete JSON ({_reason(error)})",
                hint="a trace the profiler did not finish writing, or not a trace: export it again with "
                "prof.export_chrome_trace(PATH) once the profiler has stopped",
            ) from None
        if isinstance(error, OSError):
            raise TraceError(f"cannot read {self.path}: {error.strerror or error}") from None
        return False


def _reason(error: Exception) -> str:
    """The first line of a parser's message, printable (yajl quotes the bad bytes it met)."""
    text = error.args[0] if error.args else str(error)
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    line = str(text).splitlines()[0] if str(text).strip() else type(error).__name__
    return line.encode("ascii", "replace").decode()[:120]


def _read_header(path: Path, trace: RawTrace) -> str:
    """Read what precedes the events (Kineto writes `deviceProperties` and `distributedInfo` first) and
    return the ijson prefix of the events: "traceEvents.item", or "item" for a trace that is a bare array."""
    import ijson

    names: list[str] = []
    with _guarded(path), _open(path) as stream:
        parser = ijson.parse(stream, use_float=True)
        for prefix, event, value in parser:
            if prefix == "" and event == "start_array":
                return "item"
            if prefix == "" and event not in ("start_map", "map_key"):
                break
            if prefix == "" and event == "map_key" and value == "traceEvents":
                trace.device_names = tuple(names)
                return "traceEvents.item"
            if prefix == "deviceProperties.item.name" and isinstance(value, str):
                names.append(value)
            elif prefix == "distributedInfo.rank":
                trace.rank = _int(value, None)
            elif prefix == "distributedInfo.world_size":
                trace.world_size = _int(value, None)
    raise TraceError(
        f"{path} is JSON but not a profiler trace: it has no traceEvents",
        hint="give the file torch.profiler's export_chrome_trace wrote (torchtitan: "
        "<dump_folder>/profiling/traces/iteration_N/rankK_trace.json.gz)",
    )


def _items(path: Path, prefix: str) -> Iterator[Any]:
    import ijson

    with _open(path) as stream:
        yield from ijson.items(stream, prefix, use_float=True)


def trace_files(path: str | Path, rank: int | None = None) -> list[Path]:
    """The trace files TRACE names: a file; a folder of one trace per rank (`rank0_trace.json.gz`, or
    tensorboard_trace_handler's `*.pt.trace.json`); or a torchtitan profile folder (`iteration_N` folders:
    the last one). `rank`: only that rank's file."""
    path = Path(path)
    if not path.is_dir():
        if rank is not None:
            raise TraceError(
                f"--rank {rank} picks one rank's trace in a folder; {path} is one file",
                hint="give the folder of rank traces, or drop --rank",
            )
        return [path]
    iterations = sorted(
        (int(match.group(1)), child)
        for child in path.iterdir()
        if child.is_dir() and (match := re.fullmatch(r"iteration_(\d+)", child.name))
    )
    folder = iterations[-1][1] if iterations else path
    files = sorted(
        (
            child
            for child in folder.rglob("*")
            if child.is_file() and re.search(r"\.json(\.gz)?$", child.name)
        ),
        key=lambda child: (_rank_of(child) if _rank_of(child) is not None else sys.maxsize, str(child)),
    )
    if not files:
        raise TraceError(
            f"{folder} holds no trace (.json or .json.gz)",
            hint="give a trace file, a folder of rankK_trace.json.gz files, or torchtitan's profile folder",
        )
    if rank is None:
        return files
    chosen = [child for child in files if _rank_of(child) == rank]
    if not chosen:
        ranks = sorted({r for child in files if (r := _rank_of(child)) is not None})
        raise TraceError(
            f"{folder} has no trace of rank {rank}", hint=f"ranks there: {ranks or 'none named'}"
        )
    return chosen


def _rank_of(path: Path) -> int | None:
    match = re.search(r"rank[-_]?(\d+)", path.name)
    return int(match.group(1)) if match else None


__all__ = ["SHAPES_HOW", "DeviceRecord", "Op", "RawTrace", "Span", "read_trace", "trace_files"]
