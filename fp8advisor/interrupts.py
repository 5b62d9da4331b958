"""Ctrl-C during a long measurement: never lost, answered within seconds.

Python raises `KeyboardInterrupt` wherever the main thread is when the signal arrives. Inside a `__del__`
(torch frees compiled graphs there: `CompiledFxGraph.__del__`) or a library's broad `except`, the exception
is swallowed ("Exception ignored in ...") and the sweep runs on to exit 0 as if nothing was asked. Within
`interrupts_kept()`:

- Ctrl-C still raises `KeyboardInterrupt` at once, where the code is, and is also remembered;
- `check()`, called at the measurement's safe points (between points, between timed calls), raises it again
  when it was swallowed, so the sweep stops at the next of them and keeps what it measured;
- a swallowed `KeyboardInterrupt` prints nothing (it is ours, and `check()` answers it); other unraisable
  exceptions are reported as before;
- leaving `interrupts_kept()` normally with a Ctrl-C not yet answered raises it there.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator


class _State:
    active = False  # within interrupts_kept()
    pending = False  # Ctrl-C arrived and has not been answered by the end of interrupts_kept()


_state = _State()


def _on_sigint(signum, frame) -> None:
    _state.pending = True
    raise KeyboardInterrupt


def _unraisable_hook(previous):
    def hook(unraisable) -> None:
        if _state.pending and issubclass(unraisable.exc_type, KeyboardInterrupt):
            return  # swallowed by a __del__ or a callback: check() raises it at the next safe point
        previous(unraisable)

    return hook


@contextlib.contextmanager
def interrupts_kept() -> Iterator[None]:
    """Within: Ctrl-C raises and is remembered for `check()` (module docstring). Only in the main thread,
    where signals arrive; elsewhere, and nested, it changes nothing."""
    if _state.active or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous_handler = signal.signal(signal.SIGINT, _on_sigint)
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _unraisable_hook(previous_hook)
    _state.active, _state.pending = True, False
    try:
        yield
        check()  # a Ctrl-C swallowed after the last safe point (a __del__ while releasing) is still one
    finally:
        signal.signal(signal.SIGINT, previous_handler)
        sys.unraisablehook = previous_hook
        _state.active = _state.pending = False


def check() -> None:
    """Raise `KeyboardInterrupt` when Ctrl-C arrived within `interrupts_kept()` (swallowed or not)."""
    if _state.pending:
        raise KeyboardInterrupt


__all__ = ["check", "interrupts_kept"]
