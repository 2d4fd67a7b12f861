"""The Live page's status tiles, each holding the run's own figure: from the bus while the run goes
on, from its record (summary.json) once it has written one, so the tiles and the results below them
are the same numbers. The knob tiles (threshold, link, arrivals) show what the run last reported;
the page draws them with the knobs, so a knob's answer redraws them alone.

Pure: a view or a record in, titled values out; the page lays them out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.live_view import ENDED_STATES, TILES, RunView
from app.recorded_meta import RecordedMeta
from emulator.telemetry.labels import format_number
from emulator.telemetry.schemas import KnobState

RUN_TIME_HELP = ("seconds since the run started / the scenario's duration (arrivals stop there; the run "
                 "then drains)")
RECORD_HELP = "from the run's record (summary.json), as the results below"
REPORTED_HELP = "as the run last reported it on the bus, whoever set it (timeline, scheduler, a knob)"


@dataclass(frozen=True, slots=True)
class Tile:
    title: str
    value: str
    help: str | None = None


def link_words(link: Mapping[str, float | None]) -> str:
    """`120 Mbit/s · 10 ms`, `unshaped · 0 ms · 1 % loss`; `-` before the run reports a link."""
    if not link:
        return "-"
    bandwidth, delay, loss = link.get("bandwidth_mbit"), link.get("delay_ms") or 0.0, link.get("loss_pct") or 0.0
    words = ["unshaped" if bandwidth is None else f"{format_number(bandwidth)} Mbit/s", f"{format_number(delay)} ms"]
    if loss:
        words.append(f"{format_number(loss)} % loss")
    return " · ".join(words)


def arrivals_words(knobs: KnobState | None) -> str:
    """`0.5/s`, or `paused`; `-` from a sender that does not report its knobs."""
    if knobs is None:
        return "-"
    if knobs.is_paused:
        return "paused"
    return f"{format_number(knobs.rate_per_s)}/s" if knobs.rate_per_s is not None else "-"


def knob_tiles(view: RunView) -> list[Tile]:
    """What the run last reported of what the knobs steer (and the link's backend, beside the link)."""
    latest, status = view.latest, view.status
    threshold = latest.threshold_tokens if latest is not None else status.threshold_tokens if status else None
    return [
        Tile(TILES["threshold"], format_number(threshold), REPORTED_HELP),
        Tile(TILES["link"], link_words(latest.link if latest is not None else {}), REPORTED_HELP),
        Tile(TILES["arrivals"], arrivals_words(latest.knobs if latest is not None else None), REPORTED_HELP),
        Tile(TILES["link_backend"], (status.link_backend if status is not None else None) or "-"),
    ]


def bus_tiles(view: RunView, phase: str, duration_s: float | None) -> list[Tile]:
    """While the run goes on: its last snapshot and status."""
    latest, status = view.latest, view.status
    counts = latest.requests if latest is not None else None
    of_duration = f" / {duration_s:g}" if duration_s is not None else ""
    return [
        # a final state the run said (finished, stopped, failed) over the page's own `ended`
        Tile(TILES["state"], status.state if status is not None and (phase != "ended" or status.state in ENDED_STATES)
             else phase),
        Tile(TILES["run_time"], f"{latest.t_s:.1f}{of_duration}" if latest else "-", RUN_TIME_HELP),
        Tile(TILES["arrived"], f"{counts.completed} / {counts.arrived}" if counts else "-"),
        Tile(TILES["failed"], str(counts.failed) if counts else "-"),
    ]


def record_tiles(doc: Mapping[str, Any]) -> list[Tile]:
    """Once the run has ended: how it ended (finished, stopped, failed) and its counts, from its record."""
    return count_tiles(doc, TILES["run_time"])


def count_tiles(doc: Mapping[str, Any], time_title: str) -> list[Tile]:
    """How the run ended, its (run or simulated) time and its counts, from its record: a virtual
    run's tiles once it has ended too, since it says nothing on the bus."""
    summary = doc.get("summary") or {}
    completed, requests = summary.get("completed"), summary.get("requests")
    duration = summary.get("duration_s")
    return [
        Tile(TILES["state"], RecordedMeta.from_doc(doc).outcome.value, RECORD_HELP),
        Tile(time_title, f"{duration:.1f}" if isinstance(duration, int | float) else "-", RECORD_HELP),
        Tile(TILES["arrived"], f"{format_number(completed)} / {format_number(requests)}", RECORD_HELP),
        Tile(TILES["failed"], format_number(summary.get("failed_count")), RECORD_HELP),
    ]
