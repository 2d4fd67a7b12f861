"""The hybrid prefix-cache index: which node holds which full-attention KV blocks and which
linear/SWA state snapshots, with per-cluster byte capacity and consistent LRU eviction.

It holds bookkeeping only (hashes, sizes, recency), never tensors, and does no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from emulator.control.prefix_entries import Block, NodeCache, Recency, State
from emulator.control.types import Cluster, NodeId


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
        """The hit's tokens on `node` (0: none). A scan of the few hits comparing the id's fields,
        as NodeId's == does: hashing a NodeId into a dict runs its dataclass __hash__ and the
        enums' interpreted, and cost 4 % of a whole-trace replay (issue 28, callgrind)."""
        for hit in self.hits:
            other = hit.node
            if other is node or (other.index == node.index and other.cluster is node.cluster
                                 and other.role is node.role):
                return hit.cached_len
        return 0


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


class PrefixCacheIndex:
    """Per cluster and node: KV blocks keyed by chained block hash and states keyed by the hash of
    the block they end, so a hit of k blocks needs blocks 0..k-1 and the state at block k-1.

    Invariants after every public call: used_bytes(c) <= capacity(c); every state's block and all
    its ancestors are present; a block's parent is present; used bytes equal the entry sum.
    Recency is one list per cluster (prefix_entries.py); inserts and touches put the deepest
    entries first, so a capacity eviction drops a state before its block and a chain's tail before
    its head. Blocks and states are themselves the list's links, found by hash in their node's
    `blocks`; no key holds a NodeId, whose dataclass hash cost more than the rest of the index
    (issue 15: the whole-trace replay's index went from 0.30 s to 0.05 s compiled). The
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
        self._recency = {cluster: Recency(int(capacity_bytes[cluster])) for cluster in Cluster}
        self._nodes: dict[NodeId, NodeCache] = {}
        self._node_order: tuple[NodeCache, ...] | None = None  # by node, None when stale
        self._last_now_s = float("-inf")

    # ---- queries -------------------------------------------------------------------------------

    def capacity(self, cluster: Cluster) -> int:
        return self._recency[cluster].capacity

    def used_bytes(self, cluster: Cluster) -> int:
        return self._recency[cluster].used

    def nodes(self) -> tuple[NodeId, ...]:
        """Nodes that cache at least one entry, sorted."""
        return tuple(sorted(node for node, cache in self._nodes.items() if cache.blocks))

    def contents(self, node: NodeId) -> NodeContents:
        cache = self._nodes.get(node)
        blocks = cache.blocks.values() if cache is not None else ()
        parents = {block.hash: _hash_of(block.parent) for block in blocks}
        return NodeContents(node, parents, frozenset(block.hash for block in blocks if block.state))

    def lookup(self, block_hashes: Sequence[int], now_s: float | None = None) -> PrefixLookup:
        """Each node's longest prefix with all blocks and the state at its end. With `now_s` the
        hits are touched (made most recent); without it the lookup is a side-effect-free peek."""
        if not self._holds_root(block_hashes):
            return _NO_HITS  # the common case on unshared prompts: no chain can start
        hits = []
        for cache in self._sorted_caches():
            num_blocks = _hit_blocks(cache, block_hashes)
            if num_blocks:
                node = cache.node
                hits.append(PrefixHit(node.cluster, node, num_blocks * self.block_tokens, num_blocks))
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

    def _sorted_caches(self) -> tuple[NodeCache, ...]:
        """The node caches by node; kept until a node's cache is created or removed."""
        if self._node_order is None:
            self._node_order = tuple(self._nodes[node] for node in sorted(self._nodes))
        return self._node_order

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
        # None: the state after the last block only (the engines' case: no set to build or probe)
        counts = None if state_at is None else set(state_at)
        bad = sorted(c for c in counts or () if not 1 <= c <= len(hashes))
        if bad:
            raise ValueError(f"state_at: {bad} outside 1..{len(hashes)}; give block counts")
        if len(set(hashes)) != len(hashes):
            raise ValueError("block_hashes: a hash repeats; pass chained hashes (one per prefix)")
        self._check_time(now_s)
        cache = self._nodes.get(node)
        if cache is None:
            cache = self._nodes[node] = NodeCache(node, self._recency[node.cluster])
            self._node_order = None
        chain, num_old = self._add_chain(cache, hashes)
        # Touch the chain deepest first (the state after block i, then block i, down to block 0),
        # as `_touch` does; a new entry goes to the end where an old one moves there, so the
        # recency order is the one that adding everything first and touching after would leave.
        recency = cache.recency
        for count in range(len(chain), 0, -1):
            block = chain[count - 1]
            if (count == len(chain)) if counts is None else (count in counts):
                state = block.state
                if state is None:
                    state = block.state = State(block)
                    recency.used += self.state_bytes
                    recency.append(state)
                else:
                    recency.move_to_end(state)
            if count > num_old:
                recency.append(block)
            else:
                recency.move_to_end(block)
        self._evict_to_capacity(recency)

    def touch(
        self, node: NodeId, block_hashes: Sequence[int], num_blocks: int, now_s: float
    ) -> None:
        """Make a used prefix of `node` most recent (e.g. the router's chosen node)."""
        self._check_time(now_s)
        cache = self._nodes.get(node)
        if cache is not None:
            if num_blocks < 0:
                raise ValueError(f"num_blocks: {num_blocks} is negative; give a block count")
            self._touch(cache, block_hashes, num_blocks)

    def drop_node(self, node: NodeId) -> NodeDrop:
        """Forget everything a killed node (or one whose role flipped) held."""
        cache = self._nodes.pop(node, None)
        self._node_order = None
        recency = self._recency[node.cluster]
        before = recency.used
        if cache is not None:
            for block in cache.blocks.values():
                Recency.remove(block)
                recency.used -= self.kv_bytes_per_block
                if block.state is not None:
                    Recency.remove(block.state)
                    recency.used -= self.state_bytes
        return NodeDrop(node, before - recency.used)

    # ---- internals -----------------------------------------------------------------------------

    def _check_time(self, now_s: float) -> None:
        if now_s < self._last_now_s:
            raise ValueError(f"now_s: {now_s} is before {self._last_now_s}; pass a monotonic clock")
        self._last_now_s = now_s

    def _add_chain(self, cache: NodeCache, hashes: tuple[int, ...]) -> tuple[list[Block], int]:
        """Cache the chain `hashes` on a node (blocks only, charged but not yet in the LRU): its
        blocks in order, and how many of them were cached already. Once one block is new, every
        later one is too: an old block cannot have a new one as its parent."""
        blocks, recency, kv_bytes = cache.blocks, cache.recency, self.kv_bytes_per_block
        chain: list[Block] = []
        num_old = -1
        parent: Block | None = None
        for block_hash in hashes:
            block = blocks.get(block_hash)
            if block is not None and block.parent is not parent:
                self._evict_block(block)  # hash reused under another prefix
                block = None
            if block is None:
                if num_old < 0:
                    num_old = len(chain)
                block = blocks[block_hash] = Block(cache, block_hash, parent)
                if parent is not None:
                    parent.num_children += 1
                recency.used += kv_bytes
            chain.append(block)
            parent = block
        return chain, num_old if num_old >= 0 else len(chain)

    def _touch(self, cache: NodeCache, hashes: Sequence[int], num_blocks: int) -> None:
        """Touch blocks 0..num_blocks-1 and the state after block num_blocks (the one used; other
        states on the way keep their age), deepest first: the state, then block i, down to block
        0. Only the chain that matches is touched, so a block is never older than one of its
        descendants: the LRU victim is a tail block or a state, and a capacity eviction trims
        chains from their end (as vLLM frees blocks in reverse order)."""
        blocks, recency = cache.blocks, cache.recency
        matched: list[Block] = []
        parent: Block | None = None
        for block_hash in hashes:
            if len(matched) == num_blocks:
                break
            block = blocks.get(block_hash)
            if block is None or block.parent is not parent:
                break
            matched.append(block)
            parent = block
        for count in range(len(matched), 0, -1):
            block = matched[count - 1]
            if count == num_blocks and block.state is not None:
                recency.move_to_end(block.state)
            recency.move_to_end(block)

    def _evict_to_capacity(self, recency: Recency) -> None:
        while recency.used > recency.capacity:
            entry = recency.oldest()
            assert entry is not None  # used bytes > 0 means some entry holds them
            if isinstance(entry, State):
                cache = entry.block.cache
                self._evict_state(entry)
            else:
                assert isinstance(entry, Block)
                cache = entry.cache
                self._evict_block(entry)
            if not cache.blocks:
                del self._nodes[cache.node]
                self._node_order = None

    def _evict_state(self, state: State) -> None:
        Recency.remove(state)
        state.block.state = None
        state.block.cache.recency.used -= self.state_bytes

    def _evict_block(self, block: Block) -> None:
        """Evict a block, every later block of its chains and every state at or after it."""
        if block.parent is not None:
            block.parent.num_children -= 1
        if block.num_children:
            for victim in _subtree(block.cache, block):
                self._drop_block(victim)
        else:
            self._drop_block(block)

    def _drop_block(self, block: Block) -> None:
        del block.cache.blocks[block.hash]
        Recency.remove(block)
        block.cache.recency.used -= self.kv_bytes_per_block
        if block.state is not None:
            self._evict_state(block.state)


def _hash_of(block: Block | None) -> int | None:
    return block.hash if block is not None else None


def _hit_blocks(cache: NodeCache, block_hashes: Sequence[int]) -> int:
    """The longest chain of `block_hashes` that `cache` holds (each block under the previous one)
    and that ends at a cached state."""
    blocks = cache.blocks
    best = 0
    parent: Block | None = None
    for i, block_hash in enumerate(block_hashes):
        block = blocks.get(block_hash)
        if block is None or block.parent is not parent:
            break
        if block.state is not None:
            best = i + 1
        parent = block
    return best


def _subtree(cache: NodeCache, root: Block) -> list[Block]:
    """`root` and every block cached under it, found by a scan of the node's blocks: only a hash
    collision evicts a block with children, so no block keeps a set of its own."""
    children: dict[int, list[Block]] = {}
    for block in cache.blocks.values():
        if block.parent is not None:
            children.setdefault(id(block.parent), []).append(block)
    found, stack = [], [root]
    while stack:
        victim = stack.pop()
        found.append(victim)
        stack.extend(children.get(id(victim), ()))
    return found
