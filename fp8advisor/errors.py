"""Domain errors: each one is a problem the user can fix, with a message that says how.

The CLI turns an `AdvisorError` into one line on stderr and exit status `exit_code` (2 unless a subclass says
otherwise); no traceback unless `--debug`. Library callers catch them like any exception.
"""

from __future__ import annotations

import reprlib
from enum import Enum
from typing import Any, TypeVar

_Choice = TypeVar("_Choice", bound=Enum)

#: The most characters of a message (or of a hint) an error shows: a value quoted from a bad file can be
#: arbitrarily large (a YAML alias bomb expands to hundreds of megabytes).
MAX_MESSAGE_CHARS = 600


def clip(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`text` cut to `limit` characters, saying how many were left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


_QUOTE = reprlib.Repr()  # attributes, not keyword arguments: those need Python 3.12
_QUOTE.maxlevel, _QUOTE.maxstring, _QUOTE.maxother = 2, 80, 80
_QUOTE.maxlist = _QUOTE.maxtuple = _QUOTE.maxset = _QUOTE.maxdict = 6


def quote(value: Any) -> str:
    """A short `repr` of a value from the user's input for an error message: nested containers and long
    strings are abbreviated while the text is built, so even a huge value costs nothing to quote."""
    return clip(_QUOTE.repr(value), 300)


def describe_error(error: BaseException) -> str:
    """`TypeName: first line of the message` (just the type name when the message is empty), for any
    exception, including one from the user's code whose `__str__` raises or returns a non-string."""
    try:
        text = str(error).strip().splitlines()
    except Exception:  # noqa: BLE001 - the user's own exception class: its __str__ may do anything
        text = ["(its message cannot be shown: its __str__ raised)"]
    first = text[0] if text else ""
    return clip(f"{type(error).__name__}: {first}" if first else type(error).__name__, 300)


class AdvisorError(Exception):
    """Base class: `message` says what is wrong, `hint` what to do, `location` where ("file.py:12")."""

    exit_code = 2

    def __init__(self, message: str, *, hint: str | None = None, location: str | None = None):
        message, hint = clip(message), clip(hint, 2 * MAX_MESSAGE_CHARS) if hint is not None else None
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.location = location

    def __str__(self) -> str:
        text = f"{self.location}: {self.message}" if self.location else self.message
        return f"{text}\n  hint: {self.hint}" if self.hint else text


class TargetError(AdvisorError):
    """The model target cannot be found, built or run (missing file, syntax error, no nn.Module, ...)."""


class ModelInputsError(TargetError):
    """The model's forward needs inputs the tool cannot guess."""


class ProfileError(AdvisorError):
    """A profile is missing, unreadable or does not cover what was asked of it."""


class ResultsError(AdvisorError):
    """Benchmark results are missing, unreadable, emulated where real ones are needed, or mix machines."""


class DeviceError(AdvisorError):
    """No GPU, or a GPU without FP8 tensor cores (compute capability below 8.9)."""


class ConfigError(AdvisorError):
    """A training config file cannot be read or does not describe a float8 setup."""


class TraceError(AdvisorError):
    """A profiler trace cannot be read, is not a trace, or lacks what the question needs (device records,
    input shapes, matching steps across ranks)."""


class CompatError(AdvisorError):
    """The installed torch or torchao lacks a private name that fp8advisor relies on (`fp8advisor.compat`)."""


def parse_choice(
    choices: type[_Choice],
    name: Any,
    what: str,
    *,
    error: type[AdvisorError] = AdvisorError,
    location: str | None = None,
) -> _Choice:
    """The member of the str enum `choices` whose value is `name`; otherwise `error` ("unknown WHAT 'name'")
    with the valid names as its hint. One rule for every name a user types: recipes, formats, frameworks."""
    try:
        return choices(name)
    except ValueError:
        valid = ", ".join(str(member.value) for member in choices)
        raise error(f"unknown {what} {quote(name)}", hint=f"use one of: {valid}", location=location) from None
