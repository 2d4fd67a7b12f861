"""What the live stack adds to a machine profile's probe times, measured on one short live run.

A probe (`calibrate --machine`) times the model alone at the workers' nice level. A live worker
computes beside the gateway, the MQTT broker, telemetry, the KV transport and, on the tun backend,
the link relay, all on the same cores: on this 2-core VM its prefills took 1.05-1.11x the probe's
with no other prefill running (126 of 150 requests of one run), and its decode steps up to 1.6x.
That is the machine running this stack, not a property of one load or link, so it is measured once:
a short live run of the scenario, replayed on the virtual engine with the profile, and per request
(matched by id) live against virtual prefill seconds and TPOT. A prefill costs the live worker a
fixed part besides the model (one stack run, over the probe's table: x1.14 at 128-400 tokens, x1.02
at 700-1,024, x0.87 at 1,600-2,048), so the prefill correction is a line, Tukey's resistant line
through (virtual, live) seconds: overhead + factor x the table, levelled to the live prefills'
total (`levelled`); decode keeps the median ratio of TPOTs. The profile's times are corrected
by them; `measured` keeps the figures.

On a lossy link the live stack also slows TCP: its relay and the receiver's ACKs wait for cores the
workers hold, so a loss-limited connection's rate falls below what tcp.py's constant (fitted on a
quiet host) gives; three fidelity matrices' 1 % loss runs read 0.43-0.48 s from a remote prefill's
end to its first token, the fluid 0.38-0.39. A lossy stack run measures it too: the profile's
host `loss_rate_factor` is the factor on that rate whose replay gives the live run's mean time from
a remote prefill's end to its first token (`fit_loss_rate_factor`).
"""

from __future__ import annotations

import itertools
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from emulator.auto_rate import is_auto, recorded_rate, with_rate
from emulator.control.types import Route
from emulator.errors import CalibrationError
from emulator.limits import MAX_LOSS_RATE_FACTOR, MIN_LOSS_RATE_FACTOR
from emulator.scenario import Scenario, parse_scenario
from emulator.scenario.model_section import ProfileFile, read_profile_file, significant, write_profile_file
from emulator.telemetry.recorder import load_run
from emulator.virtual.engine import run_virtual

MIN_MATCHED = 10  # prefills seen on both engines; fewer is one slow spell, not the stack
MIN_FACTOR, MAX_FACTOR = 0.5, 5.0  # outside: another machine or a broken run, not the stack's overhead
MAX_OVERHEAD_S = 1.0  # a fixed cost per prefill above this is a broken run, not the stack
MIN_SPREAD = 1.5  # the outer thirds' median prefills this far apart, or the line is a ratio through 0
POLISH_STEPS, POLISH_TOLERANCE = 20, 1e-6  # the resistant line's slope polish (converges in a few)
STALL_LINES = 2.0  # a live prefill over this many times its line is a stall, not the stack's cost
LOSS_FIT_STEPS = 8  # replays of the lossy stack run; the search settles in 3-4
LOSS_FIT_TOLERANCE = 0.01  # the replay's mean time after the prefill this close to the live run's
LOSS_FIT_GIVE_UP = 0.25  # no factor replays it closer: not the stack's effect on TCP


@dataclass(frozen=True, slots=True)
class StackFactors:
    """Live against virtual, per request: prefill seconds as overhead + factor x virtual, TPOT as
    the median ratio."""

    prefill: float
    decode: float
    requests: int
    prefill_s: float = 0.0  # the fixed cost per prefill


def factors_of(live: pd.DataFrame, virtual: pd.DataFrame) -> StackFactors:
    """The levelled prefill line and the median TPOT ratio over requests completed on both engines
    (requests.parquet frames of one scenario and seed); CalibrationError in one line when too few
    match or a factor is out of range."""
    both = live[live["status"] == "completed"].merge(
        virtual[virtual["status"] == "completed"], on="id", how="inner", suffixes=("_live", "_virtual"))
    virtual_s, live_s = _seconds(both, "prefill_end_s", "prefill_start_s")
    tpot = both["tpot_s_live"] / both["tpot_s_virtual"]
    tpot = tpot[(both["tpot_s_virtual"] > 0) & (both["tpot_s_live"] > 0)].dropna()
    if len(virtual_s) < MIN_MATCHED or len(tpot) < MIN_MATCHED:
        raise CalibrationError(f"stack run: {len(virtual_s)} prefills and {len(tpot)} decodes completed on both engines "
                               f"(need {MIN_MATCHED}); record a longer live run of the scenario")
    overhead_s, slope = levelled(resistant_line(virtual_s, live_s), virtual_s, live_s)
    factors = StackFactors(slope, float(statistics.median(tpot)), len(virtual_s), overhead_s)
    if not 0 <= overhead_s <= MAX_OVERHEAD_S:
        raise CalibrationError(f"stack run: live prefills cost {overhead_s:.3f} s each beyond the profile's: not this "
                               "stack's overhead; calibrate --machine again on this machine, then record the stack run")
    for name, value in (("prefill", factors.prefill), ("decode", factors.decode)):
        if not MIN_FACTOR <= value <= MAX_FACTOR:
            raise CalibrationError(f"stack run: live {name} took x{value:.2f} the profile's: not this stack's "
                                   "overhead; calibrate --machine again on this machine, then record the stack run")
    return factors


def resistant_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(intercept, slope) of Tukey's resistant line: the slope through the medians of the outer
    thirds (sorted by x), polished until the thirds' median residuals agree (a third's median x and
    median y need not come from one request: one stack run's noise left the first slope at x1.20
    where the data say x1.07, and the intercept below 0), the intercept the median residual; a ratio
    through 0 (the median of y / x) when the thirds' x are within MIN_SPREAD of each other or the
    intercept comes out negative."""
    pairs = sorted(zip(xs, ys, strict=True))
    third = max(1, len(pairs) // 3)
    left, right = pairs[:third], pairs[-third:]
    x_left, x_right = statistics.median(x for x, _ in left), statistics.median(x for x, _ in right)
    if x_right >= MIN_SPREAD * x_left:
        slope = (statistics.median(y for _, y in right) - statistics.median(y for _, y in left)) / (x_right - x_left)
        for _ in range(POLISH_STEPS):
            step = (statistics.median(y - slope * x for x, y in right) -
                    statistics.median(y - slope * x for x, y in left)) / (x_right - x_left)
            slope += step
            if abs(step) < POLISH_TOLERANCE:
                break
        intercept = statistics.median(y - slope * x for x, y in pairs)
        if intercept >= 0:
            return float(intercept), float(slope)
    return 0.0, float(statistics.median(y / x for x, y in pairs))


def levelled(line: tuple[float, float], xs: list[float], ys: list[float]) -> tuple[float, float]:
    """The line scaled so that it charges what the live prefills took in all: the resistant line
    fits the typical prefill, but one in five or so ran 1.2-1.4x it (the other worker computing, a
    telemetry flush), so it charged 3-5 % too little on average and the TTFT means came out short
    by more (queues). A stall, over STALL_LINES times its line, counts as its line."""
    intercept, slope = line
    charged = [intercept + slope * x for x in xs]
    live = sum(y if y <= STALL_LINES * c else c for y, c in zip(ys, charged, strict=True))
    level = live / sum(charged)
    return intercept * level, slope * level


def _seconds(both: pd.DataFrame, end: str, start: str) -> tuple[list[float], list[float]]:
    """(virtual, live) seconds of the stage, where both are positive."""
    live_s = both[f"{end}_live"] - both[f"{start}_live"]
    virtual_s = both[f"{end}_virtual"] - both[f"{start}_virtual"]
    kept = ((live_s > 0) & (virtual_s > 0)).to_numpy()
    return [float(v) for v in virtual_s[kept]], [float(v) for v in live_s[kept]]


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
    """`loaded` with prefill times overhead + x factors.prefill and decode times x factors.decode; a
    profile that already carries stack factors is refused (its replay would have charged them once)."""
    measured = loaded.measured
    if measured is not None and measured.stack_prefill_factor is not None:
        raise CalibrationError("profile: already carries stack factors (measured.stack_prefill_factor); "
                               "calibrate --machine again for a profile of the probes alone")
    profile = loaded.model.profile.model_dump(mode="json")

    def times(table: dict[str, list[float]], factor: float, plus: float = 0.0) -> dict[str, list[float]]:
        return {device: [significant(plus + t * factor) for t in values] for device, values in table.items()}

    profile["prefill_s"] = times(profile["prefill_s"], factors.prefill, factors.prefill_s)
    profile["decode_step_ms"] = {d: significant(t * factors.decode) for d, t in profile["decode_step_ms"].items()}
    profile["decode_step_ms_by_batch"] = times(profile["decode_step_ms_by_batch"], factors.decode)
    doc = loaded.model_dump(mode="json")
    doc["model"]["profile"] = profile
    doc["measured"] = {**(doc.get("measured") or {}), "stack_prefill_factor": round(factors.prefill, 4),
                       "stack_prefill_s": round(factors.prefill_s, 5),
                       "stack_decode_factor": round(factors.decode, 4), "stack_requests": factors.requests}
    return ProfileFile.model_validate(doc)


def write_with_stack(loaded: ProfileFile, run_dir: Path, path: Path) -> Path:
    measured = loaded.measured
    assert measured is not None and measured.stack_prefill_factor is not None
    host = loaded.model.profile.host
    loss = "" if host is None or host.loss_rate_factor == 1.0 else f", the loss-limited rate x{host.loss_rate_factor:g}"
    return write_profile_file(loaded, path, f"prefill {measured.stack_prefill_s or 0:g} s + x{measured.stack_prefill_factor:g} "
                              f"and decode x{measured.stack_decode_factor:g}{loss} for the live stack, from the live "
                              f"run {run_dir} by `python -m emulator calibrate SCENARIO RUN_DIR --onto PROFILE`.")


def after_prefill_s(live: pd.DataFrame, virtual: pd.DataFrame) -> tuple[float, float]:
    """(live, virtual) mean seconds from a remote prefill's end to its first token (the cache on the
    link, then its decode join), over requests routed remote and completed on both engines;
    CalibrationError in one line when fewer than MIN_MATCHED are."""
    both = live[(live["status"] == "completed") & (live["route"] == Route.PRFAAS.value)].merge(
        virtual[(virtual["status"] == "completed") & (virtual["route"] == Route.PRFAAS.value)],
        on="id", how="inner", suffixes=("_live", "_virtual"))
    virtual_s, live_s = _seconds(both, "first_token_s", "prefill_end_s")
    if len(live_s) < MIN_MATCHED:
        raise CalibrationError(f"lossy stack run: {len(live_s)} remote requests completed on both engines (need "
                               f"{MIN_MATCHED}); record a longer live run of the scenario")
    return statistics.fmean(live_s), statistics.fmean(virtual_s)


def fit_loss_rate_factor(replay: Callable[[float], tuple[float, float]]) -> float:
    """The loss_rate_factor whose replay matches the live run: `replay(factor)` gives (live, virtual)
    after_prefill_s with the profile's host at that factor. A smaller factor only lengthens the
    time, so the search keeps a bracket and steps by the ratio (the time is about inversely
    proportional to the rate; a step leaving the bracket halves it instead), until within
    LOSS_FIT_TOLERANCE or LOSS_FIT_STEPS replays; the closest factor seen. CalibrationError when
    none came within LOSS_FIT_GIVE_UP (the live time lies outside what the factor's range gives)."""
    low, high, factor = MIN_LOSS_RATE_FACTOR, MAX_LOSS_RATE_FACTOR, 1.0
    best, best_miss = factor, float("inf")
    for _ in range(LOSS_FIT_STEPS):
        live_s, virtual_s = replay(factor)
        miss = virtual_s / live_s - 1.0
        if abs(miss) < best_miss:
            best, best_miss = factor, abs(miss)
        if abs(miss) <= LOSS_FIT_TOLERANCE:
            break
        if miss > 0:  # the replay is slow: more rate
            low = factor
        else:
            high = factor
        step = factor * (1.0 + miss)
        factor = step if low < step < high else (low * high) ** 0.5
    if best_miss > LOSS_FIT_GIVE_UP:
        raise CalibrationError(f"lossy stack run: no loss_rate_factor in {MIN_LOSS_RATE_FACTOR:g}-{MAX_LOSS_RATE_FACTOR:g} "
                               f"replays its remote caches within {LOSS_FIT_GIVE_UP:.0%} (closest {best:g}, {best_miss:.0%} off): "
                               "not the stack's effect on TCP; check the run's link and record it again")
    return best


def with_loss_rate_factor(loaded: ProfileFile, factor: float) -> ProfileFile:
    """`loaded` with its host's loss_rate_factor set to `factor` (a profile without a host is
    refused: the factor is the shared host's)."""
    if loaded.model.profile.host is None:
        raise CalibrationError("profile: has no host (calibrate --machine measures one); the loss rate factor "
                               "belongs to the host the live stack shares")
    doc = loaded.model_dump(mode="json")
    doc["model"]["profile"]["host"]["loss_rate_factor"] = significant(factor)
    return ProfileFile.model_validate(doc)


def stacked_profile(scenario: Scenario, run_dir: Path, profile_path: Path) -> tuple[ProfileFile, StackFactors]:
    """The machine profile in `profile_path` with what the live stack added in the run in `run_dir`
    (of `scenario`): its prefill and decode factors, and on a lossy link the host's
    loss_rate_factor fitted on top of them. Each replay runs in a temporary folder."""
    loaded, live = read_profile_file(profile_path), load_run(run_dir)[0]
    with tempfile.TemporaryDirectory(prefix="prf-stack-replay-") as work:
        factors = factors_of(live, _replayed(scenario, run_dir, loaded, Path(work) / "stack"))
        stacked = with_stack(loaded, factors)
        if scenario.link.to_local.loss_pct > 0:
            tries = itertools.count()

            def replay(factor: float) -> tuple[float, float]:
                tried = with_loss_rate_factor(stacked, factor)
                return after_prefill_s(live, _replayed(scenario, run_dir, tried, Path(work) / f"loss-{next(tries)}"))

            stacked = with_loss_rate_factor(stacked, fit_loss_rate_factor(replay))
    return stacked, factors


def _replayed(scenario: Scenario, run_dir: Path, profile: ProfileFile, folder: Path) -> pd.DataFrame:
    """The requests of `scenario`'s run in `run_dir` replayed on the virtual engine with `profile`
    (written into `folder` for the replay to read)."""
    path = write_profile_file(profile, folder / "profile.yaml", "a stack replay's profile")
    run_virtual(replay_scenario(scenario, run_dir, path), folder / "run")
    return load_run(folder / "run")[0]
