"""The netem plan and its netlink encoding, checked against hand-computed values; no root needed."""

from __future__ import annotations

import struct

import pytest
from pyroute2.netlink import NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE, NLM_F_REQUEST
from pyroute2.netlink.rtnl import TC_H_ROOT
from pyroute2.netlink.rtnl.tcmsg import common as tc_common, tcmsg

from emulator.errors import LinkBackendUnavailable
from emulator.net.backend import LinkEnds
from emulator.net.netem_backend import (
    encode_op,
    observed_params,
    parse_handle,
    readback_mismatches,
)
from emulator.net.netem_plan import (
    MAX_TC_RATE_BYTES_PER_S,
    QdiscOp,
    plan_netem,
    plan_update,
)
from emulator.net.spec import LinkShape, LinkSpec

ENDS = LinkEnds(
    "abc123", "prf-abc123-remote", "prf-abc123-local", "prf-abc123-rmt", "prf-abc123-loc"
)
ENDS_1500 = LinkEnds(
    "abc123", "prf-abc123-remote", "prf-abc123-local", "prf-abc123-rmt", "prf-abc123-loc", mtu=1500
)
Param = tuple[str, int | float]


def remote_netem(*params: Param) -> QdiscOp:
    return QdiscOp(ENDS.remote_netns, ENDS.remote_ifname, "add", "netem", "1:", None, params)


def local_netem(*params: Param) -> QdiscOp:
    return QdiscOp(ENDS.local_netns, ENDS.local_ifname, "add", "netem", "1:", None, params)


def test_shaped_link_has_exact_pyroute2_parameters() -> None:
    # 800 Mbit/s = 1e8 B/s; 10 ms = 10_000 us; limit = 1000 + ceil(1e8 * 0.010 / 9000) = 1112
    spec = LinkSpec(bandwidth_mbit=800, delay_ms=10, loss_pct=1)
    want = (
        ("delay", 10_000),
        ("jitter", 0),
        ("loss", 1.0),
        ("loss_corr", 0.0),
        ("limit", 1112),
        ("rate", 100_000_000),
    )
    assert plan_netem(spec, ENDS) == [remote_netem(*want), local_netem(*want)]


def test_asymmetric_spec_shapes_each_end_with_its_own_direction() -> None:
    reverse = LinkShape(
        bandwidth_mbit=100, delay_ms=5, queue_packets=200, loss_pct=2, loss_correlation_pct=25
    )
    spec = LinkSpec(bandwidth_mbit=800, delay_ms=10, reverse=reverse)
    remote, local = plan_netem(spec, ENDS)
    assert remote.netns == ENDS.remote_netns and remote.ifname == ENDS.remote_ifname
    assert remote.kwargs()["rate"] == 100_000_000 and remote.kwargs()["delay"] == 10_000
    # 100 Mbit/s = 12.5e6 B/s; limit = 200 + ceil(12.5e6 * 0.005 / 9000) = 207
    assert local == local_netem(
        ("delay", 5000),
        ("jitter", 0),
        ("loss", 2.0),
        ("loss_corr", 25.0),
        ("limit", 207),
        ("rate", 12_500_000),
    )


def test_unshaped_direction_has_no_rate_and_sizes_its_delay_line_for_the_top_speed() -> None:
    # limit = 1000 + ceil(12.5e9 B/s (100 Gbit/s) * 0.010 / 9000) = 14889
    (remote, local) = plan_netem(LinkSpec(delay_ms=10), ENDS)
    assert "rate" not in remote.kwargs() and "rate" not in local.kwargs()
    assert remote.kwargs()["limit"] == 14889


def test_jitter_keeps_order_through_netem_rate() -> None:
    # Unshaped + jitter: the ordering rate, 2**32 - 1 B/s; limit = 1000 + ceil(R * 0.012 / 9000)
    remote, _ = plan_netem(LinkSpec(delay_ms=10, jitter_ms=2), ENDS)
    assert remote.kwargs() == {
        "delay": 10_000,
        "jitter": 2000,
        "loss": 0.0,
        "loss_corr": 0.0,
        "limit": 6727,
        "rate": MAX_TC_RATE_BYTES_PER_S,
    }
    shaped, _ = plan_netem(LinkSpec(bandwidth_mbit=800, delay_ms=10, jitter_ms=2), ENDS)
    assert shaped.kwargs()["rate"] == 100_000_000  # the shaped rate already keeps order
    loose, _ = plan_netem(LinkSpec(delay_ms=10, jitter_ms=2), ENDS, keep_order=False)
    assert "rate" not in loose.kwargs() and loose.kwargs()["limit"] == 17667


def test_tbf_fallback_puts_rate_in_a_child_of_netem() -> None:
    # 80 Mbit/s = 1e7 B/s, mtu 1500: netem limit = 100 + ceil(1e7 * 0.01 / 1500) = 167;
    # tbf burst = max(2 * 1500, 1e7 * 0.001) = 10000 B, tbf limit = 100 * 1500 = 150000 B.
    spec = LinkSpec(bandwidth_mbit=80, delay_ms=10, queue_packets=100)
    ops = plan_netem(spec, ENDS_1500, netem_rate=False)
    assert [(op.kind, op.handle, op.parent, op.ifname) for op in ops] == [
        ("netem", "1:", None, ENDS.remote_ifname),
        ("tbf", "10:", "1:1", ENDS.remote_ifname),
        ("netem", "1:", None, ENDS.local_ifname),
        ("tbf", "10:", "1:1", ENDS.local_ifname),
    ]
    assert ops[0].params == (
        ("delay", 10_000),
        ("jitter", 0),
        ("loss", 0.0),
        ("loss_corr", 0.0),
        ("limit", 167),
    )
    assert ops[1].params == (("rate", 10_000_000), ("burst", 10_000), ("limit", 150_000))


def test_tbf_fallback_without_rate_has_no_tbf() -> None:
    ops = plan_netem(LinkSpec(delay_ms=10), ENDS, netem_rate=False)
    assert [op.kind for op in ops] == ["netem", "netem"]


@pytest.mark.parametrize("netem_rate", [True, False])
@pytest.mark.parametrize(
    ("old", "new"),
    [
        (LinkSpec(bandwidth_mbit=800, delay_ms=10), LinkSpec(bandwidth_mbit=400, delay_ms=20)),
        (LinkSpec(bandwidth_mbit=800, delay_ms=10), LinkSpec(delay_ms=10)),
        (LinkSpec(delay_ms=10), LinkSpec(bandwidth_mbit=800, delay_ms=10, loss_pct=1)),
    ],
)
def test_update_uses_change_and_replace_only(
    old: LinkSpec, new: LinkSpec, netem_rate: bool
) -> None:
    ops = plan_update(old, new, ENDS, netem_rate=netem_rate)
    assert ops and {op.command for op in ops} <= {"change", "replace"}
    assert {op.command for op in ops if op.kind == "netem"} == {"change"}


def test_update_states_rate_zero_to_switch_netem_rate_off() -> None:
    # netem keeps an absent TCA_NETEM_RATE on change, so "unshaped" must say rate 0.
    ops = plan_update(LinkSpec(bandwidth_mbit=800, delay_ms=10), LinkSpec(delay_ms=10), ENDS)
    assert [op.kwargs()["rate"] for op in ops] == [0, 0]


def test_update_skips_an_unchanged_direction() -> None:
    reverse = LinkShape(bandwidth_mbit=100)
    old, new = LinkSpec(delay_ms=10, reverse=reverse), LinkSpec(delay_ms=30, reverse=reverse)
    ops = plan_update(old, new, ENDS)
    assert [(op.ifname, op.kwargs()["delay"]) for op in ops] == [(ENDS.remote_ifname, 30_000)]


def test_fallback_update_replaces_the_tbf_child() -> None:
    shaped, unshaped = LinkSpec(bandwidth_mbit=80, delay_ms=10), LinkSpec(delay_ms=10)
    up = plan_update(unshaped, shaped, ENDS_1500, netem_rate=False)
    assert [(op.kind, op.command) for op in up] == [("netem", "change"), ("tbf", "replace")] * 2
    assert all("rate" not in op.kwargs() for op in up if op.kind == "netem")
    # Shaped -> unshaped keeps the child (removing it would be a delete) and opens it up:
    # burst = ceil((2**32 - 1) * 0.001) = 4294968 B.
    down = plan_update(shaped, unshaped, ENDS_1500, netem_rate=False)
    assert [op.params for op in down if op.kind == "tbf"] == [
        (("rate", MAX_TC_RATE_BYTES_PER_S), ("burst", 4_294_968), ("limit", 1_500_000))
    ] * 2


def test_rates_the_u32_fields_cannot_carry_are_refused_by_field() -> None:
    with pytest.raises(LinkBackendUnavailable, match=r"^link\.bandwidth_mbit: 40000 "):
        plan_netem(LinkSpec(bandwidth_mbit=40_000), ENDS)
    with pytest.raises(LinkBackendUnavailable, match=r"^link\.reverse\.bandwidth_mbit: 50000 "):
        plan_netem(LinkSpec(reverse=LinkShape(bandwidth_mbit=50_000)), ENDS)


def test_ends_without_namespaces_are_refused() -> None:
    ends = LinkEnds("abc123", None, None, "lo", "lo", "127.0.0.1", "127.0.0.1")
    with pytest.raises(LinkBackendUnavailable, match="no network namespaces"):
        plan_netem(LinkSpec(), ends)


def _decoded(msg: tcmsg) -> tcmsg:
    msg.encode()
    out = tcmsg(msg.data)
    out.decode()
    return out


def test_netem_encoding_carries_rate_inside_options_and_always_the_correlation() -> None:
    op = plan_netem(LinkSpec(bandwidth_mbit=800, delay_ms=10, loss_pct=1), ENDS)[0]
    msg = _decoded(encode_op(op, index=7))
    assert [name for name, _ in msg["attrs"]] == ["TCA_KIND", "TCA_OPTIONS"]  # no TCA_RATE
    assert (msg["index"], msg["handle"], msg["parent"]) == (7, 0x10000, TC_H_ROOT)
    assert msg["header"]["flags"] == NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL
    opts = msg.get_attr("TCA_OPTIONS")
    assert opts["delay"] == int(tc_common.time2tick(10_000))  # microseconds -> psched ticks
    assert (opts["loss"], opts["limit"]) == (42_949_672, 1112)  # 1 % of 2**32 - 1
    assert opts.get_attr("TCA_NETEM_RATE")["rate"] == 100_000_000
    assert opts.get_attr("TCA_NETEM_CORR")["loss_corr"] == 0


def test_change_and_replace_flags_and_child_handles() -> None:
    old, new = LinkSpec(delay_ms=10), LinkSpec(bandwidth_mbit=80, delay_ms=10)
    change, replace = plan_update(old, new, ENDS_1500, netem_rate=False)[:2]
    assert encode_op(change, 1)["header"]["flags"] == NLM_F_REQUEST | NLM_F_ACK | NLM_F_REPLACE
    tbf = _decoded(encode_op(replace, 1))
    assert tbf["header"]["flags"] == NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE
    assert (tbf["handle"], tbf["parent"]) == (0x100000, 0x10001)
    assert tbf.get_attr("TCA_OPTIONS").get_attr("TCA_TBF_PARMS")["rate"] == 10_000_000
    assert parse_handle("ffff:") == 0xFFFF0000


def _nla(kind: int, payload: bytes) -> bytes:
    size = 4 + len(payload)
    return struct.pack("HH", size, kind) + payload + b"\0" * (-size % 4)


def _kernel_netem_dump(limit: int, rate: int) -> tcmsg:
    """A dump laid out as netem_dump() writes it, with the attributes pyroute2 does not name.

    delay 10 ms, jitter 1 ms, loss 1 % (42_949_672 / 2**32), loss correlation 25 %.
    """
    delay_us, jitter_us, loss, loss_corr = 10_000, 1000, 42_949_672, 1_073_741_823
    ticks = int(tc_common.time2tick(delay_us)), int(tc_common.time2tick(jitter_us))
    qopt = struct.pack("IIIIII", ticks[0], limit, loss, 0, 0, ticks[1])
    nested = (
        _nla(10, struct.pack("q", delay_us * 1000))  # TCA_NETEM_LATENCY64
        + _nla(11, struct.pack("q", jitter_us * 1000))  # TCA_NETEM_JITTER64
        + _nla(1, struct.pack("III", 0, loss_corr, 0))  # TCA_NETEM_CORR
        + _nla(6, struct.pack("IiIi", rate, 0, 0, 0))  # TCA_NETEM_RATE
        + _nla(14, struct.pack("Q", 42))  # TCA_NETEM_PRNG_SEED
    )
    header = struct.pack("BBHiIII", 0, 0, 0, 7, 0x10000, TC_H_ROOT, 1)
    body = header + _nla(1, b"netem\0") + _nla(2, qopt + nested)
    msg = tcmsg(struct.pack("IHHII", 16 + len(body), 36, 0, 0, 0) + body)
    msg.decode()
    return msg


def test_readback_decodes_a_kernel_style_netem_dump() -> None:
    spec = LinkSpec(
        bandwidth_mbit=800, delay_ms=10, jitter_ms=1, loss_pct=1, loss_correlation_pct=25
    )
    op = plan_netem(spec, ENDS)[0]
    seen = observed_params(_kernel_netem_dump(op.kwargs()["limit"], 100_000_000))
    assert seen["delay"] == pytest.approx(10_000, abs=1) and seen["rate"] == 100_000_000
    assert seen["loss_corr"] == pytest.approx(25.0, abs=1e-6)
    assert readback_mismatches(op, seen) == []
    slow = _kernel_netem_dump(op.kwargs()["limit"], 12_500_000)
    assert readback_mismatches(op, observed_params(slow)) == [
        "netem rate is 12500000, asked 100000000"
    ]
