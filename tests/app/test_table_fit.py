"""Column widths that fit their text and the page: measured text, wrapping, the page budget."""

from __future__ import annotations

import pytest

from app.table_fit import (
    HEADER_PAD_PX,
    MIN_WRAP_PX,
    PAD_PX,
    PAGE_PX,
    TILE_GAP_PX,
    WRAP_ROW_MIN_PX,
    fit_columns,
    is_figure_column,
    natural_px,
    text_px,
    tile_px,
    tile_rows,
    wrapped_lines,
)


def test_text_width_follows_the_glyphs() -> None:
    assert text_px("") == 0
    assert text_px("mmmm") > text_px("iiii") * 2  # a proportional font, not characters x 8
    assert text_px("0123456789") == pytest.approx(14 * 5.1)  # digits are 0.51 em in Source Sans
    assert text_px("x", font_px=28) == pytest.approx(2 * text_px("x"))


def test_a_column_is_as_wide_as_its_header_or_its_longest_cell() -> None:
    assert natural_px("Cache at context", ["1.3MB"]) >= text_px("Cache at context") + HEADER_PAD_PX
    assert natural_px("n", ["mimo-v2-flash-mini (small)"]) >= text_px("mimo-v2-flash-mini (small)") + PAD_PX
    # the eleventh row counts as much as the first (the grid measures only a few itself)
    assert natural_px("n", ["a"] * 10 + ["a much longer eleventh cell"]) > natural_px("n", ["a"] * 11)


def test_a_table_that_fits_keeps_its_natural_widths() -> None:
    fit = fit_columns({"a": ("a", ["1", "22"]), "b": ("b", ["text"])}, wrap=["b"])
    assert fit.row_px is None and fit.widths == {"a": natural_px("a", ["1", "22"]), "b": natural_px("b", ["text"])}


def test_long_reasons_wrap_within_the_page() -> None:
    reason = "egress 0.95 of 50.0 Mbit/s, queue surge (local prefill 9 >= 8); model: 1.67 req/s, p 0.40"
    columns = {"time (s)": ("time (s)", ["12.5"]), "what": ("what", ["threshold 2965 -> 3411 tokens"]),
               "why": ("why", [reason * 3])}
    fit = fit_columns(columns, wrap=["why"])
    assert fit.total_px <= PAGE_PX
    assert fit.widths["why"] >= MIN_WRAP_PX
    lines = wrapped_lines(reason * 3, fit.widths["why"] - PAD_PX)
    assert lines > 1 and fit.row_px is not None and fit.row_px >= max(WRAP_ROW_MIN_PX, 20 * lines)


def test_a_table_of_figures_too_wide_for_the_page_is_not_squeezed() -> None:
    columns = {f"figure {i} (Gbit/s)": (f"figure {i} (Gbit/s)", ["12,345.6"]) for i in range(9)}
    fit = fit_columns(columns, wrap=[])
    assert fit.total_px > PAGE_PX  # reported as it is: the page has to change, not the widths


@pytest.mark.parametrize(("text", "width", "lines"), [
    ("one", 100, 1), ("one two three four", text_px("three four"), 2), ("", 50, 1),
    ("x" * 40, text_px("x" * 10), 4),
])
def test_wrapped_lines(text: str, width: float, lines: int) -> None:
    assert wrapped_lines(text, width + 0.01) == lines


def test_figure_columns_are_told_from_text() -> None:
    assert is_figure_column(["1,024", "-", "+1.1%", "0.720", "3:5", "1.54x"])
    assert not is_figure_column(["1,024", "kimi-linear-mini"])


def test_a_tile_whose_value_needs_room_gets_it_in_its_row() -> None:
    """The Live page's link tile (`120 Mbit/s · 10 ms` was cut to `120 Mbit/s · …`) and the Runs
    page's egress tile: each tile's column at least as wide as its value and title need."""
    tiles = [("Threshold (tokens)", "1,664", True), ("Link", "unshaped · 10 ms · 1 % loss", True),
             ("Arrivals", "paused", True), ("Link backend", "tun", False), ("Egress mean", "6.61 Mbit/s", False)]
    needs = [tile_px(*tile) for tile in tiles]
    assert needs[1] >= text_px("unshaped · 10 ms · 1 % loss", 36)
    rows = tile_rows(needs, 4)
    assert [indices for indices, _ in rows] == [[0, 1, 2], [3, 4]]  # the fourth has no room beside the link
    for indices, spec in rows:
        gaps = (len(spec) - 1) * TILE_GAP_PX
        for index, weight in zip(indices, spec, strict=False):
            assert weight / sum(spec) * (PAGE_PX - gaps) >= needs[index], tiles[index]
    # tiles that fit a quarter keep equal columns, in line with the rows above and below
    assert tile_rows([100, 120, 90], 4) == [([0, 1, 2], [1.0, 1.0, 1.0, 1.0])]
    assert [indices for indices, _ in tile_rows([500, 400, 100], 4)] == [[0], [1, 2]]
