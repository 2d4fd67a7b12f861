"""The netem link backend: a veth pair between two existing namespaces, shaped by netem (+tbf).

It realises `netem_plan` ops through pyroute2 netlink (never by running `tc`/`ip`), reads the
qdiscs back to check the kernel took them, and probes whether this kernel has sch_netem at all.
It does not create or remove namespaces; the Topology that owns them does.
"""

from __future__ import annotations

import errno
import logging
from dataclasses import dataclass

from pyroute2 import IPRoute
from pyroute2.netlink import NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE, NLM_F_REQUEST
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl import RTM_NEWQDISC, TC_H_ROOT
from pyroute2.netlink.rtnl.tcmsg import common as tc_common, sched_htb, sched_netem, sched_tbf, tcmsg

from emulator.errors import LinkBackendUnavailable, PrfaasError, TopologyError
from emulator.net.backend import DirectionCounters, LinkCounters, LinkEnds
from emulator.net.kernel_entries import rtnl
from emulator.net.names import ifname, netns_name, new_run_id
from emulator.net.netem_plan import (
    ROOT_HANDLE,
    U32_MAX,
    QdiscOp,
    plan_netem,
    plan_update,
    veth_ends,
)
from emulator.net.netns import create_netns, list_netns, remove_netns
from emulator.net.spec import LinkSpec

log = logging.getLogger(__name__)

_FLAGS = {  # the flags pyroute2's tc() uses for these commands
    "add": NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
    "replace": NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE,
    "change": NLM_F_REQUEST | NLM_F_ACK | NLM_F_REPLACE,
}
_PLUGINS = {"netem": sched_netem, "tbf": sched_tbf, "htb": sched_htb}
_MISSING_KIND = {errno.ENOENT: "unknown qdisc kind", errno.EOPNOTSUPP: "operation not supported"}
_ZERO_CORR = {"delay_corr": 0, "loss_corr": 0, "dup_corr": 0}


def encode_op(op: QdiscOp, index: int) -> tcmsg:
    """The RTM_NEWQDISC message for `op` on device `index`, options from pyroute2's own plugin.

    Built here and sent with `nlm_request_batch` rather than through `IPRoute.tc()`: in pyroute2
    0.9.7 tc() also copies a netem `rate=` keyword into the top-level TCA_RATE (the rate
    *estimator*), so an int fails to encode ("TypeError: object of type 'int' has no len()") and
    a string such as "10mbit" reaches the kernel as a bogus estimator (NetlinkError 34, ERANGE).
    TCA_NETEM_CORR is always sent, zeros included, because netem's change keeps an absent one.
    """
    options = _PLUGINS[op.kind].get_parameters(op.kwargs())
    if op.kind == "netem" and not any(a[0] == "TCA_NETEM_CORR" for a in options["attrs"]):
        options["attrs"].insert(0, ["TCA_NETEM_CORR", dict(_ZERO_CORR)])
    msg = tcmsg()
    msg["header"]["type"] = RTM_NEWQDISC
    msg["header"]["flags"] = _FLAGS[op.command]
    msg["index"] = index
    msg["handle"] = parse_handle(op.handle)
    msg["parent"] = TC_H_ROOT if op.parent is None else parse_handle(op.parent)
    msg["attrs"] = [["TCA_KIND", op.kind], ["TCA_OPTIONS", options]]
    return msg


def parse_handle(handle: str) -> int:
    """tc's "major:minor" (hex) as the u32 the kernel uses: "1:" -> 0x10000, "1:1" -> 0x10001."""
    major, _, minor = handle.partition(":")
    return (int(major or "0", 16) << 16) | int(minor or "0", 16)


def observed_params(msg: tcmsg) -> dict[str, float]:
    """A qdisc dump in the plan's vocabulary (microseconds, percent, bytes/s) for readback."""
    opts = msg.get_attr("TCA_OPTIONS")
    tick = tc_common.tick_in_usec
    if msg.get_attr("TCA_KIND") == "tbf":
        parms = opts.get_attr("TCA_TBF_PARMS")
        burst = parms["buffer"] / tick * parms["rate"] / 1e6  # buffer is burst as ticks at rate
        return {"rate": parms["rate"], "burst": burst, "limit": parms["limit"]}
    seen = {
        "delay": opts["delay"] / tick,
        "jitter": opts["jitter"] / tick,
        "loss": _pct(opts["loss"]),
        "limit": opts["limit"],
    }
    corr = opts.get_attr("TCA_NETEM_CORR")
    if corr is not None:
        seen["loss_corr"] = _pct(corr["loss_corr"])
    rate = opts.get_attr("TCA_NETEM_RATE")
    seen["rate"] = rate["rate"] if rate is not None else 0
    return seen


def readback_mismatches(op: QdiscOp, seen: dict[str, float]) -> list[str]:
    """What the kernel reports differently from what `op` asked, one phrase per field."""
    problems = []
    for key, want in op.params:
        got = seen.get(key)
        if got is None or abs(got - want) > _tolerance(key, want):
            problems.append(f"{op.kind} {key} is {got}, asked {want}")
    return problems


def _tolerance(key: str, want: float) -> float:
    if key in ("delay", "jitter"):
        return 1.0  # microseconds: the kernel keeps 64 ns ticks and pyroute2 truncates to them
    if key in ("loss", "loss_corr"):
        return 1e-6  # percent, after the u32 round trip
    if key == "burst":
        return 1.0 + 1e-3 * want  # bytes, after the bytes -> ticks -> bytes round trip
    return 0.0


_ipr = rtnl  # one RTNL opener for every tc user (emulator/net/kernel_entries.py)


def _index(ipr: IPRoute, name: str, netns: str) -> int:
    found = ipr.link_lookup(ifname=name)
    if not found:
        raise TopologyError(f"netns {netns}: device {name} is gone; was the link closed?")
    return found[0]


def create_veth(ends: LinkEnds) -> None:
    """The veth pair, remote end in remote_netns and its peer moved into local_netns, up."""
    (remote_netns, *_), (local_netns, *_) = veth_ends(ends)
    with _ipr(remote_netns) as ipr:
        try:
            peer = {"ifname": ends.local_ifname, "net_ns_fd": local_netns}
            ipr.link("add", ifname=ends.remote_ifname, kind="veth", peer=peer)
        except NetlinkError as err:
            raise TopologyError(
                f"veth {ends.remote_ifname}/{ends.local_ifname}: cannot create ({err.args[1]}); "
                "a leftover from an earlier run is removed by cleanup"
            ) from None
    for netns, name, addr, _ in veth_ends(ends):
        with _ipr(netns) as ipr:
            index = _index(ipr, name, netns)
            ipr.link("set", index=index, mtu=ends.mtu)
            ipr.addr("add", index=index, address=addr, prefixlen=ends.prefixlen)
            ipr.link("set", index=index, state="up")


def delete_veth(ends: LinkEnds) -> bool:
    """Delete the pair (one end takes the other along); False when it was already gone."""
    present = set(list_netns())
    for netns, name, _, _ in veth_ends(ends):
        if netns not in present:
            continue
        with _ipr(netns) as ipr:
            found = ipr.link_lookup(ifname=name)
            if not found:
                continue
            try:
                ipr.link("del", index=found[0])
            except NetlinkError as err:
                if err.code != errno.ENODEV:
                    raise TopologyError(f"netns {netns}: cannot delete {name}: {err}") from None
            return True
    return False


def run_ops(ops: list[QdiscOp]) -> None:
    """Send each op in order; a kernel without the qdisc kind raises LinkBackendUnavailable."""
    for op in ops:
        with _ipr(op.netns) as ipr:
            try:
                ipr.nlm_request_batch([encode_op(op, _index(ipr, op.ifname, op.netns))])
            except NetlinkError as err:
                raise _refusal(op, err) from None


def read_back(ops: list[QdiscOp]) -> None:
    """Dump each op's qdisc and raise TopologyError naming any field the kernel did not take."""
    for op in ops:
        with _ipr(op.netns) as ipr:
            msg = _find_qdisc(ipr, _index(ipr, op.ifname, op.netns), op)
        where = f"{op.ifname} (netns {op.netns})"
        if msg is None:
            raise TopologyError(f"readback: no {op.kind} {op.handle} on {where}")
        problems = readback_mismatches(op, observed_params(msg))
        if problems:
            raise TopologyError(f"readback on {where}: " + "; ".join(problems))


def _find_qdisc(ipr: IPRoute, index: int, op: QdiscOp) -> tcmsg | None:
    parent = TC_H_ROOT if op.parent is None else parse_handle(op.parent)
    for msg in ipr.get_qdiscs(index):
        if msg["handle"] == parse_handle(op.handle) and msg["parent"] == parent:
            if msg.get_attr("TCA_KIND") == op.kind:
                return msg
    return None


def read_counters(ends: LinkEnds) -> LinkCounters:
    """Sent bytes/packets and drops of each end's root qdisc: what left that end onto the link."""
    directions = {}
    for netns, name, _, direction in veth_ends(ends):
        with _ipr(netns) as ipr:
            qdiscs = ipr.get_qdiscs(_index(ipr, name, netns))
        roots = [q for q in qdiscs if q["parent"] == TC_H_ROOT]
        directions[direction] = _stats(roots[0]) if roots else DirectionCounters()
    return LinkCounters(directions=directions)


def _stats(msg: tcmsg) -> DirectionCounters:
    stats2 = msg.get_attr("TCA_STATS2")
    if stats2 is not None:
        basic = stats2.get_attr("TCA_STATS_BASIC") or {}
        queue = stats2.get_attr("TCA_STATS_QUEUE") or {}
        return DirectionCounters(
            basic.get("bytes", 0), basic.get("packets", 0), queue.get("drops", 0)
        )
    old = msg.get_attr("TCA_STATS") or {}
    return DirectionCounters(old.get("bytes", 0), old.get("packets", 0), old.get("drop", 0))


def _refusal(op: QdiscOp, err: NetlinkError) -> PrfaasError:
    code = errno.errorcode.get(err.code, str(err.code))
    what = f"tc {op.command} {op.kind} on {op.ifname} (netns {op.netns}) was refused with {code}"
    if err.code in _MISSING_KIND and op.command != "change":  # change: ENOENT = qdisc not found
        why = _MISSING_KIND[err.code]
        return LinkBackendUnavailable(f"kernel lacks sch_{op.kind}: {what} ({why})")
    if err.code == errno.EPERM:
        return LinkBackendUnavailable(f"netem backend needs root: {what}")
    return TopologyError(f"{what}: {err.args[1]}")


def _pct(u32: int) -> float:
    return u32 * 100 / U32_MAX


class NetemBackend:
    """Kernel netem on a veth pair; see netem_plan for the order-keeping and queue design notes.

    Ledger: the veth pair is the only object it creates (qdiscs die with it), so `close` deletes
    the pair only when this backend created it, and tolerates it being gone already.
    """

    name = "netem"
    description = "kernel netem on a veth pair: delay, jitter (in order), loss, rate, queue"

    def __init__(self, ends: LinkEnds, netem_rate: bool = True, keep_order: bool = True) -> None:
        veth_ends(ends)  # refuses namespace-less ends now, not at the first counters() call
        self.ends = ends
        self.netem_rate = netem_rate
        self.keep_order = keep_order
        self._spec: LinkSpec | None = None
        self._owns_veth = False

    @classmethod
    def from_probe(cls, ends: LinkEnds) -> NetemBackend:
        """A backend for this kernel: refuses when netem is missing, falls back to tbf for rate."""
        support = probe_netem_support()
        if not support.is_available:
            raise LinkBackendUnavailable(support.reason)
        return cls(ends, netem_rate=support.has_rate)

    def apply(self, spec: LinkSpec) -> None:
        if self._spec is not None:
            raise TopologyError(f"netem link {self.ends.remote_ifname}: applied; use update()")
        # Plan first: a spec this backend cannot realise is refused before the kernel is touched.
        ops = plan_netem(spec, self.ends, self.netem_rate, self.keep_order)
        create_veth(self.ends)
        self._owns_veth = True
        try:
            run_ops(ops)
            read_back(ops)
        except BaseException:
            try:
                self.close()
            except PrfaasError as err:  # keep the refusal as the error; the leftover is logged
                log.warning("netem link %s: cleanup failed: %s", self.ends.remote_ifname, err)
            raise
        self._spec = spec
        how = "netem" if self.netem_rate else "netem + tbf child for rate (netem lacks rate)"
        log.info("netem link %s<->%s up: %s", self.ends.remote_ifname, self.ends.local_ifname, how)

    def update(self, spec: LinkSpec) -> None:
        if self._spec is None:
            raise TopologyError(f"netem link {self.ends.remote_ifname}: call apply() first")
        ops = plan_update(self._spec, spec, self.ends, self.netem_rate, self.keep_order)
        run_ops(ops)
        read_back(ops)
        self._spec = spec

    def counters(self) -> LinkCounters:
        return read_counters(self.ends)

    def close(self) -> None:
        if self._owns_veth:
            delete_veth(self.ends)
        self._owns_veth = False
        self._spec = None


@dataclass(frozen=True, slots=True)
class NetemSupport:
    """What the probe found: netem at all, and whether netem keeps a TCA_NETEM_RATE it is given."""

    is_available: bool
    has_rate: bool
    reason: str


_PROBE_RATE_BYTES_PER_S = 125_000  # 1 Mbit/s: any value the readback can recognise


def probe_netem() -> tuple[bool, str]:
    """(True, "kernel accepts netem") or (False, a readable reason), from a real netlink request."""
    support = probe_netem_support()
    return support.is_available, support.reason


def probe_netem_support() -> NetemSupport:
    """Try netem on a veth pair inside a throwaway namespace, always removed afterwards."""
    run_id = new_run_id()
    name = netns_name(run_id, "probe")
    try:
        create_netns(name)
    except TopologyError as err:
        return NetemSupport(False, False, f"cannot probe netem: {err}")
    try:
        return _probe_in(name, ifname(run_id, "pa"), ifname(run_id, "pb"))
    except (TopologyError, NetlinkError, OSError) as err:
        return NetemSupport(False, False, f"cannot probe netem: {err}")
    finally:
        remove_netns(name)


def _probe_in(netns: str, name: str, peer: str) -> NetemSupport:
    """Add netem, then change it with a rate and read the rate back.

    Acceptance alone proves nothing about the rate: netem parses its nested attributes leniently
    (nla_parse_deprecated), so a kernel without the rate extension takes TCA_NETEM_RATE and
    ignores it. Only a dump that echoes the rate shows netem will shape.
    """
    base = (("delay", 1000), ("jitter", 0), ("loss", 0.0), ("loss_corr", 0.0), ("limit", 100))
    add = QdiscOp(netns, name, "add", "netem", ROOT_HANDLE, None, base)
    rate = ("rate", _PROBE_RATE_BYTES_PER_S)
    rated = QdiscOp(netns, name, "change", "netem", ROOT_HANDLE, None, (*base, rate))
    with _ipr(netns) as ipr:
        ipr.link("add", ifname=name, kind="veth", peer={"ifname": peer})
        index = _index(ipr, name, netns)
        try:
            ipr.nlm_request_batch([encode_op(add, index)])
        except NetlinkError as err:
            reason = _MISSING_KIND.get(err.code, errno.errorcode.get(err.code, str(err.code)))
            lacks = "lacks" if err.code in _MISSING_KIND else "refuses"
            return NetemSupport(False, False, f"kernel {lacks} sch_netem ({reason})")
        try:
            ipr.nlm_request_batch([encode_op(rated, index)])
            msg = _find_qdisc(ipr, index, rated)
            has_rate = msg is not None and observed_params(msg)["rate"] == _PROBE_RATE_BYTES_PER_S
        except NetlinkError:
            has_rate = False
    if has_rate:
        return NetemSupport(True, True, "kernel accepts netem")
    return NetemSupport(True, False, "kernel accepts netem without its rate attribute (tbf rate)")

