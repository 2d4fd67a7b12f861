"""Which Ray node hosts each live worker: one unit of its cluster's custom resource per worker,
packed first-fit onto the alive nodes that offer it (issue 30). Pure: the nodes come in as values
(ray_hosting.py reads them from the cluster), so the preflight refuses a cluster that cannot hold
the run before anything starts, and unit tests need no Ray.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from emulator.control.types import Cluster
from emulator.errors import ScenarioError
from emulator.live.launcher import WorkerPlan

UNITS_PER_WORKER = 1.0


@dataclass(frozen=True, slots=True)
class RayNode:
    """One node of the cluster as Ray reports it: its id, address, total resources and liveness."""

    node_id: str
    ip: str
    resources: Mapping[str, float] = field(default_factory=dict)
    alive: bool = True

    @property
    def label(self) -> str:
        """What a record shows for a worker's host: the node's address and a short id."""
        return f"{self.ip} (node {self.node_id[:8]})"


def place_on_nodes(plans: Sequence[WorkerPlan], nodes: Sequence[RayNode], resource_of_cluster: Mapping[Cluster, str],
                   address: str = "auto") -> dict[str, RayNode]:
    """spawn_name -> the node that hosts it; each cluster's workers are packed onto the alive nodes
    offering its resource, in the nodes' order. ScenarioError, one line naming the resource, when no
    alive node offers it or its units are fewer than the workers that need it."""
    field_of = {Cluster.REMOTE: "ray.remote_resource", Cluster.LOCAL: "ray.local_resource"}
    placed: dict[str, RayNode] = {}
    for cluster in (Cluster.REMOTE, Cluster.LOCAL):
        wanted = [plan for plan in plans if plan.cluster is cluster]
        if not wanted:
            continue
        resource = resource_of_cluster[cluster]
        free = {node.node_id: node.resources.get(resource, 0.0) for node in nodes if node.alive}
        offering = [node for node in nodes if node.alive and free[node.node_id] >= UNITS_PER_WORKER]
        hint = f"`ray start --address {address} --resources '{{\"{resource}\": {len(wanted)}}}'`"
        if not offering:
            raise ScenarioError(f"{field_of[cluster]}: no node of the cluster at {address} offers {resource}; "
                                f"start one with {hint}")
        num_units = sum(int(free[node.node_id] // UNITS_PER_WORKER) for node in offering)
        if num_units < len(wanted):
            raise ScenarioError(f"{field_of[cluster]}: the {cluster.value} cluster's {len(wanted)} workers need "
                                f"{len(wanted)} units of {resource}, the cluster at {address} offers {num_units}; "
                                f"add a node with {hint} or lower clusters.{cluster.value}.instances")
        for plan in wanted:
            node = next(n for n in offering if free[n.node_id] >= UNITS_PER_WORKER)
            free[node.node_id] -= UNITS_PER_WORKER
            placed[plan.spawn_name] = node
    return placed
