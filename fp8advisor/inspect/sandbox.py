"""Running the user's model code: on the device asked for, and with its ways of ending the process contained.

- `redirect_devices(device)`: every explicit device request of the code (`device="cuda"`, `.cuda()`,
  `.to("cuda")`, `torch.set_default_device`, ...) lands on `device` instead, so that a file written for a GPU
  builds on a laptop, on the meta device, in no memory.
- `running_user_code(source, doing)`: its prints go to stderr, it sees `sys.argv` as its own file, an
  `os.chdir` it makes is undone when it returns, and a `sys.exit`, `os._exit` or other BaseException becomes
  one `TargetError` naming its line.
- `user_location`: where in the user's file an error happened (`fp8advisor.errors.describe_error` says what).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import torch
from torch.overrides import TorchFunctionMode

from fp8advisor import compat
from fp8advisor.errors import TargetError, describe_error, quote
from fp8advisor.process_exit import ProcessExit, exits_disarmed

if TYPE_CHECKING:
    from fp8advisor.inspect.spec import TargetSpec


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


def user_location_or_file(path: Path, tb: TracebackType | None) -> str:
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


def _how_it_ended(error: BaseException) -> str:
    if isinstance(error, SystemExit):
        return f"called sys.exit({quote(error.code)})"
    if isinstance(error, ProcessExit):
        return f"called os._exit({error.status!r})"
    return f"raised {describe_error(error)} (a BaseException, which ends a program)"


@contextlib.contextmanager
def running_user_code(source: Path | None, doing: str) -> Iterator[None]:
    """Run the user's code (importing, building, example inputs, a forward) as far as it can be contained.

    - Its prints go to stderr: stdout carries the JSON or the config this tool writes.
    - `sys.argv` is the file alone: the command line holds this tool's options, which a model that parses
      its own arguments would reject (argparse ends the process over them).
    - The working directory is the user's again when it returns: a relative path on the command line (`-o
      fp8.toml`, `--check`) names the file the user meant, not one beside a model that called `os.chdir`;
      so are `sys.exit` and the hooks Python reports errors through, should the code have replaced them.
    - Every way the code can end the process short of a signal (`sys.exit`, `os._exit`, any BaseException
      but Ctrl-C) becomes one `TargetError`, so that an exit status of this tool always means the work ran.

    `source` is the user's file (for the error's location), `doing` says what ran ("building the model").
    Ordinary exceptions pass through: the callers turn them into errors that say more.
    """
    saved_argv = sys.argv
    saved_enders = {name: getattr(sys, name) for name in ("exit", "excepthook", "unraisablehook")}
    try:
        saved_cwd: str | None = os.getcwd()
    except OSError:  # the working directory was removed: nothing to return to
        saved_cwd = None
    sys.argv = [str(source) if source is not None else "model"]
    try:
        with exits_disarmed(), contextlib.redirect_stdout(sys.stderr):  # os._exit raises ProcessExit
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
        sys.argv = saved_argv
        for name, function in saved_enders.items():  # a model that replaced sys.exit cannot end us later
            setattr(sys, name, function)
        if saved_cwd is not None:
            with contextlib.suppress(OSError):
                os.chdir(saved_cwd)


def object_location(obj: Any, spec: TargetSpec) -> str | None:
    try:
        line = inspect.getsourcelines(obj)[1]
    except (TypeError, OSError):
        return None
    return f"{spec.path}:{line}"
