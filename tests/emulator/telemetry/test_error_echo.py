"""The echo limiter as a list of refusals in and echoes out (no broker, no clock)."""

from __future__ import annotations

import pytest

from emulator.telemetry.error_echo import Echo, ErrorEchoLimiter


def test_the_first_refusal_is_echoed_at_once_and_a_burst_becomes_one_line_with_a_count() -> None:
    limiter = ErrorEchoLimiter(1.0)
    assert limiter.offer(0.0, "t/a", "e1") == Echo("t/a", "e1", 0)
    assert [limiter.offer(0.1 + i / 100, "t/b", f"e{i}") for i in range(50)] == [None] * 50
    assert limiter.due_at_s == 1.0
    assert limiter.flush(0.99) is None  # not before the period ends
    echo = limiter.flush(1.0)
    assert echo == Echo("t/b", "e49", 49)  # the latest, standing for the 49 before it
    assert echo.line == "e49 [and 49 more refused messages not shown: at most one error is echoed a second]"
    assert limiter.due_at_s is None and limiter.flush(5.0) is None
    assert limiter.num_suppressed == 49


def test_a_lone_late_refusal_waits_for_the_period_and_is_shown_whole() -> None:
    limiter = ErrorEchoLimiter(1.0)
    assert limiter.offer(0.0, "t", "e1") is not None
    assert limiter.offer(0.5, "t", "e2") is None
    assert limiter.flush(1.0) == Echo("t", "e2", 0)
    assert limiter.offer(1.5, "t", "e3") is None  # 1.0 + 1 s: still inside the flush's period
    assert limiter.flush(2.0) == Echo("t", "e3", 0)
    assert limiter.offer(3.5, "t", "e4") == Echo("t", "e4", 0)  # quiet for a period: at once
    assert limiter.num_suppressed == 0


def test_lines_are_a_period_apart_whatever_the_rate() -> None:
    limiter, lines = ErrorEchoLimiter(1.0), []
    for i in range(5000):  # 5,000 refusals over 5 s, flushed whenever due
        now = i / 1000
        if (due := limiter.due_at_s) is not None and now >= due:
            lines.append((now, limiter.flush(now)))
        if (echo := limiter.offer(now, "t", f"e{i}")) is not None:
            lines.append((now, echo))
    limiter.drop_held()
    assert len(lines) <= 6
    assert all(b[0] - a[0] >= 1.0 for a, b in zip(lines, lines[1:], strict=False))
    assert len(lines) + limiter.num_suppressed == 5000  # each refusal shown once or counted


def test_a_period_of_zero_echoes_everything() -> None:
    limiter = ErrorEchoLimiter(0.0)
    assert [limiter.offer(0.0, "t", f"e{i}") for i in range(3)] == [Echo("t", f"e{i}", 0) for i in range(3)]


@pytest.mark.parametrize("period_s", [-1.0, float("nan"), float("inf"), 1e9])
def test_a_period_outside_its_bounds_is_refused(period_s: float) -> None:
    with pytest.raises(ValueError, match="period_s"):
        ErrorEchoLimiter(period_s)
