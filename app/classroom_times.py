"""How long each Classroom step takes, as measured: bench/classroom_steps.py runs every step's
variants on this kind of machine and records each run's start-up (workers loading, the rate's
calibration), its arrivals and its drain in bench/results/classroom_steps.json. A live step states
its scenario's own duration plus the start-up and drain measured for it, so a changed duration_s
changes the statement without a new guess; a virtual one states its measured wall time.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results" / "classroom_steps.json"


@dataclass(frozen=True, slots=True)
class Measured:
    """One variant's measured run: seconds from the button to the record, in parts."""

    wall_s: float
    startup_s: float  # start to the first arrival: workers up, the rate calibrated
    drain_s: float  # the last arrival to the run's end: what was open finishes, teardown


def load_measured(path: Path = RESULTS) -> dict[tuple[str, str], Measured]:
    """(step title, variant label) -> its measurement; empty when the bench has not run."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    runs = doc.get("runs", []) if isinstance(doc, dict) else []
    return {(r["step"], r["variant"]): Measured(float(r["wall_s"]), float(r["startup_s"]), float(r["drain_s"]))
            for r in runs if isinstance(r, dict) and {"step", "variant", "wall_s", "startup_s", "drain_s"} <= r.keys()}


def stated_s(measured: Measured | None, engine: str, duration_s: float) -> float | None:
    """What a step states: live, the scenario's duration between its measured start-up and drain;
    virtual, the measured wall time. None when it was never measured."""
    if measured is None:
        return None
    if engine == "live":
        return measured.startup_s + duration_s + measured.drain_s
    return measured.wall_s


def words(seconds: float | None) -> str:
    """`about 75 s`, `about 2 min`; `seconds` for a run under 10 s."""
    if seconds is None:
        return "not measured yet"
    if seconds < 10:
        return "seconds"
    if seconds < 100:
        return f"about {5 * math.ceil(seconds / 5):.0f} s"
    return f"about {math.ceil(seconds / 30) / 2:g} min"
