"""Worker processes for real: the test plays the gateway, spawns `python -m emulator.worker`,
and checks the tokens that come back against one-process generation with the same seed."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
from pathlib import Path

import pytest
import torch

from emulator.control.types import FailReason
from emulator.net.topology import LOCAL, REMOTE
from emulator.wire import protocol as p
from emulator.worker.worker import WORKER_NICE, main
from model_stub import HybridCache, HybridModel, get_preset

from .conftest import PRESET, SEED, SIZE, ControlServer

OUTPUT_LEN = 8


def prompt_of(n: int, seed: int | None = None) -> bytes:
    return random.Random(n if seed is None else seed).randbytes(n)


def prefill(rid: int, prompt: bytes, target: tuple[str, int], output_len: int = OUTPUT_LEN,
            **kw) -> p.Prefill:
    return p.Prefill(rid=rid, prompt=p.encode_prompt(prompt), decode_node="local-decode-0",
                     kv_target=target, output_len=output_len, deadline_s=20.0, **kw)


async def serve(gw: ControlServer, prefill_node: str, rid: int, prompt: bytes,
                output_len: int = OUTPUT_LEN) -> tuple[p.PrefillDone, p.TransferDone, p.Completed]:
    """The gateway's part of one request after its prefill was sent: decode on prefill_done."""
    done = await gw.wait(prefill_node, "prefill_done", rid)
    await gw.send("local-decode-0", p.Decode(rid=rid, first_token=done.first_token,
                                             output_len=output_len, prompt_len=len(prompt)))
    completed = await gw.wait("local-decode-0", "completed", rid)
    transfer = await gw.wait(prefill_node, "transfer_done", rid)
    return done, transfer, completed


def crossed_to_local(topology) -> int:
    return topology.counters().directions["remote->local"].bytes


def log_tail(proc) -> str:
    return Path(proc.log_path).read_text()[-2000:]


@pytest.mark.root
def test_remote_prefill_crosses_the_link_and_decodes_the_reference_tokens(
        topology, spawn, reference):
    prompts = {1: prompt_of(100), 2: prompt_of(700), 3: prompt_of(1500)}

    async def scenario():
        gw = ControlServer()
        port = await gw.start()
        spawn("remote-prefill-0", port, netns=topology.netns(REMOTE))
        spawn("local-decode-0", port, netns=topology.netns(LOCAL), kv_addr=topology.address(LOCAL))
        hello = await gw.wait("local-decode-0", "hello")
        remote_hello = await gw.wait("remote-prefill-0", "hello")
        target = topology.target(LOCAL, hello.kv_port)
        before = crossed_to_local(topology)
        await gw.send("remote-prefill-0",
                      *(prefill(rid, pr, target) for rid, pr in prompts.items()))
        results = await asyncio.gather(*(serve(gw, "remote-prefill-0", rid, pr)
                                         for rid, pr in prompts.items()))
        kv_bytes = sum(done.kv_bytes for done, _, _ in results)
        stats = await gw.wait_until(
            lambda m: m.op == "stats" and m.link is not None and m.link.bytes_sent >= kv_bytes,
            "link stats", "remote-prefill-0")
        crossed = crossed_to_local(topology) - before
        await gw.close()
        return remote_hello, hello, results, kv_bytes, crossed, stats

    remote_hello, hello, results, kv_bytes, crossed, stats = asyncio.run(scenario())
    assert remote_hello.roles == ["prefill"] and remote_hello.kv_port is None
    assert hello.roles == ["prefill", "decode"] and hello.threads == 1 and hello.device == "cpu"
    for (done, transfer, completed), prompt in zip(results, prompts.values(), strict=True):
        assert completed.tokens == reference(prompt, OUTPUT_LEN)
        assert done.cached_len == 0 and done.first_token == completed.tokens[0]
        assert transfer.status == "delivered" and transfer.reason is None
        # layer-wise pipelining: the first layer left before the prefill ended
        assert done.t_start <= transfer.t_start <= done.t_end <= transfer.t_end
        assert done.t_end <= completed.t
    assert crossed >= kv_bytes > 0  # every KV byte went over the shaped link
    assert stats.link.rtt_ms > 0 and stats.role == "prefill"


@pytest.mark.root
def test_a_shared_prefix_is_resumed_from_the_store(topology, spawn, reference):
    prefix = prompt_of(512, seed=1)
    first, second = prefix + prompt_of(300, seed=2), prefix + prompt_of(450, seed=3)

    async def scenario():
        gw = ControlServer()
        port = await gw.start()
        spawn("remote-prefill-0", port, netns=topology.netns(REMOTE))
        spawn("local-decode-0", port, netns=topology.netns(LOCAL), kv_addr=topology.address(LOCAL))
        hello = await gw.wait("local-decode-0", "hello")
        target = topology.target(LOCAL, hello.kv_port)
        await gw.send("remote-prefill-0", prefill(10, first, target, store=[(512, "p512")]))
        stored = await serve(gw, "remote-prefill-0", 10, first)
        await gw.send("remote-prefill-0",
                      prefill(11, second, target, resume_tokens=512, resume_key="p512"),
                      prefill(12, second, target, resume_tokens=512, resume_key="never-stored"))
        resumed = await serve(gw, "remote-prefill-0", 11, second)
        missed = await serve(gw, "remote-prefill-0", 12, second)
        await gw.close()
        return stored, resumed, missed

    stored, resumed, missed = asyncio.run(scenario())
    assert stored[0].cached_len == 0 and stored[2].tokens == reference(first, OUTPUT_LEN)
    assert resumed[0].cached_len == 512
    assert resumed[2].tokens == reference(second, OUTPUT_LEN)
    assert missed[0].cached_len == 0 and missed[2].tokens == resumed[2].tokens
    assert resumed[0].kv_bytes == missed[0].kv_bytes  # the whole cache ships either way


@pytest.mark.root
def test_local_prefill_ships_inside_the_local_namespace(topology, spawn, reference):
    """Same namespace, no shaped link (standing in for RDMA); a slowed worker is still right."""
    prompt = prompt_of(900)

    async def scenario():
        gw = ControlServer()
        port = await gw.start()
        spawn("local-prefill-0", port, speed_factor=0.5, netns=topology.netns(LOCAL))
        spawn("local-decode-0", port, netns=topology.netns(LOCAL), kv_addr=topology.address(LOCAL))
        hello = await gw.wait("local-decode-0", "hello")
        await gw.wait("local-prefill-0", "hello")
        before = crossed_to_local(topology)
        target = (topology.address(LOCAL), hello.kv_port)
        await gw.send("local-prefill-0", prefill(20, prompt, target))
        result = await serve(gw, "local-prefill-0", 20, prompt)
        crossed = crossed_to_local(topology) - before
        await gw.close()
        return result, crossed

    (done, transfer, completed), crossed = asyncio.run(scenario())
    assert completed.tokens == reference(prompt, OUTPUT_LEN)
    assert transfer.status == "delivered"
    assert crossed < done.kv_bytes  # the cache did not take the link
    assert done.held_s > 0 and done.t_end - done.t_start >= done.held_s


def test_continuous_batching_never_exceeds_max_batch_and_matches_the_reference(spawn, reference):
    output_lens = {30: 8, 31: 3, 32: 1, 33: 6}
    prompts = {rid: prompt_of(200 + 150 * i) for i, rid in enumerate(output_lens)}

    async def scenario():
        gw = ControlServer()
        port = await gw.start()
        spawn("local-prefill-0", port)
        spawn("local-decode-0", port, max_batch=2)
        hello = await gw.wait("local-decode-0", "hello")
        target = ("127.0.0.1", hello.kv_port)
        await gw.send("local-prefill-0", *(prefill(rid, prompts[rid], target, n)
                                          for rid, n in output_lens.items()))
        dones = {rid: await gw.wait("local-prefill-0", "prefill_done", rid) for rid in output_lens}
        for rid in output_lens:  # every cache is on the decode worker before any command goes
            assert (await gw.wait("local-prefill-0", "transfer_done", rid)).status == "delivered"
        await gw.send("local-decode-0", *(
            p.Decode(rid=rid, first_token=dones[rid].first_token, output_len=n,
                     prompt_len=len(prompts[rid])) for rid, n in output_lens.items()))
        completed = {rid: await gw.wait("local-decode-0", "completed", rid) for rid in output_lens}
        await gw.close()
        return completed, [m for n, m in gw.messages if n == "local-decode-0"]

    completed, decode_log = asyncio.run(scenario())
    for rid, n in output_lens.items():
        assert completed[rid].tokens == reference(prompts[rid], n)
    assert completed[32].tpot_s == 0.0 and all(completed[r].tpot_s > 0 for r in (30, 31, 33))
    active, most = set(), 0
    for msg in decode_log:  # one connection: the worker's own order of events
        if msg.op == "first_token":
            active.add(msg.rid)
        elif msg.op == "completed":
            active.discard(msg.rid)
        most = max(most, len(active))
    assert most == 2


def test_one_bad_request_fails_alone_and_the_worker_keeps_serving(spawn, reference):
    prompt = prompt_of(300)
    with socket.create_server(("127.0.0.1", 0)) as closed:
        dead_port = closed.getsockname()[1]

    async def scenario():
        gw = ControlServer()
        port = await gw.start()
        spawn("local-prefill-0", port)
        spawn("local-decode-0", port)
        hello = await gw.wait("local-decode-0", "hello")
        await gw.wait("local-prefill-0", "hello")
        gw.writers["local-prefill-0"].write(b'{"v": 1, "op": "prefill", "rid": "x"}\n')
        await gw.send("local-prefill-0", prefill(40, prompt, ("127.0.0.1", dead_port)))
        unreachable = await gw.wait("local-prefill-0", "failed", 40)
        await gw.send("local-decode-0", p.Decode(rid=41, first_token=1, output_len=4, prompt_len=9),
                      p.Cancel(rid=41))
        cancelled = await gw.wait("local-decode-0", "failed", 41)
        await gw.send("local-prefill-0", prefill(42, prompt, ("127.0.0.1", hello.kv_port)))
        done = await gw.wait("local-prefill-0", "prefill_done", 42)
        await gw.send("local-decode-0", p.Decode(rid=42, first_token=done.first_token,
                                                 output_len=OUTPUT_LEN, prompt_len=len(prompt) + 1))
        mismatch = await gw.wait("local-decode-0", "failed", 42)
        await gw.send("local-prefill-0", prefill(43, prompt, ("127.0.0.1", hello.kv_port)))
        good = await serve(gw, "local-prefill-0", 43, prompt)
        await gw.close()
        return unreachable, cancelled, mismatch, good

    unreachable, cancelled, mismatch, good = asyncio.run(scenario())
    assert unreachable.stage == "transfer" and unreachable.reason is FailReason.TRANSFER_FAILED
    assert f"kv_target: 127.0.0.1:{dead_port}" in unreachable.detail
    assert cancelled.stage == "decode" and cancelled.detail == "cancelled by the gateway"
    assert mismatch.reason is FailReason.DECODE_FAILED and mismatch.detail.startswith("decode.prompt_len: 301")
    assert good[2].tokens == reference(prompt, OUTPUT_LEN)


def test_bfloat16_workers_decode_the_bfloat16_reference_and_a_float32_cache_is_cast(spawn):
    """dtype auto is float32 on CPU; workers asked for bfloat16 ship and decode in it, and a float32
    cache reaching a bfloat16 decode worker is cast on arrival and decoded from there."""
    prompt = prompt_of(250)
    fp32, bf16 = (HybridModel(get_preset(PRESET, SIZE, seed=SEED, dtype=d), device="cpu")
                  for d in ("float32", "bfloat16"))

    async def scenario():
        gw = ControlServer()
        port = await gw.start()
        spawn("local-prefill-0", port, dtype="bfloat16")
        spawn("local-decode-0", port, dtype="bfloat16")
        spawn("local-prefill-1", port)  # auto: float32 here
        target = ("127.0.0.1", (await gw.wait("local-decode-0", "hello")).kv_port)
        await gw.send("local-prefill-0", prefill(60, prompt, target))
        same = await serve(gw, "local-prefill-0", 60, prompt)
        await gw.send("local-prefill-1", prefill(61, prompt, target))
        cast = await serve(gw, "local-prefill-1", 61, prompt)
        await gw.close()
        return same, cast

    same, cast = asyncio.run(scenario())
    assert same[1].status == "delivered" and same[2].tokens == bf16.generate(list(prompt), OUTPUT_LEN)
    logits, cache = fp32.prefill(list(prompt))
    cache = HybridCache(bf16.config, [layer.to(torch.bfloat16) for layer in cache.layers], cache.num_tokens)
    assert cast[1].status == "delivered"
    assert cast[2].tokens == bf16.greedy_continue(cache, int(logits.argmax()), OUTPUT_LEN)


def test_set_role_drains_what_the_node_holds_then_switches(spawn, reference):
    prompt = prompt_of(400)

    async def scenario():
        gw = ControlServer()
        port = await gw.start()
        spawn("local-prefill-0", port)
        spawn("local-decode-0", port)
        hello = await gw.wait("local-decode-0", "hello")
        await gw.send("local-prefill-0", prefill(60, prompt, ("127.0.0.1", hello.kv_port)),
                      p.SetRole(role="decode"))
        result = await serve(gw, "local-prefill-0", 60, prompt)
        switched = await gw.wait("local-prefill-0", "role_set")
        stats = await gw.wait_until(lambda m: m.op == "stats" and m.role == "decode", "stats",
                                    "local-prefill-0")
        await gw.close()
        return result, switched, stats, [m.op for n, m in gw.messages if n == "local-prefill-0"]

    (_, _, completed), switched, stats, ops = asyncio.run(scenario())
    assert switched.role == "decode" and stats.role == "decode"
    assert ops.index("prefill_done") < ops.index("transfer_done") < ops.index("role_set")
    assert completed.tokens == reference(prompt, OUTPUT_LEN)


def children_of(pid: int) -> set[int]:
    task_dir = Path(f"/proc/{pid}/task")
    return {int(c) for t in task_dir.iterdir() for c in (t / "children").read_text().split()}


def test_workers_exit_cleanly_and_fail_what_they_hold(spawn):
    """SIGTERM and `shutdown` exit 0 reporting held requests failed; a lost gateway exits 0; a
    SIGKILL leaves no process behind."""

    async def scenario():
        gw = ControlServer()
        port = await gw.start()
        procs = {node: spawn(node, port) for node in
                 ("local-decode-0", "local-decode-1", "remote-prefill-0", "remote-prefill-1")}
        for node in procs:
            await gw.wait(node, "hello")
        held = p.Decode(rid=50, first_token=1, output_len=4, prompt_len=9)  # no cache will come
        await gw.send("local-decode-0", held)
        procs["local-decode-0"].send_signal(signal.SIGTERM)
        failed = await gw.wait("local-decode-0", "failed", 50)
        await gw.send("local-decode-1", held.model_copy(update={"rid": 51}), p.Shutdown())
        failed_too = await gw.wait("local-decode-1", "failed", 51)
        await gw.send("remote-prefill-0", p.SetRole(role="decode"))
        refused = await gw.wait("remote-prefill-0", "role_set")
        gw.writers["remote-prefill-0"].close()
        children = children_of(procs["remote-prefill-1"].pid)
        procs["remote-prefill-1"].kill()
        for node in procs:
            await gw.wait_closed(node)
        return procs, failed, failed_too, refused, children

    procs, failed, failed_too, refused, children = asyncio.run(scenario())
    codes = {node: proc.wait(30) for node, proc in procs.items()}
    logs = {node: log_tail(proc) for node, proc in procs.items()}
    assert codes == {"local-decode-0": 0, "local-decode-1": 0, "remote-prefill-0": 0,
                     "remote-prefill-1": -signal.SIGKILL}, logs
    assert failed.reason is failed_too.reason is FailReason.WORKER_LOST
    assert failed.detail == failed_too.detail == "worker shutting down"
    assert refused.role == "prefill"  # remote nodes only prefill
    assert not [c for c in children if Path(f"/proc/{c}").exists()]


def test_a_worker_runs_below_its_parents_cpu_priority(spawn):
    """A worker yields the CPU to the run's control plane and the dashboard (WORKER_NICE)."""

    async def scenario():
        gw = ControlServer()
        port = await gw.start()
        proc = spawn("local-decode-0", port)
        await gw.wait("local-decode-0", "hello")  # said after it lowered its priority
        return int(Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[16])

    assert asyncio.run(scenario()) >= min(os.nice(0) + WORKER_NICE, 19)  # 19: the lowest there is


def test_bad_arguments_exit_2_with_one_line(capsys, tmp_path):
    good = tmp_path / "good.json"
    good.write_text('{"gateway_port": 1}')
    assert main(["--node", "remote-decode-0", "--settings", str(good)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--node" in err and "remote-prefill-<i>" in err
    for settings, words in (('{"speed_factor": 2, "gateway_port": 1}',
                             "settings.speed_factor: Input should be less than or equal to 1"),
                            ('{}', "settings.gateway_port: Field required"),
                            ('{"gateway_port": 70000}', "settings.gateway_port: Input should be less than or equal"),
                            ('{"conections": 2, "gateway_port": 1}',
                             "settings.conections: Extra inputs are not permitted"),
                            ('{"preset": "gpt", "gateway_port": 1}', "settings.preset: 'gpt' is not a preset"),
                            ('{"size": "huge", "gateway_port": 1}', "settings.size: 'huge' is not a size"),
                            ('{"dtype": "float16", "gateway_port": 1}',
                             "settings.dtype: Input should be 'auto', 'float32' or 'bfloat16'"),
                            ("{", "settings.settings: Invalid JSON"),
                            (" " * 70_000 + "{}", "is over 65536 bytes")):
        path = tmp_path / "settings.json"
        path.write_text(settings)
        assert main(["--node", "local-decode-0", "--settings", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err, err
    assert main(["--node", "local-decode-0", "--settings", "/nonexistent"]) == 2
    assert "--settings: /nonexistent cannot be read" in capsys.readouterr().err
