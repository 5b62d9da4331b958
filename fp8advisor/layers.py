"""Deprecated: moved to `fp8advisor.inspect.layers` (and `.records`, `.recorder`, `.forward`, `.rows`,
`.experts`, `.folding`, `.model_config`); kept for the 0.1 series, with a DeprecationWarning."""

import warnings

from fp8advisor import compat as _compat
from fp8advisor._lazy import forwarded_names
from fp8advisor.inspect import experts as _experts
from fp8advisor.inspect import folding as _folding
from fp8advisor.inspect import forward as _forward
from fp8advisor.inspect import layers as _layers
from fp8advisor.inspect import model_config as _model_config
from fp8advisor.inspect import recorder as _recorder
from fp8advisor.inspect import records as _records
from fp8advisor.inspect import rows as _rows

warnings.warn(
    "fp8advisor.layers moved to fp8advisor.inspect.layers; this name goes after the 0.1 series",
    DeprecationWarning,
    stacklevel=2,
)

#: Private names of the old module that their new home made public.
_RENAMED = {
    "_TracingStopped": "TracingStopped",
    "_GemmCall": "GemmCall",
    "_gemm_ops": "gemm_ops",
    "_make_recorder": "make_recorder",
    "_run_forward": "run_forward",
    "_build_layers": "build_layers",
    "_Trace": "Trace",
    "_stopped_before": "stopped_before",
    "_linear_layer": "linear_layer",
    "_BALANCED_REASON": "BALANCED_REASON",
    "_POSITION_HOLDERS": "CONFIG_HOLDERS",
    "_storage_key": "storage_key",
}


#: The old module's public names (what `from fp8advisor.layers import *` gave).
__all__ = [
    "ExpertForm",
    "ExpertGemm",
    "ExpertGroup",
    "Folded",
    "GemmLayer",
    "LayerStatus",
    "MAX_TOKENS",
    "ModelLayers",
    "TOP_K_NAMES",
    "block_shape",
    "check_tokens",
    "find_expert_groups",
    "fold_repeated",
    "inspect_loaded",
    "inspect_model",
    "max_positions",
    "untraced_expert_weights",
]


__getattr__ = forwarded_names(
    "fp8advisor.layers",
    (_layers, _records, _recorder, _forward, _rows, _experts, _folding, _model_config, _compat),
    _RENAMED,
)
