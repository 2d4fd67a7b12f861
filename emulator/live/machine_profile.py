"""`calibrate --machine`: the scenario's live model profiled on this machine the way its live workers
run it, as the profile file a scenario names (`model.profile_file`). Planning what to time from the
scenario, asking the probes (machine_probes.py) and assembling their answers; the timing itself is
emulator/worker/machine_probe.py's, the file's format emulator/scenario/model_section.py's.
"""

from __future__ import annotations

import math
import os
import re
import socket
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from emulator.errors import CalibrationError, ScenarioError
from emulator.live.cpu_meter import Metered, foreign_cores, least_disturbed, read_cpu
from emulator.live.launcher import plan_workers
from emulator.live.machine_probes import ProbeProcess, started_probes
from emulator.live.speed_reference import REFERENCE_REPS, metered_reference
from emulator.paths import REPO_ROOT
from emulator.plane.inputs import workload_lengths
from emulator.scenario import Scenario
from emulator.scenario.model_section import ProfileFile, significant, write_profile_file

DEVICE = "cpu"  # the live scenarios' clusters run on `device: cpu`
MIB = 1 << 20
LONGEST_PROFILED = 16_384  # tokens; a longer workload's table extrapolates (said when it does)
MAX_PROFILED_BATCH = 64  # decode batch sizes timed; larger ones extrapolate
MAX_DECODE_CACHE_BYTES = 2 << 30  # decode caches one probe holds at once
BUSY_OP_TOKENS = 512  # the CPU-sharing rounds' prefill: ~0.25 s of the small preset on one core
BUSY_START_DELAY_S = 0.5  # every probe of a round has its command before the round starts
ANSWER_SLACK_S = 120.0
CONTEXT_STEPS, CONTEXT_STEPS_QUICK = 20, 5  # decode steps timed per context length (their median)
MIN_STEP_S = 1e-6  # a fitted fixed cost below this is noise: the step is then all per-token
Say = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class MachinePlan:
    """What to time: `num_workers` is how many worker processes the scenario's live run starts;
    the sharing rounds run 1..max_busy probes at once (num_workers, or twice that by default)."""

    preset: str
    size: str
    seed: int
    lengths: tuple[int, ...]
    reps: int
    batch_sizes: tuple[int, ...]
    decode_cache_tokens: int
    decode_steps: int
    busy_op_tokens: int
    num_workers: int
    max_busy: int
    busy_window_s: float
    quick: bool


def plan_machine(scenario: Scenario, quick: bool = False) -> MachinePlan:
    """The grid from the scenario: prompt lengths spanning its workload (evenly, or geometrically
    when the longest is over 16x the shortest), batch sizes 1, 2, 4, ... up to decode_max_batch,
    decode caches of a typical request's length."""
    model = scenario.model
    if model.preset is None:
        raise ScenarioError("model.preset: calibrate --machine times the model the live engine runs; "
                            "set model.preset (and model.size)")
    samples, output_len = workload_lengths(scenario)
    lo = max(1, round(float(samples.values[0])))
    hi = min(max(lo + 1, round(float(samples.values[-1]))), LONGEST_PROFILED)
    lengths = _grid(lo, hi, 4 if quick else 6)
    cache_tokens = min(round(samples.quantile(0.5) + output_len / 2), LONGEST_PROFILED)
    max_batch = min(scenario.clusters.local.decode_max_batch, MAX_PROFILED_BATCH)
    sizes = {2 ** i for i in range(max_batch.bit_length()) if 2 ** i < max_batch} | {max_batch}
    if len(sizes) < 2:  # a table needs two points: batch 1 alone is timed with batch 2 beside it
        sizes.add(2)
    num_workers = len(plan_workers(scenario, 0))
    return MachinePlan(
        preset=model.preset, size=model.preset_size, seed=scenario.seed, lengths=lengths, reps=1 if quick else 3,
        batch_sizes=tuple(sorted(sizes)), decode_cache_tokens=max(1, cache_tokens), decode_steps=3 if quick else 5,
        busy_op_tokens=min(BUSY_OP_TOKENS, max(1, round(samples.quantile(0.5)))), num_workers=num_workers,
        max_busy=num_workers if quick else 2 * num_workers, busy_window_s=1.5 if quick else 3.0, quick=quick)


def _grid(lo: int, hi: int, points: int) -> tuple[int, ...]:
    if hi > 16 * lo:
        values = [lo * (hi / lo) ** (i / (points - 1)) for i in range(points)]
    else:
        values = [lo + (hi - lo) * i / (points - 1) for i in range(points)]
    return tuple(sorted({round(v) for v in values}))


@dataclass(frozen=True, slots=True)
class MachineProfile:
    """What the probes measured: medians per length and batch size, and the sharing table."""

    plan: MachinePlan
    prefill_s: tuple[float, ...]
    kv_bytes: tuple[int, ...]
    decode_step_s: tuple[float, ...]
    busy_slowdown: tuple[float, ...]
    kv_tail_bytes: tuple[int, ...]  # the last layer's bytes at each length (sent after the prefill)
    reference_prefill_s: float  # emulator/live/speed_reference.py's: the machine's speed at this moment
    cores: int
    worker_nice: int  # the probes' own nice level (the parent's + the worker's increment)
    wall_s: float
    # (context tokens, batch-1 step there over the step at decode_cache_tokens), by context
    decode_context: tuple[tuple[int, float], ...] = ()
    foreign_cores: float = 0.0  # the most other load kept in the reference or a sharing round (cpu_meter.py)


def measure_machine(plan: MachinePlan, say: Say = print) -> MachineProfile:
    """Start max_busy probes, time prefills and decode steps on the first while the rest wait
    idle, then run the sharing rounds; progress lines go to `say`."""
    started = time.monotonic()
    cores = len(os.sched_getaffinity(0))
    say(f"calibrate --machine: {plan.preset} ({plan.size}) on {socket.gethostname()}, {cores} cores; starting "
        f"{plan.max_busy} probe processes (1 torch thread each, at the live workers' nice level)")
    with started_probes(plan.max_busy, plan.preset, plan.size, plan.seed) as probes:
        first = probes[0]
        nice = int(first.ready.get("nice", 0))
        say(f"  probes ready after {time.monotonic() - started:.1f} s (nice {nice})")
        reference = metered_reference(first, plan.busy_op_tokens)
        say(f"  reference: prefill of {plan.busy_op_tokens} tokens {reference.value:.4f} s (median of "
            f"{REFERENCE_REPS}; `rescaled` scales the profile by it again later){reference.note}")
        prefill_s, kv_bytes, tail = _prefills(first, probes[1] if len(probes) > 1 else None, plan, say)
        decode_s = _decode_steps(first, plan, kv_bytes, say)
        context = _decode_context(first, plan, say)
        slowdown, foreign = _sharing(probes, plan, say)
    return MachineProfile(plan, prefill_s, kv_bytes, decode_s, slowdown, tail, reference.value, cores, nice,
                          time.monotonic() - started, context, max(foreign, reference.foreign_cores))


def _prefills(probe: ProbeProcess, receiver: ProbeProcess | None, plan: MachinePlan,
              say: Say) -> tuple[tuple[float, ...], tuple[int, ...], tuple[int, ...]]:
    """Median prefill time and the KV bytes per length, and the last layer's bytes at each.
    With a `receiver`, every cache is shipped to it over loopback TCP and decoded there while the
    next prefill runs, as in a live run, where the decode worker's receiving shares the machine."""
    budget_s = ANSWER_SLACK_S + plan.reps * sum(plan.lengths) * 1e-2  # far above 1 ms per token
    cmd: dict[str, object] = {"op": "prefill", "lengths": list(plan.lengths), "reps": plan.reps}
    if receiver is not None:
        cmd["ship_to"] = int(receiver.ask({"op": "listen"}, ANSWER_SLACK_S)["port"])
        receiver.send({"op": "sink", "requests": plan.reps * len(plan.lengths)})
    doc = probe.ask(cmd, budget_s)
    if receiver is not None:
        receiver.answer(budget_s)
    medians = tuple(statistics.median(_seconds(times, "prefill_s")) for times in doc["prefill_s"])
    kv_bytes = tuple(int(b) for b in doc["kv_bytes"])
    tails = doc.get("tail_fraction")
    if (not isinstance(tails, list) or len(tails) != len(plan.lengths)
            or not all(type(t) is float and 0 < t <= 1 for t in tails)):
        raise CalibrationError("probe: tail_fraction is not one share in (0, 1] per length")
    for length, seconds, size, tail in zip(plan.lengths, medians, kv_bytes, tails, strict=True):
        say(f"  prefill {length:>6} tokens: {seconds:8.4f} s (median of {plan.reps}), KV {size / MIB:.3f} MiB, "
            f"last layer {tail:.1%}")
    return medians, kv_bytes, tuple(round(size * tail) for size, tail in zip(kv_bytes, tails, strict=True))


def _decode_steps(probe: ProbeProcess, plan: MachinePlan, kv_bytes: tuple[int, ...], say: Say) -> tuple[float, ...]:
    per_cache = max(kv_bytes) * plan.decode_cache_tokens / plan.lengths[-1] + MIB  # KV grows about linearly
    if per_cache * plan.batch_sizes[-1] > MAX_DECODE_CACHE_BYTES:
        held_mib = per_cache * plan.batch_sizes[-1] / MIB
        raise CalibrationError(f"decode batch {plan.batch_sizes[-1]} would hold {held_mib:,.0f} "
                               f"MiB of caches (over {MAX_DECODE_CACHE_BYTES / MIB:,.0f}); calibrate a scenario with a "
                               "smaller clusters.local.decode_max_batch or shorter prompts")
    doc = probe.ask({"op": "decode", "cache_tokens": plan.decode_cache_tokens, "batch_sizes": list(plan.batch_sizes),
                     "steps": plan.decode_steps}, ANSWER_SLACK_S * 2)
    steps = _seconds(doc["step_s"], "step_s")
    if len(steps) != len(plan.batch_sizes):
        raise CalibrationError(f"probe: {len(steps)} decode steps for {len(plan.batch_sizes)} batch sizes")
    for size, step in zip(plan.batch_sizes, steps, strict=True):
        say(f"  decode batch {size:>3} ({plan.decode_cache_tokens} cached tokens): {step * 1e3:8.2f} ms per step")
    return tuple(steps)


def _decode_context(probe: ProbeProcess, plan: MachinePlan, say: Say) -> tuple[tuple[int, float], ...]:
    """The batch-1 step by context over the step at decode_cache_tokens: attention reads every
    cached token, so a long prompt's tokens come slower (the small preset on this VM: 8 ms a step at
    128 tokens, 17 ms at 2,048). Timed at each prompt length of the grid, then fitted as a fixed
    cost plus one per cached token (least squares): one step's noise here is tens of percent, and a
    point-by-point table came out non-monotonic."""
    contexts = sorted({*plan.lengths, plan.decode_cache_tokens})
    steps = []
    for tokens in contexts:
        doc = probe.ask({"op": "decode", "cache_tokens": tokens, "batch_sizes": [1],
                         "steps": CONTEXT_STEPS_QUICK if plan.quick else CONTEXT_STEPS}, ANSWER_SLACK_S * 2)
        steps.append(_seconds(doc["step_s"], "step_s")[0])
    fixed_s, per_token_s = step_line(contexts, steps)
    at_reference = fixed_s + per_token_s * plan.decode_cache_tokens
    factors = tuple((tokens, round((fixed_s + per_token_s * tokens) / at_reference, 3)) for tokens in contexts)
    say(f"  decode step by context (batch 1): {fixed_s * 1e3:.2f} ms + {per_token_s * 1e6:.2f} us per cached token; "
        f"over its step at {plan.decode_cache_tokens} tokens: " + ", ".join(f"{t}: x{f:.2f}" for t, f in factors))
    return factors


def step_line(xs: list[int], ys: list[float]) -> tuple[float, float]:
    """Least-squares intercept and slope, the slope kept at 0 or more and the intercept positive
    (a step never gets cheaper with more context, and costs something with none)."""
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    slope = max(0.0, sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread) if spread else 0.0
    return max(mean_y - slope * mean_x, MIN_STEP_S), slope


def _sharing(probes: list[ProbeProcess], plan: MachinePlan, say: Say) -> tuple[tuple[float, ...], float]:
    """Round k: k probes prefill busy_op_tokens back to back over the same window; the factor is
    the mean of their median op times over round 1's (one probe busy, the others idle). A round
    disturbed by other load runs again (cpu_meter.least_disturbed); the most foreign load kept is
    returned with the factors."""
    factors: list[float] = []
    base_s, worst = 0.0, 0.0
    for k in range(1, plan.max_busy + 1):
        round_k = least_disturbed(lambda: _busy_round(probes[:k], plan))
        worst = max(worst, round_k.foreign_cores)
        base_s = base_s or round_k.value
        factors.append(round(round_k.value / base_s, 3))
        say(f"  {k} busy worker{'s' if k > 1 else ' '}: prefill of {plan.busy_op_tokens} tokens {round_k.value:.4f} s, "
            f"x{factors[-1]:.2f}{round_k.note}")
    return tuple(factors), worst


def _busy_round(probes: list[ProbeProcess], plan: MachinePlan) -> Metered[float]:
    start_at = time.monotonic() + BUSY_START_DELAY_S
    cmd = {"op": "busy", "tokens": plan.busy_op_tokens, "start_at": start_at, "stop_at": start_at + plan.busy_window_s}
    for probe in probes:
        probe.send(cmd)
    pids = [probe.proc.pid for probe in probes]
    time.sleep(max(0.0, start_at - time.monotonic()))
    before = read_cpu(pids)
    time.sleep(max(0.0, start_at + plan.busy_window_s - time.monotonic()))
    foreign = foreign_cores(before, read_cpu(pids))
    medians = [statistics.median(_seconds(probe.answer(ANSWER_SLACK_S + plan.busy_window_s)["op_s"], "op_s"))
               for probe in probes]
    return Metered(statistics.fmean(medians), foreign)


def _seconds(values: object, field: str) -> list[float]:
    if (not isinstance(values, list) or not values
            or not all(type(v) is float and math.isfinite(v) and 0 < v < 3600 for v in values)):
        raise CalibrationError(f"probe: {field} is not a list of positive seconds")
    return values  # type: ignore[return-value]


def profile_file_of(profile: MachineProfile, scenario: Scenario, date: str | None = None,
                    git_sha: str | None = None) -> ProfileFile:
    """The measurement as a profile file (checked by its schema): `decode_step_ms` is the step at
    the largest batch timed (T_decode at BS_max, the optimizer's), the by-batch table beside it.
    `date` and `git_sha` default to now and the checkout's HEAD."""
    plan = profile.plan
    host = _host_name()
    doc = {
        "measured": {
            "kind": "machine", "date": date or time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "host": socket.gethostname()[:256],
            "preset": plan.preset, "size": plan.size, "git_sha": git_sha or _git_sha(), "scenario": scenario.name,
            "cores": profile.cores, "quick": plan.quick, "reps": plan.reps, "worker_nice": profile.worker_nice,
            "threads_per_worker": 1, "busy_op_tokens": plan.busy_op_tokens,
            "decode_cache_tokens": plan.decode_cache_tokens, "wall_s": round(profile.wall_s, 1),
            "reference_prefill_s": significant(profile.reference_prefill_s),
            "foreign_cores": round(profile.foreign_cores, 2),
        },
        "model": {"profile": {
            "name": f"{plan.preset}-{plan.size}-{host}"[:64].rstrip("-"),
            "lengths_tokens": list(plan.lengths),
            "kv_mib": [significant(b / MIB) for b in profile.kv_bytes],
            "prefill_s": {DEVICE: [significant(s) for s in profile.prefill_s]},
            "decode_step_ms": {DEVICE: significant(profile.decode_step_s[-1] * 1e3)},
            "decode_batch_sizes": list(plan.batch_sizes),
            "decode_step_ms_by_batch": {DEVICE: [significant(s * 1e3) for s in profile.decode_step_s]},
            "host": {"cores": profile.cores, "busy_slowdown": list(profile.busy_slowdown)},
            "kv_tail_mib": [significant(b / MIB) for b in profile.kv_tail_bytes],
            **({"decode_context_tokens": [t for t, _ in profile.decode_context],
                "decode_context_factor": [f for _, f in profile.decode_context]} if profile.decode_context else {}),
        }},
    }
    return ProfileFile.model_validate(doc)


def write_machine_profile(profile: MachineProfile, scenario: Scenario, path: Path, date: str | None = None,
                          git_sha: str | None = None) -> Path:
    """The profile file at `path` (folders made), a comment header saying how it was measured."""
    loaded = profile_file_of(profile, scenario, date, git_sha)
    measured = loaded.measured
    assert measured is not None  # profile_file_of writes it
    return write_profile_file(loaded, path, f"{measured.cores} cores, by `python -m emulator calibrate {scenario.name} "
                              f"--machine{' --quick' if measured.quick else ''}` in {measured.wall_s:g} s. Name it "
                              "from a scenario as model: {profile_file: PATH}.")


def default_profile_path(plan: MachinePlan) -> Path:
    return REPO_ROOT / "profiles" / f"{plan.preset}-{plan.size}-{_host_name()}.yaml"


def _host_name() -> str:
    name = re.sub(r"[^a-z0-9-]+", "-", socket.gethostname().lower()).strip("-")
    return name[:32] or "host"


def _git_sha() -> str:
    try:
        done = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return done.stdout.strip()[:40] or "unknown"
