"""The hybrid prefix-cache index: hand cases, then random operation sequences against invariants."""

from __future__ import annotations

import random

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from emulator.control.prefix_cache import PrefixCacheIndex, PrefixHit
from emulator.control.types import Cluster, NodeId

KV, STATE, TOKENS = 10, 3, 512  # bytes per block, bytes per state, tokens per block
RP0, RP1 = NodeId.parse("remote-prefill-0"), NodeId.parse("remote-prefill-1")
LP0, LP1 = NodeId.parse("local-prefill-0"), NodeId.parse("local-prefill-1")
NODES = (RP0, RP1, LP0, LP1)


def make_index(remote: int = 10_000, local: int = 10_000) -> PrefixCacheIndex:
    return PrefixCacheIndex(TOKENS, KV, STATE, {Cluster.REMOTE: remote, Cluster.LOCAL: local})


# ---- hand cases ---------------------------------------------------------------------------------


def test_partial_chain_match_needs_a_state_at_the_matched_end() -> None:
    index = make_index()
    index.insert(LP0, (1, 2, 3), now_s=0.0)  # default: one state, after block 3
    assert index.lookup((1, 2, 3, 4, 5)).hits == (PrefixHit(Cluster.LOCAL, LP0, 3 * TOKENS, 3),)
    assert index.lookup((1, 2, 9)).hits == ()  # blocks 1, 2 match but no state after block 2
    index.insert(LP0, (1, 2, 3), now_s=1.0, state_at=[1, 2])
    assert index.lookup((1, 2, 9)).on_node(LP0) == 2 * TOKENS
    assert index.lookup((1, 7)).on_node(LP0) == TOKENS


def test_state_is_only_valid_at_its_exact_boundary() -> None:
    index = make_index()
    index.insert(LP0, (1, 2, 3, 4), now_s=0.0, state_at=[2])
    assert index.lookup((1, 2, 3, 4)).cached_len(Cluster.LOCAL) == 2 * TOKENS  # not 4 blocks
    assert index.lookup((1, 2)).cached_len(Cluster.LOCAL) == 2 * TOKENS
    assert index.lookup((1,)).cached_len(Cluster.LOCAL) == 0  # no state after block 1
    assert index.lookup((2,)).hits == ()  # block 2 is cached only after block 1


def test_hits_per_node_and_cluster_and_bytes_per_cluster() -> None:
    index = make_index()
    index.insert(RP0, (1, 2), now_s=0.0)
    index.insert(LP0, (1, 2, 3), now_s=0.0)
    index.insert(LP1, (1,), now_s=0.0)
    found = index.lookup((1, 2, 3))
    assert found.hits_by_node == {
        RP0: PrefixHit(Cluster.REMOTE, RP0, 1024, 2),
        LP0: PrefixHit(Cluster.LOCAL, LP0, 1536, 3),
        LP1: PrefixHit(Cluster.LOCAL, LP1, 512, 1),
    }
    assert found.best(Cluster.LOCAL) == PrefixHit(Cluster.LOCAL, LP0, 1536, 3)
    assert found.cached_len(Cluster.REMOTE) == 1024 and found.on_node(RP1) == 0
    assert index.used_bytes(Cluster.REMOTE) == 2 * KV + STATE
    assert index.used_bytes(Cluster.LOCAL) == (3 * KV + STATE) + (KV + STATE)
    assert index.nodes() == (LP0, LP1, RP0)  # NodeId order: cluster name, role, index


def test_lru_evicts_the_least_recently_used_and_a_lookup_with_time_touches() -> None:
    index = make_index(local=2 * (KV + STATE))  # room for two one-block prefixes
    index.insert(LP0, (1,), now_s=0.0)
    index.insert(LP1, (2,), now_s=1.0)
    index.lookup((1,), now_s=2.0)  # touches (1,) on LP0: (2,) is now the oldest
    index.insert(LP0, (3,), now_s=3.0)
    assert [index.lookup((h,)).on_node(n) for h, n in ((1, LP0), (2, LP1), (3, LP0))] == [
        TOKENS,
        0,
        TOKENS,
    ]
    index.lookup((1,))  # a peek without time does not touch
    index.insert(LP1, (4,), now_s=4.0)
    assert index.lookup((1,)).hits == () and index.lookup((3,)).on_node(LP0) == TOKENS
    assert index.used_bytes(Cluster.LOCAL) == 2 * (KV + STATE)


def test_capacity_eviction_trims_a_chain_from_its_tail_state_first() -> None:
    index = make_index(local=2 * KV + STATE)  # two blocks and one state
    index.insert(LP0, (1, 2, 3, 4), now_s=0.0, state_at=[2, 4])
    contents = index.contents(LP0)
    assert contents.block_parents == {1: None, 2: 1} and contents.states == frozenset({2})
    assert index.lookup((1, 2, 3, 4)).on_node(LP0) == 2 * TOKENS
    assert index.used_bytes(Cluster.LOCAL) == 2 * KV + STATE


def test_eviction_of_a_block_cascades_to_later_blocks_and_their_states() -> None:
    index = make_index()
    index.insert(LP0, (1, 2, 3), now_s=0.0, state_at=[1, 2, 3])
    index.insert(LP0, (9, 2), now_s=1.0)  # hash 2 reused under parent 9: the old 2 and 3 go
    contents = index.contents(LP0)
    assert contents.block_parents == {1: None, 9: None, 2: 9}
    assert contents.states == frozenset({1, 2})
    assert index.lookup((1, 2, 3)).on_node(LP0) == TOKENS
    assert index.lookup((9, 2)).on_node(LP0) == 2 * TOKENS
    assert index.used_bytes(Cluster.LOCAL) == 3 * KV + 2 * STATE


def test_only_states_written_or_used_are_touched() -> None:
    index = make_index(local=3 * KV + 2 * STATE)
    index.insert(LP0, (1, 2), now_s=0.0, state_at=[1])
    index.insert(LP0, (1, 2, 3), now_s=1.0)  # blocks 1, 2 touched; the state after 1 is not
    index.insert(LP0, (1, 2), now_s=2.0, state_at=[2])  # 3 bytes over: the oldest entry goes
    assert index.contents(LP0).states == frozenset({2, 3})
    assert index.lookup((1, 2, 3)).on_node(LP0) == 3 * TOKENS
    assert index.lookup((1, 9)).on_node(LP0) == 0


def test_evicting_a_state_can_leave_its_blocks() -> None:
    index = make_index(local=3 * KV + STATE)
    index.insert(LP0, (1, 2), now_s=0.0, state_at=[1, 2])  # 2 blocks + 2 states
    index.insert(LP1, (5,), now_s=1.0, state_at=[])  # needs 10 more bytes: the state at 2 goes
    assert index.contents(LP0).block_parents == {1: None, 2: 1}
    assert index.contents(LP0).states == frozenset({1})
    assert index.lookup((1, 2)).on_node(LP0) == TOKENS


def test_zero_capacity_caches_nothing_and_clusters_are_independent() -> None:
    index = make_index(remote=0)
    index.insert(RP0, (1, 2), now_s=0.0)
    index.insert(LP0, (1, 2), now_s=0.0)
    assert index.used_bytes(Cluster.REMOTE) == 0 and index.contents(RP0).block_parents == {}
    assert index.lookup((1, 2)).hits_by_node.keys() == {LP0}


def test_drop_node_forgets_its_cache() -> None:
    index = make_index()
    index.insert(LP0, (1, 2), now_s=0.0)
    index.insert(LP1, (1, 2), now_s=0.0)
    dropped = index.drop_node(LP0)
    assert dropped.freed_bytes == 2 * KV + STATE
    assert index.lookup((1, 2)).hits_by_node.keys() == {LP1}
    assert index.used_bytes(Cluster.LOCAL) == 2 * KV + STATE
    assert index.drop_node(LP0).freed_bytes == 0


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda i: i.insert(LP0, (1, 2), 0.0, state_at=[3]), "state_at"),
        (lambda i: i.insert(LP0, (1, 2), 0.0, state_at=[0]), "state_at"),
        (lambda i: i.insert(LP0, (1, 1), 0.0), "repeats"),
        (lambda i: (i.insert(LP0, (1,), 5.0), i.insert(LP0, (2,), 4.0)), "monotonic"),
        (lambda i: PrefixCacheIndex(0, KV, STATE, {Cluster.REMOTE: 1, Cluster.LOCAL: 1}), "block"),
        (lambda i: PrefixCacheIndex(TOKENS, KV, STATE, {Cluster.REMOTE: 1}), "local"),
        (lambda i: PrefixCacheIndex(TOKENS, -1, STATE, {c: 1 for c in Cluster}), "kv_bytes"),
    ],
)
def test_bad_arguments_are_refused_with_the_field(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call(make_index())


# ---- invariants under random operations ---------------------------------------------------------


def chains() -> list[tuple[int, ...]]:
    """Prompts over a 2-symbol alphabet, as chained hashes: equal prefixes share hashes."""
    prefix_to_hash: dict[tuple[int, ...], int] = {}
    prompts = []
    for n in range(1, 6):
        for code in range(2**n):
            symbols = tuple((code >> i) & 1 for i in range(n))
            prompts.append(
                tuple(prefix_to_hash.setdefault(symbols[: i + 1], len(prefix_to_hash) + 1)
                      for i in range(n))
            )
    return prompts


PROMPTS = chains()
COLLIDING = [(500, 3), (501, 3, 2), (7, 1)]  # hashes reused under other parents


def reference_hit(index: PrefixCacheIndex, node: NodeId, hashes: tuple[int, ...]) -> int:
    """Longest k with blocks 0..k-1 chained on `node` and a state after block k-1, in tokens."""
    contents, best, parent = index.contents(node), 0, None
    for k, block_hash in enumerate(hashes, start=1):
        if contents.block_parents.get(block_hash, -1) != parent:
            break
        best = k if block_hash in contents.states else best
        parent = block_hash
    return best * TOKENS


def check_invariants(index: PrefixCacheIndex) -> None:
    for cluster in Cluster:
        assert 0 <= index.used_bytes(cluster) <= index.capacity(cluster)
        recount = sum(
            len(c.block_parents) * KV + len(c.states) * STATE
            for c in map(index.contents, NODES)
            if c.node.cluster is cluster
        )
        assert index.used_bytes(cluster) == recount
    for node in NODES:
        contents = index.contents(node)
        assert contents.states <= contents.block_parents.keys()
        for block_hash in contents.block_parents:  # every ancestor present, no cycle
            steps, cursor = 0, block_hash
            while cursor is not None:
                assert cursor in contents.block_parents and steps <= len(contents.block_parents)
                cursor, steps = contents.block_parents[cursor], steps + 1


def check_lookup(index: PrefixCacheIndex, hashes: tuple[int, ...]) -> None:
    found = index.lookup(hashes)
    for node in NODES:
        assert found.on_node(node) == reference_hit(index, node, hashes)
    for cluster in Cluster:
        assert found.cached_len(cluster) == max(
            (reference_hit(index, n, hashes) for n in NODES if n.cluster is cluster), default=0
        )


class CacheMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.index = make_index(remote=5 * KV + 2 * STATE, local=9 * KV + 3 * STATE)
        self.now_s = 0.0

    def tick(self) -> float:
        self.now_s += 1.0
        return self.now_s

    @rule(
        node=st.sampled_from(NODES),
        hashes=st.sampled_from(PROMPTS + COLLIDING),
        states=st.none() | st.sets(st.integers(1, 5)),
    )
    def insert(self, node: NodeId, hashes: tuple[int, ...], states: set[int] | None) -> None:
        state_at = None if states is None else [s for s in states if s <= len(hashes)]
        self.index.insert(node, hashes, self.tick(), state_at)
        written = [len(hashes)] if state_at is None else state_at
        needed = len(hashes) * KV + len(written) * STATE
        if written and needed <= self.index.capacity(node.cluster):  # never its own victim
            # at least what was just written; a deeper state from an earlier insert may remain
            assert self.index.lookup(hashes).on_node(node) >= max(written) * TOKENS

    @rule(hashes=st.sampled_from(PROMPTS + COLLIDING), touch=st.booleans())
    def lookup(self, hashes: tuple[int, ...], touch: bool) -> None:
        check_lookup(self.index, hashes)
        self.index.lookup(hashes, self.tick() if touch else None)

    @rule(node=st.sampled_from(NODES))
    def drop_node(self, node: NodeId) -> None:
        before = self.index.used_bytes(node.cluster)
        dropped = self.index.drop_node(node)
        assert self.index.contents(node).block_parents == {}
        assert dropped.freed_bytes == before - self.index.used_bytes(node.cluster)

    @invariant()
    def consistent(self) -> None:
        check_invariants(self.index)


CacheMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestCacheMachine = pytest.mark.slow(CacheMachine.TestCase)


def test_long_seeded_random_run_keeps_the_invariants() -> None:
    rng = random.Random(5)
    index = make_index(remote=7 * KV + 2 * STATE, local=12 * KV + 4 * STATE)
    for step in range(3000):
        node, hashes = rng.choice(NODES), rng.choice(PROMPTS)
        roll = rng.random()
        if roll < 0.6:
            states = rng.sample(range(1, len(hashes) + 1), rng.randint(0, len(hashes)))
            index.insert(node, hashes, float(step), states if rng.random() < 0.5 else None)
        elif roll < 0.97:
            check_lookup(index, hashes)
            index.lookup(hashes, float(step))
        else:
            index.drop_node(node)
        check_invariants(index)
