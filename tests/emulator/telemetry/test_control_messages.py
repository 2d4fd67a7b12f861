"""Control messages: valid knobs, one-line refusals naming the field and its bound, size and depth
caps before decoding."""

from __future__ import annotations

import json

import pytest

from emulator.errors import TelemetryError
from emulator.limits import MAX_CONTROL_BYTES, MAX_NESTING, MAX_RATE_PER_S, MAX_TOKENS
from emulator.net.spec import MAX_BANDWIDTH_MBIT, MAX_DELAY_MS, LinkSpec
from emulator.telemetry.control_messages import ControlCommand, Knob, LinkChange, SchedulerChange, parse_control


@pytest.mark.parametrize(
    ("knob", "payload", "value"),
    [
        ("threshold", {"v": 1, "tokens": 8192}, 8192),
        ("threshold", {"v": 1, "tokens": 0}, 0),
        ("threshold", {"v": 1, "tokens": MAX_TOKENS}, MAX_TOKENS),
        ("arrival_rate", {"v": 1, "rate_per_s": MAX_RATE_PER_S}, MAX_RATE_PER_S),
        ("link", {"v": 1, "bandwidth_mbit": MAX_BANDWIDTH_MBIT, "delay_ms": MAX_DELAY_MS},
         LinkChange((("bandwidth_mbit", MAX_BANDWIDTH_MBIT), ("delay_ms", MAX_DELAY_MS)))),
        ("policy", {"v": 1, "policy": "local-only"}, "local-only"),
        ("affinity", {"v": 1, "mode": "off"}, "off"),
        ("affinity", {"v": 1, "mode": "longest-prefix"}, "longest-prefix"),
        ("scheduler", {"v": 1, "short_term": True}, SchedulerChange(True, None)),
        ("scheduler", {"v": 1, "short_term": False, "long_term": True},
         SchedulerChange(False, True)),
        ("link", {"v": 1, "bandwidth_mbit": 100, "delay_ms": 25.5},
         LinkChange((("bandwidth_mbit", 100.0), ("delay_ms", 25.5)))),
        ("link", {"v": 1, "bandwidth_mbit": None}, LinkChange((("bandwidth_mbit", None),))),
        ("link", {"v": 1, "loss_pct": 1, "jitter_ms": 2}, LinkChange((("jitter_ms", 2.0),
                                                                      ("loss_pct", 1.0)))),
        ("arrival_rate", {"v": 1, "rate_per_s": 2.5}, 2.5),
        ("pause", {"v": 1}, None),
        ("resume", {"v": 1}, None),
    ],
)
def test_valid_control(knob: str, payload: dict, value: object) -> None:
    assert parse_control(knob, json.dumps(payload).encode()) == ControlCommand(Knob(knob), value)


def test_link_change_applies_onto_a_base() -> None:
    base = LinkSpec(bandwidth_mbit=1000, delay_ms=10, queue_packets=500)
    change = parse_control("link", b'{"v": 1, "bandwidth_mbit": 100}').value
    assert change.apply_to(base) == LinkSpec(bandwidth_mbit=100, delay_ms=10, queue_packets=500)


@pytest.mark.parametrize(
    ("knob", "payload", "fragments"),
    [
        ("threshold", b'{"v": 1, "tokens": -5}', ["control/threshold", "tokens = -5", "tokens"]),
        ("threshold", b'{"v": 1, "tokens": "100"}', ["tokens = \"100\"", "valid integer"]),
        ("threshold", b'{"v": 1, "tokens": 1.5}', ["tokens = 1.5"]),
        ("threshold", b'{"v": 1, "tokens": true}', ["tokens = true"]),
        ("threshold", b'{"v": 1}', ["tokens is missing"]),
        ("threshold", b'{"tokens": 5, "v": 2}', ["v = 2", '"v": 1']),
        ("threshold", b'{"v": 1, "tokens": 5, "limit": 2}', ["limit is not a known field"]),
        ("policy", b'{"v": 1, "policy": "fastest"}', ["policy = \"fastest\"", "local-only"]),
        ("affinity", b'{"v": 1, "mode": "strict"}', ["mode = \"strict\"", '"cost" | "longest-prefix" | "off"']),
        ("affinity", b'{"v": 1, "enabled": true}', ["enabled is not a known field", "mode is missing"]),
        ("scheduler", b'{"v": 1}', ["short_term and/or long_term"]),
        ("scheduler", b'{"v": 1, "short_term": 1}', ["short_term = 1"]),
        ("link", b'{"v": 1, "delay_ms": -3}', ["control/link.delay_ms", "-3", "use 0", "from 0.001 to 10000"]),
        ("link", b'{"v": 1, "bandwidth_mbit": 0}', ["bandwidth_mbit", "0"]),
        ("link", b'{"v": 1, "loss_pct": 150}', ["loss_pct", "150"]),
        ("link", b'{"v": 1, "queue_packets": 10}', ["queue_packets: unknown field; remove it"]),
        ("link", b'{"v": 1}', ["changes nothing"]),
        ("arrival_rate", b'{"v": 1, "rate_per_s": 0}', ["rate_per_s = 0", "1e-06 <= R"]),
        ("arrival_rate", b'{"v": 1, "rate_per_s": -1.5}', ["rate_per_s = -1.5"]),
        ("pause", b'{"v": 1, "now": true}', ["now is not a known field"]),
        ("speed", b'{"v": 1}', ["knob 'speed' is unknown", "threshold", "arrival_rate"]),
        ("threshold", b'{"v": 1, "tokens": ', ["not JSON", "tokens"]),
        ("threshold", b"\xff\xfe", ["not UTF-8"]),
        ("threshold", b"[1, 2]", ["JSON list, not an object"]),
        ("threshold", b"{" + b" " * MAX_CONTROL_BYTES + b"}", ["over the 4096-byte limit"]),
    ],
)
def test_bad_control_is_one_line_naming_the_field(knob: str, payload: bytes,
                                                  fragments: list[str]) -> None:
    with pytest.raises(TelemetryError) as err:
        parse_control(knob, payload)
    message = str(err.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message


def test_link_change_checked_against_the_given_base() -> None:
    base = LinkSpec(delay_ms=10, jitter_ms=0)
    assert parse_control("link", b'{"v": 1, "jitter_ms": 5}', base).value.apply_to(base).jitter_ms == 5
    with pytest.raises(TelemetryError, match="jitter_ms"):
        parse_control("link", b'{"v": 1, "jitter_ms": -1}', base)


HUGE = "9" * 400  # the reported message: accepted, then float() overflowed in the recorder


@pytest.mark.parametrize(
    ("knob", "field", "value", "bound"),
    [
        ("threshold", "tokens", HUGE, MAX_TOKENS),
        ("threshold", "tokens", str(MAX_TOKENS + 1), MAX_TOKENS),
        ("arrival_rate", "rate_per_s", HUGE, MAX_RATE_PER_S),
        ("arrival_rate", "rate_per_s", str(MAX_RATE_PER_S * 2), MAX_RATE_PER_S),
        ("link", "bandwidth_mbit", HUGE, MAX_BANDWIDTH_MBIT),
        ("link", "delay_ms", str(MAX_DELAY_MS + 1), MAX_DELAY_MS),
        ("link", "jitter_ms", HUGE, MAX_DELAY_MS),
        ("link", "loss_pct", HUGE, 100),
    ],
)
def test_every_number_has_an_upper_bound_named_in_the_fix(knob: str, field: str, value: str,
                                                          bound: float) -> None:
    payload = f'{{"v": 1, "{field}": {value}}}'.encode()
    with pytest.raises(TelemetryError) as err:
        parse_control(knob, payload)
    message = str(err.value)
    assert "\n" not in message and field in message and str(int(bound)) in message, message
    assert len(message) < 400, message  # a 400-digit value is clipped, not echoed


def test_a_message_without_v_is_refused() -> None:
    with pytest.raises(TelemetryError) as err:
        parse_control("threshold", b'{"tokens": 5}')
    assert 'v: missing; add "v": 1' in str(err.value)
    with pytest.raises(TelemetryError, match="v: missing"):
        parse_control("pause", b"{}")


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        (b'{"v": 1, "tokens": ' + b"[" * 30_000 + b"]" * 30_000 + b"}", "byte limit"),
        (b'{"v": 1, "tokens": ' + b"[" * 2_000 + b"]" * 2_000 + b"}", f"deeper than {MAX_NESTING}"),
        (b'{"v": 1, "tokens": ' + b'{"a": ' * 500 + b"1" + b"}" * 501, f"deeper than {MAX_NESTING}"),
        (b"[" * (MAX_NESTING + 1) + b"]" * (MAX_NESTING + 1), f"deeper than {MAX_NESTING}"),
        (b'{"v": 1, "tokens": "' + b"[" * 2_000 + b'"}', "tokens"),  # brackets in a string are text
    ],
    ids=["60KB-nested", "deep-list", "deep-object", "just-too-deep", "brackets-in-a-string"],
)
def test_nested_or_oversized_payload_is_one_line(payload: bytes, fragment: str) -> None:
    with pytest.raises(TelemetryError) as err:
        parse_control("threshold", payload)
    message = str(err.value)
    assert "\n" not in message and fragment in message and len(message) < 400, message


def test_nesting_up_to_the_cap_is_decoded() -> None:
    """Depth MAX_NESTING is still JSON we read (and the schema then refuses the list)."""
    payload = (b'{"v": 1, "tokens": ' + b"[" * (MAX_NESTING - 1) + b"]" * (MAX_NESTING - 1)
               + b"}")
    with pytest.raises(TelemetryError, match="tokens = "):
        parse_control("threshold", payload)


def test_long_unknown_names_are_clipped() -> None:
    for knob, payload in (("k" * 3000, b'{"v": 1}'),
                          ("threshold", b'{"v": 1, "tokens": 1, "' + b"x" * 3000 + b'": 1}')):
        with pytest.raises(TelemetryError) as err:
            parse_control(knob, payload)
        assert len(str(err.value)) < 400


@pytest.mark.parametrize("version", ["true", "1.0", '"1"', "false", "2", "null", "[1]"])
@pytest.mark.parametrize("knob", ["pause", "threshold", "link"])
def test_v_must_be_the_integer_1(knob: str, version: str) -> None:
    """`true == 1` and `1.0 == 1` in Python: neither is the version number."""
    body = {"pause": "", "threshold": ', "tokens": 5', "link": ', "delay_ms": 5'}[knob]
    with pytest.raises(TelemetryError) as err:
        parse_control(knob, f'{{"v": {version}{body}}}'.encode())
    message = str(err.value)
    assert message.startswith(f"control/{knob}: v = {version}"), message
    assert 'send "v": 1' in message and "\n" not in message


@pytest.mark.parametrize(
    ("knob", "payload", "key"),
    [
        ("pause", b'{"v": 1, "v": 1}', "v"),
        ("threshold", b'{"v": 1, "tokens": 5, "tokens": 7}', "tokens"),
        ("link", b'{"v": 1, "loss_pct": 0, "loss_pct": 100}', "loss_pct"),
        ("scheduler", b'{"v": 1, "short_term": true, "x": {"y": 1, "y": 2}}', "x.y"),
    ],
)
def test_a_key_given_twice_is_refused(knob: str, payload: bytes, key: str) -> None:
    with pytest.raises(TelemetryError) as err:
        parse_control(knob, payload)
    assert str(err.value).startswith(f"control/{knob}: key {key!r} is given twice"), str(err.value)
