"""The worker's prefix store: LRU by bytes over real snapshots, and resuming from what it keeps."""

from __future__ import annotations

import random

import pytest

from emulator.worker.prefix_store import PrefixStore, entry_bytes
from model_stub import HybridModel, get_preset


@pytest.fixture(scope="module")
def model():
    return HybridModel(get_preset("kimi-linear-mini", "tiny"), device="cpu")


@pytest.fixture(scope="module")
def prompt():
    return list(random.Random(5).randbytes(400))


@pytest.fixture(scope="module")
def cache(model, prompt):
    return model.prefill(prompt, checkpoint_at=[64, 128, 256])[1]


def test_entry_bytes_are_the_snapshot_bytes_plus_its_checkpoints(cache):
    snap = cache.snapshot(256)
    store = PrefixStore(1 << 30)
    assert store.put("p256", snap)
    assert store.used_bytes == entry_bytes(snap) > snap.nbytes == cache.bytes_for(256)


def test_kept_entries_own_their_tensors(cache):
    """A snapshot is a view into a 400-token cache; the store must not pin the whole of it."""
    store = PrefixStore(1 << 30)
    store.put("p128", cache.snapshot(128))
    kept = store.get("p128")
    source_ptrs = {t.untyped_storage().data_ptr() for c in cache.layers for t in c.tensors}
    assert all(t.untyped_storage().data_ptr() not in source_ptrs
               for c in kept.layers for t in c.tensors)
    assert all(t.untyped_storage().nbytes() == t.numel() * t.element_size()
               for c in kept.layers for t in c.tensors)


def test_least_recently_used_goes_first_when_bytes_run_out(cache):
    sizes = {at: entry_bytes(cache.snapshot(at)) for at in (64, 128, 256)}
    store = PrefixStore(sizes[64] + sizes[128] + sizes[256] - 1)
    store.put("a", cache.snapshot(64))
    store.put("b", cache.snapshot(128))
    assert store.get("a") is not None  # "a" is now the most recently used; "b" the least
    store.put("c", cache.snapshot(256))
    assert "b" not in store and "a" in store and "c" in store
    assert store.used_bytes == sizes[64] + sizes[256] and store.num_evicted == 1


def test_replacing_a_key_does_not_double_count(cache):
    store = PrefixStore(1 << 30)
    store.put("k", cache.snapshot(64))
    store.put("k", cache.snapshot(128))
    assert len(store) == 1 and store.used_bytes == entry_bytes(cache.snapshot(128))
    assert store.get("k").num_tokens == 128


def test_an_entry_larger_than_the_capacity_is_not_kept(cache):
    store = PrefixStore(entry_bytes(cache.snapshot(64)))
    assert store.put("small", cache.snapshot(64))
    assert not store.put("big", cache.snapshot(256))
    assert "big" not in store and "small" in store


def test_drop_all_empties_the_store(cache):
    store = PrefixStore(1 << 30)
    store.put("a", cache.snapshot(64))
    store.drop_all()
    assert len(store) == 0 and store.used_bytes == 0 and store.get("a") is None


def test_negative_capacity_is_refused():
    with pytest.raises(ValueError, match="capacity_bytes: -1 is negative"):
        PrefixStore(-1)


def test_resuming_from_a_kept_entry_generates_the_reference_tokens(model, cache, prompt):
    store = PrefixStore(1 << 30)
    store.put("p256", cache.snapshot(256))
    logits, resumed = model.prefill(prompt[256:], cache=store.get("p256"))
    tokens = model.greedy_continue(resumed, int(logits.argmax()), 8)
    assert tokens == model.generate(prompt, 8)
