"""The first five minutes: the inspecting commands need no triton, a GPU bench without it says which extra
to install, and the console carries no library noise unless --debug asks for it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fp8advisor.cli import app
from fp8advisor.paths import MODELS_DIR

REPOSITORY = Path(__file__).resolve().parent.parent
#: One Llama-3-8B block: its feed-forward pays at seq 8192, so the config converts layers (FP8 on); verify
#: runs its shadow.
EXAMPLE = f"{MODELS_DIR / 'llama3.py'}:llama3_8b(n_layers=1)"
#: Runs the CLI with `import triton` failing, as on an install without the bench extra.
WITHOUT_TRITON = (
    "import sys; sys.modules['triton'] = None; "
    "from fp8advisor.cli import main; sys.argv = ['fp8advisor', *sys.argv[1:]]; main()"
)
#: Lines the libraries print on their own: torchao's failed loads of its compiled extras, torch's pytree
#: deprecation notes.
NOISE = ("Failed to load", "_pytree", "register_constant")


def run_cli(*arguments: str, cwd: Path) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_TRITON, *arguments],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=environment,
        timeout=300,
    )


def noise(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if any(word in line for word in NOISE)]


def test_suggest_and_verify_run_without_triton_and_without_library_noise(tmp_path):
    config = tmp_path / "job.toml"
    suggest = run_cli("suggest", EXAMPLE, "--seq", "8192", "-o", str(config), cwd=tmp_path)
    assert suggest.returncode == 0, suggest.stderr
    assert "filter_fqns = [" in config.read_text()  # FP8 on, some layers kept in bf16
    # verify imports torchao and converts for real: where its import warnings used to reach the console
    verify = run_cli("verify", EXAMPLE, "--seq", "8192", "--config", str(config), cwd=tmp_path)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "PASS" in verify.stdout
    assert noise(verify.stderr) == [], verify.stderr


@pytest.mark.parametrize("debug", [False, True])
def test_debug_keeps_the_library_loggers(monkeypatch, debug):
    import logging

    from fp8advisor import compat
    from fp8advisor.cli.application import _main

    loggers = [logging.getLogger(name) for name in compat.TORCHAO_IMPORT_LOGGERS]
    for logger in loggers:
        monkeypatch.setattr(logger, "level", logging.NOTSET)
    _main(debug=debug, version=False)
    assert [logger.level for logger in loggers] == [logging.NOTSET if debug else logging.ERROR] * 2


def test_gpu_bench_without_triton_names_the_extra(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *args: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "NVIDIA H100")
    monkeypatch.setitem(sys.modules, "triton", None)
    out = tmp_path / "results"
    result = CliRunner().invoke(app, ["bench", "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "needs triton" in result.output and "pip install 'fp8advisor[bench]'" in result.output
    assert not out.exists() or not list(out.iterdir())  # nothing measured, nothing written


def test_the_install_asks_for_triton_only_through_the_bench_extra():
    """`pip install fp8advisor` resolves no triton of its own (the run above shows the commands work
    without it); `[bench]` and `[test]` bring it."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["project"]

    def names(requirements: list[str]) -> set[str]:
        return {Requirement(requirement).name for requirement in requirements}

    assert "triton" not in names(project["dependencies"])
    extras = project["optional-dependencies"]
    assert "triton" in names(extras["bench"]) and "triton" in names(extras["test"])
    assert all("triton" not in names(extras[name]) for name in ("hf", "plot", "torchtitan"))
