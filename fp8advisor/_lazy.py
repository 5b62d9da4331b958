"""Names a package re-exports from its modules, imported on first use (PEP 562).

`import fp8advisor` and a stage package's `__init__` must stay cheap: `suggest` starts in a few seconds
because scipy, torchao and transformers are imported only by the code that needs them. A package lists its
public names in `_EXPORTS` (name -> the module that defines it) and sets

    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

so that `fp8advisor.advise` or `from fp8advisor.inspect import inspect_model` imports its module then, once.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


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
