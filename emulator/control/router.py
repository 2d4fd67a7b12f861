"""The threshold router: local-only, all-remote or PrfaaS (incremental length over t goes remote)
under either of the paper's prefix rules, then a prefill node by cache affinity and load.

It decides and explains; it does not queue, run or fail requests (the engine does, with the reason).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from emulator.control.prefix_cache import PrefixCacheIndex, PrefixLookup
from emulator.control.types import (
    Cluster,
    NodeId,
    PrefixRule,
    RequestSpec,
    Role,
    Route,
    RoutePolicy,
)

_ROUTE_OF = {Cluster.REMOTE: Route.PRFAAS, Cluster.LOCAL: Route.LOCAL}
_OTHER = {Cluster.REMOTE: Cluster.LOCAL, Cluster.LOCAL: Cluster.REMOTE}


@dataclass(frozen=True, slots=True)
class RouterConfig:
    policy: RoutePolicy
    threshold_tokens: int
    prefix_rule: PrefixRule
    cache_affinity: bool

    def __post_init__(self) -> None:
        if self.threshold_tokens < 0:
            raise ValueError(
                f"router.threshold_tokens: {self.threshold_tokens} is negative; "
                "use 0 or more tokens"
            )


@dataclass(frozen=True, slots=True)
class NodeLoad:
    """A node's queue as the engine sees it when a request arrives."""

    node: NodeId
    queued_tokens: int
    queued_requests: int
    is_up: bool = True


@dataclass(frozen=True, slots=True)
class CacheTransfer:
    """Ship a cached prefix of `tokens` tokens between clusters before the prefill starts."""

    from_cluster: Cluster
    to_cluster: Cluster
    tokens: int


@dataclass(frozen=True, slots=True)
class RouteDecision:
    """Where a request prefills and why. `route`/`node` are None when no prefill node is up.

    `cached_len` is the prefix the chosen node reuses (its own hit, or the transferred prefix) and
    `incremental_len = input_len - cached_len` the tokens it prefills. `compared_len` is what the
    policy compared with `threshold`; it differs from `incremental_len` under the bandwidth-scarce
    rule, or when cache affinity is off and the cluster's longest prefix sits on another node.
    """

    request_id: str
    route: Route | None
    node: NodeId | None
    input_len: int
    cached_len: int
    incremental_len: int
    threshold: int
    reason: str
    cache_transfer: CacheTransfer | None = None
    compared_len: int = 0


@dataclass(frozen=True, slots=True)
class _Target:
    """The policy's choice before a node is picked."""

    cluster: Cluster
    compared_len: int
    reason: str


class Router:
    """Decides each request's route and prefill node from the prefix index and the node loads.

    Only up prefill nodes count, for placement and for cached prefixes alike (a down node's cache
    cannot be reused or shipped). A lookup here is a peek; with `now_s` the chosen node's hit is
    touched, so prefixes that keep being routed to stay cached.
    """

    def __init__(self, config: RouterConfig, index: PrefixCacheIndex) -> None:
        self.config = config
        self.index = index

    def set_threshold(self, threshold_tokens: int) -> None:
        self.config = replace(self.config, threshold_tokens=threshold_tokens)

    def set_policy(self, policy: RoutePolicy) -> None:
        self.config = replace(self.config, policy=policy)

    def set_prefix_rule(self, prefix_rule: PrefixRule) -> None:
        self.config = replace(self.config, prefix_rule=prefix_rule)

    def set_cache_affinity(self, cache_affinity: bool) -> None:
        self.config = replace(self.config, cache_affinity=cache_affinity)

    def decide(
        self, request: RequestSpec, loads: Sequence[NodeLoad], now_s: float | None = None
    ) -> RouteDecision:
        up = {cluster: _up_prefill(loads, cluster) for cluster in Cluster}
        threshold = self.config.threshold_tokens
        if not up[Cluster.REMOTE] and not up[Cluster.LOCAL]:
            return RouteDecision(
                request.id, None, None, request.input_len, 0, request.input_len, threshold,
                f"no prefill node is up ({_census(loads)}) -> cannot place request {request.id}",
                compared_len=request.input_len,
            )
        lookup = self.index.lookup(request.block_hashes)
        best = {c: _best_len(lookup, up[c], request.input_len) for c in Cluster}
        target = self._target(request.input_len, best)
        cluster, reason = target.cluster, target.reason
        if not up[cluster]:
            cluster = _OTHER[cluster]
            reason += f"; {_OTHER[cluster].value} cluster down -> {cluster.value}"
        transfer = self._transfer(cluster, best)
        load = self._pick_node(up[cluster], lookup, request.input_len)
        own = min(lookup.on_node(load.node), request.input_len)
        cached = max(own, transfer.tokens if transfer else 0)
        if transfer:
            reason += (
                f"; transfer {transfer.tokens} cached tokens "
                f"{transfer.from_cluster.value}->{transfer.to_cluster.value}"
            )
        reason += f" ({self._why_node(load, own)})"
        if now_s is not None and own:
            self.index.touch(load.node, request.block_hashes, own // self.index.block_tokens, now_s)
        return RouteDecision(
            request.id, _ROUTE_OF[cluster], load.node, request.input_len, cached,
            request.input_len - cached, threshold, reason, transfer, target.compared_len,
        )

    def _target(self, input_len: int, best: dict[Cluster, int]) -> _Target:
        """The policy's cluster, the length it compared with t, and the words for both."""
        policy, t = self.config.policy, self.config.threshold_tokens
        local, remote = best[Cluster.LOCAL], best[Cluster.REMOTE]
        if policy is RoutePolicy.LOCAL_ONLY:
            return _Target(Cluster.LOCAL, input_len - local, "policy local-only -> local")
        if policy is RoutePolicy.ALL_REMOTE:
            return _Target(Cluster.REMOTE, input_len - remote, "policy all-remote -> prfaas")
        if self.config.prefix_rule is PrefixRule.BANDWIDTH_SCARCE:
            compared = input_len - local
            how = f"input {input_len} - local prefix {local}"
        else:
            compared = input_len - max(local, remote)
            how = f"input {input_len} - max(remote prefix {remote}, local prefix {local})"
        if compared > t:
            cluster, words = Cluster.REMOTE, f"> t {t} -> prfaas"
        else:
            cluster, words = Cluster.LOCAL, f"<= t {t} -> local"
        return _Target(cluster, compared, f"incremental {compared} ({how}) {words}")

    def _transfer(self, cluster: Cluster, best: dict[Cluster, int]) -> CacheTransfer | None:
        """Under bandwidth-abundant PrfaaS, ship the other cluster's prefix when it is longer."""
        if (
            self.config.policy is not RoutePolicy.PRFAAS
            or self.config.prefix_rule is not PrefixRule.BANDWIDTH_ABUNDANT
        ):
            return None
        other = _OTHER[cluster]
        if best[other] <= best[cluster]:
            return None
        return CacheTransfer(other, cluster, best[other])

    def _pick_node(self, up: list[NodeLoad], lookup: PrefixLookup, input_len: int) -> NodeLoad:
        """With affinity the longest own prefix wins (ties: fewest queued tokens), else the least
        loaded; the lowest node id breaks any remaining tie so decisions are reproducible."""
        if self.config.cache_affinity:
            return min(
                up,
                key=lambda n: (
                    -min(lookup.on_node(n.node), input_len),
                    n.queued_tokens,
                    n.queued_requests,
                    n.node,
                ),
            )
        return min(up, key=lambda n: (n.queued_tokens, n.queued_requests, n.node))

    def _why_node(self, load: NodeLoad, own: int) -> str:
        how = "longest prefix" if self.config.cache_affinity and own else "least loaded"
        return f"{load.node} {how}: holds {own} tokens, {load.queued_tokens} queued tokens"


def _up_prefill(loads: Sequence[NodeLoad], cluster: Cluster) -> list[NodeLoad]:
    return [
        n for n in loads if n.is_up and n.node.role is Role.PREFILL and n.node.cluster is cluster
    ]


def _best_len(lookup: PrefixLookup, up: list[NodeLoad], input_len: int) -> int:
    """The longest prefix among a cluster's up prefill nodes, capped at the prompt length."""
    return min(max((lookup.on_node(n.node) for n in up), default=0), input_len)


def _census(loads: Sequence[NodeLoad]) -> str:
    parts = []
    for cluster in Cluster:
        nodes = [n for n in loads if n.node.role is Role.PREFILL and n.node.cluster is cluster]
        parts.append(f"{cluster.value} {sum(n.is_up for n in nodes)}/{len(nodes)} up")
    return ", ".join(parts)
