"""Sweeps: a sweep file (spec.py) expands into points (points.py), each run by one engine
(point.py) as a Ray task (runner.py), the rows kept in DIR/sweep.parquet and sweep.json (store.py).
Callers import the public names from here."""

from emulator.sweep.points import Point, expand
from emulator.sweep.runner import SweepResult, run_sweep
from emulator.sweep.spec import Sweep, SweepSpec, load_sweep

__all__ = ["Point", "Sweep", "SweepResult", "SweepSpec", "expand", "load_sweep", "run_sweep"]
