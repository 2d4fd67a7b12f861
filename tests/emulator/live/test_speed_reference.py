"""A profile rescaled to the machine's speed now: times scale by the reference's ratio, ratios do not;
a ratio too far from 1 is another machine, refused in one line."""

from __future__ import annotations

import pytest

from emulator.errors import CalibrationError
from emulator.live.machine_profile import MachineProfile, plan_machine, profile_file_of
from emulator.live.speed_reference import WARMUP_REPS, reference_now, rescaled, time_reference, with_compute_factor
from emulator.scenario import load_scenario
from tests.emulator.live.test_machine_profile import QUICKSTART


def _profile(reference_s: float | None = 0.2):  # type: ignore[no-untyped-def]
    scenario = load_scenario(QUICKSTART)
    measured = MachineProfile(plan_machine(scenario, quick=True), prefill_s=(0.1, 0.5, 0.9, 1.6),
                              kv_bytes=(1 << 20, 2 << 20, 3 << 20, 5 << 20), decode_step_s=(0.02, 0.03, 0.05, 0.15),
                              busy_slowdown=(1.0, 1.1, 1.7), kv_tail_bytes=(314_573, 629_146, 943_718, 1_572_864), reference_prefill_s=0.2,
                              cores=2, worker_nice=10, wall_s=10.0)
    loaded = profile_file_of(measured, scenario, date="2026-01-01", git_sha="abc")
    if reference_s is None:
        doc = loaded.model_dump(mode="json")
        doc["measured"]["reference_prefill_s"] = None
        return type(loaded).model_validate(doc)
    return loaded


def test_times_scale_by_the_reference_ratio_and_ratios_stay() -> None:
    slower = rescaled(_profile(), 0.25)  # the machine is 25 % slower now
    profile = slower.model.profile
    assert profile.prefill_s == {"cpu": (0.125, 0.625, 1.125, 2.0)}
    assert profile.decode_step_ms == {"cpu": 187.5}
    assert profile.decode_step_ms_by_batch == {"cpu": (25.0, 37.5, 62.5, 187.5)}
    assert profile.kv_mib == (1.0, 2.0, 3.0, 5.0) and profile.kv_tail_mib == (0.3, 0.6, 0.9, 1.5)
    assert profile.host is not None and profile.host.busy_slowdown == (1.0, 1.1, 1.7)
    assert slower.measured is not None and slower.measured.speed_scale == 1.25
    assert slower.measured.reference_prefill_s == 0.2  # the profile's own moment, kept


def test_a_rescaled_profile_rescales_from_its_original_times() -> None:
    once = rescaled(_profile(), 0.3)
    twice = rescaled(once, 0.1)  # x0.5 of the original, not x1.5 x 0.5
    assert twice.model.profile.prefill_s == {"cpu": (0.05, 0.25, 0.45, 0.8)}
    assert twice.measured is not None and twice.measured.speed_scale == 0.5


def test_a_ratio_past_drift_is_refused_in_one_line() -> None:
    with pytest.raises(CalibrationError, match=r"x10.00\): not this machine's drift; calibrate --machine again"):
        rescaled(_profile(), 2.0)


def test_a_compute_factor_is_the_reading_over_the_reference_the_tables_stand_for() -> None:
    """On a rescaled profile too (its tables stand for 0.3 s): the tables stay, the host says how
    much slower the machine computes now."""
    once = rescaled(_profile(), 0.3)
    charged = with_compute_factor(once, 0.36)
    assert charged.model.profile.prefill_s == once.model.profile.prefill_s
    assert charged.model.profile.host is not None and charged.model.profile.host.compute_factor == 1.2
    assert with_compute_factor(_profile(), 0.15).model.profile.host.compute_factor == 0.75  # type: ignore[union-attr]
    with pytest.raises(CalibrationError, match=r"0.3000 s in the profile's tables \(x10.00\): not this machine's drift"):
        with_compute_factor(once, 3.0)
    doc = _profile().model_dump(mode="json")
    doc["model"]["profile"]["host"] = None
    with pytest.raises(CalibrationError, match="no host section"):
        with_compute_factor(type(once).model_validate(doc), 0.2)


def test_a_profile_without_a_reference_says_how_to_get_one() -> None:
    with pytest.raises(CalibrationError, match="no measured.reference_prefill_s"):
        rescaled(_profile(None), 0.2)
    with pytest.raises(CalibrationError, match="no measured.reference_prefill_s"):
        reference_now(_profile(None))


class _ColdProbe:
    """A probe's answers as a fresh worker gives them: the first prefills slow (cold allocator)."""

    def __init__(self) -> None:
        self.asked: list[dict] = []

    def ask(self, cmd: dict, timeout_s: float) -> dict:
        self.asked.append(cmd)
        cold = [0.5, 0.4][:WARMUP_REPS]
        return {"prefill_s": [cold + [0.15 + 0.01 * i for i in range(cmd["reps"] - len(cold))]]}


def test_the_reference_is_a_warm_probe_s_median() -> None:
    probe = _ColdProbe()
    assert time_reference(probe, 512, reps=5) == pytest.approx(0.17)  # type: ignore[arg-type]
    assert probe.asked == [{"op": "prefill", "lengths": [512], "reps": WARMUP_REPS + 5}]


def test_a_short_answer_is_refused() -> None:
    class Short(_ColdProbe):
        def ask(self, cmd: dict, timeout_s: float) -> dict:
            return {"prefill_s": [[0.2, 0.2]]}

    with pytest.raises(CalibrationError, match="not one list of 9 positive seconds"):
        time_reference(Short(), 512, reps=7)  # type: ignore[arg-type]
