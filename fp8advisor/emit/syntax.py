"""The comment and literal syntax every writer shares: `#` comment blocks, comment paragraphs wrapped to 110
columns, double-quoted strings valid in TOML and Python, and the lines of a string list.
"""

from __future__ import annotations

import json
import textwrap


def comment(lines: list[str]) -> str:
    """`lines` as `# ` comment lines (an empty line as a bare `#`)."""
    return "".join(f"# {line}\n" if line else "#\n" for line in lines)


def quoted(text: str) -> str:
    """A double-quoted string valid in TOML and Python (JSON escapes are valid in both)."""
    return json.dumps(text)


def string_list_lines(entries: tuple[str, ...] | list[str], indent: str) -> str:
    """One `"entry",` line per entry, each indented by `indent`."""
    return "".join(f"{indent}{quoted(entry)},\n" for entry in entries)


def wrapped(text: str, indent: str = "  ") -> list[str]:
    """One comment paragraph, wrapped to fit 110 columns with its comment marker."""
    return textwrap.wrap(text, width=106, subsequent_indent=indent, break_on_hyphens=False)


__all__ = ["comment", "quoted", "string_list_lines", "wrapped"]
