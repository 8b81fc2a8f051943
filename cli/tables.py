"""Tables that fit their width: columns chosen, one column wrapped at words, notes under their row.

`ferry ps`, `ferry fleet list` and `ferry validate` print these (docs/cli.md#tables). A table shows its
default columns, or with `wide` (-v/--wide) every one. When they do not fit the width, the optional
columns go first (the default view only), in their order; then the flexible ones wrap at words. No
cell is ever cut: what is still too long wraps onto the next line. A row's notes (an error, a URL) are
lines under it, as wide as the table may be, instead of a column that would squeeze every other one.
Lines carry no trailing spaces; printed through `cli.render.console()`, which gives a piped table no
width limit (unless COLUMNS says one), a row is one line of plain text.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rich is imported when a table is printed, not when a command module is
    from rich.console import Console, ConsoleOptions, RenderResult

GAP = 2  # spaces between columns
NOTE_INDENT = "  "
_MIN_FLEXIBLE = 12  # the flexible column never narrower than this (or its header)


@dataclass(frozen=True)
class Column:
    header: str
    optional: int | None = None  # dropped when short of width, lowest first (default view only)
    wide: bool = False  # shown with -v/--wide only
    flexible: bool = False  # wraps at words when short of width (the first flexible column first)


@dataclass(frozen=True)
class Row:
    cells: Sequence[str]  # one per column of the table, in its order
    notes: Sequence[str] = field(default_factory=tuple)  # lines under the row, e.g. `error: ...`


class FittedTable:
    """A rich renderable: the rows laid out for the console's width (`lines` for any width)."""

    def __init__(self, columns: Sequence[Column], rows: Iterable[Row], *, wide: bool = False) -> None:
        self.columns = list(columns)
        self.rows = list(rows)
        self.wide = wide
        for row in self.rows:
            if len(row.cells) != len(self.columns):
                raise ValueError(f"a row of {len(row.cells)} cells in a table of {len(self.columns)} columns")

    def shown(self, width: int | None) -> list[int]:
        """The indices of the columns shown at `width` (None: no limit)."""
        shown = [i for i, column in enumerate(self.columns) if self.wide or not column.wide]
        if width is None or self.wide:
            return shown
        natural = self._natural_widths()
        optional = sorted(
            (i for i in shown if self.columns[i].optional is not None),
            key=lambda i: (self.columns[i].optional, -i),
        )
        while optional and _total(natural[i] for i in shown) > width:
            shown.remove(optional.pop(0))
        return shown

    def lines(self, width: int | None = None) -> list[str]:
        """The header, then each row (on several lines when a cell wraps) and its notes."""
        shown = self.shown(width)
        widths = self._natural_widths()
        limits = {i: widths[i] for i in shown}
        for i in (i for i in shown if self.columns[i].flexible):  # narrowed in their order, as needed
            excess = 0 if width is None else _total(limits.values()) - width
            if excess <= 0:
                break
            floor = max(len(self.columns[i].header), min(_MIN_FLEXIBLE, widths[i]))
            limits[i] = max(floor, limits[i] - excess)
        out = [_join([self.columns[i].header for i in shown], limits, shown)]
        for row in self.rows:
            cells = {i: _wrap(row.cells[i], limits[i]) for i in shown}
            height = max((len(c) for c in cells.values()), default=1)
            for k in range(height):
                out.append(_join([cells[i][k] if k < len(cells[i]) else "" for i in shown], limits, shown))
            for note in row.notes:
                out += _note(note, width)
        return out

    def _natural_widths(self) -> list[int]:
        return [
            max([len(column.header), *(len(row.cells[i]) for row in self.rows)])
            for i, column in enumerate(self.columns)
        ]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.text import Text

        lines = self.lines(options.max_width)
        text = Text("\n".join(lines), no_wrap=False, overflow="fold")
        if lines and console.is_terminal:
            text.stylize("bold", 0, len(lines[0]))
        yield text


def _total(widths: Iterable[int]) -> int:
    values = list(widths)
    return sum(values) + GAP * max(len(values) - 1, 0)


def _wrap(cell: str, limit: int) -> list[str]:
    if len(cell) <= limit:
        return [cell]
    # Long words (a URL, an image name) are folded, not cut: nothing of the cell is lost.
    return textwrap.wrap(cell, limit, break_on_hyphens=False) or [""]


def _join(cells: list[str], limits: dict[int, int], shown: list[int]) -> str:
    padded = [cell.ljust(limits[i]) for cell, i in zip(cells, shown, strict=True)]
    return (" " * GAP).join(padded).rstrip()


def _note(note: str, width: int | None) -> list[str]:
    line = NOTE_INDENT + " ".join(note.split())
    if width is None or len(line) <= width:
        return [line]
    return textwrap.wrap(
        line.strip(), width, initial_indent=NOTE_INDENT, subsequent_indent=NOTE_INDENT * 2,
        break_on_hyphens=False,
    )  # fmt: skip
