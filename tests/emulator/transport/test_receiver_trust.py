"""The KV receiver does not trust its peers: what a header claims is not what gets allocated, a
finished request id still gets an answer, and connections are limited and timed out (issue 13).
Even a peer that proves the run's secret (issue 25; test_kv_auth.py covers those that do not) is
held to these bounds."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from emulator.transport.frames import HEADER_BYTES, ChunkHeader, FrameType, encode_header, split_layer
from emulator.transport.receiver import KVReceiver
from emulator.transport.sender import KVSender
from emulator.worker.kv_decoder import ModelKVDecoder
from model_stub import HybridModel, get_preset
from model_stub.serialize import encode_cache

from .kv_peer import PROOF, SENDER, WAIT_S, closed_by_peer, proven, read_frame


@pytest.fixture(scope="module")
def shipped():
    """The tiny model's config and the layer frames of one real prefill."""
    model = HybridModel(get_preset("kimi-linear-mini", "tiny"), device="cpu")
    _, cache = model.prefill(list(range(40, 240)) * 2)
    return model.config, list(encode_cache(cache))


def listener(addr: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket()
    sock.bind((addr, 0))
    sock.listen(128)
    return sock


def data_chunk(request_id: int, layer: int, num_layers: int, layer_bytes: int, payload: bytes) -> bytes:
    """One DATA chunk (offset 0) whose header claims `layer_bytes` for its layer."""
    import zlib

    header = ChunkHeader(FrameType.DATA, request_id, layer, num_layers, 0, 1 if len(payload) == layer_bytes else 2,
                         layer_bytes, 0, len(payload), zlib.crc32(payload))
    return encode_header(header) + payload


async def deliver(frames: list[bytes], target: tuple[str, int], request_id: int, **sender_kw):
    sender = KVSender(socket.socket, target, proof=PROOF, sender_id=SENDER, **sender_kw)
    await sender.start()
    try:
        for i, frame in enumerate(frames):
            sender.send_layer(request_id, i, len(frames), frame)
        return await sender.finish(request_id, deadline_s=30)
    finally:
        await sender.close()


def test_a_header_claiming_a_gigabyte_allocates_only_what_arrived(shipped):
    """The report: a 63-byte DATA header claiming layer_bytes=2**30 took the whole 1 GiB budget and
    real transfers then failed 'needs N bytes; 1073741824 of 1073741824 are in use'."""
    config, frames = shipped
    n = config.num_layers
    growing = next(i for i, kind in enumerate(config.layer_kinds) if kind.is_growing)

    async def main():
        sock = listener()
        arrived = {}
        receiver = KVReceiver(ModelKVDecoder(config), arrived.__setitem__, proof=PROOF)
        await receiver.start(sock)
        reader, writer = await proven(sock.getsockname(), sender="local-prefill-0")
        writer.write(data_chunk(99, growing, n, 2**30, b"7 bytes"))  # beyond any layer of this model
        refused, reason = await read_frame(reader)
        writer.write(data_chunk(98, growing, n, 150 << 20, b"7 bytes"))  # plausible size, 7 bytes sent
        ack, _ = await read_frame(reader)
        in_use = receiver.reassembler.bytes_in_use
        result = await deliver(frames, sock.getsockname(), request_id=1)
        writer.close()
        await receiver.close()
        return refused, reason.decode(), ack, in_use, result, arrived

    refused, reason, ack, in_use, result, arrived = asyncio.run(main())
    assert refused.type is FrameType.FAIL and refused.request_id == 99 and "layer_bytes" in reason
    assert ack.type is FrameType.ACK and ack.request_id == 98
    assert in_use < 64 << 10  # 7 bytes and bookkeeping, not the 150 MiB the header claimed
    assert result.status == "delivered", result
    assert 1 in arrived


def test_one_peer_cannot_starve_another_of_the_budget(shipped):
    """A peer that really sends bytes and never finishes holds at most its share of the budget."""
    config, frames = shipped
    n = config.num_layers
    growing = next(i for i, kind in enumerate(config.layer_kinds) if kind.is_growing)
    budget = 3 * sum(map(len, frames)) + (64 << 10)  # the hog may take half: the rest still fits one transfer

    async def main():
        sock = listener("0.0.0.0")
        port = sock.getsockname()[1]
        receiver = KVReceiver(ModelKVDecoder(config), lambda rid, cache: None, proof=PROOF, max_partial_bytes=budget)
        await receiver.start(sock)
        reader, writer = await proven(("127.0.0.2", port), source="127.0.0.2", sender="local-prefill-0")
        replies = []
        for rid in range(100, 100 + budget // 4096 + 2):  # a never-ending stream of first chunks
            writer.write(data_chunk(rid, growing, n, 1 << 20, bytes(4096)))
            replies.append((await read_frame(reader))[0].type)
            if replies[-1] is FrameType.FAIL:
                break
        result = await deliver(frames, ("127.0.0.1", port), request_id=1)
        writer.close()
        await receiver.close()
        return replies, result

    replies, result = asyncio.run(main())
    assert replies[-1] is FrameType.FAIL and FrameType.ACK in replies  # the hog was refused at its share
    assert result.status == "delivered", result


def test_a_repeated_request_id_gets_done_or_fail_not_silence(shipped):
    """The report: a chunk of a request the receiver had finished was ACKed and then nothing, so the
    sender waited out its whole deadline."""
    config, frames = shipped

    async def main():
        sock = listener()
        receiver = KVReceiver(ModelKVDecoder(config), lambda rid, cache: None, proof=PROOF)
        await receiver.start(sock)
        first = await deliver(frames, sock.getsockname(), request_id=1)
        reader, writer = await proven(sock.getsockname())
        writer.write(split_layer(1, 0, len(frames), frames[0], 4096)[0].encode())  # a late resend
        answers = [(await read_frame(reader))[0].type]
        if answers[0] is FrameType.ACK:
            answers.append((await read_frame(reader))[0].type)
        writer.write(data_chunk(7, 0, len(frames), 1 << 30, b"x"))  # refused: too big for layer 0
        failed, _ = await read_frame(reader)
        writer.write(data_chunk(7, 0, len(frames), 8, b"x"))  # the same id again
        again, reason = await read_frame(reader)
        writer.close()
        await receiver.close()
        return first, answers, failed, again, reason.decode()

    first, answers, failed, again, reason = asyncio.run(main())
    assert first.status == "delivered"
    assert answers[-1] is FrameType.DONE
    assert failed.type is FrameType.FAIL
    assert again.type is FrameType.FAIL and again.request_id == 7 and "already failed" in reason


def test_proven_connections_beyond_the_limits_are_refused_and_the_receiver_keeps_serving(shipped):
    config, frames = shipped

    async def main():
        sock = listener("0.0.0.0")
        port = sock.getsockname()[1]
        receiver = KVReceiver(ModelKVDecoder(config), lambda rid, cache: None, proof=PROOF, max_connections=4,
                              max_connections_per_peer=2)
        await receiver.start(sock)
        held = [await proven(("127.0.0.2", port), source="127.0.0.2") for _ in range(2)]
        over_peer = await proven(("127.0.0.2", port), source="127.0.0.2")
        peer_refused = await closed_by_peer(over_peer[0])
        held += [await proven(("127.0.0.3", port), source="127.0.0.3") for _ in range(2)]
        over_total = await proven(("127.0.0.4", port), source="127.0.0.4")
        total_refused = await closed_by_peer(over_total[0])
        open_now = receiver.num_connections
        for _, writer in held[2:]:
            writer.close()
        result = await deliver(frames, ("127.0.0.1", port), request_id=3, num_connections=2)
        for _, writer in held[:2]:
            writer.close()
        await receiver.close()
        return peer_refused, total_refused, open_now, result

    peer_refused, total_refused, open_now, result = asyncio.run(main())
    assert peer_refused and total_refused and open_now == 4
    assert result.status == "delivered", result


@pytest.mark.slow
def test_silent_and_half_sent_connections_are_closed_but_an_idle_sender_is_not(shipped):
    """A connection that never sends a header, or stops halfway through one or through a payload,
    is closed; a real sender that connected and then waited longer than that still delivers (the
    receiver closed its connections, which had carried no data; it opens new ones for the request)."""
    config, frames = shipped

    async def main():
        sock = listener()
        target = sock.getsockname()
        receiver = KVReceiver(ModelKVDecoder(config), lambda rid, cache: None, proof=PROOF, handshake_timeout_s=0.3,
                              stall_timeout_s=0.3)
        await receiver.start(sock)
        sender = KVSender(socket.socket, target, proof=PROOF, sender_id=SENDER, num_connections=2)
        await sender.start()
        silent = await asyncio.open_connection(*target)
        half_header = await proven(target)
        half_header[1].write(data_chunk(5, 0, len(frames), 100, bytes(100))[:20])
        half_payload = await proven(target)
        half_payload[1].write(data_chunk(5, 0, len(frames), 100, bytes(100))[: HEADER_BYTES + 10])
        closed = [await closed_by_peer(c[0]) for c in (silent, half_header, half_payload)]
        await asyncio.sleep(0.6)  # the sender stays idle past both timeouts
        for i, frame in enumerate(frames):
            sender.send_layer(4, i, len(frames), frame)
        result = await sender.finish(4, deadline_s=30)
        await sender.close()
        await receiver.close()
        return closed, result, sender

    closed, result, sender = asyncio.run(main())
    assert closed == [True, True, True]
    assert result.status == "delivered" and sender.resent_chunks == 0


EMFILE_RECEIVER = textwrap.dedent("""
    import asyncio, logging, os, resource, socket, sys
    from emulator.worker.kv_decoder import ModelKVDecoder
    from emulator.transport.receiver import KVReceiver
    from emulator.wire.auth import KvHelloProof, new_secret
    from model_stub import get_preset

    async def main():
        logging.basicConfig(level=logging.WARNING)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        receiver = KVReceiver(ModelKVDecoder(get_preset("kimi-linear-mini", "tiny")), lambda rid, cache: None,
                              proof=KvHelloProof(new_secret()))
        await receiver.start(sock)
        fillers = []
        try:
            while True:  # use up every descriptor, as 1,100 idle connections did
                fillers.append(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            pass
        print(sock.getsockname()[1], flush=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.readline)  # connections pile up meanwhile
        for fd in fillers:
            os.close(fd)
        print("freed", flush=True)
        await loop.run_in_executor(None, sys.stdin.readline)
        await receiver.close()

    resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    asyncio.run(main())
""")


@pytest.mark.live
def test_accept_out_of_descriptors_backs_off_logs_once_and_recovers(tmp_path):
    """The report: 1,100 idle connections made accept fail with EMFILE in a loop of tracebacks."""
    log_path = tmp_path / "receiver.log"
    with log_path.open("w") as log_file:
        proc = subprocess.Popen([sys.executable, "-c", EMFILE_RECEIVER], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=log_file, text=True)
    clients = []
    try:
        port = int(proc.stdout.readline())
        clients = [socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) for _ in range(5)]
        for c in clients:
            c.sendall(b"PKVC" + b"\xff" * (HEADER_BYTES - 4))  # a bad header: closed once accepted
        time.sleep(2.5)  # accept keeps failing meanwhile: the log must not grow with it
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "freed"
        closed = [_read_to_eof(c) for c in clients]  # accepted (challenged) once descriptors were free again
        proc.stdin.write("\n")
        proc.stdin.flush()
        proc.wait(timeout=WAIT_S)
    finally:
        for c in clients:
            c.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = log_path.read_text()
    assert closed == [True] * 5
    assert "Traceback" not in log and len(log) < 4096, log[:2000]
    assert sum("descriptors" in line for line in log.splitlines()) == 1, log


def _read_to_eof(sock: socket.socket) -> bool:
    """True when the receiver closed `sock` (after its CHALLENGE) within the socket's timeout."""
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return False
    return True
