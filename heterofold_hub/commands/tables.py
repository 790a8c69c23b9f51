"""How the registry commands (``list``, ``show``, ``search``) print tables; see docs/cli-conventions.md.

- Every text from ``registry.json`` is cut to :data:`DISPLAY_LIMIT` characters before any layout (:func:`clip`):
  the registry is a file anyone may edit, and laying out one huge cell (a 50 MB summary) would take minutes.
- On a terminal a table fits its width: identifiers (repo ids, model ids, versions) are never broken, the other
  columns wrap between words, and when even that does not fit the least important columns are left out, with a
  caption naming them.
- Piped (a file, ``grep``, ``less``), a table is a header row and one tab-separated line per row, every cell whole.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

DISPLAY_LIMIT = 2000  # characters of one registry text shown; --json prints it whole
GAP = 2  # columns between two table columns: a space of padding and the blank divider
MIN_WRAP = 12  # a wrapping column is never narrower than this (or its longest word)


def clip(text, limit: int = DISPLAY_LIMIT) -> str:
    """``text`` (made a string) cut to ``limit`` characters, saying how many more there are."""
    text = str(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit]} [cut: {len(text) - limit:,} more characters; --json prints them]"


@dataclass(frozen=True)
class Column:
    """A table column. ``rank``: the order columns are given up in on a narrow terminal (0 is never dropped; the
    highest goes first). ``wrap``: the cells may wrap between words; otherwise a cell (an id) stays on one line."""

    name: str
    rank: int = 0
    wrap: bool = False
    justify: str = "left"


def _one_line(text: str) -> str:
    return " ".join(text.split("\n"))


def _tsv_cell(text: str) -> str:
    return " ".join(text.replace("\t", " ").splitlines())


def _min_width(column: Column, cells: list[str]) -> int:
    """The narrowest a column may be: its longest cell (an id), or its longest word and MIN_WRAP (wrapping text)."""
    texts = [column.name, *cells]
    if not column.wrap:
        return max(len(t) for t in texts)
    return max(MIN_WRAP if cells else 0, *(len(word) for t in texts for word in t.split()))


def fit_columns(columns: list[Column], rows: list[list[str]], width: int) -> list[int]:
    """Indices of the columns kept so that every id stays whole within ``width`` characters: the highest-ranked
    columns are left out, one at a time, until the narrowest layout fits (column 0 always stays)."""
    kept = list(range(len(columns)))
    need = {i: _min_width(columns[i], [row[i] for row in rows]) for i in kept}
    while len(kept) > 1 and sum(need[i] for i in kept) + GAP * (len(kept) - 1) > width:
        kept.remove(max(kept[1:], key=lambda i: columns[i].rank))
    return kept


def column_widths(columns: list[Column], rows: list[list[str]], width: int) -> list[int]:
    """Widths for ``columns`` within ``width``: each its narrowest (:func:`_min_width`), then the room left shared
    among the wrapping columns in proportion to what they would still take, none beyond its longest line."""
    least = [_min_width(c, [row[i] for row in rows]) for i, c in enumerate(columns)]
    most = [max([least[i], *(len(line) for row in rows for line in row[i].splitlines())]) if c.wrap else least[i]
            for i, c in enumerate(columns)]
    room = max(0, width - sum(least) - GAP * (len(columns) - 1))
    wants = [most[i] - least[i] for i in range(len(columns))]
    if room >= sum(wants):
        return most
    widths = [least[i] + room * wants[i] // sum(wants) for i in range(len(columns))]
    for i in sorted(range(len(columns)), key=lambda i: -wants[i])[:width - sum(widths) - GAP * (len(columns) - 1)]:
        widths[i] += 1 if widths[i] < most[i] else 0  # the rounding's remainder, to the columns wanting most
    return widths


def print_table(console: Console, columns: list[Column], rows: list[list], *, title: str = "",
                caption: str = "") -> None:
    """``rows`` (cells clipped to :data:`DISPLAY_LIMIT`) as a table on a terminal, or piped as ``title``, a header
    row and one tab-separated line per row."""
    cells = [[clip(cell) for cell in row] for row in rows]
    if not console.is_terminal:  # written as is: rich would turn the tabs into spaces
        lines = [title] if title else []
        lines += ["\t".join(_tsv_cell(cell) for cell in line) for line in [[c.name for c in columns], *cells]]
        console.file.write("\n".join(lines + ([caption] if caption else [])) + "\n")
        return
    cells = [[cell if columns[i].wrap else _one_line(cell) for i, cell in enumerate(row)] for row in cells]
    kept = fit_columns(columns, cells, console.width)
    dropped = [c.name for i, c in enumerate(columns) if i not in kept]
    if dropped:
        caption = (caption + "\n" if caption else "") + (
            f"not shown at {console.width} columns: {', '.join(dropped)} (widen the terminal, pipe it, or --json)")
    table = Table(title=escape(title) or None, caption=escape(caption) or None, box=box.SIMPLE_HEAD, show_edge=False,
                  padding=(0, 1, 0, 0), pad_edge=False, title_justify="left", caption_justify="left")
    widths = column_widths([columns[i] for i in kept], [[row[i] for i in kept] for row in cells], console.width)
    for i, width in zip(kept, widths):
        column = columns[i]
        table.add_column(escape(column.name), justify=column.justify, no_wrap=not column.wrap, overflow="fold",
                         width=width)
    for row in cells:
        table.add_row(*(escape(row[i]) for i in kept))
    console.print(table, highlight=False)
