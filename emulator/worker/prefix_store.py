"""A prefill worker's own prefix cache: key -> HybridCache snapshot, evicted LRU by bytes.

It only holds and evicts; which key names which prefix is the gateway's prefix index's business.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

from model_stub.cache import HybridCache, LayerCache

log = logging.getLogger(__name__)


def entry_bytes(cache: HybridCache) -> int:
    """The cache's bytes plus its recorded checkpoints (bounded layers' states it can rewind to)."""
    checkpoint_bytes = sum(
        c.nbytes for ck in cache.checkpoints.values() for c in ck if c is not None)
    return cache.nbytes + checkpoint_bytes


def compact(cache: HybridCache) -> HybridCache:
    """A copy that owns its tensors. Snapshots are views into a longer request's cache, which would
    keep that whole cache alive and make `nbytes` understate what the entry really pins."""
    layers = [LayerCache(c.kind, tuple(t.clone() for t in c.tensors)) for c in cache.layers]
    return HybridCache(cache.config, layers, cache.num_tokens, dict(cache.checkpoints))


class PrefixStore:
    """LRU by bytes: `put` evicts the least recently used entries until the new one fits.

    An entry larger than the whole capacity is not stored (it would evict everything and still
    not fit); `put` says so by returning False.
    """

    def __init__(self, capacity_bytes: int) -> None:
        if capacity_bytes < 0:
            raise ValueError(f"capacity_bytes: {capacity_bytes} is negative; use 0 to disable")
        self.capacity_bytes = capacity_bytes
        self._entries: OrderedDict[str, tuple[HybridCache, int]] = OrderedDict()
        self.used_bytes = 0
        self.num_evicted = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def get(self, key: str) -> HybridCache | None:
        """The entry for `key` (now the most recently used), or None."""
        item = self._entries.get(key)
        if item is None:
            return None
        self._entries.move_to_end(key)
        return item[0]

    def put(self, key: str, cache: HybridCache) -> bool:
        """Store a compact copy of `cache` under `key` (replacing any old entry)."""
        self._drop(key)
        entry = compact(cache)
        nbytes = entry_bytes(entry)
        if nbytes > self.capacity_bytes:
            log.info("prefix %s: %d bytes exceeds the store's capacity of %d; not kept",
                     key, nbytes, self.capacity_bytes)
            return False
        while self.used_bytes + nbytes > self.capacity_bytes:
            oldest = next(iter(self._entries))
            self._drop(oldest)
            self.num_evicted += 1
        self._entries[key] = entry, nbytes
        self.used_bytes += nbytes
        return True

    def drop_all(self) -> None:
        self._entries.clear()
        self.used_bytes = 0

    def _drop(self, key: str) -> None:
        item = self._entries.pop(key, None)
        if item is not None:
            self.used_bytes -= item[1]
