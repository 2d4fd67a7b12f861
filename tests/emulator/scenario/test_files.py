"""Files a scenario names (length lists, traces) are read only from the repository, the shared
traces folder, the directory of the scenario file the user named, or PRFAAS_DATA_DIRS; an error
names the file and line and never echoes what the file holds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from emulator.errors import ScenarioError
from emulator.scenario import apply_overrides, load_scenario
from emulator.workload.build import build_requests

REPO = Path(__file__).resolve().parents[3]
SCENARIOS = REPO / "scenarios"
SECRET = "s3cr3t-Zq9"


def quickstart():
    return load_scenario(SCENARIOS / "live-quickstart.yaml")


@pytest.fixture
def outside(tmp_path_factory):
    """A directory outside every allowed root, holding a secret in a length file."""
    where = tmp_path_factory.mktemp("elsewhere")
    (where / "secret.txt").write_text(f"{SECRET}\n")
    return where


@pytest.mark.parametrize("path", ["/etc/passwd", "/proc/self/environ"])
def test_set_cannot_name_a_system_file(path):
    with pytest.raises(ScenarioError) as err:
        apply_overrides(quickstart(), [f"workload.input_len={{kind: empirical, path: {path}}}"])
    text = str(err.value)
    assert text.startswith("workload.input_len.path: ") and "outside the folders" in text
    assert "root:" not in text and "PATH=" not in text and "\n" not in text


def test_set_cannot_name_a_file_elsewhere(outside, monkeypatch):
    monkeypatch.chdir(outside)
    with pytest.raises(ScenarioError) as err:
        apply_overrides(quickstart(), ["workload.input_len={kind: empirical, path: secret.txt}"])
    assert "outside the folders" in str(err.value) and SECRET not in str(err.value)


def test_a_symlink_out_of_the_scenario_directory_is_refused(tmp_path, outside):
    (tmp_path / "lengths.txt").symlink_to(outside / "secret.txt")
    doc = yaml.safe_load((SCENARIOS / "live-quickstart.yaml").read_text())
    doc["workload"]["input_len"] = {"kind": "empirical", "path": "lengths.txt"}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(ScenarioError, match="outside the folders"):
        load_scenario(tmp_path / "s.yaml")


def test_data_dirs_from_the_environment_are_allowed(outside, monkeypatch):
    (outside / "ok.txt").write_text("100\n200\n")
    monkeypatch.setenv("PRFAAS_DATA_DIRS", str(outside))
    s = apply_overrides(quickstart(), [f"workload.input_len={{kind: empirical, path: {outside / 'ok.txt'}}}"])
    assert s.workload.input_len.path == outside / "ok.txt"


def test_overrides_keep_the_scenario_directory_allowed(tmp_path, monkeypatch):
    (tmp_path / "lengths.txt").write_text("100\n2000\n")
    doc = yaml.safe_load((SCENARIOS / "live-quickstart.yaml").read_text())
    doc["workload"]["input_len"] = {"kind": "empirical", "path": "lengths.txt"}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc))
    monkeypatch.chdir(REPO)
    s = apply_overrides(load_scenario(tmp_path / "s.yaml"), ["duration_s=10"])
    assert s.workload.input_len.path == tmp_path / "lengths.txt"


def test_a_bad_length_line_names_file_and_line_without_its_content(tmp_path):
    (tmp_path / "lengths.txt").write_text(f"100\n{SECRET}\n")
    doc = yaml.safe_load((SCENARIOS / "live-quickstart.yaml").read_text())
    doc["engine"] = "virtual"
    doc["workload"]["input_len"] = {"kind": "empirical", "path": "lengths.txt"}
    doc["workload"]["arrival"]["rate_per_s"] = 0.5  # shipped as auto, which only a run resolves
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(ScenarioError) as err:
        build_requests(load_scenario(tmp_path / "s.yaml"))
    text = str(err.value)
    assert f"{tmp_path / 'lengths.txt'} line 2" in text and SECRET not in text


@pytest.mark.live
def test_the_command_line_never_prints_a_system_file():
    out = subprocess.run(
        [sys.executable, "-m", "emulator", "run", "scenarios/live-quickstart.yaml", "--engine", "virtual",
         "--no-broker", "--set", "workload.input_len={kind: empirical, path: /etc/passwd}"],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "root:" not in out.stderr and "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1
