"""A scenario file (YAML) as one frozen pydantic model: the schema and loading (schema.py), its
sections (parts.py, model_section.py with its profile files, workload.py), cross-field rules
(rules.py), `--set` overrides (overrides.py), the bounded file and YAML readers (file_text.py,
yaml_reader.py) and the files a scenario may read (shared_data.py). Callers import the public names
from here."""

from emulator.scenario.schema import (
    Scenario,
    apply_overrides,
    load_scenario,
    parse_scenario,
    scenario_json_schema,
)

__all__ = ["Scenario", "apply_overrides", "load_scenario", "parse_scenario", "scenario_json_schema"]
