"""The cross-datacenter link as the real path between two hosts: the sending host's interface shaped
toward the peer's address only (htb + u32, netem under it where the kernel has sch_netem; where it
lacks it, delay, jitter and loss come from the host relay, host_relay.py, and htb keeps the rate).

It realises `host_link_plan` through pyroute2 netlink (the netem and htb qdiscs through
netem_backend's encoder), reads every piece back, and records its root qdisc in the run's ledger, so
`python -m emulator net down` removes it after a crash. It creates no interface and no namespace;
on two machines each host runs one per direction it sends, with its own ledger.
"""

from __future__ import annotations

import logging
import socket
import struct

from pyroute2 import IPRoute
from pyroute2.netlink import nla
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl import RTM_NEWTCLASS, RTM_NEWTFILTER, TC_H_ROOT
from pyroute2.netlink.rtnl.tcmsg import cls_u32, sched_htb, tcmsg

from emulator.errors import PrfaasError, TopologyError
from emulator.net.backend import DirectionCounters
from emulator.net.ceiling import CEILINGS, HOST_RELAY, shape_warning
from emulator.net.host_link_plan import (
    DEFAULT_MINOR,
    ETH_P_IP,
    FILTER_PRIO,
    IPV4_DST_OFFSET,
    ClassOp,
    FilterOp,
    HostPlan,
    check_peer,
    plan_change,
    plan_open,
    root_major,
    unapplied_note,
)
from emulator.net.host_relay_link import HostRelayLink, needs_relay, relay_unavailable_reason
from emulator.net.kernel_entries import delete_root_qdisc, rtnl
from emulator.net.ledger import Ledger
from emulator.net.netem_backend import (
    _FLAGS,
    NetemSupport,
    _stats,
    parse_handle,
    probe_netem_support,
    read_back,
    run_ops,
)
from emulator.net.spec import LinkShape

log = logging.getLogger(__name__)
_SEL_HEAD_BYTES = 4 + 16  # nla header + struct tc_u32_sel
_KEY_BYTES = 16  # struct tc_u32_key


def encode_class(op: ClassOp, index: int) -> tcmsg:
    """The RTM_NEWTCLASS message for an htb class, options from pyroute2's own htb plugin (sent with
    nlm_request_batch for the reason netem_backend.encode_op gives: tc() mangles `rate=`)."""
    msg = tcmsg()
    msg["header"]["type"] = RTM_NEWTCLASS
    msg["header"]["flags"] = _FLAGS[op.command]
    msg["index"] = index
    msg["handle"] = parse_handle(op.classid)
    msg["parent"] = parse_handle(op.parent)
    msg["attrs"] = [["TCA_KIND", "htb"], ["TCA_OPTIONS", sched_htb.get_class_parameters(op.kwargs())]]
    return msg


def encode_filter(op: FilterOp, index: int) -> tcmsg:
    """The RTM_NEWTFILTER message: u32 on IPv4, the kernel picks the filter's own handle."""
    msg = tcmsg()
    msg["header"]["type"] = RTM_NEWTFILTER
    msg["header"]["flags"] = _FLAGS["add"]
    msg["index"] = index
    msg["parent"] = parse_handle(op.parent)
    msg["info"] = socket.htons(ETH_P_IP) | (FILTER_PRIO << 16)
    options = cls_u32.get_parameters({"target": parse_handle(op.target), "keys": op.keys})
    msg["attrs"] = [["TCA_KIND", "u32"], ["TCA_OPTIONS", options]]
    return msg


class HostLink:
    """One host's egress on `ifname` toward `peer_addr`, shaped; every other destination unshaped.

    `open` refuses an interface whose root qdisc it did not add (another run's, or one set by hand),
    touching nothing. `update` changes the rate (and netem) in place; `close` deletes the root qdisc
    only while it is still the one `open` added (the kernel compares the handle) and is idempotent.
    """

    def __init__(self, netns: str, ifname: str, peer_addr: str, spec: LinkShape, plan: HostPlan, mtu: int,
                 major: int, netem: NetemSupport) -> None:
        self.netns, self.ifname, self.peer_addr = netns, ifname, peer_addr
        self.spec, self.plan, self.mtu, self.major, self.netem = spec, plan, mtu, major, netem
        self.notes: list[str] = []  # what this host does not apply, one line each (also logged)
        self.relay: HostRelayLink | None = None  # delay/jitter/loss without sch_netem, once asked for
        self._ledger: Ledger | None = None
        self._seed: int | None = None
        self._is_open = False

    @classmethod
    def open(cls, netns: str, ifname: str, peer_addr: str, spec: LinkShape, ledger: Ledger, *,
             netem: NetemSupport | None = None, seed: int | None = None) -> HostLink:
        """Shape `ifname` in `netns` ('' = this namespace). On the remote host pass `spec.to_local`, on
        the local host `spec.to_remote`. `netem`: a probe already made (default: probe now); `seed`:
        the host relay's loss and jitter draws."""
        peer = check_peer(peer_addr)
        major = root_major(ledger.run_id)
        with rtnl(netns) as ipr:
            index = _lookup(ipr, ifname, netns)
            mtu = int(ipr.get_links(index)[0].get_attr("IFLA_MTU"))
            if (problem := _root_problem(ipr, index, major)) is not None:
                raise TopologyError(f"host link: interface {ifname}{_where(netns)} already has a root qdisc "
                                    f"({problem}) that this link did not add; shape another interface, or remove "
                                    "that qdisc if it is a leftover of yours")
        support = netem or probe_netem_support()
        plan = plan_open(netns, ifname, peer, spec, mtu, major, support.is_available, support.has_rate)
        link = cls(netns, ifname, peer, spec, plan, mtu, major, support)
        link._ledger, link._seed = ledger, seed
        ledger.record("qdisc", netns=netns, name=ifname, handle=parse_handle(plan.root.handle))
        link._is_open = True
        try:
            run_ops([plan.root])
            _run(netns, ifname, [encode_class(op, 0) for op in plan.classes])
            if plan.netem is not None:
                run_ops([plan.netem])
                read_back([plan.netem])
            _run(netns, ifname, [encode_filter(plan.filter, 0)])
            link._read_back(plan.classes)
            link._check_filter()
            link._start_relay(spec)
        except BaseException:
            try:
                link.close()
            except PrfaasError as err:  # keep the refusal as the error; the leftover is logged
                log.warning("host link %s: cleanup failed: %s", ifname, err)
            raise
        link._note(spec)
        log.info("host link %s%s -> %s: %s", ifname, _where(netns), peer, link.describe())
        return link

    def describe(self) -> str:
        rate = "unshaped" if self.spec.bandwidth_mbit is None else f"{self.spec.bandwidth_mbit:g} Mbit/s"
        extra = "" if self.plan.netem is not None else " (rate only: no sch_netem)"
        if self.relay is not None:
            extra = f" (no sch_netem: delay, jitter and loss by the host relay, pid {self.relay.pid})"
        return f"htb {rate} toward {self.peer_addr}, other destinations unshaped{extra}"

    def update(self, spec: LinkShape) -> None:
        """Reshape while traffic flows: the class and netem are changed in place, never re-added."""
        if not self._is_open:
            raise TopologyError(f"host link {self.ifname}: closed; open a new one")
        cls_op, netem_op = plan_change(self.plan, spec, self.mtu, self.major, self.netem.has_rate)
        _run(self.netns, self.ifname, [encode_class(cls_op, 0)])
        if netem_op is not None:
            run_ops([netem_op])
            read_back([netem_op])
        self._read_back((cls_op,))
        if self.relay is not None:
            self.relay.update(spec)  # in place; a relay once started stays, so no packet changes path
        else:
            self._start_relay(spec)
        self.spec = spec
        self._note(spec)

    def counters(self) -> DirectionCounters:
        """Bytes and packets the shaped class sent (what went to the peer), drops included: the class's,
        and the host relay's (its loss, and sends the interface refused) where one runs."""
        sent = self._class_counters(self.plan.filter.target)
        if self.relay is None:
            return sent
        c = self.relay.counters()
        return DirectionCounters(sent.bytes, sent.packets,
                                 sent.drops + c["loss_drops"] + c["queue_drops"] + c["write_errors"])

    @property
    def relay_pid(self) -> int | None:
        return self.relay.pid if self.relay is not None else None

    def unshaped_counters(self) -> DirectionCounters:
        """Bytes and packets the default class sent: every other destination."""
        return self._class_counters(f"{self.major:x}:{DEFAULT_MINOR:x}")

    def close(self) -> bool:
        """Remove the root qdisc `open` added (classes, filter and netem go with it); False when it,
        its interface or its namespace is already gone."""
        if not self._is_open:
            return False
        self._is_open = False
        if self.relay is not None:
            relay, self.relay = self.relay, None
            try:
                relay.close()
            except (PrfaasError, OSError) as err:  # the ledger still holds its pieces
                log.warning("host link %s: host relay not closed cleanly: %s", self.ifname, err)
        try:
            with rtnl(self.netns) as ipr:
                found = ipr.link_lookup(ifname=self.ifname)
                return bool(found) and delete_root_qdisc(ipr, found[0], parse_handle(self.plan.root.handle))
        except TopologyError:  # the namespace went first
            return False

    def __enter__(self) -> HostLink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _class_counters(self, classid: str) -> DirectionCounters:
        with rtnl(self.netns) as ipr:
            msg = _find_class(ipr, _lookup(ipr, self.ifname, self.netns), classid)
        if msg is None:
            raise TopologyError(f"host link {self.ifname}{_where(self.netns)}: class {classid} is gone; "
                                "was the link closed?")
        return _stats(msg)

    def _read_back(self, ops: tuple[ClassOp, ...]) -> None:
        """Each class's rate and ceiling as the kernel holds them; TopologyError naming any difference."""
        with rtnl(self.netns) as ipr:
            index = _lookup(ipr, self.ifname, self.netns)
            for op in ops:
                msg = _find_class(ipr, index, op.classid)
                if msg is None:
                    raise TopologyError(f"readback: no htb class {op.classid} on {self.ifname}{_where(self.netns)}")
                seen, want = _class_rates(msg), op.kwargs()
                for key in ("rate", "ceil"):
                    if seen[key] != want[key]:
                        raise TopologyError(f"readback on {self.ifname}{_where(self.netns)}: htb class {op.classid} "
                                            f"{key} is {seen[key]}, asked {want[key]}")

    def _check_filter(self) -> None:
        want = self.plan.filter
        with rtnl(self.netns) as ipr:
            index = _lookup(ipr, self.ifname, self.netns)
            filters = ipr.get_filters(index=index, parent=parse_handle(want.parent))
        for msg in filters:
            opts = msg.get_attr("TCA_OPTIONS")
            if msg.get_attr("TCA_KIND") != "u32" or opts is None:
                continue
            sel = opts.get_attr("TCA_U32_SEL")
            if opts.get_attr("TCA_U32_CLASSID") == parse_handle(want.target) and sel is not None and \
                    (_ip_u32(want.peer_addr), 0xFFFFFFFF, IPV4_DST_OFFSET) in u32_keys(sel):
                return
        raise TopologyError(f"readback on {self.ifname}{_where(self.netns)}: no u32 filter sends "
                            f"{want.peer_addr} to {want.target}")

    def _start_relay(self, spec: LinkShape) -> None:
        """The host relay, where there is no netem, the shape asks for what htb cannot do, and it can run."""
        if self.plan.netem is not None or not needs_relay(spec) or relay_unavailable_reason() is not None:
            return
        assert self._ledger is not None
        self.relay = HostRelayLink.start(self.netns, self.ifname, self.peer_addr, spec, self._ledger, self.mtu,
                                         self._seed)
        log.info("host link %s%s: %s", self.ifname, _where(self.netns), self.describe())

    def _note(self, spec: LinkShape) -> None:
        """What this host does not apply, and a rate the host relay cannot carry, one line each."""
        notes = [unapplied_note(self.ifname, spec, self.plan.netem is not None or self.relay is not None)]
        if self.relay is not None:
            notes.append(shape_warning(CEILINGS[HOST_RELAY], spec, f"host link {self.ifname}: bandwidth_mbit"))
        for note in notes:
            if note is not None and note not in self.notes:
                self.notes.append(note)
                log.warning("%s", note)


def _run(netns: str, ifname: str, messages: list[tcmsg]) -> None:
    """Send class/filter messages to `ifname` (their index filled in here); a refusal is one line."""
    with rtnl(netns) as ipr:
        index = _lookup(ipr, ifname, netns)
        for msg in messages:
            msg["index"] = index
            try:
                ipr.nlm_request_batch([msg])
            except NetlinkError as err:
                kind = "filter" if msg["header"]["type"] == RTM_NEWTFILTER else "class"
                raise TopologyError(f"host link: tc {kind} on {ifname}{_where(netns)} was refused "
                                    f"({err.args[1]}); run as root with sch_htb and cls_u32") from None


def _lookup(ipr: IPRoute, ifname: str, netns: str) -> int:
    found = ipr.link_lookup(ifname=ifname)
    if not found:
        raise TopologyError(f"host link: interface {ifname} not found{_where(netns)}; name the interface "
                            "that carries the path to the peer")
    return found[0]


def _root_problem(ipr: IPRoute, index: int, major: int) -> str | None:
    """'kind handle' of a root qdisc someone added (handle 0 is the kernel's default), else None."""
    for msg in ipr.get_qdiscs(index):
        if msg["parent"] == TC_H_ROOT and msg["handle"] != 0:
            mine = " of this run" if msg["handle"] == major << 16 else ""
            return f"{msg.get_attr('TCA_KIND')} {msg['handle'] >> 16:x}:{mine}"
    return None


def _find_class(ipr: IPRoute, index: int, classid: str) -> tcmsg | None:
    wanted = parse_handle(classid)
    return next((m for m in ipr.get_classes(index) if m["handle"] == wanted), None)


def _class_rates(msg: tcmsg) -> dict[str, int]:
    opts = msg.get_attr("TCA_OPTIONS")
    parms = opts.get_attr("TCA_HTB_PARMS")
    return {"rate": opts.get_attr("TCA_HTB_RATE64") or parms["rate"],
            "ceil": opts.get_attr("TCA_HTB_CEIL64") or parms["ceil"]}


def u32_keys(sel: nla) -> list[tuple[int, int, int]]:
    """(value, mask, offset) of each key of a dumped TCA_U32_SEL, read from its bytes: pyroute2 0.9.7
    decodes the keys 4 bytes early (it skips 16 bytes, not the 4-byte header + 16 of tc_u32_sel)."""
    raw = bytes(sel.data[sel.offset + _SEL_HEAD_BYTES: sel.offset + sel.length])
    keys = []
    for at in range(0, len(raw) - _KEY_BYTES + 1, _KEY_BYTES):
        mask, value = struct.unpack_from(">II", raw, at)  # tc_u32_key: mask and val in network order,
        (offset,) = struct.unpack_from("=i", raw, at + 8)  # then off in host order
        keys.append((value, mask, offset))
    return keys


def _ip_u32(addr: str) -> int:
    return int.from_bytes(socket.inet_aton(addr), "big")


def _where(netns: str) -> str:
    return f" (netns {netns})" if netns else ""
