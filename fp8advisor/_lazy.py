"""Names a package re-exports from its modules, imported on first use (PEP 562).

`import fp8advisor` and a stage package's `__init__` must stay cheap: `suggest` starts in a few seconds
because scipy, torchao and transformers are imported only by the code that needs them. A package lists its
public names in `_EXPORTS` (name -> the module that defines it) and sets

    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

so that `fp8advisor.advise` or `from fp8advisor.inspect import inspect_model` imports its module then, once.
`forwarded_names` is the `__getattr__` of a deprecated module whose names moved (`fp8advisor.target`,
`fp8advisor.layers`).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list]]:
    """`__getattr__` and `__dir__` for `package`, resolving each name of `exports` from its module."""

    def __getattr__(name: str) -> object:
        try:
            module = exports[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # the next access is a plain attribute
        return value

    def __dir__() -> list:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__


def forwarded_names(
    old: str, modules: Sequence[ModuleType], renamed: Mapping[str, str] | None = None
) -> Callable[[str], object]:
    """`__getattr__` for a deprecated module `old` whose names moved: each is looked up, under its new name
    where `renamed` gives one, in `modules` in order. The module's own dunders are not forwarded."""

    def __getattr__(name: str) -> object:
        if not name.startswith("__"):
            new_name = (renamed or {}).get(name, name)
            for module in modules:
                if hasattr(module, new_name):
                    return getattr(module, new_name)
        raise AttributeError(f"module {old!r} has no attribute {name!r}")

    return __getattr__
