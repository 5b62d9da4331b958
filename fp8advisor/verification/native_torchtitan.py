"""torchtitan's own conversion of a torchtitan config file (`native.native_conversion` for torchtitan-toml and
torchtitan-py), run with torchtitan's code on the CPU. Only its GPU-capability checks are lifted
(`lifted_checks.torchtitan_fp8_on_cpu`); nothing else of torchtitan is replaced, and no code of the user's
file runs.

- torchtitan-py (a torchtitan 0.3 recipe function; needs torchtitan 0.3.x installed): the keyword literals of
  the file's `Float8LinearConverter.Config(...)` and `Float8GroupedExpertsConverter.Config(...)` calls (read
  with `ast`, as the reader reads them, never run) build torchtitan's own converter configs. For a registry
  target (`torchtitan:llama3/8B`) the model is built as torchtitan's trainer builds it: the model package's
  `model_registry(FLAVOR, converters=[...])` applies each converter to the model config (`c.build().convert`,
  torchtitan/models/*/__init__.py `model_registry`), then `model_spec.model.build()` on the meta device; the
  converted layers are the `Float8Linear` modules (torchtitan's subclass of torchao's) and the expert groups
  whose parameters torchao's moe_training swapped (torchtitan's `Float8GroupedExperts` classes).
  Any other target (a Python model, an HF config) is not a torchtitan model: torchtitan 0.3 converts the
  `Linear.Config` objects of its own models only, so the file's model is one the user plugs in (EDIT). What
  can be checked with torchtitan's code is its filter: `Float8LinearConverter(config).filter_fn` called, as
  its `convert` calls it, on a `Linear.Config` of each nn.Linear's in/out features under the target's FQN.
  That is torchtitan's own rule on the target's names (it says, e.g., that `auto_filter_small_kn` converts
  nothing in 0.3: torchao's auto filter takes nn.Linear, and 0.3 hands it a Linear.Config), rather than a
  NotRun that would check nothing. The experts are not checked there (`expert_modules` None, with a note):
  torchtitan converts its own GroupedExperts configs, which such a model does not have.
- torchtitan-toml (a torchtitan 0.2.x job config; needs torchtitan 0.2.x installed, which cannot be installed
  beside 0.3): torchtitan's `ConfigManager().parse_args(["--job.config_file", PATH])` reads the file,
  `build_model_converters(job_config, ParallelDims(world size 1))` builds its converters and `.convert` runs
  on the target's meta model (a copy `native_conversion` made: 0.2 converts modules in place); the converted
  layers are torchao's `Float8Linear` modules and the modules whose parameters torchao swapped to one of its
  tensor subclasses (0.2.2's `Float8GroupedMMConverter`). A file naming `[job] custom_config_module` is not
  loaded: torchtitan would import that module (user code).

A torchtitan that is missing or of the other version gives `NotRun` (never a guess). When torchtitan's own
loader or converter raises on the file (it rejects a key, a converter name, or fails converting with the
installed torchao), the file does not train as its header says: that is one `ConfigError` naming torchtitan,
its version and its message (exit 2), not a note a report could bury. torchtitan's warnings during the run
(e.g. "Compile is required for high performance float8 MoE training") become the result's notes.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fp8advisor import compat
from fp8advisor.emit.experts import TORCHTITAN_0_2_EXPERTS_TORCHAO
from fp8advisor.errors import ConfigError, describe_error
from fp8advisor.frameworks.config_record import FrameworkConfig
from fp8advisor.frameworks.formats import ConfigFormat
from fp8advisor.frameworks.python_file import calls_named, parse_python, required_literal
from fp8advisor.frameworks.reader import read_config_text
from fp8advisor.frameworks.torchtitan_reader import (
    GROUPED_EXPERTS_CONVERTER,
    MX_GROUPED_EXPERTS_CONVERTER,
    MX_LINEAR_CONVERTER,
)
from fp8advisor.inspect import titan
from fp8advisor.reading import parse_toml
from fp8advisor.verification import lifted_checks
from fp8advisor.verification.conversion import converted_fqns
from fp8advisor.verification.native import NativeConversion, NotRun, installed_version

#: The torchtitan release each format is for (major.minor of the installed distribution).
TOML_VERSION = "0.2"
PY_VERSION = "0.3"
LINEAR_CONVERTER = "Float8LinearConverter.Config"
#: torchtitan 0.2.x cannot be installed beside 0.3 (both are the `torchtitan` package).
TOML_INSTALL_HINT = "pip install torchtitan==0.2.2 (in an environment without torchtitan 0.3)"


def torchtitan_conversion(
    config: FrameworkConfig, target: str, meta_model: nn.Module
) -> NativeConversion | NotRun:
    """What torchtitan's own code converts with the file `config` was read from, on the model of `target`
    (`meta_model`: built on the meta device, unconverted; the torchtitan-toml path converts it in place).
    NotRun where torchtitan of the file's version is not installed; ConfigError where torchtitan rejects
    the file (module docstring)."""
    if config.framework is ConfigFormat.TORCHTITAN_TOML:
        return _toml_conversion(config, meta_model)
    return _py_conversion(config, target, meta_model)


def installed_torchtitan() -> str | None:
    """The version of the torchtitan this process imports (package metadata, first on sys.path), or None."""
    return installed_version("torchtitan")


def _release(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _wrong_version(wanted: str, fmt: str) -> NotRun | None:
    """NotRun when the installed torchtitan is not of release `wanted` (None when it is)."""
    installed = installed_torchtitan()
    framework = f"torchtitan {wanted}.x"
    if installed is None:
        hint = TOML_INSTALL_HINT if wanted == TOML_VERSION else titan.INSTALL_HINT
        return NotRun(framework, f"torchtitan is not installed ({hint})")
    if _release(installed) != wanted:
        return NotRun(
            framework,
            f"torchtitan {installed} is installed: --format {fmt} is read by torchtitan {wanted}.x only",
        )
    return None


# --------------------------------------------------------------------------------------------- torchtitan-py


def _py_conversion(config: FrameworkConfig, target: str, meta_model: nn.Module) -> NativeConversion | NotRun:
    not_run = _wrong_version(PY_VERSION, ConfigFormat.TORCHTITAN_PY.value)
    if not_run is not None:
        return not_run
    framework = f"torchtitan {installed_torchtitan()}"
    try:
        quantization = importlib.import_module("torchtitan.components.quantization")
        linear_module = importlib.import_module("torchtitan.models.common.linear")
    except Exception as error:  # noqa: BLE001 - a torchtitan that does not import: its check cannot run
        return NotRun(f"torchtitan {PY_VERSION}.x", f"importing torchtitan failed: {describe_error(error)}")
    tree = parse_python(config.path, read_config_text(config.path))
    mx = config.recipe is not None and config.recipe.is_mx
    names = (
        (MX_LINEAR_CONVERTER, MX_GROUPED_EXPERTS_CONVERTER)
        if mx
        else (LINEAR_CONVERTER, GROUPED_EXPERTS_CONVERTER)
    )
    linear_keywords, experts_keywords = _converter_keywords(tree, config.path, names)
    name = titan.parse_registry_name(target) if titan.is_registry_target(target) else None
    if mx and name is None:
        return NotRun(
            framework,
            f"{target} is not a torchtitan registry model: torchtitan 0.3's MXFP8LinearConverter converts "
            "the Linear.Config entries of its own models only (mx.py:82) and has no filter function to apply "
            "to another model's layers; its fqns rule was simulated",
        )
    notes: list[str] = []
    linear_class, experts_class = (
        (quantization.MXFP8LinearConverter, quantization.MXFP8GroupedExpertsConverter)
        if mx
        else (quantization.Float8LinearConverter, quantization.Float8GroupedExpertsConverter)
    )
    with _framework_run(framework, config.path, notes, mx=mx):
        converters = []
        if linear_keywords is not None:
            converters.append(linear_class.Config(**linear_keywords))
        if experts_keywords is not None:
            converters.append(experts_class.Config(**experts_keywords))
        if name is not None:
            model = _registry_model(name, converters)
        else:
            filter_fn = converters[0].build().filter_fn if linear_keywords is not None else None
    if name is not None:  # torchtitan's Float8Linear is a subclass of torchao's
        return NativeConversion(
            framework,
            frozenset(converted_fqns(model)),
            frozenset(_swapped_modules(model)),
            tuple(notes),
            _other_model(tree, name),
        )
    linear = _filtered_linears(meta_model, filter_fn, linear_module.Linear.Config, framework, config.path)
    notes.append(
        f"{target} is not a torchtitan registry model: torchtitan's own filter (Float8LinearConverter's "
        "filter_fn) was applied to its nn.Linear layers as torchtitan applies it to Linear.Config; the "
        "experts were not checked (torchtitan 0.3 converts its own GroupedExperts only)"
    )
    return NativeConversion(framework, frozenset(linear), None, tuple(notes))


def _other_model(tree: ast.Module, name: titan.RegistryName) -> str:
    """What differs between the model the file trains (its `from torchtitan.models.<MODEL> import
    model_registry` and its `FLAVOR = "..."`, as `suggest` writes them) and the registry target `name` that
    verify built: "" when they agree or the file names no such import or literal (a hand-written recipe)."""
    models = {
        node.module.split(".")[2]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and (node.module or "").count(".") == 2
        and (node.module or "").startswith("torchtitan.models.")
        and any(alias.name == "model_registry" for alias in node.names)
    }
    flavors = {
        node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and [getattr(t, "id", None) for t in node.targets] == ["FLAVOR"]
        and isinstance(node.value, ast.Constant)
    }
    wrong = [f"model {m!r}" for m in models if m != name.model] + [
        f"flavor {f!r}" for f in flavors if f != name.flavor
    ]
    if not wrong:
        return ""
    return f"the file builds torchtitan's {' and '.join(wrong)}, not {name}, which verify built and checked"


def _converter_keywords(
    tree: ast.Module, path: Path, names: tuple[str, str]
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The keyword literals of the file's Linear and grouped-experts converter config calls `names`
    (Float8LinearConverter.Config and Float8GroupedExpertsConverter.Config, or the MXFP8 ones; None for a call
    the file does not make) in its syntax tree, never run. The reader has checked them (one call each, literal
    keywords only)."""
    found = []
    for name in names:
        calls = calls_named(tree, name)
        found.append(
            {kw.arg: required_literal(kw.value, path, f"{name}({kw.arg}=...)") for kw in calls[0].keywords}
            if calls
            else None
        )
    return found[0], found[1]


def _registry_model(name: titan.RegistryName, converters: list) -> nn.Module:
    """The model torchtitan's trainer builds for `name` with `converters`: `model_registry(FLAVOR,
    converters=...)` (which applies them to the model config), then its model config built on meta."""
    from fp8advisor.inspect.sandbox import redirect_devices

    package = importlib.import_module(f"torchtitan.models.{name.model}")
    spec = package.model_registry(name.flavor, converters=converters)
    with redirect_devices(torch.device("meta"), skip_init=True):
        return spec.model.build()


def _filtered_linears(model: nn.Module, filter_fn, linear_config, framework: str, path: Path) -> set[str]:
    """The nn.Linear layers of `model` torchtitan's `filter_fn` converts, each asked as its `convert` asks:
    `filter_fn(Linear.Config(in_features, out_features, bias), fqn)`."""
    if filter_fn is None:
        return set()
    with _framework_run(framework, path, []):
        return {
            fqn
            for fqn, module in model.named_modules()
            if isinstance(module, nn.Linear)
            and filter_fn(
                linear_config(
                    in_features=module.in_features,
                    out_features=module.out_features,
                    bias=module.bias is not None,
                ),
                fqn,
            )
        }


# ------------------------------------------------------------------------------------------- torchtitan-toml


def _toml_conversion(config: FrameworkConfig, meta_model: nn.Module) -> NativeConversion | NotRun:
    not_run = _wrong_version(TOML_VERSION, ConfigFormat.TORCHTITAN_TOML.value)
    if not_run is not None:
        return not_run
    data = parse_toml(read_config_text(config.path), config.path, error=ConfigError)
    job = data.get("job")
    if isinstance(job, dict) and "custom_config_module" in job:
        return NotRun(
            f"torchtitan {TOML_VERSION}.x",
            "the file names [job] custom_config_module, which torchtitan's loader imports: no code a config "
            "names runs in verify",
        )
    framework = f"torchtitan {installed_torchtitan()}"
    try:
        from torchtitan.config import ConfigManager
        from torchtitan.distributed import ParallelDims
        from torchtitan.protocols.model_converter import build_model_converters
    except Exception as error:  # noqa: BLE001 - a torchtitan that does not import: its check cannot run
        return NotRun(f"torchtitan {TOML_VERSION}.x", f"importing torchtitan failed: {describe_error(error)}")
    notes: list[str] = []
    with _framework_run(framework, config.path, notes):
        # torchtitan 0.2.2 train.py: ParallelDims from [parallelism]; here one process, every degree 1.
        job_config = ConfigManager().parse_args(["--job.config_file", str(config.path)])
        dims = ParallelDims(dp_shard=-1, dp_replicate=1, cp=1, tp=1, pp=1, ep=1, etp=1, world_size=1)
        build_model_converters(job_config, dims).convert(meta_model)
    linear, experts = frozenset(converted_fqns(meta_model)), frozenset(_swapped_modules(meta_model))
    return NativeConversion(framework, linear, experts, tuple(notes))


# ----------------------------------------------------------------------------------------------------- both


def _swapped_modules(model: nn.Module) -> set[str]:
    """Modules whose own parameters torchao swapped to one of its tensor subclasses (moe_training's float8
    weight wrapper: `Float8TrainingWeightWrapperTensor` in torchao 0.18, `ScaledGroupedMMTensor` before), and
    the grouped-experts modules torchtitan 0.3's MX converter built (`MXFP8<GroupedExperts class>`,
    mx.py:143-144), which keep plain parameters."""
    return {
        fqn
        for fqn, module in model.named_modules()
        if any(type(p).__module__.startswith("torchao.") for p in module.parameters(recurse=False))
        or (not isinstance(module, nn.Linear) and type(module).__name__.startswith("MXFP8"))
    }


@contextlib.contextmanager
def _framework_run(framework: str, path: Path, notes: list[str], *, mx: bool = False) -> Iterator[None]:
    """torchtitan's code running on the file: its GPU-capability checks lifted (float8's SM89; with `mx` the
    MX converters' SM100, `lifted_checks.torchtitan_mx_on_cpu`), its warnings (it logs on the root logger)
    collected into `notes` (`_WarningCollector`), and an exception it raises turned into one ConfigError."""
    collector = _WarningCollector()
    root = logging.getLogger()
    root.addHandler(collector)
    try:
        with (
            lifted_checks.torchtitan_fp8_on_cpu(),
            lifted_checks.torchtitan_mx_on_cpu() if mx else contextlib.nullcontext(),
        ):
            yield
    except ConfigError:
        raise
    except (Exception, SystemExit) as error:  # noqa: BLE001 - torchtitan's verdict on the file, whatever it is
        torchao = compat.installed_torchao_version()
        hint = (
            f"torchtitan 0.2.x's grouped-expert converter {TORCHTITAN_0_2_EXPERTS_TORCHAO}: install torchao "
            "0.12 to 0.16 beside it, or train with torchtitan 0.3 (--format torchtitan-py)"
            if isinstance(error, ImportError) and "MoE training" in str(error)
            else f"this file does not train with {framework} and torchao {torchao}: fix what the message "
            "names, or regenerate it with fp8advisor suggest"
        )
        raise ConfigError(
            f"{framework} rejects the file: {describe_error(error)}", location=str(path), hint=hint
        ) from error
    finally:
        root.removeHandler(collector)
        notes.extend(f"{framework} warned: {message}" for message in dict.fromkeys(collector.messages))


class _WarningCollector(logging.Handler):
    """Keeps the WARNING-and-above messages torchtitan's quantization code logs (its converters); drops its
    other modules' (its loader warns of a tokenizer path the check never reads); passes on other code's."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []
        self.had_handlers = bool(logging.getLogger().handlers)

    def emit(self, record: logging.LogRecord) -> None:
        parts = Path(record.pathname).parts
        if "torchtitan" in parts:
            if "quantization" in parts:
                self.messages.append(record.getMessage().strip())
        elif not self.had_handlers and logging.lastResort is not None:
            logging.lastResort.handle(record)


__all__ = [
    "LINEAR_CONVERTER",
    "PY_VERSION",
    "TOML_INSTALL_HINT",
    "TOML_VERSION",
    "installed_torchtitan",
    "torchtitan_conversion",
]
