"""The settings of one suggestion, in one record: what `suggest` is asked, what a config's header keeps, and
what `verify` advises with.

`SuggestRequest` holds each setting once, with its one default, and refuses (`AdvisorError`, exit 2) a value
no run could have, however the request is built (the CLI, a config's header, `verify` merging the two):
`--batch` and `--seq` below 1, a degree (`--tp`, `--ep`) below 1 or above `MAX_DEGREE`, a `--min-speedup`
that is not a finite number in (0, `MAX_MIN_SPEEDUP`], an `--expert-imbalance` below 1. The checks that need
the model (a degree larger than a layer, an `--ep` that does not divide E) are `advise`'s; that float8
all-gather needs tensorwise is `advice.step.StepConfig.check`'s (with "auto", `suggest` chooses among
tensorwise alone).

Every setting that changes what a written file holds is here, so that its check command regenerates it and
`verify` advises with it: the advice's settings, `--expert-imbalance` (the MoE notes state the speedup
range it gives) and `--float8-all-gather` (a flag: the files write FSDP's float8 all-gather switch). The
step model's other options (`--world-size`, `--ac`, `--grad-accum`, `--gpu`) change only the printed step:
the profile `--gpu` chose is pinned by name.

The CLI builds it from `suggest`'s options; the writer (`fp8advisor.emit`) turns it into the regenerate
command of a config's header (`command_words`: a flag alone, only when on); the reader
(`fp8advisor.frameworks.header.read_header`) turns that command back into a request (`from_command`: a
command written before a setting existed reads it as its default); `verify` merges its own command line with
the header's request (`merge_with_header`).
"""

from __future__ import annotations

import math
import numbers
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from fp8advisor.errors import AdvisorError, quote

DEFAULT_BATCH = 1
DEFAULT_SEQ = 8192
#: `--recipe auto`: of the recipes with the strongest figures, the highest predicted step speedup.
AUTO = "auto"

#: The default `min_speedup`: layers predicted to gain less than 1% stay in bf16. The published table is
#: rounded to 0.01, and a layer at a tie gains nothing while float8 still costs it accuracy. The price: where
#: torchao's auto filter or "convert everything" converts a layer predicted between 1.00x and 1.01x, that
#: strategy is predicted faster than the advice, by less than 1% of the layer's time (converting exactly the
#: layers predicted above 1.00x would minimise the predicted Linear time). `suggest` prints the profile's
#: held-out error and, with the shipped evidence profiles, each speedup's interval, marking the layers whose
#: interval holds the threshold uncertain; a team wanting a wider margin raises `--min-speedup` (e.g. 1.05).
DEFAULT_MIN_SPEEDUP = 1.01
#: The largest `--min-speedup`: float8 GEMMs peak at twice bf16's, so no layer gets near it; a larger number
#: is a typo (and would print as hundreds of digits in every reason).
MAX_MIN_SPEEDUP = 100.0
#: The largest parallel degree taken (`--tp`, `--ep`, the step model's `--world-size`): about a million GPUs.
#: A larger number is a typo, and slices and shards of it would round to nothing.
MAX_DEGREE = 1 << 20


def check_positive_int(option: str, value: Any, *, most: int | None = None, hint: str | None = None) -> int:
    """`value` as an int from 1 to `most`, or one `AdvisorError` naming `option` (a bool or a float is not a
    count)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise AdvisorError(f"{option} must be a whole number, not {quote(value)}", hint=hint)
    if value < 1:
        raise AdvisorError(f"{option} must be 1 or more, not {quote(value)}", hint=hint)
    if most is not None and value > most:
        raise AdvisorError(f"{option} must be at most {most:,}, not {quote(value)}", hint=hint)
    return int(value)


def check_degree(option: str, value: Any) -> int:
    """A parallel degree (`--tp`, `--ep`, `--world-size`): an int from 1 to `MAX_DEGREE`."""
    return check_positive_int(
        option, value, most=MAX_DEGREE, hint=f"{option} is a number of GPUs (1: no parallelism), e.g. 8"
    )


def check_min_speedup(value: Any) -> float:
    """`--min-speedup` as a finite number in (0, `MAX_MIN_SPEEDUP`], or one `AdvisorError`."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        number = math.nan
    if isinstance(value, bool) or not (0 < number <= MAX_MIN_SPEEDUP):  # NaN fails every comparison
        raise AdvisorError(
            f"--min-speedup must be a positive number no larger than {MAX_MIN_SPEEDUP:g}, not {quote(value)}",
            hint="the speedup a layer must be predicted to reach to be converted, e.g. 1.05",
        )
    return number


#: setting -> its option on the command line, in the record's order.
OPTIONS = {
    "batch": "--batch",
    "seq": "--seq",
    "recipe": "--recipe",
    "profile": "--profile",
    "min_speedup": "--min-speedup",
    "tensor_parallel": "--tp",
    "measured": "--measured",
    "expert_parallel": "--ep",
    "grouped_profile": "--grouped-profile",
    "expert_imbalance": "--expert-imbalance",
    "float8_all_gather": "--float8-all-gather",
    "context_parallel": "--cp",
    "trace": "--trace",
}
#: The settings that are flags: the option alone means True, and is left out when False.
FLAGS = frozenset({"float8_all_gather"})
#: The order in which the regenerate command names them (files already written keep it).
_COMMAND_ORDER = (
    "batch",
    "seq",
    "recipe",
    "profile",
    "grouped_profile",
    "min_speedup",
    "tensor_parallel",
    "context_parallel",
    "expert_parallel",
    "expert_imbalance",
    "float8_all_gather",
    "measured",
    "trace",
)


@dataclass(frozen=True)
class SuggestRequest:
    """What the user asked `suggest` for, as typed (a name, not a resolved file; "auto", not the recipe it
    chose): a config's header and its regenerate command are built from it alone."""

    target: str  # the TARGET as typed
    batch: int = DEFAULT_BATCH  # sequences per step on one GPU
    seq: int = DEFAULT_SEQ  # tokens per sequence
    recipe: str = AUTO  # a recipe name or "auto"
    profile: str | None = None  # --profile; None: chosen for this GPU type
    min_speedup: float = DEFAULT_MIN_SPEEDUP  # convert a layer when its predicted speedup reaches this
    tensor_parallel: int = 1  # --tp
    measured: str | None = None  # --measured: in-context results; None: found automatically, or none
    expert_parallel: int = 1  # --ep: the routed experts are decided per GPU (E / P experts)
    grouped_profile: str | None = None  # --grouped-profile; None: found automatically, or none
    expert_imbalance: float = 1.0  # MoE: the busiest expert's rows over the mean (1.0: balanced routing)
    float8_all_gather: bool = False  # FSDP all-gathers the converted weights in float8 (tensorwise only)
    context_parallel: int = 1  # --cp: each GPU's layers see 1/cp of every sequence
    trace: str | None = None  # --trace: speedups measured in the job's own traces (`fp8advisor trace -o`)

    @property
    def traced_seq(self) -> int:
        """The tokens per sequence one GPU's layers see: its context-parallel chunk of `seq`."""
        return self.seq // self.context_parallel

    def __post_init__(self) -> None:
        """Refuse a value no run could have (the module docstring), whoever built the request."""
        check_positive_int("--batch", self.batch, hint="sequences per step on one GPU, e.g. 1")
        check_positive_int("--seq", self.seq, hint="tokens per sequence, e.g. 8192")
        check_min_speedup(self.min_speedup)
        check_degree("--tp", self.tensor_parallel)
        check_degree("--ep", self.expert_parallel)
        check_degree("--cp", self.context_parallel)
        if self.context_parallel > 1 and self.seq % (2 * self.context_parallel):
            raise AdvisorError(
                f"--seq {self.seq} is not a multiple of 2 x --cp {self.context_parallel}: context "
                "parallelism gives each GPU two equal chunks of every sequence",
                hint=f"use a --seq that is a multiple of {2 * self.context_parallel} (torchtitan's load "
                "balancing splits each sequence into 2 x cp chunks)",
            )
        check_expert_imbalance(self.expert_imbalance)
        if not isinstance(self.float8_all_gather, bool):
            raise AdvisorError(f"--float8-all-gather is a flag, not {quote(self.float8_all_gather)}")

    def command_words(
        self,
        format_name: str,
        output: str | None = None,
        *,
        chosen_profile: str | None = None,
        chosen_measured: str | None = None,
        chosen_grouped_profile: str | None = None,
    ) -> list[str]:
        """The `fp8advisor suggest` command line that regenerates the file, as words (`--check FILE` verifies
        it). Settings at their default are left out, except batch, seq and recipe, which a reader should see.

        `chosen_profile` pins the profile that was chosen automatically, so that CI on another machine
        (another GPU, or none) predicts with the same figures; `chosen_grouped_profile` likewise the profile
        whose grouped figures predicted the MoE experts, when it is not that profile; `chosen_measured` the
        in-context results found in the profile directory (CI needs that directory: commit a copy, give its
        path).
        """
        pinned = replace(
            self,
            profile=self.profile if self.profile is not None else chosen_profile,
            grouped_profile=self.grouped_profile
            if self.grouped_profile is not None
            else chosen_grouped_profile,
            measured=self.measured if self.measured is not None else chosen_measured,
        )
        words = ["fp8advisor", "suggest", self.target]
        for name in _COMMAND_ORDER:
            value = getattr(pinned, name)
            if name in FLAGS:
                words += [OPTIONS[name]] if value else []
            elif name in ("batch", "seq", "recipe") or (value is not None and value != _DEFAULTS[name]):
                words += [OPTIONS[name], _shown(value)]
        words += ["--format", format_name]
        if output is not None:
            words += ["-o", output]
        return words

    def command(self, format_name: str, output: str | None = None, **chosen: str | None) -> str:
        """`command_words` as one shell line, each word quoted where the shell needs it."""
        return " ".join(shlex.quote(word) for word in self.command_words(format_name, output, **chosen))

    @classmethod
    def from_command(cls, line: str) -> tuple[SuggestRequest, frozenset[str], str | None] | None:
        """The request a regenerate command holds (the inverse of `command`), the settings it names (the
        others are defaults) and its `--format`; None when `line` is no such command (or names a value no
        request takes: `suggest` never writes one)."""
        try:
            words = shlex.split(line)
        except ValueError:
            return None
        if words[:2] != ["fp8advisor", "suggest"] or len(words) < 3:
            return None
        # a flag is followed by the next option, which it does not consume: read as True below
        options = {
            word: value for word, value in zip(words, words[1:], strict=False) if word.startswith("--")
        }
        by_option = {option: name for name, option in OPTIONS.items()}
        values: dict[str, Any] = {}
        try:
            for option, value in options.items():
                if option in by_option:
                    name = by_option[option]
                    values[name] = True if name in FLAGS else _TYPES[name](value)
            request = cls(target=words[2], **values)
        except (ValueError, TypeError, AdvisorError):
            return None
        return request, frozenset(values), options.get("--format")

    def merge_with_header(
        self, given: Mapping[str, Any], written: Mapping[str, Any] | None
    ) -> tuple[SuggestRequest, tuple[str, ...], list[str]]:
        """The settings to advise with: each in `given` (a command line's, None = not given), else the one
        `written` in a config's header (None = not written), else the default. Returns that request, the names
        taken from the header, and one "--option value (header: value)" per setting where the command line
        and the header disagree (the command line wins)."""
        unknown = set(given) - set(OPTIONS)
        if unknown:
            raise TypeError(f"not settings of a SuggestRequest: {', '.join(sorted(unknown))}")
        written = written or {}
        chosen: dict[str, Any] = {}
        from_header, disagreements = [], []
        for name in OPTIONS:
            value, kept = given.get(name), written.get(name)
            if value is None and kept is not None:
                chosen[name] = kept
                from_header.append(name)
            elif value is not None:
                chosen[name] = value
                if kept is not None and value != kept:
                    disagreements.append(f"{OPTIONS[name]} {_shown(value)} (header: {_shown(kept)})")
        return replace(self, **chosen), tuple(from_header), disagreements


def _shown(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def check_expert_imbalance(value: Any) -> float:
    """`--expert-imbalance` as a finite number >= 1 (1.0: balanced routing), or one `AdvisorError`."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        number = math.nan
    if isinstance(value, bool) or not (math.isfinite(number) and number >= 1.0):
        raise AdvisorError(
            f"--expert-imbalance must be a number >= 1.0, not {quote(value)}",
            hint="the busiest expert's rows over the mean: 1.0 is balanced routing, e.g. 1.5",
        )
    return number


_DEFAULTS = {field.name: field.default for field in fields(SuggestRequest)}
_TYPES = {
    "batch": int,
    "seq": int,
    "recipe": str,
    "profile": str,
    "grouped_profile": str,
    "min_speedup": float,
    "tensor_parallel": int,
    "context_parallel": int,
    "expert_parallel": int,
    "measured": str,
    "expert_imbalance": float,
    "trace": str,
}

__all__ = [
    "AUTO",
    "DEFAULT_BATCH",
    "DEFAULT_MIN_SPEEDUP",
    "DEFAULT_SEQ",
    "MAX_DEGREE",
    "MAX_MIN_SPEEDUP",
    "FLAGS",
    "OPTIONS",
    "SuggestRequest",
    "check_degree",
    "check_expert_imbalance",
    "check_min_speedup",
    "check_positive_int",
]
