"""The consoles every command prints through, built so that no string from outside can act on the terminal.

- No markup: a layer name, a path or a profile name may hold `[red]` or `[/x]`, which Rich would take for a
  style (or fail on). Both consoles print every string as it is (a status spinner's too); a style is given
  only as a `Text` style (`styled`), never parsed out of a string. A progress bar's `TextColumn` that shows
  names takes `markup=False`.
- No control characters: every string given to the console (`_SafeConsole.render_str`: a printed string, a
  table cell, a rule's title) goes through `fp8advisor.untrusted.visible`, line breaks included, so that an
  ANSI escape, a carriage return, a bidi override or a line break in any field shows as its escape (`\\x1b`,
  `\\n`) instead of acting or forging a line; our own multi-line text is a `Text`. Then every segment Rich
  is about to write (a render hook, `_VisibleText`) goes through it too, line breaks and tabs kept. Rich's
  own styling is not text: it is written from each segment's style after the hook, and stays.
- `plain(text)`: the same for text written around Rich (`print`), such as a diff of a user's file.
"""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, RenderableType, RenderHook, RenderResult
from rich.segment import Segment
from rich.text import Text

from fp8advisor.untrusted import visible

#: What a terminal line may hold as it is: its line breaks and tabs.
_KEPT = "\n\t"


def plain(text: str) -> str:
    """`text` with its control characters but line breaks and tabs shown as escapes."""
    return visible(text, keep=_KEPT)


def styled(*parts: str | tuple[str, str]) -> Text:
    """A `Text` of `parts`: a string as it is, a (string, style) pair in that style (no markup parsed)."""
    return Text.assemble(*parts)


class _Visible:
    """A renderable that renders another and shows the control characters of its text as escapes."""

    def __init__(self, renderable: RenderableType):
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for segment in console.render(self.renderable, options):
            if segment.control or segment.text.isprintable():
                yield segment
            else:
                yield Segment(plain(segment.text), segment.style)


class _VisibleText(RenderHook):
    """The console's render hook: every renderable printed goes through `_Visible`."""

    def process_renderables(self, renderables: list[RenderableType]) -> list[RenderableType]:
        return [_Visible(renderable) for renderable in renderables]


class _SafeConsole(Console):
    """A console that shows the control characters of every string it is given as escapes before it lays
    it out (so that a table's columns fit what is shown); the render hook catches the rest (a `Text` built
    by hand) after layout."""

    def render_str(self, text: str, **options) -> Text:
        return super().render_str(visible(text), **options)  # one line: a name cannot forge another line

    def status(self, status: RenderableType, **options):
        """`Console.status`, whose spinner would parse a string as markup: given a `Text` instead."""
        return super().status(Text(plain(status)) if isinstance(status, str) else status, **options)


def safe_console(**options) -> Console:
    """A Rich console without markup or highlighting whose output shows control characters as escapes."""
    console = _SafeConsole(markup=False, highlight=False, **options)
    console.push_render_hook(_VisibleText())
    return console


__all__ = ["plain", "safe_console", "styled"]
