"""Shared by tests/test_target.py, test_layers.py and test_layers_cli.py: tiny model files on disk."""

from __future__ import annotations

import textwrap
from pathlib import Path

HEADER = "import torch\nfrom torch import nn\nimport torch.nn.functional as F\n\n"


def write_model(directory: Path, body: str, name: str = "model.py") -> Path:
    """Write a model file (torch, nn and F imported) and return its path."""
    path = directory / name
    path.write_text(HEADER + textwrap.dedent(body).lstrip())
    return path


def line_of(path: Path, text: str) -> int:
    """1-based line number of the first line of `path` containing `text`."""
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if text in line:
            return number
    raise AssertionError(f"{text!r} not in {path}")
