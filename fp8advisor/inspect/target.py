"""Turn a TARGET string into an nn.Module built without allocating its weights, and inputs to run it.

TARGET forms:
  model.py                  a factory named build_model / build / get_model / create_model, else the single
                            nn.Module instance, else the single nn.Module class that builds without arguments
  model.py:NAME             a factory, a class or a module-level instance
  model.py:NAME(n_layers=4) keyword arguments given as literals: parsed with `ast`, never evaluated
  config.json | DIR         a Hugging Face config (or a directory holding one), built with transformers
                            `from_config`, fully offline (optional extra: `pip install 'fp8advisor[hf]'`)
  torchtitan:MODEL/FLAVOR   a model of torchtitan's registry, e.g. torchtitan:llama3/8B, built by torchtitan's
                            own `model_registry` (optional extra: `pip install 'fp8advisor[torchtitan]'`;
                            `fp8advisor.inspect.titan`)
  org/name[@revision]       a Hugging Face Hub id: its config.json alone, through huggingface_hub's cache
                            (`fp8advisor.inspect.hub`); a local path of the same name wins

A model file is read by `fp8advisor.reading` (a regular file: a pipe is refused, never waited on; UTF-8, a
byte-order mark dropped; a NUL byte refused with its line) and compiled from that text; a Hugging Face config
is read there too before transformers reads it (`hf.read_config_file`: never its repository's code, never a
prompt).

The model is built under `redirect_devices(device)`: every explicit device request (`device="cuda"`,
`.cuda()`, `.to("cuda")`, `torch.set_default_device`, ...) lands on `device` instead, so a file written for a
GPU builds on a laptop, on the meta device, in no memory.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import importlib.util
import inspect
import io
import re
import sys
import tokenize
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import nn

from fp8advisor.errors import CompatError, TargetError, quote
from fp8advisor.inspect import hf, hub
from fp8advisor.inspect.inputs import EXAMPLE_INPUTS_NAME
from fp8advisor.inspect.sandbox import (
    describe_error,
    object_location,
    redirect_devices,
    running_user_code,
    user_location_or_file,
)
from fp8advisor.inspect.spec import LoadedModel, TargetSpec
from fp8advisor.reading import decode_text, read_bytes

FACTORY_NAMES = ("build_model", "build", "get_model", "create_model")
HF_CONFIG_NAME = "config.json"

_PATH_AND_REST = re.compile(r"^(?P<path>.+?\.(?:py|json))(?::(?P<rest>.*))?$", re.DOTALL)
_NAME_AND_CALL = re.compile(r"^(?P<name>[A-Za-z_]\w*)?(?P<call>\(.*)?$", re.DOTALL)


# ----------------------------------------------------------------------------------------------------
# Parsing


def _exists(path: Path) -> bool:
    """`path.exists()`, False for a name the file system refuses to look up (too long, a NUL byte)."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def parse_target(text: str) -> TargetSpec:
    """Split `model.py:factory(n_layers=4)` into its parts; literal keyword arguments only, never run."""
    from fp8advisor.inspect import titan

    text = text.strip()
    if not text:
        raise TargetError(
            "empty TARGET",
            hint="give a model file (model.py), model.py:NAME, a config.json, a Hub id (org/name) or "
            "torchtitan:MODEL/FLAVOR",
        )
    if titan.is_registry_target(text):  # before any other form: "torchtitan:llama3/8B" is no file name
        return titan.parse(text)
    raw_path, name, call = text, None, None
    split = _PATH_AND_REST.match(text)
    if split is not None and not _exists(Path(text)):
        raw_path, rest = split.group("path"), split.group("rest")
        if rest is not None:
            parts = _NAME_AND_CALL.match(rest)
            if parts is None or not (parts.group("name") or parts.group("call")):
                raise TargetError(
                    f"{quote(rest)} is not a Python name",
                    hint="write model.py:NAME or model.py:NAME(key=value, ...) with literal values",
                )
            name, call = parts.group("name"), parts.group("call")
    path = Path(raw_path)
    kwargs = _parse_kwargs(call, text) if call else {}
    if not _exists(path):
        hub_id = hub.parse_hub_id(text) if split is None else None  # model.py, config.json: paths
        if hub_id is not None:  # no local path of that name: a Hugging Face Hub id
            return TargetSpec(text, hub.fetch_config(*hub_id), "hf_config", hub_id=text)
        raise TargetError(
            f"no such file or directory: {quote(raw_path)}", hint="check the path of the model file"
        )
    if path.is_dir():
        config = path / HF_CONFIG_NAME
        if not _exists(config) or config.is_dir():  # a pipe named config.json is refused when it is read
            raise TargetError(
                f"{raw_path} is a directory without a {HF_CONFIG_NAME}",
                hint="give a model file (model.py) or a Hugging Face model directory holding config.json",
            )
        return _hf_spec(text, config, name, kwargs)
    if path.suffix == ".json":
        return _hf_spec(text, path, name, kwargs)
    if path.suffix != ".py":
        raise TargetError(
            f"{raw_path} is neither a Python file nor a Hugging Face config.json",
            hint="give model.py, model.py:NAME, a config.json or a directory holding one",
        )
    return TargetSpec(text, path, "python", name, kwargs)


def _hf_spec(text: str, config: Path, name: str | None, kwargs: dict[str, Any]) -> TargetSpec:
    if name is not None:
        raise TargetError(
            f"a Hugging Face config takes no NAME ({name!r})",
            hint="give config.json or its directory; override config values with config.json:(key=value)",
        )
    return TargetSpec(text, config, "hf_config", None, kwargs)


def _parse_kwargs(call: str, text: str) -> dict[str, Any]:
    try:
        tree = ast.parse(f"_{call}", mode="eval")
    except (SyntaxError, MemoryError, RecursionError) as error:
        raise TargetError(
            f"cannot read the arguments in {quote(text)}: {getattr(error, 'msg', type(error).__name__)}",
            hint="write NAME(key=value, ...) with literal values, quoted for the shell",
        ) from None
    node = tree.body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise TargetError(f"cannot read the arguments in {quote(text)}", hint="write NAME(key=value, ...)")
    if node.args:
        raise TargetError(
            f"positional arguments are not accepted in {quote(text)}",
            hint="name each argument: NAME(n_layers=4, dim=1024)",
        )
    kwargs: dict[str, Any] = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            raise TargetError(
                f"**kwargs are not accepted in {quote(text)}", hint="name each argument: NAME(key=value)"
            )
        try:
            kwargs[keyword.arg] = ast.literal_eval(keyword.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):  # TypeError: {[1]: 2}
            raise TargetError(
                f"the value of {keyword.arg} in {quote(text)} is not a literal",
                hint="only literals are accepted (numbers, strings, True/False/None, lists, tuples, dicts): "
                "the target is parsed, never evaluated",
            ) from None
    return kwargs


# ----------------------------------------------------------------------------------------------------
# Loading


def load_model(
    target: str | TargetSpec, device: str | torch.device = "meta", *, overrides: dict[str, Any] | None = None
) -> LoadedModel:
    """Build TARGET on `device` ("meta": no memory; "cpu": real weights), explicit devices redirected there.

    `overrides` are extra keyword arguments for the factory or class (a Python file), or config attributes (a
    Hugging Face config), e.g. `{"n_layers": 2}` to build a smaller copy of the same model.
    """
    spec = target if isinstance(target, TargetSpec) else parse_target(target)
    device = torch.device(device)
    if spec.kind == "hf_config":
        return _load_hf(spec, device, overrides or {})
    if spec.kind == "torchtitan":
        from fp8advisor.inspect import titan

        return titan.load(spec, device, overrides or {})
    return _load_python(spec, device, overrides or {})


def _python_source(path: Path) -> str:
    """The text of a Python file as Python reads it: a regular file (a pipe is refused, not waited on), in
    the encoding its coding declaration names (PEP 263), else UTF-8 without its byte-order mark; no NUL."""
    data = read_bytes(path, "model file", error=TargetError, hint="check the path of the model file")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as error:  # an unknown encoding in the declaration, or a BOM that contradicts it
        raise TargetError(f"cannot read the model file: {error.msg}", location=str(path)) from None
    if encoding in ("utf-8", "utf-8-sig"):
        return decode_text(data, path, "model file", error=TargetError)
    try:
        source = data.decode(encoding)
    except UnicodeDecodeError as failure:
        raise TargetError(
            f"model file is not {encoding} text, as its coding declaration says (byte {failure.start})",
            location=str(path),
        ) from None
    return decode_text(source.encode("utf-8"), path, "model file", error=TargetError)  # the NUL check


def _import_file(spec: TargetSpec) -> ModuleType:
    path = spec.path.resolve()
    source = _python_source(spec.path)
    try:
        code = compile(source, str(path), "exec")
    except SyntaxError as error:
        raise TargetError(
            f"syntax error: {error.msg}",
            location=f"{spec.path}:{error.lineno}" if error.lineno else str(spec.path),
            hint="fix the model file so that `python -c 'import ...'` can read it",
        ) from None
    except (RecursionError, MemoryError, ValueError) as error:  # nested too deep for the compiler
        raise TargetError(
            f"Python cannot compile the model file: {describe_error(error)}",
            location=str(spec.path),
            hint="fix the model file so that `python -c 'import ...'` can read it",
        ) from None
    module_name = f"_fp8advisor_target_{abs(hash(str(path)))}"
    module = ModuleType(module_name)
    module.__file__ = str(path)
    module.__spec__ = importlib.util.spec_from_file_location(module_name, path)
    # In sys.modules so that dataclasses and typing can find the module of the classes it defines by name.
    sys.modules[module_name] = module
    try:
        exec(code, module.__dict__)
    except CompatError:
        raise  # our own lookup of a torch internal failed, not the user's code
    except Exception as error:
        hint = (
            "install the missing package, or remove the import from the model file"
            if isinstance(error, ImportError)
            else "fix the model file; run it with python to see the full error"
        )
        raise TargetError(
            f"importing {spec.path.name} failed: {describe_error(error)}",
            location=user_location_or_file(spec.path, error.__traceback__),
            hint=hint,
        ) from error
    return module


@contextlib.contextmanager
def _beside(path: Path) -> Iterator[None]:
    """Let the user's file import its sibling modules, while it is imported and while it builds."""
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        if folder in sys.path:
            sys.path.remove(folder)


def _defined_here(obj: Any, module: ModuleType) -> bool:
    return getattr(obj, "__module__", None) == module.__name__


def _no_arg_constructible(cls: type) -> bool:
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):
        return False
    return all(
        p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        for p in signature.parameters.values()
    )


def _candidates(module: ModuleType) -> dict[str, str]:
    """Names in the user's file that could be a target, with what each is."""
    found: dict[str, str] = {}
    for name, obj in vars(module).items():
        if name.startswith("_"):
            continue
        if isinstance(obj, nn.Module):
            found[name] = f"{type(obj).__name__} instance"
        elif inspect.isclass(obj) and issubclass(obj, nn.Module) and _defined_here(obj, module):
            found[name] = "nn.Module class"
        elif inspect.isfunction(obj) and _defined_here(obj, module) and name != EXAMPLE_INPUTS_NAME:
            found[name] = "function"
    return found


def _resolve_default(module: ModuleType, spec: TargetSpec) -> tuple[str, Any]:
    """The convention for a bare `model.py`: factory, else single instance, else single no-argument class."""
    for name in FACTORY_NAMES:
        obj = vars(module).get(name)
        if callable(obj):
            return name, obj
    instances = [
        name for name, obj in vars(module).items() if isinstance(obj, nn.Module) and not name.startswith("_")
    ]
    if len(instances) == 1:
        return instances[0], vars(module)[instances[0]]
    if len(instances) > 1:
        raise TargetError(
            f"{spec.path} is ambiguous: it holds {len(instances)} nn.Module instances "
            f"({', '.join(instances)})",
            hint=f"name one: {spec.path}:{instances[0]}",
        )
    classes = [
        name
        for name, obj in vars(module).items()
        if inspect.isclass(obj)
        and issubclass(obj, nn.Module)
        and _defined_here(obj, module)
        and not name.startswith("_")
        and _no_arg_constructible(obj)
    ]
    if len(classes) == 1:
        return classes[0], vars(module)[classes[0]]
    if len(classes) > 1:
        raise TargetError(
            f"{spec.path} is ambiguous: it defines {len(classes)} nn.Module classes that build without "
            "arguments "
            f"({', '.join(classes)}) and no factory ({' / '.join(FACTORY_NAMES)})",
            hint=f"name one: {spec.path}:{classes[0]}, or add a build_model() function",
        )
    candidates = _candidates(module)
    listed = ", ".join(f"{n} ({what})" for n, what in candidates.items()) or "none"
    raise TargetError(
        f"{spec.path} has no model to build: no factory ({' / '.join(FACTORY_NAMES)}), no nn.Module instance "
        "and no "
        "nn.Module class that builds without arguments",
        hint=f"name what builds the model: {spec.path}:NAME(key=value, ...); names in the file: {listed}",
    )


def _load_python(spec: TargetSpec, device: torch.device, overrides: dict[str, Any]) -> LoadedModel:
    kwargs = {**spec.kwargs, **overrides}
    with (
        _beside(spec.path),
        running_user_code(spec.path, f"importing and building {spec.text}"),
        redirect_devices(device, skip_init=True),
    ):
        module = _import_file(spec)
        if spec.name is None:
            name, obj = _resolve_default(module, spec)
        else:
            name = spec.name
            if name not in vars(module):
                candidates = _candidates(module)
                close = difflib.get_close_matches(name, list(candidates), n=3)
                listed = ", ".join(f"{n} ({what})" for n, what in candidates.items()) or "none"
                did_you_mean = f"did you mean {' or '.join(close)}? " if close else ""
                raise TargetError(
                    f"{spec.path} has no name {name!r}",
                    hint=f"{did_you_mean}candidates: {listed}",
                )
            obj = vars(module)[name]
        if isinstance(obj, nn.Module):
            if kwargs:
                raise TargetError(
                    f"{name} is an nn.Module instance: it takes no arguments",
                    hint=f"name a factory or a class to pass arguments, or write {spec.path}:{name}",
                )
            model, built_by = obj, name
        elif callable(obj):
            built_by = f"{name}({', '.join(f'{k}={quote(v)}' for k, v in kwargs.items())})"
            model = _call_user(obj, kwargs, spec, built_by)
        else:
            raise TargetError(
                f"{name} in {spec.path} is a {type(obj).__name__}, not a factory, class or nn.Module",
                hint="name a function or class that builds the model",
            )
    if not isinstance(model, nn.Module):
        raise TargetError(
            f"{built_by} returned a {type(model).__name__}, not a torch.nn.Module",
            location=object_location(obj, spec),
            hint="the target must build an nn.Module (return the model from the factory)",
        )
    return LoadedModel(model, spec, device, vars(module), spec.path, built_by)


def _call_user(factory: Callable, kwargs: dict[str, Any], spec: TargetSpec, built_by: str) -> Any:
    try:
        inspect.signature(factory).bind(**kwargs)
    except TypeError as error:
        raise TargetError(
            f"cannot call {built_by}: {error}",
            location=object_location(factory, spec),
            hint="pass its required arguments as literals: "
            f"{spec.path}:{spec.name or factory.__name__}(key=value)",
        ) from None
    except ValueError:
        pass  # no signature (builtin): let the call say
    try:
        return factory(**kwargs)
    except CompatError:
        raise  # our own lookup of a torch internal failed, not the user's code
    except Exception as error:
        raise TargetError(
            f"building the model failed in {built_by}: {describe_error(error)}",
            location=user_location_or_file(spec.path, error.__traceback__),
            hint="fix the model code; run with --debug for the full traceback",
        ) from error


def _load_hf(spec: TargetSpec, device: torch.device, overrides: dict[str, Any]) -> LoadedModel:
    overrides = {**spec.kwargs, **overrides}
    source = spec.hub_id or spec.path  # what the user named
    with hf.light_imports():  # the config's and the model's modules, without what building never uses
        transformers = hf.import_transformers()
        data, has_bom = hf.read_config_file(spec.path, str(source), transformers, overrides)
        try:
            with hf.readable_copy(spec.path, data, has_bom) as readable:
                config = transformers.AutoConfig.from_pretrained(
                    str(readable), local_files_only=True, trust_remote_code=False, **overrides
                )
        except Exception as error:
            raise TargetError(
                f"transformers cannot read {source}: {describe_error(error)}",
                hint="check that config.json names a model_type this transformers version knows",
            ) from error
        hf.import_model_classes(transformers, config)
    with redirect_devices(device, skip_init=True):
        built_by = ""
        errors = []
        for auto in (transformers.AutoModelForCausalLM, transformers.AutoModel):
            try:
                # Eager attention: the sdpa path asks data-dependent questions of the mask (`.all()`), which a
                # meta tensor cannot answer; the Linear layers are the same either way.
                model = auto.from_config(config, attn_implementation="eager", trust_remote_code=False)
                built_by = f"{auto.__name__}.from_config({source})"
                break
            except ValueError as error:  # this auto class does not know the config's model type
                errors.append(error)
            except Exception as error:
                raise TargetError(
                    f"transformers failed to build {source}: {describe_error(error)}",
                    hint="check the config; run with --debug for the full traceback",
                ) from error
        else:
            raise TargetError(
                f"transformers has no model class for {source}: {describe_error(errors[-1])}",
                hint="check model_type in config.json, or upgrade transformers",
            )
    return LoadedModel(model, spec, device, {}, None, built_by)
