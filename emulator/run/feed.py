"""The scheduler's feed, once for both engines: each interval's link and queue observations go in,
the loops that are due run, and the decisions come out for the engine to carry out (a role change
drains a node through the run core; a threshold change is in the control state already).
"""

from __future__ import annotations

from emulator.control.scheduler import DualTimescaleScheduler, RoleChange, ThresholdChange


class Interval:
    """What an engine measured over the last interval: the link's goodput (bytes/s), utilization,
    loss and RTT inflation (1: no standing queue), and the requests waiting per pool. A plain
    class: compiled, it is a native object the virtual sampler builds every simulated second (a
    frozen dataclass costs several times as much). Read-only by convention."""

    __slots__ = ("goodput_bytes_per_s", "utilization", "loss", "rtt_inflation", "queue_remote_prefill",
                 "queue_local_prefill", "queue_decode")

    def __init__(self, goodput_bytes_per_s: float, utilization: float, loss: float, rtt_inflation: float,
                 queue_remote_prefill: int, queue_local_prefill: int, queue_decode: int) -> None:
        self.goodput_bytes_per_s, self.utilization, self.loss = goodput_bytes_per_s, utilization, loss
        self.rtt_inflation = rtt_inflation
        self.queue_remote_prefill, self.queue_local_prefill = queue_remote_prefill, queue_local_prefill
        self.queue_decode = queue_decode


def tick(scheduler: DualTimescaleScheduler, now_s: float, interval: Interval) -> list[ThresholdChange | RoleChange]:
    """Observe one interval, then run whatever loop is due; returns its decisions."""
    scheduler.observe_link(now_s, interval.goodput_bytes_per_s, interval.utilization, interval.loss,
                           max(interval.rtt_inflation, 1.0))
    scheduler.observe_queues(now_s, interval.queue_remote_prefill, interval.queue_local_prefill,
                             interval.queue_decode)
    return scheduler.tick(now_s)
