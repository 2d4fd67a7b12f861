"""A run's decision timeline for the dashboard: the scheduler's decisions and the knob changes its
summary.json `meta` recorded, as a table (time, what, why) and as the rows and labels of the markers
the charts draw at their times (the Runs page's Plotly charts, `app.figures.add_decision_markers`;
the Live page's Vega-Lite charts, `app.live_charts`).

    rows = decision_rows(meta)            # a RecordedMeta -> "time (s)", "what", "why" (+ "source")
    show_table(as_text(rows[list(TABLE_COLUMNS)]), key, wrap=WRAPPED)   # app.tables: long reasons wrap
    st.markdown("\n".join(decision_details(rows)))                      # each one whole, in a detail view

The lines are read by `emulator.telemetry.decision_log`, which report.html shares. No Streamlit here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pandas as pd

from app.recorded_meta import RecordedMeta
from emulator.telemetry.decision_log import LogEntry, note_entry
from emulator.telemetry.reason_words import marker_text
from emulator.telemetry.schemas import NoteEvent

TIME, WHAT, WHY, SOURCE = "time (s)", "what", "why", "source"
TABLE_COLUMNS = (TIME, WHAT, WHY)
WRAPPED = (WHY, WHAT)  # the table's free text: it wraps in the table rather than being cut
DETAILS_TITLE = "Each decision in full"
MAX_LABELLED = 12  # more markers than this are numbered, not worded, so their labels do not overlap


def decision_rows(meta: RecordedMeta) -> pd.DataFrame:
    """One row per decision or knob change, in time order: time (s) (NaN for a line without one),
    what, why, and the source that wrote it (scheduler, timeline, control). Empty, with these
    columns, for a run that recorded none."""
    return entry_rows(meta.log)


def note_rows(notes: Iterable[NoteEvent]) -> pd.DataFrame:
    """decision_rows' table from a live run's log as it arrives on the bus."""
    return entry_rows([note_entry(n.t_s, n.source, n.what) for n in sorted(notes, key=lambda n: n.t_s)])


def entry_rows(entries: Sequence[LogEntry]) -> pd.DataFrame:
    return pd.DataFrame({
        TIME: pd.Series([e.t_s for e in entries], dtype="float64"),
        WHAT: [e.what for e in entries], WHY: [e.why for e in entries],
        SOURCE: [e.source for e in entries],
    }, columns=[TIME, WHAT, WHY, SOURCE])


def decision_details(rows: pd.DataFrame) -> list[str]:
    """One markdown line per row, nothing shortened: `- **t = 33.0 s** (scheduler) threshold 2965 ->
    3411 tokens: why ...`; the detail view under a decisions table."""
    lines = []
    for _, row in rows.iterrows():
        when = "no time" if pd.isna(row[TIME]) else f"t = {float(row[TIME]):.1f} s"
        source = f" ({row[SOURCE]})" if row.get(SOURCE) else ""
        lines.append(f"- **{when}**{source} {_plain(row[WHAT])}" + (f": {_plain(row[WHY])}" if row[WHY] else ""))
    return lines


def _plain(text: object) -> str:
    """Text as markdown shows it literally (a `*` or `_` in a reason is not emphasis)."""
    return "".join(f"\\{ch}" if ch in "\\`*_[]<>#|" else ch for ch in str(text))


def timed_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows with a time: those a chart can mark."""
    return rows[rows[TIME].notna()].reset_index(drop=True)


def marker_labels(timed: pd.DataFrame) -> list[str]:
    """Each timed row's label on a chart: what happened, short enough to stand along the plot's
    height (`reason_words.marker_text`; the hover has it whole); numbered as the table's order
    when there are more than MAX_LABELLED, so the labels do not overlap."""
    if len(timed) > MAX_LABELLED:
        return [str(i + 1) for i in range(len(timed))]
    return [marker_text(text) for text in map(str, timed[WHAT])]
