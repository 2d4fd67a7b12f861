"""The hybrid prefix-cache index: which node holds which full-attention KV blocks and which
linear/SWA state snapshots, with per-cluster byte capacity and consistent LRU eviction.

It holds bookkeeping only (hashes, sizes, recency), never tensors, and does no I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice

from emulator.control.types import Cluster, NodeId

_BLOCK, _STATE = 0, 1  # entry kinds in an LRU key (node, kind, block hash)


@dataclass(frozen=True, slots=True)
class PrefixHit:
    """A reusable prefix on one node: blocks 0..num_blocks-1 plus the state at their end."""

    cluster: Cluster
    node: NodeId
    cached_len: int  # tokens: num_blocks * block_tokens
    num_blocks: int


@dataclass(frozen=True, slots=True)
class PrefixLookup:
    """Every node's positive hit for one prompt, sorted by node; misses are left out."""

    hits: tuple[PrefixHit, ...] = ()
    # hits_by_node, built on the first on_node (the router asks once per candidate node)
    _by_node: dict[NodeId, PrefixHit] | None = field(
        default=None, init=False, repr=False, compare=False)

    @property
    def hits_by_node(self) -> dict[NodeId, PrefixHit]:
        return {hit.node: hit for hit in self.hits}

    def best(self, cluster: Cluster) -> PrefixHit | None:
        """The longest hit in `cluster` (lowest node on ties), or None."""
        in_cluster = [hit for hit in self.hits if hit.cluster is cluster]
        return max(in_cluster, key=lambda hit: hit.num_blocks, default=None)

    def cached_len(self, cluster: Cluster) -> int:
        best = self.best(cluster)
        return best.cached_len if best else 0

    def on_node(self, node: NodeId) -> int:
        if not self.hits:
            return 0
        by_node = self._by_node
        if by_node is None:
            by_node = self.hits_by_node
            object.__setattr__(self, "_by_node", by_node)
        hit = by_node.get(node)
        return hit.cached_len if hit else 0


_NO_HITS = PrefixLookup()


@dataclass(frozen=True, slots=True)
class NodeContents:
    """What one node caches: each block's parent hash (None for a first block) and its states."""

    node: NodeId
    block_parents: Mapping[int, int | None]
    states: frozenset[int]


@dataclass(frozen=True, slots=True)
class NodeDrop:
    """What `drop_node` removed: the prefix-cache bytes it freed."""

    node: NodeId
    freed_bytes: int


class _Block:
    """A cached block on one node; `children` lets eviction cascade down the chain."""

    __slots__ = ("parent", "children")

    def __init__(self, parent: int | None) -> None:
        self.parent = parent
        self.children: set[int] = set()


class _NodeCache:
    __slots__ = ("blocks", "states")

    def __init__(self) -> None:
        self.blocks: dict[int, _Block] = {}
        self.states: set[int] = set()


def _matching(cache: _NodeCache, block_hashes: Sequence[int]) -> Iterator[int]:
    """The leading hashes that `cache` holds as one chain (each block under the previous one)."""
    parent = None
    for block_hash in block_hashes:
        block = cache.blocks.get(block_hash)
        if block is None or block.parent != parent:
            return
        yield block_hash
        parent = block_hash


class PrefixCacheIndex:
    """Per cluster and node: KV blocks keyed by chained block hash and states keyed by the hash of
    the block they end, so a hit of k blocks needs blocks 0..k-1 and the state at block k-1.

    Invariants after every public call: used_bytes(c) <= capacity(c); every state's block and all
    its ancestors are present; a block's parent is present; used bytes equal the entry sum.
    Recency is one OrderedDict per cluster; inserts and touches put the deepest entries first, so
    a capacity eviction drops a state before its block and a chain's tail before its head. The
    cascade in `_evict_block` (later blocks and their states go with a block) then only fires when
    a hash turns up under a different parent, which chained hashes make a collision.
    """

    def __init__(
        self,
        block_tokens: int,
        kv_bytes_per_block: int,
        state_bytes: int,
        capacity_bytes: Mapping[Cluster, int],
    ) -> None:
        if block_tokens <= 0:
            raise ValueError(f"block_tokens: {block_tokens} must be positive; use e.g. 512")
        sizes = (("kv_bytes_per_block", kv_bytes_per_block), ("state_bytes", state_bytes))
        for name, value in sizes:
            if value < 0:
                raise ValueError(f"{name}: {value} is negative; use 0 or a byte size")
        for cluster in Cluster:
            if capacity_bytes.get(cluster, -1) < 0:
                raise ValueError(
                    f"capacity_bytes[{cluster.value}]: {capacity_bytes.get(cluster)!r} is missing "
                    "or negative; give every cluster a byte capacity (0 disables its cache)"
                )
        self.block_tokens = block_tokens
        self.kv_bytes_per_block = kv_bytes_per_block
        self.state_bytes = state_bytes
        self._capacity = {cluster: int(capacity_bytes[cluster]) for cluster in Cluster}
        self._used = dict.fromkeys(Cluster, 0)
        self._lru: dict[Cluster, OrderedDict[tuple[NodeId, int, int], None]] = {
            cluster: OrderedDict() for cluster in Cluster
        }
        self._nodes: dict[NodeId, _NodeCache] = {}
        self._node_order: tuple[NodeId, ...] | None = None  # sorted(_nodes), None when stale
        self._last_now_s = float("-inf")

    # ---- queries -------------------------------------------------------------------------------

    def capacity(self, cluster: Cluster) -> int:
        return self._capacity[cluster]

    def used_bytes(self, cluster: Cluster) -> int:
        return self._used[cluster]

    def nodes(self) -> tuple[NodeId, ...]:
        """Nodes that cache at least one entry, sorted."""
        return tuple(sorted(node for node, cache in self._nodes.items() if cache.blocks))

    def contents(self, node: NodeId) -> NodeContents:
        cache = self._nodes.get(node, _NodeCache())
        parents = {block_hash: block.parent for block_hash, block in cache.blocks.items()}
        return NodeContents(node, parents, frozenset(cache.states))

    def lookup(self, block_hashes: Sequence[int], now_s: float | None = None) -> PrefixLookup:
        """Each node's longest prefix with all blocks and the state at its end. With `now_s` the
        hits are touched (made most recent); without it the lookup is a side-effect-free peek."""
        if not self._holds_root(block_hashes):
            return _NO_HITS  # the common case on unshared prompts: no chain can start
        hits = []
        for node in self._sorted_nodes():
            num_blocks = self._hit_blocks(self._nodes[node], block_hashes)
            if num_blocks:
                cached_len = num_blocks * self.block_tokens
                hits.append(PrefixHit(node.cluster, node, cached_len, num_blocks))
        if now_s is not None:
            for hit in hits:
                self.touch(hit.node, block_hashes, hit.num_blocks, now_s)
        return PrefixLookup(tuple(hits))

    def _holds_root(self, block_hashes: Sequence[int]) -> bool:
        """Whether some node caches the prompt's first block as a chain root; without one every
        node's hit is 0 blocks, and the walk over each node's chain can be skipped."""
        if not block_hashes or not self._nodes:
            return False
        first = block_hashes[0]
        for cache in self._nodes.values():
            block = cache.blocks.get(first)
            if block is not None and block.parent is None:
                return True
        return False

    def _sorted_nodes(self) -> tuple[NodeId, ...]:
        """The nodes with a cache, sorted; kept until a node's cache is created or removed."""
        if self._node_order is None:
            self._node_order = tuple(sorted(self._nodes))
        return self._node_order

    def _hit_blocks(self, cache: _NodeCache, block_hashes: Sequence[int]) -> int:
        """The longest matching chain (as `_matching`, inlined) that ends at a cached state."""
        blocks, states = cache.blocks, cache.states
        best, parent = 0, None
        for i, block_hash in enumerate(block_hashes):
            block = blocks.get(block_hash)
            if block is None or block.parent != parent:
                break
            if block_hash in states:
                best = i + 1
            parent = block_hash
        return best

    # ---- updates -------------------------------------------------------------------------------

    def insert(
        self,
        node: NodeId,
        block_hashes: Sequence[int],
        now_s: float,
        state_at: Iterable[int] | None = None,
    ) -> None:
        """Record that `node` holds `block_hashes` and states after the given block counts (default:
        after the last block), then evict least recently used entries down to capacity."""
        hashes = tuple(block_hashes)
        if not hashes:
            return
        counts = {len(hashes)} if state_at is None else set(state_at)
        bad = sorted(c for c in counts if not 1 <= c <= len(hashes))
        if bad:
            raise ValueError(f"state_at: {bad} outside 1..{len(hashes)}; give block counts")
        if len(set(hashes)) != len(hashes):
            raise ValueError("block_hashes: a hash repeats; pass chained hashes (one per prefix)")
        self._check_time(now_s)
        cache = self._nodes.get(node)
        if cache is None:
            cache = self._nodes[node] = _NodeCache()
            self._node_order = None
        parent = None
        for block_hash in hashes:
            block = cache.blocks.get(block_hash)
            if block is not None and block.parent != parent:
                self._evict_block(node, cache, block_hash)  # hash reused under another prefix
                block = None
            if block is None:
                self._add_block(node, cache, block_hash, parent)
            parent = block_hash
        for count in counts:
            if hashes[count - 1] not in cache.states:
                cache.states.add(hashes[count - 1])
                self._charge(node, _STATE, hashes[count - 1], self.state_bytes)
        self._touch_chain(node, cache, hashes, len(hashes), counts)
        self._evict_to_capacity(node.cluster)

    def touch(
        self, node: NodeId, block_hashes: Sequence[int], num_blocks: int, now_s: float
    ) -> None:
        """Make a used prefix of `node` most recent (e.g. the router's chosen node)."""
        self._check_time(now_s)
        cache = self._nodes.get(node)
        if cache is not None:
            self._touch_chain(node, cache, tuple(block_hashes), num_blocks, {num_blocks})

    def drop_node(self, node: NodeId) -> NodeDrop:
        """Forget everything a killed node (or one whose role flipped) held."""
        cache = self._nodes.pop(node, None)
        self._node_order = None
        before = self._used[node.cluster]
        if cache is not None:
            lru = self._lru[node.cluster]
            for block_hash in cache.blocks:
                del lru[(node, _BLOCK, block_hash)]
            for block_hash in cache.states:
                del lru[(node, _STATE, block_hash)]
            self._used[node.cluster] -= (
                len(cache.blocks) * self.kv_bytes_per_block + len(cache.states) * self.state_bytes
            )
        return NodeDrop(node, before - self._used[node.cluster])

    # ---- internals -----------------------------------------------------------------------------

    def _check_time(self, now_s: float) -> None:
        if now_s < self._last_now_s:
            raise ValueError(f"now_s: {now_s} is before {self._last_now_s}; pass a monotonic clock")
        self._last_now_s = now_s

    def _charge(self, node: NodeId, kind: int, block_hash: int, num_bytes: int) -> None:
        self._lru[node.cluster][(node, kind, block_hash)] = None
        self._used[node.cluster] += num_bytes

    def _add_block(
        self, node: NodeId, cache: _NodeCache, block_hash: int, parent: int | None
    ) -> None:
        cache.blocks[block_hash] = _Block(parent)
        if parent is not None:
            cache.blocks[parent].children.add(block_hash)
        self._charge(node, _BLOCK, block_hash, self.kv_bytes_per_block)

    def _touch_chain(
        self,
        node: NodeId,
        cache: _NodeCache,
        hashes: tuple[int, ...],
        num_blocks: int,
        state_counts: Iterable[int],
    ) -> None:
        """Touch blocks 0..num_blocks-1 and the states after the given block counts (the ones
        written or used; other states on the way keep their age), deepest first: the state after
        block i, then block i, down to block 0. Only the chain that matches is touched, so a block
        is never older than one of its descendants: the LRU victim is a tail block or a state, and
        a capacity eviction trims chains from their end (as vLLM frees blocks in reverse order)."""
        lru = self._lru[node.cluster]
        counts = set(state_counts)
        matched = list(islice(_matching(cache, hashes), num_blocks))
        for count in range(len(matched), 0, -1):
            block_hash = matched[count - 1]
            if count in counts and block_hash in cache.states:
                lru.move_to_end((node, _STATE, block_hash))
            lru.move_to_end((node, _BLOCK, block_hash))

    def _evict_to_capacity(self, cluster: Cluster) -> None:
        lru = self._lru[cluster]
        while self._used[cluster] > self._capacity[cluster]:
            node, kind, block_hash = next(iter(lru))
            cache = self._nodes[node]
            if kind == _STATE:
                self._evict_state(node, cache, block_hash)
            else:
                self._evict_block(node, cache, block_hash)
            if not cache.blocks:
                del self._nodes[node]
                self._node_order = None

    def _evict_state(self, node: NodeId, cache: _NodeCache, block_hash: int) -> None:
        cache.states.discard(block_hash)
        del self._lru[node.cluster][(node, _STATE, block_hash)]
        self._used[node.cluster] -= self.state_bytes

    def _evict_block(self, node: NodeId, cache: _NodeCache, block_hash: int) -> None:
        """Evict a block, every later block of its chains and every state at or after it."""
        parent = cache.blocks[block_hash].parent
        if parent is not None:
            cache.blocks[parent].children.discard(block_hash)
        lru = self._lru[node.cluster]
        stack = [block_hash]
        while stack:
            victim = stack.pop()
            stack.extend(cache.blocks.pop(victim).children)
            del lru[(node, _BLOCK, victim)]
            self._used[node.cluster] -= self.kv_bytes_per_block
            if victim in cache.states:
                self._evict_state(node, cache, victim)
