"""Stage 7, verification: prove that a config converts exactly the advised layers, and that they run in
float8.

In: a model, a config file (read by `fp8advisor.frameworks.reader`) and the `SuggestRequest` to advise with
(`advice_settings` merges a command line with the config's header). Out: a `VerifyReport`: per layer,
converted or not, advised or not, the float8 and high-precision GEMMs it ran in one traced step, its SQNR, and
every difference (exit 0 or 1).

- `verifier`: `verify`, its steps in order; `settings`: the request and the advice it is compared with.
- `conversion`: the model converted as the config says (torchao's own swap); `experts`: the routed experts'
  conversion read back and compared.
- `framework_check`: the framework's own loader and converter where it is installed (`native_torchtitan`,
  `native_torchao` for torchao / accelerate / NeMo AutoModel, `native_megatron`; records in `native`), against
  the conversion above.
- `execution`: one traced forward + backward, on the GPU or emulated on the CPU, on the model itself or its
  `shadow` (same names, smaller widths); `trace`: which GEMMs each layer dispatched, float8 or not;
  `numerics`: each converted layer's SQNR against bf16.
- `differences`: what differs from the advice, in the order the report gives it; `report`: the records.
- `megatron_check`: a Megatron-Core precision config instead: which Transformer Engine modules Megatron's
  matcher puts in float8 against the advice; nothing runs.
- `current`: `suggest --current FILE`: which layers a config trains in float8 (read and converted as above)
  and its predicted training step beside the advice's.
"""

from fp8advisor._lazy import lazy_exports

_EXPORTS = {
    "verify": "fp8advisor.verification.verifier",
    "advice_settings": "fp8advisor.verification.settings",
    "VerifyReport": "fp8advisor.verification.report",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
