"""What each device kernel of a profiler trace is: one ordered table of rules, which a user can extend.

A kernel is classified by the first rule that matches it, looking at the CPU-side op that launched it (tied
through the trace's correlation ids, `fp8advisor.traces.events`) and at the kernel's own name. Op rules come
first (after memcpy and memset, which cuBLAS runs under its GEMM's op): `aten::_scaled_mm` is a float8 GEMM
whatever cuBLAS calls its kernel. Kernel-name rules cover kernels with no op (CUDA graphs, a trace recorded
without CPU activity) and the code torch.compile generates, whose Triton kernels are named after the ops they
fuse (`triton_per_fused__to_copy_abs_clamp_max_mul_reciprocal_3`: an amax and a cast to float8).

`--rules FILE` (TOML, `[[rule]]` tables with `kind`, `op` or `kernel` (a Python regular expression, searched,
case-sensitive) and an optional `source`) puts the user's rules before these.

Where a rule's names come from is its `source`. The float8 GEMM names: cuBLASLt's `sm90_xmma_gemm_e4m3...` and
`nvjet_sm90_qq...` (`qq`: e4m3 x e4m3, `qr`: e4m3 x e5m2; bf16 GEMMs are `nvjet_sm90_tst...`, seen in this
project's H200 traces, data/results/h200-2026-11-26/traces), CUTLASS's rowwise `f8f8bf16_rowwise` (fbgemm) and
torch's `cutlass::float_e4m3_t` instantiations.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from fp8advisor.errors import TraceError, quote
from fp8advisor.reading import parse_toml, read_text


class Kind(str, Enum):
    """What a kernel does, as the trace reader reports it."""

    FLOAT8_GEMM = "float8 GEMM"
    FLOAT8_GROUPED_GEMM = "float8 grouped GEMM"
    GROUPED_GEMM = "grouped GEMM"
    GEMM = "bf16/fp32 GEMM"  # any high-precision GEMM: bf16, fp16, fp32, tf32
    FLOAT8_CAST = "float8 cast"  # amax, scale and cast kernels that feed a float8 GEMM
    FUSED_CAST = "fused float8 cast"  # a cast the compiler fused into other work (a norm, an activation)
    ATTENTION = "attention"
    COMMUNICATION = "communication"
    MEMORY = "memcpy/memset"
    OTHER = "other"

    def __str__(self) -> str:
        return self.value

    @property
    def is_gemm(self) -> bool:
        return self in GEMM_KINDS

    @property
    def is_float8_gemm(self) -> bool:
        return self in (Kind.FLOAT8_GEMM, Kind.FLOAT8_GROUPED_GEMM)


GEMM_KINDS = frozenset({Kind.FLOAT8_GEMM, Kind.FLOAT8_GROUPED_GEMM, Kind.GROUPED_GEMM, Kind.GEMM})


@dataclass(frozen=True)
class Rule:
    """`kind` for a kernel whose launching op (`on == "op"`) or own name (`on == "kernel"`) matches."""

    kind: Kind
    on: str  # "op" or "kernel"
    pattern: str
    source: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "_regex", re.compile(self.pattern))

    def matches(self, op_name: str | None, kernel_name: str) -> bool:
        text = op_name if self.on == "op" else kernel_name
        return text is not None and self._regex.search(text) is not None  # type: ignore[attr-defined]


_ATEN = "aten (native_functions.yaml)"
_INDUCTOR = "torch.compile (inductor) names a Triton kernel after the ops it fuses"

#: The rules, first match wins: memcpy / memset records, op rules, then kernel-name rules.
RULES: tuple[Rule, ...] = (
    # Copies and fills first: cuBLAS's workspace memset carries its GEMM op's id
    Rule(Kind.MEMORY, "kernel", r"^(Memcpy|Memset)\b", "CUPTI's memcpy / memset records"),
    # The launching op (record_shapes or not, the op's name is always there)
    Rule(Kind.FLOAT8_GROUPED_GEMM, "op", r"^aten::_scaled_grouped_mm", _ATEN),
    Rule(Kind.FLOAT8_GEMM, "op", r"^aten::_scaled_mm", _ATEN),
    Rule(Kind.GROUPED_GEMM, "op", r"^aten::_grouped_mm", _ATEN),
    Rule(Kind.GEMM, "op", r"^aten::(mm|addmm|bmm|baddbmm|addbmm|matmul|linear|_addmm_activation)$", _ATEN),
    Rule(
        Kind.ATTENTION,
        "op",
        r"^aten::(_scaled_dot_product|_flash_attention|_efficient_attention|_cudnn_attention|"
        r"scaled_dot_product_attention|_fused_sdp)",
        _ATEN,
    ),
    Rule(
        Kind.COMMUNICATION,
        "op",
        r"^(c10d::|nccl:|record_param_comms|_c10d_functional::)",
        "torch.distributed",
    ),
    # The kernel's own name
    Rule(Kind.COMMUNICATION, "kernel", r"(?i)nccl", "NCCL kernels: ncclDevKernel_*, ncclKernel_*"),
    Rule(
        Kind.FLOAT8_GROUPED_GEMM,
        "kernel",
        r"(?i)(grouped|group_gemm|ptr_array).*(e4m3|e5m2|f8f8|fp8)|(e4m3|e5m2|f8f8|fp8).*(grouped|ptr_array)",
        "CUTLASS grouped GEMM instantiations on float8 operands",
    ),
    Rule(
        Kind.FLOAT8_GEMM,
        "kernel",
        r"^nvjet_sm\d+_[qr][qr]|(?i:gemm.*(e4m3|e5m2)|(e4m3|e5m2).*gemm|f8f8bf16|float_e4m3_t|float_e5m2_t)",
        "cuBLASLt sm90_xmma_gemm_e4m3*, nvjet_sm90_qq*/qr*; CUTLASS f8f8bf16_rowwise, cutlass::float_e4m3_t",
    ),
    Rule(
        Kind.ATTENTION,
        "kernel",
        r"(?i)flash|fmha|sdpa|attention|cudnn::fusion::(compute_dot_do_o|convert_dq)",
        "FlashAttention, xFormers/PyTorch mem-efficient (fmha), cuDNN SDPA and its helper kernels",
    ),
    Rule(
        Kind.FUSED_CAST,
        "kernel",
        r"^triton_(?=\w*?(abs_max|amax|_scaled_mm|float8|fp8|clamp\w*reciprocal|reciprocal\w*clamp))"
        r"(?=\w*?_(_?fused_rms_norm|native_layer_norm|layer_norm|rms_norm|silu|gelu|relu|add|embedding|"
        r"log_softmax|nll_loss|cos|sin|arange|mean|sum)(_|$))",
        _INDUCTOR
        + ": a cast fused with a norm, activation, residual add or rotary embedding, which bf16 runs "
        "too (its whole time is counted here)",
    ),
    Rule(
        Kind.FLOAT8_CAST,
        "kernel",
        r"^triton_\w*?(abs_max|amax|_scaled_mm|float8|fp8|reciprocal\w*clamp|clamp\w*reciprocal)",
        _INDUCTOR + ": abs + max (amax), clamp + reciprocal (scale), fused into a _scaled_mm's input",
    ),
    Rule(
        Kind.FLOAT8_CAST,
        "kernel",
        r"(?i)(to_fp8|to_float8|fp8_cast|to_mxfp8|quantize.*fp8|Float8_e4m3|Float8_e5m2|float8_e4m3)",
        "torchao's own cast kernels (triton_fp8_*, to_mxfp8) and ATen elementwise kernels on a Float8 type",
    ),
    Rule(Kind.GROUPED_GEMM, "kernel", r"(?i)grouped_gemm|group_gemm|ptr_array", "CUTLASS grouped GEMMs"),
    Rule(
        Kind.GEMM,
        "kernel",
        r"(?i)gemm|^nvjet_|xmma|cutlass.*(tensorop|wgmma|sm\d0)|^triton_tem_fused_(mm|addmm|bmm)|"
        r"s16816|s1688|s884|splitKreduce",
        "cuBLAS (ampere_*gemm*, sm80_xmma_gemm*, volta_*gemm*, nvjet_*), CUTLASS, inductor GEMM templates",
    ),
)


def classify(op_name: str | None, kernel_name: str, rules: Sequence[Rule] = RULES) -> Kind:
    """The kind of the first rule that matches; OTHER when none does."""
    for rule in rules:
        if rule.matches(op_name, kernel_name):
            return rule.kind
    return Kind.OTHER


def op_pattern(rules: Iterable[Rule]) -> re.Pattern[str]:
    """One regular expression for every op a rule looks at: the trace reader keeps only these ops."""
    patterns = [rule.pattern for rule in rules if rule.on == "op"]
    return re.compile("|".join(f"(?:{pattern})" for pattern in patterns) or r"(?!)")


_KINDS = {kind.name.lower(): kind for kind in Kind}


def load_rules(path: str | Path) -> tuple[Rule, ...]:
    """The user's rules from a TOML file (module docstring), followed by the built-in ones."""
    text = read_text(path, "rules file", error=TraceError, hint="check the path given to --rules")
    data = parse_toml(text, path, error=TraceError)
    entries = data.get("rule")
    if not isinstance(entries, list) or not entries:
        raise TraceError(
            f"{path} holds no [[rule]] table",
            hint='write e.g. [[rule]] kind = "float8_gemm" kernel = "my_fp8_gemm" (kinds: '
            + ", ".join(_KINDS)
            + ")",
        )
    return (*(_user_rule(entry, path, number) for number, entry in enumerate(entries, 1)), *RULES)


def _user_rule(entry: object, path: str | Path, number: int) -> Rule:
    where = f"{path}: rule {number}"
    if not isinstance(entry, dict):
        raise TraceError(f"{where} is not a table", hint="write each rule as a [[rule]] table")
    kind = _KINDS.get(str(entry.get("kind", "")).lower())
    if kind is None:
        raise TraceError(
            f"{where}: unknown kind {quote(entry.get('kind'))}", hint="use one of: " + ", ".join(_KINDS)
        )
    fields = [name for name in ("op", "kernel") if name in entry]
    if len(fields) != 1 or not isinstance(entry[fields[0]], str):
        raise TraceError(f'{where} needs exactly one of op = "REGEX" or kernel = "REGEX"')
    try:
        return Rule(kind, fields[0], entry[fields[0]], str(entry.get("source", f"{path}")))
    except re.error as failure:
        raise TraceError(
            f"{where}: {quote(entry[fields[0]])} is not a regular expression: {failure}"
        ) from None


__all__ = ["GEMM_KINDS", "RULES", "Kind", "Rule", "classify", "load_rules", "op_pattern"]
