"""The Classroom tour: six steps, each a scenario to start (live, or virtual where live would take
too long), what to watch and what should happen. Plain data plus a check that every step's
scenario and overrides still validate, so a renamed scenario fails a test, not a class.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from app.live_charts import CHART_TITLES, TABLE_TITLES
from app.live_view import KNOB_TITLES, TILES
from app.runs_compare import COMPARE_TAB
from emulator.api import SCENARIOS_DIR
from emulator.errors import PrfaasError
from emulator.scenario import apply_overrides, load_scenario

HYBRID = "model.preset=kimi-linear-mini"


@dataclass(frozen=True, slots=True)
class Variant:
    """One button of a step: the engine and overrides its run starts with."""

    label: str
    engine: str
    overrides: tuple[str, ...] = ()


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


STEPS: tuple[Step, ...] = (
    Step(
        "A first PrfaaS run", "live-quickstart.yaml",
        "A small hybrid model (Kimi-Linear layout, 3 linear layers per full-attention layer) on real "
        "processes: one remote prefill node, one local prefill and one decode node, joined by a "
        "200 Mbit/s, 10 ms link. Prompts longer than 2,048 tokens are prefilled remotely.",
        "On the Live page: *Share routed remote*, *Egress vs link capacity*, and the *Last requests* "
        "table with each request's route and the router's reason.",
        "About half the requests go remote (prompts are 256-4,096 tokens); egress jumps while a "
        "remote request's KV crosses the link and stays far below 200 Mbit/s; every request completes.",
        "Egress comes in short spikes, not a steady stream: what sets how tall a spike is, and how long?",
        (Variant("Start it live (about 1 min)", "live"),
         Variant("Virtual (seconds)", "virtual")),
        "Live",
    ),
    Step(
        "Dense vs hybrid on the same link", "live-dense-vs-hybrid.yaml",
        "The same workload on a 50 Mbit/s link, once with a dense GQA model (8 full-attention layers, "
        "about 6x the hybrid's KV per token) and once with the hybrid. Virtual runs take seconds; "
        "live ones about 1.5 minutes each.",
        "Start both, then on the Runs page pick both under *Compare runs*: the TTFT CDFs, the egress "
        "overlay and the difference column of the table.",
        "Dense: egress sits at the link's 50 Mbit/s and remote TTFT climbs as transfers queue "
        "(TTFT P50 about 5 s). Hybrid: egress stays well under the link, TTFT P50 about 1 s. This is why "
        "dense models cannot leave the datacenter and hybrid ones can.",
        "How fast would the link have to be for the dense model to match the hybrid's TTFT, and what "
        "does the KV explorer's Φ_kv say about it?",
        (Variant("Dense (virtual)", "virtual"),
         Variant("Hybrid (virtual)", "virtual", (HYBRID,)),
         Variant("Dense (live)", "live")),
        "Runs",
    ),
    Step(
        "The link slows, then the threshold rises", "classroom-basic.yaml",
        "A tiny hybrid model, prompts of 256-8,192 tokens. The scenario's timeline drops the link from "
        "200 to 50 Mbit/s at 20 s and raises the threshold from 2,048 to 4,096 tokens at 40 s.",
        "On the Live page: the capacity line in *Egress vs link capacity* at 20 s; the threshold line "
        "in *TTFT P50/P90, threshold on the right axis* at 40 s; *Share routed remote* after it; both "
        "changes in the *Decisions* table. Then move *Threshold (tokens)* in the sidebar and press Apply.",
        "After 40 s fewer prompts go remote (about three in four before, one in two after), so egress "
        "falls and the local prefill queue takes the rest.",
        "Raising t moves work from the remote cluster to the local one: which queue in *Queue depth "
        "per pool* pays for the link's relief?",
        (Variant("Start it live (about 1 min)", "live"),),
        "Live",
    ),
    Step(
        "A bandwidth drop and the scheduler's reaction", "live-bandwidth-drop.yaml",
        "The quickstart setup on a 100 Mbit/s link that falls to 10 Mbit/s at 20 s, with the "
        "short-term scheduler re-searching the threshold every 3 s.",
        "*Egress vs link capacity*: the capacity line falls to 10 Mbit/s and egress presses against "
        "it; the dotted markers on the charts and the *Decisions* table say when the scheduler moved "
        "t and why; the threshold line in *TTFT P50/P90, threshold on the right axis* steps up.",
        "The scheduler raises t (about 2,965 -> 3,411 tokens in the virtual run), so only the longest "
        "prompts still cross the slow link.",
        "The scheduler waited a few seconds before it moved t: why not react to the first slow transfer?",
        (Variant("Start it live (about 1.5 min)", "live"),
         Variant("Virtual (seconds)", "virtual")),
        "Live",
    ),
    Step(
        "A burst", "live-quickstart.yaml",
        "You make the burst: while the quickstart runs, raise *Arrival rate (req/s)* in the Live "
        "page's sidebar from 0.5 to 3 requests/s for about ten seconds, then set it back (or *Pause "
        "arrivals*).",
        "*Queue depth per pool* and the TTFT P90 line of *TTFT P50/P90, threshold on the right axis*; "
        "the *Completed / arrived* tile.",
        "Queues build on both prefill pools and TTFT P90 climbs during the burst; after it they drain "
        "and nothing is lost (the run fails a request only with a reason).",
        "TTFT P90 stays high for a while after the rate is back to 0.5/s: what is it still measuring?",
        (Variant("Start it live (about 1 min)", "live"),),
        "Live",
    ),
    Step(
        "Paper scale: the case study", "paper-case-study.yaml",
        "The paper's case study (4 x H200 PrfaaS prefill, 8 x H20 local PD cluster, about 100 Gbit/s "
        "between them) for 10 simulated minutes, on the virtual engine in a second or two.",
        "The run's tiles and charts on the Live page (*Throughput (req/s)* beside *Λ_max, model (req/s)*), then the "
        "Threshold explorer on the same scenario, with the paper's figures beside the project's.",
        "About half the requests go remote, near the optimizer's p at t* = 19,620 tokens with a 3:5 "
        "prefill/decode split; the explorer shows why this t balances the two prefill paths.",
        "Measured throughput is below Λ_max: is the cluster too slow, or is it simply not offered "
        "more than 2 requests/s?",
        (Variant("Run it (virtual, seconds)", "virtual"),),
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
