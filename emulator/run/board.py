"""The operator's view of the nodes: each one's role, whether it is up or draining for a role
flip, and what the run handed it and has not heard back about. The router's loads and the decode
placement are read from here, so both engines weigh nodes alike; the engines' own mechanics (the
simulated queues, the workers) do the work.

Nodes are numbered by slot: the remote prefill nodes 0..R-1, then the local nodes R..R+L-1. A local
slot keeps its number through role flips (local-prefill-2 becomes local-decode-2).
"""

from __future__ import annotations

from emulator.control.placement import least_held, split_flips
from emulator.control.router import NodeLoad
from emulator.control.types import Cluster, NodeId, Role


class NodeBoard:
    """Per slot: role, up, draining, prefills and decodes held. `loads` is the list the router
    reads (the prefill nodes, remote first, then local by index), kept current in place of a
    rebuild per request; `flips_due` collects the draining slots that became idle.

    A prefill slot's work left is kept as running figures, not recomputed per decision: the
    profile seconds of the prompts it holds that have not started (each at its own length, added
    and taken off as they come and go) and when the prompt in service ends."""

    def __init__(self, num_remote: int, num_local: int, num_local_prefill: int) -> None:
        self.num_remote = num_remote
        total = num_remote + num_local
        self.is_prefill = [slot < num_remote + num_local_prefill for slot in range(total)]
        self.is_up = [True] * total
        self.is_draining = [False] * total
        self.prefill_held = [0] * total  # routed to it, prefill not finished
        self.prefill_tokens = [0] * total  # their incremental tokens
        self.queued_s = [0.0] * total  # profile seconds of those not started yet
        self.busy_until_s = [0.0] * total  # when the one in service ends by the profile (0: none)
        self.decode_held = [0] * total  # placed on it, not ended
        self.flips_due: list[int] = []
        self.ids: list[NodeId] = []
        self.names: list[str] = []
        self.loads: list[NodeLoad] = []
        self.seat = [-1] * total  # slot -> its index in `loads` (-1: not a prefill node)
        self.decode_slots: list[int] = []
        self._idle: list[NodeLoad] = []
        self.reindex()

    @property
    def slots(self) -> range:
        return range(len(self.is_prefill))

    def node_id(self, slot: int) -> NodeId:
        remote = slot < self.num_remote
        return NodeId(Cluster.REMOTE if remote else Cluster.LOCAL,
                      Role.PREFILL if self.is_prefill[slot] else Role.DECODE,
                      slot if remote else slot - self.num_remote)

    def slot_of(self, node: NodeId) -> int:
        """The slot a NodeId names, current role or not; -1 outside the scenario."""
        slot = node.index if node.cluster is Cluster.REMOTE else self.num_remote + node.index
        in_cluster = node.index < (self.num_remote if node.cluster is Cluster.REMOTE
                                   else len(self.is_prefill) - self.num_remote)
        return slot if node.index >= 0 and in_cluster else -1

    def reindex(self) -> None:
        """Rebuild the names, the router's list and the decode slots after a role change."""
        self.ids = [self.node_id(slot) for slot in self.slots]
        self.names = [str(node) for node in self.ids]
        self._idle = [NodeLoad(node, 0, 0, True) for node in self.ids]
        prefill = [slot for slot in self.slots if self.is_prefill[slot]]
        self.seat = [-1] * len(self.is_prefill)
        for seat, slot in enumerate(prefill):
            self.seat[slot] = seat
        self.loads = [self._idle[slot] for slot in prefill]
        for slot in prefill:
            self.refresh(slot)
        self.decode_slots = [slot for slot in self.slots if not self.is_prefill[slot]]

    def refresh(self, slot: int) -> None:
        """Write a prefill slot's load; a draining node is not up for routing."""
        seat = self.seat[slot]
        if seat < 0:
            return
        is_up, held, tokens = self.is_up[slot] and not self.is_draining[slot], self.prefill_held[slot], \
            self.prefill_tokens[slot]
        self.loads[seat] = (self._idle[slot] if is_up and not held and not tokens
                            else NodeLoad(self.ids[slot], tokens, held, is_up, self.queued_s[slot],
                                          self.busy_until_s[slot]))

    # ---- what the run hands out and hears back ----

    def add_prefill(self, slot: int, tokens: int, service_s: float) -> None:
        """A prompt of `tokens` uncached tokens, `service_s` by the profile, is routed to `slot`."""
        self.prefill_held[slot] += 1
        self.prefill_tokens[slot] += tokens
        self.queued_s[slot] += service_s
        self.refresh(slot)

    def start_prefill(self, slot: int, t: float, service_s: float) -> None:
        """One of its prompts (`service_s` by the profile) went into service at `t`."""
        self.queued_s[slot] -= service_s
        self.busy_until_s[slot] = t + service_s
        self.refresh(slot)

    def end_prefill(self, slot: int, tokens: int, service_s: float, *, is_started: bool) -> None:
        """A prompt leaves `slot`: prefilled or let go of in service (`is_started`), or let go of
        while it waited (its `service_s` comes off the queue)."""
        self.prefill_held[slot] -= 1
        self.prefill_tokens[slot] -= tokens
        if is_started:
            self.busy_until_s[slot] = 0.0
        else:
            self.queued_s[slot] -= service_s
        if not self.prefill_held[slot]:  # empty: no float residue of the running sum survives
            self.queued_s[slot] = self.busy_until_s[slot] = 0.0
        self.refresh(slot)
        if self.is_draining[slot] and not self.prefill_held[slot]:
            self.flips_due.append(slot)

    def pick_decode(self) -> int:
        return least_held(self.decode_slots, self.is_up, self.is_draining, self.decode_held)

    def add_decode(self, slot: int) -> None:
        self.decode_held[slot] += 1

    def end_decode(self, slot: int) -> None:
        self.decode_held[slot] -= 1
        if self.is_draining[slot] and not self.decode_held[slot]:
            self.flips_due.append(slot)

    def is_idle(self, slot: int) -> bool:
        return not (self.prefill_held[slot] if self.is_prefill[slot] else self.decode_held[slot])

    # ---- nodes coming, going and flipping ----

    def set_up(self, slot: int, is_up: bool) -> None:
        """A node lost drops a pending flip: it comes back in the role it had."""
        self.is_up[slot] = is_up
        if not is_up:
            self.is_draining[slot] = False
        self.refresh(slot)

    def request_flip(self, slot: int, role: Role) -> bool:
        """Drain `slot` for a flip to `role`: it flips once it holds nothing (`flips_due`). Asking
        a draining node for the role it has calls its flip off. False (nothing changes) when it is
        remote, down or already settled in that role."""
        if slot < self.num_remote or not self.is_up[slot]:
            return False
        if self.is_prefill[slot] == (role is Role.PREFILL):
            if not self.is_draining[slot]:
                return False
            self.is_draining[slot] = False  # the flip it was draining for is no longer wanted
        elif not self.is_draining[slot]:
            self.is_draining[slot] = True
            if self.is_idle(slot):
                self.flips_due.append(slot)
        self.refresh(slot)
        return True

    def take_flips(self) -> list[int]:
        """The slots to flip now, emptying `flips_due`: each once, still draining and still idle
        (a retry may have placed work on it since; it falls due again when that ends)."""
        due, self.flips_due = self.flips_due, []
        return [slot for i, slot in enumerate(due)
                if self.is_draining[slot] and self.is_idle(slot) and slot not in due[:i]]

    def flipped(self, slot: int) -> None:
        """The node at `slot` now serves the other role."""
        self.is_prefill[slot] = not self.is_prefill[slot]
        self.is_draining[slot] = False
        self.reindex()

    def split_flips(self, target: int) -> list[tuple[int, Role]]:
        """The local flips toward `target` prefill nodes, as local indices (control.placement),
        counting a draining node in the role it drains toward."""
        local = range(self.num_remote, len(self.is_prefill))
        heading = [self.is_prefill[s] != self.is_draining[s] for s in range(len(self.is_prefill))]
        return split_flips([s - self.num_remote for s in local if heading[s]],
                           [s - self.num_remote for s in local if not heading[s]], target)

    @property
    def num_local_prefill(self) -> int:
        return sum(self.is_prefill[self.num_remote:])

    @property
    def num_local_prefill_heading(self) -> int:
        """Local prefill nodes once the pending flips are done."""
        return sum(p != d for p, d in zip(self.is_prefill[self.num_remote:], self.is_draining[self.num_remote:],
                                          strict=True))
