"""Where the shipped data (profiles, example models, results) lives, installed or in a checkout."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def _data_dir() -> Path:
    # A wheel install copies data/ to fp8advisor/_data; an editable install or a checkout reads data/.
    installed = _PACKAGE / "_data"
    return installed if (installed / "profiles").is_dir() else _PACKAGE.parent / "data"


DATA_DIR = _data_dir()
PROFILES_DIR = DATA_DIR / "profiles"
MODELS_DIR = DATA_DIR / "models"
RESULTS_DIR = DATA_DIR / "results"
