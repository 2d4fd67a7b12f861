"""summary.json's `meta` read once into typed fields, for every page that shows a recorded run.

The record is `emulator.telemetry.run_meta.RunMeta`, and the fields here carry its names, but it is
not read with `RunMeta.from_json`: that refuses a record lacking a key, and runs recorded before a
key existed (or partial records) still show, with `-` for what they lack. So a field is None where
the record lacks its key or holds another type; how the run ended, its workload statement, its rate
and its decision log are read by the telemetry readers that own them. A `meta` that is not an
object at all is named in `problem`, one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from emulator.auto_rate import recorded_rate
from emulator.telemetry.decision_log import LogEntry, log_entries
from emulator.telemetry.outcome import RunOutcome, outcome_of
from emulator.telemetry.run_meta import workload_statement


@dataclass(frozen=True, slots=True)
class RecordedMeta:
    """A recorded run's `meta` as the pages read it; built by `from_json` or `from_doc`."""

    scenario: str | None = None
    engine: str | None = None  # an EngineKind value in a record this emulator wrote
    model: str | None = None
    link_backend: str | None = None
    link_note: str | None = None  # how the link was set up: `link_backend_reason` (`link_note` in older runs)
    threshold_start: int | None = None
    n_p_start: int | None = None
    bandwidth_mbit: float | None = None  # the scenario's link.bandwidth_mbit; None when unshaped
    lambda_max_model: float | None = None
    end_reason: str = ""
    outcome: RunOutcome = RunOutcome.FINISHED  # from the end reason in runs recorded before `outcome`
    workload_statement: str | None = None  # what of its workload the run played, one line
    is_workload_cut: bool = False  # it played less than its workload: a cap, a time window, skipped rows
    arrival_rate_per_s: float | None = None  # the rate `auto` resolved to
    control_events: tuple[dict[str, Any], ...] = ()  # the knobs applied, as timeline events
    log: tuple[LogEntry, ...] = ()  # the scheduler's decisions and the knob changes, in time order
    # As written, for `emulator.telemetry.run_names`, which names runs by many keys of it
    as_recorded: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    problem: str | None = None  # why nothing could be read (`meta` is not an object)

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> RecordedMeta:
        """The `meta` of a summary.json document."""
        return cls.from_json(doc.get("meta"))

    @classmethod
    def from_json(cls, meta: object) -> RecordedMeta:
        """`meta` as summary.json holds it; absent (None) reads as a record of nothing."""
        if meta is None:
            return cls()
        if not isinstance(meta, Mapping):
            return cls(problem=f"summary.json's meta is a JSON {_json_kind(meta)}, not an object of the "
                               "run's settings; re-record the run")
        link, workload = meta.get("link"), meta.get("workload")
        events = meta.get("control_events")
        return cls(
            scenario=_text(meta, "scenario"), engine=_text(meta, "engine"), model=_text(meta, "model"),
            link_backend=_text(meta, "link_backend"),
            link_note=_text(meta, "link_note") or _text(meta, "link_backend_reason"),
            threshold_start=_whole(meta, "threshold_start"), n_p_start=_whole(meta, "n_p_start"),
            bandwidth_mbit=_number(link, "bandwidth_mbit") if isinstance(link, Mapping) else None,
            lambda_max_model=_number(meta, "lambda_max_model"), end_reason=_text(meta, "end_reason") or "",
            outcome=outcome_of(meta), workload_statement=workload_statement(meta),
            is_workload_cut=isinstance(workload, Mapping) and bool(workload.get("limits")
                                                                   or workload.get("num_skipped")),
            arrival_rate_per_s=recorded_rate(meta),
            control_events=tuple(e for e in events if isinstance(e, dict)) if isinstance(events, list) else (),
            log=log_entries(meta), as_recorded=MappingProxyType(dict(meta)),
        )


def _text(meta: Mapping[str, Any], key: str) -> str | None:
    value = meta.get(key)
    return value if isinstance(value, str) and value else None


def _whole(meta: Mapping[str, Any], key: str) -> int | None:
    value = meta.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(meta: Mapping[str, Any], key: str) -> float | None:
    value = meta.get(key)
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _json_kind(value: object) -> str:
    return {list: "array", str: "string", bool: "boolean"}.get(type(value), "number")
