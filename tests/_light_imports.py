"""Run by tests/test_hub.py in a fresh interpreter: what building from a Hugging Face config (argv[1]: a path
or a Hub id) imports, and `compat.dynamo_deferred` on its own. Prints one JSON line."""

from __future__ import annotations

import json
import sys

import torch

from fp8advisor import compat
from fp8advisor.inspect.target import load_model

HEAVY = ("torch._dynamo", "torchao", "scipy", "torch.distributed.tensor")
found: dict = {}

loaded = load_model(sys.argv[1], "meta")
found["after_build"] = {name: name in sys.modules for name in HEAVY}
found["built_by"] = loaded.built_by
found["linears"] = sum(isinstance(module, torch.nn.Linear) for module in loaded.model.modules())

# Decorated while torch._dynamo stands in: nothing imported until a decorated function is first called.
with compat.dynamo_deferred():

    @torch.compiler.disable
    def double(x):
        return 2 * x

    @torch.compiler.disable(recursive=False)
    def triple(x):
        return 3 * x

    @torch._dynamo.assume_constant_result
    def seven():
        return 7

    from torch._dynamo._trace_wrapped_higher_order_op import TransformGetItemToIndex

found["after_decorating"] = {
    "dynamo_imported": "torch._dynamo" in sys.modules,
    "torch_attribute": "_dynamo" in vars(torch),
}

# A submodule asked for under the stand-in: the real package answers.
with compat.dynamo_deferred():
    import torch._dynamo.config as config
found["submodule"] = {
    "real": config is sys.modules["torch._dynamo.config"] and config.__file__.endswith("config.py"),
    "stand_in_gone": hasattr(sys.modules["torch._dynamo"], "reset"),
}

import torch._dynamo._trace_wrapped_higher_order_op as real_module  # noqa: E402

found["first_calls"] = {
    "disable": double(2),
    "disable_with_arguments": triple(2),
    "assume_constant_result": seven(),
    "marked_constant": getattr(seven.__wrapped__, "_dynamo_marked_constant", False),
    "mode_is_real": type(TransformGetItemToIndex()) is real_module.TransformGetItemToIndex,
}
print(json.dumps(found))
