"""emulator/telemetry/watch.py: a TopicWatch sees what is published and leaves nothing open behind it."""

from __future__ import annotations

import gc
import warnings

from emulator.telemetry.broker import EmbeddedBroker
from emulator.telemetry.watch import TopicWatch


def test_a_watch_sees_its_own_publish_and_leaves_no_event_loop_open(embedded_broker: EmbeddedBroker) -> None:
    """An event loop left unclosed is closed by the garbage collector, at interpreter exit after
    its self-pipe may be gone: the bench that used a watch ended with a traceback ('Invalid file
    descriptor: -1'). Closed on exit, it warns of nothing when collected."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        with TopicWatch(embedded_broker.url, "t/watch") as watch:
            watch.publish("t/watch", {"v": 1, "n": 7})
            assert watch.wait_for("t/watch", lambda m: m.get("n") == 7, timeout_s=10)["n"] == 7
        del watch
        gc.collect()
    unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert unclosed == []
