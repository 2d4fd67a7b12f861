"""summary.json's `meta`: one record type that both engines write, with the same keys on both.

What differs by engine (the live run's teardown and worker pids, the simulator's event counts and
approximations) goes in `engine_details`, so a reader of the common keys never asks which engine ran.
This module holds and reads the record; emulator.run.meta builds it from a scenario and its control
plane (telemetry sits below both), and the recorder writes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any

from emulator.errors import TelemetryError
from emulator.telemetry.outcome import OUTCOMES, RunOutcome, outcome_of


class EngineKind(StrEnum):
    LIVE = "live"
    VIRTUAL = "virtual"


@dataclass(frozen=True, slots=True)
class RunMeta:
    """What ran, with which settings, and how it ended. JSON-ready values only (str, numbers,
    bools, lists, dicts), so `as_json` and `from_json` are exact inverses."""

    engine: str  # an EngineKind value
    scenario: str
    seed: int
    run_id: str | None  # the live run's id (namespaces, MQTT topics); None for a simulated run
    model: str | None  # `preset (size)` for a model_stub preset, None for a profile-only scenario
    profile: str  # where the cost profile came from
    policy: str
    prefix_rule: str
    affinity: str  # an Affinity value: how the router picked prefill nodes
    scheduler: dict[str, bool] | None  # {"short_term": .., "long_term": ..}; None without one
    threshold_start: int
    n_p_start: int
    lambda_max_model: float | None  # the throughput model's PrfaaS lambda_max at the start
    link: dict[str, float | None]  # the scenario's link: bandwidth_mbit, delay_ms, loss_pct
    link_backend: str  # netem / tun / proxy on the live engine, `simulated` on the virtual one
    link_backend_reason: str
    transport: dict[str, Any]
    decisions: list[str] = field(default_factory=list)  # the scheduler's, one line each
    knob_changes: list[str] = field(default_factory=list)  # timeline and control messages applied
    notes: list[str] = field(default_factory=list)
    end_reason: str = "run ended"
    outcome: str = RunOutcome.FINISHED.value  # a RunOutcome value: finished, stopped or failed
    stopped_by: str | None = None  # who stopped it (`SIGINT`, `SIGTERM`); None unless stopped
    stopped_at_s: float | None = None  # the run's own clock when it was stopped
    workload: dict[str, Any] = field(default_factory=dict)  # what of the workload the run played
    control_events: list[dict[str, Any]] = field(default_factory=list)  # knobs applied, as timeline events
    engine_details: dict[str, Any] = field(default_factory=dict)  # engine-specific, see the module doc

    def __post_init__(self) -> None:
        if self.engine not in {e.value for e in EngineKind}:
            raise TelemetryError(f"meta.engine = {self.engine!r}; use one of {', '.join(EngineKind)}")
        if self.outcome not in OUTCOMES:
            raise TelemetryError(f"meta.outcome = {self.outcome!r}; use one of {', '.join(RunOutcome)}")

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> RunMeta:
        """The record a summary.json's `meta` holds; TelemetryError names what is missing (runs
        recorded before this record existed lack keys: read those with `.get`)."""
        names = [f.name for f in fields(cls)]
        required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
        missing = [name for name in required if name not in doc]
        if missing:
            raise TelemetryError(f"meta lacks {', '.join(missing)}; was the run recorded by an "
                                 "older emulator? read it key by key")
        values = {name: doc[name] for name in names if name in doc}
        values.setdefault("outcome", outcome_of(doc).value)  # older runs: from their end reason
        return cls(**values)


def workload_statement(meta: Mapping[str, Any]) -> str | None:
    """What of its workload a recorded run played, one line (`meta.workload.statement`); None for
    runs recorded before the record said."""
    workload = meta.get("workload")
    statement = workload.get("statement") if isinstance(workload, Mapping) else None
    return statement if isinstance(statement, str) else None
