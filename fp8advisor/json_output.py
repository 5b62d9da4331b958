"""Every JSON document this tool prints or writes goes through `dumps`: valid JSON, always.

Python's `json.dumps` writes `NaN`, `Infinity` and `-Infinity` for non-finite floats by default, which no
JSON parser but Python's accepts (`jq`, JavaScript, Go and Rust refuse the whole document). Here:

- a non-finite float becomes `null`, the JSON for "no figure", and the document is then encoded with
  `allow_nan=False`, so that nothing non-finite can get through by another path. The readers of this tool's
  own files refuse figures out of their range before anything is computed from them (`fp8advisor.fields`,
  `fp8advisor.predict.profile_schema`), so a null in a printed document means a figure that overflowed,
  never a made-up value;
- tuples are written as lists, and any other value JSON cannot hold is a `TypeError` (a bug of ours: the
  CLI says so, exit 70, and shows its traceback with --debug);
- strings keep JSON's own escapes: every control character is written as `\\uXXXX` (with `ensure_ascii`,
  the default, every non-ASCII character too), so a printed document is one inert text on a terminal.

`print_document` writes one document to stdout as plain text (no Rich markup, highlighting or wrapping).
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any


def finite_or_null(value: Any) -> Any:
    """`value` with every non-finite float (at any depth of dicts, lists and tuples) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite_or_null(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_null(item) for item in value]
    return value


def dumps(
    document: Any, *, indent: int | None = None, sort_keys: bool = False, ensure_ascii: bool = True
) -> str:
    """`document` as JSON text: non-finite floats as null, then `allow_nan=False` (module docstring)."""
    return json.dumps(
        finite_or_null(document),
        indent=indent,
        sort_keys=sort_keys,
        ensure_ascii=ensure_ascii,
        allow_nan=False,
    )


def print_document(document: Any, *, indent: int = 2) -> None:
    """`document` on stdout as one JSON text (`dumps`) and a newline; plain text, no Rich rendering."""
    sys.stdout.write(dumps(document, indent=indent) + "\n")
    sys.stdout.flush()


__all__ = ["dumps", "finite_or_null", "print_document"]
