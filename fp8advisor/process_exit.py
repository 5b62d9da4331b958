"""The ways code can end this process early, disarmed while a command runs: its exit status is the tool's.

The user's model runs in this process, and so can do what it likes; what it must not do is end the process
with a status of its choosing, so that a failed check passes for success. `os._exit` (which is `posix._exit`
under another name, so both are replaced) ends a process at once, from any thread, skipping every handler:

- `exits_disarmed()`: within, both raise `ProcessExit` instead. In the main thread that is a `BaseException`
  the CLI reports as an error (`fp8advisor.inspect.sandbox.running_user_code` names its line); in another
  thread it ends that thread only, and in a destructor (`__del__`) Python swallows it: one warning line
  each, instead of a traceback. A child process forked
  meanwhile gets the real functions back (`os.register_at_fork`): it must be able to end.
- `end_process(status)`: the real `os._exit`, as this module found it before any of the user's code ran.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from typing import NoReturn

from fp8advisor.untrusted import visible

_NATIVE = sys.modules.get("posix") or sys.modules.get("nt")  # the module os._exit comes from
_REAL_EXIT = os._exit


class ProcessExit(BaseException):
    """`os._exit(status)` called while exits were disarmed, raised instead of ending the process."""

    def __init__(self, status: object):
        super().__init__(status)
        self.status = status


def _raise_process_exit(status: object = 0) -> NoReturn:
    raise ProcessExit(status)


def _set_exit(function) -> None:
    os._exit = function
    if _NATIVE is not None:
        _NATIVE._exit = function


def _warn(where: str, error: BaseException | None) -> None:
    status = getattr(error, "status", None)
    with contextlib.suppress(Exception):
        sys.stderr.write(f"warning: {visible(where)} called os._exit({status!r}): ignored\n")


def _thread_hook(previous):
    def hook(arguments) -> None:
        if issubclass(arguments.exc_type, ProcessExit):  # it ended its thread: one line, no traceback
            _warn(f"{getattr(arguments.thread, 'name', None) or 'a thread'} (a thread)", arguments.exc_value)
            return
        previous(arguments)

    return hook


def _unraisable_hook(previous):
    def hook(unraisable) -> None:
        if issubclass(unraisable.exc_type, ProcessExit):  # in a __del__ or a callback: swallowed by Python
            _warn(getattr(unraisable.object, "__qualname__", None) or "a destructor", unraisable.exc_value)
            return
        previous(unraisable)

    return hook


@contextlib.contextmanager
def exits_disarmed() -> Iterator[None]:
    """Within: `os._exit` and `posix._exit` raise `ProcessExit` (module docstring). Nested: no change."""
    if os._exit is _raise_process_exit:
        yield
        return
    saved_exit, saved_hook, saved_unraisable = os._exit, threading.excepthook, sys.unraisablehook
    _set_exit(_raise_process_exit)
    threading.excepthook = _thread_hook(saved_hook)
    sys.unraisablehook = _unraisable_hook(saved_unraisable)
    try:
        yield
    finally:
        _set_exit(saved_exit)
        threading.excepthook, sys.unraisablehook = saved_hook, saved_unraisable


def end_process(status: int) -> NoReturn:
    """End the process at once with `status`, through the `os._exit` found at import (not a replacement)."""
    _REAL_EXIT(status)


def _real_exits_in_child() -> None:
    _set_exit(_REAL_EXIT)


os.register_at_fork(after_in_child=_real_exits_in_child)


__all__ = ["ProcessExit", "end_process", "exits_disarmed"]
