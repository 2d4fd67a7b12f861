"""The prefix-cache index's entries (a node's cached blocks and state snapshots) and the recency
list that orders one cluster's entries for LRU eviction.

Bookkeeping objects only; the rules (what a hit is, what gets touched, what eviction removes)
live in prefix_cache.py.
"""

from __future__ import annotations

from emulator.control.types import NodeId


class Entry:
    """A link in a cluster's recency list. The list is intrusive (each entry holds its own links)
    rather than an OrderedDict keyed by entry: under mypyc a move to the end is a few pointer
    writes instead of a hashed method call, which made the whole-trace replay's index 2x faster
    (issue 15). A sentinel Entry closes the ring: its `next` is the least recent entry."""

    __slots__ = ("prev", "next")
    # Set by Recency.append; a Block or State is appended right after it is made (the ring's
    # sentinel links to itself).
    prev: Entry
    next: Entry


class Recency:
    """One cluster's byte budget and its entries, least recent first."""

    __slots__ = ("capacity", "used", "head")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        head = self.head = Entry()  # the sentinel: head.next is the least recent, head.prev the most
        head.prev = head.next = head

    def append(self, entry: Entry) -> None:
        """Add `entry` (not in the list) as the most recent."""
        head = self.head
        last = head.prev
        entry.prev, entry.next = last, head
        last.next = entry
        head.prev = entry

    def move_to_end(self, entry: Entry) -> None:
        """Make `entry` (in the list) the most recent."""
        head = self.head
        if head.prev is entry:
            return
        entry.prev.next = entry.next
        entry.next.prev = entry.prev
        last = head.prev
        entry.prev, entry.next = last, head
        last.next = entry
        head.prev = entry

    def oldest(self) -> Entry | None:
        first = self.head.next
        return None if first is self.head else first

    @staticmethod
    def remove(entry: Entry) -> None:
        """Unlink `entry` from its list. It keeps its own links, which refer forward only, so it
        forms no cycle and is freed as soon as nothing else holds it."""
        entry.prev.next = entry.next
        entry.next.prev = entry.prev


class NodeCache:
    """One node's cached blocks by hash, charged to its cluster's `recency`."""

    __slots__ = ("node", "recency", "blocks")

    def __init__(self, node: NodeId, recency: Recency) -> None:
        self.node = node
        self.recency = recency
        self.blocks: dict[int, Block] = {}


class Block(Entry):
    """A cached block. `parent` is the block object it was cached under (the chain's previous
    block; its hash is the parent hash), `num_children` counts the blocks cached under it, and
    `state` is the snapshot at its end, if cached."""

    __slots__ = ("cache", "hash", "parent", "num_children", "state")

    def __init__(self, cache: NodeCache, block_hash: int, parent: Block | None) -> None:
        self.cache = cache
        self.hash = block_hash
        self.parent = parent
        self.num_children = 0
        self.state: State | None = None


class State(Entry):
    """The linear/SWA state snapshot at the end of `block`."""

    __slots__ = ("block",)

    def __init__(self, block: Block) -> None:
        self.block = block
