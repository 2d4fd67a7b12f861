"""One side of a benchmark KV transfer as its own process, importing the transport from a chosen tree.

bench/transport.py starts a receiver and a sender (as decode and prefill workers are separate
processes) and reads each one's CPU time from /proc. `--root` picks the source tree the peer imports,
so one run can set this checkout's transport beside a baseline worktree's on the same link. The
config, secret included, comes as one JSON line on stdin (no secret in argv, issue 25); the peer
answers in JSON lines on stdout.

    receiver: prints {"port"}, then {"request_id", "ready_s"} as each cache is whole; stops at EOF.
    sender:   prints {"ready", "bytes", "frames", "tail_bytes"}, then for each line {"request_id"} on stdin sends
              the frames as that request and prints {"request_id", "start_s", "status"}; stops at EOF.
              With "produce_s" (0-60) on the line, frame i goes at (i + 1) / n of it, as a prefill
              hands its layers over (the live worker's pipelining).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time


def emit(message: dict) -> None:
    print(json.dumps(message), flush=True)


def synthetic_frames(megabytes: float, preset: str = "dense-gqa-mini") -> tuple[str, list[bytes]]:
    """Layer frames of a `preset` (small) cache whose growing layers hold about `megabytes`
    (seeded random values, real format)."""
    import torch

    from model_stub import get_preset
    from model_stub.cache import HybridCache, LayerCache, expected_shapes
    from model_stub.serialize import encode_cache

    config = get_preset(preset)
    tokens = max(64, int(megabytes * 2**20 / config.kv_bytes_per_token()))
    gen = torch.Generator().manual_seed(0)
    layers = [LayerCache(k, tuple(torch.randn(s, generator=gen) for s in expected_shapes(config, k, tokens)))
              for k in config.layer_kinds]
    return config.name, list(encode_cache(HybridCache(config, layers, tokens)))


async def receive(config: dict) -> None:
    from emulator.net.netns import netns_socket
    from emulator.transport.receiver import KVReceiver
    from emulator.wire.auth import KvHelloProof
    from emulator.worker.kv_decoder import ModelKVDecoder
    from model_stub import get_preset

    listener = netns_socket(config["netns"])
    listener.bind((config["addr"], 0))
    listener.listen()
    receiver = KVReceiver(ModelKVDecoder(get_preset(config["preset"])),
                          lambda rid, cache: emit({"request_id": rid, "ready_s": time.monotonic()}),
                          proof=KvHelloProof(config["secret"]))
    await receiver.start(listener)
    emit({"port": listener.getsockname()[1]})
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until EOF
    await receiver.close()


async def send(config: dict) -> None:
    from emulator.net.netns import netns_socket
    from emulator.transport.sender import KVSender
    from emulator.wire.auth import KvHelloProof

    _, frames = synthetic_frames(config["megabytes"], config.get("preset", "dense-gqa-mini"))
    sender = KVSender(lambda: netns_socket(config["netns"]), tuple(config["target"]),
                      proof=KvHelloProof(config["secret"]), sender_id="remote-prefill-0",
                      num_connections=config["connections"])
    await sender.start()
    emit({"ready": True, "bytes": sum(map(len, frames)), "frames": len(frames), "tail_bytes": len(frames[-1])})
    loop = asyncio.get_running_loop()
    try:
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            ask = json.loads(line)
            rid, produce_s = ask["request_id"], min(max(float(ask.get("produce_s", 0.0)), 0.0), 60.0)
            start = time.monotonic()
            for i, frame in enumerate(frames):
                if produce_s:
                    await asyncio.sleep(max(0.0, start + produce_s * (i + 1) / len(frames) - time.monotonic()))
                sender.send_layer(rid, i, len(frames), frame)
            result = await sender.finish(rid, deadline_s=300)
            emit({"request_id": rid, "start_s": start, "status": result.status})
    finally:
        await sender.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=("receiver", "sender"))
    parser.add_argument("--root", required=True, help="the source tree whose emulator/ and model_stub/ to import")
    args = parser.parse_args()
    sys.path.insert(0, args.root)
    config = json.loads(sys.stdin.readline())
    asyncio.run(receive(config) if args.role == "receiver" else send(config))


if __name__ == "__main__":
    main()
