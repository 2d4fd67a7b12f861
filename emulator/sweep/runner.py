"""Runs a sweep's points as Ray tasks: a local Ray started here (no dashboard, quiet, `workers`
CPUs), or an existing cluster joined by address. Results are collected as they finish and written
in small batches, so Ctrl-C (or a lost session) keeps every finished point; points already in the
output directory are not run again. Ray is shut down whenever this module started or joined it.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emulator.limits import MAX_SWEEP_WORKERS
from emulator.ray_cluster import RayUnavailable, check_cluster, signal_handlers_kept
from emulator.sweep.point import FAILED, run_point
from emulator.sweep.points import Point, expand
from emulator.sweep.spec import Sweep, SweepSpec
from emulator.sweep.store import SweepStore

log = logging.getLogger(__name__)
FLUSH_EVERY_S = 2.0  # write sweep.parquet at least this often while points finish
FLUSH_EVERY_ROWS = 50
IN_FLIGHT_PER_CPU = 2  # tasks submitted ahead of the free CPUs: enough to keep them busy, few to cancel

Progress = Callable[[int, int, int], None]  # (points done, points total, points failed)


@dataclass(frozen=True, slots=True)
class SweepResult:
    """What one invocation did: points in the sweep, found done, run now (of them failed)."""

    num_points: int
    num_before: int
    num_ran: int
    num_failed: int
    doc: dict[str, Any]


def run_sweep(sweep: Sweep, out_dir: str | Path, *, address: str | None = None, workers: int | None = None,
              progress: Progress | None = None) -> SweepResult:
    """Run every point of `sweep` not yet in `out_dir`; KeyboardInterrupt propagates after the
    finished points are written and the pending tasks cancelled."""
    check_ray_options(address, workers)
    points = expand(sweep.spec)
    store = SweepStore(out_dir, sweep, points)
    done = store.done_ids
    todo = [p for p in points if p.point_id not in done]
    started, wall_start = time.time(), time.perf_counter()
    counts = {"ran": 0, "failed": 0}
    status = "interrupted"
    cluster: dict[str, Any] = {"mode": None, "address": address, "num_cpus": None, "num_nodes": None}

    def save(status: str) -> dict[str, Any]:
        store.flush()
        return store.write_doc({
            "status": status, "started_at": started, "wall_s": time.perf_counter() - wall_start, "ray": cluster,
            "counts": {"points": len(points), "done_before": store.num_before, "ran": counts["ran"],
                       "failed": counts["failed"], "left": len(points) - len(store.rows)}})

    try:
        if todo:
            with ray_session(address, workers) as cluster, Interrupt() as interrupt:
                in_flight: dict[Any, Point] = {}
                last_flush = time.perf_counter()
                try:
                    for row in _results(sweep, todo, cluster["num_cpus"], in_flight, interrupt):
                        store.add(row)
                        counts["ran"] += 1
                        counts["failed"] += row["status"] == FAILED
                        if progress:
                            progress(store.num_before + counts["ran"], len(points), counts["failed"])
                        if store.num_unflushed >= FLUSH_EVERY_ROWS or time.perf_counter() - last_flush >= FLUSH_EVERY_S:
                            store.flush()
                            last_flush = time.perf_counter()
                except BaseException:
                    save("interrupted")  # the finished points first: cancelling is Ray's, and may fail
                    if cluster["mode"] != "local":  # a local Ray's shutdown stops its own tasks
                        _cancel(in_flight)
                    raise
        status = "complete"
    finally:
        doc = save(status)
        if store.rows:
            _write_report(store.out_dir, sweep, doc)
    return SweepResult(len(points), store.num_before, counts["ran"], counts["failed"], doc)


def _write_report(out_dir: Path, sweep: Sweep, doc: dict[str, Any]) -> None:
    """report.html from what is on disk; a report that cannot be drawn is logged, never fatal: the
    rows are the sweep's product."""
    from emulator.sweep.report import write_report  # plotly: only once a sweep has rows to draw
    from emulator.sweep.store import read_results

    try:
        write_report(out_dir, sweep, read_results(out_dir)[0], doc)
    except Exception as err:
        log.warning("sweep %s: report.html not written: %s", sweep.spec.name, err)


class Interrupt:
    """Ctrl-C while the points run, noted by the handler and raised as KeyboardInterrupt by the
    results loop between two waits (at most a second later). Raised from the handler itself, it
    lands wherever the main thread is, Ray's own code included, which may swallow it: CI once saw a
    sweep run to its end after its SIGINT and exit 0. Installed after Ray started (ray.init sets
    its own handlers), main thread only; the previous handler comes back on exit."""

    def __init__(self) -> None:
        self.came = False
        self._previous: Any = None

    def check(self) -> None:
        if self.came:
            raise KeyboardInterrupt

    def __enter__(self) -> Interrupt:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._note)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)

    def _note(self, signum: int, frame: object) -> None:
        self.came = True


def _results(sweep: Sweep, todo: list[Point], num_cpus: int, in_flight: dict[Any, Point],
             interrupt: Interrupt) -> Iterator[dict[str, Any]]:
    """Each point's row as its task finishes, at most IN_FLIGHT_PER_CPU tasks per CPU in flight
    (kept in `in_flight`, for the caller to cancel). A task that dies (its worker lost) is a failed row."""
    import ray

    remote = ray.remote(num_cpus=1, max_retries=1)(_point_task)
    base, metrics = str(sweep.base_path), list(sweep.spec.metrics)
    queue = list(reversed(todo))
    limit = max(1, num_cpus * IN_FLIGHT_PER_CPU)
    while queue or in_flight:
        interrupt.check()
        while queue and len(in_flight) < limit:
            point = queue.pop()
            in_flight[remote.remote(base, sweep.spec, point)] = point
        ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=1.0)
        interrupt.check()
        for ref in ready:
            point = in_flight.pop(ref)
            try:
                yield ray.get(ref)
            except ray.exceptions.RayError as err:
                yield _lost_row(point, metrics, err)


def _cancel(in_flight: dict[Any, Point]) -> None:
    """Cancel the pending tasks on a cluster that outlives this sweep. Not forced: Ray 2.60's
    driver aborted ("Tried to complete task that was not pending") when a forced cancel met a
    task finishing at that moment."""
    import ray

    for ref in in_flight:
        try:
            ray.cancel(ref)
        except Exception as err:  # the sweep is ending anyway; its rows are saved
            log.warning("sweep: cancelling a pending task failed: %s", err)


def _point_task(base_path: str, spec: SweepSpec, point: Point) -> dict[str, Any]:
    """What a Ray task runs: the point, and the Ray node that ran it."""
    import ray

    row = run_point(base_path, spec, point)
    row["node_id"] = ray.get_runtime_context().get_node_id()
    return row


def _lost_row(point: Point, metrics: list[str], err: Exception) -> dict[str, Any]:
    from emulator.sweep.point import one_line

    first = one_line(err).split("; ")[0]
    return {"point_id": point.point_id, **dict(point.values), "seed": point.seed, "engine": point.engine,
            **{m: None for m in metrics}, "status": FAILED, "reason": f"task lost: {first}",
            "wall_s": None, "node_id": None}


def check_ray_options(address: str | None, workers: int | None) -> None:
    if workers is not None and not 1 <= workers <= MAX_SWEEP_WORKERS:
        raise RayUnavailable(f"--workers {workers}: use 1 to {MAX_SWEEP_WORKERS}")
    if workers is not None and address:
        raise RayUnavailable(f"--workers {workers}: sizes a local Ray; a cluster (--ray) runs on its own CPUs, "
                             "drop --workers")


@contextmanager
def ray_session(address: str | None, workers: int | None) -> Iterator[dict[str, Any]]:
    """Ray for the duration of a sweep: joined at `address`, or started here with `workers` CPUs
    (default: every core). Yields sweep.json's `ray`: {mode (local, joined or already-initialised),
    address, num_cpus, num_nodes}; shuts Ray down (or disconnects) afterwards unless it was already
    initialised in this process (a test's shared Ray). The process's signal handlers are left as
    they were found."""
    import ray

    check_ray_options(address, workers)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage report, and no notice about it
    was_up = ray.is_initialized()
    with signal_handlers_kept():
        if not was_up:
            try:
                if address:
                    check_cluster(address)  # seconds, and the cause in one line; ray.init retries for 20 s
                    ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
                else:
                    # address="local": always a new Ray of our own; without it ray.init joins whatever
                    # cluster this machine last started (another sweep's, a test's) and refuses num_cpus
                    ray.init(address="local", num_cpus=workers or os.cpu_count() or 1, include_dashboard=False,
                             logging_level=logging.WARNING, log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError, ray.exceptions.RayError) as err:
                where = f"the Ray cluster at {address}" if address else "a local Ray"
                fix = ("`ray status` there shows its state" if address
                       else "Ray's logs under /tmp/ray/session_latest/logs say why")
                raise RayUnavailable(f"cannot start or join {where}: "
                                     f"{str(err).splitlines()[0] if str(err) else err}; {fix}") from None
        try:
            mode = "already-initialised" if was_up else "joined" if address else "local"
            num_nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
            yield {"mode": mode, "address": address, "num_cpus": int(ray.cluster_resources().get("CPU", 1)),
                   "num_nodes": num_nodes}
        finally:
            if not was_up:
                ray.shutdown()
