"""Run ids are checked in one place (emulator/net/names.py): a name of 6 lowercase hex digits, the
only shape that fits the kernel's 15-character interface names and can never be a path."""

from __future__ import annotations

import pytest

from emulator.errors import PrfaasError, RunIdError
from emulator.net.names import check_run_id, new_run_id

REFUSED = [
    "x/../../../escaped", "../abcdef", "abcdef/..", "..", ".", "", "abc12", "abc1234", "ABCDEF",
    "abcdef\n", "abc/ef", "abc\\ef", " abcdef", "abcdeg", "\uff41bc123", "abc\x0023", "a" * 10_000,
]


@pytest.mark.parametrize("value", REFUSED)
def test_a_value_that_is_not_a_run_id_is_refused_in_one_line_naming_the_field(value: str) -> None:
    with pytest.raises(RunIdError) as caught:
        check_run_id(value, "--run-id")
    message = str(caught.value)
    assert isinstance(caught.value, PrfaasError)
    assert "\n" not in message and len(message) < 200
    assert message.startswith("--run-id: ") and "6 lowercase hex digits" in message


@pytest.mark.parametrize("value", [None, 123456, b"abc123", ["abc123"]])
def test_a_run_id_that_is_not_a_string_is_refused(value: object) -> None:
    with pytest.raises(RunIdError, match=r"^run_id: .* is not a run id"):
        check_run_id(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["abc123", "000000", "ffffff"])
def test_a_run_id_is_returned_as_given(value: str) -> None:
    assert check_run_id(value) == value


def test_a_fresh_run_id_passes_the_check() -> None:
    for _ in range(100):
        rid = new_run_id()
        assert check_run_id(rid) == rid
