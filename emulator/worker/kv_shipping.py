"""Shipping a prefill's layers while it computes: stage on the torch thread, then wait for the copy,
encode and send on one ship thread, in layer order.

`prefill_shipping` is the whole path (the prefill engine and benches call it); `overlap_fraction`
is the copy/compute overlap figure, from the `ShipReport` it returns. The sender and the pacing of
slow hardware are the caller's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait as wait_all
from dataclasses import dataclass

import torch

from emulator.worker.kv_staging import DEFAULT_POOL_BYTES, LayerStager, StagedLayer
from model_stub.cache import HybridCache, LayerCache
from model_stub.model import HybridModel
from model_stub.serialize import encode_layer

Send = Callable[[int, bytes], None]  # (layer index, frame); may be called from any thread


@dataclass(frozen=True, slots=True)
class ShipSpan:
    """One layer on the ship thread: from taking it up to its frame handed to the sender."""

    index: int
    start_s: float
    end_s: float
    copy_wait_s: float  # of which waiting for the device-to-host copy
    frame_bytes: int


def overlap_fraction(spans: Iterable[ShipSpan], compute_start_s: float, compute_end_s: float) -> float:
    """The copy/compute overlap: the fraction of shipping time (copy wait, encode, send) spent while
    the prefill was still computing, i.e. hidden from its end. 1.0 when nothing was shipped."""
    spans = list(spans)
    total_s = sum(s.end_s - s.start_s for s in spans)
    if total_s <= 0:
        return 1.0
    hidden_s = sum(max(0.0, min(s.end_s, compute_end_s) - max(s.start_s, compute_start_s)) for s in spans)
    return hidden_s / total_s


@dataclass(frozen=True, slots=True)
class ShipReport:
    """A request's shipping, for its outcome: read `overlap` for the copy/compute overlap figure."""

    spans: tuple[ShipSpan, ...]
    compute_start_s: float
    compute_end_s: float

    @property
    def kv_bytes(self) -> int:
        return sum(s.frame_bytes for s in self.spans)

    @property
    def first_send_s(self) -> float:
        return self.spans[0].end_s

    @property
    def overlap(self) -> float:
        return overlap_fraction(self.spans, self.compute_start_s, self.compute_end_s)


class Shipment:
    """One request's layers in flight: `put` on the torch thread as each layer is final, `wait` once
    the prefill is done. The first failure skips every later layer and is raised by the next `put`
    (stopping the prefill early) or by `wait`, so the request fails with that reason."""

    def __init__(self, pool: ThreadPoolExecutor, stager: LayerStager, num_tokens: int, send: Send) -> None:
        self._pool, self._stager, self._num_tokens, self._send = pool, stager, num_tokens, send
        self._futures: list[Future[ShipSpan | None]] = []
        self._error: Exception | None = None
        self._aborted = False

    def put(self, index: int, layer: LayerCache) -> None:
        if self._error is not None:
            raise self._error
        staged = self._stager.stage(index, layer)
        self._futures.append(self._pool.submit(self._ship, staged))

    def _ship(self, staged: StagedLayer) -> ShipSpan | None:
        """On the ship thread; the single thread keeps frames in layer order."""
        start_s = time.monotonic()
        try:
            if self._error is not None or self._aborted:
                return None
            host = staged.host()
            copied_s = time.monotonic()
            frame = encode_layer(staged.index, host, self._num_tokens)
            self._send(staged.index, frame)
        except Exception as err:
            self._error = err
            raise
        finally:
            staged.release()
        return ShipSpan(staged.index, start_s, time.monotonic(), copied_s - start_s, len(frame))

    def wait(self) -> tuple[ShipSpan, ...]:
        """Every layer's span once all are sent; raises the first failure (the single thread runs
        layers in order, so any skipped layer comes after it)."""
        return tuple(f.result() for f in self._futures)

    def abort(self) -> None:
        """The prefill failed: send nothing more, and return once the ship thread is done with it."""
        self._aborted = True
        wait_all(self._futures)


class LayerShipper:
    """The ship thread and the staging buffers of one prefill worker, reused across requests."""

    def __init__(self, device: torch.device, max_pool_bytes: int = DEFAULT_POOL_BYTES) -> None:
        self.stager = LayerStager(device, max_pool_bytes)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kv-ship")

    def begin(self, num_tokens: int, send: Send) -> Shipment:
        return Shipment(self._pool, self.stager, num_tokens, send)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def prefill_shipping(
    model: HybridModel, tokens: Sequence[int], shipper: LayerShipper, send: Send, *,
    cache: HybridCache | None = None, checkpoint_at: Iterable[int] = (),
    before_ship: Callable[[], None] = lambda: None,
) -> tuple[torch.Tensor, HybridCache, ShipReport]:
    """Prefill `tokens` after `cache`, shipping each final layer (frames say len(tokens) plus the
    cached length) while the next one computes; returns (last logits, new cache, report).

    `before_ship` runs on the torch thread before each layer is staged (the prefill engine's pace:
    a layer leaves no earlier than slower hardware would have finished it).
    """
    num_tokens = len(tokens) + (0 if cache is None else cache.num_tokens)
    shipment = shipper.begin(num_tokens, send)

    def ship(index: int, layer: LayerCache) -> None:
        before_ship()
        shipment.put(index, layer)

    start_s = time.monotonic()
    try:
        logits, new_cache = model.prefill(tokens, cache=cache, on_layer_done=ship, checkpoint_at=checkpoint_at)
    except BaseException:
        shipment.abort()
        raise
    end_s = time.monotonic()
    return logits, new_cache, ShipReport(shipment.wait(), start_s, end_s)
