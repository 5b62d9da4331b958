"""The Typer application every command registers on, the consoles, and the one place errors become exit codes.

`command` registers a function on `app` and turns a domain error (`fp8advisor.errors.AdvisorError`) into one
message on stderr and its exit status (2 for unusable input; 130 for Ctrl-C, 70 for a bug of ours); the
traceback only with `--debug`. `main` (the `fp8advisor` entry point) ends the process with that status, out of
reach of whatever the user's code left behind. The consoles come from `fp8advisor.cli.terminal`: no markup,
and control characters shown as escapes.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import shlex
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import click
import typer
from rich.text import Text

from fp8advisor import __version__, compat
from fp8advisor.cli.terminal import safe_console
from fp8advisor.errors import AdvisorError, describe_error, quote

app = typer.Typer(
    name="fp8advisor",
    help="Measure where FP8 training pays on your GPU, and say exactly which Linear layers to convert.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Click's plain help: Typer's Rich panels print `<bool>` beside every flag and cut long words with "…"
    rich_markup_mode=None,
)

# No markup, and control characters shown as escapes: what they print holds names from the user's files.
console = safe_console()
err_console = safe_console(stderr=True)


class _State:
    debug = False


state = _State()


def _print_version(value: bool) -> None:
    if value:
        console.print(f"fp8advisor {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    debug: bool = typer.Option(
        False, "--debug", help="Show the full traceback on errors, and the libraries' own warnings."
    ),
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    state.debug = debug
    if not debug:
        _quiet_library_loggers()


def _quiet_library_loggers() -> None:
    """Errors only from the loggers that warn about nothing the user can act on: torchao's failed loads of
    its optional compiled extras (absent from a CPU build) and torch's pytree deprecation notes on torchao's
    enums (`compat.TORCHAO_IMPORT_LOGGERS`). Set at the source, before anything imports them; --debug keeps
    them."""
    for name in compat.TORCHAO_IMPORT_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


def report_error(error: AdvisorError) -> None:
    """One clear message on stderr: what is wrong, where, and what to do."""
    err_console.print(Text("error: ", style="bold red") + Text(str(error)), soft_wrap=True)


def warn_passed_over(passed_over) -> None:
    """One warning on stderr per file a directory scan passed over ("file: why"), each once."""
    for unreadable in dict.fromkeys(passed_over):
        err_console.print(
            Text("warning: ", style="yellow") + Text(f"passed over {unreadable}"), soft_wrap=True
        )


def _fail(error: AdvisorError, cause: BaseException | None = None) -> NoReturn:
    """Report `error` (after the traceback, with --debug) and exit with its status: 2 for bad input, with or
    without --debug."""
    if state.debug:
        traceback.print_exception(cause or error, file=sys.stderr)
    report_error(error)
    raise typer.Exit(error.exit_code) from None


def command(*args, **kwargs) -> Callable:
    """`app.command(...)` that also turns an AdvisorError into a message and its exit status, Ctrl-C into
    exit 130, a bug of ours into one line saying so (exit 70; the traceback with --debug), and any other
    BaseException (user code ending the process) into an error, never a success."""

    def register(function: Callable) -> Callable:
        @functools.wraps(function)
        def wrapper(*f_args, **f_kwargs):
            try:
                return function(*f_args, **f_kwargs)
            except AdvisorError as error:
                _fail(error)
            except _REPORTED_BY_CLICK:
                raise  # a status this tool chose, or a usage error Click reports itself
            except KeyboardInterrupt as error:
                _fail(Interrupted("interrupted (Ctrl-C)"), cause=error)
            except Exception as error:
                _fail(
                    InternalError(
                        f"fp8advisor failed unexpectedly: {describe_error(error)}",
                        hint="this is a bug in fp8advisor, not in your input: rerun with --debug for the "
                        "traceback and report it",
                    ),
                    cause=error,
                )
            except BaseException as error:
                # This tool never calls sys.exit inside a command: a SystemExit or another BaseException
                # here comes from the user's code (`running_user_code` names most of them with their
                # place). Never let it pass for success.
                _fail(
                    AdvisorError(
                        f"the run was ended by {_ending(error)} before it finished",
                        hint="something in the model code ends the process; run with --debug to see where",
                    ),
                    cause=error,
                )

        app.command(*args, **kwargs)(wrapper)
        return wrapper

    return register


#: Exceptions that carry an exit status or a usage error to Click (Typer's own `Exit` is not Click's).
_REPORTED_BY_CLICK = (
    typer.Exit,
    typer.Abort,
    click.exceptions.Exit,
    click.exceptions.Abort,
    click.exceptions.ClickException,
)


class Interrupted(AdvisorError):
    """Ctrl-C: exit 130, as a shell reports a process ended by SIGINT. What was saved stays."""

    exit_code = 130


class InternalError(AdvisorError):
    """An exception this tool did not expect: a bug of ours (exit 70, EX_SOFTWARE), never bad input."""

    exit_code = 70


def _ending(error: BaseException) -> str:
    try:
        arguments = ", ".join(map(quote, error.args))
    except Exception:  # noqa: BLE001 - args of the user's own exception class: anything may raise
        arguments = ""
    return f"{type(error).__name__}({arguments})"


def main() -> None:
    """Run the command line, then end the process with the status the command chose: nothing the user's code
    left behind (an `atexit` handler calling `os._exit(0)`, a thread that never ends) can end it first, change
    its status or keep it waiting."""
    try:
        app()
        status = 0
    except SystemExit as end:
        status = end.code if isinstance(end.code, int) else (0 if end.code is None else 1)
    _end_process(status)


def _end_process(status: int) -> NoReturn:
    """Run the `atexit` handlers with `os._exit` and `sys.exit` unable to end the process (a handler that
    tries is named in a warning), flush the output, and exit with `status` (`os._exit`: no handler or thread
    runs after this)."""
    real_exit, previous_hook = os._exit, sys.unraisablehook
    os._exit = _refuse_process_exit
    sys.unraisablehook = _exit_handler_warning(previous_hook)
    try:
        run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)
        if run_exit_handlers is not None:
            run_exit_handlers()
    finally:
        os._exit, sys.unraisablehook = real_exit, previous_hook
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe (fp8advisor ... | head): nothing left to tell
            stream.flush()
    real_exit(status)


class _ExitRefused(BaseException):
    """`os._exit` called by an exit handler: raised instead, so that the status stays this tool's."""


def _refuse_process_exit(status: int) -> NoReturn:
    raise _ExitRefused(status)


def _exit_handler_warning(previous: Callable) -> Callable:
    def hook(unraisable) -> None:
        if issubclass(unraisable.exc_type, (_ExitRefused, SystemExit)):
            how = "os._exit" if issubclass(unraisable.exc_type, _ExitRefused) else "sys.exit"
            handler = getattr(unraisable.object, "__qualname__", None) or "an exit handler"
            with contextlib.suppress(Exception):
                err_console.print(
                    Text("warning: ", style="yellow")
                    + Text(f"{handler} (an atexit handler) called {how} at exit: ignored, the status stays")
                )
            return
        previous(unraisable)

    return hook


def resume_command() -> str:
    """The command line this process was started with, as the user would type it again."""
    program = ["fp8advisor"]
    if Path(sys.argv[0]).name == "__main__.py":  # python -m fp8advisor (a checkout on PYTHONPATH)
        program = [Path(sys.executable).name, "-m", "fp8advisor"]
    return shlex.join([*program, *sys.argv[1:]])
