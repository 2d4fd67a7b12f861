"""How fast the virtual engine simulates, on one core: requests per wall second on the paper's case
study and on the whole 3,993-request Mooncake synthetic trace (prefix cache on, scheduling on), and
the trace's whole-run wall time.

Targets: >= 50,000 simulated requests/s on the case study and the whole trace in < 2 s end to end
(the [Virtual engine] issue); >= 25,000 simulated requests/s on the trace (issue 15, "Fast replay":
the prefix index works on every request there). Requests/s time the simulation alone (requests and
control plane built beforehand); the whole-run time includes reading the trace and the optimizer.
Also reports the bare heap loop's events per second (the reason for a heap
loop rather than SimPy, which is not a dependency), and which build ran: the compiled hot path
(`make accel`) or the interpreted one (PRFAAS_ACCEL=0 measures that). Writes
bench/results/virtual_speed.json.

With `--baseline REV` it also measures this working tree against another revision in the same run:
REV is checked out into a temporary git worktree (removed at the end) with its own compiled build,
and the case study and the whole trace run in child processes that import one tree each, on one
core, in alternating order (new, baseline; baseline, new; ...). It reports each tree's median and
best per workload, and the ratios of the medians (the case study's target >= 0.95 with `--check`,
so a refactor does not slow the engine); side by side, a busy machine weighs on both trees alike.

    python bench/virtual_speed.py [--quick] [--check] [--baseline REV [--rounds N]]
"""

from __future__ import annotations

import os

# One core, as the target says: pin the math libraries' thread pools before numpy loads them.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import importlib.machinery  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TYPE_CHECKING, Any  # noqa: E402
from revisions import BenchError, detached_worktree, git, resolve_rev  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MEASURE_ONLY = "--measure-only"
# The tree whose `emulator` this process imports: this checkout, or, in the A/B child that --baseline
# starts, the tree named after --measure-only. It goes first on the path before anything imports
# emulator (the editable install would otherwise resolve it to the checkout it was installed from).
TREE = (Path(sys.argv[sys.argv.index(MEASURE_ONLY) + 1]).resolve()
        if MEASURE_ONLY in sys.argv[:-1] else ROOT)
sys.path.insert(0, str(TREE))

# The A/B child imports only these, which every revision since emulator/accel_on.py (7355ac1) has;
# issue 27 moved accel and accel_on into emulator/virtual/, so a baseline from before then has them
# at the top. Importing accel_on activates the compiled build, so it comes before the engine.
try:
    from emulator.virtual import accel, accel_on  # noqa: E402
except ImportError:  # a baseline tree from before issue 27
    from emulator import accel, accel_on  # noqa: E402
from emulator import paths  # noqa: E402
from emulator.plane import make_control_plane  # noqa: E402
from emulator.scenario import apply_overrides, load_scenario  # noqa: E402
from emulator.virtual.engine import simulate  # noqa: E402
from emulator.workload.build import build_requests  # noqa: E402

if TYPE_CHECKING:
    from emulator.scenario import Scenario

RESULTS = ROOT / "bench" / "results" / "virtual_speed.json"
CASE_STUDY = TREE / "scenarios" / "paper-case-study.yaml"
MOONCAKE = TREE / "scenarios" / "mooncake-replay.yaml"
TARGET_RPS = 50_000.0
TARGET_TRACE_S = 2.0
TARGET_TRACE_RPS = 25_000.0  # issue 15
TARGET_RATIO = 0.95  # this tree's median over the baseline's (issue 14)
AB_REPEATS_PER_ROUND = 3  # timed runs per child process, after its warm-up
AB_ROUNDS = {True: 3, False: 5}  # by --quick; each round runs one child per tree


def case_study(num_requests: int, scheduler: bool = True) -> Scenario:
    """The case study at its 2 req/s, run long enough for `num_requests` arrivals."""
    items = [f"duration_s={num_requests / 2.0 * 1.05:g}", f"workload.max_requests={num_requests}"]
    if not scheduler:
        items += ["scheduler.short_term.enabled=false", "scheduler.long_term.enabled=false"]
    return apply_overrides(load_scenario(CASE_STUDY), items)


def whole_trace() -> Scenario:
    """mooncake-replay.yaml without its 1,000-request cap: all 3,993 requests, scheduler on."""
    return apply_overrides(load_scenario(MOONCAKE), [
        "workload.trace.max_requests=null", "workload.max_requests=100000", "duration_s=5000"])


def loop_rate(num_events: int) -> float:
    """Events per second of the bare heap loop: each event schedules the next one 1 ms later."""
    from emulator.virtual.core import Simulator  # here, not on top: the A/B child imports only shared API

    sim = Simulator()
    left = [num_events]

    def tick(_: object) -> None:
        left[0] -= 1
        if left[0]:
            sim.schedule(sim.now + 0.001, tick)

    sim.schedule(0.0, tick)
    start = time.perf_counter()
    sim.run()
    return num_events / (time.perf_counter() - start)


def time_simulation(scenario: Scenario, repeats: int) -> tuple[list[float], int, int]:
    """Wall seconds of the event loop alone (requests and control plane built beforehand)."""
    requests = build_requests(scenario)
    samples, events = [], 0
    for _ in range(repeats + 1):  # the first run warms up
        plane = make_control_plane(scenario)
        start = time.perf_counter()
        result = simulate(scenario, requests=requests, plane=plane)
        samples.append(time.perf_counter() - start)
        events = result.num_events
    return samples[1:], len(requests), events


def time_trace(scenario: Scenario, repeats: int) -> tuple[list[float], int]:
    """Wall seconds of the whole run: reading the trace, the optimizer, the simulation."""
    samples, count = [], 0
    for _ in range(repeats + 1):
        start = time.perf_counter()
        result = simulate(scenario)
        samples.append(time.perf_counter() - start)
        count = result.num_requests
    return samples[1:], count


def pin_one_core() -> None:
    """The target is per core; children inherit the pin, so both trees of an A/B share the core."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def sizes(quick: bool) -> tuple[int, int]:
    """Case-study requests and timed repeats (after one warm-up) per measurement. Shared machines are
    noisy (a run's CPU time can swing by a third): the median of many runs, and the fastest one beside
    it (timeit's advice: slower runs measure the neighbours)."""
    return (5_000, 2) if quick else (50_000, 9)


def measure_only(quick: bool) -> dict[str, Any]:
    """The A/B child: time the case study with TREE's emulator and say what was imported from where."""
    import emulator

    num_requests, _ = sizes(quick)
    timed = {name: time_simulation(scenario, AB_REPEATS_PER_ROUND)
             for name, scenario in (("case_study", case_study(num_requests)), ("trace", whole_trace()))}
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    compiled = {name: module.__file__ for name, module in sorted(sys.modules.items())
                if name.startswith("emulator.") and str(getattr(module, "__file__", None)).endswith(suffixes)}
    return {"emulator_file": emulator.__file__, "runs_as": accel_on.RUNS_AS, "compiled_modules": compiled,
            **{name: {"requests": count, "events": events, "samples_s": samples}
               for name, (samples, count, events) in timed.items()}}


def first_error(done: subprocess.CompletedProcess[str]) -> str:
    """The line that says why a child failed: the first `file.py:N: ...` one (mypy's), else its last line."""
    lines = [line.strip() for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    located = [line for line in lines if ".py:" in line and "note:" not in line and not line.startswith("File ")]
    return (located or lines or ["no output"])[0 if located else -1]


def accel_dir_of(tree: Path) -> Path:
    """Where `tree`'s compiled build lives: this checkout's own setting, else the tree's build/accel."""
    return accel.build_dir() if tree == ROOT else tree / "build" / "accel"


def tree_env(tree: Path) -> dict[str, str]:
    """A child's environment: `tree` first on the path, `tree`'s own build, this checkout's traces."""
    return {**os.environ, "PYTHONPATH": str(tree), paths.Env.ACCEL_DIR.value: str(accel_dir_of(tree)),
            paths.Env.SHARED_DIR.value: str(paths.shared_dir())}


def build_accel(tree: Path) -> None:
    """Make `tree`'s compiled build current: `accel ensure` here, `accel build` in a fresh worktree."""
    action = "ensure" if tree == ROOT else "build"
    done = subprocess.run([sys.executable, "-m", "emulator", "accel", action], cwd=tree, env=tree_env(tree),
                          capture_output=True, text=True)
    if done.returncode:
        raise BenchError(f"{tree}: accel {action} failed ({first_error(done)}); "
                         "PRFAAS_ACCEL=0 compares the interpreted engines")


def measure_tree(tree: Path, quick: bool) -> dict[str, Any]:
    """One A/B measurement: this script's --measure-only mode, importing `tree`'s emulator; checked."""
    command = [sys.executable, str(Path(__file__).resolve()), MEASURE_ONLY, str(tree), *(["--quick"] * quick)]
    done = subprocess.run(command, cwd=tree, env=tree_env(tree), capture_output=True, text=True)
    if done.returncode:
        raise BenchError(f"measuring {tree} failed: {first_error(done)}")
    sample: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    check_imports(sample, tree)
    return sample


def check_imports(sample: dict[str, Any], tree: Path) -> None:
    """Refuse a measurement of the wrong tree, or of a different engine build than asked for."""
    if not Path(sample["emulator_file"]).resolve().is_relative_to(tree):
        raise BenchError(f"the run meant for {tree} imported emulator from {sample['emulator_file']}")
    compiled = sample["compiled_modules"]
    if paths.accel_disabled():
        if compiled:
            raise BenchError(f"{tree}: PRFAAS_ACCEL=0 but {', '.join(compiled)} ran compiled")
        return
    if not sample["runs_as"].startswith("compiled") or not compiled:
        raise BenchError(f"{tree}: {sample['runs_as']}; the A/B compares compiled engines "
                         "(PRFAAS_ACCEL=0 compares interpreted ones)")
    build = accel_dir_of(tree).resolve()
    if stray := [name for name, file in compiled.items() if not Path(file).resolve().is_relative_to(build)]:
        raise BenchError(f"{tree}: {', '.join(stray)} loaded from outside its build {build}")


def tree_summary(runs: list[dict[str, Any]], label: str, workload: str) -> dict[str, Any]:
    samples = [s for run in runs for s in run[workload]["samples_s"]]
    count = runs[0][workload]["requests"]
    return {"tree": label, "emulator_file": runs[0]["emulator_file"], "runs_as": runs[0]["runs_as"],
            "requests": count, "events": runs[0][workload]["events"], "samples_s": samples,
            "median_requests_per_s": count / statistics.median(samples),
            "best_requests_per_s": count / min(samples)}


def run_ab(rev: str, quick: bool, rounds: int) -> dict[str, Any]:
    """Interleave this tree and `rev`'s, alternating which goes first each round (so a drift in the
    machine's load weighs on both alike); returns the "baseline" entry of the results."""
    sha = resolve_rev(rev)
    with detached_worktree(sha) as old:
        if not paths.accel_disabled():
            build_accel(old)
        runs: dict[Path, list[dict[str, Any]]] = {ROOT: [], old: []}
        for index in range(rounds):
            for tree in (ROOT, old) if index % 2 == 0 else (old, ROOT):
                runs[tree].append(measure_tree(tree, quick))
    new, base = tree_summary(runs[ROOT], "working tree", "case_study"), tree_summary(runs[old], sha, "case_study")
    trace_new, trace_old = tree_summary(runs[ROOT], "working tree", "trace"), tree_summary(runs[old], sha, "trace")
    return {"rev": rev, "sha": sha, "rounds": rounds, "repeats_per_round": AB_REPEATS_PER_ROUND,
            "order": "alternating, this tree first in even rounds", "new": new, "old": base,
            "ratio": new["median_requests_per_s"] / base["median_requests_per_s"], "target_ratio": TARGET_RATIO,
            "best_ratio": new["best_requests_per_s"] / base["best_requests_per_s"],
            "trace": {"new": trace_new, "old": trace_old,
                      "ratio": trace_new["median_requests_per_s"] / trace_old["median_requests_per_s"],
                      "best_ratio": trace_new["best_requests_per_s"] / trace_old["best_requests_per_s"]}}


def run_default(quick: bool) -> dict[str, Any]:
    """The in-process bench: heap loop, case study with and without the scheduler, whole trace."""
    num_requests, repeats = sizes(quick)
    loop_eps = loop_rate(200_000 if quick else 1_000_000)
    case_s, case_n, case_events = time_simulation(case_study(num_requests), repeats)
    bare_s, _, _ = time_simulation(case_study(num_requests, scheduler=False), repeats)
    trace_sim_s, trace_sim_n, trace_events = time_simulation(whole_trace(), repeats)
    trace_s, trace_n = time_trace(whole_trace(), repeats)
    summary = {
        "heap_loop_events_per_s": loop_eps,
        "case_study_requests": case_n, "case_study_events": case_events,
        "case_study_median_s": statistics.median(case_s),
        "case_study_requests_per_s": case_n / statistics.median(case_s),
        "case_study_best_requests_per_s": case_n / min(case_s),
        "case_study_no_scheduler_requests_per_s": case_n / statistics.median(bare_s),
        "trace_requests": trace_n, "trace_events": trace_events,
        "trace_sim_median_s": statistics.median(trace_sim_s),
        "trace_sim_requests_per_s": trace_sim_n / statistics.median(trace_sim_s),
        "trace_sim_best_requests_per_s": trace_sim_n / min(trace_sim_s),
        "trace_median_s": statistics.median(trace_s),
        "trace_requests_per_s": trace_n / statistics.median(trace_s),  # whole run, reading included
        "target_requests_per_s": TARGET_RPS, "target_trace_requests_per_s": TARGET_TRACE_RPS,
        "target_trace_s": TARGET_TRACE_S,
    }
    return {
        "bench": "virtual_speed",
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
                    "threads": 1, "load_avg_1_5_15_min": os.getloadavg()},  # a busy machine: compare ratios
        "engine": accel_on.RUNS_AS,
        "git_sha": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip(),
        "config": {"case_study": str(CASE_STUDY.relative_to(ROOT)), "trace": str(MOONCAKE.relative_to(ROOT)),
                   "repeats": repeats, "quick": quick},
        "samples_s": {"case_study": case_s, "case_study_no_scheduler": bare_s, "trace_simulation": trace_sim_s,
                      "trace": trace_s},
        "summary": summary,
    }


def report(results: dict[str, Any], out: Path) -> list[str]:
    """Print the table; returns the targets missed."""
    summary, ab = results["summary"], results.get("baseline")
    print(f"virtual engine ({results['engine']}), one core, median of {results['config']['repeats']} after a warm-up")
    print(f"  heap loop:   {summary['heap_loop_events_per_s']:,.0f} events/s (one push, pop and call each)")
    print(f"  case study:  {summary['case_study_requests_per_s']:,.0f} requests/s median, "
          f"{summary['case_study_best_requests_per_s']:,.0f} best ({summary['case_study_requests']} requests, "
          f"{summary['case_study_events']} events, scheduler on; target >= {TARGET_RPS:,.0f}); "
          f"scheduler off {summary['case_study_no_scheduler_requests_per_s']:,.0f}")
    print(f"  Mooncake:    {summary['trace_sim_requests_per_s']:,.0f} requests/s median, "
          f"{summary['trace_sim_best_requests_per_s']:,.0f} best ({summary['trace_requests']} requests, "
          f"{summary['trace_events']} events, prefix cache on; target >= {TARGET_TRACE_RPS:,.0f}); "
          f"whole run {summary['trace_median_s']:.2f} s (trace read, optimizer, simulation; "
          f"target < {TARGET_TRACE_S:g} s)")
    if ab:
        print(f"  A/B vs {ab['rev']} ({ab['sha'][:10]}), {ab['rounds']} rounds x {ab['repeats_per_round']} runs, "
              f"alternating order, requests/s median (best), this tree / baseline (target >= {TARGET_RATIO}):")
        for label, row in (("case study", ab), ("Mooncake", ab["trace"])):
            new, old = row["new"], row["old"]
            print(f"    {label:<10} {new['median_requests_per_s']:>7,.0f} ({new['best_requests_per_s']:,.0f}) / "
                  f"{old['median_requests_per_s']:>7,.0f} ({old['best_requests_per_s']:,.0f}): ratio "
                  f"{row['ratio']:.3f}, best to best {row['best_ratio']:.3f} ({new['events']} events)")
    print(f"results: {out}")
    return [name for name, miss in (
        ("case study rate", summary["case_study_requests_per_s"] < TARGET_RPS),
        ("trace simulation rate", summary["trace_sim_requests_per_s"] < TARGET_TRACE_RPS),
        ("trace time", summary["trace_median_s"] >= TARGET_TRACE_S),
        ("ratio to the baseline", ab is not None and ab["ratio"] < TARGET_RATIO)) if miss]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests and repeats (CI)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--baseline", metavar="REV", help="also measure this tree against REV's (HEAD~1, a sha)")
    parser.add_argument("--rounds", type=int, help="A/B rounds, each one run per tree (default 5, 3 with --quick)")
    parser.add_argument(MEASURE_ONLY, metavar="TREE", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    pin_one_core()
    if args.measure_only:
        print(json.dumps(measure_only(args.quick)))
        return 0
    try:
        if args.rounds is not None and not 1 <= args.rounds <= 50:
            raise BenchError(f"--rounds: {args.rounds} is out of range; give 1 to 50")
        if args.baseline is not None:
            resolve_rev(args.baseline)  # a bad revision fails before minutes of measuring
            signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))  # cleanup runs
            if not paths.accel_disabled():
                stale = accel.build_problem(accel.build_dir())
                build_accel(ROOT)
                if stale is not None and not accel_on.RUNS_AS.startswith("compiled"):
                    # this process started interpreted: restart it so the in-process figures run compiled
                    print(f"virtual_speed: rebuilt ({stale}); restarting to use the build", flush=True)
                    os.execv(sys.executable, [sys.executable, str(Path(__file__).resolve()), *sys.argv[1:]])
        results = run_default(args.quick)
        if args.baseline is not None:
            results["baseline"] = run_ab(args.baseline, args.quick, args.rounds or AB_ROUNDS[args.quick])
    except BenchError as exc:
        print(f"virtual_speed: {exc}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    missed = report(results, args.out)
    if missed:
        print(f"MISSED: {', '.join(missed)}")
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
