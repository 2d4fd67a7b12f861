"""The bounded JSON decoder: size and depth before decoding, and no key given twice anywhere."""

from __future__ import annotations

import pytest

from emulator.errors import TelemetryError
from emulator.telemetry.bounded_json import loads_bounded


def decode(payload: bytes) -> object:
    return loads_bounded(payload, "where", max_bytes=4096, max_depth=8, fix="the fix")


@pytest.mark.parametrize(
    ("payload", "key"),
    [
        (b'{"v": 1, "v": 1}', "v"),
        (b'{"v": 1, "tokens": 5, "tokens": 7}', "tokens"),
        (b'{"v": 1, "a": {"b": 1, "b": 2}}', "a.b"),
        (b'{"v": 1, "a": [1, {"deep": {"x": 0, "x": 0}}]}', "a[1].deep.x"),
        (b'[{"k": 1, "k": 1}]', "[0].k"),
    ],
    ids=["top-level-same-value", "top-level", "nested-object", "inside-a-list", "top-level-list"],
)
def test_a_key_given_twice_is_refused_in_one_line_naming_it(payload: bytes, key: str) -> None:
    with pytest.raises(TelemetryError) as err:
        decode(payload)
    message = str(err.value)
    assert message.startswith(f"where: key {key!r} is given twice") and message.endswith("; the fix"), message
    assert "\n" not in message


def test_the_same_key_in_different_objects_is_fine() -> None:
    assert decode(b'{"a": {"k": 1}, "b": {"k": 2}, "k": [{"k": 3}, {"k": 4}]}') == {
        "a": {"k": 1}, "b": {"k": 2}, "k": [{"k": 3}, {"k": 4}]}


def test_a_huge_duplicated_key_is_clipped() -> None:
    name = "x" * 3000
    with pytest.raises(TelemetryError) as err:
        decode(f'{{"{name}": 1, "{name}": 2}}'.encode())
    assert len(str(err.value)) < 200


def test_many_keys_are_decoded() -> None:
    """Every object is checked; a wide object is no problem for the check."""
    payload = "{" + ", ".join(f'"k{i}": {i}' for i in range(300)) + "}"
    assert decode(payload.encode()) == {f"k{i}": i for i in range(300)}


def test_a_deep_path_to_a_duplicate_is_clipped() -> None:
    name = "n" * 50
    payload = (f'{{"{name}": ' * 7 + '{"k": 1, "k": 2}' + "}" * 7).encode()
    with pytest.raises(TelemetryError) as err:
        decode(payload)
    assert str(err.value).startswith(f"where: key '{name}.{name}.") and len(str(err.value)) < 200
