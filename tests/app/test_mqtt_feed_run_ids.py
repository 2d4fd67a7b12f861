"""A run id enters the dashboard from the bus too (the Live page lists runs seen there and publishes
their knobs): a topic whose run segment is not a run id is dropped and counted, never listed."""

from __future__ import annotations

import time

from app.mqtt_feed import MqttFeed
from emulator.telemetry.schemas import StatusMessage

HOSTILE = ["..", "x.y", "ABCDEF", "abc1234", "abcdeg", "\u0430bc123"]


def _status(run_id: str) -> dict:
    return StatusMessage(run_id=run_id, t_s=0.0, state="running", engine="live", link_backend="proxy",
                         link_backend_reason="test", note="test").model_dump()


def test_the_feed_lists_only_run_ids(live_env: str, fake_run) -> None:
    feed = MqttFeed(live_env).start()
    try:
        assert feed.connected
        for run_id in HOSTILE:
            fake_run.probe.publish(f"prfaas/{run_id}/status", _status(run_id))
        fake_run.status("running")  # a real run's, last: once it is filed, the others came before it
        deadline = time.monotonic() + 10.0
        while feed.buffer.version(fake_run.run_id) < 1:
            assert time.monotonic() < deadline, "the real run's status never came"
            time.sleep(0.05)
        assert feed.buffer.run_ids() == [fake_run.run_id]
        assert feed.num_malformed == len(HOSTILE)
    finally:
        feed.close()
