"""Every GEMM-bearing layer of a model, with the (M, K, N) it really multiplies.

`inspect_model` builds the user's model on the meta device, runs one forward on fake tensors and records each
aten-level GEMM (mm, addmm, bmm, _grouped_mm, _scaled_mm) against the parameter it multiplies.

This module drives the steps, one module each: `forward` runs the forward under the GEMM `recorder` (an aten
dispatch mode), `rows` turns what it saw into one `GemmLayer` per layer, `experts` finds the routed experts
among them, `model_config` reads the longest sequence the model takes; the results are the `records`.
"""

from __future__ import annotations

from dataclasses import replace

from fp8advisor import compat
from fp8advisor.inspect.experts import BALANCED_REASON, find_expert_groups, untraced_expert_weights
from fp8advisor.inspect.forward import TracedForward, run_forward
from fp8advisor.inspect.model_config import max_positions
from fp8advisor.inspect.records import ModelLayers
from fp8advisor.inspect.rows import build_layers
from fp8advisor.request import DEFAULT_BATCH, DEFAULT_SEQ

#: The most tokens per step (batch x seq) `layers` accepts: far beyond any GPU step, and far inside int64
#: element counts (M x K of the widest layer).
MAX_TOKENS = 2**31


def check_tokens(batch: int, seq: int) -> None:
    """A `TargetError` unless batch and seq are positive and batch x seq is at most `MAX_TOKENS`."""
    from fp8advisor.errors import TargetError

    if batch < 1 or seq < 1:
        raise TargetError(f"batch and seq must be positive (got batch {batch}, seq {seq})")
    if batch * seq > MAX_TOKENS:
        raise TargetError(
            f"batch {batch} x seq {seq} = {batch * seq} tokens per step is more than {MAX_TOKENS}",
            hint="give the batch and sequence length of one GPU's step",
        )


def inspect_loaded(
    loaded, *, batch: int = DEFAULT_BATCH, seq: int = DEFAULT_SEQ, debug: bool = False
) -> ModelLayers:
    """Inspect a model already built by `fp8advisor.inspect.target.load_model` (on the meta device for
    speed)."""
    from torch import nn

    from fp8advisor.errors import TargetError

    check_tokens(batch, seq)
    model = loaded.model
    target_text = loaded.spec.text
    _refuse_a_bare_linear(loaded)
    notes: list[str] = [f"built by {loaded.built_by}", *loaded.notes]

    modules = list(model.named_modules())  # deduplicated: each module once, under its first name
    linears = [m for _, m in modules if isinstance(m, nn.Linear)]
    owners, parameters_by_storage = _parameters_of(modules)
    _refuse_without_gemms(loaded, modules, linears)

    inputs = loaded.example_inputs(batch, seq)
    notes.append(f"inputs: {inputs.how}")

    traced = _trace(loaded, inputs, parameters_by_storage, linears, debug, batch * seq)
    census = _noted_eager_attention(traced.census, loaded.spec)
    layers, trace = build_layers(model, modules, owners, traced, batch * seq)
    expert_groups, layers = find_expert_groups(model, modules, layers, trace)
    if traced.stopped is not None:
        notes += _stopped_notes(traced.stopped, modules, layers, batch * seq)
    if not layers:
        raise TargetError(
            f"{target_text} has no nn.Linear and its forward multiplies no parameter",
            hint="fp8advisor advises on nn.Linear layers; point it at a model that has some",
        )
    return ModelLayers(
        target=target_text,
        batch=batch,
        seq=seq,
        layers=tuple(layers),
        notes=tuple(notes),
        census=census,
        parameter_count=sum(parameter.numel() for parameter in model.parameters()),
        max_positions=max_positions(model),
        expert_groups=tuple(expert_groups),
    )


def _refuse_a_bare_linear(loaded) -> None:
    """A `TargetError` when the model is one nn.Linear: its FQN is '', which no filter can name."""
    from torch import nn

    from fp8advisor.errors import TargetError

    if isinstance(loaded.model, nn.Linear):
        raise TargetError(
            "the model is a single nn.Linear: a layer with no name (FQN ''), which no filter_fqns "
            "entry can name",
            location=str(loaded.source_file) if loaded.source_file else None,
            hint="build the model the way training holds it (e.g. nn.Sequential(linear)) and point at that",
        )


def _parameters_of(modules) -> tuple[dict, dict]:
    """(id(parameter) -> [(module fqn, module, parameter name)] under every name it has, storage key ->
    parameter): who owns each parameter, and the recorder's way from a GEMM operand to its parameter."""
    owners: dict[int, list[tuple[str, object, str]]] = {}
    parameters_by_storage: dict[int | None, object] = {}
    for fqn, module in modules:
        for name, parameter in module.named_parameters(recurse=False, remove_duplicate=False):
            owners.setdefault(id(parameter), []).append((fqn, module, name))
            parameters_by_storage.setdefault(compat.storage_key(parameter), parameter)
    parameters_by_storage.pop(None, None)
    return owners, parameters_by_storage


def _refuse_without_gemms(loaded, modules, linears) -> None:
    """A `TargetError` when the model has no nn.Linear and no other parameter a GEMM could multiply (>= 2-D,
    outside embeddings and convolutions)."""
    from torch import nn

    from fp8advisor.errors import TargetError

    not_gemms = (
        nn.Embedding,
        nn.Conv1d,
        nn.Conv2d,
        nn.Conv3d,
        nn.ConvTranspose1d,
        nn.ConvTranspose2d,
        nn.ConvTranspose3d,
    )
    if not linears and not any(
        p.dim() >= 2 for _, m in modules if not isinstance(m, not_gemms) for p in m.parameters(recurse=False)
    ):
        raise TargetError(
            f"{loaded.spec.text} has no nn.Linear (and no other parameter a GEMM could multiply)",
            location=str(loaded.source_file) if loaded.source_file else None,
            hint="fp8advisor advises on nn.Linear layers; point it at a model that has some",
        )


def _trace(
    loaded, inputs, parameters_by_storage: dict, linears: list, debug: bool, tokens: int
) -> TracedForward:
    """One forward under the recorder; when tracing stopped and the inputs hold an attention mask, one more
    without it, and the one that went further."""
    traced = run_forward(loaded, inputs, parameters_by_storage, linears, debug, tokens)
    if traced.stopped is not None and "attention_mask" in inputs.kwargs:
        # transformers asks data-dependent questions of an explicit mask in some models (bidirectional
        # encoders) and of the positions without one in others (causal decoders): try the other way too.
        without_mask = {k: v for k, v in inputs.kwargs.items() if k != "attention_mask"}
        retry = run_forward(
            loaded, replace(inputs, kwargs=without_mask), parameters_by_storage, linears, debug, tokens
        )
        if retry.stopped is None or len(retry.calls) > len(traced.calls):
            traced = retry
    return traced


def _noted_eager_attention(census, spec):
    """`census`, with a note when a Hugging Face config's model counted its eager attention as matmuls."""
    if census.matmuls and spec.kind == "hf_config":
        eager = (
            "the Hugging Face model was built with eager attention (see fp8advisor.inspect.target): its "
            "attention is counted as matmuls and memory regions, where training with sdpa runs one fused "
            "kernel"
        )
        census = replace(census, notes=(*census.notes, eager))
    return census


def _stopped_notes(stopped: tuple[str, str | None], modules, layers, tokens: int) -> list[str]:
    """What to say when tracing stopped part-way: where and why, how many layers were assumed, and which
    >= 3-D parameters look like routed experts that were never traced."""
    what, where = stopped
    assumed = sum(1 for layer in layers if "M assumed:" in (layer.reason or ""))
    per_expert = sum(1 for layer in layers if BALANCED_REASON in (layer.reason or ""))
    experts = f"; {per_expert} routed expert Linear(s) M per expert under balanced routing" * bool(per_expert)
    notes = [
        f"tracing stopped at {where or 'an unknown place'} ({what}); "
        f"{assumed} layer(s) that had not run yet assumed M = batch x seq = {tokens}{experts}"
    ]
    untraced = untraced_expert_weights(modules, layers)
    if untraced:
        shown = ", ".join(untraced[:4]) + (f", ... ({len(untraced)} in all)" if len(untraced) > 4 else "")
        notes.append(
            f"WARNING: {shown}: >= 3-D parameters that had not run when tracing stopped look like routed "
            "experts that were not traced (no E, M or GEMM seen): left out of the expert groups and of "
            "the advice, they stay bf16 in every file it writes"
        )
    return notes


def inspect_model(
    target: str, *, batch: int = DEFAULT_BATCH, seq: int = DEFAULT_SEQ, debug: bool = False
) -> ModelLayers:
    """Build TARGET without allocating weights and list every GEMM-bearing layer with the M it sees.

    The model is built on the meta device (explicit devices redirected) and run once on meta tensors of
    (batch, seq); an aten-level recorder ties each GEMM to the parameter it multiplies.
    """
    from fp8advisor.inspect.target import load_model

    loaded = load_model(target, "meta")
    return inspect_loaded(loaded, batch=batch, seq=seq, debug=debug)
