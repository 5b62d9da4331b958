"""The private torch names the measurement side relies on, in one place.

torch moves its internals between releases; when one of these breaks, this is the only file to change. Each
function says what it stands for and why nothing public does the job.
"""

from __future__ import annotations

#: The kernel `torch.cuda._sleep` launches (ATen's `spin_kernel`): a GPU kernel that belongs to no aten op,
#: which is what pads a profiler session (`fp8advisor.timers.padded_profile`).
SLEEP_KERNEL_MARKER = "spin_kernel"

#: Inductor's FX-graph cache and AOTAutograd's cache counters, as `torch._dynamo.utils.counters` keeps them.
CACHE_COUNTERS = {
    "fxgraph_cache_hit": ("inductor", "fxgraph_cache_hit"),
    "fxgraph_cache_miss": ("inductor", "fxgraph_cache_miss"),
    "fxgraph_cache_bypass": ("inductor", "fxgraph_cache_bypass"),
    "autograd_cache_hit": ("aot_autograd", "autograd_cache_hit"),
    "autograd_cache_miss": ("aot_autograd", "autograd_cache_miss"),
    "autograd_cache_bypass": ("aot_autograd", "autograd_cache_bypass"),
}


def dynamo_reset() -> None:
    """Forget every compiled graph (`torch._dynamo.reset`), as torchao's benchmark does between
    configurations; the on-disk caches stay."""
    import torch._dynamo

    torch._dynamo.reset()


def compile_cache_counters() -> dict[str, int]:
    """This process's inductor / AOTAutograd cache hits, misses and bypasses so far (monotonic counters: a
    compile's figures are the difference of two readings). Missing counters read 0."""
    from torch._dynamo.utils import counters

    return {name: int(counters[group][key]) for name, (group, key) in CACHE_COUNTERS.items()}


def configure_compile_worker() -> None:
    """Settings of a process that only pre-compiles for another: one compile thread (the worker processes are
    the parallelism), and no local autotuning cache.

    The second matters for the figures. A worker runs its graph once, and inductor autotunes a kernel with
    several candidate configurations on its first run; with workers sharing the GPU those timings are noisy.
    `autotune_local_cache` is left out of inductor's FX-graph cache key (`_cache_config_ignore_prefix`), so
    the timing process still hits the graphs the workers compiled, but the kernels carry the setting in their
    metadata, so nobody reuses a worker's choice: the timing process autotunes them itself, alone on the GPU.
    """
    import torch._inductor.config as inductor_config

    inductor_config.compile_threads = 1
    inductor_config.autotune_local_cache = False


def cuda_sleep(cycles: int) -> None:
    """Launch one GPU kernel that spins for about `cycles` clock cycles (`torch.cuda._sleep`)."""
    import torch

    torch.cuda._sleep(cycles)


def is_device_record(event) -> bool:
    """True for a profiler event on the GPU timeline (a kernel, memcpy or memset) as opposed to a CPU op or a
    user annotation's GPU span."""
    from torch.autograd import DeviceType

    return event.device_type == DeviceType.CUDA and not getattr(event, "is_user_annotation", False)


__all__ = [
    "CACHE_COUNTERS",
    "SLEEP_KERNEL_MARKER",
    "compile_cache_counters",
    "configure_compile_worker",
    "cuda_sleep",
    "dynamo_reset",
    "is_device_record",
]
