"""Text from outside this tool made safe to show or to write: control characters as visible escapes.

A profile's name, a layer name (a `ModuleDict` key can be any string), a path, an environment variable: any of
them can hold a newline, a carriage return, an ANSI escape sequence, a bidirectional override or a NUL.
Written raw into a comment of a generated config, a newline ends the comment and the next line is live code;
printed raw, an escape sequence rewrites the user's terminal. Two functions every such string goes through:

- `visible(text)`: every character that is not printable (`str.isprintable`: Unicode's "Other" and "Separator"
  categories but the space: controls, format characters such as the bidi overrides, surrogates, private-use
  and unassigned code points, line and paragraph separators, odd spaces) as a Python-style escape (`\\n`,
  `\\x1b`, `\\u202e`); a backslash stays itself. The result is one line of printable text: safe in a `#`
  comment of Python, TOML and YAML, and on a terminal. `keep` names characters left as they are (a terminal
  keeps `\\n` and `\\t`).
- `string_literal(text)`: a double-quoted string literal that Python, TOML and YAML all read back as exactly
  `text` (printable ASCII as itself, everything else as `\\uXXXX` / `\\UXXXXXXXX`); a lone surrogate, which
  TOML and YAML cannot hold, is refused.
"""

from __future__ import annotations

from fp8advisor.errors import AdvisorError, quote

_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(character: str) -> str:
    if character in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[character]
    code = ord(character)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(text: str, keep: str = "") -> str:
    """`text` with each character that is not printable (see the module docstring) but those in `keep`
    written as an escape; printable text (any script, emoji) is unchanged."""
    text = str(text)
    if text.isprintable():
        return text  # the common case, at the speed of one C loop
    return "".join(c if c.isprintable() or c in keep else _escape(c) for c in text)


def string_literal(text: str) -> str:
    """A double-quoted literal of `text` valid in Python, TOML and YAML alike (module docstring)."""
    parts = ['"']
    for character in text:
        code = ord(character)
        if character in '"\\':
            parts.append("\\" + character)
        elif 0x20 <= code < 0x7F:
            parts.append(character)
        elif 0xD800 <= code < 0xE000:
            raise AdvisorError(
                f"cannot write the string {quote(text)}: it holds a lone surrogate (U+{code:04X}), which "
                "TOML and YAML cannot hold",
                hint="rename the module or value so that its name is valid Unicode text",
            )
        else:
            parts.append(f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    parts.append('"')
    return "".join(parts)


__all__ = ["string_literal", "visible"]
