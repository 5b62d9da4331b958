"""Deprecated: moved to `fp8advisor.inspect.target` (and `.spec`, `.sandbox`, `.inputs`); kept for one
release."""

import warnings

from fp8advisor.inspect import inputs as _inputs
from fp8advisor.inspect import sandbox as _sandbox
from fp8advisor.inspect import spec as _spec
from fp8advisor.inspect import target as _target

warnings.warn(
    "fp8advisor.target moved to fp8advisor.inspect.target; this name goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str):
    for module in (_target, _spec, _sandbox, _inputs):
        if hasattr(module, name):
            return getattr(module, name)
    raise AttributeError(f"module 'fp8advisor.target' has no attribute {name!r}")
