"""A recorded run's decision timeline: summary.json's `meta.decisions` (the scheduler's) and
`meta.knob_changes` (timeline steps and control messages), each a line `t=<seconds>s <source>: ...`,
read back as (time, what, why) entries for report.html and the dashboard.

Reads the words the engines wrote (`emulator.run.timeline.note`); changes nothing and decides nothing
but the naming of raw codes in a reason (`reason_words.worded`). A line that does not follow the
pattern still shows, whole, with no time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from emulator.telemetry.reason_words import worded

_STAMP = re.compile(r"t=(?P<t>[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)s (?P<rest>.*)", re.DOTALL)
_SOURCE = re.compile(r"(?P<source>[a-z][a-z_-]*): (?P<text>.*)", re.DOTALL)
# The scheduler's words (control/scheduler.py): "<why>: t 19620 -> 17140 (<model point>)" and
# "<why>; drain, then flip <node> to <role> (n_p 4 -> 3, target 3)".
_THRESHOLD = re.compile(r"(?P<why>.*): t (?P<old>\d+) -> (?P<new>\d+)(?: \((?P<model>.*)\))?", re.DOTALL)
_FLIP = re.compile(r"(?P<why>.*); (?P<what>drain, then flip .*)", re.DOTALL)
# Why a knob changed, by the source that changed it (emulator/run/timeline.py, live/loops.py).
SOURCE_WHY = {"timeline": "the scenario's timeline", "control": "a control message (dashboard or MQTT)"}


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One line of a run's decision or knob log; `t_s` None when the line carries no time."""

    t_s: float | None
    source: str  # "scheduler", "timeline", "control", or "" when the line names none
    what: str
    why: str


def split_stamp(line: str) -> tuple[float | None, str]:
    """(t_s, the rest) of a `t=<seconds>s ` line; (None, line) when it has no such prefix. The one
    reader of the prefix `emulator.run.timeline.note` writes."""
    match = _STAMP.fullmatch(line.strip())
    if match is None:
        return None, line.strip()
    t_s = float(match["t"])
    return (t_s if math.isfinite(t_s) else None), match["rest"]


def parse_line(line: str) -> LogEntry:
    """A log line as time, what happened, and why (the scheduler's reason, or who changed a knob)."""
    t_s, rest = split_stamp(line)
    named = _SOURCE.fullmatch(rest)
    if named is None:
        return LogEntry(t_s, "", rest, "")
    return note_entry(t_s, named["source"], named["text"])


def note_entry(t_s: float | None, source: str, text: str) -> LogEntry:
    """One entry from its parts, as a live run publishes them (telemetry.schemas.NoteEvent)."""
    if source == "scheduler":
        if threshold := _THRESHOLD.fullmatch(text):
            why = threshold["why"] + (f"; {threshold['model']}" if threshold["model"] else "")
            return LogEntry(t_s, source, f"threshold {threshold['old']} -> {threshold['new']} tokens", worded(why))
        if flip := _FLIP.fullmatch(text):
            return LogEntry(t_s, source, flip["what"], worded(flip["why"]))
        return LogEntry(t_s, source, text, "the scheduler")
    return LogEntry(t_s, source, text, SOURCE_WHY.get(source, source))


def log_entries(meta: Mapping[str, Any]) -> tuple[LogEntry, ...]:
    """The scheduler's decisions and the knob changes of a summary's `meta`, merged in time order
    (lines without a time last); () for a run that recorded none."""
    lines = [line for key in ("decisions", "knob_changes") for line in _strings(meta.get(key))]
    entries = [parse_line(line) for line in lines]
    return tuple(sorted(entries, key=lambda e: (e.t_s is None, e.t_s or 0.0)))


def _strings(value: object) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list | tuple) else []
