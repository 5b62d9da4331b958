"""The user's model as `trace` matches it against a trace: its Linear layers at the traced token count, its
routed experts held as 3-D weights (one entry per weight, at the rows and groups the trace's grouped GEMMs
have), its routed experts held as E nn.Linear (one unit per GEMM: `layer_match.ExpertList`), and which of them
a config converts (read as its framework reads it: `fp8advisor.frameworks.reader`; the experts converted on
the meta model as `verify` converts them, `frameworks.expert_conversion`).

The token count is the traced job's M (batch x seq on one GPU). When the user does not give it, it is read
off the trace: the M at which the model's (K, N) pairs meet the trace's GEMMs (`layer_match.tokens_in_trace`).
"""

from __future__ import annotations

from dataclasses import dataclass

from fp8advisor.errors import TraceError
from fp8advisor.traces.analysis import TraceAnalysis, step_gemms
from fp8advisor.traces.events import SHAPES_HOW
from fp8advisor.traces.layer_match import ExpertList, ModelLinear, expert_gemm_in_trace, tokens_in_trace

#: The tokens a model is first traced at when the trace must say the real count (any small M gives K, N).
_PROBE_SEQ = 16


@dataclass(frozen=True)
class TracedModel:
    """The model's layers at the traced tokens, and its Linear layers and 3-D expert weights (groups = E) as
    the check needs them, in the model's module order; its experts held as nn.Linear, one unit per GEMM."""

    model_layers: object  # fp8advisor.inspect.records.ModelLayers
    layers: tuple[ModelLinear, ...]
    lists: tuple[ExpertList, ...]  # routed experts held as E nn.Linear, one unit per GEMM
    batch: int
    seq: int
    seq_from_trace: bool
    config: object | None  # the FrameworkConfig read, when one was given


def traced_model(
    target: str,
    analyses: list[TraceAnalysis],
    *,
    batch: int = 1,
    seq: int | None = None,
    config_path: str | None = None,
    trust_config: bool = False,
    recipe: str | None = None,
) -> TracedModel:
    """Build TARGET on the meta device at the traced (batch, seq) (`seq` None: read off the trace), mark each
    Linear the config converts (none without a config), and the expert groups it converts, on that meta model
    (torchao's `quantize_` swaps their weights in place). `recipe`: the traced one, for a bare filter list
    (whose rule depends on it; tensorwise when the trace does not say)."""
    from fp8advisor.inspect.layers import inspect_loaded
    from fp8advisor.inspect.target import load_model

    gemms = step_gemms(analyses)
    if gemms and all(gemm.shape is None for _, gemm in gemms):
        raise TraceError(
            "the trace has no input shapes: its GEMMs cannot be matched to layers", hint=SHAPES_HOW
        )
    loaded = load_model(target, "meta")
    from_trace = seq is None
    if seq is None:
        probe = inspect_loaded(loaded, batch=1, seq=_PROBE_SEQ)
        shapes = [ModelLinear(layer.fqn, layer.M, layer.K, layer.N, False) for layer in _linears(probe)]
        tokens = tokens_in_trace(shapes, gemms)
        seq = max(1, (tokens or batch * _PROBE_SEQ) // batch)
    model_layers = inspect_loaded(loaded, batch=batch, seq=seq)
    config = None
    converts = lambda module, fqn: False  # noqa: E731 - without a config nothing is said to convert
    if config_path is not None:
        from fp8advisor.frameworks.reader import read_config
        from fp8advisor.recipes import Recipe, parse_recipe

        config = read_config(config_path, trust_config=trust_config)
        if config.recipe is None:
            known = recipe in {member.value for member in Recipe}
            config = config.with_recipe(parse_recipe(recipe) if known else Recipe.TENSORWISE)
        converts = config.filter_for(loaded.model)
    bf16_weight_gradient = config is not None and config.recipe.grad_weight_in_bf16

    def converted(fqn: str) -> bool:
        return bool(converts(loaded.model.get_submodule(fqn), fqn))

    lists = _expert_lists(model_layers, converted, bf16_weight_gradient)
    in_lists = {fqn for group in model_layers.expert_groups for fqn in group.member_fqns}
    linears = tuple(
        ModelLinear(
            layer.fqn,
            layer.M,
            layer.K,
            layer.N,
            converted(layer.fqn),
            bf16_weight_gradient=bf16_weight_gradient,
        )
        for layer in _linears(model_layers)
        if layer.fqn not in in_lists
    )
    experts = _expert_weights(model_layers, gemms, loaded.model, config)  # after the Linear filter: it swaps
    order = {layer.fqn: index for index, layer in enumerate(model_layers.layers)}
    layers = tuple(sorted(linears + experts, key=lambda layer: order.get(layer.fqn, len(order))))
    return TracedModel(model_layers, layers, lists, batch, seq, from_trace, config)


def _expert_lists(model_layers, converted, bf16_weight_gradient: bool) -> tuple[ExpertList, ...]:
    """One unit per GEMM of each group of routed experts held as E nn.Linear (`layers.0.moe.experts.*.w1`)."""
    from fp8advisor.inspect.records import ExpertForm

    tokens = model_layers.batch * model_layers.seq
    entries = []
    for group in model_layers.expert_groups:
        if group.form is not ExpertForm.LINEAR_LIST:
            continue
        for gemm in group.gemms:
            done = sum(converted(fqn) for fqn in gemm.fqns)
            float8 = None if 0 < done < len(gemm.fqns) else bool(done)
            inner = gemm.fqns[0][len(group.fqn) + 1 :].split(".", 1)  # "0.w1": expert 0's w1
            label = f"{group.fqn}.*" + (f".{inner[1]}" if len(inner) > 1 else "")
            entries.append(
                ExpertList(label, gemm.K, gemm.N, tokens, float8, done, len(gemm.fqns), bf16_weight_gradient)
            )
    return tuple(entries)


def _expert_weights(model_layers, gemms, model, config) -> tuple[ModelLinear, ...]:
    """Each 3-D weight of the model's grouped experts, at the rows, batch and groups the trace's GEMMs of its
    (K, N) show (`expert_gemm_in_trace`; tokens x top_k in E groups where the trace has none), float8 where
    the config converts its group (torchao's MoE conversion keeps the weight gradient float8; MXFP8's
    wgrad_with_hp does not)."""
    from fp8advisor.frameworks.expert_conversion import groups_in_float8
    from fp8advisor.inspect.records import ExpertForm

    groups = [group for group in model_layers.expert_groups if group.form is ExpertForm.GROUPED]
    if not groups:
        return ()
    in_float8 = set(groups_in_float8(model, config, groups)) if config is not None else set()
    recipe = config.recipe if config is not None else None
    bf16_weight_gradient = recipe is not None and recipe.is_mx and recipe.grad_weight_in_bf16
    entries = []
    for group in groups:
        converted = group in in_float8
        for gemm in group.gemms:
            seen = expert_gemm_in_trace(gemms, gemm.K, gemm.N, group.n_experts)
            M, batch, split = seen or (group.M_total or group.tokens, 1, group.n_experts)
            entries.append(
                ModelLinear(
                    gemm.fqns[0],
                    M,
                    gemm.K,
                    gemm.N,
                    converted,
                    groups=split,
                    bf16_weight_gradient=bf16_weight_gradient,
                    batch=batch,
                )
            )
    return tuple(entries)


def _linears(model_layers) -> list:
    return [layer for layer in model_layers.layers if layer.is_linear and layer.M > 0]


__all__ = ["TracedModel", "traced_model"]
