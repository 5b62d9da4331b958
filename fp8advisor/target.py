"""Deprecated: moved to `fp8advisor.inspect.target` (and `.spec`, `.sandbox`, `.inputs`); kept for the 0.1
series, with a DeprecationWarning."""

import warnings

from fp8advisor._lazy import forwarded_names
from fp8advisor.inspect import inputs as _inputs
from fp8advisor.inspect import sandbox as _sandbox
from fp8advisor.inspect import spec as _spec
from fp8advisor.inspect import target as _target

warnings.warn(
    "fp8advisor.target moved to fp8advisor.inspect.target; this name goes after the 0.1 series",
    DeprecationWarning,
    stacklevel=2,
)


#: The old module's public names (what `from fp8advisor.target import *` gave).
__all__ = [
    "EXAMPLE_INPUTS_NAME",
    "ExampleInputs",
    "FACTORY_NAMES",
    "HF_CONFIG_NAME",
    "LoadedModel",
    "TargetSpec",
    "describe_error",
    "load_model",
    "make_example_inputs",
    "parse_target",
    "redirect_devices",
    "running_user_code",
    "user_location",
]


__getattr__ = forwarded_names("fp8advisor.target", (_target, _spec, _sandbox, _inputs))
