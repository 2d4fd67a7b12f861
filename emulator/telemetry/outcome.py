"""How a run ended (finished, stopped by its user, failed) and what its `expect:` block says of it.

A stopped run's figures cover only the part that ran, so its `expect:` is not judged: no bound fails
and none holds. This module is the one reading of summary.json's `meta.outcome`, `expect_status`,
`expect_note` and `expect_failures`, runs recorded before those keys existed included; the engines
decide the outcome and the recorder writes it. Words and plain values only: no I/O.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from emulator.telemetry.labels import format_number, label
from emulator.telemetry.records import check_expectations

DEFAULT_STOP_EXIT = 128 + signal.SIGINT  # a stop that names no signal exits as Ctrl-C would


class RunOutcome(StrEnum):
    """summary.json's `meta.outcome`; the Runs page lists it as the run's status."""

    FINISHED = "finished"  # ran to its end: every request ended, or its drain or budget ran out
    STOPPED = "stopped"  # its user stopped it: the Live page's Stop, Ctrl-C, SIGTERM, a stop callback
    FAILED = "failed"  # the run itself failed; what was open failed `run_failed`


class ExpectStatus(StrEnum):
    """summary.json's `expect_status`: what the scenario's `expect:` block says of the run."""

    NONE = "none"  # the scenario states no bound
    HELD = "held"
    FAILED = "failed"
    NOT_JUDGED = "not_judged"  # the run did not run to its end (stopped, failed)


@dataclass(frozen=True, slots=True)
class ExpectVerdict:
    status: ExpectStatus
    failures: tuple[str, ...]  # one line per unmet bound (records.check_expectations); () unless FAILED
    note: str  # the verdict in words, one line


@dataclass(frozen=True, slots=True)
class BoundRow:
    """One `expect:` bound for a table: the figure (its label, and its key as the scenario names it),
    its value, the bound and the verdict."""

    metric: str  # `ttft_p90_s`
    label: str  # `TTFT P90 (s)`
    value: str
    bound: str  # `max 10`
    verdict: str  # `held`, `FAILED: <why>` or `not judged`


OUTCOMES = frozenset(o.value for o in RunOutcome)
EXPECT_STATUSES = frozenset(s.value for s in ExpectStatus)
# Who stops a run, in words: the first signal's name, as the CLI and the live engine record it
SIGNAL_WORDS = {"SIGINT": "SIGINT (Ctrl-C, or the Live page's Stop)", "SIGTERM": "SIGTERM"}


def stopped_reason(by: str | None, at_s: float, num_open: int) -> str:
    """`meta.end_reason` of a stopped run: when, by whom, and what that cost."""
    who = SIGNAL_WORDS.get(by or "", by or "its caller's stop")
    return (f"stopped at t = {at_s:.1f} s by {who}; {num_open} requests still open failed "
            "`interrupted`")


def stopped_detail(by: str | None) -> str:
    """A request's `fail_detail` when the run was stopped while it was open."""
    return f"the run was stopped ({by or 'by its caller'}) before this request ended"


def outcome_of(meta: Mapping[str, Any]) -> RunOutcome:
    """The run's outcome; a run recorded before `meta.outcome` existed is read from its end reason
    (`run interrupted ...` was a stop, `run failed: ...` a failure)."""
    value = meta.get("outcome")
    if isinstance(value, str) and value in OUTCOMES:
        return RunOutcome(value)
    ended = str(meta.get("end_reason") or "")
    if ended.startswith(("run interrupted", "stopped")):
        return RunOutcome.STOPPED
    return RunOutcome.FAILED if ended.startswith("run failed") else RunOutcome.FINISHED


def judge(summary: Mapping[str, Any], expect: Mapping[str, Mapping[str, float]],
          outcome: RunOutcome) -> ExpectVerdict:
    """The `expect:` verdict summary.json records: bounds are judged only on a finished run."""
    num_bounds = sum(len(bounds) for bounds in expect.values())
    if not num_bounds:
        return ExpectVerdict(ExpectStatus.NONE, (), "no expect: bounds in the scenario")
    if outcome is not RunOutcome.FINISHED:
        why = "was stopped before its end" if outcome is RunOutcome.STOPPED else "failed"
        return ExpectVerdict(ExpectStatus.NOT_JUDGED, (),
                             f"not judged: the run {why}, so its figures cover only the part that ran")
    failures = tuple(check_expectations(summary, expect))
    if failures:
        return ExpectVerdict(ExpectStatus.FAILED, failures, f"{len(failures)} of {num_bounds} bounds failed")
    return ExpectVerdict(ExpectStatus.HELD, (), f"all {num_bounds} bounds held")


def verdict_of(doc: Mapping[str, Any]) -> ExpectVerdict:
    """The verdict a summary.json document records; judged again from its summary when it was
    recorded before `expect_status` existed (then a stopped run's failures are set aside too)."""
    summary, expect = doc.get("summary") or {}, doc.get("expect") or {}
    status = doc.get("expect_status")
    if isinstance(status, str) and status in EXPECT_STATUSES:
        failures = tuple(str(f) for f in doc.get("expect_failures") or ())
        return ExpectVerdict(ExpectStatus(status), failures, str(doc.get("expect_note") or status))
    return judge(summary, expect if isinstance(expect, Mapping) else {}, outcome_of(doc.get("meta") or {}))


def bound_rows(summary: Mapping[str, Any], expect: Mapping[str, Mapping[str, float]],
               judged: bool = True) -> list[BoundRow]:
    """One row per bound, each judged alone (the same check as `expect_failures`); `not judged` on
    every row of a run that did not run to its end."""
    rows = []
    for metric, bounds in expect.items():
        for bound, limit in bounds.items():
            failed = check_expectations(summary, {metric: {bound: limit}}) if judged else []
            verdict = "not judged" if not judged else "FAILED: " + "; ".join(failed) if failed else "held"
            rows.append(BoundRow(metric, label(metric), format_number(summary.get(metric)),
                                 f"{bound} {format_number(limit)}", verdict))
    return rows


def exit_code(meta: Mapping[str, Any], verdict: ExpectVerdict) -> int:
    """`python -m emulator run`'s exit status: 128 + the signal for a stopped run (130 for SIGINT,
    143 for SIGTERM, as a shell reports a command a signal ended; its record is whole all the same),
    1 when a bound failed, else 0."""
    if outcome_of(meta) is RunOutcome.STOPPED:
        by = meta.get("stopped_by")
        known = by in signal.Signals.__members__ if isinstance(by, str) else False
        return 128 + signal.Signals[by].value if known else DEFAULT_STOP_EXIT
    return 1 if verdict.status is ExpectStatus.FAILED else 0
