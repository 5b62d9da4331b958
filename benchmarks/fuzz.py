"""Hostile and careless input across every command and input surface of the `fp8advisor` CLI (issue 25):
never run the user's text as code, never lie, never lose a file.

Each case runs `python -m fp8advisor ...` (this interpreter) as a fresh process in a fresh temporary folder
holding what the case plants there first: hostile model files, configs of every format, profiles, results,
CSV tables, FIFOs, symlinks, BOM files, hand-written files in the way of `-o`. The profile directory
(FP8ADVISOR_PROFILE_DIR) and HOME are inside that folder, the Hub is offline (HF_HUB_OFFLINE), stdin is an
open pipe never written to (a prompt is a hang), and each process has a wall-clock limit (60 s unless the
case says otherwise) and an address-space limit (RLIMIT_AS, 3 GiB unless --mem-gib says otherwise).

A case has one or more steps; each expects `ok` (exit 0), `fail` (exit 1: a stale --check, a failing
verify), `refuse` (exit 2 with one clear message) or `interrupt` (exit 130 after Ctrl-C), or a set of them
(`ok|refuse`: a hostile name may be accepted, and then escaped, or refused; nothing else). The cases are
grouped by the issue's 10 classes; benchmarks/fuzz_cases.py holds them, fuzz_support.py runs and judges
them, fuzz_loader.py loads a generated file as its framework would.

The counts (a case counts at most once per column, and may count in several):

  tracebacks     "Traceback (most recent call last)" in stdout or stderr, or the process died of a signal
                 it did not get from us (a crash)
  false success  exit 0 where the case expects a refusal, a failure or an interrupt; or exit 0 with output
                 that is not what it says: a generated file that does not parse, or whose filter names
                 something that is no layer of the model, or whose check command does not name the target;
                 `--json` output that is not strict JSON (NaN, Infinity, extra text); a profile `fit` wrote
                 that `suggest` cannot use; a warning the case requires (a bad file named) missing
  code           a canary file created by a payload planted in a profile, a layer name, a path, a results
                 file or an environment variable, while fp8advisor ran or when its generated file is loaded
                 (Python: runpy; YAML: PyYAML's unsafe loader; the header's check command: bash); or a header
                 line that is no longer a comment (a line break of the file's syntax inside it); or a
                 top-level Python statement the generator does not write
  files          a file that existed before the run (content hash) changed or disappeared and is not the
                 step's declared output; a run that did not succeed wrote its output anyway; a file written
                 outside where the command may write; results measured before a Ctrl-C lost
  hangs          still running at the time limit, or more than 15 s after Ctrl-C
  memory         MemoryError, std::bad_alloc, ENOMEM or "Cannot allocate memory" in the output (the address
                 space limit turns a blow-up into one of these)
  refusals       unclear or wrong: an exit 2 whose stderr is not one `error: ...` line, optionally followed
                 by one `  hint: ...` line (and lines indented under it); lines before it, such as the
                 model's own prints and notes, are allowed, and so is click's `Usage: ... Error: ...` block
                 for a malformed option; exit 1 or another status where a refusal was expected; a refusal or
                 exit 1 where success was expected; a message holding what the case says it must not
                 ("line None", "contextlib")
  terminal       untrusted text reaching the terminal raw: an ESC or any other C0 or C1 control character
                 but newline and tab in stdout or stderr, or user text eaten as rich markup (`w[red]` shown
                 as `w`)

Run it from the repository, with the project's virtual environment active:

  python benchmarks/fuzz.py                        # every case, 2 at a time
  python benchmarks/fuzz.py --jobs 1 --class 6     # one class (its number, or a word of its name)
  python benchmarks/fuzz.py --case fifo --quick    # cases whose name holds "fifo", leaving out slow ones
  python benchmarks/fuzz.py --keep /tmp/fuzz       # keep every case's folder, with a repro.sh
  python benchmarks/fuzz.py --list                 # list the cases

It prints each case as it ends, a table of the failing cases (class, name, expectation, exit status with the
first error line, problems), and the counts per class and in total. It exits 1 when any count is not 0 (or a
case could not be set up), else 0, so that CI can run it. `--quick` leaves out the slow cases (verify, bench,
Ctrl-C). A full run (340 cases) takes 7 to 9 minutes with --jobs 2 on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from fuzz_cases import CLASSES, all_cases  # noqa: E402
from fuzz_support import (  # noqa: E402
    COUNTS,
    Case,
    Fixtures,
    judge_step,
    outside_work,
    run_step,
    snapshot,
)


@dataclass
class CaseResult:
    case: Case
    problems: list[tuple[str, str]] = field(default_factory=list)  # (count, detail)
    summary: str = ""  # the last step's exit status and first stderr line
    seconds: float = 0.0
    skipped: str | None = None


def _prepare(case: Case, root: Path, fixtures: Fixtures):
    from fuzz_support import Context

    work = root / "work"
    (root / "logs").mkdir(parents=True)
    (root / "home").mkdir()
    work.mkdir()
    (work / "prof").mkdir()
    ctx = Context(root=root, work=work, fixtures=fixtures, case=case)
    if case.setup is not None:
        case.setup(ctx)
    return ctx


def run_case(case: Case, base: Path, fixtures: Fixtures, mem_bytes: int) -> CaseResult:
    started = time.monotonic()
    result = CaseResult(case)
    root = base / case.name
    try:
        ctx = _prepare(case, root, fixtures)
    except Exception as error:  # a case that cannot be set up is a bug of this script, not of fp8advisor
        result.skipped = f"setup failed: {type(error).__name__}: {error}"
        result.seconds = time.monotonic() - started
        return result
    previous_ok = True
    for index, step in enumerate(case.steps):
        if step.after_ok and not previous_ok:
            break
        before = ctx.before = snapshot(ctx.work)
        ctx.root_before = outside_work(ctx.root)
        outcome = run_step(ctx, step, index, mem_bytes)
        problems = judge_step(ctx, step, outcome, before, mem_bytes)
        result.problems += [
            (count, f"step {index + 1}: {detail}" if len(case.steps) > 1 else detail)
            for count, detail in problems
        ]
        result.summary = outcome.summary()
        previous_ok = outcome.returncode == 0 and not outcome.timed_out
    _write_repro(ctx)
    result.seconds = time.monotonic() - started
    return result


def _write_repro(ctx) -> None:
    """repro.sh in the case folder: the same commands, with the same environment, from its work folder."""
    lines = [
        "#!/bin/bash",
        "# this case's steps, as the fuzz script ran them (the files are as they were after the run)",
        'ROOT="$(cd "$(dirname "$0")" && pwd)"',
    ]
    for command in ctx.commands:
        lines.append(command)
    path = ctx.root / "repro.sh"
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o755)


def _keep(base: Path, keep: Path) -> None:
    """Copy every case folder to `keep`: FIFOs are made again, sparse giants are left out (named)."""

    def copy(src: str, dst: str) -> None:
        info = os.lstat(src)
        import stat

        if stat.S_ISFIFO(info.st_mode):
            os.mkfifo(dst)
        elif not stat.S_ISREG(info.st_mode):
            return
        elif info.st_size > 64 * 2**20:
            Path(dst + ".left-out").write_text(f"{info.st_size} bytes: not copied\n")
        else:
            shutil.copy2(src, dst)

    keep.mkdir(parents=True, exist_ok=True)
    for folder in sorted(base.iterdir()):
        if folder.is_dir() and not folder.name.startswith("_"):
            target = keep / folder.name
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(folder, target, symlinks=True, copy_function=copy, ignore_dangling_symlinks=True)


def _select(cases: list[Case], classes: list[str], names: list[str], quick: bool) -> list[Case]:
    chosen = []
    wanted = set()
    for item in classes:
        for number, (short, title) in CLASSES.items():
            if item == str(number) or item.lower() in short.lower() or item.lower() in title.lower():
                wanted.add(number)
    for case in cases:
        if wanted and case.klass not in wanted:
            continue
        if names and not any(name in case.name for name in names):
            continue
        if quick and case.slow:
            continue
        chosen.append(case)
    return chosen


def _first_line(text: str, width: int = 90) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    line = line.encode("unicode_escape").decode("ascii") if any(ord(c) < 32 for c in line) else line
    return line[:width] + ("..." if len(line) > width else "")


def report(results: list[CaseResult], elapsed: float, jobs: int) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(width=max(160, shutil.get_terminal_size().columns), highlight=False)
    failing = [r for r in results if r.problems or r.skipped]
    if failing:
        table = Table(title=f"Failing cases ({len(failing)} of {len(results)})", show_lines=False)
        table.add_column("class", justify="right")
        table.add_column("case")
        table.add_column("expects")
        table.add_column("exit, first stderr line")
        table.add_column("problems")
        for r in sorted(failing, key=lambda r: (r.case.klass, r.case.name)):
            problems = r.skipped or "; ".join(f"{count}: {detail}" for count, detail in _unique(r.problems))
            table.add_row(
                str(r.case.klass),
                escape(r.case.name),
                escape(r.case.expects),
                escape(r.summary),
                escape(problems[:400]),
            )
        console.print(table)

    counts = Table(title="Counts per class (cases with the problem)")
    counts.add_column("class")
    counts.add_column("cases", justify="right")
    for name in COUNTS:
        counts.add_column(name, justify="right")
    totals = dict.fromkeys(COUNTS, 0)
    for number, (short, _title) in CLASSES.items():
        in_class = [r for r in results if r.case.klass == number]
        if not in_class:
            continue
        row = []
        for name in COUNTS:
            n = sum(1 for r in in_class if any(count == name for count, _ in r.problems))
            totals[name] += n
            row.append(str(n) if n else "0")
        counts.add_row(f"{number} {short}", str(len(in_class)), *row)
    counts.add_row("total", str(len(results)), *(str(totals[name]) for name in COUNTS), style="bold")
    console.print(counts)
    skipped = [r for r in results if r.skipped]
    if skipped:
        console.print(
            f"{len(skipped)} case(s) could not be set up (a bug of the fuzz script): "
            + ", ".join(r.case.name for r in skipped)
        )
    console.print(
        f"{len(results)} cases in {elapsed:.0f} s with --jobs {jobs}; "
        f"{len(failing)} failing; python {sys.version.split()[0]}"
    )
    return 1 if any(totals.values()) or skipped else 0


def _unique(items):
    seen = set()
    for item in items:
        if item not in seen:
            seen.add(item)
            yield item


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2, help="cases run at once (default 2)")
    parser.add_argument(
        "--class",
        dest="classes",
        action="append",
        default=[],
        metavar="NAME",
        help="only this class (its number 1-10 or a word of its name); repeatable",
    )
    parser.add_argument(
        "--case",
        dest="names",
        action="append",
        default=[],
        metavar="TEXT",
        help="only cases whose name contains TEXT; repeatable",
    )
    parser.add_argument("--quick", action="store_true", help="leave out the slow cases (verify, bench)")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="keep every case's folder in DIR")
    parser.add_argument("--mem-gib", type=float, default=3.0, help="address-space limit per process")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    args = parser.parse_args(argv)

    cases = _select(all_cases(), args.classes, args.names, args.quick)
    if args.list:
        for case in cases:
            print(f"{case.klass:2} {case.name:48} {case.expects:22} {'slow' if case.slow else ''}")
        print(f"{len(cases)} cases")
        return 0
    if not cases:
        print("no case selected", file=sys.stderr)
        return 2
    mem_bytes = int(args.mem_gib * 2**30)
    base = Path(tempfile.mkdtemp(prefix="fp8fuzz-", dir="/tmp" if Path("/tmp").is_dir() else None))
    fixtures = Fixtures(base / "_fixtures", mem_bytes)
    started = time.monotonic()
    results: list[CaseResult] = []
    lock = threading.Lock()
    done = 0
    try:
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = {pool.submit(run_case, case, base, fixtures, mem_bytes): case for case in cases}
            for future in as_completed(futures):
                r = future.result()
                with lock:
                    results.append(r)
                    done += 1
                    mark = "ok  " if not (r.problems or r.skipped) else "FAIL"
                    print(f"[{done:3}/{len(cases)}] {mark} {r.case.name} ({r.seconds:.0f} s)", flush=True)
    except KeyboardInterrupt:
        print("interrupted: the cases run so far", file=sys.stderr)
    finally:
        if args.keep:
            _keep(base, args.keep)
            print(f"case folders kept in {args.keep}")
        shutil.rmtree(base, ignore_errors=True)
    return report(results, time.monotonic() - started, args.jobs)


if __name__ == "__main__":
    sys.exit(main())
