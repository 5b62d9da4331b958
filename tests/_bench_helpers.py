"""Shared by test_bench.py and test_bench_cli.py: the tiny emulated grid every compiled test uses.

All compiled tests measure the same single shape so that inductor's on-disk caches, filled by the first test
that compiles it, make the others cheap (torch.compile on a CPU costs tens of seconds per cold graph).
"""

from __future__ import annotations

import contextlib

SHAPE = (32, 32, 32)
RECIPE = "tensorwise"

#: CLI arguments of the shared emulated sweep (one shape, bf16 + tensorwise).
CLI_GRID = ["--emulate", "--M", "32", "--K", "32", "--N", "32", "--recipes", RECIPE]


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
