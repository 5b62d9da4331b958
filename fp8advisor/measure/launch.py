"""One grid measured on several GPUs, or machines, at once: torch's own launcher (torchrun), a worker's place
in it, and the locks that let the shards of one grid write to one results directory together.

- `bench --gpus N` runs the same command again under torchrun (`torchrun_command`: `python -m
  torch.distributed.run --standalone --nproc-per-node N --max-restarts 2 -m fp8advisor bench ...`, the
  user's other arguments as given) and waits for it (`run_torchrun`). When a worker dies, torchrun stops the
  others and starts the group again (at most `MAX_RESTARTS` times); each worker resumes what its shard saved.
- A worker (`TorchrunWorker.from_environment`: torchrun's RANK, WORLD_SIZE and LOCAL_RANK, with
  TORCHELASTIC_RUN_ID telling torchrun's apart from other variables of those names) measures shard
  RANK+1 of WORLD_SIZE on the node's GPU LOCAL_RANK (`pin_gpu`). RANK and WORLD_SIZE count every worker of
  every node, so torchrun across nodes with its rendezvous needs nothing more.
- `ShardLock`: a whole-grid run holds the results directory's lock exclusive (`files.DirectoryLock`); a shard
  run holds it shared and its own shard's lock exclusive. So the shards of one split (the same N) run side by
  side and nothing else does: not the same shard twice, not a whole-grid run beside a shard, not a shard of
  another N (its points would overlap these). The shards' locks are taken, and their run files created,
  under a third lock held for an instant (`ShardLock.creating`), so that no two processes take one run file
  name, whatever their random run ids.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fp8advisor.errors import AdvisorError, quote
from fp8advisor.files import DirectoryLock, absolute, lock_holder
from fp8advisor.measure.schedule import Shard

#: How many times torchrun starts the worker group again after a worker died (`--max-restarts`): each start
#: resumes what was saved, so a crash costs the points in flight.
MAX_RESTARTS = 2

#: The variables torchrun sets in every worker that say where the worker stands (torch.distributed.run's
#: docs); TORCHELASTIC_RUN_ID is set by torchrun alone.
TORCHRUN_MARK = "TORCHELASTIC_RUN_ID"
_PLACE = ("RANK", "WORLD_SIZE", "LOCAL_RANK")

#: The lock files in a results directory (`ShardLock`).
DIRECTORY_LOCK = ".fp8advisor-bench.lock"
SHARDS_LOCK = ".fp8advisor-bench-shards.lock"
_SHARD_LOCK = re.compile(r"\.fp8advisor-bench-shard-(\d+)-of-(\d+)\.lock")
#: Seconds a shard waits for another to finish taking its locks or creating its run file (an instant).
_REGISTRY_WAIT_S = 30.0


def shard_lock_name(shard: Shard) -> str:
    """`.fp8advisor-bench-shard-2-of-8.lock`: the lock file that shard 2/8 holds while it runs."""
    return f".fp8advisor-bench-shard-{shard.index}-of-{shard.count}.lock"


# --- the launcher -------------------------------------------------------------------------------------------


def parse_gpus(text: str) -> int | None:
    """`--gpus`: a number of processes from 1, or `all` (None: every GPU of this machine, counted later)."""
    if text.strip().lower() == "all":
        return None
    if re.fullmatch(r"\s*\d{1,4}\s*", text, flags=re.ASCII) and int(text) >= 1:
        return int(text)
    raise AdvisorError(
        f"--gpus takes `all` or a number of processes from 1 to 9999, got {quote(text)}",
        hint="e.g. --gpus all (one per GPU of this machine), or --gpus 4 --emulate to try it on the CPU",
    )


def gpu_count() -> int:
    """The CUDA GPUs this process sees (none without CUDA)."""
    import torch

    return torch.cuda.device_count()


def _require_torchrun() -> None:
    """An `AdvisorError` when this torch has no torch.distributed (some builds leave it out): no torchrun."""
    import torch.distributed

    if not torch.distributed.is_available():
        raise AdvisorError(
            "--gpus starts its processes with torchrun, and this build of torch has no torch.distributed",
            hint="install a torch build with distributed support, or run --shard I/N in one process per GPU",
        )


def process_count(text: str, *, emulate: bool) -> int:
    """The processes `--gpus TEXT` asks for (`parse_gpus`): `all` is every GPU of this machine. More than it
    has, or any without one, is refused, but with `emulate` (N CPU processes)."""
    processes = parse_gpus(text)
    if processes != 1:
        _require_torchrun()
    if processes is not None and emulate:
        return processes
    visible = gpu_count()
    if not visible:
        raise AdvisorError(
            f"--gpus {text}: no CUDA GPU is visible",
            hint=f"use --gpus {processes or 'N'} --emulate to try it on the CPU with that many processes",
        )
    if processes is not None and processes > visible:
        raise AdvisorError(
            f"--gpus {processes}: this machine has {visible} visible GPU(s)",
            hint=f"use --gpus {visible} (or --gpus all), or fewer",
        )
    return visible if processes is None else processes


def without_gpus(arguments: Sequence[str]) -> list[str]:
    """The command line's arguments (after the program) less `--gpus VALUE` or `--gpus=VALUE`, the others as
    given. An `AdvisorError` when there is none: then these are not the arguments `--gpus` came with."""
    kept: list[str] = []
    found = skip = False
    for position, argument in enumerate(arguments):
        if skip:
            skip = False
        elif argument == "--":
            kept.extend(arguments[position:])
            break
        elif argument == "--gpus" or argument.startswith("--gpus="):
            found, skip = True, argument == "--gpus"
        else:
            kept.append(argument)
    if not found:
        raise AdvisorError(
            "--gpus runs this command line again under torchrun, but the command line holds no --gpus",
            hint="run it from a shell: fp8advisor bench --gpus N ...",
        )
    return kept


def torchrun_command(processes: int, arguments: Sequence[str]) -> list[str]:
    """The torchrun command that runs `fp8advisor ARGUMENTS` in `processes` workers on this machine."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={processes}",
        f"--max-restarts={MAX_RESTARTS}",
        "-m",
        "fp8advisor",
        *arguments,
    ]


def torchrun_environment(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The workers' environment: this one, with this process's fp8advisor first on PYTHONPATH (the workers
    run the same code however it was found) and OMP_NUM_THREADS 1 unless set (torchrun's own default, without
    its banner)."""
    package_parent = str(Path(__file__).resolve().parents[2])
    paths = [package_parent, *[p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    return {
        **environ,
        "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)),
        "OMP_NUM_THREADS": environ.get("OMP_NUM_THREADS") or "1",
    }


def run_torchrun(command: Sequence[str], environ: Mapping[str, str]) -> tuple[bool, int]:
    """Run torchrun; (whether a Ctrl-C came meanwhile, its exit status). A Ctrl-C at the terminal reaches
    torchrun too (the whole foreground group gets it), which passes it on to its workers, each saying what it
    saved: this process waits for that."""
    process = subprocess.Popen(list(command), env=dict(environ))
    interrupted = False
    while True:
        try:
            return interrupted, process.wait()
        except KeyboardInterrupt:
            interrupted = True


# --- a worker -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TorchrunWorker:
    """Where a process started by torchrun stands: its global `rank` of `world_size`, its GPU on this node."""

    rank: int
    world_size: int
    local_rank: int

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> TorchrunWorker | None:
        """This process's place, from torchrun's variables; None when torchrun did not start it."""
        if TORCHRUN_MARK not in environ:
            return None
        values = {}
        for name in _PLACE:
            text = environ.get(name)
            if text is None or not re.fullmatch(r"\d{1,9}", text, flags=re.ASCII):
                raise AdvisorError(
                    f"torchrun set {TORCHRUN_MARK} but {name} is {quote(text) if text else 'missing'}",
                    hint="start bench with torchrun's own launcher (python -m torch.distributed.run), or "
                    f"unset {TORCHRUN_MARK} to run without it",
                )
            values[name] = int(text)
        worker = cls(values["RANK"], values["WORLD_SIZE"], values["LOCAL_RANK"])
        if not worker.rank < worker.world_size:
            raise AdvisorError(
                f"torchrun's RANK {worker.rank} is not below its WORLD_SIZE {worker.world_size}",
                hint="start bench with torchrun's own launcher (python -m torch.distributed.run)",
            )
        return worker

    @property
    def shard(self) -> Shard:
        """The slice of the grid this worker measures: shard RANK+1 of WORLD_SIZE."""
        return Shard(self.rank + 1, self.world_size)


def pin_gpu(local_rank: int, environ: MutableMapping[str, str] = os.environ) -> str:
    """Make the node's GPU `local_rank` this process's only one (`cuda` is then that GPU), and its children's
    (the pre-compiling workers), through CUDA_VISIBLE_DEVICES: its `local_rank`-th entry when set (the GPUs
    torchrun's workers share), else `local_rank`. Call it before anything touches CUDA; should CUDA be in use
    already, the device is also chosen by index. Returns the value set."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    entries = None if visible is None else [entry.strip() for entry in visible.split(",") if entry.strip()]
    if entries is not None and local_rank >= len(entries):
        raise AdvisorError(
            f"torchrun's LOCAL_RANK is {local_rank}, but CUDA_VISIBLE_DEVICES={quote(visible)} names "
            f"{len(entries)} GPU(s)",
            hint="start at most as many processes per node as it has GPUs (--nproc-per-node)",
        )
    chosen = entries[local_rank] if entries is not None else str(local_rank)
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():  # too late for the variable in this process
        torch.cuda.set_device(local_rank)
    environ["CUDA_VISIBLE_DEVICES"] = chosen
    return chosen


# --- the locks ----------------------------------------------------------------------------------------------


class ShardLock:
    """The results directory's locks for a sweep of `shard` (None: the whole grid); see the module docstring.
    Raises an `AdvisorError` saying who holds what this run cannot share."""

    def __init__(self, directory: str | Path, shard: Shard | None):
        self.directory, self.shard = absolute(directory), shard
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> ShardLock:
        with contextlib.ExitStack() as stack:
            if self.shard is None:
                stack.enter_context(DirectoryLock(self.directory, DIRECTORY_LOCK, what="bench"))
            else:
                stack.enter_context(
                    DirectoryLock(
                        self.directory,
                        DIRECTORY_LOCK,
                        shared=True,
                        hint="wait for it to end, or use another --out: the shards of one grid share a "
                        "directory, a run of the whole grid (or of a model) holds it alone",
                    )
                )
                with self._registry():
                    self._refuse_other_splits()
                    stack.enter_context(
                        DirectoryLock(
                            self.directory,
                            shard_lock_name(self.shard),
                            hint=f"it is measuring shard {self.shard}: wait for it to end (the same "
                            "command then resumes what is left), or run another shard",
                        )
                    )
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    @contextlib.contextmanager
    def creating(self) -> Iterator[None]:
        """Held while a run file is created: no other shard creates one in the same instant (a whole-grid
        run holds the directory alone)."""
        if self.shard is None:
            yield
            return
        with self._registry():
            yield

    @contextlib.contextmanager
    def _registry(self) -> Iterator[None]:
        """The shards' lock, exclusive, waited for (others hold it for an instant)."""
        deadline = time.monotonic() + _REGISTRY_WAIT_S
        while True:
            try:
                lock = DirectoryLock(self.directory, SHARDS_LOCK, what="bench")
                lock.acquire()
                break
            except AdvisorError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        try:
            yield
        finally:
            lock.release()

    def _refuse_other_splits(self) -> None:
        """A shard of another N held in this directory: refused (under the registry, where no shard lock is
        taken meanwhile)."""
        assert self.shard is not None
        for path in sorted(self.directory.glob(".fp8advisor-bench-shard-*-of-*.lock")):
            match = _SHARD_LOCK.fullmatch(path.name)
            if match is None or int(match.group(2)) == self.shard.count:
                continue
            holder = lock_holder(path)
            if holder is not None:
                other = f"{match.group(1)}/{match.group(2)}"
                raise AdvisorError(
                    f"another bench is writing to {self.directory} (shard {other}, {holder}); shard "
                    f"{self.shard} splits the grid another way",
                    hint=f"shards of one grid share a directory only when they split it alike: use "
                    f"--shard I/{match.group(2)}, or another --out",
                )


__all__ = [
    "DIRECTORY_LOCK",
    "MAX_RESTARTS",
    "SHARDS_LOCK",
    "TORCHRUN_MARK",
    "ShardLock",
    "TorchrunWorker",
    "gpu_count",
    "parse_gpus",
    "pin_gpu",
    "process_count",
    "run_torchrun",
    "shard_lock_name",
    "torchrun_command",
    "torchrun_environment",
    "without_gpus",
]
