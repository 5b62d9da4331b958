"""The comment and literal syntax every writer shares: `#` comment blocks, comment paragraphs wrapped to 110
columns, double-quoted strings valid in TOML, Python and YAML, and the lines of a string list.

Every string from outside this tool (a layer name, a profile's name, a path) reaches a generated file through
`comment`, `quoted` or `in_docstring` only: a comment line shows each control character as an escape
(`fp8advisor.untrusted.visible`), so that no field can end its comment; a string literal escapes every
character but printable ASCII (`fp8advisor.untrusted.string_literal`), so that no field can leave its string;
and a docstring's text has its backslashes and quotes escaped too.
"""

from __future__ import annotations

import textwrap

from fp8advisor.untrusted import string_literal, visible


def comment(lines: list[str]) -> str:
    """`lines` as `# ` comment lines (an empty line as a bare `#`), each one line whatever it holds."""
    return "".join(f"# {visible(line)}\n" if line else "#\n" for line in lines)


def in_docstring(text: str) -> str:
    """`text` as it may stand inside a generated file's triple-quoted docstring: one line of printable text
    (`visible`), with backslashes and quotes escaped, so that it can neither end the docstring nor make an
    invalid escape."""
    return visible(text).replace("\\", "\\\\").replace('"', '\\"')


def quoted(text: str) -> str:
    """A double-quoted string that TOML, Python and YAML read back as `text`."""
    return string_literal(text)


def string_list_lines(entries: tuple[str, ...] | list[str], indent: str) -> str:
    """One `"entry",` line per entry, each indented by `indent`."""
    return "".join(f"{indent}{quoted(entry)},\n" for entry in entries)


def exact_set_literal(fqns: tuple[str, ...]) -> str:
    """The frozenset literal of `fqns`, one per line in their order, as Python source."""
    if not fqns:
        return "frozenset()"
    return "frozenset(\n    {\n" + string_list_lines(fqns, " " * 8) + "    }\n)"


def wrapped(text: str, indent: str = "  ") -> list[str]:
    """One comment paragraph, wrapped to fit 110 columns with its comment marker."""
    return textwrap.wrap(text, width=106, subsequent_indent=indent, break_on_hyphens=False)


__all__ = ["comment", "exact_set_literal", "in_docstring", "quoted", "string_list_lines", "wrapped"]
