"""What of its workload a run plays, in one record: a cap, a time window or a skipped trace row is
stated (CLI output, summary.json's meta, the Live and Runs pages), never applied silently.

Built by emulator/workload/build.py from what the readers and generators report; nothing here reads
files or draws requests.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class WorkloadCoverage:
    """`num_requests` are the requests due within the run's duration at the scenario's own pace
    (a live operator's rate knob may play more or fewer of the list)."""

    source: str  # "trace <file> (mooncake)", "generated (poisson)", "given"
    num_requests: int
    num_rows: int | None = None  # a trace's rows in its file; None: no trace, or past the line cap
    limits: tuple[str, ...] = ()  # what kept rows or arrivals out, one phrase each
    num_skipped: int = 0  # bad trace rows passed over (workload.trace.bad_rows: skip)
    skipped: tuple[str, ...] = ()  # the first of them, one line each
    is_trace: bool = False
    arrival_rate: dict[str, Any] | None = None  # what `rate_per_s: auto` became (emulator/auto_rate.py)

    @property
    def statement(self) -> str:
        """One line: `replaying 10,000 of 12,031 rows of conv.jsonl: workload.max_requests = 10,000`."""
        if self.is_trace:
            rows = "more than the line cap of" if self.num_rows is None else f"{self.num_rows:,}"
            whole = not self.limits and not self.num_skipped and self.num_rows == self.num_requests
            head = (f"replaying all {self.num_requests:,} rows of {self.source}" if whole
                    else f"replaying {self.num_requests:,} of {rows} rows of {self.source}")
        else:
            head = f"{self.source}: {self.num_requests:,} requests"
        parts = [head + (": " + "; ".join(self.limits) if self.limits else "")]
        if self.num_skipped:
            first = f", first: {self.skipped[0]}" if self.skipped else ""
            parts.append(f"{self.num_skipped:,} bad rows skipped (workload.trace.bad_rows: skip){first}")
        if self.arrival_rate is not None:
            parts.append(str(self.arrival_rate.get("statement", "")))
        return "; ".join(parts)

    def as_json(self) -> dict[str, Any]:
        """summary.json's `meta.workload`: the fields and the statement."""
        return {**asdict(self), "limits": list(self.limits), "skipped": list(self.skipped),
                "statement": self.statement}

