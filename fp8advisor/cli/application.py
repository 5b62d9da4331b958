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
import shlex
import signal
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
from fp8advisor.files import command_scope
from fp8advisor.process_exit import end_process, exits_disarmed

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
                # Relative paths stay where the user typed them (files.absolute); os._exit from the user's
                # code, in any thread, cannot end the process (process_exit).
                with command_scope(), exits_disarmed():
                    return function(*f_args, **f_kwargs)
            except AdvisorError as error:
                _fail(error)
            except _REPORTED_BY_CLICK:
                raise  # a status this tool chose, or a usage error Click reports itself
            except KeyboardInterrupt as error:
                _fail(Interrupted("interrupted (Ctrl-C)"), cause=error)
            except Exception as error:
                if _after_ctrl_c(error):  # e.g. an import cut short by Ctrl-C, failing on a later name
                    _fail(Interrupted("interrupted (Ctrl-C)"), cause=error)
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


def _after_ctrl_c(error: BaseException) -> bool:
    """True when a KeyboardInterrupt is among the exceptions `error` was raised while handling."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


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
    except SystemExit as end:  # Click ends with sys.exit (the real one: `running_user_code` restores it)
        status = end.code if isinstance(end.code, int) else (0 if end.code is None else 1)
    _end_process(status)


def _end_process(status: int) -> NoReturn:
    """Run the `atexit` handlers with `os._exit` disarmed (`process_exit.exits_disarmed`; `sys.exit` there
    only raises) and each handler given `EXIT_HANDLER_SECONDS` at most; one that tries to end the process,
    fails or hangs is named in a warning. Then flush the output and end with `status`
    (`process_exit.end_process`: no handler or thread runs after this)."""
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _exit_handler_warning(previous_hook)
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)  # CPython's own, which Python calls at exit
    try:
        with exits_disarmed(), _each_call_bounded(EXIT_HANDLER_SECONDS):
            if run_exit_handlers is not None:
                run_exit_handlers()
    finally:
        sys.unraisablehook = previous_hook
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe (fp8advisor ... | head): nothing left to tell
            stream.flush()
    end_process(status)


#: The most seconds one `atexit` handler may take: a handler left by the model that never returns must not
#: keep the process from ending.
EXIT_HANDLER_SECONDS = 20.0


class _ExitHandlerTimeout(BaseException):
    """An `atexit` handler ran past `EXIT_HANDLER_SECONDS`: raised in it by a timer, so that the next runs."""


@contextlib.contextmanager
def _each_call_bounded(seconds: float):
    """A repeating timer that interrupts whatever runs in the main thread every `seconds` (one handler)."""
    if not hasattr(signal, "setitimer"):
        yield
        return

    def interrupt(signum, frame):
        raise _ExitHandlerTimeout

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _exit_handler_warning(previous: Callable) -> Callable:
    """The unraisable hook while the `atexit` handlers run: a handler that calls sys.exit, runs too long or
    fails is one warning line naming it (the whole traceback with --debug), never a traceback of its own. One
    that calls `os._exit` is warned about by `process_exit`'s own hook, installed inside this one."""

    def hook(unraisable) -> None:
        if state.debug:
            previous(unraisable)
            return
        handler = getattr(unraisable.object, "__qualname__", None) or "an exit handler"
        kind = unraisable.exc_type
        if issubclass(kind, SystemExit):
            what = "called sys.exit at exit: ignored, the exit status stays"
        elif issubclass(kind, _ExitHandlerTimeout):
            what = f"ran past {EXIT_HANDLER_SECONDS:g} s at exit: stopped"
        else:
            error = unraisable.exc_value
            what = f"failed at exit: {describe_error(error) if error is not None else kind.__name__}"
        with contextlib.suppress(Exception):
            err_console.print(
                Text("warning: ", style="yellow") + Text(f"{handler} (an atexit handler) {what}"),
                soft_wrap=True,
            )

    return hook


def resume_command() -> str:
    """The command line this process was started with, as the user would type it again."""
    program = ["fp8advisor"]
    if Path(sys.argv[0]).name == "__main__.py":  # python -m fp8advisor (a checkout on PYTHONPATH)
        program = [Path(sys.executable).name, "-m", "fp8advisor"]
    return shlex.join([*program, *sys.argv[1:]])
