"""Scenario files: the shipped ones validate, documents round-trip, bad ones fail with one line per
problem naming the field and the fix, junk never escapes as anything but a ScenarioError."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from emulator.control.types import Cluster, NodeId, Role, RoutePolicy
from emulator.errors import ScenarioError
from emulator.scenario import (
    Scenario,
    apply_overrides,
    load_scenario,
    parse_scenario,
    scenario_json_schema,
)
from emulator.scenario.overrides import KNOBS
from emulator.scenario.workload import LognormalLength, PoissonArrival

REPO = Path(__file__).resolve().parents[3]
SCENARIO_DIR = REPO / "scenarios"
SCENARIO_FILES = sorted(SCENARIO_DIR.glob("*.yaml"))
TRACE = (REPO.parent / "shared" / "traces" / "mooncake_synthetic_trace.jsonl").resolve()


def raw(name: str) -> dict:
    return yaml.safe_load((SCENARIO_DIR / f"{name}.yaml").read_text())


def problems(data: dict, base_dir: Path = SCENARIO_DIR) -> list[str]:
    with pytest.raises(ScenarioError) as err:
        parse_scenario(data, base_dir)
    return str(err.value).splitlines()


def test_the_shipped_scenarios_are_there():
    names = {p.stem for p in SCENARIO_FILES}
    assert {"paper-case-study", "classroom-basic", "mooncake-replay"} <= names


@pytest.mark.parametrize("path", SCENARIO_FILES, ids=lambda p: p.name)
def test_every_shipped_scenario_validates(path: Path):
    scenario = load_scenario(path)
    assert scenario.name == path.stem


def test_case_study_holds_the_papers_inputs():
    s = load_scenario(SCENARIO_DIR / "paper-case-study.yaml")
    profile = s.model.profile
    assert (s.engine, s.model.preset, s.duration_s) == ("virtual", None, 600)
    assert profile.name == "internal-1t-kimi-linear"
    assert profile.lengths_tokens == (1024, 8192, 32768, 131072)
    assert profile.kv_mib == (190.8, 308.9, 701.3, 2316.3)
    assert profile.prefill_s == {
        "h200": (0.44, 0.72, 1.84, 7.40), "h20": (1.00, 1.543, 5.017, 21.0)}
    assert profile.decode_step_ms == {"h20": 25}
    remote, local = s.clusters.remote, s.clusters.local
    assert (remote.instances, remote.device, local.instances, local.device) == (4, "h200", 8, "h20")
    assert local.prefill_instances is None and local.decode_max_batch == 20
    assert s.clusters.baseline_num_instances == 12
    assert (s.link.bandwidth_mbit, s.link.delay_ms) == (100_000, 5)
    assert (s.router.policy, s.router.threshold_tokens) == (RoutePolicy.PRFAAS, "auto")
    assert s.workload.input_len == LognormalLength(
        kind="lognormal", mu=9.90, sigma=1.0, min=128, max=131072)
    assert s.workload.output_len.tokens == 1024
    assert isinstance(s.workload.arrival, PoissonArrival)


def test_trace_path_resolves_against_the_scenario_directory():
    s = load_scenario(SCENARIO_DIR / "mooncake-replay.yaml")
    assert s.workload.trace.path.resolve() == TRACE and s.workload.trace.max_requests == 1000


def test_classroom_timeline_reads_as_events():
    s = load_scenario(SCENARIO_DIR / "classroom-basic.yaml")
    assert [(e.at_s, e.action) for e in s.timeline] == [(20, "link"), (40, "set")]
    assert s.model.preset == "kimi-linear-mini" and s.model.preset_size == "tiny"


@pytest.mark.parametrize("path", SCENARIO_FILES, ids=lambda p: p.name)
def test_round_trip_and_the_schema_accepts_the_dump(path: Path):
    s = load_scenario(path)
    assert parse_scenario(s.model_dump(), Path("/")) == s
    dumped = json.loads(s.model_dump_json())
    assert parse_scenario(dumped, Path("/")) == s
    jsonschema.Draft202012Validator(scenario_json_schema()).validate(dumped)


def test_schema_names_the_sections():
    schema = scenario_json_schema()
    required = {"name", "engine", "duration_s", "model", "clusters", "workload"}
    assert set(schema["required"]) == required
    assert set(schema["properties"]) == set(Scenario.model_fields)
    assert schema["additionalProperties"] is False


def _set(path: str, value):
    def mutate(doc: dict) -> None:
        *parents, last = path.split(".")
        node = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        node[last] = value
    return mutate


def _drop(path: str):
    def mutate(doc: dict) -> None:
        *parents, last = path.split(".")
        node = doc
        for part in parents:
            node = node[part]
        del node[last]
    return mutate


TRACE_REL = "../../shared/traces/mooncake_synthetic_trace.jsonl"


def case(label: str, mutate, starts: str, fix: str):
    """An edit of the case study, the start of the line it must produce, and the fix it offers."""
    return pytest.param(mutate, starts, fix, id=label)


def at(time_s: float, **action) -> list[dict]:
    return [{"at_s": time_s, **action}]


CASES = [
    case("unknown key", _set("routr", {}), "routr: unknown field", "remove it (known: name,"),
    case("unknown nested key", _set("router.threshhold_tokens", 5),
         "router.threshhold_tokens: unknown", "known: policy, threshold_tokens"),
    case("negative rate", _set("workload.arrival.rate_per_s", -2.0),
         "workload.arrival.rate_per_s: -2.0", "use a rate from 1e-06 to 100000"),
    case("NaN duration", _set("duration_s", float("nan")), "duration_s: nan", "use a positive"),
    case("bool as a count", _set("clusters.remote.instances", True),
         "clusters.remote.instances: True", "use a whole number"),
    case("preset and profile", _set("model.preset", "kimi-linear-mini"),
         "model: both of preset and profile", "give exactly one"),
    case("neither preset nor profile", _drop("model.profile"), "model: neither",
         "give exactly one"),
    case("unknown preset", lambda d: d.update(model={"preset": "gpt-5"}),
         "model.preset: 'gpt-5'", "use one of kimi-linear-mini"),
    case("table lengths differ", _set("model.profile.prefill_s.h20", [1.0, 2.0, 3.0]),
         "model.profile.prefill_s.h20: 3 values for 4 lengths", "give one value per entry"),
    case("lengths not increasing", _set("model.profile.lengths_tokens", [1024, 8192, 8192, 131072]),
         "model.profile.lengths_tokens: [1024, 8192, 8192, 131072] is not strictly", "sort it"),
    case("device without a profile", _set("clusters.local.device", "a100"),
         "model.profile.prefill_s: no table for device 'a100'", "add prefill_s.a100"),
    case("local device without decode", _set("model.profile.decode_step_ms", {"h200": 30}),
         "model.profile.decode_step_ms: no value for device 'h20'", "add decode_step_ms.h20"),
    case("split leaves no decode", _set("clusters.local.prefill_instances", 8),
         "clusters.local.prefill_instances: 8 must be below clusters.local.instances (8)",
         "lower it"),
    case("trace and arrival", _set("workload.trace", {"format": "mooncake", "path": TRACE_REL}),
         "workload.trace: given together with arrival, input_len, output_len", "remove one"),
    case("generated without lengths", _drop("workload.input_len"), "workload.input_len: missing",
         "add it"),
    case("missing length file", _set("workload.input_len", {"kind": "empirical", "path": "no.txt"}),
         "workload.input_len.path: 'no.txt'", "a relative path starts at the scenario file's"),
    case("unknown arrival kind", _set("workload.arrival", {"kind": "weibull", "rate_per_s": 1}),
         "workload.arrival: invalid (input tag 'weibull'", "use kind: poisson"),
    case("field of another arrival kind", _set("workload.arrival.cv", 2.0),
         "workload.arrival.cv: unknown", "known: kind, rate_per_s"),
    case("threshold neither int nor auto", _set("router.threshold_tokens", "big"),
         "router.threshold_tokens: 'big'", "or auto"),
    case("renamed cache_affinity", _set("router.cache_affinity", True), "router.cache_affinity: renamed",
         "use router.affinity: cost | longest-prefix | off"),
    case("unknown affinity", _set("router.affinity", "sticky"), "router.affinity: 'sticky'",
         "use cost (least estimated TTFT), longest-prefix"),
    case("link out of range", _set("link.delay_ms", -5), "link.delay_ms: -5", "use 0 for no added"),
    case("unsorted timeline",
         _set("timeline", [*at(60, kill="local-prefill-0"), *at(30, link={"delay_ms": 10})]),
         "timeline.1.at_s: 30 comes before timeline.0", "sort the timeline by at_s"),
    case("event after the end", _set("timeline", at(601, burst={"requests": 5})),
         "timeline.0.at_s: 601 is after duration_s (600)", "move it earlier"),
    case("kill of a missing node", _set("timeline", at(1, kill="remote-prefill-4")),
         "timeline.0.kill: remote-prefill-4 does not exist (remote-prefill nodes are 0..3)", "use one of those"),
    case("kill of a malformed node", _set("timeline", at(1, kill="remote-decode-0")),
         "timeline.0.kill: node 'remote-decode-0'", "use remote-prefill-<i>"),
    case("restart without a kill", _set("timeline", at(1, restart="local-decode-0")),
         "timeline.0.restart: local-decode-0 is not down", "kill it first"),
    case("two actions in one event",
         _set("timeline", at(1, kill="local-decode-0", burst={"requests": 3})),
         "timeline.0: actions given: burst, kill", "give exactly one of"),
    case("unknown knob", _set("timeline", at(1, set={"router.thresh": 5})),
         "timeline.0.set.router.thresh: unknown knob", "use one of router.threshold_tokens"),
    case("knob value out of range", _set("timeline", at(1, set={"router.threshold_tokens": -1})),
         "timeline.0.set.router.threshold_tokens: -1", "use a whole number of tokens >= 0"),
    case("knob breaks a rule",
         _set("timeline", at(1, set={"clusters.local.prefill_instances": 9})),
         "timeline.0.set.clusters.local.prefill_instances: 9 must be below", "lower it"),
    case("link change out of range", _set("timeline", at(1, link={"bandwidth_mbit": 0})),
         "timeline.0.link.bandwidth_mbit: 0", "null for an unshaped link"),
    case("unknown link field in a change", _set("timeline", at(1, link={"rate": 5})),
         "timeline.0.link.rate: unknown link field", "use one of bandwidth_mbit"),
    case("too many TCP connections", _set("transport.connections", 65),
         "transport.connections: 65", "1 to 64"),
    case("unknown congestion control", _set("transport.congestion", "vegas"),
         "transport.congestion: 'vegas'", "use cubic, reno or bbr"),
    case("bad expect metric", _set("expect", {"ttft_p95_s": {"max": 3}}),
         "expect.ttft_p95_s: 'ttft_p95_s'", "use one of 'completed_fraction'"),
    case("expect without bounds", _set("expect", {"ttft_p90_s": {}}),
         "expect.ttft_p90_s: no bounds", "give min and/or max"),
    case("expect bounds crossed", _set("expect", {"ttft_p90_s": {"min": 5, "max": 1}}),
         "expect.ttft_p90_s.min: 5 is above max (1)", "swap them"),
]


@pytest.mark.parametrize("mutate, starts, fix", CASES)
def test_bad_documents_name_the_field_and_the_fix(mutate, starts, fix):
    doc = raw("paper-case-study")
    mutate(doc)
    lines = problems(doc)
    assert any(line.startswith(starts) and fix in line for line in lines), lines


def test_every_problem_gets_its_own_line():
    doc = raw("paper-case-study")
    doc["bogus"] = 1
    doc["router"]["policy"] = "fastest"
    doc["workload"]["arrival"]["rate_per_s"] = 0
    lines = problems(doc)
    paths = sorted(line.split(":")[0] for line in lines)
    assert paths == ["bogus", "router.policy", "workload.arrival.rate_per_s"]
    assert all("; " in line for line in lines)


def test_link_changes_accumulate_and_knobs_see_the_earlier_ones():
    doc = raw("classroom-basic")
    doc["timeline"] = [
        {"at_s": 1, "link": {"loss_pct": 1.0}},
        {"at_s": 2, "link": {"loss_correlation_pct": 25}},  # valid only because loss is now 1 %
        {"at_s": 3, "set": {"link.loss_pct": 0}},  # now the correlation has no loss to correlate
    ]
    assert problems(doc) == [
        "timeline.2.set.link: loss_correlation_pct needs loss_pct > 0; "
        "set loss_pct or drop the correlation"
    ]


def test_kill_restart_and_knobs_that_hold():
    doc = raw("paper-case-study")
    doc["timeline"] = [
        {"at_s": 10, "kill": "local-prefill-6"},
        {"at_s": 20, "restart": "local-prefill-6"},
        {"at_s": 30, "set": {key: value for key, value in [
            ("router.threshold_tokens", 8000), ("router.policy", "local-only"),
            ("router.affinity", "off"), ("scheduler.short_term.enabled", False),
            ("scheduler.long_term.enabled", False), ("clusters.local.prefill_instances", 3),
            ("workload.arrival.rate_per_s", 4.0), ("link.bandwidth_mbit", 20000),
            ("link.delay_ms", 40), ("link.loss_pct", 0.1), ("link.jitter_ms", 2),
        ]}},
    ]
    s = parse_scenario(doc, SCENARIO_DIR)
    assert s.timeline[0].node_id == NodeId(Cluster.LOCAL, Role.PREFILL, 6)
    assert set(s.timeline[2].set) == set(KNOBS)


def test_knob_on_a_section_the_scenario_lacks():
    doc = raw("mooncake-replay")
    doc["timeline"] = [{"at_s": 1, "set": {"workload.arrival.rate_per_s": 3.0}}]
    assert problems(doc) == [
        "timeline.0.set.workload.arrival.rate_per_s: this scenario has no workload.arrival; "
        "remove the knob"
    ]


def test_overrides_apply_and_revalidate():
    s = load_scenario(SCENARIO_DIR / "paper-case-study.yaml")
    t = apply_overrides(s, ["router.threshold_tokens=8000", "link.bandwidth_mbit=500",
                            "clusters.local.prefill_instances=3", "expect.ttft_p90_s={max: 10}"])
    assert (t.router.threshold_tokens, t.link.bandwidth_mbit) == (8000, 500)
    assert t.clusters.local.prefill_instances == 3 and t.expect["ttft_p90_s"].max == 10
    assert t.model == s.model and t.workload == s.workload
    unsplit = apply_overrides(t, ["clusters.local.prefill_instances="])
    assert unsplit.clusters.local.prefill_instances is None
    assert apply_overrides(s, []) == s


@pytest.mark.parametrize(
    "item, message",
    [
        ("clusters.local.prefill_instances=8", "clusters.local.prefill_instances: 8 must be below"),
        ("router.threshold_tokens=-3", "router.threshold_tokens: -3 is invalid"),
        ("router.threshold=3", "--set router.threshold: unknown path; known here: policy"),
        ("routing.policy=prfaas", "--set routing: unknown path"),
        ("workload.arrival.cv=2", "--set workload.arrival.cv: unknown path; known here: kind,"),
        ("workload.trace.path=x.jsonl", "--set workload.trace: this scenario has no"),
        ("router.policy.x=1", "--set router.policy.x: unknown path"),
        ("timeline.0.at_s=1", "--set timeline.0: no such item"),
        ("threshold", "--set threshold: not path=value"),
    ],
)
def test_bad_overrides_name_the_path(item, message):
    s = load_scenario(SCENARIO_DIR / "paper-case-study.yaml")
    with pytest.raises(ScenarioError) as err:
        apply_overrides(s, [item])
    assert str(err.value).startswith(message)


def test_relative_paths_start_at_the_scenario_file(tmp_path, monkeypatch):
    (tmp_path / "lengths.txt").write_text("100\n2000\n")
    doc = raw("classroom-basic")
    doc["workload"]["input_len"] = {"kind": "empirical", "path": "lengths.txt"}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc))
    monkeypatch.chdir(REPO)
    assert load_scenario(tmp_path / "s.yaml").workload.input_len.path == tmp_path / "lengths.txt"


@pytest.mark.parametrize(
    "text, message",
    [
        ("name: x\nengine: [virtual\n", ":3: YAML syntax error"),
        ("name: x\nengine: virtual\nname: y\n", ":3: YAML syntax error (duplicate key 'name'"),
        ("- a\n- b\n", "the top level is list, not a mapping"),
        ("", "the top level is NoneType, not a mapping"),
    ],
)
def test_unreadable_files_give_one_line(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert str(err.value).startswith(str(path)) and message in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(ScenarioError, match=r"nope\.yaml: file not found; check the path"):
        load_scenario(tmp_path / "nope.yaml")


scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
junk = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=12) | st.integers(), inner, max_size=4),
    max_leaves=20,
)
keys = st.sampled_from(sorted({*Scenario.model_fields, "preset", "profile", "remote", "local",
                               "arrival", "kind", "rate_per_s", "at_s", "set", "kill"}))


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(keys, junk, max_size=8) | junk)
def test_junk_gives_a_scenario_error(data):
    with pytest.raises(ScenarioError) as err:
        parse_scenario(data, SCENARIO_DIR)
    assert all(": " in line for line in str(err.value).splitlines())


def _locations(node, prefix=()):
    """Every (path, container) in a document, to pick where a mutation lands."""
    if isinstance(node, dict):
        items = node.items()
    else:
        items = enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        yield (*prefix, key)
        yield from _locations(value, (*prefix, key))


CASE_STUDY = raw("paper-case-study")
CASE_STUDY_LOCATIONS = list(_locations(CASE_STUDY))


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_case_study_validates_or_says_why(data):
    doc = copy.deepcopy(CASE_STUDY)
    for _ in range(data.draw(st.integers(1, 3))):
        *parents, last = data.draw(st.sampled_from(CASE_STUDY_LOCATIONS))
        node = doc
        try:
            for part in parents:
                node = node[part]
            op = data.draw(st.sampled_from(["replace", "delete", "add"]))
            if op == "replace":
                node[last] = data.draw(junk)
            elif op == "delete":
                del node[last]
            elif isinstance(node, dict):
                node[data.draw(st.text(max_size=8))] = data.draw(junk)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed or replaced this spot
    try:
        assert isinstance(parse_scenario(doc, SCENARIO_DIR), Scenario)
    except ScenarioError as err:
        assert all(": " in line for line in str(err).splitlines())


def test_local_nodes_are_numbered_by_slot_across_both_roles() -> None:
    base = load_scenario(SCENARIO_DIR / "classroom-basic.yaml")  # local: 1 prefill (slot 0), 1 decode (slot 1)
    ok = apply_overrides(base, ["timeline=[{at_s: 1, kill: local-decode-1}]"])
    assert ok.timeline[0].node_id == NodeId(Cluster.LOCAL, Role.DECODE, 1)
    with pytest.raises(ScenarioError, match="local-decode-0 does not exist"):
        apply_overrides(base, ["timeline=[{at_s: 1, kill: local-decode-0}]"])
