"""The config file of any `--format`: `render` (to the format's writer), `write`, and `check` for `--check`.

The writers, one module per framework family: `torchtitan` (torchtitan-toml, torchtitan-py), `torchao_formats`
(nemo-automodel, accelerate, torchao, filter), `megatron_file` (megatron). Each file starts with the comment
header of `header` (JSON has none) and, for a MoE model, the notes of `experts`.

When the advice converts nothing, the files leave FP8 off instead of enabling it with a filter that excludes
every layer (`FP8_OFF_RENDERERS`): torchtitan-toml without the float8 converter, torchtitan-py without
`Float8LinearConverter`, NeMo AutoModel `fp8: enabled: false`, accelerate `mixed_precision="bf16"`, torchao
without `convert_to_float8_training`. The header says why. The bare filter list has no switch: it still keeps
every layer in bf16, and its header says to leave FP8 off. `verify` (`fp8advisor.frameworks.reader`) reads
all of them back as FP8 off, which is then the advised outcome.

Also here, what `suggest` asks of a format before and after the work: whether its framework has the recipe
(`check_format_recipe`), whether the file can do what it says for the target (`check_format_target`: a
torchtitan registry model is refused by the torchtitan format of the other version, whose names differ, and by
torchao, whose Float8Linear torchtitan leaves uninitialised), what the file does (`what_the_file_does`,
`leaves_fp8_off`) and what to say on stderr (`format_warnings`).
"""

from __future__ import annotations

import difflib
from pathlib import Path

from fp8advisor.advice.linears import Predictor
from fp8advisor.advice.records import Advice
from fp8advisor.emit import megatron, mx
from fp8advisor.emit.experts import converted_expert_modules, expert_notes, expert_warnings
from fp8advisor.emit.header import header_lines, what_it_converts
from fp8advisor.emit.megatron_file import megatron_what, render_megatron
from fp8advisor.emit.torchao_formats import (
    accelerate,
    accelerate_off,
    filter_list,
    nemo_automodel,
    nemo_automodel_off,
    torchao,
    torchao_off,
)
from fp8advisor.emit.torchtitan import torchtitan_py, torchtitan_py_off, torchtitan_toml, torchtitan_toml_off
from fp8advisor.errors import ConfigError
from fp8advisor.files import write_atomic
from fp8advisor.frameworks.formats import ConfigFormat, grouped_expert_groups, parse_format
from fp8advisor.inspect import titan
from fp8advisor.recipes import Recipe
from fp8advisor.request import SuggestRequest


def check_format_recipe(fmt: ConfigFormat, recipe: Recipe | str) -> None:
    """A ConfigError when the format's framework has no such recipe: torchtitan 0.3 has no tensorwise,
    Transformer Engine (megatron) only tensorwise. `suggest` asks before the work, `render` again."""
    recipe = Recipe(recipe)
    mx.check_mx_format(fmt, recipe)
    if fmt is ConfigFormat.TORCHTITAN_PY and recipe is Recipe.TENSORWISE:
        raise ConfigError(
            "torchtitan 0.3 has no tensorwise recipe (Float8LinearConverter.Config accepts rowwise and "
            "rowwise_with_gw_hp)",
            hint="use --recipe rowwise (or rowwise_with_gw_hp), or --format torchtitan-toml for "
            "torchtitan 0.2.x",
        )
    if fmt is ConfigFormat.MEGATRON:
        megatron.check_recipe(recipe)


#: The torchtitan version whose names each torchtitan format is for (`fp8advisor.inspect.titan`).
TORCHTITAN_FORMAT_VERSIONS = {
    ConfigFormat.TORCHTITAN_TOML: titan.TORCHTITAN_0_2,
    ConfigFormat.TORCHTITAN_PY: titan.TORCHTITAN_0_3,
}


def check_format_target(
    fmt: ConfigFormat | str | None, target: str, recipe: Recipe | str | None = None
) -> None:
    """A ConfigError when the file of `fmt` cannot do what it says for `target` (nothing for no format);
    `recipe` (None: not known yet, `--recipe auto`) words the torchao refusal for MXFP8.
    `suggest` asks before the work, `render` again. For a torchtitan registry target (`torchtitan:MODEL/
    FLAVOR`, built by the installed torchtitan):

    - the torchtitan format of another version than the one the model's names come from
      (`titan.registry_format_conflict`): torchtitan-toml (0.2.x) from a 0.3 model converts other layers,
      e.g. all of 0.2.2's attention.wq / wk / wv where 0.3's fused wqkv was advised, and none of the grouped
      experts (0.2.2 names them moe.experts).
    - torchao: torchtitan 0.3 builds the model on the meta device and initialises it only after
      parallelising it (torchtitan/trainer.py `Trainer.__init__`: model_config.build() on meta, then
      model.to_empty and init_weights, which is `Module.init_states`, torchtitan/protocols/module.py).
      init_states recurses only into torchtitan Modules; torchao's plain Float8Linear is not one, so a layer
      converted before the init keeps whatever to_empty left (NaN in the test), and one converted before
      the trainer's `verify_module_protocol` fails it. torchtitan's own Float8LinearConverter builds a
      Float8Linear that is a torchtitan Module and keeps its param_init
      (torchtitan/components/quantization/float8.py). accelerate converts the model handed to
      `Accelerator.prepare`, after the user built and initialised it (accelerate/accelerator.py
      `_prepare_ao`): its init is kept. For MXFP8, torchao's quantize_ swaps each converted Linear's weight
      parameter for its MXFP8 training tensor before that init; torchtitan's own MXFP8LinearConverter
      builds an MXFP8Linear that is a torchtitan Module with the layer's param_init
      (torchtitan/components/quantization/mx.py).
    - nemo-automodel: NeMo AutoModel does not take torchtitan models (it builds Hugging Face ones).
    """
    if fmt is None:
        return
    fmt = parse_format(fmt)
    if fmt in TORCHTITAN_FORMAT_VERSIONS:
        conflict = titan.registry_format_conflict(target, TORCHTITAN_FORMAT_VERSIONS[fmt], fmt.value)
        if conflict is not None:
            other = "torchtitan-py" if fmt is ConfigFormat.TORCHTITAN_TOML else "torchtitan-toml"
            raise ConfigError(
                conflict,
                hint=f"write --format {other} for this torchtitan, or advise on a model file that builds the "
                f"model your torchtitan version trains (its names are the ones --format {fmt.value} needs)",
            )
    if fmt is ConfigFormat.NEMO_AUTOMODEL and titan.is_registry_target(target):
        raise ConfigError(
            f"--format nemo-automodel cannot train {target.strip()}: NeMo AutoModel builds Hugging Face "
            "models (its model: section), not torchtitan's, whose Linear names its filter_fqns would hold",
            hint="write --format torchtitan-py for torchtitan, or advise on the Hugging Face config of the "
            "model NeMo AutoModel trains",
        )
    if fmt is ConfigFormat.TORCHAO and titan.is_registry_target(target) and recipe is not None:
        if Recipe(recipe).is_mx:
            raise ConfigError(
                f"--format torchao cannot convert {target.strip()} to MXFP8: torchtitan builds it on the "
                "meta device and initialises it (to_empty, init_states) after converting, and torchao's "
                "quantize_ swaps each converted Linear's weight parameter for its MXFP8 training tensor "
                "before that init (torchtitan's trainer builds and initialises only its own MXFP8Linear)",
                hint="write --format torchtitan-py: torchtitan's own MXFP8LinearConverter builds an "
                "MXFP8Linear that is a torchtitan Module and keeps the layer's param_init",
            )
    if fmt is ConfigFormat.TORCHAO and titan.is_registry_target(target):
        raise ConfigError(
            f"--format torchao cannot convert {target.strip()}: torchtitan builds it on the meta device and "
            "initialises it (init_states) after converting, and init_states skips torchao's plain "
            "Float8Linear (not a torchtitan Module), so the converted weights would stay uninitialised",
            hint="write --format torchtitan-py: torchtitan's own Float8LinearConverter keeps the model's "
            "init",
        )


def what_the_file_does(advice: Advice, fmt: ConfigFormat, predictor: Predictor | None = None) -> str:
    """The header line saying what the file of `fmt` converts (or why it leaves FP8 off), for the terminal."""
    if fmt is ConfigFormat.MEGATRON:
        return megatron_what(megatron.plan(advice, predictor), advice.recipe)
    return what_it_converts(advice, fmt)


def leaves_fp8_off(advice: Advice, fmt: ConfigFormat | None, predictor: Predictor | None = None) -> bool:
    """Whether the file of `fmt` trains nothing in float8: the advice converts nothing, or (megatron, whose
    fused GEMMs are decided as one) the plan puts no module in float8. No format: the advice alone."""
    if fmt is ConfigFormat.MEGATRON:
        return not megatron.plan(advice, predictor).float8_names
    return not advice.convert_fqns and not (fmt is not None and converted_expert_modules(advice, fmt))


def render(
    advice: Advice,
    fmt: ConfigFormat | str,
    request: SuggestRequest,
    *,
    output: str | None = None,
    predictor: Predictor | None = None,
) -> str:
    """The text of the config file in format `fmt`. `output`: the path as typed; for the filter format a name
    ending in .json gives the bare JSON list, any other YAML. `predictor`: the advice's own
    (`advice.linears.default_predictor` of its profile), with which the megatron format decides a fused GEMM
    as one; without it, by the sum of its parts' predicted times."""
    fmt = parse_format(fmt)
    check_format_recipe(fmt, advice.recipe)  # a file FP8 is off in must still be one its framework takes
    check_format_target(fmt, request.target, advice.recipe)
    if fmt is ConfigFormat.MEGATRON:
        return render_megatron(advice, request, predictor)
    header = header_lines(advice, request, fmt)
    as_json = output is not None and output.lower().endswith(".json")
    if not as_json:  # JSON has no comments: format_warnings says it on stderr instead
        header = header + expert_notes(advice, fmt)
    if not advice.convert_fqns and not converted_expert_modules(advice, fmt) and fmt in FP8_OFF_RENDERERS:
        return FP8_OFF_RENDERERS[fmt](header, request, advice)
    if fmt is ConfigFormat.TORCHTITAN_TOML:
        return torchtitan_toml(advice, header, request)
    if fmt is ConfigFormat.TORCHTITAN_PY:
        return torchtitan_py(advice, header, request)
    if fmt is ConfigFormat.NEMO_AUTOMODEL:
        return nemo_automodel(advice, header, request)
    if fmt is ConfigFormat.ACCELERATE:
        return accelerate(advice, header, request)
    if fmt is ConfigFormat.TORCHAO:
        return torchao(advice, header, request)
    return filter_list(advice, header, request, as_json=as_json)


def format_warnings(advice: Advice, fmt: ConfigFormat | str) -> list[str]:
    """What to tell the user (on stderr, never in the file) about writing `fmt` for this model: a torchtitan
    config written from a model (not torchtitan's registry) whose names look like another torchtitan
    version's (`fp8advisor.inspect.titan.version_mismatch`; a registry target's version is known and
    `check_format_target` refuses a mismatch), and what the file cannot do with the MoE experts
    (`expert_warnings`)."""
    fmt = parse_format(fmt)
    warnings = expert_warnings(advice, fmt)
    if fmt not in TORCHTITAN_FORMAT_VERSIONS or titan.is_registry_target(advice.target):
        return warnings
    groups = tuple(group.group for group in grouped_expert_groups(advice.experts))
    warning = titan.version_mismatch(advice.layers, TORCHTITAN_FORMAT_VERSIONS[fmt], groups)
    return ([] if warning is None else [warning]) + warnings


#: The file of each format that leaves FP8 off, from its header, the request and the advice (torchtitan-py
#: names the model from the request; the torchtitan files set the advised point, whose expert-parallel
#: degree is written when the advice has experts); the bare filter list has no switch: not here.
FP8_OFF_RENDERERS = {
    ConfigFormat.TORCHTITAN_TOML: torchtitan_toml_off,
    ConfigFormat.TORCHTITAN_PY: torchtitan_py_off,
    ConfigFormat.NEMO_AUTOMODEL: nemo_automodel_off,
    ConfigFormat.ACCELERATE: accelerate_off,
    ConfigFormat.TORCHAO: torchao_off,
}


def write(path: str | Path, text: str) -> Path:
    """Write `text` byte for byte (LF line ends on every OS), atomically: the old file stays whole until the
    new one is complete (`fp8advisor.files.write_atomic`)."""
    return write_atomic(path, text)


def read_committed(path: str | Path) -> str:
    """The text of the file `--check` compares, byte for byte (a byte-order mark is kept: it makes the file
    differ), or one `ConfigError` saying why it cannot be compared (missing, a directory, a pipe or a device,
    too large, not UTF-8 text, a NUL byte). Called before the work: a wrong path fails at once."""
    from fp8advisor.reading import MAX_CONFIG_BYTES, read_bytes

    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"--check {path} is a directory", hint="give the config file that -o wrote")
    if not path.exists():
        raise ConfigError(
            f"--check {path} does not exist", hint=f"write it first: the same command with -o {path}"
        )
    # A regular file: a pipe is refused, not waited on; a device (/dev/null) is refused, not called stale.
    data = read_bytes(path, "--check file", error=ConfigError, max_bytes=MAX_CONFIG_BYTES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or "\0" in text:
        raise ConfigError(
            f"--check {path} is not a UTF-8 text file: not a config fp8advisor wrote",
            hint="give the config file that -o wrote",
        )
    return text


def check(path: str | Path, expected_text: str, current: str | None = None) -> tuple[bool, str]:
    """(True, "") when the file at `path` (whose text is `current`, read with `read_committed` when None)
    holds exactly `expected_text`; else (False, a unified diff from the file to what would be written now)."""
    path = Path(path)
    if current is None:
        current = read_committed(path)
    if current == expected_text:
        return True, ""
    diff = difflib.unified_diff(
        current.splitlines(keepends=True),
        expected_text.splitlines(keepends=True),
        fromfile=f"{path} (committed)",
        tofile=f"{path} (fp8advisor suggest now)",
    )
    text = "".join(line if line.endswith("\n") else line + "\n" for line in diff)
    return False, text


__all__ = [
    "FP8_OFF_RENDERERS",
    "TORCHTITAN_FORMAT_VERSIONS",
    "check",
    "check_format_recipe",
    "check_format_target",
    "format_warnings",
    "leaves_fp8_off",
    "read_committed",
    "render",
    "what_the_file_does",
    "write",
]
