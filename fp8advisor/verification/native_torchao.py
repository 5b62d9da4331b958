"""The frameworks that convert through torchao's Float8Linear, each run with its own code on a copy of the
model built on the meta device: what `verify` compares with the advice (`framework_check.native_conversion`).

- nemo-automodel: NeMo AutoModel's YAML loader (`nemo_automodel.components.config.loader`: `load_yaml_config`,
  whose `ConfigNode` turns "true", "1" or "[a, b]" into Python values) reads the file; the recipe takes its
  `fp8:` node as `recipes/llm/train_ft.py` does (`cfg.get("fp8", None)` -> `build_fp8_config`), and
  `_transformers/infrastructure.py` converts with `apply_fp8_to_model(model, config=fp8_config)`
  (`components/quantization/fp8.py`: `_module_filter_fn`, substring filter_fqns, nn.Linear only, both weight
  dims divisible by 16). That function catches any error of the conversion, logs "FP8 quantization failed" and
  trains on in bf16: its warning becomes a note, and the converted set is what is left in the model. NeMo's
  loader resolves `_target_` and `*_fn` entries by importing them (a `file.py:name` runs that file): the file
  is loaded without them (they never touch the `fp8:` node), with a note.
- accelerate: accelerate's own `Accelerator(mixed_precision=<the file's>, kwargs_handlers=[AORecipeKwargs(
  <the file's config, filter and flags>)])` (it refuses an AORecipeKwargs without mixed_precision="fp8", and
  decides the FP8 backend: `Accelerator.fp8_backend`), then what `Accelerator.prepare` runs for each model
  (`_prepare_ao`): `accelerate.utils.ao.convert_model_to_fp8_ao(model, config=handler.config,
  module_filter_func=handler.module_filter_func)`. Without a module_filter_func accelerate's own default runs
  (`filter_linear_layers`, which keeps the first and the last nn.Linear in bf16); without a config,
  AORecipeKwargs' own (`pad_inner_dim=True`, `enable_fsdp_float8_all_gather=True`).
- torchao: `convert_to_float8_training(model, config=<the file's>, module_filter_fn=<its filter>)` and
  `quantize_(model, config=Float8TrainingOpConfig(...), filter_fn=<its expert filter>)`, in the order of their
  lines in the file.

Rules: the user's file is never run. Its filters are the ones its reader evaluated from their syntax, or ran
alone under `--trust-config` (`FrameworkConfig.filter_for`, `expert_filter`); the torchao config it passes is
rebuilt here with torchao's own classes from the expression's literals (`Float8LinearConfig.from_recipe_name`,
`Float8LinearConfig(...)`, `dataclasses.replace(...)`); anything else is a ConfigError. Only GPU-capability
checks are lifted (`lifted_checks.nemo_fp8_on_cpu`: NeMo's SM89 check;
`lifted_checks.accelerate_state_isolated`: accelerate's, which turns fp8 into fp16 below SM89; torchao checks
none when converting). A framework that is not installed, or lacks a name used here, gives `NotRun`; a
framework that raises on the file's values gives a ConfigError naming the framework and its message (exit 2):
the file would not train.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator
from typing import Any

from torch import nn

from fp8advisor import compat
from fp8advisor.errors import AdvisorError, ConfigError, describe_error
from fp8advisor.frameworks.config_record import FrameworkConfig
from fp8advisor.frameworks.formats import ConfigFormat
from fp8advisor.frameworks.framework_calls import call_argument
from fp8advisor.frameworks.module_scope import ModuleScope
from fp8advisor.frameworks.python_file import (
    NOT_LITERAL,
    call_name,
    calls_named,
    keyword_value,
    literal_value,
    parse_python,
    resolve_name,
)
from fp8advisor.frameworks.reader import read_config_text
from fp8advisor.verification import lifted_checks
from fp8advisor.verification.conversion import converted_fqns
from fp8advisor.verification.experts import swapped_expert_modules
from fp8advisor.verification.native import NativeConversion, NotRun, installed_version

#: format -> (the framework as messages name it, its distribution, its import package)
FRAMEWORKS = {
    ConfigFormat.NEMO_AUTOMODEL: ("NeMo AutoModel", "nemo-automodel", "nemo_automodel"),
    ConfigFormat.ACCELERATE: ("accelerate", "accelerate", "accelerate"),
    ConfigFormat.TORCHAO: ("torchao", "torchao", "torchao"),
}

#: Who refuses a torchao config the file builds (its `Float8LinearConfig` checks its own fields).
TORCHAO = "torchao's Float8LinearConfig"

#: The logger of NeMo AutoModel's fp8 module, whose warning says the conversion failed and bf16 trains on.
NEMO_FP8_LOGGER = "nemo_automodel.components.quantization.fp8"


def torchao_family_conversion(
    config: FrameworkConfig, target: str, meta_model: nn.Module
) -> NativeConversion | NotRun:
    """Run the framework of `config` (nemo-automodel, accelerate, torchao) on `meta_model` (a copy
    `framework_check.native_conversion` made: converted here) as it would run the file; `target` is not needed
    (the model is given). NotRun when the framework is missing."""
    return convert_in_place(config, meta_model)


def convert_in_place(config: FrameworkConfig, model: nn.Module) -> NativeConversion | NotRun:
    """Convert `model` itself (on the meta device, or built for real) as the framework of `config` would."""
    name, distribution, _package = FRAMEWORKS[config.framework]
    version = installed_version(distribution)
    if version is None:
        return NotRun(name, f"not installed (pip install {distribution})")
    framework = f"{name} {version}"
    run = {
        ConfigFormat.NEMO_AUTOMODEL: _nemo,
        ConfigFormat.ACCELERATE: _accelerate,
        ConfigFormat.TORCHAO: _torchao,
    }[config.framework]
    try:
        return run(config, model, framework)
    except (ImportError, compat.CompatError) as error:  # the installed version lacks a name used here
        return NotRun(name, f"{framework} cannot be run here ({describe_error(error)})")


@contextlib.contextmanager
def rejected_by(framework: str, config: FrameworkConfig) -> Iterator[None]:
    """A framework's own error while it reads or converts the file: one ConfigError naming the framework and
    its message (the file would not train), never a traceback."""
    try:
        yield
    except AdvisorError:
        raise
    except Exception as error:  # noqa: BLE001 - the framework's own exception, of any type
        raise ConfigError(
            f"{framework} rejects this config: {describe_error(error)}",
            location=str(config.path),
            hint=f"fix what {framework} names, or write the file again with `fp8advisor suggest --format "
            f"{config.framework.value}`",
        ) from error


# --- NeMo AutoModel -----------------------------------------------------------------------------------------


def _resolvable(key: Any) -> bool:
    """Whether NeMo's `ConfigNode` resolves the value of `key` by importing (`_target_`, any key ending in
    `_fn`)."""
    return isinstance(key, str) and (key == "_target_" or key.endswith("_fn"))


def _resolvable_keys(document: Any) -> list[str]:
    """The keys of `document`, at any depth, that NeMo's `ConfigNode` resolves by importing."""
    found, pending = [], [document]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if _resolvable(key):
                    found.append(key)
                pending.append(value)
        elif isinstance(node, list):
            pending.extend(node)
    return sorted(set(found))


def _without_resolvable(document: Any) -> Any:
    if isinstance(document, dict):
        return {key: _without_resolvable(value) for key, value in document.items() if not _resolvable(key)}
    if isinstance(document, list):
        return [_without_resolvable(value) for value in document]
    return document


class _Collected(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _nemo(config: FrameworkConfig, model: nn.Module, framework: str) -> NativeConversion:
    import yaml
    from nemo_automodel.components.config.loader import ConfigNode, load_yaml_config
    from nemo_automodel.components.quantization.fp8 import apply_fp8_to_model, build_fp8_config

    notes: list[str] = []
    text = read_config_text(config.path)  # the reader parsed it bounded already: no alias bomb gets here
    with rejected_by(framework, config):
        document = yaml.safe_load(text)  # what load_yaml_config parses the file with
        resolvable = _resolvable_keys(document)
        if resolvable:
            notes.append(
                f"NeMo AutoModel's loader read the file without its {', '.join(resolvable)} entries (it "
                "resolves them by importing code; they do not touch fp8:)"
            )
            cfg = ConfigNode(_without_resolvable(document))
        else:
            cfg = load_yaml_config(config.path)
        cfg_fp8 = cfg.get("fp8", None)  # recipes/llm/train_ft.py: build_model_and_optimizer(cfg_fp8=...)
        if cfg_fp8 is None:
            return NativeConversion(
                framework, frozenset(), None, ("no fp8: node: NeMo AutoModel trains bf16",)
            )
        fp8_config = build_fp8_config(cfg_fp8)
        collected = _Collected()
        logger = logging.getLogger(NEMO_FP8_LOGGER)
        logger.addHandler(collected)
        try:
            with lifted_checks.nemo_fp8_on_cpu():  # lifted: its SM89 check; nothing else
                model = apply_fp8_to_model(model, config=fp8_config)
        finally:
            logger.removeHandler(collected)
    notes += [f"NeMo AutoModel warned: {message}" for message in collected.messages]
    notes += _nemo_dropped_settings(fp8_config, model)
    if not fp8_config.enabled:
        notes.append("NeMo AutoModel: fp8.enabled is not true, apply_fp8_to_model converts nothing")
    return NativeConversion(framework, frozenset(converted_fqns(model)), None, tuple(notes))


#: FP8Config fields that NeMo hands to torchao's Float8LinearConfig (for tensorwise only, fp8.py).
_NEMO_PASSED_ON = ("enable_fsdp_float8_all_gather", "force_recompute_fp8_weight_in_bwd", "emulate")


def _nemo_dropped_settings(fp8_config, model: nn.Module) -> list[str]:
    """A note for each fp8 setting of the file that the converted layers do not run with: NeMo builds
    `Float8LinearConfig.from_recipe_name` for rowwise recipes and drops them (read from a converted
    Float8Linear's own `config`)."""
    float8_linear = compat.float8_linear()
    converted = next((m for m in model.modules() if isinstance(m, float8_linear)), None)
    if converted is None:
        return []
    return [
        f"NeMo AutoModel runs {key}={getattr(converted.config, key)}, not the file's "
        f"{getattr(fp8_config, key)} (recipe {fp8_config.recipe_name}: it builds torchao's config from the "
        "recipe name alone)"
        for key in _NEMO_PASSED_ON
        if bool(getattr(fp8_config, key)) != bool(getattr(converted.config, key))
    ]


# --- the torchao config a Python file passes ----------------------------------------------------------------


def _literal(node: ast.expr, scope: ModuleScope, what: str) -> Any:
    value = literal_value(resolve_name(node, scope, what))
    if value is NOT_LITERAL:
        raise ConfigError(
            f"{what} is not a literal: cannot tell its value without running the file",
            location=f"{scope.path}:{node.lineno}",
            hint="write the value itself (True, False, a number or a string) in the call",
        )
    return value


def _literal_keywords(call: ast.Call, scope: ModuleScope, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The keyword arguments of `call` as values, each a literal (a name bound once to one followed)."""
    values = {}
    for keyword in call.keywords:
        if keyword.arg in skip:
            continue
        if keyword.arg is None:
            raise ConfigError(
                f"{call_name(call)}(**...) hides its arguments",
                location=f"{scope.path}:{call.lineno}",
                hint="write each argument by name",
            )
        values[keyword.arg] = _literal(keyword.value, scope, f"{call_name(call)}({keyword.arg}=...)")
    return values


def float8_linear_config(node: ast.expr | None, scope: ModuleScope) -> Any:
    """torchao's `Float8LinearConfig` built from the file's expression (None when it passes none): the forms
    `torchao_reader._recipe_from_python` accepts, each argument a literal."""
    from torchao.float8 import Float8LinearConfig

    node = resolve_name(node, scope)
    if node is None or (isinstance(node, ast.Constant) and node.value is None):
        return None
    if isinstance(node, ast.Call):
        name = call_name(node)
        if name == "replace" and node.args:  # dataclasses.replace(<config>, pad_inner_dim=True, ...)
            return dataclasses.replace(
                float8_linear_config(node.args[0], scope), **_literal_keywords(node, scope)
            )
        if name == "from_recipe_name":
            argument = node.args[0] if node.args else keyword_value(node, "recipe_name")
            if isinstance(argument, ast.Attribute):  # Float8LinearRecipeName.ROWWISE
                from torchao.float8.config import Float8LinearRecipeName

                return Float8LinearConfig.from_recipe_name(Float8LinearRecipeName[argument.attr])
            if argument is not None:
                return Float8LinearConfig.from_recipe_name(_literal(argument, scope, "the recipe name"))
        if name == "Float8LinearConfig" and not node.args:
            return Float8LinearConfig(**_literal_keywords(node, scope))
    raise ConfigError(
        f"cannot build the torchao config {ast.unparse(node)} without running the file",
        location=f"{scope.path}:{getattr(node, 'lineno', '?')}",
        hint='write config=Float8LinearConfig.from_recipe_name("rowwise") (or dataclasses.replace of it)',
    )


def _passes_filter(node: ast.expr | None) -> bool:
    return not (node is None or (isinstance(node, ast.Constant) and node.value is None))


# --- accelerate ---------------------------------------------------------------------------------------------


def _accelerate(config: FrameworkConfig, model: nn.Module, framework: str) -> NativeConversion:
    from accelerate import Accelerator
    from accelerate.utils import AORecipeKwargs
    from accelerate.utils.ao import convert_model_to_fp8_ao

    text = read_config_text(config.path)
    tree = parse_python(config.path, text)
    scope = ModuleScope(tree, config.path)
    notes: list[str] = []
    accelerators = calls_named(tree, "Accelerator")
    precision_node = keyword_value(accelerators[0], "mixed_precision") if accelerators else None
    mixed_precision = (
        NOT_LITERAL if precision_node is None else literal_value(resolve_name(precision_node, scope))
    )
    if mixed_precision is NOT_LITERAL:  # as the reader: the launch config must turn FP8 on
        mixed_precision = "fp8"
        notes.append('accelerate run with mixed_precision="fp8": the file leaves it to the launch config')
    handlers = []
    for call in calls_named(tree, "AORecipeKwargs"):  # the reader allows one
        kwargs = _literal_keywords(call, scope, skip=("config", "module_filter_func"))
        with rejected_by(TORCHAO, config):
            linear_config = float8_linear_config(call_argument(call, 0, "config"), scope)
        module_filter = (
            config.filter_for(model) if _passes_filter(call_argument(call, 1, "module_filter_func")) else None
        )
        with rejected_by(framework, config):
            handlers.append(AORecipeKwargs(config=linear_config, module_filter_func=module_filter, **kwargs))
    with rejected_by(framework, config), lifted_checks.accelerate_state_isolated():
        accelerator = Accelerator(mixed_precision=mixed_precision, kwargs_handlers=handlers or None)
        handler = accelerator.ao_recipe_handler if accelerator.fp8_backend.value == "AO" else None
        if handler is None:
            notes.append(
                f"accelerate's FP8 backend is {accelerator.fp8_backend.value}: prepare converts nothing"
            )
        else:  # Accelerator._prepare_ao, for each nn.Module given to prepare (FSDP2 or not)
            convert_model_to_fp8_ao(
                model, config=handler.config, module_filter_func=handler.module_filter_func
            )
    return NativeConversion(framework, frozenset(converted_fqns(model)), None, tuple(notes))


# --- torchao ------------------------------------------------------------------------------------------------


def _torchao(config: FrameworkConfig, model: nn.Module, framework: str) -> NativeConversion:
    from torchao.float8 import convert_to_float8_training
    from torchao.prototype.moe_training.config import Float8TrainingOpConfig
    from torchao.quantization.quant_api import quantize_

    text = read_config_text(config.path)
    tree = parse_python(config.path, text)
    scope = ModuleScope(tree, config.path)
    if config.recipe is not None and config.recipe.is_mx:
        return _torchao_mx(config, model, framework, tree)
    steps: list[tuple[int, Callable[[], None]]] = []
    for call in calls_named(tree, "convert_to_float8_training")[:1]:  # the reader allows one
        with rejected_by(TORCHAO, config):
            linear_config = float8_linear_config(keyword_value(call, "config"), scope)
        module_filter = (
            config.filter_for(model) if _passes_filter(keyword_value(call, "module_filter_fn")) else None
        )

        def convert_linears(linear_config=linear_config, module_filter=module_filter) -> None:
            convert_to_float8_training(model, config=linear_config, module_filter_fn=module_filter)

        steps.append((call.lineno, convert_linears))
    if config.converts_experts:
        for call in calls_named(tree, "quantize_"):
            op_config = resolve_name(call_argument(call, 1, "config"), scope)
            if isinstance(op_config, ast.Call) and call_name(op_config) == "Float8TrainingOpConfig":
                op_kwargs = _literal_keywords(op_config, scope)

                def convert_experts(op_kwargs=op_kwargs) -> None:
                    quantize_(
                        model, config=Float8TrainingOpConfig(**op_kwargs), filter_fn=config.expert_filter
                    )

                steps.append((call.lineno, convert_experts))
    with rejected_by(framework, config):
        for _line, step in sorted(steps, key=lambda item: item[0]):
            step()
    experts = frozenset(swapped_expert_modules(model)) if config.converts_experts is not None else None
    notes = () if steps else ("no convert_to_float8_training or quantize_: torchao converts nothing",)
    return NativeConversion(framework, frozenset(converted_fqns(model)), experts, notes)


def _torchao_mx(config: FrameworkConfig, model: nn.Module, framework: str, tree) -> NativeConversion:
    """The file's one `quantize_(model, MXFP8TrainingOpConfig.from_recipe(...), filter_fn=...)`, run by
    torchao with torchao's own config for the file's recipe and the file's filter (on nn.Linear and expert
    modules alike, as torchao's handler takes it: conversion_utils.py:107-108)."""
    from torchao.quantization.quant_api import quantize_

    config_class, recipe_class, _kernels = compat.mx_training_api()
    linear, experts = config.filter_for(model), config.expert_filter

    def filter_fn(module: nn.Module, fqn: str) -> bool:
        return linear(module, fqn) or bool(experts is not None and experts(module, fqn))

    with rejected_by(framework, config):
        op_config = config_class.from_recipe(recipe_class(config.recipe.value))
        quantize_(model, config=op_config, filter_fn=filter_fn)
    wrapper = compat.mx_weight_tensor_class()
    swapped = {
        fqn
        for fqn, module in model.named_modules()
        if not isinstance(module, nn.Linear)
        and any(isinstance(p, wrapper) for p in module.parameters(recurse=False))
    }
    experts_found = frozenset(swapped) if config.converts_experts is not None else None
    return NativeConversion(framework, frozenset(converted_fqns(model)), experts_found, ())


__all__ = [
    "FRAMEWORKS",
    "NEMO_FP8_LOGGER",
    "float8_linear_config",
    "convert_in_place",
    "rejected_by",
    "torchao_family_conversion",
]
