"""The control plane's reasons as screens show them: codes named, the router's reason summed up,
marker labels short enough for a chart's height and still saying what changed."""

from __future__ import annotations

import pytest

from emulator.control.throughput_model import Bottleneck
from emulator.control.types import Route
from emulator.telemetry.labels import BOTTLENECK_LABELS, ROUTE_LABELS, setting_label
from emulator.telemetry.reason_words import MARKER_CHARS, marker_text, route_summary, worded

ROUTED = ("incremental 30000 (input 30000 - max(remote prefix 0, local prefix 0)) > t 19400 -> prfaas "
          "(remote-prefill-0 least loaded: holds 0 tokens, 0 queued tokens)")


def test_every_bottleneck_and_route_has_a_label() -> None:
    assert set(BOTTLENECK_LABELS) == {b.value for b in Bottleneck}
    assert set(ROUTE_LABELS) == {r.value for r in Route}


def test_a_bottleneck_code_is_named() -> None:
    text = "queue surge; model: 1.67 req/s, p 0.40, bottleneck prfaas-compute"
    assert worded(text) == "queue surge; model: 1.67 req/s, p 0.40, bottleneck: PrfaaS compute"
    assert worded("no code here") == "no code here"
    assert worded("bottleneck prfaas") == "bottleneck prfaas"  # not a code: left as written


@pytest.mark.parametrize(("reason", "summary"), [
    (ROUTED, "30,000 new tokens > t 19,400 -> remote"),
    ("incremental 900 (input 900 - local prefix 0) <= t 2048 -> local (local-prefill-0 least loaded: "
     "holds 0 tokens, 0 queued tokens)", "900 new tokens <= t 2,048 -> local"),
    ("policy local-only -> local (local-prefill-0 least loaded: holds 0 tokens, 0 queued tokens)",
     "policy local-only -> local"),
    ("no prefill node is up (remote-prefill-0 down) -> cannot place request r1",
     "no prefill node is up (remote-prefill-0 down) -> cannot place request r1"),
])
def test_the_routers_reason_in_a_few_words(reason: str, summary: str) -> None:
    assert route_summary(reason) == summary


@pytest.mark.parametrize(("what", "label"), [
    ("threshold 2965 -> 3411 tokens", "t 2,965→3,411"),
    ("threshold -> 1664 tokens", "t→1,664"),
    ("link -> 120 Mbit/s, 10 ms, 0 % loss", "link→120 Mbit/s"),
    ("router policy -> local-only", "policy→local-only"),
    ("arrival rate -> 3/s", "rate→3/s"),
    ("drain, then flip local-decode-4 to prefill (n_p 4 -> 5, target 5)", "flip to prefill"),
    ("threshold -> 4096 tokens; refused: this scenario runs no scheduler", "t→4,096"),
])
def test_marker_labels_keep_what_changed(what: str, label: str) -> None:
    assert marker_text(what) == label


def test_marker_labels_never_exceed_their_length() -> None:
    long = marker_text("a knob nobody shortened yet -> a value with many words")
    assert len(long) == MARKER_CHARS and long.endswith("…")


@pytest.mark.parametrize(("path", "text"), [
    ("clusters.local.prefill_instances", "local prefill instances N_p"),
    ("link.bandwidth_mbit", "link bandwidth (Mbit/s)"),
    ("link.queue_ms", "link queue (ms)"),
    ("workload.input_len.sigma", "input len sigma"),
    ("configuration", "configuration"),
])
def test_settings_read_as_words(path: str, text: str) -> None:
    assert setting_label(path) == text
