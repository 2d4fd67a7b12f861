"""A worker's `calibrate`: it times the prefills and decode steps asked, in order, within bounds;
a real worker process answers while it serves (emulator/live/calibration.py reads the answers)."""

from __future__ import annotations

import asyncio

import pytest

from emulator.errors import WorkerError
from emulator.limits import MAX_CALIBRATION_LENGTHS, MAX_CALIBRATION_STEPS, MAX_CALIBRATION_TOKENS
from emulator.wire import protocol as p
from emulator.worker.calibration import calibrate
from model_stub import HybridModel, get_preset

from .conftest import PRESET, SEED, SIZE, ControlServer


def test_calibrate_times_each_prefill_and_a_decode_step_and_leaves_the_model_as_it_was() -> None:
    model = HybridModel(get_preset(PRESET, SIZE, seed=SEED), device="cpu")
    prompt = list(range(100))
    before = model.generate(prompt, 4)
    prefill_s, step_s = calibrate(model, [32, 300], decode_steps=3)
    assert len(prefill_s) == 2 and all(s > 0 for s in prefill_s) and step_s > 0
    assert model.generate(prompt, 4) == before


ONE = p.encode(p.Calibrate(lengths=[1], decode_steps=1))


@pytest.mark.parametrize("line", [
    ONE.replace(b"[1]", str([MAX_CALIBRATION_TOKENS + 1]).encode()),
    ONE.replace(b"[1]", str([8] * (MAX_CALIBRATION_LENGTHS + 1)).encode()),
    ONE.replace(b'"decode_steps":1', f'"decode_steps":{MAX_CALIBRATION_STEPS + 1}'.encode()),
    ONE.replace(b"[1]", b"[]"),
])
def test_a_calibration_past_its_bounds_is_refused_by_name(line: bytes) -> None:
    with pytest.raises(WorkerError, match=r"^calibrate\.(lengths|decode_steps)"):
        p.decode(line)


def test_a_worker_process_answers_calibrate(spawn) -> None:
    async def scenario() -> p.Calibrated:
        gw = ControlServer()
        port = await gw.start()
        try:
            spawn("local-decode-0", port)
            await gw.send("local-decode-0", p.Calibrate(lengths=[64, 256], decode_steps=2))
            return await gw.wait("local-decode-0", "calibrated")
        finally:
            await gw.close()

    answer = asyncio.run(scenario())
    assert len(answer.prefill_s) == 2 and answer.decode_step_s > 0
