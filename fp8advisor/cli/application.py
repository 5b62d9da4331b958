"""The Typer application every command registers on, the consoles, and the one place errors become exit codes.

`command` registers a function on `app` and turns a domain error (`fp8advisor.errors.AdvisorError`) into one
message on stderr and its exit status (2 for unusable input); the traceback only with `--debug`.
"""

from __future__ import annotations

import functools
import logging
import shlex
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.text import Text

from fp8advisor import __version__, compat
from fp8advisor.errors import AdvisorError, quote

app = typer.Typer(
    name="fp8advisor",
    help="Measure where FP8 training pays on your GPU, and say exactly which Linear layers to convert.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Click's plain help: Typer's Rich panels print `<bool>` beside every flag and cut long words with "…"
    rich_markup_mode=None,
)

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


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


def _fail(error: AdvisorError, cause: BaseException | None = None) -> NoReturn:
    """Report `error` (after the traceback, with --debug) and exit with its status: 2 for bad input, with or
    without --debug."""
    if state.debug:
        traceback.print_exception(cause or error, file=sys.stderr)
    report_error(error)
    raise typer.Exit(error.exit_code) from None


def command(*args, **kwargs) -> Callable:
    """`app.command(...)` that also turns an AdvisorError into a message and its exit status, and any other
    BaseException (user code ending the process) into an error, never a success."""

    def register(function: Callable) -> Callable:
        @functools.wraps(function)
        def wrapper(*f_args, **f_kwargs):
            try:
                return function(*f_args, **f_kwargs)
            except AdvisorError as error:
                _fail(error)
            except (Exception, KeyboardInterrupt):
                raise  # typer.Exit carries a status this tool chose; a bug of ours needs its traceback
            except BaseException as error:
                # This tool never calls sys.exit inside a command: a SystemExit or another BaseException
                # here comes from the user's code (`running_user_code` names most of them with their
                # place). Never let it pass for success.
                ended = f"{type(error).__name__}({', '.join(map(quote, error.args))})"
                _fail(
                    AdvisorError(
                        f"the run was ended by {ended} before it finished",
                        hint="something in the model code ends the process; run with --debug to see where",
                    ),
                    cause=error,
                )

        app.command(*args, **kwargs)(wrapper)
        return wrapper

    return register


def main() -> None:
    app()


def resume_command() -> str:
    """The command line this process was started with, as the user would type it again."""
    program = ["fp8advisor"]
    if Path(sys.argv[0]).name == "__main__.py":  # python -m fp8advisor (a checkout on PYTHONPATH)
        program = [Path(sys.executable).name, "-m", "fp8advisor"]
    return shlex.join([*program, *sys.argv[1:]])
