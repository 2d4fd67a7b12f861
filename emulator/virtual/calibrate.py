"""Calibration: a profile (T_prefill(l) per cluster, S_kv(l), the decode step) fitted to what a
recorded run measured, and written as a scenario's `model.profile` YAML, so the virtual engine can
replay a live run with the live hardware's costs. Fitting only; replaying is `run_virtual`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from emulator.auto_rate import is_auto, recorded_rate, with_rate
from emulator.errors import TelemetryError
from emulator.plane.inputs import ProfileTables
from emulator.scenario import Scenario, parse_scenario
from emulator.telemetry.recorder import load_run
from emulator.virtual.catalog import profile_document

log = logging.getLogger(__name__)
NUM_KNOTS = 5  # table points, spread over the observed lengths
MIN_SAMPLES = 2


def profile_from_run(run_dir: str | Path, remote_device: str = "remote",
                     local_device: str = "local") -> ProfileTables:
    """Fit the profile of a recorded run (any engine) from its requests.parquet.

    T_prefill(l): prefill_end_s - prefill_start_s against incremental_len, per route's cluster,
    as a + b*l + c*l^2 with a, b, c >= 0 (fixed cost, linear layers, attention), tabulated at knots
    spread over the observed lengths. S_kv(l): kv_bytes against input_len as state + per_token*l.
    Decode step: the median tpot_s of requests with more than one output token. With the same
    device name for both clusters (one kind of machine), their prefills are pooled.
    """
    requests, _, doc = load_run(run_dir)
    done = requests[requests["status"] == "completed"]
    prefill = done.dropna(subset=["prefill_start_s", "prefill_end_s", "incremental_len"])
    service = prefill["prefill_end_s"] - prefill["prefill_start_s"]
    samples = {remote_device: prefill["route"] == "prfaas", local_device: prefill["route"] == "local"}
    if remote_device == local_device:
        samples = {remote_device: prefill["route"].notna()}
    prefill_fits = {device: _Fit.of(prefill["incremental_len"][mask], service[mask], 2, f"prefill on {device}")
                    for device, mask in samples.items() if mask.any()}
    if not prefill_fits:
        raise TelemetryError(f"run dir {str(run_dir)!r}: no completed prefill to calibrate from; "
                             "record a run that completes requests")
    kv = done.dropna(subset=["kv_bytes"])
    kv_fit = _Fit.of(kv["input_len"], kv["kv_bytes"].astype(float), 1, "kv_bytes")
    lengths = _knots(pd.concat([prefill["incremental_len"], kv["input_len"]]))
    tpot = done["tpot_s"][(done["output_len"] > 1) & (done["tpot_s"] > 0)].dropna()
    decode_s = float(np.median(tpot)) if len(tpot) else None
    source = (f"calibrated from {Path(run_dir).name} ({doc.get('meta', {}).get('engine', '?')} run: "
              f"{len(prefill)} prefills, {len(kv)} KV sizes, {len(tpot)} decodes)")
    log.info("%s", source)
    return ProfileTables(
        source=source, lengths=tuple(float(x) for x in lengths),
        kv_bytes=kv_fit.table(lengths),
        prefill_s={device: fit.table(lengths) for device, fit in prefill_fits.items()},
        decode_step_s={} if decode_s is None else {local_device: decode_s},
    )


def calibrated_scenario(scenario: Scenario, run_dir: str | Path, name: str = "calibrated") -> Scenario:
    """`scenario` on the virtual engine with the profile fitted to `run_dir` (a run of it): each
    cluster gets its own table (devices `remote` and `local`) at speed factor 1, since the
    measured times already include any slow-down the run applied. Same seed, same arrivals (at the
    run's own rate where the scenario's is `auto`)."""
    tables = profile_from_run(run_dir, remote_device="remote", local_device="local")
    if "local" not in tables.decode_step_s:
        raise TelemetryError(f"run dir {str(run_dir)!r}: no decode step to calibrate from (no request "
                             "with more than one output token completed); record a longer run")
    if is_auto(scenario) and (rate := recorded_rate(load_run(run_dir)[2].get("meta", {}))) is not None:
        scenario = with_rate(scenario, rate)  # the rate `auto` became in that run: the same arrivals
    doc = scenario.model_dump(mode="json")
    doc["engine"] = "virtual"
    doc["model"] = {"profile": profile_document(tables, name, digits=6)}
    for cluster in ("remote", "local"):
        doc["clusters"][cluster].update(device=cluster, speed_factor=1.0)
    return parse_scenario(doc, Path.cwd())


def profile_yaml(tables: ProfileTables, name: str = "calibrated") -> str:
    """The `model:` section of a scenario holding `tables`, as YAML text."""
    return yaml.safe_dump({"model": {"profile": profile_document(tables, name)}}, sort_keys=False)


def write_profile(tables: ProfileTables, path: str | Path, name: str = "calibrated") -> Path:
    path = Path(path)
    path.write_text(f"# {tables.source}\n{profile_yaml(tables, name)}", encoding="utf-8")
    return path


@dataclass(frozen=True, slots=True)
class _Fit:
    """A polynomial fitted over [lo, hi] of the observed lengths, continued linearly outside it
    (a device that only saw short prompts must not extrapolate a square term to 128K tokens)."""

    coef: np.ndarray  # numpy polyval order: highest power first
    lo: float
    hi: float

    @classmethod
    def of(cls, x: pd.Series, y: pd.Series, degree: int, what: str) -> _Fit:
        """Least squares with non-negative coefficients: a negative one is dropped and the rest
        refitted, so a noisy run cannot produce a time that falls with length."""
        xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        if np.unique(xs).size < MIN_SAMPLES:
            raise TelemetryError(f"calibrate {what}: {np.unique(xs).size} distinct lengths; need at "
                                 f"least {MIN_SAMPLES} (record a run with varied prompt lengths)")
        powers = list(range(degree + 1))
        while True:
            basis = np.column_stack([xs ** p for p in powers])
            coef, *_ = np.linalg.lstsq(basis, ys, rcond=None)
            if (coef >= 0).all() or len(powers) == 1:
                break
            powers.pop(int(np.argmin(coef)))
        full = np.zeros(degree + 1)
        for p, c in zip(powers, coef, strict=True):
            full[degree - p] = max(c, 0.0)
        return cls(full, float(xs.min()), float(xs.max()))

    def table(self, lengths: np.ndarray) -> tuple[float, ...]:
        inside = np.clip(lengths, self.lo, self.hi)
        slope = np.polyval(np.polyder(self.coef), inside)
        values = np.polyval(self.coef, inside) + slope * (lengths - inside)
        return tuple(float(max(v, 1e-6)) for v in values)  # profile values must be positive


def _knots(lengths: pd.Series) -> np.ndarray:
    """Up to NUM_KNOTS distinct whole lengths from the smallest to the largest observed."""
    values = np.asarray(lengths, dtype=float)
    knots = np.unique(np.round(np.quantile(values, np.linspace(0, 1, NUM_KNOTS))))
    if knots.size < 2:
        knots = np.array([max(values.min() - 1, 1.0), values.max() + 1])
    return knots
