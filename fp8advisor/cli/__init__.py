"""The command line: the only place that knows Typer and Rich (stage 8 of the pipeline, on top of all others).

`app` (in `fp8advisor.cli.application`) holds the Typer application, the consoles and the error handling; each
command lives in its own module of this package, which parses, calls the library and renders:
`layers_cmd`, `suggest_cmd` (its report drawn by `suggest_view`, the training step by `step_view`, `--current`
by `current_view`; its set-up options read by `parallel_options`), `verify_cmd`,
`bench_cmd` (its results drawn by `bench_view`; `bench_model` for `bench --model`), `fit_cmd`, `trace_cmd`
(drawn by `trace_view`).
"""

from __future__ import annotations

# Each command module registers itself on `app` when imported.
from fp8advisor.cli import (  # noqa: E402, F401
    bench_cmd,
    fit_cmd,
    layers_cmd,
    suggest_cmd,
    trace_cmd,
    verify_cmd,
)
from fp8advisor.cli.application import app, command, console, err_console, main, state  # noqa: F401

__all__ = ["app", "command", "console", "err_console", "main", "state"]
