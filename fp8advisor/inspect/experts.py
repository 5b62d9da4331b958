"""Routed experts: the experts of each MoE layer, which float8 converts (or not) as one group.

Two forms: GROUPED, 3-D weights a grouped GEMM (torch._grouped_mm, _scaled_grouped_mm, bmm) multiplied; and
LINEAR_LIST, a ModuleList (or ModuleDict) of identical expert MLPs, each GEMM of the group E Linears. Beside
them: the router (the GEMM with N = E, never converted), the shared experts (Linears named "shared", decided
one by one) and top_k, read on the MoE module, its router or the model's config (`TOP_K_NAMES`). A list's
dispatch usually depends on the routing and stops the meta trace: its Linears get M = tokens x top_k / E, the
rows of each expert under balanced routing. `find_expert_groups` gives the `ExpertGroup` records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from fp8advisor.inspect.model_config import CONFIG_HOLDERS
from fp8advisor.inspect.records import ExpertForm, ExpertGemm, ExpertGroup, GemmLayer, LayerStatus
from fp8advisor.inspect.rows import Trace, linear_layer, stopped_before

#: Attribute names under which MoE code keeps the experts each token goes to, on the MoE module, its router
#: or the model's config: torchtitan (`router.top_k`), transformers (`num_experts_per_tok`, the router's
#: `top_k`), DeepSeek's reference code (`n_activated_experts`, `topk`), Megatron (`moe_router_topk`), others.
TOP_K_NAMES = (
    "top_k",
    "num_experts_per_tok",
    "topk",
    "n_activated_experts",
    "experts_per_token",
    "moe_top_k",
    "moe_router_topk",
    "router_top_k",
    "num_selected_experts",
)

#: An expert of a ModuleList holds a small MLP: at most this many Linear layers (a transformer block has
#: more), so a list of identical blocks is not taken for experts.
_MAX_EXPERT_LINEARS = 4

#: How far above the experts the router is looked for: torchtitan's `moe.router.gate` is two levels above
#: `moe.routed_experts.inner_experts`.
_ROUTER_LEVELS = 3

#: The start of a routed expert Linear's reason when its M is the balanced per-expert count.
BALANCED_REASON = "M assumed per expert under balanced routing"


@dataclass
class _ExpertCandidate:
    """A module holding routed experts, before its router, top_k and M are known."""

    fqn: str
    module: Any
    form: ExpertForm
    n_experts: int
    gemms: tuple[ExpertGemm, ...]

    @property
    def members(self) -> set[str]:
        return {fqn for gemm in self.gemms for fqn in gemm.fqns}


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix and name else prefix or name


def _parent(fqn: str) -> str:
    return fqn.rpartition(".")[0]


def _is_under(fqn: str, ancestor: str) -> bool:
    return not ancestor or fqn == ancestor or fqn.startswith(ancestor + ".")


def untraced_expert_weights(modules, layers: Sequence[GemmLayer]) -> list[str]:
    """FQNs of the >= 3-D parameters no traced GEMM multiplied (each parameter once, by its first name):
    routed experts' weights when tracing stopped before their grouped GEMMs ran (e.g. at a torch.nonzero in
    the router), which `_grouped_candidates` cannot see."""
    seen = {layer.fqn for layer in layers} | {alias for layer in layers for alias in layer.aliases}
    found, ids = [], set()
    for fqn, module in modules:
        for name, parameter in module.named_parameters(recurse=False):
            if parameter.dim() >= 3 and id(parameter) not in ids:
                ids.add(id(parameter))
                if _join(fqn, name) not in seen:
                    found.append(_join(fqn, name))
    return found


def _grouped_candidates(modules, layer_by_fqn: dict[str, GemmLayer]) -> list[_ExpertCandidate]:
    """Modules owning 3-D weights that a grouped GEMM (torch._grouped_mm, _scaled_grouped_mm, bmm) multiplied:
    E = the weights' first dimension; K, N per expert as the GEMM saw them."""
    found = []
    for fqn, module in modules:
        if not fqn:
            continue  # weights of the model itself: no module of experts to name (or for a converter to swap)
        weights = [
            (name, parameter)
            for name, parameter in module.named_parameters(recurse=False)
            if parameter.dim() >= 3 and _join(fqn, name) in layer_by_fqn
        ]
        if not weights:
            continue
        n_experts = int(weights[0][1].shape[0])
        gemms = tuple(
            ExpertGemm(name, layer.K, layer.N, (layer.fqn,))
            for name, parameter in weights
            if parameter.shape[0] == n_experts
            for layer in (layer_by_fqn[_join(fqn, name)],)
        )
        found.append(_ExpertCandidate(fqn, module, ExpertForm.GROUPED, n_experts, gemms))
    return found


def _expert_signature(expert) -> tuple:
    """What makes two experts the same: their class and the (name, in, out) of each Linear inside."""
    from torch import nn

    linears = tuple(
        (name, m.in_features, m.out_features)
        for name, m in expert.named_modules()
        if isinstance(m, nn.Linear)
    )
    return type(expert), linears


def _linear_list_candidates(modules, layer_by_fqn: dict[str, GemmLayer]) -> list[_ExpertCandidate]:
    """ModuleLists / ModuleDicts of >= 2 structurally identical modules of at most `_MAX_EXPERT_LINEARS`
    Linears each (an MLP each): routed experts if `_looks_routed` agrees."""
    from torch import nn

    found = []
    for fqn, module in modules:
        if not isinstance(module, (nn.ModuleList, nn.ModuleDict)) or "shared" in fqn.lower():
            continue
        children = list(module.named_children())
        if len(children) < 2:
            continue
        signatures = {_expert_signature(child) for _, child in children}
        if len(signatures) != 1:
            continue
        _, linears = signatures.pop()
        if not linears or len(linears) > _MAX_EXPERT_LINEARS:
            continue
        gemms = []
        for name, K, N in linears:
            fqns = tuple(_join(_join(fqn, child_name), name) for child_name, _ in children)
            if not all(member in layer_by_fqn for member in fqns):
                break  # an expert registered first under another name: not this list's to group
            gemms.append(ExpertGemm(name or "linear", K, N, fqns))
        else:
            found.append(_ExpertCandidate(fqn, module, ExpertForm.LINEAR_LIST, len(children), tuple(gemms)))
    return found


def _layers_under(layers: Sequence[GemmLayer]) -> dict[str, list[GemmLayer]]:
    """Each module FQN ("" the model) -> the layers inside it, in module order."""
    under: dict[str, list[GemmLayer]] = {}
    for layer in layers:
        fqn = layer.fqn
        while True:
            fqn = _parent(fqn)
            under.setdefault(fqn, []).append(layer)
            if not fqn:
                break
    return under


def _find_router(
    candidate: _ExpertCandidate, layers_under: dict, taken: set[str], groups: Sequence[str], levels: int
) -> tuple[GemmLayer | None, str]:
    """(the router's GEMM layer, the MoE module's FQN): the first layer with N = E and the experts' K in the
    experts' own module (3-D weights on the MoE module itself) or the nearest of `levels` ancestors, not past
    an ancestor holding another group of experts. Without one the MoE module is the experts' parent, or the
    experts' module itself when the parent holds other groups too."""
    Ks = {gemm.K for gemm in candidate.gemms}
    ancestor = candidate.fqn
    # The experts' own module first: 3-D expert weights may sit on the MoE module itself, router beside them.
    for step in range(levels + 1):
        if step:
            if not ancestor:
                break
            ancestor = _parent(ancestor)
        if any(other != candidate.fqn and _is_under(other, ancestor) for other in groups):
            break  # a whole block or the model: its other MoE layers' routers are not this one's
        for layer in layers_under.get(ancestor, ()):
            if layer.N == candidate.n_experts and layer.K in Ks and layer.fqn not in taken:
                return layer, ancestor
    parent = _parent(candidate.fqn)
    if any(other != candidate.fqn and _is_under(other, parent) for other in groups):
        return None, candidate.fqn  # the parent holds other MoE layers (a ModuleList of blocks): not this one
    return None, parent


def _looks_routed(candidate: _ExpertCandidate, router: GemmLayer | None) -> bool:
    """A ModuleList is routed experts when its name says experts (and not shared ones) or a router with
    N = its length sits beside it."""
    name = candidate.fqn.rpartition(".")[2].lower()
    return router is not None or ("expert" in name and "shared" not in candidate.fqn.lower())


def _valid_top_k(value, n_experts: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= n_experts


def _find_top_k(model, modules_by_fqn: dict, places: Sequence[str], n_experts: int) -> tuple[int | None, str]:
    """(top_k, where it was read): an attribute in `TOP_K_NAMES` on the modules at `places` (the MoE module,
    its router, the experts), else on the model's config; (None, why) when none shows it."""
    for place in dict.fromkeys(places):
        module = modules_by_fqn.get(place)
        for name in TOP_K_NAMES:
            value = getattr(module, name, None) if module is not None else None
            if _valid_top_k(value, n_experts):
                return value, _join(place, name) if place else name
    for holder in CONFIG_HOLDERS:
        config = getattr(model, holder, None)
        for name in TOP_K_NAMES:
            value = getattr(config, name, None) if config is not None else None
            if _valid_top_k(value, n_experts):
                return value, f"{holder}.{name}"
    return None, "unknown: no top_k (or num_experts_per_tok, ...) on the MoE module, its router or the config"


def _module_path(fqn: str, stop: str) -> list[str]:
    """`fqn` and its ancestors up to `stop` (included), innermost first."""
    path = [fqn]
    while fqn and fqn != stop and _is_under(fqn, stop):
        fqn = _parent(fqn)
        path.append(fqn)
    return path


def _balanced_M(tokens: int, top_k: int, n_experts: int) -> tuple[int, str]:
    """(M of each expert under balanced routing, how): tokens x top_k / E, rounded up to a whole row (the
    busiest expert of the most even split)."""
    rows = tokens * top_k
    M = -(-rows // n_experts)
    rounded = "" if rows % n_experts == 0 else f" = {rows / n_experts:.1f}, rounded up"
    return M, f"{tokens} x {top_k} / {n_experts}{rounded}"


def find_expert_groups(
    model, modules, layers: list[GemmLayer], trace: Trace
) -> tuple[list[ExpertGroup], list[GemmLayer]]:
    """The routed experts of every MoE layer, and `layers` with each member marked (`GemmLayer.expert_group`).

    Two forms: GROUPED, 3-D weights a grouped GEMM multiplied (their module is one group, E = the weights'
    first dimension, M total = the rows the GEMM multiplied); LINEAR_LIST, a ModuleList of identical expert
    MLPs (each GEMM of the group is E Linears). A ModuleList's dispatch usually depends on the routing
    (torch.where / nonzero), which stops the meta trace: its Linears, assumed M = batch x seq by default,
    get M = tokens x top_k / E, the rows of each expert under balanced routing. Routers (the GEMM with N = E
    next to the experts) and shared experts (Linears named "shared" in the MoE module) are never members.
    """
    layer_by_fqn = {layer.fqn: layer for layer in layers}
    modules_by_fqn = dict(modules)
    order = {fqn: index for index, (fqn, _) in enumerate(modules)}
    layers_under = _layers_under(layers)
    grouped = _grouped_candidates(modules, layer_by_fqn)
    listed = [  # a list of MoE blocks that hold grouped experts is not itself a list of experts
        candidate
        for candidate in _linear_list_candidates(modules, layer_by_fqn)
        if not any(_is_under(other.fqn, candidate.fqn) for other in grouped)
    ]
    members = {fqn for candidate in grouped + listed for fqn in candidate.members}
    everything = [c.fqn for c in grouped + listed]

    found: list[tuple[_ExpertCandidate, GemmLayer | None, str]] = []
    for candidate in grouped:
        router, moe = _find_router(candidate, layers_under, members, everything, _ROUTER_LEVELS)
        found.append((candidate, router, moe))
    for candidate in listed:
        if candidate.members & {fqn for c, _, _ in found for fqn in c.members}:
            continue  # nested inside a group already found
        router, moe = _find_router(candidate, layers_under, members, everything, 1)
        if _looks_routed(candidate, router):
            found.append((candidate, router, moe))
    found.sort(key=lambda item: order[item[0].fqn])

    groups: list[ExpertGroup] = []
    replaced: dict[str, GemmLayer] = {}
    for candidate, router, moe in found:
        group, updated = _expert_group(
            model, candidate, router, moe, layer_by_fqn, layers_under.get(moe, ()), modules_by_fqn, trace
        )
        groups.append(group)
        for layer in updated:
            replaced[layer.fqn] = layer
        for fqn in candidate.members:
            replaced[fqn] = replace(replaced.get(fqn, layer_by_fqn[fqn]), expert_group=candidate.fqn)
    return groups, [replaced.get(layer.fqn, layer) for layer in layers]


def _expert_group(
    model,
    candidate: _ExpertCandidate,
    router,
    moe: str,
    layer_by_fqn,
    in_moe: Sequence[GemmLayer],
    modules_by_fqn,
    trace: Trace,
) -> tuple[ExpertGroup, list[GemmLayer]]:
    """One group with its top_k, M and shared experts (`in_moe`: the layers inside the MoE module); the
    member layers whose M had to be re-assumed."""
    E = candidate.n_experts
    tokens = trace.assumed_M
    router_module = None
    if router is not None:
        router_module = router.fqn if router.is_linear else _parent(router.fqn)
    places = [moe]
    if router_module is not None:
        places += _module_path(router_module, moe)
    places += _module_path(candidate.fqn, moe)
    top_k, top_k_source = _find_top_k(model, modules_by_fqn, places, E)
    shared = tuple(
        layer.fqn
        for layer in in_moe
        if layer.is_linear
        and "shared" in layer.fqn[len(moe) :].lower()
        and layer.fqn not in candidate.members
        and (router is None or layer.fqn != router.fqn)
    )
    notes: list[str] = []
    if router is None:
        notes.append(f"no router found: no GEMM with N = E = {E} beside the experts")
    updated: list[GemmLayer] = []
    others: tuple[str, ...] = ()
    if candidate.form is ExpertForm.GROUPED:
        M_total, more = _grouped_M_total(candidate, layer_by_fqn, tokens, top_k)
        notes += more
        others = _other_parameters(candidate)
        if others:
            notes.append(
                f"{candidate.fqn} also holds {', '.join(others[:3])}{', ...' if len(others) > 3 else ''}: "
                "torchao's quantize_ would swap those too, so a file naming expert modules keeps this group "
                "bf16"
            )
    else:
        M_total, updated, more = _linear_list_M(candidate, layer_by_fqn, modules_by_fqn, trace, top_k)
        notes += more
    group = ExpertGroup(
        fqn=candidate.fqn,
        cls=type(candidate.module).__name__,
        form=candidate.form,
        n_experts=E,
        top_k=top_k,
        top_k_source=top_k_source,
        tokens=tokens,
        M_total=M_total,
        gemms=candidate.gemms,
        router=None if router is None else router.fqn,
        shared=shared,
        notes=tuple(notes),
        other_parameters=others,
    )
    return group, updated


def _other_parameters(candidate: _ExpertCandidate) -> tuple[str, ...]:
    """The parameters under a grouped candidate's module (recursively) that are not its 3-D expert weights."""
    members = candidate.members
    return tuple(
        fqn
        for name, _ in candidate.module.named_parameters()
        for fqn in (_join(candidate.fqn, name),)
        if fqn not in members
    )


def _grouped_M_total(candidate: _ExpertCandidate, layer_by_fqn, tokens: int, top_k) -> tuple[int, list[str]]:
    """Rows through each grouped GEMM (the traced A's rows; bmm (E, m, K): E x m), and what to say of them."""
    first = layer_by_fqn[candidate.gemms[0].fqns[0]]
    M_total = sum(first.M_per_call)
    notes = []
    if first.calls > 1:
        notes.append(f"each grouped GEMM ran {first.calls} times in the forward: M total counts every call")
    if top_k is None:
        notes.append(f"top_k unknown: M per expert = the traced rows / E = {M_total} / {candidate.n_experts}")
    elif M_total != tokens * top_k:
        notes.append(
            f"the grouped GEMMs multiplied {M_total} rows, not tokens x top_k = {tokens * top_k} "
            "(the model's dispatch pads, caps or drops rows)"
        )
    return M_total, notes


def _linear_list_M(
    candidate: _ExpertCandidate, layer_by_fqn, modules_by_fqn, trace: Trace, top_k
) -> tuple[int | None, list[GemmLayer], list[str]]:
    """M total of a ModuleList of experts, and its Linears re-assumed at the balanced M per expert.

    Traced (a static dispatch ran every expert): each Linear's traced M is already its expert's rows. Tracing
    stopped before them: M = tokens x top_k / E each (unknown top_k: they stay at batch x seq, M unknown).
    """
    E = candidate.n_experts
    tokens = trace.assumed_M
    first = candidate.gemms[0].fqns
    assumed = [
        fqn
        for fqn in candidate.members
        if layer_by_fqn[fqn].status is LayerStatus.ASSUMED
        or (trace.stopped is not None and not trace.module_calls.get(id(modules_by_fqn[fqn]), 0))
    ]
    if not assumed:
        M_total = sum(sum(layer_by_fqn[fqn].M_per_call) for fqn in first)
        return M_total, [], ["dispatch traced: each expert's M is the rows it multiplied"]
    if top_k is None:
        why = (
            f"M assumed: {stopped_before(trace)}; a routed expert whose top_k the model does not show: "
            "M per expert unknown, batch x seq overestimates it"
        )
        updated = [linear_layer(fqn, modules_by_fqn[fqn], trace, (tokens, why)) for fqn in sorted(assumed)]
        note = (
            "top_k unknown and the dispatch did not trace: M per expert unknown (members assumed batch x seq)"
        )
        return None, updated, [note]
    M, how = _balanced_M(tokens, top_k, E)
    why = (
        f"{BALANCED_REASON} (tokens x top_k / E = {how}): {stopped_before(trace)}; real counts "
        "vary per step, and float8's grad_weight GEMM needs each to be a multiple of 16 (pad_inner_dim=True "
        "pads it)"
    )
    updated = [linear_layer(fqn, modules_by_fqn[fqn], trace, (M, why)) for fqn in sorted(assumed)]
    return tokens * top_k, updated, [f"dispatch did not trace: M per expert = tokens x top_k / E = {how}"]
