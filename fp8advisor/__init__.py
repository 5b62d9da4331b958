"""fp8advisor: measure where FP8 training pays, and say exactly which Linear layers to convert.

The data flow is the architecture:
  bench -> results -> fit -> profile            (fp8advisor.bench, .results, .fit, .profile)
  model -> layers -> decisions -> configs       (fp8advisor.target, .layers, .advise, .emit)
and `verify` closes the loop by converting the model as a config says and tracing what really ran.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
