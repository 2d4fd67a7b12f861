"""Ledger entries for kernel objects outside a run's namespaces: a link (bridge, veth end, a host
relay's TUN), a root qdisc on an interface the run does not own (a host's real NIC, a rehearsal veth),
and an interface's rp_filter the host relay loosened.

Each is checked before it is trusted (a ledger file is read after a crash) and undone only when it is
still the run's: a link by its `prf-<run>-` name, a qdisc by the handle the run gave it, which the
kernel itself compares on delete, so another run's or the system's root qdisc is never removed; an
rp_filter is put back only while it still holds the value the run set.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Iterator
from contextlib import contextmanager

from pyroute2 import IPRoute
from pyroute2.netlink import NLM_F_ACK, NLM_F_REQUEST
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl import RTM_DELQDISC, TC_H_ROOT
from pyroute2.netlink.rtnl.tcmsg import tcmsg

from emulator.errors import TopologyError
from emulator.net.names import PREFIX
from emulator.net.netns import list_netns, run_in_netns

KERNEL_KINDS = ("link", "qdisc", "sysctl")
SYSCTL_KEYS = ("rp_filter",)  # net.ipv4.conf.<ifname>.<key>: the only knob a run changes
RP_FILTER_VALUES = (0, 1, 2)
MAX_IFNAME_CHARS = 15  # IFNAMSIZ - 1
_IFNAME = re.compile(r"[A-Za-z0-9_.:@-]{1,15}")  # what `ip link` accepts, minus '/', spaces and quotes
_GONE = (errno.ENOENT, errno.ENODEV, errno.EINVAL)  # gone, or the root qdisc is no longer ours


@contextmanager
def rtnl(netns: str) -> Iterator[IPRoute]:
    """An RTNL socket in `netns` ('' = this process's namespace); a missing namespace is an error."""
    try:
        ipr = IPRoute(netns=netns, flags=0) if netns else IPRoute()
    except FileNotFoundError:
        raise TopologyError(f"netns {netns}: not found; the topology creates it first") from None
    try:
        yield ipr
    finally:
        ipr.close()


def entry_problem(run_id: str, entry: dict) -> str | None:
    """Why a link or qdisc entry read from a file is not one this code writes, else None."""
    netns, name = entry.get("netns"), entry.get("name")
    own = f"{PREFIX}-{run_id}-"
    # a qdisc may sit in a namespace of another run's: a rehearsed host's (live/host_topology.py); the
    # kernel deletes it only while it has this run's handle, so a project namespace is enough here
    spaces = f"{PREFIX}-" if entry["kind"] == "qdisc" else own
    if not isinstance(netns, str) or (netns and not netns.startswith(spaces)):
        return f"netns must be '' (this namespace) or one named {spaces}*"
    if not isinstance(name, str) or not _IFNAME.fullmatch(name) or name in (".", ".."):
        return f"name must be an interface name of 1-{MAX_IFNAME_CHARS} characters"
    if entry["kind"] == "link" and not name.startswith(own):
        return f"a link not named {own}*"
    if entry["kind"] == "qdisc":
        handle = entry.get("handle")
        if type(handle) is not int or not 0 < handle < 2**32 or handle & 0xFFFF:
            return "handle must be a qdisc handle (major:0) as an integer"
    if entry["kind"] == "sysctl":
        if entry.get("key") not in SYSCTL_KEYS:
            return f"key must be one of {', '.join(SYSCTL_KEYS)}"
        if any(type(entry.get(f)) is not int or entry.get(f) not in RP_FILTER_VALUES for f in ("value", "set")):
            return "value and set must be rp_filter values 0, 1 or 2"
    return None


def describe(entry: dict) -> str:
    where = f" (netns {entry['netns']})" if entry.get("netns") else ""
    if entry["kind"] == "qdisc":
        return f"qdisc {entry['handle'] >> 16:x}: on {entry['name']}{where}"
    if entry["kind"] == "sysctl":
        return f"sysctl net.ipv4.conf.{entry['name']}.{entry['key']}={entry['value']}{where}"
    return f"link {entry['name']}{where}"


def undo(entry: dict) -> bool:
    """Remove the entry's object if it is still there and still the run's; False when it is not."""
    netns = entry["netns"]
    if netns and netns not in list_netns():
        return False  # its namespace is gone, and everything in it with it
    if entry["kind"] == "sysctl":
        return _restore_sysctl(entry)
    with rtnl(netns) as ipr:
        found = ipr.link_lookup(ifname=entry["name"])
        if not found:
            return False
        if entry["kind"] == "link":
            return _delete_link(ipr, found[0])
        return delete_root_qdisc(ipr, found[0], entry["handle"])


def conf_path(ifname: str, key: str) -> str:
    return f"/proc/sys/net/ipv4/conf/{ifname}/{key}"


def read_conf(netns: str, ifname: str, key: str) -> int | None:
    """net.ipv4.conf.<ifname>.<key> in `netns` ('' = here); None when the interface is gone.
    /proc/sys/net follows the opening thread's namespace, hence run_in_netns."""

    def read() -> int | None:
        try:
            with open(conf_path(ifname, key)) as knob:
                return int(knob.read())
        except FileNotFoundError:
            return None

    return run_in_netns(netns or None, read)


def write_conf(netns: str, ifname: str, key: str, value: int) -> None:
    def write() -> None:
        with open(conf_path(ifname, key), "w") as knob:
            knob.write(str(value))

    run_in_netns(netns or None, write)


def _restore_sysctl(entry: dict) -> bool:
    """Put the old value back while the knob still holds the one the run set (else someone changed it
    since, and theirs stays)."""
    netns, name, key = entry["netns"], entry["name"], entry["key"]
    if read_conf(netns, name, key) != entry["set"]:
        return False
    write_conf(netns, name, key, entry["value"])
    return True


def _delete_link(ipr: IPRoute, index: int) -> bool:
    try:
        ipr.link("del", index=index)
    except NetlinkError as err:
        if err.code == errno.ENODEV:
            return False
        raise
    return True


def delete_root_qdisc(ipr: IPRoute, index: int, handle: int) -> bool:
    """Delete the root qdisc of device `index` only if its handle is `handle` (the kernel refuses a
    root delete whose handle differs, so this cannot remove a qdisc someone else put there since)."""
    msg = tcmsg()
    msg["header"]["type"] = RTM_DELQDISC
    msg["header"]["flags"] = NLM_F_REQUEST | NLM_F_ACK
    msg["index"] = index
    msg["handle"] = handle
    msg["parent"] = TC_H_ROOT
    try:
        ipr.nlm_request_batch([msg])
    except NetlinkError as err:
        if err.code in _GONE:
            return False
        raise
    return True


def links_named(prefix: str, netns: str = "") -> list[str]:
    """Links in `netns` whose names start with `prefix` (a run's leftovers when its ledger is lost)."""
    with rtnl(netns) as ipr:
        names = [link.get_attr("IFLA_IFNAME") for link in ipr.get_links()]
    return sorted(n for n in names if n and n.startswith(prefix))


def remove_links_named(prefix: str, netns: str = "") -> list[str]:
    """Delete the links `links_named` finds; returns what it removed (a veth takes its peer along)."""
    removed = []
    for name in links_named(prefix, netns):
        if undo({"kind": "link", "netns": netns, "name": name}):
            removed.append(f"link {name}")
    return removed
