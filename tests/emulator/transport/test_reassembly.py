"""Reassembly: any order, duplicates, a memory budget, and expiry of abandoned requests."""

import pytest

from emulator.transport.frames import ChunkHeader, FrameError, split_layer
from emulator.transport.reassembly import (
    CHUNK_OVERHEAD_BYTES,
    LAYER_OVERHEAD_BYTES,
    BudgetExceeded,
    Reassembler,
    Refused,
)


def chunks_of(request_id: int, layers: list[bytes], size: int = 100):
    return [c for i, f in enumerate(layers) for c in split_layer(request_id, i, len(layers), f, size)]


def test_out_of_order_chunks_with_resends_rebuild_every_layer():
    layers = [bytes(range(256)) * 3, b"x" * 250]
    chunks = chunks_of(1, layers)
    order = chunks[::-1] + chunks[:2]  # reversed, then two resends of already-received chunks
    r = Reassembler(max_bytes=100_000, abandon_after_s=5)
    done = [r.add(c.header, c.payload, now=0.0) for c in order]
    finished = [d for d in done if d is not None]
    assert len(finished) == 1 and finished[0].layer_frames() == layers
    assert r.partial == {} and r.bytes_in_use == 0


def test_budget_counts_bytes_that_arrived_and_refuses_a_chunk_that_does_not_fit():
    held = 600 + 2 * (LAYER_OVERHEAD_BYTES + 3 * CHUNK_OVERHEAD_BYTES)  # 6 chunks of 100 bytes, 2 layers
    r = Reassembler(max_bytes=held + 2 * (100 + CHUNK_OVERHEAD_BYTES), abandon_after_s=5, max_peer_bytes=10_000)
    small, big = chunks_of(1, [b"a" * 600]), chunks_of(2, [b"c" * 600])
    for c in small[:3] + big[:3]:  # 600 bytes arrived of the 1,200 both layers claim
        assert r.add(c.header, c.payload, 0.0) is None
    assert r.bytes_in_use == held
    for c in small[3:5]:  # room for exactly two more
        r.add(c.header, c.payload, 0.0)
    with pytest.raises(BudgetExceeded, match=r"request 1 needs \d+ more bytes; \d+ of \d+ are in use"):
        r.add(small[5].header, small[5].payload, 0.0)


def test_one_peer_holds_at_most_its_share():
    r = Reassembler(max_bytes=100_000, abandon_after_s=5, max_peer_bytes=3_000)
    hog, other = chunks_of(1, [b"h" * 5000]), chunks_of(2, [b"o" * 300])
    with pytest.raises(BudgetExceeded, match="its peer 10.0.0.1 holds"):
        for c in hog:
            r.add(c.header, c.payload, 0.0, peer="10.0.0.1")
    done = [r.add(c.header, c.payload, 0.0, peer="10.0.0.2") for c in other]
    assert done[-1] is not None and done[-1].layer_frames() == [b"o" * 300]
    assert r.peer_bytes("10.0.0.1") <= 3_000


def test_a_claim_beyond_what_the_model_can_send_is_refused_before_anything_is_held():
    r = Reassembler(max_bytes=1 << 30, abandon_after_s=5, layer_caps=(500, 10_000))
    with pytest.raises(Refused, match="chunk.layer_bytes: 600 for layer 0 exceeds the 500"):
        r.add(*(lambda c: (c.header, c.payload))(chunks_of(1, [b"a" * 600, b"b"])[0]), 0.0)
    with pytest.raises(Refused, match="chunk.num_layers: 3, but this receiver's model has 2"):
        r.add(*(lambda c: (c.header, c.payload))(chunks_of(2, [b"a", b"b", b"c"])[0]), 0.0)
    assert r.bytes_in_use == 0 and r.partial == {}


def test_chunks_that_overlap_or_leave_a_gap_are_refused():
    r = Reassembler(max_bytes=10_000, abandon_after_s=5)
    first = chunks_of(4, [b"q" * 300])[0]
    shifted = split_layer(4, 0, 1, b"q" * 300, 100)[1]
    gap = ChunkHeader(**{**{f: getattr(shifted.header, f) for f in shifted.header.__slots__}, "offset": 150})
    r.add(first.header, first.payload, 0.0)
    r.add(gap, shifted.payload, 0.0)
    last = split_layer(4, 0, 1, b"q" * 300, 100)[2]
    with pytest.raises(Refused, match="chunk.offset: layer 0 has a chunk at 150, expected 100"):
        r.add(last.header, last.payload, 0.0)


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
