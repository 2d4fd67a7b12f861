"""The prefill worker's reports: why a transfer failed, as the gateway's FailReason."""

from __future__ import annotations

from emulator.control.types import FailReason
from emulator.transport.sender import TransferFailure, TransferResult
from emulator.worker.prefill_engine import transfer_fail_reason


def test_each_transfer_failure_kind_is_reported_under_one_tag() -> None:
    """The sender says why a transfer failed as a kind; the prefill worker reports its FailReason."""
    cases = {TransferFailure.DEADLINE: FailReason.DEADLINE, TransferFailure.LINK_DOWN: FailReason.LINK_DOWN,
             TransferFailure.REFUSED: FailReason.TRANSFER_FAILED}
    assert set(cases) == set(TransferFailure)
    for kind, tag in cases.items():
        assert transfer_fail_reason(TransferResult(1, "failed", "words", failure=kind)) is tag
    assert transfer_fail_reason(TransferResult(1, "delivered")) is None
