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
                            `fp8advisor.titan`)
  org/name[@revision]       a Hugging Face Hub id: its config.json alone, through huggingface_hub's cache
                            (`fp8advisor.hub`); a local path of the same name wins

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
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from fp8advisor import compat, hf, hub
from fp8advisor.errors import CompatError, ModelInputsError, TargetError, quote

FACTORY_NAMES = ("build_model", "build", "get_model", "create_model")
EXAMPLE_INPUTS_NAME = "example_inputs"
HF_CONFIG_NAME = "config.json"

_PATH_AND_REST = re.compile(r"^(?P<path>.+?\.(?:py|json))(?::(?P<rest>.*))?$", re.DOTALL)
_NAME_AND_CALL = re.compile(r"^(?P<name>[A-Za-z_]\w*)?(?P<call>\(.*)?$", re.DOTALL)


# ----------------------------------------------------------------------------------------------------
# Parsing


@dataclass(frozen=True)
class TargetSpec:
    """A parsed TARGET: where the model comes from and how to build it."""

    text: str  # as the user typed it
    path: Path | None  # the model file or config.json; None for a torchtitan registry target
    kind: str  # "python", "hf_config" or "torchtitan"
    # factory, class or instance in the file (None = resolve by convention); torchtitan: the model package
    name: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    flavor: str | None = None  # torchtitan: the flavor in the model's registry
    hub_id: str | None = None  # "org/name[@revision]" when `path` is a config.json fetched from the Hub


def _exists(path: Path) -> bool:
    """`path.exists()`, False for a name the file system refuses to look up (too long, a NUL byte)."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def parse_target(text: str) -> TargetSpec:
    """Split `model.py:factory(n_layers=4)` into its parts; literal keyword arguments only, never run."""
    from fp8advisor import titan

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
        if not config.is_file():
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
# Device redirection


class _RedirectDevices(TorchFunctionMode):
    """Send every tensor to `device`: factory calls with or without `device=`, `.to(...)`, `.cuda()`..."""

    def __init__(self, device: torch.device, skip_init: bool):
        super().__init__()
        self.device = device
        self.constructors = compat.device_constructors()
        self.skip_init = skip_init and device.type == "meta"

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.skip_init and func in _INIT_FUNCTIONS:
            # Filling a meta tensor with random numbers changes nothing but costs a Python meta kernel each.
            tensor = args[0] if args else kwargs.get("tensor")
            if isinstance(tensor, torch.Tensor) and tensor.is_meta:
                return tensor
        if func in self.constructors:
            # With or without an explicit device: `torch.empty(n, device="cuda")` lands on self.device too.
            return func(*args, **{**kwargs, "device": self.device})
        if func in _NEW_METHODS and kwargs.get("device") is not None:
            return func(*args, **{**kwargs, "device": self.device})  # x.new_zeros(n, device="cuda")
        if func is torch.Tensor.to:
            return self._to(func, args, kwargs)
        if func in _DEVICE_METHODS:
            tensor = args[0]
            return tensor if tensor.device == self.device else tensor.to(self.device)
        if func is torch.Tensor.pin_memory:
            return args[0]
        return func(*args, **kwargs)

    def _to(self, func, args, kwargs):
        tensor, rest = args[0], args[1:]
        device, dtype, non_blocking, memory_format = compat.parse_to(*rest, **kwargs)
        if device is None or torch.device(device) == self.device:
            return func(*args, **kwargs)
        if rest and isinstance(rest[0], torch.Tensor):
            dtype = rest[0].dtype  # .to(other) means other's dtype and device
        new_kwargs: dict[str, Any] = {"device": self.device, "non_blocking": non_blocking}
        if dtype is not None:
            new_kwargs["dtype"] = dtype
        if memory_format is not None:
            new_kwargs["memory_format"] = memory_format
        if "copy" in kwargs:
            new_kwargs["copy"] = kwargs["copy"]
        return func(tensor, **new_kwargs)


# In-place methods that `torch.nn.init` and `reset_parameters` use to fill weights: no-ops on the meta device.
_INIT_FUNCTIONS = {
    getattr(torch.Tensor, name)
    for name in (
        "uniform_",
        "normal_",
        "fill_",
        "zero_",
        "random_",
        "exponential_",
        "bernoulli_",
        "log_normal_",
        "cauchy_",
        "geometric_",
        "erfinv_",
        "mul_",
        "add_",
        "sub_",
        "div_",
        "clamp_",
        "clamp_min_",
        "clamp_max_",
    )
    if hasattr(torch.Tensor, name)
} | {
    function
    for name, function in vars(torch.nn.init).items()
    if name.endswith("_") and not name.startswith("_") and callable(function)
}
_NEW_METHODS = {
    getattr(torch.Tensor, name)
    for name in ("new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full", "new_tensor")
    if hasattr(torch.Tensor, name)
}
_DEVICE_METHODS = {torch.Tensor.cuda, torch.Tensor.cpu}
for _name in ("xpu", "mps", "ipu", "hpu", "mtia"):
    if hasattr(torch.Tensor, _name):
        _DEVICE_METHODS.add(getattr(torch.Tensor, _name))


@contextlib.contextmanager
def _skip_dynamo_import() -> Iterator[None]:
    """For the duration of a build or trace, call torch's meta kernels and refs without importing
    torch._dynamo (about 3 s): nothing here runs under torch.compile (`compat.dynamo_disabled_functions`)."""
    if compat.dynamo_imported():
        yield  # already paid for
        return
    try:
        refs = compat.dynamo_disabled_functions()
    except Exception:  # torch internals moved: inspection still works, only slower (torch._dynamo imports)
        refs = []
    cache = compat.DYNAMO_DISABLE_CACHE_ATTR
    patched = [f for f in refs if getattr(f, cache, None) is None]
    try:
        for function in patched:
            setattr(function, cache, function)
        yield
    finally:
        for function in patched:
            if getattr(function, cache, None) is function:
                delattr(function, cache)


@contextlib.contextmanager
def redirect_devices(device: str | torch.device = "meta", *, skip_init: bool = False) -> Iterator[None]:
    """Build and run on `device` whatever device the code asks for; CUDA queries answer as if one GPU existed.

    Patches a few `torch.cuda` helpers that raise without a GPU (`current_device`, `set_device`,
    `synchronize`, `device_count`) for the duration only, and only when no GPU is present. `skip_init` (meta
    only, for building) makes weight-filling in-place methods (`uniform_`, `normal_`, ...) no-ops.
    """
    device = torch.device(device)
    patches: dict[str, Any] = {}
    if not torch.cuda.is_available():
        patches = {
            "current_device": lambda: 0,
            "set_device": lambda *a, **k: None,
            "synchronize": lambda *a, **k: None,
            "device_count": lambda: 1,
        }
    saved = {name: getattr(torch.cuda, name) for name in patches}
    saved_autocast = torch.autocast
    try:
        for name, replacement in patches.items():
            setattr(torch.cuda, name, replacement)
        if device.type == "meta":
            torch.autocast = _MetaAutocast
        with _skip_dynamo_import(), _RedirectDevices(device, skip_init):
            yield
    finally:
        for name, original in saved.items():
            setattr(torch.cuda, name, original)
        torch.autocast = saved_autocast


class _MetaAutocast(torch.autocast):
    """`torch.autocast(device_type=x.device.type)` (torchtitan's MoE router) raises for "meta", which has no
    autocast: there it is a disabled autocast instead. Shapes are the same either way."""

    def __init__(self, device_type: str, dtype=None, enabled: bool = True, cache_enabled=None):
        if device_type == "meta":
            device_type, dtype, enabled = "cpu", None, False
        super().__init__(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


# ----------------------------------------------------------------------------------------------------
# Loading


@dataclass
class LoadedModel:
    """A built model with what is needed to run it: the user's module namespace (for `example_inputs`)."""

    model: nn.Module
    spec: TargetSpec
    device: torch.device
    namespace: dict[str, Any]  # globals of the user's file; {} for a Hugging Face config
    source_file: Path | None  # the user's file (for error locations); None for a Hugging Face config
    built_by: str  # e.g. "llama3_70b()" or "LlamaForCausalLM.from_config(config.json)"
    notes: list[str] = field(default_factory=list)  # what was changed to build it (inspection prints them)

    def example_inputs(self, batch: int, seq: int) -> ExampleInputs:
        return make_example_inputs(self.model, self.namespace, batch, seq, self.device, spec=self.spec)


@dataclass(frozen=True)
class ExampleInputs:
    """Arguments for one forward: `model(*args, **kwargs)`; `how` says where they came from."""

    args: tuple
    kwargs: dict[str, Any]
    how: str


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
        from fp8advisor import titan

        return titan.load(spec, device, overrides or {})
    return _load_python(spec, device, overrides or {})


def _location(path: Path, tb: TracebackType | None) -> str:
    """`file.py:LINE` of the innermost frame of the user's file in a traceback (just the file when none)."""
    return user_location(path, tb) or str(path)


def user_location(path: Path | None, tb: TracebackType | None) -> str | None:
    """`file.py:LINE` of the innermost frame in `path`, or None when the traceback never enters it."""
    if path is None:
        return None
    resolved = str(path.resolve())
    found = None
    for frame in traceback.extract_tb(tb):
        if os.path.abspath(frame.filename) == resolved:
            found = f"{path}:{frame.lineno}"
    return found


class _ProcessExit(BaseException):
    """`os._exit(status)` called by the user's code, raised instead of ending the process."""

    def __init__(self, status: int):
        super().__init__(status)
        self.status = status


def _raise_process_exit(status: int) -> None:
    raise _ProcessExit(status)


def _how_it_ended(error: BaseException) -> str:
    if isinstance(error, SystemExit):
        return f"called sys.exit({quote(error.code)})"
    if isinstance(error, _ProcessExit):
        return f"called os._exit({error.status!r})"
    return f"raised {describe_error(error)} (a BaseException, which ends a program)"


@contextlib.contextmanager
def running_user_code(source: Path | None, doing: str) -> Iterator[None]:
    """Run the user's code (importing, building, example inputs, a forward) as far as it can be contained.

    - Its prints go to stderr: stdout carries the JSON or the config this tool writes.
    - `sys.argv` is the file alone: the command line holds this tool's options, which a model that parses
      its own arguments would reject (argparse ends the process over them).
    - Every way the code can end the process short of a signal (`sys.exit`, `os._exit`, any BaseException
      but Ctrl-C) becomes one `TargetError`, so that an exit status of this tool always means the work ran.

    `source` is the user's file (for the error's location), `doing` says what ran ("building the model").
    Ordinary exceptions pass through: the callers turn them into errors that say more.
    """
    saved_argv, saved_exit = sys.argv, os._exit
    sys.argv = [str(source) if source is not None else "model"]
    os._exit = _raise_process_exit
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    except (Exception, KeyboardInterrupt):
        raise
    except BaseException as error:
        raise TargetError(
            f"the model code {_how_it_ended(error)} while {doing}",
            location=user_location(source, error.__traceback__),
            hint="a model file must not end the process: remove the call, or put it under "
            "`if __name__ == '__main__':`",
        ) from None
    finally:
        sys.argv, os._exit = saved_argv, saved_exit


def describe_error(error: BaseException) -> str:
    """`TypeName: first line of the message` (just the type name when the message is empty)."""
    text = str(error).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def _import_file(spec: TargetSpec) -> ModuleType:
    path = spec.path.resolve()
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise TargetError(f"cannot read {spec.path}: {error}") from None
    try:
        code = compile(source, str(path), "exec")
    except SyntaxError as error:
        raise TargetError(
            f"syntax error: {error.msg}",
            location=f"{spec.path}:{error.lineno}",
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
            location=_location(spec.path, error.__traceback__),
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
            location=_object_location(obj, spec),
            hint="the target must build an nn.Module (return the model from the factory)",
        )
    return LoadedModel(model, spec, device, vars(module), spec.path, built_by)


def _object_location(obj: Any, spec: TargetSpec) -> str | None:
    try:
        line = inspect.getsourcelines(obj)[1]
    except (TypeError, OSError):
        return None
    return f"{spec.path}:{line}"


def _call_user(factory: Callable, kwargs: dict[str, Any], spec: TargetSpec, built_by: str) -> Any:
    try:
        inspect.signature(factory).bind(**kwargs)
    except TypeError as error:
        raise TargetError(
            f"cannot call {built_by}: {error}",
            location=_object_location(factory, spec),
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
            location=_location(spec.path, error.__traceback__),
            hint="fix the model code; run with --debug for the full traceback",
        ) from error


def _load_hf(spec: TargetSpec, device: torch.device, overrides: dict[str, Any]) -> LoadedModel:
    overrides = {**spec.kwargs, **overrides}
    source = spec.hub_id or spec.path  # what the user named
    with hf.light_imports():  # the config's and the model's modules, without what building never uses
        transformers = hf.import_transformers()
        try:
            config = transformers.AutoConfig.from_pretrained(
                str(spec.path), local_files_only=True, **overrides
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
                model = auto.from_config(config, attn_implementation="eager")
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


# ----------------------------------------------------------------------------------------------------
# Example inputs


def _first_parametrized_module(model: nn.Module) -> nn.Module | None:
    for module in model.modules():
        if any(True for _ in module.parameters(recurse=False)):
            return module
    return None


def _float_dtype(model: nn.Module) -> torch.dtype:
    for parameter in model.parameters():
        if parameter.is_floating_point():
            return parameter.dtype
    return torch.get_default_dtype()


def _required_positional(forward: Callable) -> tuple[int, bool]:
    """(number of required positional parameters, whether one positional argument can be passed at all)."""
    try:
        parameters = list(inspect.signature(forward).parameters.values())
    except (TypeError, ValueError):
        return 1, True
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    variadic = any(p.kind == p.VAR_POSITIONAL for p in parameters)
    required = [
        p for p in parameters if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    return len(required), bool(positional) or variadic


def make_example_inputs(
    model: nn.Module,
    namespace: dict[str, Any],
    batch: int,
    seq: int,
    device: str | torch.device = "meta",
    *,
    spec: TargetSpec | None = None,
) -> ExampleInputs:
    """Inputs for one forward of `model`: the user's `example_inputs(batch, seq)` when the file has one, else
    token ids (batch, seq) when the model starts with an embedding, else a (batch, seq, K) float tensor.

    Raises ModelInputsError when the forward needs more than the tool can guess.
    """
    device = torch.device(device)
    where = spec.path if spec is not None and spec.kind == "python" else Path("model.py")
    user_fn = namespace.get(EXAMPLE_INPUTS_NAME)
    if callable(user_fn):
        with (
            running_user_code(where, f"calling {EXAMPLE_INPUTS_NAME}({batch}, {seq})"),
            redirect_devices(device),
        ):
            try:
                value = user_fn(batch, seq)
            except CompatError:
                raise  # our own lookup of a torch internal failed, not the user's code
            except Exception as error:
                raise ModelInputsError(
                    f"{EXAMPLE_INPUTS_NAME}({batch}, {seq}) failed: {describe_error(error)}",
                    location=_location(where, error.__traceback__),
                    hint=f"{EXAMPLE_INPUTS_NAME}(batch, seq) must return a tensor, a tuple or a dict",
                ) from error
        if isinstance(value, torch.Tensor):
            return ExampleInputs((value,), {}, f"{EXAMPLE_INPUTS_NAME}({batch}, {seq})")
        if isinstance(value, dict):
            return ExampleInputs((), dict(value), f"{EXAMPLE_INPUTS_NAME}({batch}, {seq})")
        if isinstance(value, (tuple, list)):
            return ExampleInputs(tuple(value), {}, f"{EXAMPLE_INPUTS_NAME}({batch}, {seq})")
        raise ModelInputsError(
            f"{EXAMPLE_INPUTS_NAME}({batch}, {seq}) returned a {type(value).__name__}",
            location=_object_location(user_fn, spec) if spec else None,
            hint="return a tensor, a tuple of positional arguments or a dict of keyword arguments",
        )

    forward = model.forward
    required, takes_positional = _required_positional(forward)
    example_hint = (
        f"add to {where.name}:\n"
        f"    def {EXAMPLE_INPUTS_NAME}(batch, seq):\n"
        "        return (tokens_or_x, other_argument, ...)   # a tuple of forward's positional arguments\n"
        "  (the tool calls it with the --batch and --seq values; return tensors of those sizes)"
    )
    forward_location = _object_location(forward, spec) if spec is not None and spec.kind == "python" else None
    if required > 1 or not takes_positional:
        names = list(inspect.signature(forward).parameters)
        raise ModelInputsError(
            f"{type(model).__name__}.forward({', '.join(names)}) needs arguments the tool cannot guess",
            location=forward_location,
            hint=example_hint,
        )
    first = _first_parametrized_module(model)
    if isinstance(first, nn.Embedding):
        tokens = torch.randint(0, first.num_embeddings, (batch, seq), device=device)
        kwargs: dict[str, Any] = {}
        if spec is not None and spec.kind == "hf_config":
            # An explicit all-ones mask and no cache: transformers then asks no data-dependent questions.
            kwargs["use_cache"] = False
            with redirect_devices(device):
                kwargs["attention_mask"] = torch.ones(batch, seq, dtype=torch.long)
        return ExampleInputs((tokens,), kwargs, f"token ids ({batch}, {seq})")
    features = _input_features(model, first)
    if features is None:
        raise ModelInputsError(
            f"cannot tell what {type(model).__name__}.forward takes (no embedding, Linear or norm first)",
            location=forward_location,
            hint=example_hint,
        )
    x = torch.randn(batch, seq, features, dtype=_float_dtype(model), device=device)
    return ExampleInputs((x,), {}, f"float input ({batch}, {seq}, {features})")


def _input_features(model: nn.Module, first: nn.Module | None) -> int | None:
    if isinstance(first, nn.Linear):
        return first.in_features
    if isinstance(first, (nn.LayerNorm, nn.RMSNorm)) and first.normalized_shape:
        return int(first.normalized_shape[-1])
    if first is not None:
        weight = getattr(first, "weight", None)
        if isinstance(weight, torch.Tensor) and weight.dim() == 1:
            return int(weight.shape[0])  # a norm of some other class
    for module in model.modules():
        if isinstance(module, nn.Linear):
            return module.in_features
    return None
