"""Shipping a prefill's layers while it computes: tokens after shipping equal local generation in
float32 and bfloat16, frames leave in order from the ship thread, a failure fails the request with
its reason, a frame of another dtype is cast on arrival, and the copy/compute overlap figure is the
hidden share of shipping time.

Tolerance: on one device shipping is exact (frames byte for byte, greedy tokens equal, in either
dtype). Across devices (gpu tests) the frames have the same headers and sizes; float32 caches agree
within 1e-4 of each tensor's scale and greedy tokens are equal; bfloat16 caches agree within 2^-4
of the scale (a few bf16 steps, from different kernels' rounding), and tokens may part at a near-tie.
"""

from __future__ import annotations

import functools
import threading

import pytest
import torch

from emulator.worker.kv_decoder import ModelKVDecoder
from emulator.worker.kv_shipping import LayerShipper, ShipSpan, overlap_fraction, prefill_shipping
from model_stub import PRESET_NAMES, HybridCache, HybridModel, get_preset, tokenizer
from model_stub.model import TORCH_DTYPES
from model_stub.serialize import decode_header, decode_layer, encode_cache, encode_layer

PROMPT = tokenizer.encode("Prefill-as-a-Service ships the KV cache of long prompts across datacenters; "
                          "hybrid models make that cheap.")
NEW_TOKENS = 16
DTYPES = ("float32", "bfloat16")
CROSS_DEVICE_ATOL = {"float32": 1e-4, "bfloat16": 2**-4}  # times each tensor's largest magnitude


@functools.cache
def make_model(name: str, dtype: str, device: str = "cpu") -> HybridModel:
    return HybridModel(get_preset(name, "tiny", dtype=dtype), device=device)


@pytest.fixture
def make_shipper():
    """`make(device)`: a LayerShipper whose ship thread is stopped after the test."""
    shippers: list[LayerShipper] = []

    def make(device: torch.device) -> LayerShipper:
        shippers.append(LayerShipper(device))
        return shippers[-1]

    yield make
    for shipper in shippers:
        shipper.close()


def ship(model: HybridModel, prompt: list[int], shipper: LayerShipper, **kwargs):
    """(first token, [(index, frame, sending thread)], report, local cache) of one shipped prefill."""
    sent: list[tuple[int, bytes, str]] = []
    logits, cache, report = prefill_shipping(
        model, prompt, shipper, lambda i, frame: sent.append((i, frame, threading.current_thread().name)),
        **kwargs)
    return int(logits.argmax()), sent, report, cache


def receive(sent: list[tuple[int, bytes, str]], model: HybridModel) -> HybridCache:
    """The decode worker's path: each frame decoded (and uploaded) as it lands, then assembled."""
    decoder = ModelKVDecoder(model.config, device=model.device)
    return decoder.assemble({i: decoder.decode_layer(i, frame) for i, frame, _ in sent})


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", PRESET_NAMES)
def test_tokens_after_shipping_equal_local_generation(make_shipper, name, dtype):
    model = make_model(name, dtype)
    first, sent, report, local = ship(model, PROMPT, make_shipper(model.device))
    assert [i for i, _, _ in sent] == list(range(model.config.num_layers))
    assert all(thread.startswith("kv-ship") for _, _, thread in sent)
    assert [frame for _, frame, _ in sent] == list(encode_cache(local))  # the bytes, exactly
    assert report.kv_bytes == sum(len(frame) for _, frame, _ in sent)
    cache = receive(sent, model)
    assert model.greedy_continue(cache, first, NEW_TOKENS) == model.generate(PROMPT, NEW_TOKENS)


def test_a_resumed_prefill_ships_frames_of_the_whole_prompt(make_shipper):
    model = make_model("kimi-linear-mini", "bfloat16")
    _, base = model.prefill(PROMPT[:64])
    first, sent, _, _ = ship(model, PROMPT[64:], make_shipper(model.device), cache=base.snapshot(64))
    assert {decode_header(frame)["num_tokens"] for _, frame, _ in sent} == {len(PROMPT)}
    assert model.greedy_continue(receive(sent, model), first, NEW_TOKENS) == model.generate(PROMPT, NEW_TOKENS)


def test_a_failed_send_fails_the_prefill_with_its_reason_and_nothing_after_it_is_sent(make_shipper):
    model = make_model("qwen3-next-mini", "float32")
    shipper = make_shipper(model.device)
    sent: list[int] = []

    def send(index: int, frame: bytes) -> None:
        if index == 1:
            raise ConnectionError("link down at layer 1")
        sent.append(index)

    with pytest.raises(ConnectionError, match="link down at layer 1"):
        prefill_shipping(model, PROMPT, shipper, send)
    assert sent == [0]
    _, again, _, _ = ship(model, PROMPT, shipper)  # the shipper serves the next request
    assert [i for i, _, _ in again] == list(range(model.config.num_layers))


def test_a_failed_prefill_sends_nothing_more(make_shipper):
    model = make_model("qwen3-next-mini", "float32")
    sent: list[int] = []
    calls = iter(range(100))

    def before_ship() -> None:
        if next(calls) == 2:
            raise RuntimeError("out of memory at layer 2")

    with pytest.raises(RuntimeError, match="out of memory at layer 2"):
        prefill_shipping(model, PROMPT, make_shipper(model.device), lambda i, f: sent.append(i),
                         before_ship=before_ship)
    assert sent in ([], [0], [0, 1])  # what was staged may still go out; nothing after the failure


def span(start_s: float, end_s: float) -> ShipSpan:
    return ShipSpan(0, start_s, end_s, 0.0, 1)


@pytest.mark.parametrize(("spans", "fraction"), [
    ([span(1, 2), span(2, 4)], 2 / 3),  # compute runs 0..3: the second layer's last second shows
    ([span(-1, 1)], 1 / 2),  # shipping before the compute window counts as exposed
    ([span(3, 5)], 0.0),
    ([span(0.5, 1), span(1, 2.5)], 1.0),
    ([], 1.0),  # nothing shipped, nothing exposed
])
def test_the_overlap_is_the_share_of_shipping_under_compute(spans, fraction):
    assert overlap_fraction(spans, 0.0, 3.0) == pytest.approx(fraction)


def test_a_report_covers_every_layer_within_its_compute_window(make_shipper):
    model = make_model("mimo-v2-flash-mini", "float32")
    _, sent, report, _ = ship(model, PROMPT, make_shipper(model.device))
    assert [s.index for s in report.spans] == [i for i, _, _ in sent]
    assert [s.frame_bytes for s in report.spans] == [len(frame) for _, frame, _ in sent]
    assert all(s.start_s <= s.end_s and s.copy_wait_s >= 0 for s in report.spans)
    assert report.compute_start_s <= report.first_send_s and 0.0 <= report.overlap <= 1.0


@pytest.mark.parametrize(("sent_in", "decoded_in"), [("bfloat16", "float32"), ("float32", "bfloat16")])
def test_a_frame_of_another_dtype_is_cast_on_arrival_and_announced_once(caplog, sent_in, decoded_in):
    """With dtype auto a GPU prefill worker ships bfloat16 to a CPU decode worker in float32 (or the
    reverse): the decoder casts, so decode continues from the prefill's cache in its own dtype."""
    _, cache = make_model("kimi-linear-mini", sent_in).prefill(PROMPT)
    decoder = ModelKVDecoder(make_model("kimi-linear-mini", decoded_in).config)
    layers = {}
    for i, layer in enumerate(cache.layers):
        frame = encode_layer(i, layer, len(PROMPT))
        assert len(frame) <= decoder.layer_caps[i]  # caps allow the widest dtype
        layers[i] = decoder.decode_layer(i, frame)
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert f"arrive in torch.{sent_in} but this worker's model is {decoded_in}" in caplog.text
    for got, sent in zip(decoder.assemble(layers).layers, cache.layers, strict=True):
        for x, y in zip(got.tensors, sent.tensors, strict=True):
            assert x.dtype == TORCH_DTYPES[decoded_in] and torch.equal(x, y.to(x.dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_tokens_after_shipping_on_cuda_equal_local_generation(make_shipper, dtype):
    model = make_model("kimi-linear-mini", dtype, "cuda")
    first, sent, report, local = ship(model, PROMPT, make_shipper(model.device))
    assert [frame for _, frame, _ in sent] == list(encode_cache(local))
    cache = receive(sent, model)
    assert cache.layers[0].tensors[0].is_cuda and 0.0 <= report.overlap <= 1.0
    assert model.greedy_continue(cache, first, NEW_TOKENS) == model.generate(PROMPT, NEW_TOKENS)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_frames_match_cpu_frames_within_the_precision(make_shipper, dtype):
    cpu, cuda = make_model("qwen3-next-mini", dtype), make_model("qwen3-next-mini", dtype, "cuda")
    _, on_cpu, _, _ = ship(cpu, PROMPT, make_shipper(cpu.device))
    _, on_cuda, _, _ = ship(cuda, PROMPT, make_shipper(cuda.device))
    for (i, a, _), (_, b, _) in zip(on_cpu, on_cuda, strict=True):
        header_a, header_b = decode_header(a), decode_header(b)
        header_a.pop("payload_crc32"), header_b.pop("payload_crc32")
        assert header_a == header_b and len(a) == len(b)
        for x, y in zip(decode_layer(b)[1].tensors, decode_layer(a)[1].tensors, strict=True):
            scale = max(float(y.abs().max()), 1.0)
            torch.testing.assert_close(x.float(), y.float(), rtol=0, atol=CROSS_DEVICE_ATOL[dtype] * scale,
                                       msg=f"layer {i}")
    if dtype == "float32":
        assert cuda.generate(PROMPT, NEW_TOKENS) == cpu.generate(PROMPT, NEW_TOKENS)
