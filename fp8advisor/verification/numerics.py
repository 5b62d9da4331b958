"""The numerics check of `verify`: each converted layer runs alone, float8 against its bf16 twin (same
weights), on the very input and output gradient it saw in the bf16 model: SQNR in dB of its output and of its
input gradient. Alone, so that the figure is the layer's own error, not the error piled up by the layers
before it.

`SQNR_THRESHOLD_DB` = 15 dB. e4m3 keeps 3 mantissa bits (e5m2, used for gradients by tensorwise, 2), so a
correct dynamically scaled float8 linear measures a few tens of dB, not more. Measured by this project's tests
on the CPU (emulated, all three recipes,
`tests/test_verify.py::test_sqnr_of_correct_layers_clears_threshold_by_margin`): output about 28 to 29 dB;
input gradient about 29 dB with the rowwise recipes and 24 to 25 dB with tensorwise (e5m2 gradients). A layer
whose weight cast is broken on purpose (only the signs kept, `test_layer_losing_precision_is_flagged`)
measures about 6 dB. 15 dB sits about 9 dB (an error amplitude ~3x larger) under the lowest correct figure, so
that the activation outliers of a real model do not raise false alarms, and far above a broken cast.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

from fp8advisor.inspect.folding import block_shape
from fp8advisor.recipes import sqnr_db

if TYPE_CHECKING:
    from fp8advisor.verification.execution import Step

#: A layer whose float8 output or input-gradient SQNR is below this is flagged (see the module docstring).
SQNR_THRESHOLD_DB = 15.0


def layer_sqnr(
    bf16_layer: nn.Module, float8_layer: nn.Module, x: torch.Tensor, grad_output: torch.Tensor | None
) -> tuple[float, float | None]:
    """(output SQNR, input-gradient SQNR) of `float8_layer` against `bf16_layer`, same input and gradient."""
    results = []
    for layer in (bf16_layer, float8_layer):
        x_leaf = x.detach().clone().requires_grad_(True)
        output = layer(x_leaf)
        grad_input = None
        if grad_output is not None:
            output.backward(grad_output)
            grad_input = x_leaf.grad
        results.append((output.detach(), grad_input))
    (reference, reference_grad), (output, grad) = results
    grad_sqnr = sqnr_db(reference_grad, grad) if reference_grad is not None and grad is not None else None
    return sqnr_db(reference, output), grad_sqnr


def converted_layer_sqnr(
    step: Step, linear_layers: Sequence, converted: set[str]
) -> dict[str, tuple[float, float | None]]:
    """(output SQNR, input-gradient SQNR) of each converted layer that ran, alone, against its bf16 twin on
    the input and output gradient it saw in the bf16 model. A shadow measures one layer per repeated group."""
    bf16_modules = dict(step.bf16_model.named_modules())
    float8_modules = dict(step.float8_model.named_modules())
    sqnr: dict[str, tuple[float, float | None]] = {}
    measured_groups: set[tuple] = set()
    for fqn in [layer.fqn for layer in linear_layers if layer.fqn in converted]:
        if step.execution.mode == "shadow":
            # The shadow's layers of one repeated group are the same torchao code on random weights of the
            # same shape: one of them measures what all would (and keeps an 80-layer model's check short).
            group = (block_shape(fqn), bf16_modules[fqn].in_features, bf16_modules[fqn].out_features)
            if group in measured_groups:
                continue
            measured_groups.add(group)
        if fqn in step.capture.inputs:
            sqnr[fqn] = layer_sqnr(
                bf16_modules[fqn],
                float8_modules[fqn],
                step.capture.inputs[fqn],
                step.capture.grad_outputs.get(fqn),
            )
    return sqnr


__all__ = ["SQNR_THRESHOLD_DB", "converted_layer_sqnr", "layer_sqnr"]
