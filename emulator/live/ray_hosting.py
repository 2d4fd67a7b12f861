"""A live run's Ray side (issue 30): join the cluster at `ray.address` (or start a private local
Ray), place every worker on a node by resource before anything else starts, and leave Ray as it
was found at the end. The gateway and the MQTT broker stay on the driver's node; the workers reach
the gateway at the driver node's address. Shaping the link between real hosts is a later slice:
the topology stays on this host.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from emulator.control.types import Cluster
from emulator.live.launcher import WorkerPlan, plan_workers
from emulator.live.ray_placement import RayNode, place_on_nodes
from emulator.live.ray_workers import RayWorkerProcesses
from emulator.ray_cluster import RayUnavailable, check_cluster, signal_handlers_kept
from emulator.scenario import Scenario
from emulator.scenario.parts import RaySpec

log = logging.getLogger(__name__)
LOCAL_RAY_CPUS = 1  # a private Ray's actors take no CPU (num_cpus=0); its workers are processes of their own


def open_hosting(scenario: Scenario, n_p: int) -> RayHosting | None:
    """With a `ray:` section: Ray joined and every worker placed on a node; None without one."""
    return None if scenario.ray is None else RayHosting.open(scenario.ray, plan_workers(scenario, n_p))


def resources_of(spec: RaySpec) -> dict[Cluster, str]:
    return {Cluster.REMOTE: spec.remote_resource, Cluster.LOCAL: spec.local_resource}


def join_ray(spec: RaySpec, plans: Sequence[WorkerPlan]) -> bool:
    """Ray up for this run: joined at spec.address (checked first: one line, in seconds), or a
    private local Ray offering one unit of each cluster's resource per worker. True when this call
    started or joined it (the run shuts it down); False when the process already had Ray."""
    import ray

    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage report, and no notice about it
    with signal_handlers_kept():  # Ray's SIGTERM handler would outlive it; the run installs its own
        try:
            if spec.address == "local":
                counts = Counter(plan.cluster for plan in plans)
                wanted = {name: float(counts[c]) for c, name in resources_of(spec).items() if counts[c]}
                ray.init(address="local", num_cpus=LOCAL_RAY_CPUS, resources=wanted, include_dashboard=False,
                         logging_level=logging.WARNING, log_to_driver=False)
            else:
                check_cluster(spec.address)
                ray.init(address=spec.address, logging_level=logging.WARNING, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError, ray.exceptions.RayError) as err:
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise RayUnavailable(f"ray.address: cannot start or join Ray at {spec.address}: {first}; "
                                 "`ray status` there shows its state") from None
    return True


def cluster_nodes() -> list[RayNode]:
    """The cluster's nodes as Ray's GCS reports them now."""
    import ray

    return [RayNode(node["NodeID"], node["NodeManagerAddress"], dict(node.get("Resources") or {}),
                    bool(node.get("Alive"))) for node in ray.nodes()]


@dataclass(slots=True)
class RayHosting:
    """Where a run's workers live on Ray: each worker's node, the address workers reach the gateway
    on, and whether this run brought Ray up (and so takes it down)."""

    spec: RaySpec
    node_of: dict[str, RayNode]
    gateway_host: str
    owns_ray: bool
    workers: RayWorkerProcesses | None = None

    @classmethod
    def open(cls, spec: RaySpec, plans: Sequence[WorkerPlan]) -> RayHosting:
        """Join, then the preflight: a cluster that cannot hold every worker is refused (one line
        naming the resource) and Ray is left as it was found."""
        import ray

        owns_ray = join_ray(spec, plans)
        try:
            node_of = place_on_nodes(plans, cluster_nodes(), resources_of(spec), spec.address)
            gateway_host = ray.util.get_node_ip_address()
        except BaseException:
            if owns_ray:
                ray.shutdown()
            raise
        for name, node in node_of.items():
            log.info("ray: worker %s on %s", name, node.label)
        return cls(spec, node_of, gateway_host, owns_ray)

    def make_workers(self, plans: Sequence[WorkerPlan], *args: Any, **kwargs: Any) -> RayWorkerProcesses:
        """The launcher's interface over actors on the placed nodes (args as WorkerProcesses')."""
        self.workers = RayWorkerProcesses(*args, hosted=plans, node_of=self.node_of,
                                          resource_of_cluster=resources_of(self.spec),
                                          gateway_host=self.gateway_host, **kwargs)
        return self.workers

    def hosts(self, plans: Sequence[WorkerPlan]) -> list[str | None]:
        """Each planned worker's host as the Live page's node table shows it."""
        return [self.node_of[plan.spawn_name].label if plan.spawn_name in self.node_of else None for plan in plans]

    def note(self) -> str:
        where = Counter(node.label for node in self.node_of.values())
        return f"ray {self.spec.address}: " + ", ".join(f"{n} worker(s) on {label}" for label, n in where.items())

    def close(self) -> None:
        """End the workers' actors (their logs copied back first), then shut Ray down when this
        run started or joined it."""
        import ray

        try:
            if self.workers is not None:
                self.workers.close()
        finally:
            if self.owns_ray:
                ray.shutdown()

