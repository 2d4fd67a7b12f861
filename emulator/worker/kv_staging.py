"""Layer caches between device and host memory, moved while the device keeps computing.

Prefill side: `LayerStager` copies a finished layer into reusable host buffers; on CUDA they are
pinned and the copy runs on a side stream, so layer i's copy overlaps layer i+1's compute. Decode
side: `LayerUploader` moves an arriving layer (decoded into pinned memory) onto the model's device
and dtype on a side stream. On CPU the stager copies synchronously into plain buffers (the same
path, tested without a GPU) and the uploader only casts. It neither encodes nor sends; kv_shipping
does.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch
from torch import Tensor

from model_stub.cache import LayerCache
from model_stub.config import LayerKind

MIN_BUFFER_BYTES = 4096
DEFAULT_POOL_BYTES = 256 << 20  # free host buffers kept for reuse; more is freed


def size_class(nbytes: int) -> int:
    """The buffer size that serves `nbytes`: the next power of two (at least MIN_BUFFER_BYTES), so
    a request's growing layers reuse the buffers of a slightly shorter or longer one."""
    return max(MIN_BUFFER_BYTES, 1 << max(0, nbytes - 1).bit_length())


class HostBufferPool:
    """Reusable 1-D uint8 host buffers by size class, pinned when `pin_memory` (pinning is slow).

    At most `max_free_bytes` of returned buffers are kept; a buffer returned beyond that is freed,
    so the pool never grows without bound. Buffers in use belong to their staged layers: at most
    one request's cache, since a prefill waits for its shipping before the next one starts.
    `take` runs on the torch thread and `give` on the ship thread, hence the lock.
    """

    def __init__(self, max_free_bytes: int = DEFAULT_POOL_BYTES, pin_memory: bool = False) -> None:
        if max_free_bytes < 0:
            raise ValueError(f"max_free_bytes: {max_free_bytes} is negative; use 0 to keep none")
        self.max_free_bytes, self.pin_memory = max_free_bytes, pin_memory
        self.num_allocated = 0  # buffers ever allocated: reuse keeps it flat
        self._free: dict[int, list[Tensor]] = {}
        self._free_bytes = 0
        self._lock = threading.Lock()

    @property
    def free_bytes(self) -> int:
        return self._free_bytes

    def take(self, nbytes: int) -> Tensor:
        size = size_class(nbytes)
        with self._lock:
            free = self._free.get(size)
            if free:
                self._free_bytes -= size
                return free.pop()
            self.num_allocated += 1
        return torch.empty(size, dtype=torch.uint8, pin_memory=self.pin_memory)

    def give(self, buffer: Tensor) -> None:
        size = buffer.numel()
        with self._lock:
            if self._free_bytes + size <= self.max_free_bytes:
                self._free.setdefault(size, []).append(buffer)
                self._free_bytes += size


def host_view(buffer: Tensor, like: Tensor) -> Tensor:
    """The first bytes of `buffer` as a contiguous tensor of `like`'s dtype and shape."""
    nbytes = like.numel() * like.element_size()
    return buffer[:nbytes].view(like.dtype).view(like.shape)


@dataclass(slots=True)
class StagedLayer:
    """A layer on its way to host memory; `host()` once, then `release()` when its bytes are used."""

    index: int
    kind: LayerKind
    tensors: tuple[Tensor, ...]  # host views of `buffers`
    buffers: tuple[Tensor, ...]
    done: torch.cuda.Event | None  # recorded after the copy on the side stream; None on CPU
    pool: HostBufferPool

    def host(self) -> LayerCache:
        """The layer in host memory once its copy finished (blocks this thread, not the device)."""
        if self.done is not None:
            self.done.synchronize()
        return LayerCache(self.kind, self.tensors)

    def release(self) -> None:
        """Hand the buffers back for the next layer; the host tensors must not be used after. Waits
        for the copy first (a skipped layer's DMA must not land in a buffer already reused)."""
        if self.done is not None:
            self.done.synchronize()
        for buffer in self.buffers:
            self.pool.give(buffer)
        self.buffers, self.tensors = (), ()


class LayerStager:
    """Copies finished layers of a model on `device` into host buffers of one bounded pool."""

    def __init__(self, device: torch.device, max_pool_bytes: int = DEFAULT_POOL_BYTES) -> None:
        self.device = device
        self._stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.pool = HostBufferPool(max_pool_bytes, pin_memory=self._stream is not None)

    def stage(self, index: int, layer: LayerCache) -> StagedLayer:
        """Start copying `layer` to host memory and return at once (on the compute thread)."""
        buffers = tuple(self.pool.take(t.numel() * t.element_size()) for t in layer.tensors)
        hosts = tuple(host_view(b, t) for b, t in zip(buffers, layer.tensors, strict=True))
        if self._stream is None:
            for host, t in zip(hosts, layer.tensors, strict=True):
                host.copy_(t)
            return StagedLayer(index, layer.kind, hosts, buffers, None, self.pool)
        # The side stream starts after the compute stream's work so far (this layer's kernels), and
        # each source tensor is marked as used there, so the allocator does not hand its memory to
        # later compute while the copy may still be reading it.
        self._stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self._stream):
            for host, t in zip(hosts, layer.tensors, strict=True):
                host.copy_(t, non_blocking=True)
                t.record_stream(self._stream)
            done = torch.cuda.Event()
            done.record(self._stream)
        return StagedLayer(index, layer.kind, hosts, buffers, done, self.pool)


@dataclass(frozen=True, slots=True)
class Upload:
    """A layer whose copy onto the device may still be running; `LayerUploader.ready` before use."""

    layer: LayerCache
    done: torch.cuda.Event | None  # None: nothing to wait for (CPU)


class LayerUploader:
    """Moves arriving layers onto `device` in `dtype`; on CUDA from pinned memory on a side stream.

    A layer in another dtype (workers on different devices each chose theirs) is cast after the
    copy, on the side stream, so the narrower of the two crosses PCIe. `upload` runs in the
    receiver's decode threads as each layer lands; `ready` makes the device's current stream (the
    model's: the worker never sets another) wait for the copy, on the GPU, so no thread blocks and a
    decode step queued afterwards sees the whole layer.
    """

    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        self.device, self.dtype = device, dtype
        self._stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    @property
    def pin_memory(self) -> bool:
        """Whether arriving layers should be decoded into pinned memory."""
        return self._stream is not None

    def upload(self, layer: LayerCache) -> Upload:
        if self._stream is None:
            return Upload(LayerCache(layer.kind, tuple(t.to(self.dtype) for t in layer.tensors)), None)
        with torch.cuda.stream(self._stream):
            tensors = tuple(t.to(self.device, non_blocking=True).to(self.dtype) for t in layer.tensors)
            done = torch.cuda.Event()
            done.record(self._stream)
        return Upload(LayerCache(layer.kind, tensors), done)

    def ready(self, upload: Upload) -> LayerCache:
        if upload.done is not None:
            stream = torch.cuda.current_stream(self.device)
            stream.wait_event(upload.done)
            for t in upload.layer.tensors:  # allocated on the side stream, used on this one
                t.record_stream(stream)
        return upload.layer
