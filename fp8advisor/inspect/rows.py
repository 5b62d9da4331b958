"""From one traced forward to the layer rows: a `GemmLayer` for every nn.Linear, and for every bare parameter
a GEMM multiplied, in module order.

A Linear's M per call is the rows of the GEMMs on its weight while it ran (or of its input, when no mm/addmm
on its weight ran inside it). Its status: traced; assumed (M = batch x seq) when tracing stopped before it
ran; not called; or not convertible, with the reason: a subclass that overrides nn.Linear.forward (conversion
would drop it), one module under two names (torchao swaps it under the first only), or K, N or M not a
multiple of 16 (torch._scaled_mm and float8's grad_weight GEMM). A bare parameter (3-D routed expert weights,
a weight multiplied without its Linear) is never converted by Float8Linear conversion.

`at_rows` moves a layer to other rows per call (the step model's break-even tries other token counts): a
Linear kept out only because its M was not a multiple of 16 is judged again at the new M, and the reverse.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from fp8advisor.inspect.records import GemmLayer, LayerStatus
from fp8advisor.recipes import dims_divisible_by_16

if TYPE_CHECKING:
    from fp8advisor.inspect.forward import TracedForward
    from fp8advisor.inspect.recorder import GemmCall


# torch._scaled_mm needs K, N and (in the grad_weight GEMM, whose inner dimension is M) M divisible by 16.
_M_DIVISOR = 16


@dataclass
class Trace:
    """What one traced forward saw, keyed by id(module) / id(parameter)."""

    owners: dict  # id(parameter) -> [(module fqn, module, parameter name)]
    per_linear: dict  # id(Linear) -> M of each GEMM on its weight while it ran
    outside_linear: dict  # id(Linear) -> M of each GEMM on its weight while it did not run
    module_calls: dict  # id(Linear) -> number of forward calls
    module_rows: dict  # id(Linear) -> input rows of each call
    torchao_names: dict  # id(module) -> FQNs torchao's conversion visits
    all_names: dict  # id(module) -> every FQN it is registered under
    stopped: tuple | None  # (what, where) when tracing stopped part-way
    assumed_M: int  # batch x seq


def _torchao_names(model) -> dict[int, list[str]]:
    """id(module) -> the FQNs under which torchao's conversion visits it (named_children, per parent)."""
    visited: dict[int, list[str]] = {}

    def walk(module, prefix: str, depth: int) -> None:
        if depth > 200:
            return  # a module that contains itself
        for name, child in module.named_children():
            fqn = f"{prefix}.{name}" if prefix else name
            visited.setdefault(id(child), []).append(fqn)
            walk(child, fqn, depth + 1)

    walk(model, "", 0)
    return visited


def _all_names(model) -> dict[int, list[str]]:
    names: dict[int, list[str]] = {}
    for fqn, module in model.named_modules(remove_duplicate=False):
        if fqn:
            names.setdefault(id(module), [])
            if fqn not in names[id(module)]:
                names[id(module)].append(fqn)
    return names


def build_layers(
    model, modules, owners: dict, traced: TracedForward, assumed_M: int
) -> tuple[list[GemmLayer], Trace]:
    """Every GEMM-bearing layer in module order, and the trace they were read from.

    `owners`: id(parameter) -> [(module fqn, module, parameter name)]; `assumed_M`: batch x seq, the M of a
    layer tracing stopped before."""
    from torch import nn

    torchao_names = _torchao_names(model)
    all_names = _all_names(model)
    per_linear: dict[int, list[int]] = {}  # id(module) -> M of each GEMM run inside its forward on its weight
    # id(module) -> M of GEMMs on its weight while it was not running
    outside_linear: dict[int, list[int]] = {}
    per_parameter: dict[tuple[int, str], list[GemmCall]] = {}  # bare parameters: (id(module), name) -> calls
    for call in traced.calls:
        entries = owners.get(id(call.parameter), [])
        linear_owners = [e for e in entries if isinstance(e[1], nn.Linear) and e[2] == "weight"]
        running = [e for e in linear_owners if e[1] is call.inside]
        if running:
            per_linear.setdefault(id(running[0][1]), []).append(call.M)
        elif linear_owners:
            outside_linear.setdefault(id(linear_owners[0][1]), []).append(call.M)
        elif entries:
            fqn, module, name = entries[0]
            per_parameter.setdefault((id(module), name), []).append(call)

    trace = Trace(
        owners=owners,
        per_linear=per_linear,
        outside_linear=outside_linear,
        module_calls=traced.module_calls,
        module_rows=traced.module_rows,
        torchao_names=torchao_names,
        all_names=all_names,
        stopped=traced.stopped,
        assumed_M=assumed_M,
    )
    layers: list[GemmLayer] = []
    for fqn, module in modules:
        if isinstance(module, nn.Linear):
            layers.append(linear_layer(fqn, module, trace))
        for name, _ in module.named_parameters(recurse=False, remove_duplicate=False):
            found = per_parameter.get((id(module), name))
            if found:
                layers.append(_parameter_layer(fqn, module, name, found, owners))
    return layers, trace


def _tied_to(parameter, module, owners) -> str | None:
    others = [fqn for fqn, owner, _ in owners.get(id(parameter), []) if owner is not module]
    return others[0] if others else None


def _divisibility_reason(K: int, N: int, Ms) -> str | None:
    for label, value in (("K", K), ("N", N)):
        if value % _M_DIVISOR:
            return f"{label} = {value} is not a multiple of 16 (torch._scaled_mm)"
    bad = sorted({m for m in Ms if m % _M_DIVISOR})
    if bad:
        return f"M = {bad[0]} is not a multiple of 16 (grad_weight GEMM; pad_inner_dim=True pads it)"
    return None


def at_rows(layer: GemmLayer, rows: Sequence[int]) -> GemmLayer:
    """`layer` with `rows` rows per call, its M judged again (the module docstring): a Linear that float8
    could swap but for its M becomes convertible where every new M is a multiple of 16, and a convertible
    one becomes not convertible where one is not. Other layers keep their status."""
    moved = replace(layer, M_per_call=tuple(rows))
    if not layer.is_linear or not dims_divisible_by_16(layer.K, layer.N):
        return moved
    status, reason = layer.status, layer.reason
    old = _divisibility_reason(layer.K, layer.N, layer.M_per_call)
    if status is LayerStatus.NOT_CONVERTIBLE and old is not None and (reason or "").startswith(old):
        # kept out by its M alone (a structural problem would be the reason instead): as it was before
        rest = (reason or "")[len(old) :].removeprefix("; ")
        status, reason = (LayerStatus.ASSUMED, rest) if rest else (LayerStatus.TRACED, None)
    if status in (LayerStatus.TRACED, LayerStatus.ASSUMED):
        problem = _divisibility_reason(layer.K, layer.N, moved.M_per_call)
        if problem is not None:
            reason = f"{problem}; {reason}" if status is LayerStatus.ASSUMED else problem
            status = LayerStatus.NOT_CONVERTIBLE
    return replace(moved, status=status, reason=reason)


def stopped_before(trace: Trace) -> str:
    """Why an assumed layer has no traced M, in its reason's words."""
    return f"tracing stopped at {trace.stopped[1] or 'an unknown place'} before it ran"


def linear_layer(fqn: str, module, trace: Trace, assumed: tuple[int, str] | None = None) -> GemmLayer:
    """The GemmLayer of one nn.Linear. `assumed`: (M, reason) for a layer tracing stopped before, in place of
    batch x seq (routed experts: M per expert under balanced routing)."""
    from torch import nn

    K, N = module.in_features, module.out_features
    cls = type(module).__name__
    names = trace.all_names.get(id(module), [fqn])
    aliases = tuple(n for n in names if n != fqn)
    tied_to = _tied_to(module.weight, module, trace.owners)
    Ms = tuple(trace.per_linear.get(id(module), ()))
    called = trace.module_calls.get(id(module), 0)
    if called and not Ms:
        # Called, but no mm/addmm on its weight (a 1-D input, or a subclass that skips it): its input rows.
        Ms = tuple(trace.module_rows.get(id(module), ()))
    status, reason = LayerStatus.TRACED, None
    if not called:
        if trace.stopped is not None:
            M, reason = assumed or (trace.assumed_M, f"M assumed: {stopped_before(trace)}")
            status, Ms = LayerStatus.ASSUMED, (M,)
        else:
            status = LayerStatus.NOT_CALLED
            outside = trace.outside_linear.get(id(module))
            used = f"; its weight is used directly (M {max(outside)})" if outside else ""
            reason = f"the forward never calls it{used}: converting it changes nothing"
    structural = None
    if type(module).forward is not nn.Linear.forward:
        structural = f"{cls} overrides nn.Linear.forward: conversion would silently drop that forward"
    else:
        swapped = trace.torchao_names.get(id(module), [])
        skipped = [n for n in names if n not in swapped]
        if skipped:
            kept = swapped[0] if swapped else fqn
            structural = (
                f"one module under two names ({', '.join(names)}): torchao swaps only {kept}; "
                f"calls through {', '.join(skipped)} stay bf16"
            )
    if status is not LayerStatus.NOT_CALLED:
        problem = structural or _divisibility_reason(K, N, Ms)
        if problem is not None:
            if status is LayerStatus.ASSUMED:
                problem = f"{problem}; {reason}"
            status, reason = LayerStatus.NOT_CONVERTIBLE, problem
    return GemmLayer(
        fqn=fqn,
        cls=cls,
        K=K,
        N=N,
        M_per_call=Ms,
        status=status,
        reason=reason,
        is_linear=True,
        tied_to=tied_to,
        aliases=aliases,
    )


def _parameter_layer(module_fqn: str, module, name: str, found: list, owners: dict) -> GemmLayer:
    parameter = getattr(module, name)
    fqn = f"{module_fqn}.{name}" if module_fqn else name
    owner_cls = type(module).__name__
    first = found[0]
    if parameter.dim() >= 3:
        cls = owner_cls
        reason = (
            f"{parameter.dim()}-D expert weights in torch.{first.op}: routed experts, converted as a group "
            "(torchtitan's Float8GroupedExpertsConverter, torchao's moe_training), not by Float8Linear "
            "conversion; M: rows over all experts (see the routed experts section)"
        )
    else:
        cls = "Parameter"
        reason = f"bare parameter of {owner_cls} in aten.{first.op}, not nn.Linear: never converted"
    others = [
        f"{f}.{n}" if f else n for f, m, n in owners.get(id(parameter), []) if not (m is module and n == name)
    ]
    return GemmLayer(
        fqn=fqn,
        cls=cls,
        K=first.K,
        N=first.N,
        M_per_call=tuple(c.M for c in found),
        status=LayerStatus.NOT_CONVERTIBLE,
        reason=reason,
        is_linear=False,
        tied_to=others[0] if others else None,
    )
