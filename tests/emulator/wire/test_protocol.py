"""The worker control protocol: every op round-trips exactly; bad lines are refused by name."""

from __future__ import annotations

import asyncio
import json

import pytest

from emulator.control.types import FailReason
from emulator.errors import WorkerError
from emulator.wire import protocol as p

PROMPT = p.encode_prompt(bytes(range(200)))
LINK = p.LinkStats(retrans_rate=0.01, rtt_ms=5.2, rtt_inflation=1.3,
                   bytes_sent=123456)
PREFILL = dict(rid=7, prompt=PROMPT, decode_node="local-decode-0", kv_target=("198.18.0.2", 4000),
               output_len=8, resume_tokens=128, resume_key="p128", store=[(192, "p192")],
               deadline_s=5.0)

ONE_OF_EACH = [
    p.Hello(node="remote-prefill-0", roles=["prefill"], kv_port=None, pid=42, device="cpu",
            threads=1, proof="0f" * 32),
    p.Hello(node="local-decode-1", roles=["prefill", "decode"], kv_port=4000, pid=43,
            device="cuda:0", threads=2, proof="a1" * 32),
    p.Challenge(nonce="5e" * 32),
    p.PrefillStarted(rid=1, t=12.5),
    p.PrefillDone(rid=1, t_start=12.5, t_end=12.75, cached_len=512, kv_bytes=166152,
                  first_token=30, held_s=0.1),
    p.TransferDone(rid=1, t_start=12.6, t_end=12.8, status="delivered"),
    p.TransferDone(rid=2, t_start=12.6, t_end=17.6, status="failed", reason=FailReason.DEADLINE,
                   detail="deadline: 5 s"),
    p.FirstToken(rid=1, t=13.0),
    p.Completed(rid=1, t=13.1, tokens=[30, 90, 258], tpot_s=0.002),
    p.Failed(rid=3, stage="transfer", reason=FailReason.TRANSFER_FAILED, detail="receiver: abandoned"),
    p.Stats(t=14.0, queue_depth=3, batch_size=2, role="decode", link=None),
    p.Stats(t=14.25, queue_depth=0, batch_size=0, role="prefill", link=LINK),
    p.RoleSet(role="decode"),
    p.Prefill(**PREFILL),
    p.Prefill(rid=8, prompt=PROMPT, decode_node="local-decode-0", kv_target=("127.0.0.1", 1),
              output_len=1, deadline_s=0.5),
    p.Decode(rid=7, first_token=30, output_len=8, prompt_len=200),
    p.SetRole(role="prefill"),
    p.Cancel(rid=7),
    p.Shutdown(),
    p.Calibrate(lengths=[409, 2048], decode_steps=8),
    p.Calibrated(prefill_s=[0.21, 1.05], decode_step_s=0.012),
]


def test_every_op_has_a_round_trip_case():
    assert {m.op for m in ONE_OF_EACH} == set(p.OP_TO_MODEL)


@pytest.mark.parametrize("msg", ONE_OF_EACH, ids=lambda m: m.op)
def test_round_trip_is_exact(msg):
    line = p.encode(msg)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    obj = json.loads(line)
    assert obj["v"] == 1 and obj["op"] == msg.op
    back = p.decode(line)
    assert back == msg and type(back) is type(msg)
    assert p.encode(back) == line


def test_a_failure_tag_crosses_the_wire_typed():
    """The worker names the FailReason; the gateway reads the enum member, not words."""
    line = p.encode(p.Failed(rid=4, stage="transfer", reason=FailReason.LINK_DOWN, detail="link: gone"))
    assert json.loads(line)["reason"] == "link_down"
    back = p.decode(line)
    assert isinstance(back, p.Failed) and back.reason is FailReason.LINK_DOWN and back.detail == "link: gone"
    done = p.decode(p.encode(p.TransferDone(rid=4, t_start=1.0, t_end=2.0, status="failed",
                                            reason=FailReason.DEADLINE, detail="deadline: 2 s")))
    assert isinstance(done, p.TransferDone) and done.reason is FailReason.DEADLINE


def test_prompt_tokens_come_back_as_the_bytes_sent():
    assert p.Prefill(**PREFILL).prompt_tokens() == list(range(200))


def line_of(**fields) -> bytes:
    return json.dumps(fields).encode()


def prefill_line(**changes) -> bytes:
    fields = {"v": 1, "op": "prefill", **PREFILL, **changes}
    return line_of(**fields)


def case(line: bytes, *words: str):
    return pytest.param(line, words, id=" ".join(words)[:40])


@pytest.mark.parametrize(("line", "words"), [
    case(b"x" * (p.MAX_LINE_BYTES + 1), "line:", str(p.MAX_LINE_BYTES + 1), "MAX_LINE_BYTES"),
    case(b"{not json", "line:", "not JSON"),
    case(b"[1, 2]", "line:", "list", "object"),
    case(line_of(op="cancel", rid=1), "v:", "None", '"v": 1'),
    case(line_of(v=2, op="cancel", rid=1), "v:", "2"),
    case(line_of(v=True, op="cancel", rid=1), "v:", "True"),
    case(line_of(v=1, op="explode"), "op:", "'explode'", "hello"),
    case(line_of(v=1, rid=1), "op:", "None"),
    case(line_of(v=1, op="cancel", rid="3"), "cancel.rid:", "'3'", "integer"),
    case(line_of(v=1, op="cancel", rid=-1), "cancel.rid:", "-1", "greater than or equal to 0"),
    case(line_of(v=1, op="cancel"), "cancel.rid:", "missing"),
    case(line_of(v=1, op="cancel", rid=1, force=True), "cancel.force:", "remove it"),
    case(line_of(v=1, op="set_role", role="relay"), "set_role.role:", "'relay'", "prefill"),
    case(line_of(v=1, op="completed", rid=1, t=1.0, tokens=[1, "a"], tpot_s=0.0),
         "completed.tokens.1:", "'a'"),
    case(line_of(v=1, op="stats", t=1.0, queue_depth=0, batch_size=0, role="decode",
                 link={"rtt_ms": 1}), "stats.link.retrans_rate:", "missing"),
    case(b'{"v": 1, "op": "stats", "t": 1.0, "queue_depth": 0, "batch_size": 0, "role": "prefill", "link": '
         b'{"retrans_rate": 0.0, "rtt_ms": 1.0, "rtt_inflation": Infinity, "bytes_sent": 0}}',
         "stats.link.rtt_inflation:", "less than or equal"),
    case(line_of(v=1, op="stats", t=1.0, queue_depth=0, batch_size=0, role="prefill",
                 link={"retrans_rate": 1.5, "rtt_ms": 1.0, "rtt_inflation": 1.0, "bytes_sent": 0}),
         "stats.link.retrans_rate:", "less than or equal"),
    case(line_of(v=1, op="stats", t=1.0, queue_depth=0, batch_size=0, role="prefill",
                 link={"retrans_rate": 0.0, "rtt_ms": 1.0, "rtt_inflation": 0.5, "bytes_sent": 0}),
         "stats.link.rtt_inflation:", "greater than or equal"),
    case(line_of(v=1, op="failed", rid=1, stage="decode", reason="exploded", detail="d"),
         "failed.reason:", "'exploded'", "decode_failed"),
    case(line_of(v=1, op="failed", rid=1, stage="decode", reason="no_prefill_node", detail="d"),
         "failed.reason:", "no_prefill_node", "gateway's"),
    case(line_of(v=1, op="failed", rid=1, stage="decode", reason="decode: step failed"),
         "failed.reason:", "'decode: step failed'"),
    case(line_of(v=1, op="transfer_done", rid=1, t_start=1.0, t_end=2.0, status="failed"),
         "transfer_done.reason:", "failed transfer"),
    case(line_of(v=1, op="transfer_done", rid=1, t_start=1.0, t_end=2.0, status="delivered",
                 reason="deadline"), "transfer_done.reason:", "delivered"),
    case(prefill_line(prompt="!!!"), "prefill.prompt:", "'!!!'", "base64"),
    case(prefill_line(prompt=""), "prefill.prompt:", "at least 1"),
    case(prefill_line(resume_tokens=100), "prefill.resume_tokens:", "100", "multiple of 64"),
    case(prefill_line(resume_tokens=256), "prefill.resume_tokens:", "256", "200 tokens"),
    case(prefill_line(resume_key=""), "prefill.resume_key:", "empty"),
    case(prefill_line(store=[[100, "k"]]), "prefill.store:", "[100, 'k']", "block boundary"),
    case(prefill_line(kv_target=["h", 70000]), "prefill.kv_target.1:", "70000"),
    case(prefill_line(kv_target="h:1"), "prefill.kv_target:", "'h:1'"),
    case(prefill_line(deadline_s=0), "prefill.deadline_s:", "0", "greater than 0"),
    case(prefill_line(output_len=0), "prefill.output_len:", "0"),
])
def test_bad_lines_are_refused_with_one_line_naming_the_field(line, words):
    with pytest.raises(WorkerError) as err:
        p.decode(line)
    text = str(err.value)
    assert "\n" not in text
    for word in words:
        assert word in text, text


def test_encode_refuses_a_line_the_reader_would_refuse():
    big = p.Prefill(**{**PREFILL, "prompt": p.encode_prompt(bytes(p.MAX_LINE_BYTES))})
    with pytest.raises(WorkerError, match="prefill: .* exceeds MAX_LINE_BYTES"):
        p.encode(big)


def test_prompts_are_bytes():
    with pytest.raises(WorkerError, match="prompt: tokens must be bytes 0-255"):
        p.encode_prompt([1, 256])


async def read_all(data: bytes, eof: bool = True) -> list:
    """Feed `data` to a real StreamReader with the control connection's limit; read it all."""
    reader = asyncio.StreamReader(limit=p.STREAM_LIMIT)
    reader.feed_data(data)
    if eof:
        reader.feed_eof()
    out = []
    while True:
        try:
            msg = await p.read_message(reader)
        except WorkerError as err:
            out.append(str(err))
            continue
        if msg is None:
            return out
        out.append(msg)


def test_stream_skips_an_oversized_line_and_reads_on():
    good = p.encode(p.Cancel(rid=5))
    data = good + b"y" * (3 * p.MAX_LINE_BYTES) + b"\n" + b"not json\n" + good
    out = asyncio.run(read_all(data))
    assert out[0] == p.Cancel(rid=5) and out[-1] == p.Cancel(rid=5)
    assert "exceeds MAX_LINE_BYTES" in out[1] and str(3 * p.MAX_LINE_BYTES + 1) in out[1]
    assert "not JSON" in out[2] and len(out) == 4


def test_stream_end_mid_line_is_reported_not_dropped():
    out = asyncio.run(read_all(p.encode(p.Shutdown()) + b'{"v": 1, "op": "can'))
    assert out[0] == p.Shutdown()
    assert "unterminated line" in out[1] and len(out) == 2
