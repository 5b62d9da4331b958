"""What a model says of itself on its settings object: where it keeps one, the longest sequence it takes.

A Hugging Face model holds its `config`; a Python model often the args object it was built from (torchtitan's
`model_args`, Meta's `params`). `max_positions` reads the sequence limit there (`ModelLayers.seq_warning`
warns when --seq is longer); `fp8advisor.inspect.experts` looks there for the routed experts' top_k.
"""

from __future__ import annotations

#: Where models keep their settings, and say how long a sequence they take: a Hugging Face config, or the
#: args object of a Python model (torchtitan's `model_args.max_seq_len`, Meta's `params.max_seq_len`, ...).
CONFIG_HOLDERS = ("config", "args", "model_args", "params")
#: The names of the longest sequence on those objects.
_POSITION_NAMES = ("max_position_embeddings", "max_seq_len", "max_seq_length")


def max_positions(model) -> tuple[int, str] | None:
    """(the longest sequence `model` says it takes, the attribute saying so), or None when it does not say."""
    for holder in CONFIG_HOLDERS:
        args = getattr(model, holder, None)
        for name in _POSITION_NAMES:
            value = getattr(args, name, None) if args is not None else None
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value, f"{holder}.{name}"
    return None
