"""Read a training config FILE the way its framework would: is FP8 on, with which recipe, and which Linear
converts.

Every format `fp8advisor suggest` writes is read here, and hand-written files in the same formats.
`read_config` finds the format (`detect_framework`: the extension, and for .py and .yaml what the file holds)
and hands the file to its reader, which returns a `config_record.FrameworkConfig`:

- torchtitan-toml, torchtitan-py: `torchtitan_reader` (the 0.2.x job config, the 0.3 recipe function; its MX
  converters: `torchtitan_mx_reader`);
- nemo-automodel, filter: `yaml_reader` (NeMo AutoModel's YAML; a bare filter_fqns list, YAML or JSON);
- torchao, accelerate: `torchao_reader` (`convert_to_float8_training(...)`, `AORecipeKwargs(...)`; MXFP8's
  `quantize_(..., MXFP8TrainingOpConfig...)`: `torchao_mx_reader`), whose
  filter function `filter_function` evaluates from its syntax (`filter_eval`) or, with `trust_config=True`
  (`verify --trust-config`), compiles alone and runs;
- megatron: Megatron-Core's precision config (YAML with `configs` and `matchers`) is recognised and refused
  with a ConfigError: it configures Transformer Engine's modules in Megatron's own model, not a torchao
  conversion of the PyTorch model; `verify` checks it on a path of its own
  (`fp8advisor.verification.megatron_check`).

The file is read by `read_config_text` (`fp8advisor.reading`: a regular file of bounded size, UTF-8, a
byte-order mark dropped), and parsed by `reading`'s bounded parsers. Python files are parsed, never imported
(`python_file`); none of the file's code runs unless `trust_config`
lets its filter function run, and then nothing else of the file.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from fp8advisor.errors import ConfigError
from fp8advisor.frameworks.config_record import FrameworkConfig
from fp8advisor.frameworks.formats import ConfigFormat, parse_format
from fp8advisor.frameworks.header import read_header
from fp8advisor.frameworks.python_file import call_name, parse_python
from fp8advisor.frameworks.torchao_reader import read_accelerate, read_torchao
from fp8advisor.frameworks.torchtitan_mx_reader import read_torchtitan_py_any
from fp8advisor.frameworks.torchtitan_reader import read_torchtitan_toml
from fp8advisor.frameworks.yaml_reader import load_yaml, read_filter_list, read_nemo
from fp8advisor.reading import MAX_CONFIG_BYTES, read_text
from fp8advisor.recipes import Recipe, parse_recipe


def detect_framework(path: Path, text: str) -> ConfigFormat:
    """The format of a config file, from its extension and (for .py and .yaml) what it holds."""
    suffix = path.suffix.lower()
    if suffix == ".toml":
        return ConfigFormat.TORCHTITAN_TOML
    if suffix == ".json":
        return ConfigFormat.FILTER
    if suffix in (".yaml", ".yml"):
        data = load_yaml(path, text)
        if isinstance(data, dict) and "fp8" in data:
            return ConfigFormat.NEMO_AUTOMODEL
        if isinstance(data, dict) and "matchers" in data and "configs" in data:
            return ConfigFormat.MEGATRON  # Megatron-Core's --te-precision-config-file
        return ConfigFormat.FILTER
    if suffix == ".py":
        tree = parse_python(path, text)
        called = {call_name(node) for node in ast.walk(tree) if isinstance(node, ast.Call)}
        if called & {
            "Float8LinearConverter.Config",
            "Float8GroupedExpertsConverter.Config",
            "MXFP8LinearConverter.Config",
            "MXFP8GroupedExpertsConverter.Config",
        }:
            return ConfigFormat.TORCHTITAN_PY
        if "AORecipeKwargs" in called:
            return ConfigFormat.ACCELERATE
        if called & {"convert_to_float8_training", "Float8TrainingOpConfig", "quantize_"}:  # quantize_: MXFP8
            return ConfigFormat.TORCHAO
        # No float8 set-up: a file that trains in bf16 (what `suggest` writes when nothing is worth
        # converting). Its framework, from what it calls or imports, else from the header `suggest` wrote.
        if "Accelerator" in called:
            return ConfigFormat.ACCELERATE
        if any(_imports_from(node, "torchtitan") for node in ast.walk(tree)):
            return ConfigFormat.TORCHTITAN_PY
        written = _format_in_header(text)
        if written in (ConfigFormat.TORCHAO, ConfigFormat.ACCELERATE, ConfigFormat.TORCHTITAN_PY):
            return written
        raise ConfigError(
            f"{path} sets up no float8 training this tool can read",
            hint="expected Float8LinearConverter.Config(...) (torchtitan 0.3), AORecipeKwargs(...) "
            "(accelerate) or "
            "convert_to_float8_training(...) (torchao); write one with `fp8advisor suggest --format ...`",
        )
    written = _format_in_header(text)  # a file `suggest -o` wrote under another name: its header says
    if written is not None and written is not ConfigFormat.MEGATRON:
        return written
    raise ConfigError(
        f"{path}: unsupported config file type {suffix or '(no extension)'}",
        hint="give a torchtitan .toml, a NeMo AutoModel .yaml, a Python config (torchtitan 0.3, "
        "accelerate, torchao) "
        "or a filter list (.yaml/.json)",
    )


def _imports_from(node: ast.AST, package: str) -> bool:
    if isinstance(node, ast.ImportFrom):
        return (node.module or "").split(".")[0] == package
    if isinstance(node, ast.Import):
        return any(alias.name.split(".")[0] == package for alias in node.names)
    return False


def _format_in_header(text: str) -> ConfigFormat | None:
    """The `--format` in the header `fp8advisor suggest` wrote (`emit.header.header_lines`), if any."""
    header = read_header(text)
    return header.format if header is not None else None


def read_config_text(path: str | Path) -> str:
    """The text of the config file at `path`, read by `fp8advisor.reading`: a regular file of at most
    `reading.MAX_CONFIG_BYTES` (a pipe or a device is refused, never waited on), UTF-8 with any byte-order
    mark dropped, no NUL byte; a ConfigError otherwise. Every reader of a config's text reads it here."""
    return read_text(
        path,
        "config file",
        error=ConfigError,
        max_bytes=MAX_CONFIG_BYTES,
        hint="check the path given to --config",
    )


def read_config(
    path: str | Path,
    *,
    framework: ConfigFormat | str | None = None,
    recipe: Recipe | str | None = None,
    trust_config: bool = False,
) -> FrameworkConfig:
    """Read `path` as its framework would. `framework` overrides detection; `recipe` is used only where the
    file names none (a bare filter list). `trust_config`: run a Python filter function instead of evaluating
    it from its syntax (see the module docstring). Raises ConfigError (exit 2) for unreadable or unsupported
    files, and for a Python filter this tool cannot evaluate without running it."""
    path = Path(path)
    text = read_config_text(path)
    chosen = parse_format(framework) if framework is not None else detect_framework(path, text)
    default_recipe = parse_recipe(recipe) if recipe is not None else None
    readers = {
        ConfigFormat.TORCHTITAN_TOML: read_torchtitan_toml,
        ConfigFormat.TORCHTITAN_PY: read_torchtitan_py_any,
        ConfigFormat.NEMO_AUTOMODEL: read_nemo,
        ConfigFormat.ACCELERATE: read_accelerate,
        ConfigFormat.TORCHAO: read_torchao,
        ConfigFormat.FILTER: read_filter_list,
    }
    if chosen is ConfigFormat.MEGATRON:
        raise ConfigError(
            f"{path} is a Megatron-Core precision config: it configures Transformer Engine modules in "
            "Megatron's own GPTModel, not a torchao conversion of the PyTorch model, and is not read here",
            hint=f"check it with `fp8advisor verify TARGET --config {path}` (Megatron's own matcher against "
            "the advice), or that it is current with `fp8advisor suggest ... --format megatron --check "
            f"{path}` (the command in its header)",
        )
    reader = readers[chosen]
    if chosen in (ConfigFormat.ACCELERATE, ConfigFormat.TORCHAO):
        reader = functools.partial(reader, trust_config=trust_config)
    return reader(path, text, default_recipe)


__all__ = ["detect_framework", "read_config", "read_config_text"]
