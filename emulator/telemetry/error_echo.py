"""How often a run answers refused control messages on the bus: at most one error line a period.

Sans-I/O: the bus hands each refusal in with `now` and sends what comes back. The first refusal after
a quiet period is echoed at once; later ones are held (only the latest is kept) and echoed when the
period ends, carrying the number of refusals it stands for that were not shown. So a flood of bad
messages costs one publish a second, and an operator who sends two bad values quickly still sees
the answer to the second. The bus, not this module, knows the clock and the broker.
"""

from __future__ import annotations

from dataclasses import dataclass

ERROR_ECHO_PERIOD_S = 1.0  # at most one echoed error line per period and run


@dataclass(frozen=True, slots=True)
class Echo:
    """One error line to publish; `num_suppressed` refusals since the previous line were not shown."""

    topic: str
    error: str
    num_suppressed: int = 0

    @property
    def line(self) -> str:
        if not self.num_suppressed:
            return self.error
        return (f"{self.error} [and {self.num_suppressed} more refused messages not shown: at most one "
                f"error is echoed a second]")


class ErrorEchoLimiter:
    """Decides which refusals are echoed now, which later, and counts the ones never shown."""

    def __init__(self, period_s: float = ERROR_ECHO_PERIOD_S) -> None:
        if not 0.0 <= period_s <= 3600.0:
            raise ValueError(f"period_s = {period_s!r} is outside [0, 3600]")
        self.period_s = period_s
        self.num_suppressed = 0  # refusals never echoed (replaced by a later one, or dropped at close)
        self._next_at_s = float("-inf")
        self._held: tuple[str, str] | None = None
        self._num_held = 0

    def offer(self, now_s: float, topic: str, error: str) -> Echo | None:
        """The echo to send now, or None when this refusal is held for the end of the period."""
        if self._held is None and now_s >= self._next_at_s:
            self._next_at_s = now_s + self.period_s
            return Echo(topic, error)
        if self._held is not None:
            self.num_suppressed += 1  # the one held until now will never be shown
        self._held, self._num_held = (topic, error), self._num_held + 1
        return None

    @property
    def due_at_s(self) -> float | None:
        """When the held refusal may be echoed; None when nothing is held."""
        return self._next_at_s if self._held is not None else None

    def flush(self, now_s: float) -> Echo | None:
        """The held refusal as an echo once its time has come, counting the ones it replaced."""
        if self._held is None or now_s < self._next_at_s:
            return None
        (topic, error), num_held = self._held, self._num_held
        self._held, self._num_held = None, 0
        self._next_at_s = now_s + self.period_s
        return Echo(topic, error, num_held - 1)

    def drop_held(self) -> None:
        """At close: what is still held is never shown, only counted."""
        if self._held is not None:
            self.num_suppressed += 1
        self._held, self._num_held = None, 0
