"""Shared by every test file.

pytest-xdist starts its workers with COLUMNS=80 and LINES=24 in the environment. Rich fixes a console's width
for good when COLUMNS is set as the console is made (at the first import of `fp8advisor.cli`), so the tests
that give a width of their own (`CliRunner().invoke(..., env={"COLUMNS": ...})`) would print at 80 columns in
a worker and at their own width in a plain run. Without them, each console measures at every print, in a
worker as in a plain `pytest`.
"""

import os

for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)
