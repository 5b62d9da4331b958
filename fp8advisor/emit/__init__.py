"""Stage 6, emit: the training config that realises an `Advice`, for the user's framework.

In: an `Advice` (`fp8advisor.advice`), a format (`fp8advisor.frameworks.ConfigFormat`) and the
`fp8advisor.request.SuggestRequest` it answers. Out: the file's text, with a header that says what it converts
and the command that regenerates it (`--check` in CI compares the two).

- `writer`: every format but Megatron's (`render`), the header, `write` (atomic, never over a file fp8advisor
  did not write) and `check` (`--check`); `megatron`: Megatron-Core with Transformer Engine (its module
  names, the per-module precision config, the flags).
"""

from fp8advisor._lazy import lazy_exports

_EXPORTS = {
    "render": "fp8advisor.emit.writer",
    "write": "fp8advisor.emit.writer",
    "check": "fp8advisor.emit.writer",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
