"""The threshold router: local-only, all-remote or PrfaaS (incremental length over t goes remote)
under either of the paper's prefix rules, then a prefill node of that cluster by the affinity rule:
least estimated time to first token (`cost`), longest cached prefix, or least work left (`off`).
Ties between nodes go round a rotation that starts at the run's seed, so no node is favoured.

It decides and explains; it does not queue, run or fail requests (the engine does, with the reason).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from emulator.control.control_state import ControlState, RouterConfig
from emulator.control.prefix_cache import PrefixCacheIndex, PrefixLookup
from emulator.control.types import (
    Affinity,
    Cluster,
    NodeId,
    PrefixRule,
    RequestSpec,
    Role,
    Route,
    RoutePolicy,
)

# Enum members bound once: `Cluster.REMOTE` is a class attribute lookup (~80 ns in 3.11) on a path
# that runs per request.
_REMOTE, _LOCAL, _PREFILL = Cluster.REMOTE, Cluster.LOCAL, Role.PREFILL
_PRFAAS_ROUTE, _LOCAL_ROUTE = Route.PRFAAS, Route.LOCAL
_PRFAAS_POLICY, _LOCAL_ONLY, _ALL_REMOTE = RoutePolicy.PRFAAS, RoutePolicy.LOCAL_ONLY, RoutePolicy.ALL_REMOTE
_SCARCE, _ABUNDANT = PrefixRule.BANDWIDTH_SCARCE, PrefixRule.BANDWIDTH_ABUNDANT
_COST, _LONGEST = Affinity.COST, Affinity.LONGEST_PREFIX

PrefillEstimate = Callable[[Cluster, int], float]
"""Seconds one prefill node of a cluster takes for a number of uncached tokens (the profile's
T_prefill, as the plane builds it): pure, no I/O, called per candidate node on the `cost` rule."""


class NodeLoad(NamedTuple):
    """A node's queue as the engine sees it when a request arrives (a tuple: engines build one
    whenever a queue changes, and a frozen dataclass costs three times as much to build).

    `queued_tokens`/`queued_requests` count every prompt the node holds, the one in service too.
    Its work left at time `now` is `queued_s` (the profile's seconds of each prompt not started
    yet, at its own uncached length) plus what remains of the prompt in service,
    `max(busy_until_s - now, 0)`: with deterministic service, sending each prompt to the node with
    the least work left is one shared FCFS queue (M/D/c), issue 28."""

    node: NodeId
    queued_tokens: int
    queued_requests: int
    is_up: bool = True
    queued_s: float = 0.0
    busy_until_s: float = 0.0  # when the prompt in service ends by the profile (0: none in service)


@dataclass(frozen=True, slots=True)
class CacheTransfer:
    """Ship a cached prefix of `tokens` tokens between clusters before the prefill starts."""

    from_cluster: Cluster
    to_cluster: Cluster
    tokens: int


class RouteWhy(NamedTuple):
    """The facts a decision's reason is worded from: wording them costs more than deciding, so
    `RouteDecision.reason` does it only when someone reads it (the virtual engine mostly does not)."""

    config: RouterConfig  # the policy, rule, threshold and affinity the decision was made under
    local_prefix: int  # the longest cached prefix on an up node of each cluster
    remote_prefix: int
    down: Cluster | None = None  # the policy's cluster, when none of its prefill nodes was up
    own_len: int = 0  # tokens the chosen node holds itself
    node_queued_tokens: int = 0
    census: str = ""  # which nodes were up, when none was
    is_estimated: bool = False  # the `cost` rule chose, from these estimates for the chosen node:
    queue_s: float = 0.0
    prefill_s: float = 0.0


class RouteDecision(NamedTuple):
    """Where a request prefills and why. `route`/`node` are None when no prefill node is up.

    `cached_len` is the prefix the chosen node reuses (its own hit, or the transferred prefix) and
    `incremental_len = input_len - cached_len` the tokens it prefills. `compared_len` is what the
    policy compared with `threshold`; it differs from `incremental_len` under the bandwidth-scarce
    rule, or when the node chosen is not the one holding the cluster's longest prefix (affinity
    `off`, or `cost` when that node's queue outweighs what its prefix saves).
    A tuple, as NodeLoad: one is built per request.
    """

    request_id: str
    route: Route | None
    node: NodeId | None
    input_len: int
    cached_len: int
    incremental_len: int
    threshold: int
    why: RouteWhy
    cache_transfer: CacheTransfer | None = None
    compared_len: int = 0

    @property
    def reason(self) -> str:
        """The decision in words, e.g. `incremental 30000 (input 30000 - local prefix 0) > t 19400
        -> prfaas (remote-prefill-0 least loaded: holds 0 tokens, 0 queued tokens)`."""
        why = self.why
        if self.node is None:
            return f"no prefill node is up ({why.census}) -> cannot place request {self.request_id}"
        config, cluster = why.config, self.node.cluster
        policy, t = config.policy, self.threshold
        if policy is _LOCAL_ONLY:
            text = "policy local-only -> local"
        elif policy is _ALL_REMOTE:
            text = "policy all-remote -> prfaas"
        else:
            local, remote = why.local_prefix, why.remote_prefix
            if config.prefix_rule is _SCARCE:
                how = f"input {self.input_len} - local prefix {local}"
            else:
                how = f"input {self.input_len} - max(remote prefix {remote}, local prefix {local})"
            compared = self.compared_len
            verdict = "> t {} -> prfaas" if compared > t else "<= t {} -> local"
            text = f"incremental {compared} ({how}) {verdict.format(t)}"
        if why.down is not None:
            text += f"; {why.down._value_} cluster down -> {cluster._value_}"
        move = self.cache_transfer
        if move:
            text += f"; transfer {move.tokens} cached tokens {move.from_cluster._value_}->{move.to_cluster._value_}"
        if why.is_estimated:
            return (f"{text} ({self.node} least estimated TTFT: queue {why.queue_s:.2f} s + prefill "
                    f"{why.prefill_s:.2f} s; holds {why.own_len} of {self.input_len} tokens, "
                    f"{why.node_queued_tokens} queued tokens)")
        node_how = "longest prefix" if config.affinity is _LONGEST and why.own_len else "least loaded"
        return (f"{text} ({self.node} {node_how}: holds {why.own_len} tokens, "
                f"{why.node_queued_tokens} queued tokens)")


class Router:
    """Decides each request's route and prefill node from the prefix index and the node loads.

    Only up prefill nodes count, for placement and for cached prefixes alike (a down node's cache
    cannot be reused or shipped). A lookup here is a peek; with `now_s` the chosen node's hit is
    touched, so prefixes that keep being routed to stay cached. Its settings are the run's
    ControlState's (given, or a new one from `config`): the router only reads them. `prefill_s`
    prices a prefill for the `cost` rule (emulator.plane builds it from the scenario's profile).

    Ties between equally good nodes (idle ones, mostly) go to the first from a per-cluster turn
    onward, and the turn moves past each node chosen: a rotation, started at `seed` (the scenario's)
    so a run repeats exactly, with no preference for low node ids. `decide` without `now_s` reads
    every load at t = 0.
    """

    def __init__(self, config: RouterConfig, index: PrefixCacheIndex,
                 state: ControlState | None = None, *, prefill_s: PrefillEstimate, seed: int = 0) -> None:
        self.state = state if state is not None else ControlState(config)
        self.index = index
        self.prefill_s = prefill_s
        self.remote_turn = self.local_turn = seed  # where each cluster's rotation continues

    @property
    def config(self) -> RouterConfig:
        return self.state.router

    def decide(
        self, request: RequestSpec, loads: Sequence[NodeLoad], now_s: float | None = None
    ) -> RouteDecision:
        # Runs once per request: plain locals, no dicts keyed by enums (an Enum's hash is Python)
        remote, local = _up_prefill(loads)
        config = self.state.router  # read once: every phase below decides under the same settings
        threshold, input_len = config.threshold_tokens, request.input_len
        if not remote and not local:
            return RouteDecision(request.id, None, None, input_len, 0, input_len, threshold,
                                 RouteWhy(config, 0, 0, census=_census(loads)), compared_len=input_len)
        lookup = self.index.lookup(request.block_hashes)
        if lookup.hits:
            best_remote = _best_len(lookup, remote, input_len)
            best_local = _best_len(lookup, local, input_len)
        else:  # nothing cached for this prompt: every node holds min(0, input_len) tokens
            best_remote = best_local = min(0, input_len)
        cluster, compared_len = _target(config, input_len, best_local, best_remote)
        up = remote if cluster is _REMOTE else local
        down = None
        if not up:
            down, cluster = cluster, (_LOCAL if cluster is _REMOTE else _REMOTE)
            up = remote if cluster is _REMOTE else local
        transfer = _transfer(config, cluster, best_local, best_remote)
        shipped = transfer.tokens if transfer else 0
        queue_s = prefill_s = 0.0
        affinity, estimated = config.affinity, False
        now = 0.0 if now_s is None else now_s
        is_remote = cluster is _REMOTE
        turn = self.remote_turn if is_remote else self.local_turn
        if not lookup.hits:  # no node holds any of it: each rule reduces to the least work left
            # (`cost` too, its prefill term being equal on every node): no estimate on unshared prompts
            seat = _least_work(up, now, turn)
        elif affinity is _COST:
            seat, queue_s, prefill_s = _cheapest(self.prefill_s, cluster, up, lookup, input_len, shipped, now,
                                                 turn)
            estimated = True
        elif affinity is _LONGEST:
            seat = _longest_prefix(up, lookup, input_len, now, turn)
        else:
            seat = _least_work(up, now, turn)
        if is_remote:
            self.remote_turn = seat + 1
        else:
            self.local_turn = seat + 1
        load = up[seat]
        own = min(lookup.on_node(load.node), input_len)
        cached = max(own, shipped)
        if now_s is not None and own:
            self.index.touch(load.node, request.block_hashes, own // self.index.block_tokens, now_s)
        return RouteDecision(
            request.id, _PRFAAS_ROUTE if cluster is _REMOTE else _LOCAL_ROUTE, load.node, input_len,
            cached, input_len - cached, threshold,
            RouteWhy(config, best_local, best_remote, down, own, load.queued_tokens, "", estimated, queue_s,
                     prefill_s),
            transfer, compared_len,
        )


def _target(config: RouterConfig, input_len: int, local: int, remote: int) -> tuple[Cluster, int]:
    """The policy's cluster and the length it compared with t, given each cluster's longest
    prefix (RouteDecision.reason words the comparison)."""
    policy = config.policy
    if policy is _LOCAL_ONLY:
        return _LOCAL, input_len - local
    if policy is _ALL_REMOTE:
        return _REMOTE, input_len - remote
    if config.prefix_rule is _SCARCE:
        compared = input_len - local
    else:
        compared = input_len - max(local, remote)
    return (_REMOTE if compared > config.threshold_tokens else _LOCAL), compared


def _transfer(config: RouterConfig, cluster: Cluster, local: int, remote: int) -> CacheTransfer | None:
    """Under bandwidth-abundant PrfaaS, ship the other cluster's prefix when it is longer."""
    if config.policy is not _PRFAAS_POLICY or config.prefix_rule is not _ABUNDANT:
        return None
    if cluster is _REMOTE:
        return CacheTransfer(_LOCAL, _REMOTE, local) if local > remote else None
    return CacheTransfer(_REMOTE, _LOCAL, remote) if remote > local else None


def _work_left(load: NodeLoad, now_s: float) -> float:
    """Seconds of prefill a node owes before it can start another prompt (NodeLoad says how)."""
    rest = load.busy_until_s - now_s
    return load.queued_s + rest if rest > 0.0 else load.queued_s


def _cheapest(prefill_s: PrefillEstimate, cluster: Cluster, up: list[NodeLoad], lookup: PrefixLookup,
              input_len: int, shipped: int, now_s: float, turn: int) -> tuple[int, float, float]:
    """The seat in `up` of the node with the least estimated time to first token, with its two
    terms: its work left plus this prompt's prefill there, where only that node's own prefix (or
    the prefix shipped in under the bandwidth-abundant rule) is skipped. This is SGLang's
    cache-aware balancing and Dynamo's KV router (prefix overlap weighed against load) with both
    sides in seconds of the profile. Ties: fewer prompts held, then the rotation from `turn`."""
    num = len(up)
    best, best_total, best_held, best_queue, best_prefill = -1, 0.0, 0, 0.0, 0.0
    for i in range(num):
        seat = (turn + i) % num
        load = up[seat]
        cached = lookup.on_node(load.node)
        if shipped > cached:
            cached = shipped
        if cached > input_len:
            cached = input_len
        queue = _work_left(load, now_s)
        prefill = prefill_s(cluster, input_len - cached)
        total, held = queue + prefill, load.queued_requests
        if best < 0 or total < best_total or (total == best_total and held < best_held):
            best, best_total, best_held, best_queue, best_prefill = seat, total, held, queue, prefill
    return best, best_queue, best_prefill


def _longest_prefix(up: list[NodeLoad], lookup: PrefixLookup, input_len: int, now_s: float, turn: int) -> int:
    """The seat of the longest own prefix (ties: least work left, fewer prompts held, then the
    rotation from `turn`)."""
    num = len(up)
    keys = [(-min(lookup.on_node(load.node), input_len), _work_left(load, now_s), load.queued_requests,
             (seat - turn) % num) for seat, load in enumerate(up)]
    return min(range(num), key=keys.__getitem__)


def _up_prefill(loads: Sequence[NodeLoad]) -> tuple[list[NodeLoad], list[NodeLoad]]:
    """The up prefill nodes of the remote and of the local cluster, in the order of `loads`."""
    remote: list[NodeLoad] = []
    local: list[NodeLoad] = []
    for load in loads:
        node = load.node
        if load.is_up and node.role is _PREFILL:
            if node.cluster is _REMOTE:
                remote.append(load)
            else:
                local.append(load)
    return remote, local


def _least_work(up: list[NodeLoad], now_s: float, turn: int) -> int:
    """The seat in `up` of the node with the least work left (ties: fewer prompts held, then the
    first from `turn` on). Floats and ints only, no key tuples: it runs per request; a tie (idle
    nodes, mostly) costs a second pass."""
    best, best_work, best_held, is_tied = -1, 0.0, 0, False
    for seat in range(len(up)):
        load = up[seat]
        rest = load.busy_until_s - now_s
        work = load.queued_s + rest if rest > 0.0 else load.queued_s
        held = load.queued_requests
        if best < 0 or work < best_work or (work == best_work and held < best_held):
            best, best_work, best_held, is_tied = seat, work, held, False
        elif work == best_work and held == best_held:
            is_tied = True
    if is_tied:
        num = len(up)
        for i in range(num):
            seat = (turn + i) % num
            load = up[seat]
            rest = load.busy_until_s - now_s
            if (load.queued_s + rest if rest > 0.0 else load.queued_s) == best_work \
                    and load.queued_requests == best_held:
                return seat
    return best


def _best_len(lookup: PrefixLookup, up: list[NodeLoad], input_len: int) -> int:
    """The longest prefix among a cluster's up prefill nodes, capped at the prompt length."""
    return min(max((lookup.on_node(n.node) for n in up), default=0), input_len)


def _census(loads: Sequence[NodeLoad]) -> str:
    parts = []
    for cluster in Cluster:
        nodes = [n for n in loads if n.node.role is Role.PREFILL and n.node.cluster is cluster]
        parts.append(f"{cluster.value} {sum(n.is_up for n in nodes)}/{len(nodes)} up")
    return ", ".join(parts)
