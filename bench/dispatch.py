"""How well the router spreads prefills over a cluster's nodes (issue 28, Dispatch), before and after
least-work-left dispatch with fair ties, side by side in one run:

- M/D/3: three local prefill instances, fixed 4,000-token prompts, Poisson arrivals at load 0.5,
  0.7 and 0.85. The virtual engine's mean prefill queue wait against one shared FCFS queue
  simulated on the same arrivals (with deterministic service, least work left is that queue).
  Target: within 5 % at each load (`--check`).
- The Azure code trace (shared/traces, read in place) on the paper's case-study clusters, scheduler
  off: the busiest local prefill node's count of local prefills over its fair share (1.0 is even).

"Before" is the router of another revision (`--before`, by default the last commit before the
change), checked out into a temporary git worktree that is removed at the end; each revision runs
in its own child process (interpreted, so no build is needed). The figures are simulated, so a busy
machine changes only how long the bench takes. Writes bench/results/dispatch.json.

    python bench/dispatch.py [--quick] [--check] [--before REV]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from revisions import BenchError, detached_worktree, git, resolve_rev

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "dispatch.json"
MEASURE_ONLY = "--measure-only"
BEFORE = "301ea726c487"  # the commit before least-work-left dispatch (mean queued length, lowest id on ties)
LOADS = (0.5, 0.7, 0.85)
SERVERS = 3
TARGET_REL = 0.05
AZURE = "AzureLLMInferenceTrace_code.csv"


# ---- the child: one revision's engine on the given scenario documents ----

def measure_only(tree: Path, base_dir: Path) -> None:
    """Read [{"name", "doc"}] on stdin; print, per name, each request's (arrival_s, queue_s, route,
    prefill_node), simulated by `tree`'s engine (first on the path, before anything imports it)."""
    sys.path.insert(0, str(tree))
    from emulator.scenario import parse_scenario
    from emulator.virtual.engine import simulate

    out = {}
    for item in json.load(sys.stdin):
        records = simulate(parse_scenario(item["doc"], base_dir)).records
        out[item["name"]] = [(r.arrival_s, r.queue_s, r.route, r.prefill_node) for r in records]
    json.dump(out, sys.stdout)


def run_tree(tree: Path, docs: list[dict[str, Any]], shared: Path) -> dict[str, list[list[Any]]]:
    from emulator.paths import Env

    env = {**os.environ, "PYTHONPATH": str(tree), Env.ACCEL.value: "0", Env.SHARED_DIR.value: str(shared)}
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), MEASURE_ONLY, str(tree), str(ROOT)],
                          input=json.dumps(docs), capture_output=True, text=True, env=env, cwd=tree)
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise BenchError(f"the engine of {tree} failed: {last}")
    return json.loads(done.stdout)


# ---- the parent: scenarios, trees, figures ----

def scenario_docs(quick: bool, shared: Path) -> tuple[list[dict[str, Any]], float]:
    """The M/D/3 documents and the Azure one, and T_prefill of the M/D/3 prompt."""
    import yaml

    from tests.emulator.virtual.mdc_reference import SERVICE_S, mdc_doc

    docs = [{"name": f"md3-{load}", "doc": mdc_doc(load, num_requests=1000 if quick else 6000)} for load in LOADS]
    azure = yaml.safe_load((ROOT / "scenarios" / "paper-case-study.yaml").read_text())
    azure.update(name="azure-code-dispatch", duration_s=3600,
                 scheduler={"short_term": {"enabled": False}, "long_term": {"enabled": False}},
                 workload={"trace": {"format": "azure", "path": str(shared / "traces" / AZURE),
                                     **({"max_requests": 2000} if quick else {})}})
    docs.append({"name": "azure", "doc": azure})
    return docs, SERVICE_S


def figures(runs: dict[str, list[list[Any]]], service_s: float) -> dict[str, Any]:
    from tests.emulator.virtual.mdc_reference import shared_queue_waits

    out: dict[str, Any] = {}
    for load in LOADS:
        rows = runs[f"md3-{load}"]
        engine = sum(row[1] for row in rows) / len(rows)
        reference = shared_queue_waits(sorted(row[0] for row in rows), service_s, SERVERS)
        out[f"md3-{load}"] = {"requests": len(rows), "engine_wait_s": engine, "reference_wait_s": reference,
                              "ratio": engine / reference}
    local = Counter(row[3] for row in runs["azure"] if row[2] == "local")
    fair = sum(local.values()) / len(local)
    out["azure"] = {"requests": len(runs["azure"]), "local_prefills": dict(sorted(local.items())),
                    "busiest_over_fair": max(local.values()) / fair}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 requests per load, 2,000 of the trace")
    parser.add_argument("--check", action="store_true", help=f"exit 1 unless every M/D/3 wait is within "
                                                             f"{TARGET_REL:.0%} of the shared queue's")
    parser.add_argument("--before", default=BEFORE, help=f"the revision to compare with (default {BEFORE})")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from emulator.paths import Env, shared_dir

    shared = shared_dir().resolve()
    if not (shared / "traces" / AZURE).is_file():
        raise BenchError(f"{shared / 'traces' / AZURE} is missing; set {Env.SHARED_DIR.value} to the shared folder")
    docs, service_s = scenario_docs(args.quick, shared)
    started = time.perf_counter()
    after = figures(run_tree(ROOT, docs, shared), service_s)
    with detached_worktree(resolve_rev(args.before, "--before"), "prfaas-dispatch-") as tree:
        before = figures(run_tree(tree, docs, shared), service_s)
    result = {
        "bench": "dispatch",
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
                    "loadavg_1m_at_start": os.getloadavg()[0]},
        "git_sha": git("rev-parse", "HEAD"),
        "before_rev": git("rev-parse", args.before),
        "config": {"loads": LOADS, "servers": SERVERS, "service_s": service_s, "quick": args.quick,
                   "trace": f"shared/traces/{AZURE}", "target_rel": TARGET_REL},
        "wall_s": time.perf_counter() - started, "before": before, "after": after,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{'figure':<28}{'before':>10}{'after':>10}{'reference':>11}")
    for load in LOADS:
        b, a = before[f"md3-{load}"], after[f"md3-{load}"]
        print(f"{f'M/D/3 wait @ {load} (s)':<28}{b['engine_wait_s']:>10.4f}{a['engine_wait_s']:>10.4f}"
              f"{a['reference_wait_s']:>11.4f}")
        print(f"{'  / shared queue':<28}{b['ratio']:>10.3f}{a['ratio']:>10.3f}{1.0:>11.3f}")
    print(f"{'Azure busiest/fair local':<28}{before['azure']['busiest_over_fair']:>10.3f}"
          f"{after['azure']['busiest_over_fair']:>10.3f}{1.0:>11.3f}")
    missed = [load for load in LOADS if abs(after[f"md3-{load}"]["ratio"] - 1) > TARGET_REL]
    if missed:
        print(f"missed: M/D/3 wait more than {TARGET_REL:.0%} off the shared queue at load {missed}")
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    if MEASURE_ONLY in sys.argv:
        at = sys.argv.index(MEASURE_ONLY)
        measure_only(Path(sys.argv[at + 1]), Path(sys.argv[at + 2]))
        sys.exit(0)
    try:
        sys.exit(main())
    except BenchError as err:
        print(f"dispatch: {err}", file=sys.stderr)
        sys.exit(2)
