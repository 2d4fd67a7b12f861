"""Rules that span fields or sections of a scenario, each problem one `path: problem; fix` line.

Run after every field has passed its own checks; what a timeline change does to the values is
checked by emulator.scenario, which revalidates the edited document.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from emulator.control.types import Cluster, NodeId, Role, RoutePolicy
from emulator.knobs import BY_PATH as KNOBS
from emulator.limits import MAX_OUTPUT_TOKENS
from emulator.net.ceiling import ceiling_warnings
from emulator.net.spec import LinkSpec
from emulator.scenario.parts import ACTIONS, ClustersSpec, ProfileSpec
from emulator.scenario.workload import (
    MOONCAKE_BLOCK_TOKENS,
    FixedLength,
    LengthDist,
    LognormalLength,
    UniformLength,
)

if TYPE_CHECKING:
    from emulator.scenario.schema import Scenario


def static_problems(s: Scenario) -> list[str]:
    return [
        *_model_problems(s), *_cluster_problems(s), *_workload_problems(s),
        *_scheduler_problems(s), *_timeline_problems(s), *_expect_problems(s), *_ray_problems(s),
    ]


def _model_problems(s: Scenario) -> Iterator[str]:
    """Which of preset / profile / profile_file each engine takes: the live engine runs a preset
    (a profile_file beside it is for the same scenario on the virtual engine); the virtual engine
    costs work by profile, profile_file or, given a preset alone, its FLOPs."""
    model, profile = s.model, s.model.profile
    if profile is not None and model.profile_file is not None:
        yield "model: both profile and profile_file given; give exactly one"
    elif profile is not None and model.preset is not None:
        yield "model: both of preset and profile given; give exactly one"
    elif model.preset is None and model.measured_profile is None:
        yield "model: neither preset nor profile given; give exactly one of preset, profile or profile_file"
    if profile is not None and model.size is not None:
        yield "model.size: applies to a preset, not a profile; remove it"
    if s.engine == "live" and model.preset is None:
        named = "model.profile" if profile is not None else "model.profile_file"
        yield (f"{named}: the live engine runs a model_stub preset, not a profile; "
               "add model.preset or use engine: virtual")
    yield from _provenance_problems(s)
    measured = model.measured_profile
    if measured is not None:
        yield from profile_problems(s, measured, model.profile_where)


def _provenance_problems(s: Scenario) -> Iterator[str]:
    """A profile file measured for one model, named beside another preset, is refused."""
    measured, model = s.model.provenance, s.model
    if measured is None or model.preset is None or measured.preset is None:
        return
    theirs, ours = (measured.preset, measured.size or "small"), (model.preset, model.preset_size)
    if theirs != ours:
        yield (f"model.profile_file: measured for {theirs[0]} ({theirs[1]}), but model.preset is "
               f"{ours[0]} ({ours[1]}); calibrate this model (python -m emulator calibrate SCENARIO "
               "--machine) or name its file")


def profile_problems(s: Scenario, profile: ProfileSpec, where: str) -> Iterator[str]:
    """A profile's tables against each other and against the clusters' devices."""
    lengths = profile.lengths_tokens
    if any(b <= a for a, b in zip(lengths, lengths[1:], strict=False)):
        yield (f"{where}.lengths_tokens: {list(lengths)} is not strictly increasing; "
               "sort it and drop repeats")
    tables = {"kv_mib": profile.kv_mib}
    tables.update((f"prefill_s.{device}", table) for device, table in profile.prefill_s.items())
    for name, table in tables.items():
        if len(table) != len(lengths):
            yield (f"{where}.{name}: {len(table)} values for {len(lengths)} lengths; "
                   "give one value per entry of lengths_tokens")
    for cluster in ("remote", "local"):
        device = getattr(s.clusters, cluster).device
        if device not in profile.prefill_s:
            yield (f"{where}.prefill_s: no table for device {device!r} "
                   f"(clusters.{cluster}.device); add prefill_s.{device} or change the device")
    local = s.clusters.local.device
    if local not in profile.decode_step_ms:
        yield (f"{where}.decode_step_ms: no value for device {local!r} "
               f"(clusters.local.device); add decode_step_ms.{local}")
    yield from _batch_problems(profile, local, where)
    yield from _context_problems(profile, where)
    yield from _tail_problems(profile, where)
    if profile.host is not None and profile.host.busy_slowdown[0] != 1.0:
        yield (f"{where}.host.busy_slowdown: starts at {profile.host.busy_slowdown[0]:g}; one busy worker "
               "is the reference the tables were measured at, so the first factor is 1.0")


def _batch_problems(profile: ProfileSpec, local: str, where: str) -> Iterator[str]:
    """decode_batch_sizes and decode_step_ms_by_batch come together and agree in length."""
    sizes, by_batch = profile.decode_batch_sizes, profile.decode_step_ms_by_batch
    if bool(sizes) != bool(by_batch):
        given, missing = (("decode_batch_sizes", "decode_step_ms_by_batch") if sizes
                          else ("decode_step_ms_by_batch", "decode_batch_sizes"))
        yield f"{where}.{given}: given without {missing}; give both or neither"
        return
    if not sizes:
        return
    if len(sizes) < 2 or any(b <= a for a, b in zip(sizes, sizes[1:], strict=False)):
        yield (f"{where}.decode_batch_sizes: {list(sizes)} is not 2 or more strictly increasing sizes; "
               "sort it, drop repeats, give at least 2")
    for device, table in by_batch.items():
        if len(table) != len(sizes):
            yield (f"{where}.decode_step_ms_by_batch.{device}: {len(table)} values for {len(sizes)} batch "
                   "sizes; give one value per entry of decode_batch_sizes")
    if local not in by_batch:
        yield (f"{where}.decode_step_ms_by_batch: no table for device {local!r} (clusters.local.device); "
               f"add decode_step_ms_by_batch.{local} or drop both batch fields")


def _tail_problems(profile: ProfileSpec, where: str) -> Iterator[str]:
    """kv_tail_mib, when given: one per length, none above the cache it is the last layer of."""
    tails, sizes = profile.kv_tail_mib, profile.kv_mib
    if not tails:
        return
    if len(tails) != len(profile.lengths_tokens):
        yield (f"{where}.kv_tail_mib: {len(tails)} values for {len(profile.lengths_tokens)} lengths; give one "
               "value per entry of lengths_tokens")
    elif any(tail > size for tail, size in zip(tails, sizes, strict=False)):
        yield (f"{where}.kv_tail_mib: {list(tails)} exceeds kv_mib {list(sizes)} somewhere; a last layer "
               "holds at most its whole cache")


def _context_problems(profile: ProfileSpec, where: str) -> Iterator[str]:
    """decode_context_tokens and decode_context_factor come together, agree in length, and the
    tokens increase."""
    tokens, factors = profile.decode_context_tokens, profile.decode_context_factor
    if bool(tokens) != bool(factors):
        given, missing = (("decode_context_tokens", "decode_context_factor") if tokens
                          else ("decode_context_factor", "decode_context_tokens"))
        yield f"{where}.{given}: given without {missing}; give both or neither"
        return
    if tokens and (len(tokens) < 2 or any(b <= a for a, b in zip(tokens, tokens[1:], strict=False))):
        yield (f"{where}.decode_context_tokens: {list(tokens)} is not 2 or more strictly increasing lengths; "
               "sort it, drop repeats, give at least 2")
    if len(tokens) != len(factors):
        yield (f"{where}.decode_context_factor: {len(factors)} values for {len(tokens)} lengths; give one "
               "value per entry of decode_context_tokens")


def _cluster_problems(s: Scenario) -> Iterator[str]:
    local, policy = s.clusters.local, s.router.policy
    n_p = local.prefill_instances
    if n_p is not None and n_p >= local.instances:
        yield (f"clusters.local.prefill_instances: {n_p} must be below clusters.local.instances "
               f"({local.instances}); lower it")
    if n_p == 0 and policy is not RoutePolicy.ALL_REMOTE:
        yield (f"clusters.local.prefill_instances: 0 leaves policy {policy.value} no local "
               "prefill; use at least 1, or router.policy: all-remote")
    if local.instances < 2 and policy is not RoutePolicy.ALL_REMOTE:
        yield (f"clusters.local.instances: {local.instances} cannot hold both local prefill and "
               "decode; use at least 2, or router.policy: all-remote")
    if s.clusters.remote.instances == 0 and policy is not RoutePolicy.LOCAL_ONLY:
        yield (f"clusters.remote.instances: 0 leaves policy {policy.value} no remote prefill; "
               "add instances, or router.policy: local-only")


def _workload_problems(s: Scenario) -> Iterator[str]:
    w = s.workload
    generated = {"arrival": w.arrival, "input_len": w.input_len, "output_len": w.output_len}
    if w.trace is not None:
        extra = [k for k, v in generated.items() if v is not None]
        if w.rate_changes:
            extra.append("rate_changes")
        if w.prefix_sharing is not None:
            extra.append("prefix_sharing")
        if extra:
            yield (f"workload.trace: given together with {', '.join(extra)}; use either a trace or "
                   "arrival + input_len + output_len, remove one")
        block = s.prefix_cache.block_tokens
        if w.trace.format == "mooncake" and block != MOONCAKE_BLOCK_TOKENS:
            yield (f"prefix_cache.block_tokens: {block}, but a Mooncake trace's hash_ids each stand for "
                   f"{MOONCAKE_BLOCK_TOKENS} tokens; set prefix_cache.block_tokens: {MOONCAKE_BLOCK_TOKENS} "
                   "so shared prefixes mean what the trace says")
    elif all(v is None for v in generated.values()):
        yield "workload: no requests; add arrival + input_len + output_len, or a trace"
    else:
        for key in (k for k, v in generated.items() if v is None):
            yield (f"workload.{key}: missing; a generated workload needs arrival, input_len "
                   "and output_len, add it")
    for key in ("input_len", "output_len"):
        dist = getattr(w, key)
        if isinstance(dist, UniformLength) and dist.min > dist.max:
            yield f"workload.{key}.min: {dist.min} is above max ({dist.max}); swap them"
        if isinstance(dist, LognormalLength) and dist.min >= dist.max:
            yield f"workload.{key}.min: {dist.min} is not below max ({dist.max}); lower min"
    longest_output = longest_length(w.output_len)
    if longest_output is not None and longest_output > MAX_OUTPUT_TOKENS:
        field = "tokens" if isinstance(w.output_len, FixedLength) else "max"
        yield (f"workload.output_len.{field}: {longest_output} is above {MAX_OUTPUT_TOKENS:,} "
               "output tokens; use at most that")
    for i, change in enumerate(w.rate_changes):
        where = f"workload.rate_changes.{i}.at_s"
        if i and change.at_s <= w.rate_changes[i - 1].at_s:
            yield f"{where}: {change.at_s:g} does not come after the previous change; sort by at_s"
        if change.at_s > s.duration_s:
            yield f"{where}: {change.at_s:g} is after duration_s ({s.duration_s:g}); move it back"


def _scheduler_problems(s: Scenario) -> Iterator[str]:
    short, long = s.scheduler.short_term, s.scheduler.long_term
    if short.enabled and long.enabled and long.interval_s <= short.interval_s:
        yield (f"scheduler.long_term.interval_s: {long.interval_s:g} must exceed "
               f"scheduler.short_term.interval_s ({short.interval_s:g}); raise it")


def _timeline_problems(s: Scenario) -> Iterator[str]:
    down: set[str] = set()
    for i, event in enumerate(s.timeline):
        where = f"timeline.{i}"
        actions = [a for a in ACTIONS if getattr(event, a) is not None]
        if len(actions) != 1:
            shown = ", ".join(actions) or "none"
            yield f"{where}: actions given: {shown}; give exactly one of {', '.join(ACTIONS)}"
        at_s = event.at_s
        if at_s > s.duration_s:
            yield f"{where}.at_s: {at_s:g} is after duration_s ({s.duration_s:g}); move it earlier"
        if i and at_s < s.timeline[i - 1].at_s:
            yield f"{where}.at_s: {at_s:g} comes before timeline.{i - 1}; sort the timeline by at_s"
        for key, value in (event.set or {}).items():  # values: the scenario revalidated with the set applied
            if key not in KNOBS:
                yield f"{where}.set.{key}: unknown knob; use one of {', '.join(KNOBS)}"
            elif value == "auto" and not KNOBS[key].allows_auto:  # a rate's `auto` is resolved once, at start
                yield f"{where}.set.{key}: auto is not a value this knob takes mid-run; give a number"
        for key in event.link or {}:
            if key not in LinkSpec.model_fields:
                known = ", ".join(LinkSpec.model_fields)
                yield f"{where}.link.{key}: unknown link field; use one of {known}"
        if event.burst is not None and s.workload.input_len is None:
            yield (f"{where}.burst: a burst draws lengths from workload.input_len/output_len, "
                   "which this workload lacks; remove it or generate the workload")
        yield from _node_problems(s.clusters, event.kill, f"{where}.kill", down, is_kill=True)
        yield from _node_problems(s.clusters, event.restart, f"{where}.restart", down, False)


def _node_problems(
    clusters: ClustersSpec, text: str | None, where: str, down: set[str], is_kill: bool
) -> Iterator[str]:
    """Kill or restart of `text`: it must name an existing node; a restart must follow its kill."""
    if text is None:
        return
    try:
        node = NodeId.parse(text)
    except ValueError as err:
        yield f"{where}: {err}"
        return
    slots = node_slots(clusters, node.cluster, node.role)
    if node.index not in slots:
        yield (f"{where}: {text} does not exist ({node.cluster.value}-{node.role.value} nodes are "
               f"{_describe_slots(slots)}); use one of those indices")
    elif is_kill:
        down.add(str(node))
    elif str(node) not in down:
        yield f"{where}: {text} is not down at that time; kill it first or drop the restart"
    else:
        down.discard(str(node))


def node_slots(clusters: ClustersSpec, cluster: Cluster, role: Role) -> range:
    """Indices a node of this cluster and role may have. Local nodes are numbered by slot across
    both roles (local-prefill-0..n_p-1, then local-decode-n_p..), so a node keeps its index when
    its role flips; with the split left to the optimizer any local slot may hold either role."""
    if cluster is Cluster.REMOTE:
        return range(clusters.remote.instances) if role is Role.PREFILL else range(0)
    local = clusters.local
    if local.prefill_instances is None:
        return range(local.instances)
    n_p = local.prefill_instances
    return range(n_p) if role is Role.PREFILL else range(n_p, local.instances)


def num_nodes(clusters: ClustersSpec, cluster: Cluster, role: Role) -> int:
    """Instances in one role (with the split left to the optimizer: all but one of the other)."""
    if cluster is Cluster.LOCAL and clusters.local.prefill_instances is None:
        return max(clusters.local.instances - 1, 0)
    return len(node_slots(clusters, cluster, role))


def _describe_slots(slots: range) -> str:
    if not slots:
        return "none"
    return str(slots.start) if len(slots) == 1 else f"{slots.start}..{slots.stop - 1}"


def _expect_problems(s: Scenario) -> Iterator[str]:
    for metric, bounds in s.expect.items():
        if bounds.min is None and bounds.max is None:
            yield f"expect.{metric}: no bounds; give min and/or max"
        elif bounds.min is not None and bounds.max is not None and bounds.min > bounds.max:
            yield f"expect.{metric}.min: {bounds.min:g} is above max ({bounds.max:g}); swap them"


def _ray_problems(s: Scenario) -> Iterator[str]:
    if s.ray is not None and s.engine != "live":
        yield "ray: only the live engine places workers on Ray nodes; remove the section or use engine: live"
    elif s.ray is not None and s.ray.remote_resource == s.ray.local_resource:
        yield (f"ray.local_resource: {s.ray.local_resource!r} is also the remote_resource; give each "
               "cluster its own resource, e.g. prfaas_remote and prfaas_local")


def longest_length(dist: LengthDist | None) -> int | None:
    """The longest length a generated distribution can draw; None where it is not known without
    reading a file (empirical lengths, traces)."""
    if isinstance(dist, FixedLength):
        return dist.tokens
    if isinstance(dist, UniformLength | LognormalLength):
        return dist.max
    return None


def scenario_warnings(s: Scenario) -> list[str]:
    """Valid but probably unintended settings, one `path: what; fix` line each (validate prints
    them): a live link faster than a userspace backend carries, and a threshold that routes
    nothing remote."""
    return [*_link_ceiling_warnings(s), *_threshold_warnings(s)]


def _link_ceiling_warnings(s: Scenario) -> list[str]:
    """A live link above the tun backend's measured ceiling: tun runs where the kernel lacks
    sch_netem. The backend is chosen at run time, which warns again for the one chosen, and for
    each shape the timeline applies."""
    return ceiling_warnings("tun", s.link) if s.engine == "live" else []


def _threshold_warnings(s: Scenario) -> list[str]:
    """A fixed threshold above every input the workload can draw routes nothing remote: legal (a
    what-if, and tests use it), but a local-only policy says so plainly."""
    longest = longest_length(s.workload.input_len)
    if longest is None or s.router.policy is not RoutePolicy.PRFAAS:
        return []
    thresholds = [("router.threshold_tokens", s.router.threshold_tokens)]
    thresholds += [(f"timeline.{i}.set.router.threshold_tokens", e.set["router.threshold_tokens"])
                   for i, e in enumerate(s.timeline) if e.set and "router.threshold_tokens" in e.set]
    return [f"{where}: {value} is above the longest input the workload can produce ({longest}); "
            "nothing goes remote, lower it or use router.policy: local-only"
            for where, value in thresholds if isinstance(value, int) and value > longest]
