"""Converting a model as a config says: torchao's own `convert_to_float8_training` with the config's recipe
and the framework's exact module filter (`FrameworkConfig.filter_for`), or for an MXFP8 recipe torchao's
`quantize_` with `MXFP8TrainingOpConfig` (`recipes.convert_linears`); the layers that became
`Float8Linear`, or whose weight became torchao's MXFP8 training tensor, are what the framework converts.

`verify` converts the model built on the meta device (no memory), so that the check is exact for a model of
any size; the model it runs (built for real, or its shadow: `fp8advisor.verification.shadow`) is converted
the same way. Grouped MoE experts are converted by `fp8advisor.verification.experts`.
"""

from __future__ import annotations

from torch import nn

from fp8advisor import compat
from fp8advisor.frameworks.config_record import FrameworkConfig
from fp8advisor.recipes import Recipe, convert_linears, float8_config, is_converted


def converted_fqns(model: nn.Module) -> set[str]:
    """FQNs of the converted Linear layers in `model` (each once, under its first name, as torchao swaps):
    Float8Linear modules, and nn.Linear whose weight is torchao's MXFP8 training tensor
    (`recipes.is_converted`) or that are torchao's MXFP8Linear module (torchtitan 0.3's MX converter builds
    its subclass)."""
    mx_linear = compat.mx_linear_class()  # not an nn.Linear with a wrapped weight: a module of its own
    return {
        fqn
        for fqn, module in model.named_modules()
        if isinstance(module, mx_linear) or (isinstance(module, nn.Linear) and is_converted(module))
    }


def convert(
    model: nn.Module,
    config: FrameworkConfig,
    recipe: Recipe,
    *,
    emulate: bool,
    decide_on: nn.Module | None = None,
) -> set[str]:
    """Convert `model` in place as the framework would; return the converted FQNs.

    `decide_on`: a model with the real shapes (the meta model) whose filter answers are replayed on `model` (a
    shadow whose shapes are reduced), so that divisibility and size rules see the real K and N.
    """
    from torchao.float8 import convert_to_float8_training

    if decide_on is None:
        module_filter = config.filter_for(model)
    else:
        real = dict(decide_on.named_modules())
        real_filter = config.filter_for(decide_on)

        def module_filter(module: nn.Module, fqn: str) -> bool:
            return fqn in real and real_filter(real[fqn], fqn)

    if not config.enabled:
        return set()
    if recipe.is_mx:  # torchao's quantize_ with MXFP8TrainingOpConfig (emulated kernels on the CPU)
        convert_linears(model, recipe, module_filter, emulate=emulate)
        return converted_fqns(model)
    convert_to_float8_training(
        model, config=float8_config(recipe, emulate=emulate), module_filter_fn=module_filter
    )
    return converted_fqns(model)


__all__ = ["convert", "converted_fqns"]
