"""The Live page's knobs: the control message each one sends, checked with the run's own validator
(`parse_control`) before it is published, and the values the run reports for them.

Pure: building and checking a message and reading values out of a snapshot need no broker;
`app.mqtt_feed` does the publishing and `app.knob_acks` reads the run's answers. A message the run
would refuse is refused here first, with the same one-line reason.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from app.live_view import RunView
from emulator.errors import LinkSpecError, TelemetryError
from emulator.knobs import (
    AFFINITIES as AFFINITIES,  # the widgets offer what the registry takes
    BY_PATH,
    LINK_PREFIX,
    POLICIES as POLICIES,
)
from emulator.net.spec import LinkSpec, parse_link_spec
from emulator.scenario import Scenario
from emulator.scenario.rules import longest_length
from emulator.telemetry.control_messages import Knob, parse_control
from emulator.telemetry.schemas import MetricsSnapshot, control_topic

LINK_FIELDS = ("bandwidth_mbit", "delay_ms", "jitter_ms", "loss_pct")
# Each widget's (low, high), from the knob registry both engines check values against.
BOUNDS: dict[str, tuple[float, float]] = {
    **{name: (BY_PATH[LINK_PREFIX + name].low, BY_PATH[LINK_PREFIX + name].high) for name in LINK_FIELDS},
    "rate_per_s": (BY_PATH["workload.arrival.rate_per_s"].low, BY_PATH["workload.arrival.rate_per_s"].high),
}


@dataclass(frozen=True, slots=True)
class KnobMessage:
    """A checked control message, ready to publish on `topic`."""

    run_id: str
    knob: Knob
    payload: dict[str, Any]
    topic: str
    what: str  # the change in words, for the page

    @property
    def data(self) -> bytes:
        return json.dumps(self.payload).encode()


def threshold_payload(tokens: float) -> dict[str, Any]:
    # A slider hands over an int; anything fractional is sent as it is and refused by the check.
    value = int(tokens) if float(tokens).is_integer() else tokens
    return {"v": 1, "tokens": value}


def policy_payload(policy: str) -> dict[str, Any]:
    return {"v": 1, "policy": policy}


def affinity_payload(mode: str) -> dict[str, Any]:
    return {"v": 1, "mode": mode}


def scheduler_payload(short_term: bool | None, long_term: bool | None) -> dict[str, Any]:
    payload: dict[str, Any] = {"v": 1}
    if short_term is not None:
        payload["short_term"] = bool(short_term)
    if long_term is not None:
        payload["long_term"] = bool(long_term)
    return payload


def link_payload(bandwidth_mbit: float | None, delay_ms: float, jitter_ms: float,
                 loss_pct: float) -> dict[str, Any]:
    """All four fields: the link the operator sees is the link the run gets."""
    return {"v": 1, "bandwidth_mbit": bandwidth_mbit, "delay_ms": float(delay_ms),
            "jitter_ms": float(jitter_ms), "loss_pct": float(loss_pct)}


def arrival_rate_payload(rate_per_s: float) -> dict[str, Any]:
    return {"v": 1, "rate_per_s": float(rate_per_s)}


def empty_payload() -> dict[str, Any]:
    """pause and resume"""
    return {"v": 1}


def check_knob(run_id: str, knob: Knob, payload: dict[str, Any],
               link_base: LinkSpec | None = None) -> KnobMessage:
    """The message to publish; TelemetryError (one line: field, value, fix) when the run would
    refuse it. Non-finite numbers are refused here since JSON cannot carry them."""
    for name, value in payload.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise TelemetryError(f"control/{knob.value}.{name}: {value} is not a finite number; "
                                 "type a number")
    message = KnobMessage(run_id, knob, dict(payload), control_topic(run_id, knob.value),
                          describe(knob, payload))
    parse_control(knob.value, message.data, link_base)
    return message


def describe(knob: Knob, payload: dict[str, Any]) -> str:
    """The change in words, as the run's knob_changes log words it."""
    if knob is Knob.THRESHOLD:
        return f"threshold -> {payload.get('tokens')} tokens"
    if knob is Knob.POLICY:
        return f"router policy -> {payload.get('policy')}"
    if knob is Knob.AFFINITY:
        return f"affinity -> {payload.get('mode')}"
    if knob is Knob.SCHEDULER:
        parts = [f"{name.replace('_', '-')} {'on' if payload[name] else 'off'}"
                 for name in ("short_term", "long_term") if name in payload]
        return "scheduler " + ", ".join(parts)
    if knob is Knob.LINK:
        bandwidth = payload.get("bandwidth_mbit")
        rate = "unshaped" if bandwidth is None else f"{bandwidth:g} Mbit/s"
        return (f"link -> {rate}, {payload.get('delay_ms', 0):g} ms ± {payload.get('jitter_ms', 0):g} ms, "
                f"{payload.get('loss_pct', 0):g} % loss")
    if knob is Knob.ARRIVAL_RATE:
        return f"arrival rate -> {payload.get('rate_per_s'):g}/s"
    return "arrivals paused" if knob is Knob.PAUSE else "arrivals resumed"


# The slider's range when the scenario does not bound its inputs (a trace): the paper's 128K context.
THRESHOLD_MAX = min(131_072, int(BY_PATH["router.threshold_tokens"].high))
THRESHOLD_STEP = 128


def threshold_max(scenario: Scenario | None, start: int | None = None) -> int:
    """The slider's top: the longest input the scenario's workload can draw (no threshold above it
    changes a route), never below the threshold the run started at, in whole slider steps."""
    longest = longest_length(scenario.workload.input_len) if scenario is not None else None
    top = max(longest or THRESHOLD_MAX, start or 0, THRESHOLD_STEP)
    return min(-(-top // THRESHOLD_STEP) * THRESHOLD_STEP, int(BY_PATH["router.threshold_tokens"].high))
DEFAULT_KNOBS: dict[str, Any] = {
    "threshold": 2048, "policy": "prfaas", "affinity": "cost", "short_term": False,
    "long_term": False, "bandwidth_mbit": 100.0, "delay_ms": 0.0, "jitter_ms": 0.0, "loss_pct": 0.0,
    "rate_per_s": 0.5,
}


def knob_values(scenario: Scenario | None, latest: MetricsSnapshot | None,
                start_threshold: int | None = None) -> dict[str, Any]:
    """Each knob's value as the run stands: its last snapshot (threshold, link, and the other knobs
    where it reports them), else the threshold the run started at (its status, or its record: `auto`
    resolved), else its scenario, else DEFAULT_KNOBS (a run watched from the bus whose scenario the
    page does not know)."""
    values = dict(DEFAULT_KNOBS)
    if scenario is not None:
        router, scheduler, link = scenario.router, scenario.scheduler, scenario.link
        values |= {"policy": router.policy.value, "affinity": router.affinity.value,
                   "short_term": bool(scheduler.short_term.enabled),
                   "long_term": bool(scheduler.long_term.enabled)}
        if isinstance(router.threshold_tokens, int):
            values["threshold"] = router.threshold_tokens
        values |= {name: getattr(link, name) for name in LINK_FIELDS}
        arrival = scenario.workload.arrival
        if arrival is not None and isinstance(arrival.rate_per_s, int | float):  # `auto`: the run's snapshot says
            values["rate_per_s"] = float(arrival.rate_per_s)
        elif scenario.workload.is_trace:  # the knob is a factor on the trace's own pace
            values["rate_per_s"] = 1.0
    if start_threshold is not None:
        values["threshold"] = start_threshold
    if latest is not None:
        if latest.threshold_tokens is not None:
            values["threshold"] = latest.threshold_tokens
        values |= {name: latest.link[name] for name in LINK_FIELDS if name in latest.link}
        if (knobs := latest.knobs) is not None:
            values |= {"policy": knobs.policy, "affinity": knobs.affinity, "short_term": knobs.short_term,
                       "long_term": knobs.long_term}
            if knobs.rate_per_s is not None:
                values["rate_per_s"] = knobs.rate_per_s
    values["threshold"] = min(max(int(values["threshold"]), 0), threshold_max(scenario, start_threshold))
    for name in (*LINK_FIELDS, "rate_per_s"):  # number inputs hold floats (or None: unshaped)
        values[name] = float(values[name]) if values[name] is not None else None
    return values


def link_base(view: RunView) -> LinkSpec | None:
    """The run's current link as its last snapshot reports it (None before the first one)."""
    latest = view.latest
    if latest is None or not latest.link:
        return None
    try:
        return parse_link_spec(dict(latest.link))
    except LinkSpecError:
        return None
