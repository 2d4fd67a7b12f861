"""Fuzzing scenario loading: YAML text (files) and `--set` strings. Nothing but a ScenarioError (a
PrfaasError) escapes, each problem is one line, and no input under the size cap makes the parser
allocate more than BUDGET_BYTES (tracemalloc peak)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from emulator.errors import PrfaasError
from emulator.scenario import Scenario, apply_overrides, load_scenario

pytestmark = pytest.mark.slow  # each test fuzzes 100 inputs under tracemalloc: tens of seconds

REPO = Path(__file__).resolve().parents[3]
QUICKSTART_PATH = REPO / "scenarios" / "live-quickstart.yaml"
QUICKSTART_TEXT = QUICKSTART_PATH.read_text()
BUDGET_BYTES = 64 << 20


def _bomb(width: int, levels: int) -> str:
    """A billion-laughs document: each level repeats the previous one `width` times by alias."""
    lines = ["a0: &a0 [x]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]")
    return "\n".join(lines) + f"\nname: *a{levels - 1}\n"


def _splice(text: str, at: int, junk: str) -> str:
    at %= len(text)
    return text[:at] + junk + text[at:]


FRAGMENTS = st.sampled_from([
    "[", "]", "{", "}", ": ", "\n", "- ", "&a ", "*a", "!!python/object:os.system ", "1e9999",
    "9" * 5000, "-", "? ", "|\n", "'", '"', "\t", "<<: *a\n", "!!binary ", "~", ".nan", "0x1F",
])
YAML_TEXT = st.one_of(
    st.text(max_size=200),
    st.builds(_splice, st.just(QUICKSTART_TEXT), st.integers(0, 10_000),
              st.lists(FRAGMENTS, max_size=6).map("".join)),
    st.integers(1, 100).map(lambda d: "name: x\nduration_s: " + "[" * d * 40 + "]" * d * 40),
    st.integers(1, 100).map(lambda d: "duration_s: " + "{a: " * d + "1" + "}" * d),
    st.tuples(st.integers(2, 12), st.integers(2, 12)).map(lambda wl: _bomb(*wl)),
    st.sampled_from([10, 11_000]).map(lambda n: "timeline: [" + ", ".join(["1"] * n) + "]"),
    st.just("a: &a [*a]\nname: *a\n"),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=YAML_TEXT)
def test_scenario_text_raises_only_project_errors_within_budget(tmp_path, text):
    path = tmp_path / "s.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    tracemalloc.start()
    try:
        assert isinstance(load_scenario(path), Scenario)
    except PrfaasError as err:
        assert str(err) and all(line.strip() for line in str(err).splitlines())
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < BUDGET_BYTES


BASE = load_scenario(QUICKSTART_PATH)
PATHS = st.sampled_from(["duration_s", "router.threshold_tokens", "workload.input_len", "timeline",
                         "link", "clusters.local.decode_max_batch", "expect", "seed", "x.y", ""])
VALUES = st.one_of(
    st.text(max_size=60), FRAGMENTS, st.lists(FRAGMENTS, max_size=8).map("".join),
    st.integers().map(str), st.floats().map(repr),
    st.integers(1, 100).map(lambda d: "[" * d * 40),
    st.tuples(st.integers(2, 12), st.integers(2, 12)).map(
        lambda wl: "{" + _bomb(*wl).replace("\n", ", ").rstrip(", ") + "}"),
)


@settings(max_examples=100, deadline=None)
@given(items=st.lists(st.tuples(PATHS, VALUES).map(lambda pv: f"{pv[0]}={pv[1]}"), max_size=3))
def test_set_strings_raise_only_project_errors_within_budget(items):
    tracemalloc.start()
    try:
        assert isinstance(apply_overrides(BASE, items), Scenario)
    except PrfaasError as err:
        assert str(err)
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < BUDGET_BYTES
