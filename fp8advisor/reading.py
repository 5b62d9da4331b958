"""Reading the user's files: one place every input file goes through, and the parsers of what they hold.

Files (`check_regular_file`, `read_bytes`, `read_text`):

- Only regular files are read: a FIFO, a device (`/dev/null`, `/dev/zero`), a socket or a directory is
  refused before it is read (the file is opened without blocking and checked again once open, so a file
  swapped for a pipe in between is refused too), so that nothing waits forever on a pipe or reads an endless
  device.
- A file larger than `MAX_INPUT_BYTES` (or the caller's smaller `max_bytes`: `MAX_CONFIG_BYTES` for a
  config) is refused: every input this tool reads (a config, a model's source, a profile, a results file) is
  a few megabytes at most.
- Text (`decode_text`) is UTF-8; a byte-order mark (as Excel and some Windows editors write it) is dropped;
  a file that is not UTF-8 text, or holds a NUL byte (no config, source, table or JSON file does), is refused
  with the line of its first bad byte.

Parsers (`parse_json`, `parse_toml`, `parse_yaml`), each bounded so that a small file cannot make unbounded
work: a document nested deeper than `MAX_NESTING` is refused (no RecursionError), and YAML, whose aliases can
expand a few hundred bytes into billions of values ("billion laughs"), is composed by a loader that counts
every value as expanded and refuses a document of more than `MAX_YAML_VALUES`, or an alias inside its own
anchor. YAML is read with the safe loader's types only (no Python tags). A key or a value holding a NUL
character, written as an escape (`"\\u0000"`, YAML's `"\\0"`), is refused as the raw byte is. A syntax error
is one line: what, the line and column, a hint (PyYAML's block of lines with its "<unicode string>" marks is
rewritten, `_yaml_error`).

Every file read is noted as an input of this process (`files.note_input`): no `-o` writes over it.
Every refusal is an `AdvisorError` of the caller's class (`error=`), naming the file and saying what to do.
"""

from __future__ import annotations

import functools
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from fp8advisor.errors import AdvisorError, quote
from fp8advisor.files import absolute, note_input

#: The largest input file read (bytes). The largest real input, a results file of a full sweep, is a few MB.
MAX_INPUT_BYTES = 64 * 1024 * 1024
#: The largest config file read (a filter list of every Linear of the largest model is well under 1 MiB).
MAX_CONFIG_BYTES = 16 * 1024 * 1024
#: The deepest nesting of lists and mappings a parsed document may have (real configs: under 10).
MAX_NESTING = 100
#: The most values (scalars, lists, mappings) a YAML document may hold, its aliases expanded.
MAX_YAML_VALUES = 250_000

_BOM = b"\xef\xbb\xbf"


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _refuse_kind(path: Path, what: str, mode: int, error: type[AdvisorError]) -> AdvisorError:
    return error(
        f"{what} {path} is {_kind(mode)}, not a file: refusing to read it",
        hint=f"give the {what} as a regular file (not a pipe, a device or a directory)",
    )


def _refuse_size(path: Path, what: str, size: int, limit: int, error: type[AdvisorError]) -> AdvisorError:
    return error(
        f"{what} {path} is {size / 2**20:.1f} MiB: larger than any {what} this tool reads "
        f"({limit / 2**20:.0f} MiB at most)",
        hint=f"check that this is the {what} you meant",
    )


def check_regular_file(
    path: str | Path,
    what: str,
    *,
    error: type[AdvisorError] = AdvisorError,
    max_bytes: int = MAX_INPUT_BYTES,
    hint: str = "check the path",
) -> Path:
    """`path` when it names an existing regular file (symlinks followed) of at most `max_bytes`;
    otherwise `error`. `what` names the file in the message ("config file", "profile", "model file");
    `hint` is said when the file is missing or cannot be looked at."""
    path = Path(path)
    try:
        info = os.stat(absolute(path))  # relative to where the command started (`files.command_scope`)
    except FileNotFoundError:
        raise error(f"no such {what}: {path}", hint=hint) from None
    except (OSError, ValueError) as failure:  # ValueError: a NUL byte in the name
        raise error(
            f"cannot read {what} {path}: {getattr(failure, 'strerror', None) or failure}", hint=hint
        ) from None
    if not stat.S_ISREG(info.st_mode):
        raise _refuse_kind(path, what, info.st_mode, error)
    if info.st_size > max_bytes:
        raise _refuse_size(path, what, info.st_size, max_bytes, error)
    return path


def read_bytes(
    path: str | Path,
    what: str,
    *,
    error: type[AdvisorError] = AdvisorError,
    max_bytes: int = MAX_INPUT_BYTES,
    hint: str = "check the path",
) -> bytes:
    """The bytes of the regular file at `path` (see `check_regular_file`). The file is opened without
    blocking and checked again once open: a file replaced by a pipe after the check is refused, not waited
    on."""
    path = check_regular_file(path, what, error=error, max_bytes=max_bytes, hint=hint)
    flags = (
        os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    )
    try:
        descriptor = os.open(absolute(path), flags)
    except OSError as failure:
        raise error(f"cannot read {what} {path}: {failure.strerror or failure}", hint=hint) from None
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):  # swapped after the check
            raise _refuse_kind(path, what, info.st_mode, error)
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(descriptor, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as failure:
        raise error(f"cannot read {what} {path}: {failure.strerror or failure}", hint=hint) from None
    finally:
        os.close(descriptor)
    if size > max_bytes:  # it grew after the check
        raise _refuse_size(path, what, size, max_bytes, error)
    note_input(path)  # an input is never written over (`files.write_atomic`)
    return b"".join(chunks)


def decode_text(data: bytes, path: str | Path, what: str, *, error: type[AdvisorError] = AdvisorError) -> str:
    """`data` decoded as UTF-8 without a leading byte-order mark; `error` names the first bad byte's line
    (a byte that is not UTF-8, or a NUL byte: binary data, not text)."""
    if data.startswith(_BOM):
        data = data[len(_BOM) :]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as failure:
        line = data.count(b"\n", 0, failure.start) + 1
        raise error(
            f"{what} is not UTF-8 text (byte {failure.start}, line {line}: binary or another encoding?)",
            hint=f"give a UTF-8 text {what}",
            location=str(path),
        ) from None
    nul = text.find("\0")
    if nul >= 0:
        line, column = text.count("\n", 0, nul) + 1, nul - text.rfind("\n", 0, nul)
        raise error(
            f"{what} holds a NUL byte (line {line}, column {column}): binary data, not text",
            hint=f"give a UTF-8 text {what}; remove the NUL byte",
            location=f"{path}:{line}",
        )
    return text


def read_text(
    path: str | Path,
    what: str,
    *,
    error: type[AdvisorError] = AdvisorError,
    max_bytes: int = MAX_INPUT_BYTES,
    hint: str = "check the path",
) -> str:
    """The text of the regular file at `path`: UTF-8, a byte-order mark dropped (see the module docstring)."""
    data = read_bytes(path, what, error=error, max_bytes=max_bytes, hint=hint)
    return decode_text(data, path, what, error=error)


# ----------------------------------------------------------------------------------------------------
# Parsers


def _too_deep(path: str | Path, kind: str, error: type[AdvisorError]) -> AdvisorError:
    return error(
        f"{kind} nested more than {MAX_NESTING} levels deep: not a config this tool reads",
        hint="check that this is the file you meant",
        location=str(path),
    )


#: A NUL written as an escape, in JSON ("\u0000"), TOML ("\u0000", "\U00000000") or YAML ("\0", "\x00").
_NUL_ESCAPE = re.compile(r"\\(?:u0000|U00000000|x00|0(?![0-9]))")


def _one_line(text: object) -> str:
    """A parser's message on one line: its lines joined, runs of spaces made one (PyYAML writes a block of
    lines with the input's name and marks)."""
    return " ".join(str(text).split())


def check_nesting(
    value: Any,
    path: str | Path,
    kind: str,
    *,
    error: type[AdvisorError] = AdvisorError,
    text: str | None = None,
) -> Any:
    """`value` (parsed lists, tuples and mappings) when it nests at most `MAX_NESTING` levels and no string
    in it (a key or a value) holds a NUL character (written as an escape: the raw byte is refused by
    `decode_text`); else `error`, located at the first NUL escape in `text` when given. Walked without
    recursion, each container once (a YAML alias shared by many places is walked once)."""
    stack, seen = [(value, 1)], set()
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str) and "\0" in item:
            raise _nul_value(item, path, kind, error, text)
        if not isinstance(item, (list, tuple, dict)) or id(item) in seen:
            continue
        if depth > MAX_NESTING:
            raise _too_deep(path, kind, error)
        seen.add(id(item))
        children = list(item.keys()) + list(item.values()) if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children)
    return value


def _nul_value(
    item: str, path: str | Path, kind: str, error: type[AdvisorError], text: str | None
) -> AdvisorError:
    found = _NUL_ESCAPE.search(text) if text is not None else None
    line = text.count("\n", 0, found.start()) + 1 if found is not None else None
    return error(
        f"{kind} holds a string with a NUL character ({quote(item)}"
        + (f", written `{found.group()}` at line {line}" if found is not None else "")
        + "): no name or setting holds one",
        hint="remove the NUL escape",
        location=f"{path}:{line}" if line is not None else str(path),
    )


def parse_json(text: str, path: str | Path, *, error: type[AdvisorError] = AdvisorError) -> Any:
    """`json.loads(text)`, bounded (`MAX_NESTING`); a syntax error, a number beyond Python's digit limit, a
    document nested too deep or a NUL in a string is one `error` naming the line."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as failure:
        raise error(
            f"not valid JSON: {_one_line(failure.msg)} (line {failure.lineno}, column {failure.colno})",
            hint="fix the JSON syntax",
            location=f"{path}:{failure.lineno}",
        ) from None
    except RecursionError:
        raise _too_deep(path, "JSON", error) from None
    except (ValueError, MemoryError) as failure:  # an integer of more than 4300 digits
        raise error(
            f"not valid JSON: {_one_line(failure)}", hint="fix the value", location=str(path)
        ) from None
    return check_nesting(value, path, "JSON", error=error, text=text)


#: Where tomllib's message says the error is: "... (at line 3, column 5)".
_TOML_AT = re.compile(r"\(at line (\d+), column (\d+)\)")


def parse_toml(text: str, path: str | Path, *, error: type[AdvisorError] = AdvisorError) -> dict[str, Any]:
    """`tomllib.loads(text)`, bounded (`MAX_NESTING`); a syntax error, a document nested too deep or a NUL
    in a string is one `error` naming the line."""
    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    try:
        value = tomllib.loads(text)
    except tomllib.TOMLDecodeError as failure:
        message = _one_line(failure)
        at = _TOML_AT.search(message)
        raise error(
            f"not valid TOML: {message}",
            hint="fix the syntax; tomllib must read it",
            location=f"{path}:{at.group(1)}" if at else str(path),
        ) from None
    except RecursionError:
        raise _too_deep(path, "TOML", error) from None
    except (ValueError, MemoryError) as failure:
        raise error(
            f"not valid TOML: {_one_line(failure)}", hint="fix the value", location=str(path)
        ) from None
    return check_nesting(value, path, "TOML", error=error, text=text)


class YamlTooLarge(Exception):
    """Raised by the bounded loader: `reason` says which bound, `line` where (1-based), `hint` what to do."""

    def __init__(self, reason: str, line: int, hint: str):
        super().__init__(reason)
        self.reason, self.line, self.hint = reason, line, hint


class _CountingComposer:
    """The bounds of a YAML document, kept as it is composed (mixed into `_bounded_loader`'s class before
    PyYAML's `Composer`): every value counted as expanded (an alias counts all the values of its anchor), the
    nesting depth as expanded (an alias reaches as deep as its anchor), refused beyond `MAX_YAML_VALUES` /
    `MAX_NESTING`, and an alias inside its own anchor (a cycle) refused. An anchor's count and height are
    kept when it is complete, so each alias costs one lookup: composing stays linear in the file."""

    def _start_counting(self) -> None:
        self._values = 0  # values composed so far, aliases expanded
        self._depth = 0  # the depth of the node being composed (the root: 1)
        self._reach = 0  # the deepest level reached in the node being composed
        self._anchors_seen: dict[int, tuple[int, int]] = {}  # id(anchored node) -> (values, height)

    def compose_node(self, parent: Any, index: Any) -> Any:
        from yaml import AliasEvent

        event = self.peek_event()
        if isinstance(event, AliasEvent):
            node = self.anchors.get(event.anchor)
            if node is not None:  # else the base class reports the undefined alias
                if id(node) not in self._anchors_seen:
                    raise YamlTooLarge(
                        f"the alias *{event.anchor} is inside its own anchor: it would repeat forever",
                        event.start_mark.line + 1,
                        f"refer to &{event.anchor} only after its value ends",
                    )
                values, height = self._anchors_seen[id(node)]
                self._count(values, event)
                self._reach_to(self._depth + height, event)
            return super().compose_node(parent, index)
        outer_reach = self._reach
        self._depth += 1
        self._reach = 0  # this node's own reach, merged into the outer one when it is complete
        self._reach_to(self._depth, event)
        values_before, depth = self._values, self._depth
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        self._count(1, event)
        if getattr(event, "anchor", None) is not None:
            self._anchors_seen[id(node)] = (self._values - values_before, self._reach - depth + 1)
        self._reach = max(outer_reach, self._reach)
        return node

    def _count(self, values: int, event: Any) -> None:
        self._values += values
        if self._values > MAX_YAML_VALUES:
            raise YamlTooLarge(
                f"it holds more than {MAX_YAML_VALUES} values once its aliases are expanded",
                event.start_mark.line + 1,
                "a config holds a few thousand values at most: check that this is the file you meant "
                "(aliases of an anchor that repeats other aliases expand exponentially)",
            )

    def _reach_to(self, depth: int, event: Any) -> None:
        if depth > MAX_NESTING:
            raise YamlTooLarge(
                f"it nests more than {MAX_NESTING} levels deep (aliases expanded)",
                event.start_mark.line + 1,
                "a config nests a few levels deep: check that this is the file you meant",
            )
        self._reach = max(self._reach, depth)


@functools.cache
def _bounded_loader() -> type:
    """A YAML loader with `yaml.SafeLoader`'s types, composed by PyYAML's Python composer with the bounds of
    `_CountingComposer`. The events come from libyaml's parser when PyYAML has it (six times faster than
    Python's parser)."""
    from yaml.composer import Composer
    from yaml.constructor import SafeConstructor
    from yaml.resolver import Resolver

    try:
        from yaml.cyaml import CParser as Parser
    except ImportError:  # pragma: no cover - a PyYAML built without libyaml
        from yaml.parser import Parser as PythonParser
        from yaml.reader import Reader
        from yaml.scanner import Scanner

        class Parser(Reader, Scanner, PythonParser):  # type: ignore[no-redef]
            def __init__(self, stream: str):
                Reader.__init__(self, stream)
                Scanner.__init__(self)
                PythonParser.__init__(self)

    class BoundedSafeLoader(_CountingComposer, Parser, Composer, SafeConstructor, Resolver):
        get_single_node = Composer.get_single_node  # not libyaml's composer: the counted one
        check_node = Composer.check_node
        get_node = Composer.get_node

        def __init__(self, stream: str):
            Parser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)
            self._start_counting()

    return BoundedSafeLoader


def parse_yaml(text: str, path: str | Path, *, error: type[AdvisorError] = AdvisorError) -> Any:
    """The YAML document in `text`, read with the safe loader's types and bounded (module docstring): a
    syntax error, a value the safe loader refuses (a Python tag, an impossible date, an integer beyond
    Python's digit limit) or a document too large or too deep is one `error`."""
    import yaml

    loader = _bounded_loader()(text)
    try:
        value = loader.get_single_data()
    except YamlTooLarge as failure:
        raise error(
            f"YAML refused: {failure.reason}",
            hint=failure.hint,
            location=f"{path}:{failure.line}",
        ) from None
    except yaml.YAMLError as failure:
        raise _yaml_error(failure, text, path, error) from None
    except RecursionError:
        raise _too_deep(path, "YAML", error) from None
    except (ValueError, TypeError, OverflowError, MemoryError) as failure:
        raise error(
            f"not valid YAML: {type(failure).__name__}: {_one_line(failure)}",
            hint="fix the value",
            location=str(path),
        ) from None
    finally:
        getattr(loader, "dispose", lambda: None)()
    return check_nesting(value, path, "YAML", error=error, text=text)


def _yaml_error(failure: Exception, text: str, path: str | Path, error: type[AdvisorError]) -> AdvisorError:
    """PyYAML's error on one line: what (its context and problem), the line and column, and a hint; never
    its block of lines with "<unicode string>" marks."""
    import yaml as yaml_module

    context, problem = getattr(failure, "context", None), getattr(failure, "problem", None)
    mark = getattr(failure, "problem_mark", None) or getattr(failure, "context_mark", None)
    words = "; ".join(_one_line(part) for part in (context, problem) if part)
    line, where = (mark.line + 1, f" (column {mark.column + 1})") if mark is not None else (None, "")
    position = getattr(failure, "position", None)
    if not words:  # a ReaderError: a character YAML refuses, at `position` in the text
        words = _one_line(getattr(failure, "reason", None) or str(failure).split("\n", 1)[0])
        character = getattr(failure, "character", None)
        if isinstance(character, int):
            words += f": {quote(chr(character))}"
        if isinstance(position, int) and position >= 0:
            if getattr(yaml_module, "__with_libyaml__", False):  # libyaml counts bytes of UTF-8
                position = len(text.encode("utf-8")[:position].decode("utf-8", errors="ignore"))
            position = min(position, len(text))
            line = text.count("\n", 0, position) + 1
            where = f" (column {position - text.rfind(chr(10), 0, position)})"
    if "unhashable" in words:
        hint = "a key must be a name or a number: a list or a mapping cannot be a key (`? [a, b]`, `[1]: x`)"
    elif "nesting depth" in words or "flow level" in words:
        hint = "a config nests a few levels deep: check that this is the file you meant"
    else:
        hint = "fix the syntax; yaml.safe_load must read it"
    return error(
        f"not valid YAML: {words}{where}",
        hint=hint,
        location=f"{path}:{line}" if line is not None else str(path),
    )


__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_INPUT_BYTES",
    "MAX_NESTING",
    "MAX_YAML_VALUES",
    "YamlTooLarge",
    "check_nesting",
    "check_regular_file",
    "decode_text",
    "parse_json",
    "parse_toml",
    "parse_yaml",
    "read_bytes",
    "read_text",
]
