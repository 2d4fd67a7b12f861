"""The Classroom tour: six steps, each a scenario to start (live, or virtual where live would take
too long), what to watch, what should happen (checked on the run's record by app.classroom_promises)
and how long it takes (measured, app.classroom_times). Plain data plus a check that every step's
scenario and overrides still validate, so a renamed scenario fails a test, not a class.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from app.classroom_promises import (
    Promise,
    bandwidth_drop,
    burst,
    dense,
    expected_share,
    first_run,
    hybrid,
    link_then_threshold,
    paper,
)
from app.classroom_times import Measured, load_measured, stated_s, words
from app.live_charts import CHART_TITLES, TABLE_TITLES
from app.live_view import KNOB_TITLES, TILES
from app.runs_compare import COMPARE_TAB
from emulator.api import SCENARIOS_DIR
from emulator.errors import PrfaasError
from emulator.scenario import Scenario, apply_overrides, load_scenario

HYBRID = "model.preset=kimi-linear-mini"
BURST_FACTOR = 4  # step 5: the rate the learner sets, times the one the run chose
BURST_S = 10


@dataclass(frozen=True, slots=True)
class Variant:
    """One button of a step: the engine and overrides its run starts with, and what its run must
    show (app.classroom_promises; None: nothing beyond what the step's text says)."""

    label: str
    engine: str
    overrides: tuple[str, ...] = ()
    promise: Promise | None = None


@dataclass(frozen=True, slots=True)
class Step:
    title: str
    scenario: str  # a file under scenarios/
    idea: str  # what the step shows
    watch: str  # where to look: the Live page's panels, tiles and knobs by *their names*
    expect: str  # what the learner should see
    question: str  # one to ask the class (or yourself) once it has been seen
    variants: tuple[Variant, ...]
    pointer: str  # the page to go to next: "Live", "Runs" or "Threshold explorer"


def _share(scenario: str, threshold: float) -> str:
    """The share of the scenario's prompts longer than `threshold`, as the text quotes it."""
    return f"{expected_share(load_scenario(SCENARIOS_DIR / scenario), threshold):.0%}"


AUTO_RATE = ("The run sizes its arrival rate to this machine: it times its workers at start and offers "
             "60% of what they sustain (the rate and how it was measured show in the run's workload line).")
STEPS: tuple[Step, ...] = (
    Step(
        "A first PrfaaS run", "live-quickstart.yaml",
        "A small hybrid model (Kimi-Linear layout, 3 linear layers per full-attention layer) on real "
        "processes: one remote prefill node, one local prefill and one decode node, joined by a "
        f"200 Mbit/s, 10 ms link. Prompts longer than 2,048 tokens are prefilled remotely. {AUTO_RATE}",
        "On the Live page: *Share routed remote*, *Egress vs link capacity*, and the *Last requests* "
        "table with each request's route and the router's reason.",
        f"About half the requests go remote ({_share('live-quickstart.yaml', 2048)} of the prompts, 256-4,096 "
        "tokens, are longer than 2,048); egress jumps while a remote request's KV crosses the link and "
        "stays far below 200 Mbit/s; no queue builds; every request completes.",
        "Egress comes in short spikes, not a steady stream: what sets how tall a spike is, and how long?",
        (Variant("Start it live", "live", promise=first_run),
         Variant("Virtual", "virtual", promise=first_run)),
        "Live",
    ),
    Step(
        "Dense vs hybrid on the same link", "live-dense-vs-hybrid.yaml",
        "The same workload on a 25 Mbit/s link, once with a dense GQA model (8 full-attention layers, "
        "about 6x the hybrid's KV per token) and once with the hybrid.",
        "Start both, then on the Runs page pick both under *Compare runs*: the TTFT CDFs, the egress "
        "overlay and the difference column of the table.",
        "Dense: egress sits at the link's 25 Mbit/s and remote TTFT grows to many times one transfer's "
        "time as transfers share the link. Hybrid: egress stays under the link and remote TTFT near one "
        "transfer's time. This is why dense "
        "models cannot leave the datacenter and hybrid ones can.",
        "How fast would the link have to be for the dense model to match the hybrid's TTFT, and what "
        "does the KV explorer's Φ_kv say about it?",
        (Variant("Dense, virtual", "virtual", promise=dense),
         Variant("Hybrid, virtual", "virtual", (HYBRID,), promise=hybrid),
         Variant("Dense, live", "live", promise=dense)),
        "Runs",
    ),
    Step(
        "The link slows, then the threshold rises", "classroom-basic.yaml",
        "A tiny hybrid model, prompts of 256-8,192 tokens. The scenario's timeline drops the link from "
        "200 to 50 Mbit/s at 20 s and raises the threshold from 2,048 to 4,096 tokens at 40 s.",
        "On the Live page: the capacity line in *Egress vs link capacity* at 20 s; the threshold line "
        "in *TTFT P50/P90, threshold on the right axis* at 40 s; *Share routed remote* after it; both "
        "changes in the *Decisions* table. Then move *Threshold (tokens)* in the sidebar and press Apply.",
        f"After 40 s fewer prompts go remote (about three in four before: {_share('classroom-basic.yaml', 2048)} "
        f"are longer than 2,048 tokens; one in two after: {_share('classroom-basic.yaml', 4096)} are longer "
        "than 4,096): the local prefill node takes the rest.",
        "Raising t moves work from the remote cluster to the local one: which queue in *Queue depth "
        "per pool* pays for the link's relief?",
        (Variant("Start it live", "live", promise=link_then_threshold),),
        "Live",
    ),
    Step(
        "A bandwidth drop and the scheduler's reaction", "live-bandwidth-drop.yaml",
        "The quickstart setup on a 100 Mbit/s link that falls to 10 Mbit/s at 20 s, with the "
        "short-term scheduler re-searching the threshold every 3 s.",
        "*Egress vs link capacity*: the capacity line falls to 10 Mbit/s and egress presses against "
        "it; the dotted markers on the charts and the *Decisions* table say when the scheduler moved "
        "t and why; the threshold line in *TTFT P50/P90, threshold on the right axis* steps up.",
        "The scheduler raises t after the drop (2,965 -> 3,411 tokens in the virtual run), "
        "so only the longest prompts still cross the slow link.",
        "The scheduler waited a few seconds before it moved t: why not react to the first slow transfer?",
        (Variant("Start it live", "live", promise=bandwidth_drop),
         Variant("Virtual", "virtual", promise=bandwidth_drop)),
        "Live",
    ),
    Step(
        "A burst", "live-quickstart.yaml",
        f"You make the burst: while the quickstart runs, set *Arrival rate (req/s)* in the Live page's "
        f"sidebar to {BURST_FACTOR} times the rate the run chose (the sidebar starts at it) for about "
        f"{BURST_S} seconds, then set it back (or *Pause arrivals*).",
        "*Queue depth per pool* and the TTFT P90 line of *TTFT P50/P90, threshold on the right axis*; "
        "the *Completed / arrived* tile.",
        "Queues build on the prefill pools during the burst, and TTFT P90 climbs with them; after it "
        "they drain and nothing is lost (the run fails a request only with a reason).",
        "TTFT P90 stays high for a while after the rate is back: what is it still measuring?",
        (Variant("Start it live", "live", promise=burst),),
        "Live",
    ),
    Step(
        "Paper scale: the case study", "paper-case-study.yaml",
        "The paper's case study (4 x H200 PrfaaS prefill, 8 x H20 local PD cluster, about 100 Gbit/s "
        "between them) for 10 simulated minutes, on the virtual engine.",
        "The run's tiles and charts on the Live page (*Throughput (req/s)* beside *Λ_max, model (req/s)*), then the "
        "Threshold explorer on the same scenario, with the paper's figures beside the project's.",
        f"About half the requests go remote ({_share('paper-case-study.yaml', 19_620)} of the prompts are "
        "longer than the optimizer's t* = 19,620 tokens, with a 3:5 prefill/decode split); the explorer "
        "shows why this t balances the two prefill paths.",
        "Measured throughput is below Λ_max: is the cluster too slow, or is it simply not offered "
        "more than 2 requests/s?",
        (Variant("Run it, virtual", "virtual", promise=paper),),
        "Threshold explorer",
    ),
)
ALSO_TRY = ("`live-worker-crash.yaml` kills the remote prefill worker mid-run and restarts it: "
            "long prompts fall back to local prefill meanwhile, and no request is lost.")
# What a step may name in *italics*: the Live page's panels, tables, tiles and knobs and the Runs
# page's comparison, as the pages title them (a renamed panel fails a test, not a class).
LIVE_NAMES = frozenset({*CHART_TITLES.values(), *TABLE_TITLES, *TILES.values(), *KNOB_TITLES.values(),
                        COMPARE_TAB})
NAMED = re.compile(r"\*([^*]+)\*")


def unknown_names(steps: tuple[Step, ...] = STEPS) -> list[str]:
    """Each *name* a step's watch or idea points to that no page shows under that name."""
    return [f"step {number}: *{name}*" for number, step in enumerate(steps, start=1)
            for name in NAMED.findall(step.watch + " " + step.idea) if name not in LIVE_NAMES]


def check_steps(steps: tuple[Step, ...] = STEPS, scenarios_dir: Path = SCENARIOS_DIR) -> list[str]:
    """Each problem as one line: a missing scenario, an override it refuses, an unknown engine."""
    problems = []
    for number, step in enumerate(steps, start=1):
        for variant in step.variants:
            if variant.engine not in ("live", "virtual"):
                problems.append(f"step {number} ({variant.label}): engine {variant.engine!r} is unknown")
            try:
                apply_overrides(load_scenario(scenarios_dir / step.scenario), variant.overrides)
            except PrfaasError as err:
                problems.append(f"step {number} ({variant.label}): {err}")
    return problems


def variant_scenario(step: Step, variant: Variant, scenarios_dir: Path = SCENARIOS_DIR) -> Scenario:
    """The scenario a variant's button starts (its overrides applied)."""
    return apply_overrides(load_scenario(scenarios_dir / step.scenario), variant.overrides)


def stated_time_s(step: Step, variant: Variant,
                  measured: dict[tuple[str, str], Measured] | None = None) -> float | None:
    """How long the variant's run takes, as the page states it (app.classroom_times)."""
    measured = load_measured() if measured is None else measured
    duration_s = variant_scenario(step, variant).duration_s
    return stated_s(measured.get((step.title, variant.label)), variant.engine, duration_s)


def button_label(step: Step, variant: Variant, measured: dict[tuple[str, str], Measured] | None = None) -> str:
    """`Start it live (about 75 s)`: the label with the measured time."""
    return f"{variant.label} ({words(stated_time_s(step, variant, measured))})"
