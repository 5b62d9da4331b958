"""A model's Linear layers against a trace's GEMMs: did each run in float8 where the config says, and
only there.

Each Linear of (M, K, N) runs three GEMMs a step whose sizes are {M, K, N} in some order (`gemms.ShapeGroup`):
forward (M, K, N), input gradient (M, N, K), weight gradient. Where the trace tells forward from backward (a
GEMM launched outside every autograd engine call is a forward one), each layer is judged by its own
forward GEMMs: those of exactly its (M, K, N), matched to the layers of that shape in module order (the k-th
such GEMM of a step to the k-th layer, cyclically: gradient accumulation repeats the forward; the backward is
left out because a layer of (M, N, K) has an input gradient of the same shape). The group's backward GEMMs are
then checked as a whole where all its layers train alike: all float8 (the weight gradients bf16 where the
recipe keeps them so: `ModelLinear.bf16_weight_gradient`) or none. A trace that does not tell forward from
backward is judged group by group: the group's float8 share against the config's. M is the tokens one GPU
multiplies: give the batch and seq the trace was recorded at; when no layer's group is in the trace,
`tokens_in_trace` says which M the trace's GEMMs fit.

Routed experts held as 3-D weights are checked the same way, one entry per weight (`w1`, `w2`, `w3`): its
three grouped GEMMs (forward 2-D x 3-D, input gradient 2-D x 3-D, weight gradient 2-D x 2-D split by the
offsets) share the sizes {M_total, K, N} in E groups (the local experts under expert parallelism), or, run
through `bmm`, {rows per expert, K, N} in a batch of E (`expert_gemm_in_trace`). Experts held as E nn.Linear
(`ExpertList`) multiply the rows routed to each, which no model knows: each of their GEMMs is judged as one
unit over the trace's GEMMs of its (K, N) at fewer rows than the dense layers' tokens.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from fp8advisor.errors import TraceError
from fp8advisor.traces.analysis import Gemm, TraceAnalysis, step_gemms
from fp8advisor.traces.events import SHAPES_HOW
from fp8advisor.traces.gemms import GemmShape, ShapeGroup
from fp8advisor.traces.kernel_rules import Kind


@dataclass(frozen=True)
class ModelLinear:
    """One Linear of the model as the check needs it: name, shape, and whether the config converts it; or
    one 3-D expert weight (`groups` = E, M = all the rows its grouped GEMM multiplies)."""

    fqn: str
    M: int
    K: int
    N: int
    float8: bool
    groups: int = 1
    #: converted, its weight-gradient GEMM stays bf16 (rowwise_with_gw_hp, mxfp8_rceil_wgrad_with_hp)
    bf16_weight_gradient: bool = False
    batch: int = 1  # experts run through bmm: the batch of experts

    @property
    def group(self) -> ShapeGroup:
        return ShapeGroup.of_layer(self.M, self.K, self.N, self.batch, self.groups)

    @property
    def forward_shape(self) -> GemmShape:
        return GemmShape(self.M, self.K, self.N, self.batch, self.groups)


@dataclass(frozen=True)
class ExpertList:
    """One GEMM of a group of routed experts held as E nn.Linear (`w1` of every expert): judged as one unit,
    each expert multiplying the rows routed to it (fewer than `tokens`, the dense layers' M)."""

    fqn: str  # "layers.0.moe.experts.*.w1"
    K: int
    N: int
    tokens: int
    float8: bool | None  # None: the config converts some of its experts only
    converted: int  # how many of its E experts the config converts
    experts: int
    bf16_weight_gradient: bool = False


@dataclass(frozen=True)
class LayerRun:
    """What the trace shows one layer ran, against what the config says."""

    fqn: str
    shape: tuple[int, int, int]
    groups: int  # 1 for a Linear; E for a 3-D expert weight
    expected_float8: bool
    float8_gemms: int  # in its group, per step, over every rank
    bf16_gemms: int
    how: str  # "group" (all alike) or "order" (mixed group, matched by order) or "absent"
    ran: str  # what its GEMMs ran in: "float8", "bf16", "mixed" or "absent"
    ok: bool
    detail: str


def check_layers(
    linears: Sequence[ModelLinear], analyses: Sequence[TraceAnalysis], lists: Sequence[ExpertList] = ()
) -> list[LayerRun]:
    """Every layer's run (module docstring), the expert lists' after the layers. TraceError (exit 2) when the
    GEMMs have no shapes or no layer's group is in the trace."""
    gemms = step_gemms(analyses)
    if gemms and all(gemm.shape is None for _, gemm in gemms):
        raise TraceError(
            "the trace has no input shapes: its GEMMs cannot be matched to layers", hint=SHAPES_HOW
        )
    steps = max(1, sum(len(analysis.steps) for analysis in analyses))
    by_group: dict[ShapeGroup, list[tuple[int | None, Gemm]]] = defaultdict(list)
    for number, gemm in gemms:
        if gemm.shape is not None:
            by_group[gemm.shape.group].append((number, gemm))
    layers_by_group: dict[ShapeGroup, list[ModelLinear]] = defaultdict(list)
    for linear in linears:
        layers_by_group[linear.group].append(linear)
    if linears and not any(group in by_group for group in layers_by_group):
        raise TraceError(
            "none of the model's Linear shapes is among the trace's GEMMs",
            hint=_tokens_hint(linears, gemms),
        )
    runs: list[LayerRun] = []
    for group, layers in layers_by_group.items():
        found = by_group.get(group, [])
        runs.extend(_group_runs(layers, found, steps))
    order = {linear.fqn: index for index, linear in enumerate(linears)}
    runs.sort(key=lambda run: order[run.fqn])
    return runs + [_list_run(entry, gemms, steps) for entry in lists]


def _list_run(entry: ExpertList, gemms: Sequence[tuple[int | None, Gemm]], steps: int) -> LayerRun:
    """An expert list's run: its GEMMs are the trace's dense GEMMs of its (K, N) at fewer rows than the dense
    layers' tokens; judged by their forward GEMMs where the trace tells them (all float8, or none), else by
    all of them (float8 but for the weight gradients a recipe keeps in bf16, or none)."""
    found = [
        gemm
        for _, gemm in gemms
        if gemm.shape is not None
        and (gemm.shape.batch, gemm.shape.groups) == (1, 1)
        and (M := _third_size(gemm.shape.group.sizes, entry.K, entry.N)) is not None
        and M < entry.tokens
    ]
    by_forward = any(gemm.forward is not None for gemm in found)
    judged = (
        [gemm for gemm in found if gemm.forward and (gemm.shape.K, gemm.shape.N) == (entry.K, entry.N)]
        if by_forward
        else found
    )
    float8 = sum(gemm.kind.is_float8_gemm for gemm in judged)
    kept = 0 if by_forward or not entry.bf16_weight_gradient else len(judged) // 3
    if entry.float8 is None:
        ok = 0 < float8 < len(judged)
    else:
        ok = bool(judged) and float8 == (len(judged) - kept if entry.float8 else 0)
    which = "forward GEMMs" if by_forward else "GEMMs"
    detail = (
        f"its {which} (each expert at its routed rows) ran {float8} of {len(judged)} in float8; "
        f"{entry.converted} of its {entry.experts} experts float8 in the config"
        if judged
        else f"no GEMM of its (K, N) at fewer rows than the {entry.tokens} tokens"
    )
    total = sum(gemm.kind.is_float8_gemm for gemm in found)
    per_step = (round(total / steps), round((len(found) - total) / steps))
    layer = ModelLinear(entry.fqn, 0, entry.K, entry.N, bool(entry.float8))
    ran = _ran(float8, len(judged) - float8) if judged else "absent"
    return _run(layer, per_step, "experts", ran, ok, detail)


def _group_runs(
    layers: list[ModelLinear], found: list[tuple[int | None, Gemm]], steps: int
) -> list[LayerRun]:
    """The runs of one shape group's layers: by each layer's own forward GEMMs where the trace tells forward
    from backward, with the group's backward GEMMs checked as a whole; by the group's counts otherwise."""
    float8 = sum(gemm.kind.is_float8_gemm for _, gemm in found)
    bf16 = len(found) - float8
    per_step = (round(float8 / steps), round(bf16 / steps))
    if not found:
        return [
            _run(layer, (0, 0), "absent", "absent", False, "no GEMM of its shapes in the trace")
            for layer in layers
        ]
    if any(gemm.forward is not None for _, gemm in found):
        forward = _forward_order(layers, found)
        wrong = {
            layer.fqn for layer in layers if any(kind != layer.float8 for kind in forward.get(layer.fqn, ()))
        }
        backward_gemms = [gemm for _, gemm in found if gemm.forward is False]
        forwards = sum(gemm.forward is True for _, gemm in found)
        # a backward off the config's is the wrong forwards' own, when there are any
        backward = None if wrong else _backward_problem(layers, backward_gemms, forwards)
        runs = []
        for layer in layers:
            seen = forward.get(layer.fqn)
            if seen is None:
                runs.append(_run(layer, per_step, "order", "absent", False, "no forward GEMM of its shape"))
                continue
            ok = layer.fqn not in wrong and backward is None
            detail = f"its forward GEMMs ran {_kinds(seen)}" + (f"; {backward}" if backward else "")
            runs.append(_run(layer, per_step, "order", _ran(sum(seen), len(seen) - sum(seen)), ok, detail))
        return runs
    # No forward / backward in the trace: the group's float8 share against the config's.
    per_layer = 2 if any(layer.bf16_weight_gradient for layer in layers) else 3
    expected = sum(layer.float8 for layer in layers) * per_layer / (3 * len(layers))
    ok = abs(float8 / len(found) - expected) <= 0.5 / (3 * len(layers))
    detail = (
        f"{len(layers)} layer(s) of its shapes, {sum(layer.float8 for layer in layers)} float8 in the "
        f"config; the trace: {float8} float8, {bf16} bf16 GEMM(s)"
    )
    return [_run(layer, per_step, "group", _ran(float8, bf16), ok, detail) for layer in layers]


def _backward_problem(layers: list[ModelLinear], backward: list[Gemm], forwards: int) -> str | None:
    """What is wrong with a group's backward GEMMs as a whole, or None: none in float8 when no layer of the
    group converts; all in float8 when every layer does, but for one bf16 weight gradient per forward GEMM
    with a recipe that keeps them so (the backward also holds any recomputed forward: activation
    checkpointing). A mixed group's backward is not told apart by layer: None."""
    wanted = {layer.float8 for layer in layers}
    if not backward or len(wanted) > 1:
        return None
    float8 = sum(gemm.kind.is_float8_gemm for gemm in backward)
    if wanted == {False}:
        return None if float8 == 0 else f"{float8} of the group's backward GEMMs ran in float8"
    bf16_weight_gradient = any(layer.bf16_weight_gradient for layer in layers)
    expected = len(backward) - forwards if bf16_weight_gradient else len(backward)
    if float8 == expected:
        return None
    return f"{float8} of the group's {len(backward)} backward GEMMs ran in float8 (config: {expected})"


def _forward_order(layers: list[ModelLinear], found: list[tuple[int | None, Gemm]]) -> dict[str, list[bool]]:
    """Per layer of a mixed group, the float8-ness of the forward GEMMs of its exact (M, K, N) assigned to it
    in order, step by step."""
    seen: dict[str, list[bool]] = defaultdict(list)
    shapes: dict[GemmShape, list[ModelLinear]] = defaultdict(list)
    for layer in layers:
        shapes[layer.forward_shape].append(layer)
    for shape, same in shapes.items():
        count: Counter = Counter()
        for number, gemm in found:
            if gemm.shape == shape and gemm.forward is not False:
                index = count[number] % len(same)
                count[number] += 1
                seen[same[index].fqn].append(gemm.kind.is_float8_gemm)
    return seen


def _kinds(seen: list[bool]) -> str:
    floats = sum(seen)
    if floats == len(seen):
        return "in float8"
    return "in bf16" if floats == 0 else f"{floats} of {len(seen)} in float8"


def _ran(float8: int, bf16: int) -> str:
    return "mixed" if float8 and bf16 else ("float8" if float8 else "bf16")


def _run(
    layer: ModelLinear, per_step: tuple[int, int], how: str, ran: str, ok: bool, detail: str
) -> LayerRun:
    return LayerRun(
        layer.fqn,
        (layer.M, layer.K, layer.N),
        layer.groups,
        layer.float8,
        per_step[0],
        per_step[1],
        how,
        ran,
        ok,
        detail,
    )


def tokens_in_trace(linears: Sequence[ModelLinear], gemms: Sequence[tuple[int | None, Gemm]]) -> int | None:
    """The M at which the most of the model's Linear (K, N) pairs meet a GEMM of the trace, or None (grouped
    GEMMs and expert weights, whose M is the routed rows, left out)."""
    groups = {gemm.shape.group.sizes for _, gemm in gemms if gemm.shape and gemm.shape.groups == 1}
    votes: Counter = Counter()
    for K, N in {(linear.K, linear.N) for linear in linears if linear.groups == 1}:
        votes.update(M for sizes in groups if (M := _third_size(sizes, K, N)) is not None)
    return votes.most_common(1)[0][0] if votes else None


def _tokens_hint(linears: Sequence[ModelLinear], gemms) -> str:
    tokens = tokens_in_trace(linears, gemms)
    if tokens is None:
        return "is it a trace of this model? Its GEMMs share no (K, N) with the model's Linear layers"
    return (
        f"the trace's GEMMs fit this model at M = {tokens} tokens per GPU: give the --batch and --seq it was "
        f"recorded at (batch x seq = {tokens})"
    )


def expert_gemm_in_trace(
    gemms: Sequence[tuple[int | None, Gemm]], K: int, N: int, experts: int
) -> tuple[int, int, int] | None:
    """(M, batch, groups) of the trace's GEMMs of (K, N) over some of `experts` experts (the most common), or
    None: a grouped GEMM in a number of groups that divides E (all the experts, or the local ones under
    expert parallelism), M its routed rows (tokens x top_k, and any padding the framework adds); or a bmm in
    a batch that divides E, M the rows per expert."""
    votes: Counter = Counter()
    for _, gemm in gemms:
        shape = gemm.shape
        if shape is None or (M := _third_size(shape.group.sizes, K, N)) is None:
            continue
        if (shape.groups > 1 or gemm.kind in _GROUPED) and experts % shape.groups == 0:
            votes[(M, 1, shape.groups)] += 1
        elif shape.batch > 1 and experts % shape.batch == 0:
            votes[(M, shape.batch, 1)] += 1
    return votes.most_common(1)[0][0] if votes else None


_GROUPED = frozenset({Kind.GROUPED_GEMM, Kind.FLOAT8_GROUPED_GEMM})


def _third_size(sizes: tuple[int, int, int], K: int, N: int) -> int | None:
    """The size of a GEMM's three that is neither K nor N (its M), or None when K and N are not among them."""
    rest = list(sizes)
    for size in (K, N):
        if size not in rest:
            return None
        rest.remove(size)
    return rest[0]


__all__ = ["ExpertList", "LayerRun", "ModelLinear", "check_layers", "expert_gemm_in_trace", "tokens_in_trace"]
