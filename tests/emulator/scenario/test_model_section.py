"""The `model:` section's measured extras: the decode step by batch size and the shared host in a
profile (bounds and cross-checks, one line each), and `profile_file`, a profile kept in its own
file (resolved from the scenario's folder, bounded, validated, named in every error)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from emulator import limits
from emulator.errors import ScenarioError
from emulator.plane.inputs import MIB, host_costs, profile_tables
from emulator.scenario import load_scenario, parse_scenario
from emulator.scenario.model_section import ProfileFile, profile_file_yaml, read_profile_file

PROFILE: dict[str, Any] = {
    "name": "box", "lengths_tokens": [1000, 4000], "kv_mib": [1.0, 4.0], "prefill_s": {"cpu": [1.0, 4.0]},
    "decode_step_ms": {"cpu": 80.0}, "decode_batch_sizes": [1, 2, 4],
    "decode_step_ms_by_batch": {"cpu": [20.0, 40.0, 80.0]}, "host": {"cores": 2, "busy_slowdown": [1.0, 1.0, 1.5]},
}
SCENARIO: dict[str, Any] = {
    "name": "box", "engine": "virtual", "duration_s": 10,
    "model": {"profile": PROFILE},
    "clusters": {"remote": {"instances": 1, "device": "cpu"},
                 "local": {"instances": 2, "device": "cpu", "prefill_instances": 1, "decode_max_batch": 4}},
    "link": {"bandwidth_mbit": 100, "delay_ms": 10},
    "router": {"policy": "prfaas", "threshold_tokens": 2048},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1.0},
                 "input_len": {"kind": "uniform", "min": 1000, "max": 4000},
                 "output_len": {"kind": "fixed", "tokens": 8}},
}


def scenario_doc(**profile: Any) -> dict[str, Any]:
    doc = copy.deepcopy(SCENARIO)
    doc["model"]["profile"].update(profile)
    return doc


def problems(doc: dict[str, Any], base_dir: Path = Path.cwd()) -> list[str]:
    with pytest.raises(ScenarioError) as err:
        parse_scenario(doc, base_dir, trusted_dir=base_dir)
    return str(err.value).splitlines()


def write_file(folder: Path, profile: dict[str, Any] | None = None, **measured: Any) -> Path:
    doc: dict[str, Any] = {"model": {"profile": profile or PROFILE}}
    if measured:
        doc = {"measured": measured, **doc}
    path = folder / "box.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_profile_with_batch_steps_and_a_host_becomes_the_virtual_engines_tables() -> None:
    scenario = parse_scenario(scenario_doc(), Path.cwd())
    costs = host_costs(scenario)
    assert costs.decode_step_by_batch_s is not None
    assert costs.decode_step_by_batch_s.xs == (1.0, 2.0, 4.0)
    assert costs.decode_step_by_batch_s.ys == (0.02, 0.04, 0.08)
    assert (costs.busy_slowdown, costs.host_cores) == ((1.0, 1.0, 1.5), 2)
    assert profile_tables(scenario).decode_step_s == {"cpu": 0.08}


def test_a_profile_without_them_has_neither() -> None:
    doc = scenario_doc()
    for key in ("decode_batch_sizes", "decode_step_ms_by_batch", "host"):
        del doc["model"]["profile"][key]
    costs = host_costs(parse_scenario(doc, Path.cwd()))
    assert (costs.decode_step_by_batch_s, costs.busy_slowdown, costs.host_cores) == (None, (), 0)


@pytest.mark.parametrize(("change", "line"), [
    ({"host": {"cores": 0, "busy_slowdown": [1.0]}},
     "model.profile.host.cores: 0 is invalid (input should be greater than or equal to 1); use a whole number "
     "of cores"),
    ({"host": {"cores": 2, "busy_slowdown": [1.0, limits.MAX_SLOWDOWN * 2]}},
     "model.profile.host.busy_slowdown.1: 2000.0 is invalid (input should be less than or equal to 1000); use a "
     "value of at most 1000.0"),
    ({"host": {"cores": 2, "busy_slowdown": []}}, "model.profile.host.busy_slowdown: [] is invalid"),
    ({"host": {"cores": 2, "busy_slowdown": [1.0] * (limits.MAX_BUSY_WORKERS + 1)}},
     "model.profile.host.busy_slowdown: "),
    ({"host": {"cores": 2, "busy_slowdown": [1.0], "loss_rate_factor": limits.MAX_LOSS_RATE_FACTOR * 2}},
     "model.profile.host.loss_rate_factor: 20.0 is invalid (input should be less than or equal to 10); give the "
     "share of the loss-limited rate kept, 0.1 to 10 (1: a quiet host)"),
    ({"host": {"cores": 2, "busy_slowdown": [1.0], "compute_factor": 0.1}},
     "model.profile.host.compute_factor: 0.1 is invalid (input should be greater than or equal to 0.2); give the "
     "host's compute time over the profile's, 0.2 to 5 (1: as profiled)"),
    ({"host": {"cores": 2, "busy_slowdown": [2.0, 3.0]}},
     "model.profile.host.busy_slowdown: starts at 2; one busy worker is the reference"),
    ({"decode_batch_sizes": [1, 2, 2]}, "model.profile.decode_batch_sizes: [1, 2, 2] is not 2 or more strictly"),
    ({"decode_batch_sizes": [1, limits.MAX_DECODE_BATCH + 1]}, "model.profile.decode_batch_sizes.1: 4097 is invalid"),
    ({"decode_step_ms_by_batch": {"cpu": [20.0, 40.0]}},
     "model.profile.decode_step_ms_by_batch.cpu: 2 values for 3 batch sizes; give one value per entry"),
    ({"decode_step_ms_by_batch": {"cpu": [20.0, 40.0, 1e12]}},
     "model.profile.decode_step_ms_by_batch.cpu.2: 1000000000000.0 is invalid"),
    ({"decode_step_ms_by_batch": {"gpu": [20.0, 40.0, 80.0]}},
     "model.profile.decode_step_ms_by_batch: no table for device 'cpu' (clusters.local.device)"),
    ({"decode_step_ms_by_batch": {}},
     "model.profile.decode_batch_sizes: given without decode_step_ms_by_batch; give both or neither"),
    ({"kv_tail_mib": [0.5, 0.0]}, "model.profile.kv_tail_mib.1: 0.0 is invalid"),
    ({"kv_tail_mib": [0.5]}, "model.profile.kv_tail_mib: 1 values for 2 lengths; give one value per entry"),
    ({"kv_tail_mib": [0.5, 4.5]}, "model.profile.kv_tail_mib: [0.5, 4.5] exceeds kv_mib [1.0, 4.0] somewhere"),
])
def test_bad_batch_or_host_fields_get_one_line_naming_the_field(change: dict[str, Any], line: str) -> None:
    found = problems(scenario_doc(**change))
    assert len(found) == 1 and found[0].startswith(line), found


def test_a_profile_file_is_read_relative_to_the_scenario_and_wins_over_the_preset_estimate(tmp_path: Path) -> None:
    write_file(tmp_path, preset="kimi-linear-mini", size="small", kind="machine")
    doc = copy.deepcopy(SCENARIO)
    doc["model"] = {"preset": "kimi-linear-mini", "size": "small", "profile_file": "box.yaml"}
    doc["engine"] = "live"  # the live engine runs the preset; the file is for the virtual twin
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    scenario = load_scenario(path)
    assert scenario.model.profile_file == tmp_path / "box.yaml"
    assert scenario.model.measured_profile is not None and scenario.model.measured_profile.name == "box"
    tables = profile_tables(scenario)
    assert (tables.source, tables.prefill_s, tables.kv_bytes) == ("profile box", {"cpu": (1.0, 4.0)}, (MIB, 4.0 * MIB))
    again = parse_scenario(scenario.model_dump(mode="json"), Path.cwd())  # --set and `auto` re-parse the dump
    assert again.model.measured_profile == scenario.model.measured_profile


def test_profile_file_errors_name_the_field_and_the_file(tmp_path: Path) -> None:
    doc = copy.deepcopy(SCENARIO)
    doc["model"] = {"profile_file": "missing.yaml"}
    assert problems(doc, tmp_path) == [
        f"model.profile_file: 'missing.yaml' is invalid (no file at {tmp_path / 'missing.yaml'}); "
        "name a profile YAML file (`python -m emulator calibrate SCENARIO --machine` writes one)"]
    bad = dict(PROFILE, kv_mib=[1.0, -4.0])
    write_file(tmp_path, bad)
    doc["model"] = {"profile_file": "box.yaml"}
    assert problems(doc, tmp_path) == [
        f"model.profile_file: {tmp_path / 'box.yaml'}: model.profile.kv_mib.1: -4.0 is invalid (input should be "
        "greater than 0); use a value above 0.0"]
    (tmp_path / "box.yaml").write_text("- a list\n")
    assert problems(doc, tmp_path) == [
        f"model.profile_file: {tmp_path / 'box.yaml'}: the top level is list, not a mapping; start the file "
        "with `model: {profile: ...}`"]
    (tmp_path / "box.yaml").write_text("#" * (limits.MAX_PROFILE_FILE_BYTES + 1))
    assert problems(doc, tmp_path) == [
        f"model.profile_file: {tmp_path / 'box.yaml'}: larger than {limits.MAX_PROFILE_FILE_BYTES:,} bytes; a "
        "profile file is a few KiB; name the file `calibrate` wrote"]


def test_the_file_checks_against_the_scenario_like_an_inline_profile(tmp_path: Path) -> None:
    write_file(tmp_path, dict(PROFILE, prefill_s={"gpu": [1.0, 4.0]}))
    doc = copy.deepcopy(SCENARIO)
    doc["model"] = {"profile_file": "box.yaml"}
    assert problems(doc, tmp_path) == [
        "model.profile_file (box.yaml): model.profile.prefill_s: no table for device 'cpu' (clusters.remote.device); "
        "add prefill_s.cpu or change the device",
        "model.profile_file (box.yaml): model.profile.prefill_s: no table for device 'cpu' (clusters.local.device); "
        "add prefill_s.cpu or change the device"]


@pytest.mark.parametrize(("model", "engine", "line"), [
    ({"profile": PROFILE, "profile_file": "box.yaml"}, "virtual",
     "model: both profile and profile_file given; give exactly one"),
    ({"profile_file": "box.yaml"}, "live",
     "model.profile_file: the live engine runs a model_stub preset, not a profile; add model.preset"),
    ({"preset": "dense-gqa-mini", "profile_file": "box.yaml"}, "live",
     "model.profile_file: measured for kimi-linear-mini (small), but model.preset is dense-gqa-mini (small)"),
])
def test_which_model_fields_go_together(tmp_path: Path, model: dict[str, Any], engine: str, line: str) -> None:
    write_file(tmp_path, preset="kimi-linear-mini", size="small")
    doc = dict(copy.deepcopy(SCENARIO), model=model, engine=engine)
    found = problems(doc, tmp_path)
    assert len(found) == 1 and found[0].startswith(line), found


def test_a_profile_file_round_trips_through_its_yaml(tmp_path: Path) -> None:
    loaded = ProfileFile.model_validate({"measured": {"kind": "machine", "host": "box", "cores": 2},
                                         "model": {"profile": PROFILE}})
    path = tmp_path / "p.yaml"
    path.write_text(profile_file_yaml(loaded, "measured by hand"))
    assert path.read_text().startswith("# measured by hand\nmeasured: {kind: machine, host: box, cores: 2}\n")
    assert read_profile_file(path) == loaded
