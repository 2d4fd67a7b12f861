"""Tokens after shipping a cache through a real TCP socket between two processes equal local ones.

A spawned child prefills and sends the cache frames over 127.0.0.1; the parent decodes them and
continues greedily. Every socket operation has a timeout and the child is always reaped.
"""

from __future__ import annotations

import json
import multiprocessing
import socket
import struct
import time

import pytest
import torch

from model_stub import HybridModel, get_preset, serialize, tokenizer

pytestmark = pytest.mark.live  # every test here starts a process

PROMPT = (
    "Prefill-as-a-Service moves the prefill of long prompts to a remote datacenter and ships "
    "the KV cache back; hybrid models make that cheap."
)
NEW_TOKENS = 24
IO_TIMEOUT_S = 60.0
LENGTH = struct.Struct("<Q")
MAX_HEADER_BYTES = 4096
MAX_FRAME_BYTES = 16 << 20  # tiny presets: a layer at 150 tokens is a few KiB


def prefill_and_send(name: str, port: int) -> None:
    """Child: prefill the prompt, then send a JSON header and every frame, each length-prefixed."""
    model = HybridModel(get_preset(name, "tiny"), device="cpu")
    logits, cache = model.prefill(tokenizer.encode(PROMPT))
    frames = list(serialize.encode_cache(cache))
    header = json.dumps(
        {"model": name, "first_token": int(logits.argmax()), "num_frames": len(frames)}
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT_S) as sock:
        sock.sendall(LENGTH.pack(len(header)) + header)
        for frame in frames:
            sock.sendall(LENGTH.pack(len(frame)) + frame)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionError(f"peer closed after {got} of {n} bytes")
        got += k
    return bytes(buf)


def recv_sized(sock: socket.socket, max_bytes: int) -> bytes:
    """A '<Q'-length-prefixed message; the length is checked against the cap before allocating."""
    (n,) = LENGTH.unpack(recv_exact(sock, LENGTH.size))
    if n > max_bytes:
        raise ValueError(f"message length {n} exceeds the cap of {max_bytes} bytes")
    return recv_exact(sock, n)


def accept(server: socket.socket, child: multiprocessing.process.BaseProcess) -> socket.socket:
    """Wait for the child's connection; fail fast (not after the timeout) if the child died."""
    deadline = time.monotonic() + IO_TIMEOUT_S
    server.settimeout(0.5)
    while time.monotonic() < deadline:
        try:
            conn, _ = server.accept()
        except TimeoutError:
            if not child.is_alive():
                pytest.fail(f"child exited with {child.exitcode} before connecting")
            continue
        conn.settimeout(IO_TIMEOUT_S)
        return conn
    pytest.fail(f"child did not connect within {IO_TIMEOUT_S} s")


def receive_cache_frames(name: str) -> tuple[dict, list[bytes], int | None]:
    """Run the child for `name`; returns (header, frames, child exit code)."""
    num_layers = get_preset(name, "tiny").num_layers
    ctx = multiprocessing.get_context("spawn")
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        child = ctx.Process(target=prefill_and_send, args=(name, port), daemon=True)
        child.start()
        try:
            with accept(server, child) as conn:
                header = json.loads(recv_sized(conn, MAX_HEADER_BYTES))
                assert header["model"] == name
                assert header["num_frames"] == num_layers  # checked before reading any frame
                frames = [recv_sized(conn, MAX_FRAME_BYTES) for _ in range(num_layers)]
                assert conn.recv(1) == b""  # the child closed: nothing trails the last frame
        finally:
            child.join(timeout=IO_TIMEOUT_S)
            if child.is_alive():
                child.terminate()
                child.join(timeout=10)
    return header, frames, child.exitcode


@pytest.mark.parametrize("name", ["kimi-linear-mini", "qwen3-next-mini", "mimo-v2-flash-mini"])
def test_generation_from_a_shipped_cache_equals_local_generation(name):
    header, frames, exitcode = receive_cache_frames(name)
    assert exitcode == 0
    config = get_preset(name, "tiny")
    model = HybridModel(config, device="cpu")
    prompt = tokenizer.encode(PROMPT)
    cache = serialize.decode_cache(frames, config)
    assert cache.num_tokens == len(prompt) > 2 * config.chunk_size

    _, local_cache = model.prefill(prompt)  # the parent's own prefill: the same cache, up to noise
    for shipped, local in zip(cache.layers, local_cache.layers, strict=True):
        for a, b in zip(shipped.tensors, local.tensors, strict=True):
            torch.testing.assert_close(a, b)

    shipped_tokens = model.greedy_continue(cache, header["first_token"], NEW_TOKENS)
    assert shipped_tokens == model.generate(prompt, NEW_TOKENS)
    assert len(shipped_tokens) == NEW_TOKENS
