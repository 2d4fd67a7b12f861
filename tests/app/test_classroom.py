"""The Classroom tour: every step's scenario still validates, its buttons state the measured time,
and the page starts a step's run."""

from __future__ import annotations

import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

from app.classroom_view import STEPS, Step, Variant, button_label, check_steps, unknown_names

PAGE = Path(__file__).resolve().parents[2] / "app" / "pages" / "5_Classroom.py"


def test_four_to_six_steps_all_valid() -> None:
    assert 4 <= len(STEPS) <= 6
    assert check_steps() == []
    assert {v.engine for step in STEPS for v in step.variants} == {"live", "virtual"}
    assert all(step.watch and step.expect and step.question.endswith("?") and step.variants for step in STEPS)


def test_every_name_a_step_points_to_is_on_the_page() -> None:
    """*Names* in a step's watch are the Live page's panel, table, tile and knob titles exactly."""
    assert unknown_names() == []
    renamed = (Step("x", "live-quickstart.yaml", "", "*Egress chart*", "", "?", (Variant("a", "live"),), "Live"),)
    assert unknown_names(renamed) == ["step 1: *Egress chart*"]


def test_check_steps_names_what_is_wrong() -> None:
    broken = (Step("x", "no-such.yaml", "", "", "", "", (Variant("a", "live"),), "Live"),
              Step("y", "live-quickstart.yaml", "", "", "", "", (Variant("b", "fast", ("duration_s=-1",)),), "Live"))
    problems = check_steps(broken)
    assert problems[0].startswith("step 1 (a): ") and "no-such.yaml: file not found" in problems[0]
    assert problems[1] == "step 2 (b): engine 'fast' is unknown"
    assert problems[2].startswith("step 2 (b): ") and "duration_s" in problems[2]


def test_page_renders_every_step_with_its_buttons(live_env: str) -> None:
    app = AppTest.from_file(str(PAGE), default_timeout=30).run()
    assert not app.exception, [e.message for e in app.exception]
    assert [h.value for h in app.subheader] == [f"Step {i}. {s.title}" for i, s in enumerate(STEPS, 1)]
    for number, step in enumerate(STEPS, start=1):
        for i, variant in enumerate(step.variants):
            assert app.button(key=f"class_start_{number}_{i}").label == button_label(step, variant)


def test_a_step_starts_its_run_and_points_to_the_pages(live_env: str, tmp_path: Path) -> None:
    app = AppTest.from_file(str(PAGE), default_timeout=30).run()
    last = len(STEPS)  # the paper case study, virtual
    app.button(key=f"class_start_{last}_0").click().run()
    assert not app.exception and not app.error
    assert len(app.success) == 1 and app.success[0].value.startswith("Started run **")
    run_id = app.session_state["live_focus"]
    assert run_id in app.success[0].value
    links = " ".join(m.value for m in app.markdown)
    assert "[Watch it on the Live page](/Live)" in links
    assert "[Then open the Threshold explorer page](/Threshold_explorer)" in links
    run_dirs = list((tmp_path / "runs").iterdir())
    assert len(run_dirs) == 1 and run_dirs[0].name.startswith("paper-case-study-")
    deadline = time.monotonic() + 60
    while not (run_dirs[0] / "summary.json").exists():  # let it finish inside tmp_path
        assert time.monotonic() < deadline
        time.sleep(0.2)
