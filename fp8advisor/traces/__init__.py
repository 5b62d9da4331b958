"""Stage 3b, traces: what a profiler trace of the user's own training says ran, and what float8 bought there.

In: a Chrome/Kineto trace (torch.profiler's `export_chrome_trace`, torchtitan's `profiling` folder), one
rank or several. Out: per step, the device's time split into GEMMs (bf16, float8, grouped), float8 casts,
attention, communication and the rest, each GEMM with its (M, K, N); for two traces of one job (bf16 and
float8), the measured speedup of each shape group and where the step's time went.

- `events`: the streaming reader (`read_trace`) and which files a TRACE names (`trace_files`);
- `kernel_rules`: the one table that says what each kernel is, which `--rules` extends;
- `gemms`: a GEMM's shape from its op's recorded input shapes; `ShapeGroup` ties a layer's three GEMMs;
- `analysis`: the steps and their figures (`analyse`);
- `layer_match`: a model's Linear layers and 3-D expert weights against the trace's GEMMs (did float8 run
  where the config says); `model_linears`: the model and the config read for that check;
- `comparison`: two traces of one job, group by group, and the measured-speedups file `suggest --trace` reads;
- `figures`: the pictures (`--png`).
"""

from fp8advisor._lazy import lazy_exports

_EXPORTS = {
    "read_trace": "fp8advisor.traces.events",
    "trace_files": "fp8advisor.traces.events",
    "analyse": "fp8advisor.traces.analysis",
    "TraceAnalysis": "fp8advisor.traces.analysis",
    "Kind": "fp8advisor.traces.kernel_rules",
    "RULES": "fp8advisor.traces.kernel_rules",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
