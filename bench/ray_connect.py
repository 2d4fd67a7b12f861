"""How fast `--ray ADDRESS` says why a cluster cannot be joined (issue 28, [Speed]: within 5 s, in
one line naming the cause), against a real two-node cluster started with `ray start` and token
authentication on (tests/emulator/ray_start_cluster.py), and how long Ray's own `ray.init` takes to
fail in the same run (the reference: about 20 s, blaming the address).

Per cause and repeat, each in a fresh process with that cause's environment:
- `cli_s`: `python -m emulator sweep FILE --ray ADDRESS` from start to exit 2 (imports included);
- `check_s`: emulator.ray_cluster.check_cluster alone, timed inside its process (imports excluded).
Causes: nothing listening, a port that is not a Ray head, RAY_AUTH_MODE unset, a wrong token, no
token. The reference is `ray.init(address)` with RAY_AUTH_MODE unset, once (twice without --quick),
interleaved with the repeats. Writes bench/results/ray_connect.json; `--check` exits 1 when a
cause's median cli_s is over 5 s, its worst check_s over 4 s, or its error line names another cause.

    python bench/ray_connect.py [--quick] [--check] [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.emulator.ray_start_cluster import RayStartCluster, free_port, ray_start_cluster  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "ray_connect.json"
TARGET_CLI_S = 5.0
TARGET_CHECK_S = 4.0
SWEEP = "name: probe\nbase: {base}\nset: [duration_s=20]\naxes:\n  workload.arrival.rate_per_s: {{values: [1.0]}}\n"
CHECK_SNIPPET = ("import json, sys, time\nfrom emulator.ray_cluster import ClusterUnreachable, check_cluster\n"
                 "start = time.perf_counter()\ntry:\n    check_cluster(sys.argv[1]); problem = None\n"
                 "except ClusterUnreachable as err:\n    problem = err.problem.value\n"
                 "print(json.dumps({'check_s': time.perf_counter() - start, 'problem': problem}))\n")
RAY_INIT_SNIPPET = ("import json, logging, sys, time\nimport ray\nstart = time.perf_counter()\ntry:\n"
                    "    ray.init(address=sys.argv[1], logging_level=logging.ERROR); error = None\n"
                    "except Exception as err:\n    error = str(err).splitlines()[0]\n"
                    "print(json.dumps({'ray_init_s': time.perf_counter() - start, 'error': error}))\n")


def causes(cluster: RayStartCluster, silent: str) -> dict[str, tuple[str, dict[str, str], str]]:
    """cause -> (address, environment, the Problem value its error must carry)."""
    unset = {k: v for k, v in cluster.env.items() if k != "RAY_AUTH_MODE"}
    return {
        "not_listening": (f"127.0.0.1:{free_port()}", cluster.env, "not_listening"),
        "not_ray": (silent, cluster.env, "not_ray"),
        "token_not_sent": (cluster.address, unset, "token_not_sent"),
        "token_refused": (cluster.address, {**cluster.env, "RAY_AUTH_TOKEN": "0" * 32}, "token_refused"),
        "token_missing": (cluster.address, {**cluster.env, "HOME": "/nonexistent-home"}, "token_missing"),
    }


def time_cli(address: str, env: dict[str, str], sweep_file: Path, out: Path) -> dict[str, Any]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "emulator", "sweep", str(sweep_file), "--out", str(out),
                           "--ray", address], env=env, cwd=ROOT, capture_output=True, text=True, timeout=180)
    lines = done.stderr.strip().splitlines()
    return {"cli_s": time.perf_counter() - start, "rc": done.returncode, "num_stderr_lines": len(lines),
            "line": lines[-1] if lines else ""}


def run_snippet(snippet: str, address: str, env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", snippet, address], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=180)
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(repeats: int, num_reference: int) -> dict[str, Any]:
    samples: dict[str, list[dict[str, Any]]] = {}
    reference: list[dict[str, Any]] = []
    with ray_start_cluster() as cluster, socket.socket() as listener, tempfile.TemporaryDirectory() as tmp:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        sweep_file = Path(tmp) / "probe.yaml"
        sweep_file.write_text(SWEEP.format(base=ROOT / "scenarios" / "paper-case-study.yaml"))
        table = causes(cluster, f"127.0.0.1:{listener.getsockname()[1]}")
        for repeat in range(repeats):
            if repeat < num_reference:  # interleaved, so a drift in the machine's load weighs on both
                reference.append(run_snippet(RAY_INIT_SNIPPET, cluster.address, table["token_not_sent"][1]))
            for name, (address, env, expected) in table.items():
                row = time_cli(address, env, sweep_file, Path(tmp) / f"out-{name}-{repeat}")
                row.update(run_snippet(CHECK_SNIPPET, address, env))
                row["expected"] = expected
                samples.setdefault(name, []).append(row)
    return {"samples": samples, "reference": reference}


def summarise(raw: dict[str, Any]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for name, rows in raw["samples"].items():
        summary[name] = {
            "cli_s_median": statistics.median(r["cli_s"] for r in rows),
            "check_s_max": max(r["check_s"] for r in rows),
            "named_right": all(r["problem"] == r["expected"] and r["rc"] == 2 and r["num_stderr_lines"] == 2
                               for r in rows),
            "line": rows[0]["line"]}
    ref = [r["ray_init_s"] for r in raw["reference"]]
    summary["reference_ray_init_s_median"] = statistics.median(ref) if ref else None
    return summary


def misses(summary: dict[str, Any]) -> list[str]:
    found = []
    for name, row in summary.items():
        if not isinstance(row, dict):
            continue
        if row["cli_s_median"] > TARGET_CLI_S:
            found.append(f"{name}: median CLI {row['cli_s_median']:.2f} s > {TARGET_CLI_S:g} s")
        if row["check_s_max"] > TARGET_CHECK_S:
            found.append(f"{name}: check up to {row['check_s_max']:.2f} s > {TARGET_CHECK_S:g} s")
        if not row["named_right"]:
            found.append(f"{name}: not named as its cause in one line: {row['line']}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 repeat, 1 reference ray.init")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--repeats", type=int, help="repeats per cause (default 3, --quick 1)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 3)
    if not 1 <= repeats <= 20:
        parser.error(f"--repeats {repeats}: use 1 to 20")
    load_before = os.getloadavg()[0]
    raw = measure(repeats, 1 if args.quick else 2)
    summary = summarise(raw)
    import ray

    args.out.write_text(json.dumps({
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "ray": ray.__version__, "load_before": load_before, "load_after": os.getloadavg()[0]},
        "git_sha": subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                  text=True).stdout.strip(),
        "config": {"repeats": repeats, "quick": args.quick,
                   "targets": {"cli_s": TARGET_CLI_S, "check_s": TARGET_CHECK_S}},
        "raw": raw, "summary": summary}, indent=1))
    print(f"{'cause':<16}{'CLI s (median)':>16}{'check s (max)':>15}  named")
    for name, row in summary.items():
        if isinstance(row, dict):
            print(f"{name:<16}{row['cli_s_median']:>16.2f}{row['check_s_max']:>15.2f}  {row['named_right']}")
    ref = summary["reference_ray_init_s_median"]
    print(f"reference: ray.init without the token fails after {ref:.1f} s (median); load {load_before:.1f}")
    found = misses(summary)
    for miss in found:
        print(f"MISS {miss}")
    return 1 if args.check and found else 0


if __name__ == "__main__":
    sys.exit(main())
