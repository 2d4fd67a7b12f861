"""Fixtures for the dashboard tests: small recorded runs written by the real RunRecorder, and an
MQTT broker with a probe client that plays a running run for the Live page."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.mqtt_feed import BROKER_ENV
from app.run_registry import RUNS_DIR_ENV
from emulator.net.names import new_run_id
from emulator.telemetry.broker import EmbeddedBroker
from emulator.telemetry.recorder import RunRecorder
from emulator.telemetry.records import RequestRecord
from emulator.telemetry.schemas import (
    ErrorEvent,
    MetricsSnapshot,
    NoteEvent,
    RequestCounts,
    RequestEvent,
    StatusMessage,
    control_topic,
    topic,
)
from emulator.telemetry.watch import TopicWatch

APP = Path(__file__).resolve().parents[2] / "app"
PAGES = APP / "pages"


def snap(t_s: float, prfaas: int = 0, local: int = 0, **fields) -> MetricsSnapshot:
    """A metrics snapshot of run abc123 at `t_s`, with these routed counts."""
    return MetricsSnapshot(run_id="abc123", t_s=t_s, requests=RequestCounts(prfaas=prfaas, local=local),
                           **fields)


def completed(rid: str, route: str, arrival_s: float, ttft_s: float, *, transfer: bool = True,
              kv_bytes: int = 1_000_000) -> RequestRecord:
    """A completed request: queued 0.1 s, prefilled 0.4 s, KV sent 0.2 s after, 8 decode steps."""
    remote = route == "prfaas"
    start, end = arrival_s + 0.1, arrival_s + 0.5
    return RequestRecord(
        id=rid, arrival_s=arrival_s, input_len=4000 if remote else 500, cached_len=0,
        incremental_len=4000 if remote else 500, route=route,
        prefill_node="remote-prefill-0" if remote else "local-prefill-0",
        decode_node="local-decode-0", queue_s=0.1, prefill_start_s=start, prefill_end_s=end,
        transfer_start_s=start + 0.05 if transfer else None,
        transfer_end_s=end + 0.2 if transfer else None, kv_bytes=kv_bytes,
        first_token_s=arrival_s + ttft_s, ttft_s=ttft_s, tpot_s=0.02, output_len=8,
        finish_s=arrival_s + ttft_s + 7 * 0.02, status="completed",
    )


def run_records(scale: float) -> list[RequestRecord]:
    """Six requests (two remote, three local, one failed); TTFTs scale with `scale`."""
    return [
        completed("r1", "prfaas", 0.0, 1.0 * scale),
        completed("r2", "local", 0.5, 0.6 * scale, transfer=False),
        completed("r3", "prfaas", 1.0, 1.2 * scale),
        completed("r4", "local", 1.5, 0.7 * scale, transfer=False),
        completed("r5", "local", 2.0, 0.8 * scale, transfer=False),
        RequestRecord(id="r6", arrival_s=2.5, input_len=9000, cached_len=0, incremental_len=9000,
                      route="prfaas", prefill_node="remote-prefill-0", queue_s=0.1,
                      prefill_start_s=2.6, output_len=8, finish_s=3.0, status="failed",
                      fail_reason="link_down"),
    ]


def write_run(out: Path, scale: float = 1.0, engine: str = "live") -> dict:
    """A finished run directory (the four files) under `out`; returns its summary.json doc."""
    recorder = RunRecorder(out)
    for record in run_records(scale):
        recorder.add_request(record)
    for i in range(6):
        recorder.add_sample(0.5 * i, threshold_tokens=2048 if i < 3 else 4096,
                            egress_bit_per_s=100e6 * i, link_capacity_bit_per_s=1e9,
                            ttft_p50_s=0.7 * scale)
    meta = {"engine": engine, "scenario": f"fixture-{scale:g}"}
    if engine == "live":
        meta |= {"link_backend": "proxy", "link_note": "link backend: proxy (no root)"}
    return recorder.finish(meta, expect={"ttft_p90_s": {"max": 1.0}})


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    """Two runs (fast-live, slow-virtual), a foreign folder with a summary.json, and a plain folder."""
    root = tmp_path / "runs"
    write_run(root / "fast-live", scale=1.0, engine="live")
    write_run(root / "slow-virtual", scale=2.0, engine="virtual")
    foreign = root / "foreign"
    foreign.mkdir()
    (foreign / "summary.json").write_text('{"name": "not a run"}')
    (root / "notes").mkdir()
    return root


@pytest.fixture
def make_run():
    """`write_run(out, scale=1.0, engine="live")`, for tests that build their own directories."""
    return write_run


# --- MQTT: a broker for the Live and Classroom pages, and a probe that stands in for a run ---------


@pytest.fixture(scope="session")
def mqtt_broker() -> Iterator[EmbeddedBroker]:
    """One embedded broker for the session: the pages' subscriber (cached per URL) stays on it."""
    with EmbeddedBroker() as broker:
        yield broker


@pytest.fixture
def live_env(mqtt_broker: EmbeddedBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The pages use the session broker and record started runs under tmp_path/runs."""
    monkeypatch.setenv(BROKER_ENV, mqtt_broker.url)
    monkeypatch.setenv(RUNS_DIR_ENV, str(tmp_path / "runs"))
    return mqtt_broker.url


@pytest.fixture
def probe(live_env: str) -> Iterator[TopicWatch]:
    """Subscribed to every control topic, as a run's gateway would be."""
    with TopicWatch(live_env, "prfaas/+/control/#") as watch:
        yield watch


@dataclass
class FakeRun:
    """Plays a running live run's gateway on the bus: status, snapshots, events and refusals."""

    probe: TopicWatch
    run_id: str

    def status(self, state: str = "running", note: str = "", duration_s: float | None = 30.0) -> None:
        reason = "not root: no network namespaces"
        self.probe.publish(topic(self.run_id, "status"), StatusMessage(
            run_id=self.run_id, t_s=0.0, state=state, engine="live", link_backend="proxy",
            link_backend_reason=reason, note=note or f"link backend: proxy ({reason})",
            workload="generated (poisson): 30 requests", duration_s=duration_s))

    def snapshot(self, t_s: float, threshold: int = 2048, **fields) -> None:
        """As the live gateway publishes one: a 200 Mbit/s, 10 ms link and three nodes."""
        link = {"bandwidth_mbit": 200.0, "delay_ms": 10.0, "jitter_ms": 0.0, "loss_pct": 0.0,
                "loss_correlation_pct": 0.0, "queue_packets": 1000}
        roles = {"remote-prefill-0": "prefill", "local-prefill-0": "prefill", "local-decode-1": "decode"}
        fields = {"link_capacity_bit_per_s": 200e6, "link": link, "roles": roles} | fields
        self.probe.publish(topic(self.run_id, "metrics"), MetricsSnapshot(
            run_id=self.run_id, t_s=t_s, threshold_tokens=threshold, **fields))

    def event(self, request_id: str, event: str, t_s: float, **fields) -> None:
        self.probe.publish(topic(self.run_id, "events"), RequestEvent(
            run_id=self.run_id, t_s=t_s, request_id=request_id, event=event, **fields))

    def refuse(self, knob: str, error: str, t_s: float = 1.0) -> None:
        self.probe.publish(topic(self.run_id, "events"), ErrorEvent(
            run_id=self.run_id, t_s=t_s, topic=control_topic(self.run_id, knob), error=error))

    def control(self, knob: str, timeout_s: float = 10.0) -> dict:
        """The first control message the page sent for `knob`."""
        return self.probe.wait_for(control_topic(self.run_id, knob), timeout_s=timeout_s)

    def note(self, t_s: float, source: str, what: str) -> None:
        """A line of the run's knob and decision log, as the live loops publish it."""
        self.probe.publish(topic(self.run_id, "events"), NoteEvent(run_id=self.run_id, t_s=t_s, source=source,
                                                                    what=what))

    def sent(self, knob: str) -> list[dict]:
        """Every control message for `knob` received so far."""
        return self.probe.on(control_topic(self.run_id, knob))


@pytest.fixture
def fake_run(probe: TopicWatch) -> FakeRun:
    return FakeRun(probe, new_run_id())
