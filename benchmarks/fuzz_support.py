"""The machinery of benchmarks/fuzz.py: what a case and a step are, the folder each case runs in and the
files it can plant there, running one step under its limits, and judging what came out (see fuzz.py's
docstring for what each count means)."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

#: The counts, in the order the report prints them.
COUNTS = ("tracebacks", "false success", "code", "files", "hangs", "memory", "refusals", "terminal")

EXIT = {"ok": 0, "fail": 1, "refuse": 2, "interrupt": 130}
INTERRUPT_CODES = (130, -signal.SIGINT)
TRACEBACK = "Traceback (most recent call last)"
MEMORY = re.compile(
    r"MemoryError|std::bad_alloc|Cannot allocate memory|out of memory|can't start new thread|"
    r"failed to allocate|ENOMEM"
)
#: Characters a terminal acts on: C0 controls but newline and tab, DEL, and the C1 controls (CSI is U+009B).
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
LOADER = HERE / "fuzz_loader.py"

# --- the model every small case uses --------------------------------------------------------------------

#: A tiny model the CPU runs in well under a second (tests/_verify_helpers.py's): with the `fast` profile
#: every called, divisible Linear converts (blocks.N.up/down/gate); `spare` is never called; `head` has
#: N = 100.
TINY = """#PRELUDE
import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(64, 256, bias=False)
        self.down = nn.Linear(256, 64, bias=False)
        self.gate = nn.Linear(64, 32)
        self.spare = nn.Linear(64, 64)  # registered, never called

    def forward(self, x):
        #FORWARD
        return x + self.down(F.silu(self.up(x))) + self.gate(x).mean(-1, keepdim=True)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(100, 64)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(64, 100, bias=False)

    def forward(self, tokens):
        h = self.embed(tokens)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


def build_model(#ARGS):
    #BUILD
    return Net()
"""
TINY_FQNS = tuple(f"blocks.{i}.{name}" for i in (0, 1) for name in ("up", "down", "gate", "spare")) + (
    "head",
)


def tiny_source(prelude: str = "", forward: str = "", build: str = "", args: str = "") -> str:
    """TINY with `prelude` (module level, before the imports), `forward` and `build` (statements at the start
    of Block.forward and build_model, indented here) and `args` (build_model's parameters)."""

    def indent(text: str, spaces: int) -> str:
        return "\n".join((" " * spaces + line) if line else line for line in text.splitlines())

    source = TINY.replace("#PRELUDE", prelude)
    source = source.replace("        #FORWARD", indent(forward, 8) if forward else "        pass")
    source = source.replace("    #BUILD", indent(build, 4) if build else "    pass")
    return source.replace("#ARGS", args)


#: Python that creates the file CANARY in the folder it runs in (the case's work folder, where fp8advisor and
#: the loader of generated files run): short (a profile name may be bounded), without a dot (a ModuleDict key
#: cannot hold one).
PY_PAYLOAD = 'open("CANARY", "w")'


# --- cases --------------------------------------------------------------------------------------------------


@dataclass
class Interrupt:
    """Ctrl-C (or another signal) sent to a running step: once a file matching `wait_glob` (relative to the
    work folder) has `wait_lines` lines, else after `after_s` seconds. `group`: to the whole process group, as
    a terminal sends Ctrl-C; `repeat`: that many times, 0.3 s apart. The step must then end within `grace_s`,
    and every file matching `kept_glob` must keep the lines it had."""

    sig: int = signal.SIGINT
    after_s: float | None = 4.0
    wait_glob: str | None = None
    wait_lines: int = 2
    max_wait_s: float = 90.0
    group: bool = True
    repeat: int = 1
    grace_s: float = 15.0
    kept_glob: str | None = None


@dataclass
class Step:
    """One `python -m fp8advisor ARGV` run and what it must do. In argv, env values, target and fqns, @WORK@,
    @ROOT@, @PROF@ and @CANARY@ stand for the case's work folder, its root, its profile directory and its
    canary, and @PY@ for Python that creates the canary (`py_payload`)."""

    argv: list[str]
    expect: frozenset[str]
    outputs: tuple[str, ...] = ()  # globs (relative to the work folder) the step may write when it succeeds
    generated: tuple[tuple[str, str], ...] = ()  # (path or "<stdout>", kind: py toml yaml filter json)
    env: dict[str, str | None] = field(default_factory=dict)
    timeout: float = 60.0
    interrupt: Interrupt | None = None
    control_ok: bool = False
    contains: tuple[str, ...] = ()  # must be in stdout or stderr, whatever the exit
    absent: tuple[str, ...] = ()  # must not be in stdout or stderr (an unclear message)
    contains_if_ok: tuple[str, ...] = ()  # regexes: must match stdout or stderr when it exits 0
    checks: tuple[Callable, ...] = ()  # (ctx, outcome) -> [(count, detail)]
    after_ok: bool = False  # run only when the step before it exited 0
    target: str | None = None  # the model target the header's check command must name
    fqns: tuple[str, ...] | None = None  # the model's Linear FQNs, for a generated file's values
    cwd: str = ""


@dataclass
class Case:
    name: str
    klass: int
    steps: list[Step]
    setup: Callable | None = None
    slow: bool = False
    note: str = ""

    @property
    def expects(self) -> str:
        return ", ".join("|".join(sorted(s.expect, key=list(EXIT).index)) for s in self.steps)


# --- the folder a case runs in ------------------------------------------------------------------------------


@dataclass
class Context:
    root: Path
    work: Path
    fixtures: Fixtures
    case: Case
    commands: list[str] = field(default_factory=list)
    before: dict = field(default_factory=dict)  # the work folder's snapshot before the current step
    root_before: set = field(default_factory=set)  # the files beside the work folder before it

    @property
    def canary(self) -> Path:
        return self.root / "CANARY"

    @property
    def prof(self) -> Path:
        return self.work / "prof"

    def sub(self, text: str) -> str:
        return (
            text.replace("@PY@", PY_PAYLOAD)
            .replace("@CANARY@", str(self.canary))
            .replace("@PROF@", str(self.prof))
            .replace("@WORK@", str(self.work))
            .replace("@ROOT@", str(self.root))
        )

    def path(self, rel: str) -> Path:
        path = self.work / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def write(self, rel: str, data: str | bytes) -> Path:
        path = self.path(rel)
        if isinstance(data, str):
            path.write_text(data, encoding="utf-8")
        else:
            path.write_bytes(data)
        return path

    def fifo(self, rel: str) -> Path:
        path = self.path(rel)
        os.mkfifo(path)
        return path

    def symlink(self, rel: str, target: str) -> Path:
        path = self.path(rel)
        path.symlink_to(target)
        return path

    def tiny(self, rel: str = "tiny.py", **variant: str) -> Path:
        return self.write(rel, tiny_source(**variant))

    def profile(self, rel: str, mutate: Callable[[dict], object] | None = None, base: str = "fast") -> Path:
        """A profile JSON at `rel`: the `fast` fixture (or a shipped profile's name) changed by `mutate`."""
        data = (
            self.fixtures.fast_profile()
            if base == "fast"
            else json.loads((REPO / "data" / "profiles" / f"{base}.json").read_text())
        )
        if mutate is not None:
            replaced = mutate(data)
            data = replaced if isinstance(replaced, (str, bytes, dict)) else data
        text = data if isinstance(data, (str, bytes)) else json.dumps(data, indent=1, allow_nan=True)
        return self.write(rel, text)

    def committed(self, fmt: str, rel: str) -> Path:
        """What `suggest tiny.py --seq 64 --profile fast.json --format FMT` writes, at `rel` (with tiny.py
        and fast.json beside it, as the header names them)."""
        self.tiny()
        self.profile("fast.json")
        return self.write(rel, self.fixtures.committed(fmt))

    def in_context(self, rel_dir: str = "prof/in-context", mutate: Callable | None = None) -> Path:
        """The forged H100 in-context results of tiny.py at seq 64 in `rel_dir`: `mutate(lines)` may change
        the list of decoded JSON lines (or return bytes to write instead)."""
        lines = [json.loads(line) for line in self.fixtures.in_context_text().splitlines()]
        data = mutate(lines) if mutate is not None else None
        if data is None:
            data = "".join(json.dumps(line) + "\n" for line in lines)
        return self.write(f"{rel_dir}/run-20261126T000000Z-fuzz0001.jsonl", data)


class Fixtures:
    """What many cases share, built once (and only when a selected case asks for it) in `folder`."""

    def __init__(self, folder: Path, mem_bytes: int):
        self.folder = folder
        self.mem_bytes = mem_bytes
        self._lock = threading.Lock()
        self._cache: dict = {}
        self._locks: dict[str, threading.Lock] = {}

    def _once(self, key: str, build: Callable):
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._cache:
                try:
                    self._cache[key] = build()
                except Exception as error:  # remembered: every case asking for it is skipped with why
                    self._cache[key] = error
            value = self._cache[key]
        if isinstance(value, Exception):
            raise value
        return value

    def _run(self, folder: Path, *argv: str) -> subprocess.CompletedProcess:
        env = base_env(folder, folder / "prof")
        done = subprocess.run(
            [sys.executable, "-m", "fp8advisor", *argv],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"fixture: fp8advisor {' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-300:]}"
            )
        return done

    def fast_profile(self) -> dict:
        """A published H100 profile fitted from a table where float8 is 2x everywhere (M 16-1024, K and N
        32-1024): with it, every divisible Linear of the tiny model converts."""

        def build():
            folder = self.folder / "fast"
            folder.mkdir(parents=True, exist_ok=True)
            rows = ["recipe,M,K,N,speedup"]
            for recipe in ("rowwise", "tensorwise"):
                for m in (16, 64, 256, 1024):
                    for k in (32, 64, 256, 1024):
                        for n in (32, 64, 256, 1024):
                            rows.append(f"{recipe},{m},{k},{n},2.0")
            (folder / "fast.csv").write_text("\n".join(rows) + "\n")
            self._run(
                folder,
                "fit",
                "fast.csv",
                "--device",
                "NVIDIA H100 80GB HBM3",
                "--name",
                "fast",
                "--created",
                "2026-01-01",
                "-o",
                "fast.json",
            )
            return json.loads((folder / "fast.json").read_text())

        return json.loads(json.dumps(self._once("fast", build)))

    def committed(self, fmt: str) -> bytes:
        def build():
            folder = self.folder / f"committed-{fmt}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "tiny.py").write_text(tiny_source())
            (folder / "fast.json").write_text(json.dumps(self.fast_profile(), indent=1))
            done = self._run(
                folder, "suggest", "tiny.py", "--seq", "64", "--profile", "fast.json", "--format", fmt
            )
            return done.stdout.encode()

        return self._once(f"committed-{fmt}", build)

    def in_context_text(self) -> str:
        """`bench --model tiny.py --emulate --seq 64` results, forged to say a real H100 measured them."""

        def build():
            folder = self.folder / "in-context"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "tiny.py").write_text(tiny_source())
            (folder / "fast.json").write_text(json.dumps(self.fast_profile(), indent=1))
            self._run(
                folder,
                "bench",
                "--model",
                "tiny.py",
                "--emulate",
                "--seq",
                "64",
                "--profile",
                "fast.json",
                "--out",
                "ctx",
            )
            run = next((folder / "ctx").glob("run-*.jsonl"))
            lines = []
            for line in run.read_text().splitlines():
                record = json.loads(line)
                if record.get("kind") == "run":
                    record["device"].update(
                        name="NVIDIA H100 80GB HBM3", emulated=False, compute_capability=[9, 0]
                    )
                if "emulated" in record:
                    record["emulated"] = False
                lines.append(json.dumps(record))
            return "\n".join(lines) + "\n"

        return self._once("in-context", build)


def base_env(root: Path, prof: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FP8ADVISOR", "FORCE_COLOR", "HF_"))}
    env.update(
        HOME=str(root / "home"),
        FP8ADVISOR_PROFILE_DIR=str(prof),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HOME=str(root / "home" / "hf"),
        COLUMNS="120",
        PYTHONDONTWRITEBYTECODE="1",
    )
    env.pop("NO_COLOR", None)
    return env


# --- snapshots of the work folder ---------------------------------------------------------------------------


def snapshot(folder: Path) -> dict[str, tuple]:
    """Every entry under `folder` (relative path -> what it is): regular files by content hash (size and
    mtime above 64 MiB), FIFOs and devices by kind, symlinks by target, folders as such. Nothing is opened but
    regular files, so a FIFO never blocks."""
    entries: dict[str, tuple] = {}
    for directory, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            path = Path(directory) / name
            rel = str(path.relative_to(folder))
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISLNK(info.st_mode):
                entries[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                entries[rel] = ("dir",)
            elif stat.S_ISREG(info.st_mode):
                if info.st_size > 64 * 2**20:
                    entries[rel] = ("big", info.st_size, info.st_mtime_ns)
                else:
                    try:
                        entries[rel] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
                    except OSError:
                        entries[rel] = ("unreadable",)
            else:
                entries[rel] = ("special", stat.S_IFMT(info.st_mode))
    return entries


def _matches(rel: str, globs: Iterable[str]) -> bool:
    return any(
        fnmatch.fnmatch(rel, pattern)
        or rel.startswith(pattern.rstrip("*/") + "/")
        and pattern.endswith("/**")
        for pattern in globs
    )


# --- running one step ---------------------------------------------------------------------------------------


@dataclass
class Outcome:
    argv: list[str]
    returncode: int
    stdout: bytes
    stderr: bytes
    seconds: float
    timed_out: bool = False
    late_after_interrupt: float | None = None  # seconds it kept running after the signal, past its grace
    signalled_at: float | None = None
    kept: dict[str, int] = field(default_factory=dict)  # file -> lines when the signal was sent
    maxrss_mb: float = 0.0

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", "replace") + "\n" + self.stderr.decode("utf-8", "replace")

    def summary(self) -> str:
        status = "timed out" if self.timed_out else f"exit {self.returncode}"
        err = self.stderr.decode("utf-8", "replace").strip()
        lines = [line for line in err.splitlines() if line.strip()]
        error = next((line for line in lines if line.startswith(("error:", "Error:"))), None)
        if error is None and TRACEBACK in err:
            error = next((line for line in reversed(lines) if not line.startswith(" ")), "")
        first = error if error is not None else (lines[-1] if lines else "")
        first = first.encode("unicode_escape").decode("ascii") if CONTROL.search(first) else first
        return f"{status}, {self.seconds:.0f} s: {first[:120]}"


def _limit(mem_bytes: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def _dq(text: str, root: Path) -> str:
    """`text` in double quotes for bash, with the case's root folder as ${ROOT} (repro.sh)."""
    escaped = re.sub(r'([\\"$`])', r"\\\1", text)
    return '"' + escaped.replace(str(root), "${ROOT}") + '"'


def step_env(ctx: Context, step: Step) -> dict[str, str]:
    env = base_env(ctx.root, ctx.prof)
    for key, value in step.env.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = ctx.sub(value)
    return env


def _line_counts(folder: Path, pattern: str) -> dict[str, int]:
    counts = {}
    for path in folder.glob(pattern):
        try:
            if path.is_file():
                counts[str(path)] = path.read_bytes().count(b"\n")
        except OSError:
            pass
    return counts


def run_step(ctx: Context, step: Step, index: int, mem_bytes: int) -> Outcome:
    argv = [sys.executable, "-m", "fp8advisor", *(ctx.sub(arg) for arg in step.argv)]
    env = step_env(ctx, step)
    cwd = ctx.work / step.cwd
    changed = {k: v for k, v in env.items() if os.environ.get(k) != v}
    ctx.commands.append(
        'cd "${ROOT}/work/'
        + step.cwd
        + '" && '
        + " ".join(f"{k}={_dq(v, ctx.root)}" for k, v in sorted(changed.items()) if k != "PATH")
        + " python -m fp8advisor "
        + " ".join(_dq(a, ctx.root) for a in argv[3:])
    )
    logs = ctx.root / "logs"
    with open(logs / f"{index}.out", "wb") as out, open(logs / f"{index}.err", "wb") as err:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=err,
            preexec_fn=_limit(mem_bytes),
            start_new_session=True,
        )
    started = time.monotonic()
    outcome = Outcome(argv, 0, b"", b"", 0.0)
    interrupt = step.interrupt
    status, usage = None, None
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        now = time.monotonic()
        if interrupt is not None and outcome.signalled_at is None and _due(ctx, interrupt, now - started):
            if interrupt.kept_glob:
                outcome.kept = _line_counts(ctx.work, interrupt.kept_glob)
            for n in range(interrupt.repeat):
                _signal(proc.pid, interrupt.sig, interrupt.group)
                if n + 1 < interrupt.repeat:
                    time.sleep(0.3)
            outcome.signalled_at = time.monotonic() - started
        if (
            outcome.signalled_at is not None
            and now - started - outcome.signalled_at > interrupt.grace_s
            and outcome.late_after_interrupt is None
        ):
            outcome.late_after_interrupt = now - started - outcome.signalled_at
        if now - started > step.timeout:
            outcome.timed_out = True
            _signal(proc.pid, signal.SIGKILL, True)
            _, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.05)
    outcome.seconds = time.monotonic() - started
    outcome.returncode = os.waitstatus_to_exitcode(status)
    proc.returncode = outcome.returncode  # reaped here: Popen must not wait for it again
    proc.stdin.close()
    _signal(proc.pid, signal.SIGKILL, True)  # whatever it left running in its group
    outcome.maxrss_mb = usage.ru_maxrss / 1024 if usage else 0.0
    outcome.stdout = (logs / f"{index}.out").read_bytes()
    outcome.stderr = (logs / f"{index}.err").read_bytes()
    return outcome


def _due(ctx: Context, interrupt: Interrupt, elapsed: float) -> bool:
    if interrupt.wait_glob is not None:
        if any(n >= interrupt.wait_lines for n in _line_counts(ctx.work, interrupt.wait_glob).values()):
            return True
        return elapsed > interrupt.max_wait_s
    return elapsed >= (interrupt.after_s or 0.0)


def _signal(pid: int, sig: int, group: bool) -> None:
    try:
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# --- judging ------------------------------------------------------------------------------------------------


def _outcome_name(code: int) -> str:
    if code in INTERRUPT_CODES:
        return "interrupt"
    return {0: "ok", 1: "fail", 2: "refuse"}.get(code, f"exit {code}")


def _refusal_form(stderr: str) -> str | None:
    """Why `stderr` of an exit 2 is not one clear message; None when it is."""
    lines = stderr.rstrip("\n").split("\n") if stderr.strip() else []
    errors = [i for i, line in enumerate(lines) if line.startswith("error:")]
    if not errors:
        usage = [i for i, line in enumerate(lines) if line.startswith("Error:")]
        if len(usage) == 1 and any(line.startswith("Usage:") for line in lines):
            return None  # click's usage error for a malformed option: a clear refusal
        return "exit 2 without an `error:` line on stderr"
    if len(errors) > 1:
        return f"{len(errors)} `error:` lines"
    after = lines[errors[0] + 1 :]
    if after and after[0].startswith("  hint:"):
        after = after[1:]
        while after and after[0].startswith("    "):  # a hint's example, indented under it
            after = after[1:]
    if after:
        return f"{len(after)} line(s) after the error: {after[0][:80]!r}"
    if len(lines[errors[0]]) < len("error: ") + 8:
        return "an empty error message"
    return None


def judge_step(ctx: Context, step: Step, out: Outcome, before: dict, mem_bytes: int) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    add = problems.append
    text = out.text
    code = out.returncode
    got = _outcome_name(code)

    if out.timed_out:
        add(("hangs", f"still running after {step.timeout:.0f} s (killed)"))
    if out.late_after_interrupt is not None:
        add(("hangs", f"still running {step.interrupt.grace_s:.0f} s after the signal"))
    memory = MEMORY.search(text)
    if memory:
        add(("memory", f"{memory.group(0)} (peak RSS {out.maxrss_mb:.0f} MB)"))
    if TRACEBACK in text:
        tail = text[text.rindex(TRACEBACK) :].strip().splitlines()
        last = next((line for line in reversed(tail) if line and not line.startswith(" ")), "?")
        add(("tracebacks", last[:160]))
    ours = {signal.SIGKILL} if out.timed_out else set()
    if step.interrupt is not None:
        ours.add(step.interrupt.sig)
    if code < 0 and -code not in ours and not (step.interrupt and code == -signal.SIGINT):
        name = signal.Signals(-code).name
        add(("memory" if memory else "tracebacks", f"killed by {name}"))

    if not out.timed_out and got not in step.expect:
        add(_wrong_exit(step.expect, got, code))
    if got == "refuse" and "refuse" in step.expect:
        why = _refusal_form(out.stderr.decode("utf-8", "replace"))
        if why:
            add(("refusals", why))
    if not step.control_ok:
        for stream, data in (("stdout", out.stdout), ("stderr", out.stderr)):
            found = CONTROL.search(data.decode("utf-8", "replace"))
            if found:
                start = max(0, found.start() - 20)
                snippet = data.decode("utf-8", "replace")[start : found.end() + 20]
                add(("terminal", f"{stream} holds {found.group(0)!r}: {snippet!r}"))
                break
    for needed in step.contains:
        if needed not in text:
            add(("terminal" if "[" in needed else "false success", f"output lacks {needed!r}"))
    for unwanted in step.absent:
        if unwanted in text:
            add(("refusals", f"the message says {unwanted!r}"))
    if code == 0:
        for pattern in step.contains_if_ok:
            if not re.search(pattern, text, re.IGNORECASE):
                add(("false success", f"exit 0, yet the output never says /{pattern}/"))

    after = snapshot(ctx.work)
    problems += _file_problems(step, before, after, code)
    for canary in (ctx.canary, ctx.work / "CANARY"):
        if canary.exists():
            add(("code", "a planted payload ran while fp8advisor ran (canary created)"))
            canary.unlink()
    if code == 0 and not out.timed_out:
        problems += _generated_problems(ctx, step, out, before, after, mem_bytes)
        if "--json" in step.argv:
            why = strict_json_problem(out.stdout.decode("utf-8", "replace"))
            if why:
                add(("false success", f"--json printed {why}"))
    if step.interrupt is not None and step.interrupt.kept_glob:
        for path, lines in out.kept.items():
            now = _line_counts(Path(path).parent, Path(path).name).get(path, 0)
            if now < lines:
                add(("files", f"{Path(path).name} had {lines} lines at Ctrl-C, {now} after"))
    for check in step.checks:
        problems += check(ctx, out) or []
    return problems


def _wrong_exit(expect: frozenset[str], got: str, code: int) -> tuple[str, str]:
    wanted = "|".join(sorted(expect, key=list(EXIT).index))
    if got == "ok":
        return ("false success", f"exit 0, expected {wanted}")
    if got == "interrupt":
        return ("refusals", f"exit {code} (interrupted?), expected {wanted}")
    if "refuse" in expect and got == "fail":
        return ("refusals", f"exit 1 instead of a refusal (expected {wanted})")
    if got in ("refuse", "fail"):
        return (
            "refusals",
            f"wrong {'refusal' if got == 'refuse' else 'failure'}: exit {code}, expected {wanted}",
        )
    return ("refusals", f"exit {code}, expected {wanted}")


def _file_problems(step: Step, before: dict, after: dict, code: int) -> list[tuple[str, str]]:
    problems = []
    succeeded = code == 0 or step.interrupt is not None  # an interrupted run keeps what it measured
    for rel, entry in before.items():
        now = after.get(rel)
        if now == entry:
            continue
        if entry[0] == "dir" and now is not None:
            continue
        declared = _matches(rel, step.outputs)
        what = "removed" if now is None else "changed"
        if not declared:
            problems.append(("files", f"{rel} {what}"))
        elif not succeeded:
            problems.append(("files", f"{rel} {what} by a run that exited {code}"))
    if not succeeded:
        for rel in after.keys() - before.keys():
            if _matches(rel, step.outputs) and after[rel][0] != "dir":
                problems.append(("files", f"{rel} written by a run that exited {code}"))
    return problems


def strict_json_problem(text: str) -> str | None:
    def refuse_constant(name: str):
        raise ValueError(f"{name} (not JSON)")

    try:
        json.loads(text, parse_constant=refuse_constant)
    except ValueError as error:
        return f"invalid JSON: {str(error)[:100]}"
    return None


def _generated_problems(ctx, step, out, before, after, mem_bytes) -> list[tuple[str, str]]:
    problems = []
    for rel, kind in step.generated:
        if rel == "<stdout>":
            path = ctx.root / "logs" / f"stdout.{kind}"
            path.write_bytes(out.stdout)
        else:
            path = ctx.work / ctx.sub(rel)
            key = str(path.relative_to(ctx.work)) if path.is_relative_to(ctx.work) else None
            if not path.exists():
                problems.append(("false success", f"exit 0 but {rel} was not written"))
                continue
            if key is not None and before.get(key) == after.get(key):
                problems.append(("false success", f"exit 0 but {rel} was not written"))
                continue
        problems += load_generated(ctx, step, path, kind, mem_bytes)
    return problems


def load_generated(ctx: Context, step: Step, path: Path, kind: str, mem_bytes: int) -> list[tuple[str, str]]:
    """Load a generated file as its framework would (fuzz_loader.py, in a process of its own) and say what
    is wrong with it."""
    options = {
        "fqns": [ctx.sub(fqn) for fqn in step.fqns] if step.fqns is not None else None,
        "target": ctx.sub(step.target) if step.target is not None else None,
        "root": str(ctx.root),
        "canaries": [str(ctx.canary), str(ctx.work / "CANARY")],
    }
    env = step_env(ctx, step)
    try:
        done = subprocess.run(
            [sys.executable, str(LOADER), kind, str(path), json.dumps(options)],
            cwd=ctx.work,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=_limit(mem_bytes),
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return [("false success", f"loading {path.name} as {kind} did not end in 120 s")]
    try:
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return [("false success", f"the {kind} loader failed on {path.name}: {done.stderr.strip()[-200:]}")]
    for canary in options["canaries"]:
        if Path(canary).exists():
            Path(canary).unlink()
    return [(count, f"{path.name}: {detail}") for count, detail in found]


def shipped_profile(name: str) -> dict:
    return json.loads((REPO / "data" / "profiles" / f"{name}.json").read_text())


def copy_repo_file(ctx: Context, source: str, rel: str) -> Path:
    path = ctx.path(rel)
    shutil.copy(REPO / source, path)
    return path


def outside_work(root: Path) -> set[str]:
    """The files in a case's root folder outside its work, logs and home folders."""
    found = set()
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if rel.parts[0] not in ("work", "logs", "home") and not path.is_dir():
            found.add(str(rel))
    return found


def forbid_new_files(*globs: str, where: str = "work") -> Callable:
    """A check: no file appeared during the step but those matching `globs` (relative to the work folder);
    where="root": none beside the work folder."""

    def check(ctx: Context, out: Outcome):
        if where == "root":
            new = outside_work(ctx.root) - ctx.root_before
        else:
            now = snapshot(ctx.work)
            new = {rel for rel in now.keys() - ctx.before.keys() if now[rel][0] != "dir"}
            new = {rel for rel in new if not _matches(rel, globs)}
        return [("files", f"wrote {rel} outside where it may write") for rel in sorted(new)]

    return check


def readable_by_suggest(profile_rel: str) -> Callable:
    """A check: the profile the step wrote can be used by `suggest` (what the tool writes, it must read)."""

    def check(ctx: Context, out: Outcome):
        if out.returncode != 0:
            return []
        path = ctx.work / ctx.sub(profile_rel)
        if not path.exists():
            return [("false success", f"exit 0 but {profile_rel} was not written")]
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "fp8advisor",
                "suggest",
                "tiny.py",
                "--seq",
                "64",
                "--profile",
                str(path),
                "--json",
            ],
            cwd=ctx.work,
            env=base_env(ctx.root, ctx.prof),
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        if done.returncode != 0:
            last = done.stderr.strip().splitlines()[-1:] or [""]
            return [
                (
                    "false success",
                    f"suggest cannot use the profile it wrote: exit {done.returncode}: {last[0][:120]}",
                )
            ]
        why = strict_json_problem(done.stdout)
        return [("false success", f"suggest --json with the profile it wrote printed {why}")] if why else []

    return check
