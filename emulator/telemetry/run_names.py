"""Runs named by what tells them apart: two runs of one scenario that differ only in their model are
`dense-gqa-mini (small)` and `kimi-linear-mini (small)`, not two folder names or ids. `compare` and
the Runs page's Compare tab name runs here.

Reads summary.json's `meta` (run_meta.RunMeta, read key by key: older runs lack some keys).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

SEPARATOR = " · "


def _link(meta: Mapping[str, Any]) -> str | None:
    link = meta.get("link")
    if not isinstance(link, Mapping):
        return None
    bandwidth = link.get("bandwidth_mbit")
    words = "unshaped" if bandwidth is None else f"{bandwidth:g} Mbit/s"
    return f"link {words}, {link.get('delay_ms', 0):g} ms"


def _scheduler(meta: Mapping[str, Any]) -> str | None:
    loops = meta.get("scheduler")
    if not isinstance(loops, Mapping):
        return "no scheduler" if "scheduler" in meta else None
    on = [name.replace("_", "-") for name, enabled in loops.items() if enabled]
    return f"scheduler {', '.join(on)}" if on else "scheduler off"


def _keyed(key: str, words: str) -> Callable[[Mapping[str, Any]], str | None]:
    return lambda meta: None if meta.get(key) is None else words.format(meta[key])


# What may tell runs apart, in the order a name lists it: what ran (scenario, engine, model), then
# the variant (the settings a run was started with).
FACETS: tuple[Callable[[Mapping[str, Any]], str | None], ...] = (
    _keyed("scenario", "{}"), _keyed("engine", "{}"), _keyed("model", "{}"),
    _keyed("policy", "policy {}"), _link, _keyed("threshold_start", "t {:,}"), _keyed("n_p_start", "N_p {}"),
    _scheduler, _keyed("prefix_rule", "{} prefixes"), _keyed("affinity", "affinity {}"), _keyed("seed", "seed {}"),
)


def run_names(metas: Sequence[Mapping[str, Any]], folders: Sequence[str]) -> list[str]:
    """One name per run: the facets, in FACETS' order, that tell more of the runs apart than those
    before them, until each run has its own name; runs that differ in nothing recorded add their
    folder's name."""
    words = [[facet(meta) for facet in FACETS] for meta in metas]

    def distinct(facets: Sequence[int]) -> int:
        return len({tuple(w[j] for j in facets) for w in words})

    chosen: list[int] = []
    for i in range(len(FACETS)):
        if distinct(chosen) == len(words):
            break
        if distinct([*chosen, i]) > distinct(chosen):
            chosen.append(i)
    names = [SEPARATOR.join(str(w[i]) for i in chosen if w[i] is not None) for w in words]
    return [name if name and names.count(name) == 1 else SEPARATOR.join(filter(None, (name, folder)))
            for name, folder in zip(names, folders, strict=True)]
