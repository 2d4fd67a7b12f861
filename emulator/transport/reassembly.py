"""Receiver-side reassembly: chunks in any order, on any connection, into whole layer frames.

Memory follows what arrived, never what a header claims: each chunk's payload is kept as it lands
and the budget counts those bytes plus their bookkeeping, so a header claiming 1 GiB costs the
few bytes that came with it. One peer may hold at most its share of the budget, so it cannot
starve the others. A claim is also capped by what the receiver's model can produce (`layer_caps`).
Requests that stop making progress are expired and reported, never kept; finished ones are
remembered (bounded) with their outcome, so a late resend is answered. Each request belongs to the
proven sender whose chunk started it (`owner`); a failure is remembered for that sender only, so
another cannot poison an id by failing it first (issue 25). Time is passed in, so the policy is
testable without sockets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from emulator.limits import KV_PEER_SHARE
from emulator.transport.buffer_pool import BufferPool
from emulator.transport.frames import ChunkHeader, FrameError

# Bookkeeping charged against the budget besides payload bytes, so that many tiny chunks cannot
# hold more memory than the budget says (a held chunk: its bytes object and dict entry; a layer:
# its assembly, request and dict entries). test_frames_fuzz checks that these cover real memory.
CHUNK_OVERHEAD_BYTES = 256
LAYER_OVERHEAD_BYTES = 1024


class Refused(FrameError):
    """The request cannot be taken (too big, wrong shape for this model): the sender is told FAIL
    and the connection stays open."""


class BudgetExceeded(Refused):
    """Accepting this chunk would exceed the receiver's memory budget (or its peer's share)."""


class Outcome(Enum):
    REBUILDING = "rebuilding"  # every chunk arrived; the cache is being rebuilt
    DELIVERED = "delivered"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Finished:
    outcome: Outcome
    reason: str = ""
    owner: str = ""  # the sender it failed for (a FAILED outcome answers only that sender's chunks)


@dataclass(slots=True)
class LayerAssembly:
    layer_bytes: int
    num_chunks: int
    parts: dict[int, tuple[int, bytes | memoryview]] = field(default_factory=dict)  # chunk index -> (offset, payload)
    received_bytes: int = 0

    @property
    def is_complete(self) -> bool:
        return len(self.parts) == self.num_chunks

    def check_tiling(self, layer_index: int) -> None:
        """The chunks cover the layer exactly once, in order (checked when the last one lands)."""
        expected = 0
        for _, (offset, payload) in sorted(self.parts.items()):
            if offset != expected:
                raise Refused(f"chunk.offset: layer {layer_index} has a chunk at {offset}, expected {expected}")
            expected += len(payload)
        if expected != self.layer_bytes:
            raise Refused(f"chunk.length: layer {layer_index}'s chunks hold {expected} of {self.layer_bytes} bytes")

    def frame(self, buffers: BufferPool | None = None) -> bytes:
        """The whole layer frame (one join; called off the event loop, once). Payload buffers a
        connection handed over go back to `buffers`: the parts are not read after this."""
        payloads = [payload for _, (_, payload) in sorted(self.parts.items())]
        frame = bytes(payloads[0]) if len(payloads) == 1 else b"".join(payloads)
        if buffers is not None:
            for payload in payloads:
                if isinstance(payload, memoryview) and isinstance(payload.obj, bytearray):
                    buffers.give(payload.obj)
        return frame


@dataclass(slots=True)
class RequestAssembly:
    request_id: int
    num_layers: int
    updated_s: float
    peer: str  # whose budget share it is charged to
    owner: str = ""  # the proven sender that started it
    layers: dict[int, LayerAssembly] = field(default_factory=dict)
    charged: int = 0  # bytes counted against the budget for this request

    @property
    def is_complete(self) -> bool:
        return len(self.layers) == self.num_layers and all(a.is_complete for a in self.layers.values())

    def layer_frames(self) -> list[bytes]:
        return [self.layers[i].frame() for i in range(self.num_layers)]


class Reassembler:
    """Partial requests by id; `add` returns the finished assembly when the last chunk lands."""

    def __init__(
        self,
        max_bytes: int,
        abandon_after_s: float,
        remember_finished: int = 4096,
        layer_caps: tuple[int, ...] | None = None,
        max_peer_bytes: int | None = None,
    ) -> None:
        self.max_bytes = max_bytes
        self.max_peer_bytes = int(max_bytes * KV_PEER_SHARE) if max_peer_bytes is None else max_peer_bytes
        self.abandon_after_s = abandon_after_s
        self.layer_caps = layer_caps  # the largest frame each layer of the receiver's model can have
        self.partial: dict[int, RequestAssembly] = {}
        self._in_use = 0
        self._peer_in_use: dict[str, int] = {}
        # finished requests and their outcomes (insertion-ordered, oldest forgotten first)
        self._finished: dict[int, Finished] = {}
        self._remember_finished = remember_finished

    @property
    def bytes_in_use(self) -> int:
        return self._in_use

    def peer_bytes(self, peer: str) -> int:
        return self._peer_in_use.get(peer, 0)

    def finished(self, request_id: int) -> Finished | None:
        """The outcome of a request this receiver finished (None: unknown or still partial)."""
        return self._finished.get(request_id)

    def add(self, h: ChunkHeader, payload: bytes | memoryview, now: float, peer: str = "",
            owner: str = "") -> RequestAssembly | None:
        """Place a checked chunk; duplicates (resends) are harmless; a finished request's chunks are
        ignored. `payload` is kept, not copied (its owner must not change it). Raises FrameError on a chunk that contradicts earlier ones, Refused on a claim this
        model cannot make, BudgetExceeded when the chunk does not fit. A new request is charged to
        `peer`'s budget share and belongs to `owner`."""
        if h.request_id in self._finished:
            return None
        self._check_claim(h)
        request = self.partial.get(h.request_id)
        if request is not None and request.num_layers != h.num_layers:
            raise FrameError(f"chunk.num_layers: {h.num_layers} disagrees with {request.num_layers} seen before")
        layer = request.layers.get(h.layer_index) if request is not None else None
        if layer is not None:
            if (layer.layer_bytes, layer.num_chunks) != (h.layer_bytes, h.num_chunks):
                raise FrameError(f"chunk.layer_bytes: layer {h.layer_index} changed size between chunks")
            if h.chunk_index in layer.parts:
                request.updated_s = now
                return None
            if layer.received_bytes + h.length > layer.layer_bytes:
                raise Refused(f"chunk.length: layer {h.layer_index} of request {h.request_id} got more than "
                              f"its {layer.layer_bytes} bytes")
        payer = request.peer if request is not None else peer
        charge = h.length + CHUNK_OVERHEAD_BYTES + (LAYER_OVERHEAD_BYTES if layer is None else 0)
        self._check_budget(h, payer, charge)
        if request is None:
            request = self.partial[h.request_id] = RequestAssembly(h.request_id, h.num_layers, now, payer, owner)
        if layer is None:
            layer = request.layers[h.layer_index] = LayerAssembly(h.layer_bytes, h.num_chunks)
        layer.parts[h.chunk_index] = (h.offset, payload)
        layer.received_bytes += h.length
        request.charged += charge
        self._in_use += charge
        self._peer_in_use[payer] = self._peer_in_use.get(payer, 0) + charge
        request.updated_s = now
        if layer.is_complete:
            layer.check_tiling(h.layer_index)
        if request.is_complete:
            self.finish(h.request_id, Finished(Outcome.REBUILDING))
            return request
        return None

    def _check_claim(self, h: ChunkHeader) -> None:
        caps = self.layer_caps
        if caps is None:
            return
        if h.num_layers != len(caps):
            raise Refused(f"chunk.num_layers: {h.num_layers}, but this receiver's model has {len(caps)} layers")
        if h.layer_bytes > caps[h.layer_index]:
            raise Refused(f"chunk.layer_bytes: {h.layer_bytes} for layer {h.layer_index} exceeds the "
                          f"{caps[h.layer_index]} bytes its frame can have")

    def _check_budget(self, h: ChunkHeader, peer: str, charge: int) -> None:
        if self._in_use + charge > self.max_bytes:
            raise BudgetExceeded(f"receiver: request {h.request_id} needs {charge} more bytes; "
                                 f"{self._in_use} of {self.max_bytes} are in use")
        held = self._peer_in_use.get(peer, 0)
        if held + charge > self.max_peer_bytes:
            raise BudgetExceeded(f"receiver: request {h.request_id} needs {charge} more bytes; its peer {peer} "
                                 f"holds {held} of its {self.max_peer_bytes}-byte share")

    def finish(self, request_id: int, outcome: Finished) -> None:
        """Forget a request's chunks and remember its outcome (late chunks are answered with it)."""
        self._release(self.partial.pop(request_id, None))
        self._finished.pop(request_id, None)
        self._finished[request_id] = outcome
        if len(self._finished) > self._remember_finished:
            del self._finished[next(iter(self._finished))]

    def forget(self, request_id: int) -> None:
        """Drop a request's chunks and its remembered outcome, as if it had never been seen (another
        sender takes it over: a retry of a request whose first attempt failed or whose sender left)."""
        self._release(self.partial.pop(request_id, None))
        self._finished.pop(request_id, None)

    def _release(self, request: RequestAssembly | None) -> None:
        if request is None:
            return
        self._in_use -= request.charged
        left = self._peer_in_use[request.peer] - request.charged
        if left:
            self._peer_in_use[request.peer] = left
        else:
            del self._peer_in_use[request.peer]

    def expire(self, now: float) -> list[int]:
        """Free requests with no chunk for `abandon_after_s`; returns their ids for reporting."""
        return [r.request_id for r in self.expire_requests(now)]

    def expire_requests(self, now: float) -> list[RequestAssembly]:
        """`expire`, returning the requests themselves (their owners are told)."""
        stale = [r for r in self.partial.values() if now - r.updated_s > self.abandon_after_s]
        for request in stale:
            self._release(self.partial.pop(request.request_id))
        return stale
