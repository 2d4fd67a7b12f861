"""Reassembly: any order, duplicates, a memory budget, and expiry of abandoned requests."""

import pytest

from emulator.transport.frames import FrameError, split_layer
from emulator.transport.reassembly import BudgetExceeded, Reassembler


def chunks_of(request_id: int, layers: list[bytes], size: int = 100):
    return [c for i, f in enumerate(layers) for c in split_layer(request_id, i, len(layers), f, size)]


def test_out_of_order_chunks_with_resends_rebuild_every_layer():
    layers = [bytes(range(256)) * 3, b"x" * 250]
    chunks = chunks_of(1, layers)
    order = chunks[::-1] + chunks[:2]  # reversed, then two resends of already-received chunks
    r = Reassembler(max_bytes=10_000, abandon_after_s=5)
    done = [r.add(c.header, c.payload, now=0.0) for c in order]
    finished = [d for d in done if d is not None]
    assert len(finished) == 1 and finished[0].layer_frames() == layers
    assert r.partial == {} and r.bytes_in_use == 0


def test_budget_refuses_a_layer_that_does_not_fit_and_keeps_the_rest():
    r = Reassembler(max_bytes=1000, abandon_after_s=5)
    small, big = chunks_of(1, [b"a" * 600, b"b" * 10]), chunks_of(2, [b"c" * 600])
    assert r.add(small[0].header, small[0].payload, 0.0) is None
    with pytest.raises(BudgetExceeded, match="request 2 needs 600 bytes; 600 of 1000"):
        r.add(big[0].header, big[0].payload, 0.0)
    assert r.bytes_in_use == 600  # nothing was allocated for the refused layer


def test_abandoned_requests_expire_and_are_reported():
    r = Reassembler(max_bytes=10_000, abandon_after_s=2.0)
    c = chunks_of(9, [b"z" * 300])[0]
    r.add(c.header, c.payload, now=10.0)
    assert r.expire(now=11.0) == []
    assert r.expire(now=12.5) == [9]
    assert r.bytes_in_use == 0


def test_a_chunk_that_contradicts_earlier_ones_is_refused():
    r = Reassembler(max_bytes=10_000, abandon_after_s=5)
    first = chunks_of(4, [b"q" * 300])[0]
    other = chunks_of(4, [b"q" * 400])[1]  # same layer, different size
    r.add(first.header, first.payload, 0.0)
    with pytest.raises(FrameError, match="changed size"):
        r.add(other.header, other.payload, 0.0)
