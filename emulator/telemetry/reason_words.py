"""The control plane's reasons as a screen shows them: raw codes inside them named (labels.py), the
router's long reason summed up in a few words for a table cell, and a decision's "what" shortened
for a chart marker. The full words always stay available beside them (a tooltip, a detail view).

Reads the words `control.router`, `control.scheduler` and `emulator.knobs` write; decides nothing.
"""

from __future__ import annotations

import re

from emulator.telemetry.labels import BOTTLENECK_LABELS, ROUTE_LABELS

MARKER_CHARS = 18  # a marker label along the Live charts' ~100 px plot height at 10 px (~5 px a character)

_BOTTLENECK = re.compile(r"bottleneck (?P<code>" + "|".join(map(re.escape, BOTTLENECK_LABELS)) + r")\b")
# control.router.RouteDecision.reason: "incremental 30000 (input ...) > t 19400 -> prfaas (...)"
_ROUTED = re.compile(r"incremental (?P<n>\d+) \(.*?\) (?P<cmp>>|<=) t (?P<t>\d+) -> (?P<route>\w+)")
_POLICY = re.compile(r"policy (?P<policy>[\w-]+) -> (?P<route>\w+)")
_NUMBER = re.compile(r"\b\d{4,}\b")
# Marker words: the knob or decision named short (emulator.knobs and control.scheduler word them long).
_MARKER_NAMES = (("local prefill instances", "N_p"), ("router policy", "policy"), ("arrival rate", "rate"),
                 ("scheduler short-term", "short-term"), ("threshold", "t"))
_FLIP = re.compile(r"drain, then flip \S+ to (?P<role>\w+)")


def worded(text: str) -> str:
    """`text` with the bottleneck's code named: `bottleneck prfaas-compute` -> `bottleneck: PrfaaS
    compute`."""
    return _BOTTLENECK.sub(lambda m: f"bottleneck: {BOTTLENECK_LABELS[m['code']]}", text)


def route_summary(reason: str) -> str:
    """The router's reason in a few words, `30,000 new tokens > t 19,400 -> remote`; a reason of
    another shape (no node up, a failure) is returned as it is."""
    if match := _ROUTED.match(reason):
        route = ROUTE_LABELS.get(match["route"], match["route"])
        return f"{int(match['n']):,} new tokens {match['cmp']} t {int(match['t']):,} -> {route}"
    if match := _POLICY.match(reason):
        return f"policy {match['policy']} -> {ROUTE_LABELS.get(match['route'], match['route'])}"
    return reason


def marker_text(what: str) -> str:
    """A decision's `what` as a chart marker's label, at most MARKER_CHARS: its first clause, the
    knob named short, numbers with separators (`threshold 2965 -> 3411 tokens` -> `t 2,965→3,411`)."""
    if flip := _FLIP.match(what):
        text = f"flip to {flip['role']}"
    else:
        text = re.split(r"[,;]", what, maxsplit=1)[0].strip()
        for long, short in _MARKER_NAMES:
            if text.startswith(long):
                text = short + text[len(long):]
                break
        text = _NUMBER.sub(lambda m: f"{int(m[0]):,}", text.removesuffix(" tokens"))
        text = text.replace(" -> ", "→").replace("->", "→")
    return text if len(text) <= MARKER_CHARS else text[:MARKER_CHARS - 1] + "…"
