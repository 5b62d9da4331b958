"""The training frameworks' own float8 and MXFP8 conversion on the CPU, for `verify`: only their GPU checks
lifted. Each context manager makes one framework's capability check answer True while it is open and puts it
back after; nothing else of the framework is replaced. The names are the frameworks' own (some private), so
when a release moves one, this is the file to change (`compat.required` names the version).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator

from fp8advisor import compat


@contextlib.contextmanager
def _checks_answer_true(module: str, names: tuple[str, ...], optional: tuple[str, ...] = ()) -> Iterator:
    """`module`'s functions `names` (and `optional` where present) answer True while open; they and
    `torch._inductor.config.emulate_precision_casts` (set process-wide for rowwise) are put back after."""
    loaded, inductor = importlib.import_module(module), importlib.import_module("torch._inductor.config")
    checks = {name: compat.required(module, name) for name in names}
    checks |= {name: getattr(loaded, name) for name in optional if hasattr(loaded, name)}
    before = inductor.emulate_precision_casts
    try:
        for name in checks:
            setattr(loaded, name, lambda *args, **kwargs: True)
        yield
    finally:
        for name, check in checks.items():
            setattr(loaded, name, check)
        inductor.emulate_precision_casts = before


def nemo_fp8_on_cpu() -> contextlib.AbstractContextManager:
    """NeMo AutoModel's fp8 (0.7.0) on the CPU: its private `_has_cuda_capability` (SM89) answers True."""
    return _checks_answer_true("nemo_automodel.components.quantization.fp8", ("_has_cuda_capability",))


def torchtitan_fp8_on_cpu() -> contextlib.AbstractContextManager:
    """torchtitan's float8 converters (0.2.2, 0.3.0) on the CPU: the `has_cuda_capability` (and 0.3's
    `has_rocm_capability`) of their module, which refuse below SM89, answer True."""
    float8 = "torchtitan.components.quantization.float8"
    return _checks_answer_true(float8, ("has_cuda_capability",), ("has_rocm_capability",))


@contextlib.contextmanager
def accelerate_state_isolated() -> Iterator[None]:
    """An empty accelerate state while open (the private `_shared_state` of accelerate.state's PartialState,
    AcceleratorState, GradientState), the process's own after; `check_cuda_fp8_capability` answers True."""
    names = ("PartialState", "AcceleratorState", "GradientState")
    states = [compat.required("accelerate.state", name)._shared_state for name in names]
    saved = [dict(state) for state in states]
    with _checks_answer_true("accelerate.state", ("check_cuda_fp8_capability",)):
        for state in states:
            state.clear()
        try:
            yield
        finally:
            for state, before in zip(states, saved, strict=True):
                state.clear()
                state.update(before)


def torchtitan_mx_on_cpu() -> contextlib.AbstractContextManager:
    """torchtitan 0.3's MX converters on the CPU: the `has_cuda_capability` of their module
    (torchtitan/components/quantization/mx.py:16, called at mx.py:70 and 175: SM100) answers True."""
    return _checks_answer_true("torchtitan.components.quantization.mx", ("has_cuda_capability",))


__all__ = [
    "accelerate_state_isolated",
    "nemo_fp8_on_cpu",
    "torchtitan_fp8_on_cpu",
    "torchtitan_mx_on_cpu",
]
