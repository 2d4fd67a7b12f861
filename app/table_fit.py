"""Column widths that fit a table on the page: each column as wide as its header or its longest cell,
measured with the grid's own font, and the whole table within the page's width, so no number, name
or column is cut off or pushed past the edge. Long free text (a reason) wraps instead of growing.

Pure: widths from text. `app.tables` hands them to Streamlit.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

# The main column's width at a 1280 px window with the sidebar open (818 px, measured in chromium),
# less a margin: the narrowest page a user is expected to read the dashboard on.
PAGE_PX = 800
FONT_PX = 14  # the grid's font size
PAD_PX = 20  # a cell's padding on both sides (8 px each) and its border
HEADER_PAD_PX = 24  # a header's padding and room for its sort arrow
LINE_PX = 20  # a wrapped line of the grid's text
ROW_PX = 35  # a grid row at its default height (the header row too)
BORDER_PX = 3
WRAP_ROW_MIN_PX = 65  # the grid wraps text only in rows taller than 4 rem (64 px)
MIN_WRAP_PX = 160  # a wrapped column no narrower than this

# Glyph widths in hundredths of the font size: Source Sans at weight 600 (the headers'; the cells'
# regular weight is narrower), measured with canvas measureText in chromium. Others: 0.75 em.
_GLYPHS = {20: " ", 26: "ij|", 27: "l", 28: "',.:;I·", 32: "!()-[]f{}", 34: "/\\", 36: "t", 37: "r",
           43: "s", 44: "*?z", 46: "c", 48: '"x', 49: "J", 50: "LY_vy", 51: "0123456789#$+<=>F^e~÷±×",
           52: "agk", 54: "EVXZΛ", 55: "ST`o", 56: "Abdhnpqu", 58: "CP", 59: "R", 60: "BK", 62: "D→",
           63: "G", 64: "&", 66: "HNU", 67: "OQΘ", 74: "MΦ", 75: "w", 80: "W", 84: "%m", 88: "@", 96: "…"}
_EM = {ch: hundredths / 100 for hundredths, chars in _GLYPHS.items() for ch in chars}
_OTHER_EM = 0.75
# A cell of a column of figures: right-aligned, as numbers are.
FIGURE = re.compile(r"[-+]?[\d,.:]+\s?(x|%|s| points)?|-|same|differs")


def text_px(text: str, font_px: float = FONT_PX) -> float:
    """The width `text` takes on one line at `font_px`."""
    return font_px * sum(_EM.get(ch, _OTHER_EM) for ch in text)


def is_figure_column(cells: Iterable[object]) -> bool:
    """Every cell is a figure (or `-`): the column reads right-aligned."""
    return all(FIGURE.fullmatch(str(cell)) for cell in cells)


@dataclass(frozen=True, slots=True)
class Fit:
    """Pixel widths by column (`_index` for the index), the row height (None: the grid's own) and
    the table's total width."""

    widths: dict[str, int]
    row_px: int | None

    @property
    def total_px(self) -> int:
        return sum(self.widths.values())

    def height_px(self, num_rows: int, max_rows: int) -> int:
        """A height that shows every row up to `max_rows` (beyond, the table scrolls)."""
        row = self.row_px or ROW_PX
        return ROW_PX + row * min(num_rows, max_rows) + BORDER_PX


def natural_px(header: str, cells: Sequence[object]) -> int:
    """A column as wide as its header or its longest cell."""
    longest = max((text_px(str(cell)) for cell in cells), default=0.0)
    return math.ceil(max(text_px(str(header)) + HEADER_PAD_PX, longest + PAD_PX))


def fit_columns(columns: Mapping[str, tuple[str, Sequence[object]]], budget_px: int = PAGE_PX,
                wrap: Iterable[str] = (), min_wrap_px: int = MIN_WRAP_PX) -> Fit:
    """Widths for `columns` ({key: (header, display texts)}). When they do not fit `budget_px`, the
    `wrap` columns share what the others leave: each its least (`min_wrap_px`, or its header, which
    does not wrap), the rest in proportion to what each lacks of its natural width; the rows grow to hold
    their longest text wrapped; a table that still does not fit keeps its natural widths (wider than
    the page: the readability tests catch it)."""
    widths = {key: natural_px(header, cells) for key, (header, cells) in columns.items()}
    wrapping = [key for key in wrap if key in widths]
    if sum(widths.values()) <= budget_px or not wrapping:
        return Fit(widths, None)
    room = budget_px - sum(px for key, px in widths.items() if key not in wrapping)
    least = {key: min(widths[key], max(min_wrap_px, natural_px(columns[key][0], []))) for key in wrapping}
    spare, wanted = room - sum(least.values()), sum(widths[key] - least[key] for key in wrapping)
    if spare < 0:
        return Fit(widths, None)
    shares = {key: least[key] + (widths[key] - least[key]) * spare // max(wanted, 1) for key in wrapping}
    lines = 1
    for key in wrapping:
        widths[key] = shares[key]
        lines = max(lines, *(wrapped_lines(str(cell), shares[key] - PAD_PX) for cell in columns[key][1]))
    return Fit(widths, max(WRAP_ROW_MIN_PX, lines * LINE_PX + 2 * 8) if lines > 1 else None)


def wrapped_lines(text: str, width_px: float) -> int:
    """Lines `text` takes when wrapped at spaces into `width_px` (a word wider than a line takes
    as many lines as it needs)."""
    lines, used = 1, 0.0
    space = text_px(" ")
    for word in text.split(" "):
        px = text_px(word)
        if used and used + space + px > width_px:
            lines, used = lines + 1, 0.0
        if px > width_px:
            lines += math.ceil(px / width_px) - 1
            used = px % width_px
        else:
            used += (space if used else 0.0) + px
    return lines


def number_text(value: object, fmt: str | None) -> str:
    """About the text the grid draws for `value` under a NumberColumn `fmt` (`bytes`, `localized`,
    a printf format such as `%.3g`, or none): what a column must be wide enough for."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if not isinstance(value, int | float) or isinstance(value, bool):
        return str(value)
    if fmt == "bytes":
        size, unit = float(value), 0
        while abs(size) >= 1000 and unit < len(_BYTE_UNITS) - 1:
            size, unit = size / 1000, unit + 1
        return f"{size:.1f}".rstrip("0").rstrip(".") + _BYTE_UNITS[unit]
    if fmt == "localized":
        return f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"
    if fmt and "%" in fmt:
        return (fmt % value).replace("%%", "%")
    return str(value) if isinstance(value, int) else f"{value:.4f}".rstrip("0").rstrip(".")


_BYTE_UNITS = ("B", "KB", "MB", "GB", "TB", "PB")


TILE_VALUE_PX, TILE_TITLE_PX = 36, 14  # a metric tile's value and its title
TILE_GAP_PX, TILE_HELP_PX = 16, 24  # between columns; a help icon beside the title


def tile_px(title: str, value: str, has_help: bool = False) -> int:
    """The width a metric tile needs to show its title and its value whole."""
    return math.ceil(max(text_px(value, TILE_VALUE_PX),
                         text_px(title, TILE_TITLE_PX) + (TILE_HELP_PX if has_help else 0))) + 8


def tile_rows(needs: Sequence[int], per_row: int, budget_px: int = PAGE_PX) -> list[tuple[list[int], list[float]]]:
    """Tiles (by the width each needs) in rows of at most `per_row`: (their indices, the column
    weights for `st.columns`). A row whose tiles all fit an equal share keeps equal columns (in line
    with the other rows); a row with a wider tile weighs its columns by need, which gives each at
    least its need; a tile that does not fit beside the others starts the next row."""
    share = (budget_px - (per_row - 1) * TILE_GAP_PX) / per_row
    rows: list[list[int]] = [[]]
    for index, need in enumerate(needs):
        row = rows[-1]
        widths = [*(needs[i] for i in row), need]
        if row and (len(row) == per_row or sum(widths) + (len(widths) - 1) * TILE_GAP_PX > budget_px):
            rows.append([])
        rows[-1].append(index)
    out = []
    for row in rows:
        if all(needs[i] <= share for i in row):
            out.append((row, [1.0] * per_row))
        else:
            out.append((row, [float(needs[i]) for i in row]))
    return out
