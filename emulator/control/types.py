"""The control plane's shared vocabulary: routes, policies, clusters, roles, node ids and requests.

Plain enums and frozen values only; the scenario schema converts its pydantic fields into these once.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Route(StrEnum):
    """Where a request's prefill runs: the remote PrfaaS cluster or the local PD cluster."""

    PRFAAS = "prfaas"
    LOCAL = "local"


class RequestStatus(StrEnum):
    """How a request ended; every request ends in exactly one of these."""

    COMPLETED = "completed"
    FAILED = "failed"


class FailReason(StrEnum):
    """Why a request failed: one short tag, the same on every engine, so runs line up by reason.
    The engine's own words (node names, the error) go in the record's `fail_detail`."""

    NO_PREFILL_NODE = "no_prefill_node"  # the router found no prefill node to take it
    NO_DECODE_NODE = "no_decode_node"  # no decode node was up to take its KV
    WORKER_LOST = "worker_lost"  # a node holding it died, closed its connection or shut down
    PREFILL_FAILED = "prefill_failed"  # the prefill worker reported an error
    TRANSFER_FAILED = "transfer_failed"  # its KV did not arrive (connection, receiver refusal)
    LINK_DOWN = "link_down"  # every connection over the link lost, reconnects exhausted
    DEADLINE = "deadline"  # its KV was not delivered within the transfer deadline
    DECODE_FAILED = "decode_failed"  # the decode worker reported an error
    REFUSED = "refused"  # a command the gateway or a worker found invalid
    UNFINISHED = "unfinished"  # still open when the run reached its end (bounded or past its drain)
    INTERRUPTED = "interrupted"  # the operator stopped the run (a signal, the dashboard's Stop)
    RUN_FAILED = "run_failed"  # the run itself failed; open requests ended with it


class RoutePolicy(StrEnum):
    PRFAAS = "prfaas"  # incremental length over a threshold goes remote
    LOCAL_ONLY = "local-only"  # the homogeneous PD baseline
    ALL_REMOTE = "all-remote"  # the naive heterogeneous baseline


class PrefixRule(StrEnum):
    """The paper's two ways of counting a prefix hit when both clusters hold part of a prompt."""

    BANDWIDTH_SCARCE = "bandwidth-scarce"
    BANDWIDTH_ABUNDANT = "bandwidth-abundant"


class Affinity(StrEnum):
    """How the router picks a prefill node inside the cluster its policy chose."""

    COST = "cost"  # least estimated TTFT: queued work plus the prefill of what the node lacks
    LONGEST_PREFIX = "longest-prefix"  # the longest cached prefix, ties by load (hotspots on shared prefixes)
    OFF = "off"  # least loaded; a prefix still counts for the route, not for the node


class Cluster(StrEnum):
    REMOTE = "remote"  # the PrfaaS prefill cluster
    LOCAL = "local"  # the PD cluster: local prefill and decode


class Role(StrEnum):
    PREFILL = "prefill"
    DECODE = "decode"


@dataclass(frozen=True, slots=True, order=True)
class NodeId:
    """One instance, written `remote-prefill-0`, `local-decode-3` in scenarios and on the dashboard."""

    cluster: Cluster
    role: Role
    index: int

    def __str__(self) -> str:
        # _value_ rather than .value: the Enum property costs more than the formatting here
        return f"{self.cluster._value_}-{self.role._value_}-{self.index}"

    @classmethod
    def parse(cls, text: str) -> NodeId:
        """`local-prefill-2` -> NodeId; ValueError names the accepted form."""
        parts = text.split("-")
        try:
            cluster, role, index = Cluster(parts[0]), Role(parts[1]), int(parts[2])
            if len(parts) != 3 or index < 0 or (cluster is Cluster.REMOTE and role is Role.DECODE):
                raise ValueError
        except (ValueError, IndexError):
            raise ValueError(
                f"node {text!r}: use remote-prefill-<i>, local-prefill-<i> or local-decode-<i>"
            ) from None
        return cls(cluster, role, index)


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """A request as a workload produces it. `block_hashes` are chained hashes of the prompt's full
    blocks: equal hashes at position i mean equal prompts through block i."""

    id: str
    arrival_s: float
    input_len: int
    output_len: int
    block_hashes: tuple[int, ...] = ()
