"""The machine probe's decode timing (emulator/worker/machine_probe.py): each batch size timed once,
largest first, as a run's decode worker meets a size after its larger batches; answered in the
order asked."""

from __future__ import annotations

import time

import pytest

from emulator.worker import machine_probe
from emulator.worker.machine_probe import Probe, timing_order
from model_stub import HybridModel, get_preset

from .conftest import PRESET, SEED, SIZE

PAUSE_PER_SEQUENCE_S = 0.02  # a step of batch b takes at least b times this under the spy below


def test_sizes_are_timed_once_each_largest_first() -> None:
    assert timing_order([1, 2, 4, 8]) == [8, 4, 2, 1]
    assert timing_order([2, 8, 2, 1]) == [8, 2, 1]


def test_each_size_is_timed_largest_first_and_answered_in_the_order_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real decode step, made at least b x PAUSE_PER_SEQUENCE_S long for a batch of b, so each
    answer can be told apart by its size whatever the machine's speed."""
    timed: list[int] = []
    real = machine_probe.decode_tokens

    def slowed(model, tokens, caches):
        timed.append(len(caches))
        time.sleep(PAUSE_PER_SEQUENCE_S * len(caches))
        return real(model, tokens, caches)

    monkeypatch.setattr(machine_probe, "decode_tokens", slowed)
    probe = Probe(HybridModel(get_preset(PRESET, SIZE, seed=SEED), device="cpu"))
    asked = [1, 4, 2]
    steps = probe.run_decode({"cache_tokens": 64, "batch_sizes": asked, "steps": 3})["step_s"]
    assert [size for i, size in enumerate(timed) if i == 0 or size != timed[i - 1]] == [4, 2, 1]
    assert len(steps) == len(asked)
    for size, step_s in zip(asked, steps, strict=True):
        assert step_s >= PAUSE_PER_SEQUENCE_S * size, (size, step_s)
