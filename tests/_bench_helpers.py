"""Shared by the bench tests: the tiny emulated grid every compiled test uses, and the benchmarks/ scripts
as modules.

All compiled tests measure the same single shape so that inductor's on-disk caches, filled by the first test
that compiles it, make the others cheap (torch.compile on a CPU costs tens of seconds per cold graph).
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

SHAPE = (32, 32, 32)
RECIPE = "tensorwise"

#: CLI arguments of the shared emulated sweep (one shape, bf16 + tensorwise).
CLI_GRID = ["--emulate", "--M", "32", "--K", "32", "--N", "32", "--recipes", RECIPE]


def load_benchmark(name: str):
    """benchmarks/NAME.py as a module (the scripts are not a package), registered in sys.modules under a
    name of its own: dataclasses look their module up while the class is built."""
    spec = importlib.util.spec_from_file_location(f"fp8advisor_benchmarks_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def serial_inductor():
    """Compile in-process: on a 2-core CI machine the inductor worker pool only adds start-up time."""
    import torch._inductor.config as inductor_config

    saved = inductor_config.compile_threads
    inductor_config.compile_threads = 1
    try:
        yield
    finally:
        inductor_config.compile_threads = saved


def misbehaving_compile(point, settings):
    """A pre-compile task for the worker-pool tests, by in_features: 48 hangs, 16 kills its process, 80 fails,
    112 takes 1.5 s, anything else compiles at once."""
    import os
    import time

    if point.K == 48:
        time.sleep(3600)
    if point.K == 16:
        os._exit(3)
    if point.K == 80:
        raise ValueError("boom")
    if point.K == 112:
        time.sleep(1.5)
    return None


def hanging_compile(point, settings):
    import time

    time.sleep(3600)
