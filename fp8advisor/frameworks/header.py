"""The header a config written by `fp8advisor suggest` carries, read back: the request of its regenerate
command (`fp8advisor.request.SuggestRequest.from_command`), the recipe it used and its format.
`fp8advisor.emit.header` writes it; `verify` advises with what it says
(`fp8advisor.verification.settings.advice_settings`). Here, not in `emit`, so that the reader does not depend
on the writer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from fp8advisor.files import GENERATED_MARK
from fp8advisor.frameworks.formats import ConfigFormat
from fp8advisor.request import OPTIONS, SuggestRequest

#: How the header line holding the regenerate command starts (written by `emit.header.header_lines`).
CHECK_PREFIX = "check in CI: "


@dataclass(frozen=True)
class SuggestHeader:
    """What the header of a file `suggest` wrote says about the advice it holds (`read_header`): the request
    of its regenerate command, as `verify` needs it to advise the same way."""

    request: SuggestRequest  # the profile as the check command pins it: typed with --profile, else chosen
    given: frozenset[str]  # the settings the command names; the others are the defaults
    recipe_used: str  # the recipe the advice used (chosen by "auto" or typed)
    format: ConfigFormat | None

    def written(self) -> dict[str, object]:
        """setting -> the value the header holds, None where it names none (batch, seq, the recipe used and
        the min speedup are always there)."""
        always = {"batch", "seq", "min_speedup"}
        values = {
            name: getattr(self.request, name) if name in self.given | always else None for name in OPTIONS
        }
        return {**values, "recipe": self.recipe_used}


def read_header_lines(text: str) -> list[str]:
    """The lines of the header at the top of `text`: its leading `#` comment lines, or the `generated_by` and
    `header` members of a JSON filter list (`emit.torchao_formats.filter_json`); [] when there is none."""
    if text.startswith('{"generated_by":'):
        try:
            document = json.loads(text)
        except (ValueError, RecursionError):
            return []
        first, rest = document.get("generated_by"), document.get("header")
        if (
            not isinstance(first, str)
            or not isinstance(rest, list)
            or not all(isinstance(x, str) for x in rest)
        ):
            return []
        return [first, *rest]
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[1:].strip())
    return lines


def read_header(text: str) -> SuggestHeader | None:
    """The settings in the header `emit.header` wrote at the top of `text` (`read_header_lines`); None when
    the text has no such header (a hand-written file) or it cannot be read."""
    lines = read_header_lines(text)
    if not lines or not lines[0].startswith(GENERATED_MARK):
        return None
    recipe_line = next((line for line in lines if line.startswith("recipe: ")), None)
    command = next((line for line in lines if line.startswith(CHECK_PREFIX)), None)
    if recipe_line is None or command is None or len(recipe_line.split()) < 2:
        return None
    parsed = SuggestRequest.from_command(command[len(CHECK_PREFIX) :])
    if parsed is None:
        return None
    request, given, format_name = parsed
    if not {"batch", "seq"} <= given:
        return None
    try:
        fmt = ConfigFormat(format_name) if format_name is not None else None
    except ValueError:
        return None
    return SuggestHeader(request, given, recipe_line.split()[1], fmt)


__all__ = ["CHECK_PREFIX", "SuggestHeader", "read_header", "read_header_lines"]
