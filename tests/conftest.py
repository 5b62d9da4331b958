"""Shared by every test file.

pytest-xdist starts its workers with COLUMNS=80 and LINES=24 in the environment. Rich fixes a console's width
for good when COLUMNS is set as the console is made (at the first import of `fp8advisor.cli`), so the tests
that give a width of their own (`CliRunner().invoke(..., env={"COLUMNS": ...})`) would print at 80 columns in
a worker and at their own width in a plain run. Without them, each console measures at every print, in a
worker as in a plain `pytest`.
"""

import os

import pytest

for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)


@pytest.fixture
def cli():
    """`cli(*args)`: the fp8advisor command line through Typer's CliRunner at 160 columns (each argument as
    str), with --debug reset after each call."""
    from typer.testing import CliRunner

    from fp8advisor.cli import app, state

    runner = CliRunner()

    def invoke(*args):
        try:
            return runner.invoke(app, [str(arg) for arg in args], env={"COLUMNS": "160"})
        finally:
            state.debug = False

    return invoke
