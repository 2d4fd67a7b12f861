"""What the live stack adds to a machine profile's probe times, measured on one short live run.

A probe (`calibrate --machine`) times the model alone at the workers' nice level. A live worker
computes beside the gateway, the MQTT broker, telemetry, the KV transport and, on the tun backend,
the link relay, all on the same cores: on this 2-core VM its prefills took 1.05-1.11x the probe's
with no other prefill running (126 of 150 requests of one run), and its decode steps up to 1.6x.
That is the machine running this stack, not a property of one load or link, so it is measured once:
a short live run of the scenario, replayed on the virtual engine with the profile, and per request
(matched by id) the median of live over virtual prefill seconds and of live over virtual TPOT.
The profile's prefill and decode times are multiplied by them; `measured` keeps the factors.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from emulator.auto_rate import is_auto, recorded_rate, with_rate
from emulator.errors import CalibrationError
from emulator.scenario import Scenario, parse_scenario
from emulator.scenario.model_section import ProfileFile, significant, write_profile_file
from emulator.telemetry.recorder import load_run

MIN_MATCHED = 10  # prefills seen on both engines; fewer is one slow spell, not the stack
MIN_FACTOR, MAX_FACTOR = 0.5, 5.0  # outside: another machine or a broken run, not the stack's overhead


@dataclass(frozen=True, slots=True)
class StackFactors:
    """Live over virtual, per request, median: prefill seconds and TPOT."""

    prefill: float
    decode: float
    requests: int


def factors_of(live: pd.DataFrame, virtual: pd.DataFrame) -> StackFactors:
    """The medians over requests completed on both engines (requests.parquet frames of one scenario
    and seed); CalibrationError in one line when too few match or a factor is out of range."""
    both = live[live["status"] == "completed"].merge(
        virtual[virtual["status"] == "completed"], on="id", how="inner", suffixes=("_live", "_virtual"))
    prefill = _ratios(both, "prefill_end_s", "prefill_start_s")
    tpot = both["tpot_s_live"] / both["tpot_s_virtual"]
    tpot = tpot[(both["tpot_s_virtual"] > 0) & (both["tpot_s_live"] > 0)].dropna()
    if len(prefill) < MIN_MATCHED or len(tpot) < MIN_MATCHED:
        raise CalibrationError(f"stack run: {len(prefill)} prefills and {len(tpot)} decodes completed on both engines "
                               f"(need {MIN_MATCHED}); record a longer live run of the scenario")
    factors = StackFactors(float(statistics.median(prefill)), float(statistics.median(tpot)), len(prefill))
    for name, value in (("prefill", factors.prefill), ("decode", factors.decode)):
        if not MIN_FACTOR <= value <= MAX_FACTOR:
            raise CalibrationError(f"stack run: live {name} took x{value:.2f} the profile's: not this stack's "
                                   "overhead; calibrate --machine again on this machine, then record the stack run")
    return factors


def _ratios(both: pd.DataFrame, end: str, start: str) -> pd.Series:
    live_s = both[f"{end}_live"] - both[f"{start}_live"]
    virtual_s = both[f"{end}_virtual"] - both[f"{start}_virtual"]
    return (live_s / virtual_s)[(live_s > 0) & (virtual_s > 0)].dropna()


def replay_scenario(scenario: Scenario, run_dir: Path, profile_path: Path) -> Scenario:
    """`scenario` (the live run's) on the virtual engine with the profile in `profile_path`: same
    seed and arrivals (the run's own rate where the scenario's is `auto`). The profile is read from
    its own folder."""
    if is_auto(scenario) and (rate := recorded_rate(load_run(run_dir)[2].get("meta", {}))) is not None:
        scenario = with_rate(scenario, rate)
    doc = scenario.model_dump(mode="json", exclude_none=True)
    doc["engine"] = "virtual"
    doc["model"] = {"preset": scenario.model.preset, "size": scenario.model.preset_size,
                    "profile_file": profile_path.name}
    folder = profile_path.resolve().parent  # named on the command line: trusted as a scenario file's folder is
    return parse_scenario(doc, folder, trusted_dir=folder)


def with_stack(loaded: ProfileFile, factors: StackFactors) -> ProfileFile:
    """`loaded` with prefill times x factors.prefill and decode times x factors.decode; a profile that
    already carries stack factors is refused (its replay would have charged them once already)."""
    measured = loaded.measured
    if measured is not None and measured.stack_prefill_factor is not None:
        raise CalibrationError("profile: already carries stack factors (measured.stack_prefill_factor); "
                               "calibrate --machine again for a profile of the probes alone")
    profile = loaded.model.profile.model_dump(mode="json")

    def times(table: dict[str, list[float]], factor: float) -> dict[str, list[float]]:
        return {device: [significant(t * factor) for t in values] for device, values in table.items()}

    profile["prefill_s"] = times(profile["prefill_s"], factors.prefill)
    profile["decode_step_ms"] = {d: significant(t * factors.decode) for d, t in profile["decode_step_ms"].items()}
    profile["decode_step_ms_by_batch"] = times(profile["decode_step_ms_by_batch"], factors.decode)
    doc = loaded.model_dump(mode="json")
    doc["model"]["profile"] = profile
    doc["measured"] = {**(doc.get("measured") or {}), "stack_prefill_factor": round(factors.prefill, 4),
                       "stack_decode_factor": round(factors.decode, 4), "stack_requests": factors.requests}
    return ProfileFile.model_validate(doc)


def write_with_stack(loaded: ProfileFile, run_dir: Path, path: Path) -> Path:
    measured = loaded.measured
    assert measured is not None and measured.stack_prefill_factor is not None
    return write_profile_file(loaded, path, f"prefill x{measured.stack_prefill_factor:g} and decode "
                              f"x{measured.stack_decode_factor:g} for the live stack, from the live run {run_dir} by "
                              "`python -m emulator calibrate SCENARIO RUN_DIR --onto PROFILE`.")
