"""Stage 6, emit: the training config that realises an `Advice`, for the user's framework.

In: an `Advice` (`fp8advisor.advice`), a format (`fp8advisor.frameworks.ConfigFormat`) and the
`fp8advisor.request.SuggestRequest` it answers. Out: the file's text, with a header that says what it converts
and the command that regenerates it (`--check` in CI compares the two).

- `config_file`: `render` (the file of any format, from its writer), `write` (atomic, never over a file
  fp8advisor did not write) and `check` (`--check`), and what `suggest` asks of a format.
- the writers: `torchtitan` (torchtitan 0.2 TOML, 0.3 recipe function), `torchao_formats` (NeMo AutoModel,
  accelerate, torchao, the bare filter list), `megatron_file` (the Megatron precision config file).
- `megatron`: Megatron-Core with Transformer Engine (its module names, the per-module precision config, the
  flags).
- `mx`: MXFP8 (issue 30): which formats write it (torchtitan-py's `fqns` inclusion list, torchao's
  `quantize_` with `MXFP8TrainingOpConfig`, megatron's `--fp8-recipe mxfp8`) and why the others refuse it.
- shared by the writers: `header` (the comment header, the FP8-off note), `experts` (what each format does
  with the MoE experts: notes and warnings), `syntax` (comments and literals).
"""

from fp8advisor._lazy import lazy_exports

_EXPORTS = {
    "render": "fp8advisor.emit.config_file",
    "write": "fp8advisor.emit.config_file",
    "check": "fp8advisor.emit.config_file",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
