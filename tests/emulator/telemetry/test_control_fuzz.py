"""Fuzzing control-message parsing: whatever arrives on `control/<knob>`, parse_control either
returns a bounded command or raises the project's own error, in one line, within a memory budget."""

from __future__ import annotations

import json
import tracemalloc

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from emulator.errors import PrfaasError
from emulator.limits import MAX_CONTROL_BYTES, MAX_RATE_PER_S, MAX_TOKENS
from emulator.net.spec import MAX_BANDWIDTH_MBIT, MAX_DELAY_MS
from emulator.telemetry.control_messages import ControlCommand, Knob, LinkChange, parse_control
from emulator.telemetry.payload_errors import MAX_ERROR_CHARS
from emulator.telemetry.schemas import parse_message

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MEMORY_BUDGET_BYTES = 1 << 20  # what one parse may allocate, for any input up to the size cap

KNOB_NAMES = st.one_of(st.sampled_from([k.value for k in Knob]), st.text(max_size=64))
FIELDS = ["v", "tokens", "policy", "enabled", "short_term", "long_term", "bandwidth_mbit",
          "delay_ms", "jitter_ms", "loss_pct", "rate_per_s", "queue_packets"]
HUGE_NUMBERS = st.one_of(
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["1e400", "-1e400", "1" + "0" * 1000, "NaN", "Infinity", "-Infinity", "-0",
                     "1e-400", "0.0000000000001"]),
)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20))
JSON_VALUES = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(FIELDS) | st.text(max_size=8), inner, max_size=4),
    max_leaves=40)


def assert_bounded(command: ControlCommand) -> None:
    """An accepted command carries only values inside the published bounds."""
    value = command.value
    if command.knob is Knob.THRESHOLD:
        assert type(value) is int and 0 <= value <= MAX_TOKENS
    elif command.knob is Knob.ARRIVAL_RATE:
        assert type(value) is float and 0 < value <= MAX_RATE_PER_S
    elif command.knob is Knob.LINK:
        assert isinstance(value, LinkChange)
        bounds = {"bandwidth_mbit": MAX_BANDWIDTH_MBIT, "delay_ms": MAX_DELAY_MS,
                  "jitter_ms": MAX_DELAY_MS, "loss_pct": 100.0}
        for name, number in value.changes:
            assert number is None or 0 <= number <= bounds[name]


def parse_or_refuse(knob: str, payload: bytes) -> None:
    """Only PrfaasError may come out, and its text is one short line."""
    try:
        command = parse_control(knob, payload)
    except PrfaasError as err:
        message = str(err)
        assert "\n" not in message and len(message) <= MAX_ERROR_CHARS, message
    else:
        assert_bounded(command)


@FUZZ
@given(KNOB_NAMES, st.binary(max_size=2 * MAX_CONTROL_BYTES))
def test_random_bytes(knob: str, payload: bytes) -> None:
    parse_or_refuse(knob, payload)


@FUZZ
@given(st.sampled_from(list(Knob)), JSON_VALUES, st.booleans())
@example(Knob.LINK, {"delay_ms": [None] * 4, "\x1f\U00011af9\U0001239a": None, "bandwidth_mbit": False}, True)
def test_random_json(knob: Knob, value: object, with_v: bool) -> None:
    data = {"v": 1, **value} if with_v and isinstance(value, dict) else value
    parse_or_refuse(knob.value, json.dumps(data).encode())


@FUZZ
@given(st.sampled_from(list(Knob)), st.sampled_from(FIELDS), HUGE_NUMBERS)
def test_huge_numbers_in_every_field(knob: Knob, field: str, number: object) -> None:
    text = number if isinstance(number, str) else json.dumps(number)
    parse_or_refuse(knob.value, f'{{"v": 1, "{field}": {text}}}'.encode())


CLOSERS = {"[": "]", '{"a": ': "}", '"': '"'}


@FUZZ
@given(st.sampled_from(list(Knob)), st.lists(st.sampled_from(list(CLOSERS)), min_size=1, max_size=6),
       st.integers(min_value=1, max_value=40_000), st.booleans())
def test_deep_nesting(knob: Knob, openers: list[str], depth: int, closed: bool) -> None:
    opened = [openers[i % len(openers)] for i in range(depth)]
    closing = "".join(CLOSERS[o] for o in reversed(opened)) if closed else ""
    body = "".join(opened) + "1" + closing
    parse_or_refuse(knob.value, ('{"v": 1, "tokens": ' + body + "}").encode())


def peak_bytes_of(knob: str, payload: bytes) -> int:
    tracemalloc.start()
    try:
        parse_or_refuse(knob, payload)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def near_cap(opener: bytes, closer: bytes, body: bytes = b"1") -> bytes:
    """The deepest `{"v": 1, "tokens": <opener>...<closer>}` that still fits the size cap."""
    head = b'{"v": 1, "tokens": '
    depth = (MAX_CONTROL_BYTES - len(head) - len(body) - 1) // (len(opener) + len(closer))
    return head + opener * depth + body + closer * depth + b"}"


WORST_CASES = {
    "deep-list": near_cap(b"[", b"]"),
    "deep-object": near_cap(b'{"a":', b"}"),
    "wide-list": b'{"v": 1, "tokens": [' + b"0," * ((MAX_CONTROL_BYTES - 24) // 2) + b"0]}",
    "many-fields": b'{"v": 1, ' + b", ".join(b'"f%d": 1' % i for i in range(380)) + b"}",
    "long-string": b'{"v": 1, "tokens": "' + b"x" * (MAX_CONTROL_BYTES - 24) + b'"}',
    "long-number": b'{"v": 1, "tokens": ' + b"9" * (MAX_CONTROL_BYTES - 24) + b"}",
    "escapes": b'{"v": 1, "tokens": "' + b"\\u00e9" * ((MAX_CONTROL_BYTES - 24) // 6) + b'"}',
}


@pytest.mark.parametrize("payload", WORST_CASES.values(), ids=WORST_CASES.keys())
def test_worst_cases_up_to_the_cap_stay_in_the_memory_budget(payload: bytes) -> None:
    assert len(payload) <= MAX_CONTROL_BYTES
    assert peak_bytes_of("threshold", payload) < MEMORY_BUDGET_BYTES


def test_inputs_over_the_cap_are_refused_before_decoding() -> None:
    """A 16 MiB payload costs no more than a tiny one: it is never decoded."""
    huge = b'{"v": 1, "tokens": ' + b"[" * (16 << 20) + b"]}"
    assert peak_bytes_of("threshold", huge) < 64 * 1024


@settings(max_examples=60, deadline=None)
@given(KNOB_NAMES, st.binary(max_size=MAX_CONTROL_BYTES))
def test_random_input_stays_in_the_memory_budget(knob: str, payload: bytes) -> None:
    assert peak_bytes_of(knob, payload) < MEMORY_BUDGET_BYTES


@FUZZ
@given(st.sampled_from(["metrics", "events", "status"]),
       st.one_of(st.binary(max_size=2048), JSON_VALUES.map(lambda v: json.dumps(v).encode()),
                 st.integers(1, 5000).map(lambda n: b'{"v": 1, "roles": ' + b"[" * n + b"]" * n + b"}")))
def test_received_telemetry_only_raises_our_error(kind: str, payload: bytes) -> None:
    """The dashboard's side: metrics, events and status from the broker are checked the same way."""
    try:
        parse_message(kind, payload)
    except PrfaasError as err:
        assert "\n" not in str(err)
