"""Deprecated: moved to `fp8advisor.inspect.layers`. Kept for one release."""

import warnings

from fp8advisor.inspect import layers as _layers

warnings.warn(
    "fp8advisor.layers moved to fp8advisor.inspect.layers; this name goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str):
    return getattr(_layers, name)
