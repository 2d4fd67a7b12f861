"""The machine's speed now against a machine profile's: one reference prefill timed again, and the
profile's times scaled by the ratio.

A virtual machine's or a shared host's speed drifts by tens of percent over minutes (CPU steal, noisy
neighbours, frequency): this 2-core VM prefilled 2,048 tokens in 0.63 to 0.85 s over one afternoon.
A profile is one moment's measurement, so a prediction for a run an hour later carries that drift as
error. `calibrate --machine` records the reference (one idle probe's median prefill of the sharing
rounds' prompt); timing it again next to a run and scaling the tables by the ratio makes the profile
say what this machine does now. Scaling is uniform: steal and frequency slow every op alike. A
reference timed while something else held a core is timed again (cpu_meter.least_disturbed): one such
reading (0.175 s among 0.14 s ones) scaled a virtual run 13 % slow.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from emulator.errors import CalibrationError
from emulator.limits import MAX_COMPUTE_FACTOR, MIN_COMPUTE_FACTOR
from emulator.live.cpu_meter import Metered, foreign_cores, least_disturbed, read_cpu
from emulator.live.machine_probes import ProbeProcess, started_probes
from emulator.scenario.model_section import ProfileFile, Provenance, significant, write_profile_file

REFERENCE_REPS = 7
WARMUP_REPS = 2  # a fresh probe's first prefills run cold (allocator, page faults): 0.19 s against 0.15 s warm
ANSWER_S = 120.0


def time_reference(probe: ProbeProcess, tokens: int, reps: int = REFERENCE_REPS) -> float:
    """Median seconds of `reps` prefills of `tokens` on an idle `probe` (the prefill role's path),
    after WARMUP_REPS untimed ones: both ends of the ratio are then a warm worker's speed, as in a run."""
    doc = probe.ask({"op": "prefill", "lengths": [tokens], "reps": WARMUP_REPS + reps}, ANSWER_S)
    times = doc.get("prefill_s")
    if (not isinstance(times, list) or len(times) != 1 or not isinstance(times[0], list)
            or len(times[0]) != WARMUP_REPS + reps or not all(type(t) is float and 0 < t < 3600 for t in times[0])):
        raise CalibrationError(f"probe: prefill_s is not one list of {WARMUP_REPS + reps} positive seconds")
    return statistics.median(times[0][WARMUP_REPS:])


def metered_reference(probe: ProbeProcess, tokens: int) -> Metered[float]:
    """time_reference, timed again while other load disturbed it; the foreign load it ran under."""
    def once() -> Metered[float]:
        before = read_cpu([probe.proc.pid])
        reference_s = time_reference(probe, tokens)
        return Metered(reference_s, foreign_cores(before, read_cpu([probe.proc.pid])))

    return least_disturbed(once)


def reference_now(loaded: ProfileFile) -> Metered[float]:
    """The profile's reference prefill timed on this machine now (a probe started for it, ~10 s)."""
    measured = _measured(loaded)
    assert measured.preset is not None and measured.size is not None and measured.busy_op_tokens is not None
    with started_probes(1, measured.preset, measured.size, 0) as probes:
        return metered_reference(probes[0], measured.busy_op_tokens)


def rescaled(loaded: ProfileFile, reference_s: float) -> ProfileFile:
    """`loaded` with its prefill and decode times multiplied by reference_s / its reference; KV bytes,
    the sharing factors and the tail share (ratios) unchanged. The factor is kept in `measured`."""
    measured = _measured(loaded)
    assert measured.reference_prefill_s is not None
    base = measured.speed_scale or 1.0  # a rescaled file's times already carry its factor
    scale = _drift(reference_s, measured.reference_prefill_s, "the profile")
    profile = loaded.model.profile.model_dump(mode="json")
    factor = scale / base

    def times(table: dict[str, list[float]]) -> dict[str, list[float]]:
        return {device: [significant(t * factor) for t in values] for device, values in table.items()}

    profile["prefill_s"] = times(profile["prefill_s"])
    profile["decode_step_ms"] = {device: significant(t * factor) for device, t in profile["decode_step_ms"].items()}
    profile["decode_step_ms_by_batch"] = times(profile["decode_step_ms_by_batch"])
    doc = loaded.model_dump(mode="json")
    doc["model"]["profile"] = profile
    doc["measured"]["speed_scale"] = round(scale, 4)
    return ProfileFile.model_validate(doc)


def with_compute_factor(loaded: ProfileFile, reference_s: float) -> ProfileFile:
    """`loaded` with its tables as they are and its host's compute factor reference_s over the
    reference its tables stand for (its reference times its speed scale): the virtual engine
    charges the machine's speed now, while its scheduler models with the tables a live run's
    scheduler reads from the same file (the live engine ignores the factor)."""
    measured = _measured(loaded)
    assert measured.reference_prefill_s is not None
    if loaded.model.profile.host is None:
        raise CalibrationError("the profile has no host section (written by calibrate --machine); "
                               "calibrate --machine again to get one")
    factor = _drift(reference_s, measured.reference_prefill_s * (measured.speed_scale or 1.0), "the profile's tables")
    doc = loaded.model_dump(mode="json")
    doc["model"]["profile"]["host"]["compute_factor"] = round(factor, 4)
    return ProfileFile.model_validate(doc)


def _drift(reference_s: float, against_s: float, where: str) -> float:
    """reference_s over against_s (`where`'s reference), refused in one line outside the compute
    factor's bounds: not drift but another machine or a broken probe."""
    ratio = reference_s / against_s
    if not MIN_COMPUTE_FACTOR <= ratio <= MAX_COMPUTE_FACTOR:
        raise CalibrationError(f"the reference prefill took {reference_s:.4f} s now against {against_s:.4f} s in "
                               f"{where} (x{ratio:.2f}): not this machine's drift; calibrate --machine again on "
                               "this machine")
    return ratio


def _measured(loaded: ProfileFile) -> Provenance:
    measured = loaded.measured
    if (measured is None or measured.reference_prefill_s is None or measured.preset is None
            or measured.busy_op_tokens is None):
        raise CalibrationError("the profile has no measured.reference_prefill_s (written by calibrate --machine "
                               "since it times one); calibrate --machine again to get one")
    return measured


def write_rescaled(scaled: ProfileFile, path: Path) -> Path:
    """`scaled` at `path` (folders made), a header saying what it was scaled by."""
    measured = _measured(scaled)
    return write_profile_file(scaled, path, f"its times scaled x{measured.speed_scale or 1.0:g} to the machine's "
                              "speed by `python -m emulator calibrate --machine --rescale`.")
