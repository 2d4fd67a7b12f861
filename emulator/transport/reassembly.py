"""Receiver-side reassembly: chunks in any order, on any connection, into whole layer frames.

Memory is bounded: a layer's buffer is allocated only when its first chunk arrives and only if
the budget allows it; requests that stop making progress are expired and reported, never kept.
Time is passed in, so the policy is testable without sockets.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from emulator.transport.frames import ChunkHeader, FrameError


class BudgetExceeded(FrameError):
    """Accepting this layer would exceed the receiver's memory budget for partial requests."""


@dataclass(slots=True)
class LayerAssembly:
    layer_bytes: int
    num_chunks: int
    buffer: bytearray
    received: set[int] = field(default_factory=set)

    @property
    def is_complete(self) -> bool:
        return len(self.received) == self.num_chunks


@dataclass(slots=True)
class RequestAssembly:
    request_id: int
    num_layers: int
    updated_s: float
    layers: dict[int, LayerAssembly] = field(default_factory=dict)

    @property
    def is_complete(self) -> bool:
        return len(self.layers) == self.num_layers and all(a.is_complete for a in self.layers.values())

    @property
    def nbytes(self) -> int:
        return sum(a.layer_bytes for a in self.layers.values())

    def layer_frames(self) -> list[bytes]:
        return [bytes(self.layers[i].buffer) for i in range(self.num_layers)]


class Reassembler:
    """Partial requests by id; `add` returns the finished assembly when the last chunk lands."""

    def __init__(self, max_bytes: int, abandon_after_s: float, remember_finished: int = 4096) -> None:
        self.max_bytes = max_bytes
        self.abandon_after_s = abandon_after_s
        self.partial: dict[int, RequestAssembly] = {}
        # late resends of a finished request must not start a new partial one (insertion-ordered)
        self._finished: dict[int, None] = {}
        self._remember_finished = remember_finished

    @property
    def bytes_in_use(self) -> int:
        return sum(r.nbytes for r in self.partial.values())

    def add(self, h: ChunkHeader, payload: bytes | memoryview, now: float) -> RequestAssembly | None:
        """Place a checked chunk; duplicates (resends) are harmless. Raises FrameError on a chunk
        that contradicts earlier ones, BudgetExceeded when a new layer does not fit."""
        if h.request_id in self._finished:
            return None
        request = self.partial.get(h.request_id)
        if request is None:
            request = self.partial[h.request_id] = RequestAssembly(h.request_id, h.num_layers, now)
        elif request.num_layers != h.num_layers:
            raise FrameError(f"chunk.num_layers: {h.num_layers} disagrees with {request.num_layers} seen before")
        layer = request.layers.get(h.layer_index)
        if layer is None:
            if self.bytes_in_use + h.layer_bytes > self.max_bytes:
                raise BudgetExceeded(
                    f"receiver: layer {h.layer_index} of request {h.request_id} needs {h.layer_bytes} bytes; "
                    f"{self.bytes_in_use} of {self.max_bytes} are in use"
                )
            layer = request.layers[h.layer_index] = LayerAssembly(h.layer_bytes, h.num_chunks, bytearray(h.layer_bytes))
        elif (layer.layer_bytes, layer.num_chunks) != (h.layer_bytes, h.num_chunks):
            raise FrameError(f"chunk.layer_bytes: layer {h.layer_index} changed size between chunks")
        if h.chunk_index not in layer.received:
            layer.buffer[h.offset : h.offset + h.length] = payload
            layer.received.add(h.chunk_index)
        request.updated_s = now
        if request.is_complete:
            self.finish(h.request_id)
            return request
        return None

    def finish(self, request_id: int) -> None:
        """Forget a request (complete, failed or refused) and ignore its late chunks from now on."""
        self.partial.pop(request_id, None)
        self._finished[request_id] = None
        if len(self._finished) > self._remember_finished:
            del self._finished[next(iter(self._finished))]

    def expire(self, now: float) -> list[int]:
        """Free requests with no chunk for `abandon_after_s`; returns their ids for reporting."""
        stale = [rid for rid, r in self.partial.items() if now - r.updated_s > self.abandon_after_s]
        for rid in stale:
            del self.partial[rid]
        return stale
