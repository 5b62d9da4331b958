"""torchtitan 0.2.2 for the tests of `fp8advisor.verification.native_torchtitan`: the release torchtitan-toml
is for, which cannot be installed beside torchtitan 0.3 (both are the `torchtitan` package).

- `torchtitan_0_2_site()`: its wheel fetched once with pip (`pip download --no-deps --only-binary=:all:`) into
  ~/.cache/fp8advisor-tests (or $XDG_CACHE_HOME), unzipped there; None with the reason when PyPI is
  unreachable. 0.2.2's own dependencies are those of torchtitan 0.3 (torch, tyro, ...), already installed.
- `run_cases(site, cases)`: one subprocess with PYTHONPATH=<site>, so that `import torchtitan` is 0.2.2, runs
  `torchtitan_conversion` for each case and returns what it converted (or the ConfigError it raised).
- Run as a script (`python _torchtitan02.py CASES.json`): the subprocess's side.

A case is {"config": path, "target": TARGET} (the model `load_model(TARGET, "meta")` builds), or {"config":
path, "own": "llama3/8B"}: torchtitan 0.2.2's own model of that flavor (`Transformer(llama3_args["8B"])`, its
train spec's class and args) built on the meta device, as its trainer builds it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

VERSION = "0.2.2"


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fp8advisor-tests"


def torchtitan_0_2_site() -> tuple[Path | None, str]:
    """(the folder holding torchtitan 0.2.2's package, "") or (None, why it could not be fetched)."""
    root = cache_dir() / f"torchtitan-{VERSION}"
    site = root / "site"
    if (site / "torchtitan" / "__init__.py").is_file():
        return site, ""
    wheels = root / "wheels"
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    command += ["--disable-pip-version-check", "-q", f"torchtitan=={VERSION}", "-d", str(wheels)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=180)
    except (OSError, subprocess.TimeoutExpired) as error:
        return None, f"pip download torchtitan=={VERSION} failed: {error}"
    found = sorted(wheels.glob(f"torchtitan-{VERSION}-*.whl"))
    if done.returncode != 0 or not found:
        last = (done.stderr.strip().splitlines() or ["no wheel"])[-1]
        return None, f"pip download torchtitan=={VERSION} failed (PyPI unreachable?): {last}"
    unpacking = root / f"site.{os.getpid()}"
    with zipfile.ZipFile(found[0]) as wheel:
        wheel.extractall(unpacking)
    try:
        unpacking.rename(site)  # atomic: a concurrent test run either finds it whole or renames its own
    except OSError:
        if not (site / "torchtitan" / "__init__.py").is_file():
            raise
    return site, ""


def run_cases(site: Path, cases: list[dict], workdir: Path, timeout: float = 120) -> list[dict]:
    """Each case's {"framework", "linear", "experts", "notes"} or {"error": the ConfigError's text} (or
    {"not_run": reason}), from one subprocess importing torchtitan 0.2.2 from `site`."""
    cases_path = workdir / "cases.json"
    cases_path.write_text(json.dumps(cases))
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run(
        [sys.executable, __file__, str(cases_path)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=workdir,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _own_model(name: str):
    """torchtitan 0.2.2's own model `name` ("llama3/8B"), built on the meta device (its train spec's
    model_cls(model_args[flavor]), as its trainer builds it)."""
    import importlib

    import torch

    model, flavor = name.split("/")
    package = importlib.import_module(f"torchtitan.models.{model}")
    classes = {
        "llama3": ("Transformer", "llama3_args"),
        "deepseek_v3": ("DeepSeekV3Model", "deepseekv3_args"),
    }
    model_cls, args = (getattr(package, attribute) for attribute in classes[model])
    with torch.device("meta"):
        return model_cls(args[flavor])


def _main(cases_path: str) -> None:
    from fp8advisor.errors import ConfigError
    from fp8advisor.frameworks.reader import read_config
    from fp8advisor.inspect.target import load_model
    from fp8advisor.verification.native import NotRun
    from fp8advisor.verification.native_torchtitan import torchtitan_conversion

    results = []
    for case in json.loads(Path(cases_path).read_text()):
        model = _own_model(case["own"]) if "own" in case else load_model(case["target"], "meta").model
        linear_names = sorted(
            fqn for fqn, module in model.named_modules() if type(module).__name__ == "Linear"
        )
        try:
            native = torchtitan_conversion(read_config(case["config"]), case.get("target", "own"), model)
        except ConfigError as error:
            results.append({"error": str(error), "model_linears": linear_names})
            continue
        if isinstance(native, NotRun):
            results.append({"not_run": native.reason})
            continue
        results.append(
            {
                "framework": native.framework,
                "linear": sorted(native.linear_fqns),
                "experts": sorted(native.expert_modules or ()),
                "notes": list(native.notes),
                "model_linears": linear_names,
            }
        )
    print(json.dumps(results))


if __name__ == "__main__":
    _main(sys.argv[1])
