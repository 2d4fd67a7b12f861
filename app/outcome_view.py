"""How a recorded run ended and what its `expect:` block says of it, in words, as the Live page's
results and the Runs page show it: a stopped run says when and by whom, and that its bounds were
not judged, instead of the checker's raw lines.

`outcome_lines` is pure (tests read it without Streamlit); `show_outcome` lays it out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import streamlit as st

from app.recorded_meta import RecordedMeta
from emulator.telemetry.outcome import ExpectStatus, RunOutcome, bound_rows, verdict_of


class Tone(StrEnum):
    """How a line is shown: the Streamlit box it goes in."""

    CAPTION = "caption"
    SUCCESS = "success"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class OutcomeLine:
    tone: Tone
    text: str  # markdown


OUTCOME_TONE = {RunOutcome.STOPPED: Tone.WARNING, RunOutcome.FAILED: Tone.ERROR}
EXPECT_TONE = {ExpectStatus.HELD: Tone.SUCCESS, ExpectStatus.FAILED: Tone.WARNING, ExpectStatus.NOT_JUDGED: Tone.INFO}


def outcome_lines(doc: Mapping[str, Any]) -> list[OutcomeLine]:
    """The run's end, then its `expect:` verdict with one line per bound (none without bounds)."""
    meta, summary = RecordedMeta.from_doc(doc), doc.get("summary") or {}
    outcome, ended = meta.outcome, meta.end_reason
    lines = []
    if outcome in OUTCOME_TONE:
        lines.append(OutcomeLine(OUTCOME_TONE[outcome], f"**{outcome.value.capitalize()}**: {ended or outcome.value}"))
    elif ended and ended != "run ended":
        lines.append(OutcomeLine(Tone.CAPTION, f"Ended: {ended}"))
    verdict = verdict_of(doc)
    if verdict.status is ExpectStatus.NONE:
        return lines
    expect = doc.get("expect") if isinstance(doc.get("expect"), Mapping) else {}
    rows = bound_rows(summary, expect, judged=verdict.status is not ExpectStatus.NOT_JUDGED)
    bounds = "".join(f"\n- {row.label}: {row.value}, bound {row.bound}: {row.verdict.split(':')[0]}" for row in rows)
    lines.append(OutcomeLine(EXPECT_TONE[verdict.status], f"**Expect**: {verdict.note}{bounds}"))
    return lines


def show_outcome(doc: Mapping[str, Any]) -> None:
    for line in outcome_lines(doc):
        getattr(st, line.tone.value)(line.text)
