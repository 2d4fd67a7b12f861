"""Staging finished layers into host buffers and uploading arriving ones: the same bytes come out,
buffers are reused within a bound; on CUDA the copies run on side streams (tests marked gpu)."""

from __future__ import annotations

import pytest
import torch

from emulator.worker.kv_staging import (
    MIN_BUFFER_BYTES,
    HostBufferPool,
    LayerStager,
    LayerUploader,
    size_class,
)
from model_stub import HybridModel, get_preset
from model_stub.model import TORCH_DTYPES
from model_stub.serialize import decode_layer, encode_layer

PRESET = "qwen3-next-mini"  # gdn layers (a non-contiguous conv state) and a full-attention layer
DTYPES = ("float32", "bfloat16")
CPU = torch.device("cpu")


def prefill_layers(dtype: str, device: str = "cpu", num_tokens: int = 70) -> list:
    model = HybridModel(get_preset(PRESET, "tiny", dtype=dtype), device=device)
    prompt = torch.randint(0, 256, (num_tokens,), generator=torch.Generator().manual_seed(3)).tolist()
    return model.prefill(prompt)[1].layers


@pytest.mark.parametrize(("nbytes", "size"), [(0, MIN_BUFFER_BYTES), (1, MIN_BUFFER_BYTES),
                                              (MIN_BUFFER_BYTES, MIN_BUFFER_BYTES),
                                              (MIN_BUFFER_BYTES + 1, 2 * MIN_BUFFER_BYTES), (3 << 20, 4 << 20)])
def test_a_buffer_size_is_the_next_power_of_two(nbytes, size):
    assert size_class(nbytes) == size


def test_the_pool_reuses_buffers_by_size_and_keeps_at_most_its_bound():
    pool = HostBufferPool(max_free_bytes=3 * MIN_BUFFER_BYTES)
    a, b = pool.take(100), pool.take(MIN_BUFFER_BYTES)
    pool.give(a)
    assert pool.take(200) is a and pool.num_allocated == 2
    pool.give(a)
    pool.give(b)
    big = pool.take(2 * MIN_BUFFER_BYTES)  # another size class: a new buffer
    assert pool.num_allocated == 3 and pool.free_bytes == 2 * MIN_BUFFER_BYTES
    pool.give(big)  # keeping it would make 4 x MIN_BUFFER_BYTES free, over the bound: freed
    assert pool.free_bytes == 2 * MIN_BUFFER_BYTES
    with pytest.raises(ValueError, match="max_free_bytes: -1 is negative"):
        HostBufferPool(max_free_bytes=-1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_staged_layers_hold_the_same_tensors_and_frame_bytes(dtype):
    layers = prefill_layers(dtype)
    assert any(not t.is_contiguous() for layer in layers for t in layer.tensors)  # the case that matters
    stager = LayerStager(CPU)
    for i, layer in enumerate(layers):
        staged = stager.stage(i, layer)
        host = staged.host()
        assert host.kind is layer.kind
        for got, want in zip(host.tensors, layer.tensors, strict=True):
            assert got.dtype == want.dtype and got.device == CPU and torch.equal(got, want)
        assert encode_layer(i, host, 70) == encode_layer(i, layer, 70)
        staged.release()


def test_a_second_request_reuses_the_first_ones_buffers():
    layers = prefill_layers("float32")
    stager = LayerStager(CPU)
    for _ in range(2):
        staged = [stager.stage(i, layer) for i, layer in enumerate(layers)]
        for s in staged:
            s.host()
            s.release()
        assert s.buffers == () and s.tensors == ()
    assert stager.pool.num_allocated == 2 * len(layers)  # the first request's buffers only


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_uploader_on_cpu_hands_layers_through_in_the_models_dtype(dtype):
    layer = prefill_layers(dtype)[0]
    same = LayerUploader(CPU, TORCH_DTYPES[dtype])
    assert not same.pin_memory
    assert all(got is want for got, want in zip(same.ready(same.upload(layer)).tensors, layer.tensors, strict=True))
    other = "float32" if dtype == "bfloat16" else "bfloat16"
    cast = LayerUploader(CPU, TORCH_DTYPES[other])
    for got, want in zip(cast.ready(cast.upload(layer)).tensors, layer.tensors, strict=True):
        assert torch.equal(got, want.to(TORCH_DTYPES[other]))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_staging_on_cuda_gives_the_bytes_a_blocking_copy_gives(dtype):
    device = torch.device("cuda")
    layers = prefill_layers(dtype, "cuda")
    stager = LayerStager(device)
    assert stager.pool.pin_memory
    staged = [stager.stage(i, layer) for i, layer in enumerate(layers)]  # all in flight at once
    for s, layer in zip(staged, layers, strict=True):
        host = s.host()
        assert all(t.is_pinned() for t in host.tensors)
        assert encode_layer(s.index, host, 70) == encode_layer(s.index, layer.to("cpu"), 70)
        s.release()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_uploading_a_pinned_frame_on_cuda_gives_the_sent_tensors(dtype):
    device = torch.device("cuda")
    uploader = LayerUploader(device, TORCH_DTYPES[dtype])
    assert uploader.pin_memory
    for i, layer in enumerate(prefill_layers(dtype)):
        _, decoded, _ = decode_layer(encode_layer(i, layer, 70), pin_memory=True)
        assert all(t.is_pinned() for t in decoded.tensors)
        ready = uploader.ready(uploader.upload(decoded))
        for got, want in zip(ready.tensors, layer.tensors, strict=True):
            assert got.device.type == "cuda" and torch.equal(got.cpu(), want)
