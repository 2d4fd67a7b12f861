"""The TTFT window both engines' metrics read: only the last window_s seconds, numpy's percentiles."""

from __future__ import annotations

import random

import numpy as np
import pytest

from emulator.run.ttft_window import TtftWindow


def test_the_window_keeps_only_the_last_window_s_seconds() -> None:
    window = TtftWindow(10.0)
    rng = random.Random(3)
    samples = [(t * 0.5, rng.uniform(0.1, 5.0)) for t in range(100)]  # t = 0 .. 49.5
    for t, value in samples:
        window.add(t, value)
    now = 49.5
    inside = [v for t, v in samples if now - 10.0 < t <= now]
    assert window.sorted_values(now) == sorted(inside)
    for p in (50, 90, 99):
        assert window.percentile(p, now) == pytest.approx(float(np.percentile(inside, p)))
    assert len(window) == len(inside)  # older samples were evicted
    assert window.percentile(50, now + 100) is None and len(window) == 0


def test_a_window_of_no_length_is_refused() -> None:
    with pytest.raises(ValueError, match="window_s"):
        TtftWindow(0.0)
