"""transformers, imported to build a model from its config on the meta device, and nothing more.

Importing a model class imports most of transformers: modules for quantized checkpoints (which import torchao,
and with it torch._dynamo), object-detection losses (scipy.optimize), tensor parallelism
(torch.distributed.tensor, sympy), kernels marked for torch.compile (torch._dynamo). None of them builds or
runs a model from a config, and together they cost more than torch itself.
`light_imports` keeps them out while the config and the model class are imported; the model is built after.

The config file is read here first (`read_config_file`, through `fp8advisor.reading`), then by transformers,
always with `trust_remote_code=False`: a config that needs its repository's code is one clear error, and
transformers never prompts on the terminal (its prompt waits on stdin).

The work of building a model is bounded here too, before transformers reads the config: every size that sets
how many modules or how wide a tensor transformers makes (layers, widths, experts; at any depth of the config,
`text_config` included, and in the overrides of `config.json:(key=value)`) must be a whole number within a
bound no real model comes near (`check_config_sizes`), else one `TargetError` names the key, its value and the
bound. At the bounds the build ends: widths and experts cost nothing on the meta device, layers about 10 ms
each (4,096 layers of a small Llama: about 45 s on a busy CPU core; a billion took 44 s to run out of memory).
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from fp8advisor import compat
from fp8advisor.errors import TargetError, quote
from fp8advisor.reading import decode_text, parse_json, read_bytes

BOM = b"\xef\xbb\xbf"

#: What transformers imports only for what building a model from its config never uses: torchao for its
#: quantizer (torchao-quantized checkpoints), scipy for object-detection losses, torch.distributed.tensor
#: (with sympy) for tensor and expert parallelism. transformers asks `is_<name>_available()` before importing
#: them; while `light_imports` is open the answer is no, and the modules imported then keep that answer: in
#: this process transformers can then neither load a torchao-quantized checkpoint nor shard a model itself.
UNUSED_PACKAGES = ("torchao", "scipy", "torch_distributed")

#: The most layers a config may ask for: the deepest Transformer published (DeepNet, 2022) has 1,000, the
#: deepest released LLMs about 130 (Llama 3.1 405B: 126). Building takes about 10 ms a layer on the meta
#: device.
MAX_LAYERS = 4_096
#: The widest size a config may ask for (hidden, intermediate, vocabulary, head sizes and counts): the widest
#: real ones are under 2^18 (vocabularies: Gemma 3's 262,144; FFNs: Nemotron-4 340B's 73,728).
MAX_WIDTH = 2**20
#: The most experts a config may ask for: real MoE models have at most a few hundred (Qwen3-Next: 512).
MAX_EXPERTS = 65_536
#: The keys of those sizes, by bound, as transformers' configs (and their nested sub-configs) spell them.
_LAYER_KEYS = (
    "num_hidden_layers", "num_layers", "n_layer", "n_layers", "num_decoder_layers", "num_encoder_layers",
    "decoder_layers", "encoder_layers", "decoder_num_hidden_layers", "num_mtp_layers",
    "num_nextn_predict_layers",
)  # fmt: skip
_WIDTH_KEYS = (
    "hidden_size", "intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size",
    "shared_intermediate_size", "ffn_dim", "ffn_hidden_size", "encoder_ffn_dim", "decoder_ffn_dim", "d_model",
    "d_ff", "d_kv", "n_embd", "n_inner", "embed_dim", "embedding_size", "hidden_dim", "mlp_dim",
    "vocab_size", "head_dim", "v_head_dim", "qk_nope_head_dim", "qk_rope_head_dim", "kv_lora_rank",
    "q_lora_rank", "num_attention_heads", "num_key_value_heads", "n_head", "num_heads",
    "encoder_attention_heads", "decoder_attention_heads",
)  # fmt: skip
_EXPERT_KEYS = (
    "num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "n_shared_experts",
    "num_shared_experts", "moe_num_shared_experts", "num_experts_per_tok", "moe_topk",
)  # fmt: skip
_BOUNDS = {
    **dict.fromkeys(_LAYER_KEYS, (MAX_LAYERS, " layers")),
    **dict.fromkeys(_WIDTH_KEYS, (MAX_WIDTH, " for a width")),
    **dict.fromkeys(_EXPERT_KEYS, (MAX_EXPERTS, " experts")),
}
#: The sizes every model has at least one of; the others may be 0 in real configs (`num_shared_experts`,
#: `head_dim` meaning "derived") or null (unset: transformers' default) like any of them.
_AT_LEAST_ONE = frozenset(
    ("num_hidden_layers", "n_layer", "n_layers", "hidden_size", "n_embd", "intermediate_size", "vocab_size")
)


def check_config_sizes(data: Mapping[str, Any], source: str) -> None:
    """Refuse a config (`source` names it) whose layer count, width or expert count (`_BOUNDS`), at any depth
    of its sub-configs (lists of them too), is not a whole number (or a list of them) from 0 (1 for
    `_AT_LEAST_ONE`) up to its bound: one `TargetError` naming the key, its value and the bound, before
    transformers builds anything (a billion layers ran 44 s to a MemoryError). null is transformers'
    default."""
    stack: list[tuple[Mapping[str, Any], str]] = [(data, "")]
    while stack:  # as deep as `reading.parse_json` let the document be
        mapping, prefix = stack.pop()
        for key, value in mapping.items():
            if key in _BOUNDS:
                if value is not None:
                    _check_size(f"{prefix}{key}", value, key in _AT_LEAST_ONE, *_BOUNDS[key], source)
            elif isinstance(value, Mapping):
                stack.append((value, f"{prefix}{key}."))
            elif isinstance(value, list):  # per-layer sub-configs (DeciLM's block_configs)
                stack.extend(
                    (item, f"{prefix}{key}[{i}].")
                    for i, item in enumerate(value)
                    if isinstance(item, Mapping)
                )


def _check_size(key: str, value: Any, positive: bool, bound: int, what: str, source: str) -> None:
    for item in value if isinstance(value, list | tuple) else (value,):
        if isinstance(item, bool) or not isinstance(item, int):
            problem = "not a whole number"
        elif item < (1 if positive else 0):
            problem = "not a positive number" if positive else "negative"
        elif item > bound:
            problem = f"more than any model has (at most {bound:,}{what})"
        else:
            continue
        raise TargetError(
            f"{source}: the config value {key} is {quote(value)}: {problem}",
            hint=f"give {key} as the model has it: a whole number from {1 if positive else 0} to {bound:,}",
        )


def read_config_file(
    path: Path, source: str, transformers: ModuleType, overrides: Mapping[str, Any] | None = None
) -> tuple[dict[str, Any], bool]:
    """The JSON object in the config file at `path` (named `source` in messages), read by
    `fp8advisor.reading` before transformers opens it (a regular file: a pipe is refused, not waited on;
    UTF-8; bounded in size and depth), and whether the file starts with a byte-order mark (`readable_copy`).
    A config whose model code is not in transformers but in the repository (`auto_map` with a `model_type`
    transformers does not know) is refused: fp8advisor never runs a model repository's code, and
    transformers is never left to ask on the terminal whether to. A size beyond any real model's, in the
    file or in `overrides` (the config values of `config.json:(key=value)`), is refused
    (`check_config_sizes`)."""
    raw = read_bytes(path, "Hugging Face config", error=TargetError, hint="check the path of the config.json")
    data = parse_json(
        decode_text(raw, path, "Hugging Face config", error=TargetError), path, error=TargetError
    )
    if not isinstance(data, dict):
        raise TargetError(
            f"{source} is not a Hugging Face config: its JSON is {quote(data)}, not an object",
            hint="give the model's config.json (a JSON object with model_type)",
        )
    model_type = data.get("model_type")
    known = isinstance(model_type, str) and model_type in transformers.CONFIG_MAPPING
    if data.get("auto_map") and not known:
        raise TargetError(
            f"{source} needs the model repository's own code (auto_map, and model_type {quote(model_type)} "
            "is unknown to transformers), which fp8advisor never runs",
            hint="give the model's Python file instead (a model.py that builds it), or upgrade transformers "
            "if a newer version knows this model_type",
        )
    check_config_sizes({**data, **(overrides or {})}, source)
    return data, raw.startswith(BOM)


@contextlib.contextmanager
def readable_copy(path: Path, data: dict[str, Any], has_bom: bool) -> Iterator[Path]:
    """`path` for transformers to read; for a file with a byte-order mark (transformers' JSON reader refuses
    one; Python, editors and `fp8advisor.reading` accept it), a copy of `data` without it, in a private
    temporary folder while open."""
    if not has_bom:
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="fp8advisor-hf-") as folder:
        copy = Path(folder) / path.name
        copy.write_text(json.dumps(data), encoding="utf-8")
        yield copy


def import_transformers() -> ModuleType:
    try:
        import transformers
    except ImportError:
        raise TargetError(
            "reading a Hugging Face config needs the transformers package",
            hint="pip install 'fp8advisor[hf]'",
        ) from None
    return transformers


@contextlib.contextmanager
def light_imports() -> Iterator[None]:
    """While open: transformers imports its modules without the optional packages in `UNUSED_PACKAGES`
    nor torch._dynamo (`compat.dynamo_deferred`). Build the model after it closes. The Hub is never asked:
    the config is read with `local_files_only` (no environment variable is set: huggingface_hub reads
    HF_HUB_OFFLINE once, when first imported, and would stay offline for the whole process)."""
    with compat.dynamo_deferred(), _unavailable(UNUSED_PACKAGES):
        yield


def import_model_classes(transformers: ModuleType, config: Any) -> None:
    """Import the modules of the model classes `AutoModelForCausalLM` / `AutoModel` would build for `config`
    (inside `light_imports`); a config they do not know is left for `from_config` to report."""
    for mapping in (transformers.MODEL_FOR_CAUSAL_LM_MAPPING, transformers.MODEL_MAPPING):
        if type(config) in mapping:
            try:
                mapping[type(config)]
            except Exception:  # a module needing what light_imports withholds: from_config imports it whole
                return


@contextlib.contextmanager
def _unavailable(packages: tuple[str, ...]) -> Iterator[None]:
    """transformers' `is_<package>_available()` answers False, where transformers defines it."""
    try:
        import transformers.utils as utils
        from transformers.utils import import_utils
    except ImportError:
        yield
        return
    saved = []
    for module in (import_utils, utils):
        for package in packages:
            name = f"is_{package}_available"
            if hasattr(module, name):
                saved.append((module, name, getattr(module, name)))
                setattr(module, name, _not_available)
    try:
        yield
    finally:
        for module, name, original in saved:
            setattr(module, name, original)


def _not_available(*args: Any, **kwargs: Any) -> bool:
    return False
