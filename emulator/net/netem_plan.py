"""Describe a link as tc qdisc operations for the netem backend: pure data, no kernel, no root.

`plan_netem` turns a LinkSpec into one root netem qdisc per veth end (plus a tbf child when the
kernel's netem lacks the rate attribute); `plan_update` reshapes it live with change/replace only.
Realising the ops (netlink, readback) lives in `netem_backend.py`.

Kernel facts the plan relies on (net/sched/sch_netem.c, Linux 3.3 and later):

* Jitter reorders. Each packet gets `time_to_send = now + delay +- jitter` and sits in a
  time-sorted tfifo, so a packet drawn a short delay overtakes one drawn a long delay. Since
  3.3 ("netem: fix classful handling", 50612537e9ab) a child qdisc sits *after* the tfifo, so the
  old "graft a pfifo under netem" recipe no longer keeps order. What does keep order is netem's
  own `rate`: with a rate set, netem takes the latest `time_to_send` already queued as the
  reference point, so every packet leaves after the one before it (`time_to_send >= last +
  packet_time`). The plan therefore keeps order by default by always giving a jittered
  direction a rate: its shaped rate, or ORDERING_RATE_BYTES_PER_S when it is unshaped.
* `limit` counts every packet netem holds, the ones on the delay line included
  (`sch->q.qlen >= sch->limit` at enqueue). A long fat pipe holds rate * delay bytes in flight, so
  limit = queue_packets + ceil(rate * (delay + jitter) / mtu); with only queue_packets it would
  tail-drop at the delay line long before the queue is full. See `netem_limit`.
* `change` keeps any nested attribute that is absent (TCA_NETEM_RATE, TCA_NETEM_CORR): an update
  states the rate explicitly, 0 meaning off, and the realiser always sends the correlation.
* The tbf fallback (`netem_rate=False`) is for netem without the rate extension (7bc0f28c7a0c,
  also Linux 3.3). Such kernels predate the classful change above: a grafted child replaced the
  tfifo and netem held each packet at the child's head until its time, so the tbf child
  delivered in arrival order. A newer kernel forced onto the fallback may reorder under jitter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from emulator.errors import LinkBackendUnavailable
from emulator.net.backend import TO_LOCAL, TO_REMOTE, LinkEnds
from emulator.net.spec import LinkShape, LinkSpec

ROOT_HANDLE = "1:"
TBF_HANDLE = "10:"
TBF_PARENT = "1:1"  # netem's single class: its child sits here, after the delay line

U32_MAX = 2**32 - 1
# pyroute2 0.9 encodes the netem and tbf rates as the 32-bit byte rates only (it has no
# TCA_NETEM_RATE64 / TCA_TBF_RATE64), so 34.36 Gbit/s is the fastest rate this backend can ask for.
MAX_TC_RATE_BYTES_PER_S = U32_MAX
# The rate a jittered but unshaped direction gets so that netem keeps packets in order; it caps
# that direction at 34.36 Gbit/s, above what a veth pair moves through one flow.
ORDERING_RATE_BYTES_PER_S = MAX_TC_RATE_BYTES_PER_S
# An unshaped direction sizes its delay line for 100 Gbit/s, above what a veth pair moves here (the
# scenario bound, MAX_BANDWIDTH_MBIT, goes higher for the analytic and virtual engines' sweeps).
UNSHAPED_LIMIT_RATE_BYTES_PER_S = 100e9 / 8
# tbf's bucket holds this much time at the rate (see `tbf_params`).
TBF_BURST_S = 0.001

Param = tuple[str, int | float]


@dataclass(frozen=True, slots=True)
class QdiscOp:
    """One RTM_NEWQDISC request; `params` are the keyword arguments of pyroute2's tc() for `kind`.

    Units are pyroute2's: delay/jitter in microseconds, loss/loss_corr in percent, rate in bytes
    per second (pyroute2's get_rate passes numbers through; only strings such as "80mbit" are bits),
    netem limit in packets, tbf burst and limit in bytes. `parent=None` means the device root.
    """

    netns: str
    ifname: str
    command: str  # "add" | "replace" | "change"
    kind: str  # "netem" | "tbf"
    handle: str
    parent: str | None
    params: tuple[Param, ...]

    def kwargs(self) -> dict[str, int | float]:
        return dict(self.params)


def plan_netem(
    spec: LinkSpec, ends: LinkEnds, netem_rate: bool = True, keep_order: bool = True
) -> list[QdiscOp]:
    """The ops that shape a fresh veth pair: remote end's egress is remote->local, and back.

    `netem_rate=False` is for kernels whose netem lacks the rate attribute: netem keeps delay,
    loss and limit, and a tbf child at 1:1 shapes the rate. `keep_order=False` lets jitter reorder.
    """
    ops: list[QdiscOp] = []
    for netns, ifname, direction, shape in _directions(spec, ends):
        _check_rate(shape, direction)
        netem = netem_params(shape, ends.mtu, netem_rate, keep_order)
        ops.append(QdiscOp(netns, ifname, "add", "netem", ROOT_HANDLE, None, netem))
        if not netem_rate and shape.bandwidth_mbit is not None:
            ops.append(tbf_op(netns, ifname, tbf_params(shape, ends.mtu), "add"))
    return ops


def plan_update(
    old: LinkSpec, new: LinkSpec, ends: LinkEnds, netem_rate: bool = True, keep_order: bool = True
) -> list[QdiscOp]:
    """Live reshaping from `old` to `new`: netem `change`, tbf `replace`, never delete then add.

    An unchanged direction gets no op. With netem_rate the rate is always stated (0 switches it
    off), since netem keeps an absent TCA_NETEM_RATE. In the tbf fallback the child is
    `replace`d, which creates it when missing; a direction that becomes unshaped keeps its child,
    opened to the top rate, because removing it would be a delete.
    """
    ops: list[QdiscOp] = []
    old_dirs = _directions(old, ends)
    for (netns, ifname, direction, shape), (_, _, _, old_shape) in zip(
        _directions(new, ends), old_dirs, strict=True
    ):
        if shape == old_shape:
            continue
        _check_rate(shape, direction)
        netem = netem_params(shape, ends.mtu, netem_rate, keep_order)
        if netem_rate and "rate" not in dict(netem):
            netem = (*netem, ("rate", 0))
        ops.append(QdiscOp(netns, ifname, "change", "netem", ROOT_HANDLE, None, netem))
        if netem_rate:
            continue
        if shape.bandwidth_mbit is not None:
            ops.append(tbf_op(netns, ifname, tbf_params(shape, ends.mtu), "replace"))
        elif old_shape.bandwidth_mbit is not None:
            ops.append(tbf_op(netns, ifname, open_tbf_params(shape, ends.mtu), "replace"))
    return ops


def netem_params(
    shape: LinkShape, mtu: int, netem_rate: bool = True, keep_order: bool = True
) -> tuple[Param, ...]:
    """netem's keyword arguments for one direction; `rate` only when netem is to shape or order."""
    rate = _netem_rate(shape, netem_rate, keep_order)
    if rate:
        limit_rate = float(rate)
    elif shape.bandwidth_mbit is not None:
        limit_rate = shape.rate_bytes_per_s  # the tbf fallback shapes it after netem
    else:
        limit_rate = UNSHAPED_LIMIT_RATE_BYTES_PER_S
    params: list[Param] = [
        ("delay", _us(shape.delay_s)),
        ("jitter", _us(shape.jitter_s)),
        ("loss", shape.loss_pct),
        ("loss_corr", shape.loss_correlation_pct),
        ("limit", netem_limit(shape, mtu, limit_rate)),
    ]
    if rate:
        params.append(("rate", rate))
    return tuple(params)


def netem_limit(shape: LinkShape, mtu: int, rate_bytes_per_s: float) -> int:
    """Packets netem may hold: the queue plus a full delay line of MTU-sized packets.

    limit = queue_packets + ceil(rate * (delay + jitter) / mtu). The delay line is sized for the
    longest draw (delay + jitter, netem's default jitter is uniform in +-jitter) at the link rate.
    Smaller packets at line rate need more slots; queue_packets is their headroom. Capped at u32.
    """
    in_flight = math.ceil(rate_bytes_per_s * (shape.delay_s + shape.jitter_s) / mtu)
    return min(shape.queue_packets + in_flight, U32_MAX)


def tbf_params(shape: LinkShape, mtu: int) -> tuple[Param, ...]:
    """tbf's keyword arguments for a shaped direction (the fallback when netem has no rate).

    burst = max(2 * mtu, rate * TBF_BURST_S): at least two full frames, so a max-size frame is never
    refused as larger than the bucket, and one millisecond of tokens, so the qdisc watchdog's
    wake-up granularity does not starve high rates. limit = queue_packets * mtu bytes of backlog,
    the byte form of the spec's queue (tc's "latency" would be limit / rate).
    """
    return _tbf_params(int(round(shape.rate_bytes_per_s)), shape.queue_packets, mtu)


def open_tbf_params(shape: LinkShape, mtu: int) -> tuple[Param, ...]:
    """A tbf that no longer shapes: the top rate, for a fallback direction that became unshaped."""
    return _tbf_params(MAX_TC_RATE_BYTES_PER_S, shape.queue_packets, mtu)


def _tbf_params(rate: int, queue_packets: int, mtu: int) -> tuple[Param, ...]:
    burst = max(2 * mtu, math.ceil(rate * TBF_BURST_S))
    return (("rate", rate), ("burst", burst), ("limit", min(queue_packets * mtu, U32_MAX)))


def tbf_op(
    netns: str,
    ifname: str,
    params: tuple[Param, ...],
    command: str = "add",
    handle: str = TBF_HANDLE,
    parent: str | None = TBF_PARENT,
) -> QdiscOp:
    """A tbf op, by default netem's child; `parent=None, handle=ROOT_HANDLE` puts it at the root."""
    return QdiscOp(netns, ifname, command, "tbf", handle, parent, params)


def veth_ends(ends: LinkEnds) -> list[tuple[str, str, str, str]]:
    """(netns, ifname, addr, direction sent from it) per veth end; refuses namespace-less ends."""
    if ends.remote_netns is None or ends.local_netns is None:
        raise LinkBackendUnavailable(
            "netem backend: link ends have no network namespaces; "
            "it shapes a veth pair between two namespaces (use the proxy backend without them)"
        )
    return [
        (ends.remote_netns, ends.remote_ifname, ends.remote_addr, TO_LOCAL),
        (ends.local_netns, ends.local_ifname, ends.local_addr, TO_REMOTE),
    ]


def _directions(spec: LinkSpec, ends: LinkEnds) -> list[tuple[str, str, str, LinkShape]]:
    """(netns, ifname, direction, shape) per veth end: each end shapes what it sends."""
    shapes = {TO_LOCAL: spec.to_local, TO_REMOTE: spec.to_remote}
    return [(netns, name, way, shapes[way]) for netns, name, _, way in veth_ends(ends)]


def _netem_rate(shape: LinkShape, netem_rate: bool, keep_order: bool) -> int:
    if not netem_rate:
        return 0
    if shape.bandwidth_mbit is not None:
        return int(round(shape.rate_bytes_per_s))
    if keep_order and shape.jitter_ms > 0:
        return ORDERING_RATE_BYTES_PER_S
    return 0


def _check_rate(shape: LinkShape, direction: str) -> None:
    """Refuse rates the u32 byte-rate fields cannot carry, naming the field and the way out."""
    if shape.bandwidth_mbit is None:
        return
    field = "link.bandwidth_mbit" if direction == TO_LOCAL else "link.reverse.bandwidth_mbit"
    if shape.rate_bytes_per_s > MAX_TC_RATE_BYTES_PER_S:
        raise LinkBackendUnavailable(
            f"{field}: {shape.bandwidth_mbit:g} is above netem's 32-bit rate as pyroute2 sends it "
            f"({_top_rate_mbit():.0f} Mbit/s); lower it, leave it unshaped, or use the tun backend"
        )
    if round(shape.rate_bytes_per_s) < 1:
        raise LinkBackendUnavailable(
            f"{field}: {shape.bandwidth_mbit:g} is below 1 byte/s, the smallest rate tc carries; "
            "raise it to at least 0.000008"
        )


def _top_rate_mbit() -> float:
    return MAX_TC_RATE_BYTES_PER_S * 8 / 1e6


def _us(seconds: float) -> int:
    return int(round(seconds * 1e6))
