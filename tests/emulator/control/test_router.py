"""The threshold router: each policy, both prefix rules, the three node rules and fallbacks, by hand."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest

from emulator.control.prefix_cache import PrefixCacheIndex
from emulator.control.router import CacheTransfer, NodeLoad, RouteDecision, Router, RouterConfig
from emulator.control.types import (
    Affinity,
    Cluster,
    NodeId,
    PrefixRule,
    RequestSpec,
    Route,
    RoutePolicy,
)

TOKENS = 1000  # block_tokens: a hit of k blocks is k * 1000 tokens
HASHES = tuple(range(100, 160))  # one prompt's chained block hashes (60 blocks)
NODES = (
    "remote-prefill-0", "remote-prefill-1", "local-prefill-0", "local-prefill-1", "local-decode-0"
)
SCARCE, ABUNDANT = PrefixRule.BANDWIDTH_SCARCE, PrefixRule.BANDWIDTH_ABUNDANT
PRFAAS, LOCAL_ONLY, ALL_REMOTE = RoutePolicy.PRFAAS, RoutePolicy.LOCAL_ONLY, RoutePolicy.ALL_REMOTE
COST, LONGEST, OFF = Affinity.COST, Affinity.LONGEST_PREFIX, Affinity.OFF
IDLE = "least loaded: holds 0 tokens, 0 queued tokens"


def prefill_s(cluster: Cluster, tokens: int) -> float:
    """A profile by hand: remote 0.1 s + 0.1 s per 1000 tokens, local 0.2 s + 0.2 s per 1000."""
    scale = 1.0 if cluster is Cluster.REMOTE else 2.0
    return scale * (0.1 + tokens / 10_000)


@dataclass(frozen=True)
class Case:
    name: str
    policy: RoutePolicy
    rule: PrefixRule
    t: int
    input_len: int
    route: Route | None
    node: str | None
    cached: int
    compared: int
    reason: str
    blocks: dict[str, int] = field(default_factory=dict)  # node -> cached blocks of the prompt
    down: tuple[str, ...] = ()
    queued: dict[str, int] = field(default_factory=dict)  # node -> queued tokens
    affinity: Affinity = COST
    transfer: CacheTransfer | None = None


def make_router(case: Case, capacity: int = 10**9) -> Router:
    index = PrefixCacheIndex(TOKENS, 100, 10, {Cluster.REMOTE: capacity, Cluster.LOCAL: capacity})
    for node, num_blocks in case.blocks.items():
        index.insert(NodeId.parse(node), HASHES[:num_blocks], now_s=0.0)
    config = RouterConfig(case.policy, case.t, case.rule, case.affinity)
    return Router(config, index, prefill_s=prefill_s)


def make_loads(case: Case) -> list[NodeLoad]:
    """`queued` tokens as one queued prefill per node that has any, not started yet."""
    loads = []
    for n in NODES:
        node, tokens = NodeId.parse(n), case.queued.get(n, 0)
        queued_s = prefill_s(node.cluster, tokens) if tokens else 0.0
        loads.append(NodeLoad(node, tokens, int(n in case.queued), n not in case.down, queued_s))
    return loads


def est(node: str, queue_s: float, prefill: float, own: int, input_len: int, queued: int = 0) -> str:
    """The cost rule's words for the chosen node."""
    return (f"({node} least estimated TTFT: queue {queue_s:.2f} s + prefill {prefill:.2f} s; "
            f"holds {own} of {input_len} tokens, {queued} queued tokens)")


def request(input_len: int) -> RequestSpec:
    return RequestSpec("r1", 0.0, input_len, 64, HASHES[: input_len // TOKENS])


CASES = [
    Case("local-only picks the least loaded local node", LOCAL_ONLY, SCARCE, 0, 30_000,
         Route.LOCAL, "local-prefill-1", 0, 30_000, queued={"local-prefill-0": 4000},
         reason=f"policy local-only -> local (local-prefill-1 {IDLE})"),
    Case("all-remote ignores a local prefix and never transfers", ALL_REMOTE, ABUNDANT, 0, 30_000,
         Route.PRFAAS, "remote-prefill-0", 0, 30_000, blocks={"local-prefill-0": 10},
         reason="policy all-remote -> prfaas " + est("remote-prefill-0", 0, 3.1, 0, 30_000)),
    Case("all-remote falls back to local when the remote cluster is down", ALL_REMOTE, SCARCE,
         0, 30_000, Route.LOCAL, "local-prefill-0", 0, 30_000,
         down=("remote-prefill-0", "remote-prefill-1"),
         reason="policy all-remote -> prfaas; remote cluster down -> local "
         f"(local-prefill-0 {IDLE})"),
    Case("prfaas: long uncached prompt goes remote", PRFAAS, SCARCE, 19_400, 30_000,
         Route.PRFAAS, "remote-prefill-0", 0, 30_000,
         reason="incremental 30000 (input 30000 - local prefix 0) > t 19400 -> prfaas "
         f"(remote-prefill-0 {IDLE})"),
    Case("prfaas: incremental equal to t stays local", PRFAAS, SCARCE, 19_400, 19_400,
         Route.LOCAL, "local-prefill-0", 0, 19_400,
         reason="incremental 19400 (input 19400 - local prefix 0) <= t 19400 -> local "
         f"(local-prefill-0 {IDLE})"),
    Case("prfaas: one token over t goes remote", PRFAAS, SCARCE, 19_399, 19_400,
         Route.PRFAAS, "remote-prefill-0", 0, 19_400,
         reason="incremental 19400 (input 19400 - local prefix 0) > t 19399 -> prfaas "
         f"(remote-prefill-0 {IDLE})"),
    Case("scarce: a local prefix brings the increment under t", PRFAAS, SCARCE, 20_000, 30_000,
         Route.LOCAL, "local-prefill-1", 12_000, 18_000, blocks={"local-prefill-1": 12},
         reason="incremental 18000 (input 30000 - local prefix 12000) <= t 20000 -> local "
         + est("local-prefill-1", 0, 3.8, 12_000, 30_000)),
    Case("rules disagree: scarce counts only the local prefix", PRFAAS, SCARCE, 20_000, 30_000,
         Route.PRFAAS, "remote-prefill-1", 15_000, 25_000,
         blocks={"local-prefill-0": 5, "remote-prefill-1": 15},
         reason="incremental 25000 (input 30000 - local prefix 5000) > t 20000 -> prfaas "
         + est("remote-prefill-1", 0, 1.6, 15_000, 30_000)),
    Case("rules disagree: abundant uses the remote prefix and ships it", PRFAAS, ABUNDANT, 20_000,
         30_000, Route.LOCAL, "local-prefill-0", 15_000, 15_000,
         blocks={"local-prefill-0": 5, "remote-prefill-1": 15},
         transfer=CacheTransfer(Cluster.REMOTE, Cluster.LOCAL, 15_000),
         reason="incremental 15000 (input 30000 - max(remote prefix 15000, local prefix 5000)) "
         "<= t 20000 -> local; transfer 15000 cached tokens remote->local "
         + est("local-prefill-0", 0, 3.2, 5_000, 30_000)),
    Case("abundant: a longer local prefix travels with a remote prefill", PRFAAS, ABUNDANT,
         20_000, 40_000, Route.PRFAAS, "remote-prefill-0", 8_000, 32_000,
         blocks={"local-prefill-0": 8},
         transfer=CacheTransfer(Cluster.LOCAL, Cluster.REMOTE, 8_000),
         reason="incremental 32000 (input 40000 - max(remote prefix 0, local prefix 8000)) "
         "> t 20000 -> prfaas; transfer 8000 cached tokens local->remote "
         + est("remote-prefill-0", 0, 3.3, 0, 40_000)),
    Case("abundant: equal prefixes need no transfer", PRFAAS, ABUNDANT, 20_000, 30_000,
         Route.PRFAAS, "remote-prefill-0", 5_000, 25_000,
         blocks={"local-prefill-0": 5, "remote-prefill-0": 5},
         reason="incremental 25000 (input 30000 - max(remote prefix 5000, local prefix 5000)) "
         "> t 20000 -> prfaas " + est("remote-prefill-0", 0, 2.6, 5_000, 30_000)),
    Case("longest-prefix: the node with the prefix wins despite its queue", PRFAAS, SCARCE, 25_000,
         30_000, Route.LOCAL, "local-prefill-1", 10_000, 20_000, affinity=LONGEST,
         blocks={"local-prefill-1": 10}, queued={"local-prefill-1": 20_000},
         reason="incremental 20000 (input 30000 - local prefix 10000) <= t 25000 -> local "
         "(local-prefill-1 longest prefix: holds 10000 tokens, 20000 queued tokens)"),
    Case("cost: a long queue outweighs the prefix", PRFAAS, SCARCE, 25_000, 30_000,
         Route.LOCAL, "local-prefill-0", 0, 20_000,
         blocks={"local-prefill-1": 10}, queued={"local-prefill-1": 20_000},
         reason="incremental 20000 (input 30000 - local prefix 10000) <= t 25000 -> local "
         + est("local-prefill-0", 0, 6.2, 0, 30_000)),
    Case("cost: a short queue is worth waiting for the prefix", PRFAAS, SCARCE, 25_000, 30_000,
         Route.LOCAL, "local-prefill-1", 10_000, 20_000,
         blocks={"local-prefill-1": 10}, queued={"local-prefill-1": 5000},
         reason="incremental 20000 (input 30000 - local prefix 10000) <= t 25000 -> local "
         + est("local-prefill-1", 1.2, 4.2, 10_000, 30_000, 5000)),
    Case("off: the idle node wins and recomputes", PRFAAS, SCARCE, 25_000, 30_000,
         Route.LOCAL, "local-prefill-0", 0, 20_000, affinity=OFF,
         blocks={"local-prefill-1": 10}, queued={"local-prefill-1": 5000},
         reason="incremental 20000 (input 30000 - local prefix 10000) <= t 25000 -> local "
         f"(local-prefill-0 {IDLE})"),
    Case("longest-prefix tie: fewer queued tokens wins", PRFAAS, SCARCE, 25_000, 30_000,
         Route.LOCAL, "local-prefill-1", 10_000, 20_000, affinity=LONGEST,
         blocks={"local-prefill-0": 10, "local-prefill-1": 10},
         queued={"local-prefill-0": 3000, "local-prefill-1": 1000},
         reason="incremental 20000 (input 30000 - local prefix 10000) <= t 25000 -> local "
         "(local-prefill-1 longest prefix: holds 10000 tokens, 1000 queued tokens)"),
    Case("local cluster down: a short prompt goes remote", PRFAAS, SCARCE, 20_000, 10_000,
         Route.PRFAAS, "remote-prefill-0", 0, 10_000, down=("local-prefill-0", "local-prefill-1"),
         blocks={"local-prefill-0": 8},
         reason="incremental 10000 (input 10000 - local prefix 0) <= t 20000 -> local; "
         "local cluster down -> remote " + est("remote-prefill-0", 0, 1.1, 0, 10_000)),
    Case("a down node's prefix neither counts nor travels", PRFAAS, ABUNDANT, 20_000, 30_000,
         Route.PRFAAS, "remote-prefill-0", 0, 30_000, down=("remote-prefill-1",),
         blocks={"remote-prefill-1": 15},
         reason="incremental 30000 (input 30000 - max(remote prefix 0, local prefix 0)) "
         "> t 20000 -> prfaas " + est("remote-prefill-0", 0, 3.1, 0, 30_000)),
    Case("every prefill node down: the request cannot be placed", PRFAAS, SCARCE, 20_000, 30_000,
         None, None, 0, 30_000, down=NODES[:4],
         reason="no prefill node is up (remote 0/2 up, local 0/2 up) -> cannot place request r1"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_route_decision(case: Case) -> None:
    decision = make_router(case).decide(request(case.input_len), make_loads(case), now_s=1.0)
    node = NodeId.parse(case.node) if case.node else None
    assert decision._replace(why=None) == RouteDecision(
        "r1", case.route, node, case.input_len, case.cached, case.input_len - case.cached,
        case.t, None, case.transfer, case.compared,
    )
    assert decision.reason == case.reason


def test_knobs_change_later_decisions() -> None:
    case = CASES[3]  # prfaas, t 19400, 30000 uncached tokens -> remote
    router, loads = make_router(case), make_loads(case)
    router.state.set_threshold(30_000)
    assert router.decide(request(30_000), loads).route is Route.LOCAL
    router.state.set_policy(RoutePolicy.ALL_REMOTE)
    assert router.decide(request(30_000), loads).route is Route.PRFAAS
    router.state.set_policy(RoutePolicy.LOCAL_ONLY)
    router.index.insert(NodeId.parse("local-prefill-1"), HASHES[:3], now_s=1.0)
    assert router.decide(request(30_000), loads).node == NodeId.parse("local-prefill-1")
    router.state.set_affinity(OFF)
    assert router.decide(request(30_000), loads).node == NodeId.parse("local-prefill-0")
    router.state.set_prefix_rule(PrefixRule.BANDWIDTH_ABUNDANT)
    assert router.config == RouterConfig(LOCAL_ONLY, 30_000, ABUNDANT, OFF)


def test_a_decision_with_time_keeps_the_chosen_prefix_cached() -> None:
    case = Case("", LOCAL_ONLY, SCARCE, 0, 2000, Route.LOCAL, None, 0, 0, "")
    router = make_router(case, capacity=2 * (100 + 10))  # two one-block prefixes fit
    lp0, lp1 = NodeId.parse("local-prefill-0"), NodeId.parse("local-prefill-1")
    router.index.insert(lp0, (1,), now_s=0.0)
    router.index.insert(lp1, (2,), now_s=1.0)
    spec = RequestSpec("r2", 2.0, 1000, 64, (1,))
    assert router.decide(spec, make_loads(case), now_s=2.0).node == lp0  # touches (1,) on lp0
    router.index.insert(lp1, (3,), now_s=3.0)  # evicts the least recent: (2,) on lp1
    assert router.index.lookup((1,)).on_node(lp0) == TOKENS
    assert router.index.lookup((2,)).hits == ()


def test_a_negative_threshold_is_refused() -> None:
    with pytest.raises(ValueError, match="threshold_tokens: -1"):
        RouterConfig(PRFAAS, -1, SCARCE, COST)
    router = make_router(CASES[0])
    with pytest.raises(ValueError, match="threshold_tokens"):
        router.state.set_threshold(-5)


def test_cost_weighs_queued_work_in_seconds_not_tokens() -> None:
    """Three short queued prefills pay the per-prefill cost three times: 3 x T(800) = 1.08 s beats
    one queued T(3000) = 0.8 s, though fewer tokens wait on local-prefill-0."""
    case = Case("", PRFAAS, SCARCE, 25_000, 30_000, Route.LOCAL, None, 0, 0, "",
                blocks={"local-prefill-0": 5, "local-prefill-1": 5})
    lp0, lp1 = NodeId.parse("local-prefill-0"), NodeId.parse("local-prefill-1")
    loads = [NodeLoad(lp0, 2400, 3, True, 3 * prefill_s(Cluster.LOCAL, 800)),
             NodeLoad(lp1, 3000, 1, True, prefill_s(Cluster.LOCAL, 3000)),
             NodeLoad(NodeId.parse("remote-prefill-0"), 0, 0)]
    decision = make_router(case).decide(request(30_000), loads)
    assert (decision.node, decision.cached_len) == (lp1, 5000)
    assert decision.reason.endswith(est("local-prefill-1", 0.8, 5.2, 5000, 30_000, 3000))
    case = Case("", PRFAAS, SCARCE, 25_000, 30_000, Route.LOCAL, None, 0, 0, "", affinity=OFF,
                blocks={"local-prefill-0": 5, "local-prefill-1": 5})
    assert make_router(case).decide(request(30_000), loads).node == lp1  # off: least work left, not tokens


def test_every_rule_spreads_unshared_prompts_by_load() -> None:
    """With no prefix cached anywhere each rule is the least loaded, worded as such."""
    for affinity in Affinity:
        case = Case("", LOCAL_ONLY, SCARCE, 0, 30_000, Route.LOCAL, None, 0, 0, "", affinity=affinity,
                    queued={"local-prefill-0": 4000})
        decision = make_router(case).decide(request(30_000), make_loads(case))
        assert decision.reason == f"policy local-only -> local (local-prefill-1 {IDLE})"


LOCAL3 = [NodeId.parse(f"local-prefill-{i}") for i in range(3)]


@pytest.mark.parametrize("affinity", list(Affinity))
def test_least_work_left_counts_only_what_remains_of_the_prompt_in_service(affinity: Affinity) -> None:
    """At t = 10 s, local-prefill-0's 20,000-token prompt (4.2 s) ends in 0.5 s and local-prefill-1's
    5,000-token one (1.2 s) has just started: the node holding more tokens has less work left."""
    case = Case("", LOCAL_ONLY, SCARCE, 0, 30_000, Route.LOCAL, None, 0, 0, "", affinity=affinity)
    lp0, lp1 = LOCAL3[:2]
    loads = [NodeLoad(lp0, 20_000, 1, True, 0.0, 10.5), NodeLoad(lp1, 5000, 1, True, 0.0, 11.2)]
    assert make_router(case).decide(request(30_000), loads, now_s=10.0).node == lp0
    loads[0] = NodeLoad(lp0, 23_000, 2, True, prefill_s(Cluster.LOCAL, 3000), 10.5)  # + a 0.8 s one waiting
    assert make_router(case).decide(request(30_000), loads, now_s=10.0).node == lp1
    case = dataclasses.replace(case, blocks={"local-prefill-0": 2, "local-prefill-1": 2})  # the prefix path
    assert make_router(case).decide(request(30_000), loads, now_s=10.0).node == lp1
    over = [NodeLoad(lp0, 20_000, 1, True, 0.0, 9.0), NodeLoad(lp1, 0, 0)]  # overran its estimate
    assert make_router(case).decide(request(30_000), over, now_s=10.0).node == lp1  # equal work: fewer held


@pytest.mark.parametrize("affinity", list(Affinity))
def test_ties_go_round_a_rotation_that_starts_at_the_seed(affinity: Affinity) -> None:
    """Three idle nodes take turns whatever the rule, from the seed's place: no node is favoured,
    and the same seed gives the same turns."""
    config = RouterConfig(LOCAL_ONLY, 0, SCARCE, affinity)
    idle = [NodeLoad(node, 0, 0) for node in LOCAL3]

    def turns(seed: int, hashes: tuple[int, ...]) -> list[int]:
        index = PrefixCacheIndex(TOKENS, 100, 10, {Cluster.REMOTE: 10**9, Cluster.LOCAL: 10**9})
        for node in LOCAL3:  # the same prefix everywhere: a hit that favours no node
            index.insert(node, hashes, now_s=0.0)
        router = Router(config, index, prefill_s=prefill_s, seed=seed)
        return [router.decide(RequestSpec(f"r{i}", 0.0, 3000, 8, hashes), idle, now_s=0.0).node.index
                for i in range(6)]

    for hashes in ((), (1, 2)):
        assert turns(0, hashes) == [0, 1, 2, 0, 1, 2]
        assert turns(7, hashes) == [1, 2, 0, 1, 2, 0] == turns(7, hashes)
