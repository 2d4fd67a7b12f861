"""The Classroom tour: six steps, each a scenario to start (live, or virtual where live would take
too long), what to watch and what should happen. Plain data plus a check that every step's
scenario and overrides still validate, so a renamed scenario fails a test, not a class.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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
    watch: str  # where to look
    expect: str  # what should happen
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
        (Variant("Start it live (about 1 min)", "live"),
         Variant("Virtual (seconds)", "virtual")),
        "Live",
    ),
    Step(
        "Dense vs hybrid on the same link", "live-dense-vs-hybrid.yaml",
        "The same workload on a 50 Mbit/s link, once with a dense GQA model (8 full-attention layers, "
        "about 6x the hybrid's KV per token) and once with the hybrid. Virtual runs take seconds; "
        "live ones about 1.5 minutes each.",
        "Start both, then compare them on the Runs page (*Compare runs*): TTFT CDFs and egress.",
        "Dense: egress sits at the link's 50 Mbit/s and remote TTFT climbs as transfers queue "
        "(TTFT P50 about 5 s). Hybrid: egress stays well under the link, TTFT P50 about 1 s. This is why "
        "dense models cannot leave the datacenter and hybrid ones can.",
        (Variant("Dense (virtual)", "virtual"),
         Variant("Hybrid (virtual)", "virtual", (HYBRID,)),
         Variant("Dense (live)", "live")),
        "Runs",
    ),
    Step(
        "The link slows, then the threshold rises", "classroom-basic.yaml",
        "A tiny hybrid model, prompts of 256-8,192 tokens. The scenario's timeline drops the link from "
        "200 to 50 Mbit/s at 20 s and raises the threshold from 2,048 to 4,096 tokens at 40 s.",
        "On the Live page: the capacity line in *Egress vs link capacity* at 20 s; the dotted "
        "threshold line in the TTFT chart at 40 s; *Share routed remote (last 10 s)* after it. "
        "Try the *Threshold* knob in the sidebar yourself.",
        "After 40 s fewer prompts go remote (about three in four before, one in two after), so egress "
        "falls and the local prefill queue takes the rest.",
        (Variant("Start it live (about 1 min)", "live"),),
        "Live",
    ),
    Step(
        "A bandwidth drop and the scheduler's reaction", "live-bandwidth-drop.yaml",
        "The quickstart setup on a 100 Mbit/s link that falls to 10 Mbit/s at 20 s, with the "
        "short-term scheduler re-searching the threshold every 3 s.",
        "The capacity line falls to 10 Mbit/s and egress presses against it; a few seconds later the "
        "threshold line in the TTFT chart steps up.",
        "The scheduler raises t (about 2,965 -> 3,411 tokens in the virtual run), so only the longest "
        "prompts still cross the slow link; the run's summary lists the scheduler's decisions.",
        (Variant("Start it live (about 1.5 min)", "live"),
         Variant("Virtual (seconds)", "virtual")),
        "Live",
    ),
    Step(
        "A burst", "live-quickstart.yaml",
        "You make the burst: while the quickstart runs, raise *Arrival rate* in the Live page's "
        "sidebar from 0.5 to 3 requests/s for about ten seconds, then set it back (or *Pause*).",
        "*Queue depth per pool* and TTFT P90; the *Completed / arrived* tile.",
        "Queues build on both prefill pools and TTFT P90 climbs during the burst; after it they drain "
        "and nothing is lost (the run fails a request only with a reason).",
        (Variant("Start it live (about 1 min)", "live"),),
        "Live",
    ),
    Step(
        "Paper scale: the case study", "paper-case-study.yaml",
        "The paper's case study (4 x H200 PrfaaS prefill, 8 x H20 local PD cluster, about 100 Gbit/s "
        "between them) for 10 simulated minutes, on the virtual engine in a second or two.",
        "The run's summary on the Live page, then the Threshold explorer on the same scenario.",
        "About half the requests go remote, near the optimizer's p at t* = 19,620 tokens with a 3:5 "
        "prefill/decode split; the explorer shows why this t balances the two prefill paths.",
        (Variant("Run it (virtual, seconds)", "virtual"),),
        "Threshold explorer",
    ),
)
ALSO_TRY = ("`live-worker-crash.yaml` kills the remote prefill worker mid-run and restarts it: "
            "long prompts fall back to local prefill meanwhile, and no request is lost.")


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
