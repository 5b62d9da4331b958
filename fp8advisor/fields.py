"""The rules for the fields of a document this tool reads back (a profile, a results file): what a name, a
free text, a size, a time or a figure may be.

A file is checked field by field as it is read, before anything uses it: a value of the wrong type, out of
its range, not finite, or a string that could leave its place when it is printed or written into a
generated file is refused there, with the field's place in the document (`at("recipes", "rowwise",
"points", 3, "speedup")` -> `recipes.rowwise.points[3].speedup`). Each check returns None when the value is
fine, else what is wrong, in words a message can quote; the reader raises its own error class with it.

- `name_problem`: a plain name, the rule for a name the tool WRITES (`fit --name`, which is also a file
  name): letters, digits and `._+-`, starting with a letter or a digit, at most `MAX_NAME_CHARS`; no space,
  no path separator, no control character.
- `read_name_problem`: a safe name, the rule for a name the tool READS (a profile's `name` field, a
  `--profile NAME` looked up in a profile directory), wider than the plain name so that profiles named by
  older versions (`my h100 (table)`) still read: printable text (`str.isprintable`, the space allowed: no
  control character, line break or separator) of 1 to `MAX_READ_NAME_CHARS` characters, not blank, no
  path separator (`/`, `\\`), not `.` or `..` (so `<name>.json` stays inside its directory), not starting
  with `-` (it is written as `--profile NAME` in a config header's check command, and must not read as an
  option there).
- `text_problem`: free text (a device name, a source, a method, a note): a string of printable characters
  only (`str.isprintable`, the space allowed: no newline, carriage return, tab, escape, NUL, bidirectional
  override, line or paragraph separator) of at most `limit` characters.
- `size_problem`, `time_problem`, `number_problem`, `integer_problem`: a positive integer up to `MAX_SIZE`
  (not a bool, not a float); a time in seconds within [`MIN_TIME_S`, `MAX_TIME_S`]; a finite real number (not
  a bool, not a string) within a range; an integer within a range.
"""

from __future__ import annotations

import math
import re
from typing import Any

from fp8advisor.errors import quote

#: The longest plain name (a profile's name as `fit` writes it).
MAX_NAME_CHARS = 100
#: The longest name read (a profile's name as an older `fit` may have written it: a file name of at most 255
#: bytes, `<name>.json`, holds no longer name).
MAX_READ_NAME_CHARS = 255
#: The longest free text of a short field (a device name, a date, a software version).
SHORT_TEXT_CHARS = 200
#: The longest free text of a long field (a profile's source or method, a results header's method).
LONG_TEXT_CHARS = 65536
#: The largest GEMM dimension (M, K, N, E, M per expert) a profile or a results file may hold: far beyond
#: any layer (2**40 rows is a trillion tokens).
MAX_SIZE = 2**40
#: The range of a measured or predicted time in seconds (a kernel, an iteration, a layer's fwd+bwd): no GPU
#: kernel takes under a nanosecond, none of a benchmark takes 11 days.
MIN_TIME_S, MAX_TIME_S = 1e-9, 1e6

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


def at(*parts: str | int) -> str:
    """The place of a field: `at("recipes", "rowwise", "points", 3)` -> "recipes.rowwise.points[3]"."""
    place = ""
    for part in parts:
        if isinstance(part, int):
            place += f"[{part}]"
        else:
            place += f".{part}" if place else str(part)
    return place


def name_problem(value: Any, what: str = "name") -> str | None:
    """None when `value` is a plain name (module docstring), else why not."""
    if not isinstance(value, str):
        return f"{what} is {quote(value)}, not a string"
    if len(value) > MAX_NAME_CHARS:
        return f"{what} is {len(value)} characters long: not a plain name (at most {MAX_NAME_CHARS})"
    if _NAME.fullmatch(value) is None:
        return (
            f"{what} {quote(value)} is not a plain name (letters, digits and . _ + -, starting with a letter "
            "or a digit: no space, path separator or control character)"
        )
    return None


def read_name_problem(value: Any, what: str = "name") -> str | None:
    """None when `value` is a safe name to read (module docstring: printable, bounded, no path separator,
    not `.`/`..`, not starting with `-`), else why not."""
    if not isinstance(value, str):
        return f"{what} is {quote(value)}, not a string"
    if len(value) > MAX_READ_NAME_CHARS:
        return f"{what} is {len(value)} characters long (at most {MAX_READ_NAME_CHARS})"
    if not value.strip():
        return f"{what} is {quote(value)}: empty"
    if not value.isprintable():
        bad = next(c for c in value if not c.isprintable())
        return f"{what} holds the control character U+{ord(bad):04X}: {quote(value)}"
    if "/" in value or "\\" in value or value in (".", ".."):
        return f"{what} {quote(value)} is a path, not a name (no / or \\, not . or ..)"
    if value.startswith("-"):
        return f"{what} {quote(value)} starts with -: it would read as an option (--profile {value})"
    return None


def text_problem(value: Any, what: str, limit: int = SHORT_TEXT_CHARS) -> str | None:
    """None when `value` is free text of at most `limit` printable characters (module docstring)."""
    if not isinstance(value, str):
        return f"{what} is {quote(value)}, not a string"
    if len(value) > limit:
        return f"{what} is {len(value)} characters long (at most {limit})"
    if not value.isprintable():
        bad = next(c for c in value if not c.isprintable())
        return f"{what} holds the control character U+{ord(bad):04X}: {quote(value)}"
    return None


def is_real(value: Any) -> bool:
    """A JSON number: an int or a float, not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def number_problem(value: Any, what: str, low: float, high: float, *, low_open: bool = False) -> str | None:
    """None when `value` is a finite number in [low, high] ((low, high] with `low_open`), else why not."""
    if not is_real(value):
        return f"{what} is {quote(value)}, not a number"
    if isinstance(value, int) and abs(value) > 2**63:  # float() of a huge int overflows
        return f"{what} is {quote(value)}, out of range ({low:g} to {high:g})"
    if not math.isfinite(value):
        return f"{what} is {value}, not a finite number"
    if value <= 0 and (low > 0 or low_open):
        return f"{what} is {quote(value)}, not positive (range: {low:g} to {high:g})"
    if value < low or value > high or (low_open and value == low):
        bound = f"above {low:g}" if low_open else f"{low:g}"
        return f"{what} is {quote(value)}, out of range ({bound} to {high:g})"
    return None


def integer_problem(value: Any, what: str, low: int, high: int) -> str | None:
    """None when `value` is an integer (not a bool, not a float) in [low, high], else why not."""
    if isinstance(value, bool) or not isinstance(value, int):
        return f"{what} is {quote(value)}, not an integer"
    if not low <= value <= high:
        return f"{what} is {quote(value)}, out of range ({low} to {high})"
    return None


def size_problem(value: Any, what: str) -> str | None:
    """None when `value` is a GEMM dimension: a positive integer up to `MAX_SIZE`, else why not."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return f"{what} is {quote(value)}, not a positive integer"
    if value > MAX_SIZE:
        return f"{what} is {quote(value)}: larger than any GEMM (at most 2**40)"
    return None


def time_problem(value: Any, what: str) -> str | None:
    """None when `value` is a time in seconds within [`MIN_TIME_S`, `MAX_TIME_S`], else why not."""
    return number_problem(value, what, MIN_TIME_S, MAX_TIME_S)


__all__ = [
    "LONG_TEXT_CHARS",
    "MAX_NAME_CHARS",
    "MAX_READ_NAME_CHARS",
    "MAX_SIZE",
    "MAX_TIME_S",
    "MIN_TIME_S",
    "SHORT_TEXT_CHARS",
    "at",
    "integer_problem",
    "is_real",
    "name_problem",
    "number_problem",
    "read_name_problem",
    "size_problem",
    "text_problem",
    "time_problem",
]
