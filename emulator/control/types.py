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


class RoutePolicy(StrEnum):
    PRFAAS = "prfaas"  # incremental length over a threshold goes remote
    LOCAL_ONLY = "local-only"  # the homogeneous PD baseline
    ALL_REMOTE = "all-remote"  # the naive heterogeneous baseline


class PrefixRule(StrEnum):
    """The paper's two ways of counting a prefix hit when both clusters hold part of a prompt."""

    BANDWIDTH_SCARCE = "bandwidth-scarce"
    BANDWIDTH_ABUNDANT = "bandwidth-abundant"


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
