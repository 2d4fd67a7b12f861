"""Cost models and the hardware catalog: the scalar curve is the profile table to the last bit,
and the catalog holds the case study's tables as the scenario file does."""

from __future__ import annotations

import numpy as np
import pytest

from emulator.control.profiles import PiecewiseLinear
from emulator.control.types import Cluster
from emulator.errors import ScenarioError
from emulator.plane.inputs import model_inputs, profile_tables
from emulator.scenario import Scenario
from emulator.virtual.catalog import case_study_tables, device, profile_document
from emulator.virtual.costs import CostModel, Curve
from model_stub.config import get_preset


def test_curve_matches_piecewise_linear_bit_for_bit_inside_and_beyond_the_table(case_study: Scenario) -> None:
    inputs, _ = model_inputs(case_study)
    probes = np.concatenate(([0.0, 1.0, 1024.0, 131072.0, 500_000.0], np.linspace(1, 300_000, 2001)))
    for table in (inputs.kv_bytes, inputs.prefill_remote_s, inputs.prefill_local_s):
        curve = Curve.from_table(table)
        assert [curve(float(x)) for x in probes] == [float(y) for y in table(probes)]


def test_cost_model_reads_the_planes_inputs(case_study: Scenario) -> None:
    inputs, tables = model_inputs(case_study)
    costs = CostModel.from_inputs(inputs, tables.source)
    assert costs.prefill_s[Cluster.REMOTE](8192) == pytest.approx(0.72)
    assert costs.prefill_s[Cluster.LOCAL](32768) == pytest.approx(5.017)
    assert costs.kv_bytes(131072) == pytest.approx(2316.3 * 2**20)
    assert costs.decode_s(1024) == pytest.approx(1023 * 0.025) and costs.decode_s(1) == 0.0
    assert costs.max_decode_batch == 20 and costs.tail_fraction(8192) == pytest.approx(1 / 61)


def test_catalog_holds_the_case_study_tables_of_the_scenario_file(case_study: Scenario) -> None:
    catalog, scenario = case_study_tables(), profile_tables(case_study)
    assert catalog.lengths == scenario.lengths and catalog.kv_bytes == scenario.kv_bytes
    assert catalog.prefill_s == scenario.prefill_s and catalog.decode_step_s == scenario.decode_step_s
    assert profile_document(catalog, "x")["prefill_s"]["h20"] == [1.0, 1.543, 5.017, 21.0]
    with pytest.raises(ScenarioError, match="device 'a100': not in the hardware catalog"):
        device("a100")


def test_a_caches_layers_are_the_presets_own_with_the_measured_last_layer(case_study: Scenario) -> None:
    """kimi-linear-mini at 2,048 tokens: six linear layers of 74,752 bytes and two MLA layers of
    1,310,720 (the frames the live sender ships, less their headers); a measured last layer keeps
    its share and the others split the rest as the model's own do; without a preset, equal layers."""
    inputs, tables = model_inputs(case_study)
    config = get_preset("kimi-linear-mini")
    linear, mla = config.layer_sizes(2048)[0], config.layer_sizes(2048)[3]
    assert config.layer_sizes(2048) == (linear,) * 3 + (mla,) + (linear,) * 3 + (mla,) and mla > 17 * linear
    own = CostModel.from_inputs(inputs, tables.source, layer_bytes=config.layer_sizes).layer_shares(2048)
    assert own == pytest.approx(tuple(size / (6 * linear + 2 * mla) for size in config.layer_sizes(2048)))
    kv = inputs.kv_bytes(np.array([2048.0]))[0]
    tail = PiecewiseLinear((1.0, 1e6), (kv * 0.1, kv * 0.1))  # a last layer measured at a tenth, at every length
    measured = CostModel.from_inputs(inputs, tables.source, layer_bytes=config.layer_sizes, kv_tail_bytes=tail)
    head = 3 * linear + mla + 3 * linear
    assert measured.layer_shares(2048) == pytest.approx(
        tuple(0.9 * size / head for size in config.layer_sizes(2048)[:-1]) + (0.1,))
    assert measured.tail_fraction(2048) == pytest.approx(0.1)
    assert CostModel.from_inputs(inputs, tables.source, pipeline_layers=4).layer_shares(2048) == (0.25,) * 4
