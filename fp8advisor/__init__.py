"""fp8advisor: measure where FP8 training pays, and say exactly which Linear layers to convert.

The pipeline, one stage package each (every `__init__` says what comes in and what goes out):

    inspect -> frameworks -> measure -> traces -> predict -> advice -> emit -> verification      (cli on top)

    model ----> layers (inspect_model) --------------------> advise --> render --> verify
    bench (run_sweep) --> results --> fit_profile --> Profile ---^
    your training's profiler traces --> traces (what ran; measured speedups) ---^

The names below are the public API; each is imported on first use, so `import fp8advisor` stays cheap. A
walk-through is in docs/api.md.
"""

from fp8advisor._lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    # the request: the settings of one suggestion
    "SuggestRequest": "fp8advisor.request",
    # inspect: a model on the meta device -> its GEMM-bearing layers
    "load_model": "fp8advisor.inspect.target",
    "inspect_model": "fp8advisor.inspect.layers",
    "ModelLayers": "fp8advisor.inspect.records",
    # frameworks: the config formats and their reader
    "ConfigFormat": "fp8advisor.frameworks.formats",
    "read_config": "fp8advisor.frameworks.reader",
    # measure: sweep a grid on this GPU (or emulated on the CPU)
    "BenchSettings": "fp8advisor.measure.protocol",
    "make_grid": "fp8advisor.measure.linear",
    "run_sweep": "fp8advisor.measure.sweep",
    # predict: profiles and the speedups they predict
    "Profile": "fp8advisor.predict.profile",
    "load_profile": "fp8advisor.predict.profile_files",
    "select_profile": "fp8advisor.predict.selection",
    "fit_profile": "fp8advisor.predict.fit",
    "load_measurements": "fp8advisor.predict.measurements",
    "predict_speedup": "fp8advisor.predict.speedup",
    "get_specs": "fp8advisor.gpus",
    # advice: the decisions and the training step
    "Advice": "fp8advisor.advice.records",
    "advise": "fp8advisor.advice.decide",
    "predict_step": "fp8advisor.advice.step",
    "step_report": "fp8advisor.advice.step_comparison",
    "StepConfig": "fp8advisor.advice.step",
    "StepGpu": "fp8advisor.advice.step",
    # emit: the config file
    "render": "fp8advisor.emit.config_file",
    "write": "fp8advisor.emit.config_file",
    "check": "fp8advisor.emit.config_file",
    # verification: does a config do what the advice says
    "verify": "fp8advisor.verification.verifier",
    "advice_settings": "fp8advisor.verification.settings",
}

__all__ = ["__version__", *sorted(_EXPORTS)]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
