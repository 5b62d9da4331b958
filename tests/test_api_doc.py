"""docs/api.md is a walk-through that runs: every example in it, with its output, as `doctest` runs it;
and the README's Python example runs too."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def in_the_repository(monkeypatch, tmp_path):
    monkeypatch.chdir(REPO)  # the examples name data/models/... relative to the checkout
    monkeypatch.setenv("FP8ADVISOR_PROFILE_DIR", str(tmp_path / "profiles"))  # no user profile answers


def test_docs_api_runs_as_written():
    failures, tried = doctest.testfile(
        str(REPO / "docs" / "api.md"),
        module_relative=False,
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
    )
    assert tried >= 20 and failures == 0


def test_readme_python_example_runs(capsys):
    readme = (REPO / "README.md").read_text()
    (example,) = re.findall(r"```python\n(.*?)```", readme, re.DOTALL)
    exec(compile(example, "README.md", "exec"), {})
    assert '"quantize.linear.float8"' in capsys.readouterr().out


def test_readme_test_command_is_what_ci_runs():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    commands = re.findall(r"```bash\n(python3 -m venv .*?)\n```", readme)
    assert len(commands) == 2 and commands[1] in ci
