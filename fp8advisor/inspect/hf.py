"""transformers, imported to build a model from its config on the meta device, and nothing more.

Importing a model class imports most of transformers: modules for quantized checkpoints (which import torchao,
and with it torch._dynamo), object-detection losses (scipy.optimize), tensor parallelism
(torch.distributed.tensor, sympy), kernels marked for torch.compile (torch._dynamo). None of them builds or
runs a model from a config, and together they cost more than torch itself.
`light_imports` keeps them out while the config and the model class are imported; the model is built after.

The config file is read here first (`read_config_file`, through `fp8advisor.reading`), then by transformers,
always with `trust_remote_code=False`: a config that needs its repository's code is one clear error, and
transformers never prompts on the terminal (its prompt waits on stdin).
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator
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


def read_config_file(path: Path, source: str, transformers: ModuleType) -> tuple[dict[str, Any], bool]:
    """The JSON object in the config file at `path` (named `source` in messages), read by
    `fp8advisor.reading` before transformers opens it (a regular file: a pipe is refused, not waited on;
    UTF-8; bounded in size and depth), and whether the file starts with a byte-order mark (`readable_copy`).
    A config whose model code is not in transformers but in the repository (`auto_map` with a `model_type`
    transformers does not know) is refused: fp8advisor never runs a model repository's code, and
    transformers is never left to ask on the terminal whether to."""
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
