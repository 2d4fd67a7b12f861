"""Scripts for the conformance suite: what happens to a run (arrivals, reports, node losses, flips,
the end) and what each step must make the engine do, in a vocabulary every engine can be watched in:

  ("dispatch", request, prefill node, decode node)   the prompt handed to its prefill node
  ("decode", request, decode node)                   the decode node told to take it
  ("ended", request, "completed" or the fail reason)
  ("flip", node, role)                               a drained node told to take `role`
  ("end_run",)

Nodes are core_case's: remote-prefill-0, local-prefill-0, local-decode-1, local-decode-2; LONG
prompts go remote, SHORT ones stay local. `engines` names the engines a script can reach: a
simulated node reports each step once and never fails an attempt by itself (its epoch drops stale
reports), so scripts of worker failures, late and duplicate reports are the live engine's and the core's.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.emulator.run.core_case import LONG, SHORT

ALL = ("core", "live", "virtual")
REPORTING = ("core", "live")  # engines whose nodes report over a wire: out of order, late, twice

Step = tuple[object, ...]
Observed = tuple[object, ...]


@dataclass(frozen=True)
class Script:
    name: str
    steps: tuple[tuple[Step, tuple[Observed, ...]], ...]
    engines: tuple[str, ...] = ALL


def _complete(rid: str, decode: str, *, first_token_first: bool = False) -> tuple[tuple[Step, tuple], ...]:
    if first_token_first:
        return ((("prefill_started", rid), ()), (("prefill_done", rid), (("decode", rid, decode),)),
                (("first_token", rid), ()), (("transfer_done", rid), ()),
                (("finished", rid), (("ended", rid, "completed"),)))
    return ((("prefill_started", rid), ()), (("prefill_done", rid), (("decode", rid, decode),)),
            (("transfer_done", rid), ()), (("first_token", rid), ()),
            (("finished", rid), (("ended", rid, "completed"),)))


REMOTE_DISPATCH = ("dispatch", "r1", "remote-prefill-0", "local-decode-1")
LOCAL_DISPATCH = ("dispatch", "r1", "local-prefill-0", "local-decode-1")

SCRIPTS = (
    Script("a remote request completes", ((("arrive", "r1", LONG), (REMOTE_DISPATCH,)),
                                          *_complete("r1", "local-decode-1"))),
    Script("a local request completes", ((("arrive", "r1", SHORT), (LOCAL_DISPATCH,)),
                                         *_complete("r1", "local-decode-1"))),
    Script("the first token comes before the sender's transfer done", (
        (("arrive", "r1", LONG), (REMOTE_DISPATCH,)), *_complete("r1", "local-decode-1", first_token_first=True)),
        engines=REPORTING),
    Script("a transfer done after the request ended is late", (
        (("arrive", "r1", LONG), (REMOTE_DISPATCH,)), (("prefill_started", "r1"), ()),
        (("prefill_done", "r1"), (("decode", "r1", "local-decode-1"),)), (("first_token", "r1"), ()),
        (("finished", "r1"), (("ended", "r1", "completed"),)), (("transfer_done", "r1"), ())),
        engines=REPORTING),
    Script("a failed attempt is retried and its late reports change nothing", (
        (("arrive", "r1", LONG), (REMOTE_DISPATCH,)), (("prefill_started", "r1"), ()),
        (("fail", "r1", "prefill_failed"), (REMOTE_DISPATCH,)),
        (("late", "r1", "prefill_done"), ()), (("late", "r1", "finished"), ()),
        *_complete("r1", "local-decode-1")), engines=REPORTING),
    Script("a request fails after its last attempt", (
        (("arrive", "r1", LONG), (REMOTE_DISPATCH,)), (("fail", "r1", "transfer_failed"), (REMOTE_DISPATCH,)),
        (("fail", "r1", "transfer_failed"), (REMOTE_DISPATCH,)),
        (("fail", "r1", "transfer_failed"), (("ended", "r1", "transfer_failed"),))), engines=REPORTING),
    Script("reports that come twice change nothing", (
        (("arrive", "r1", LONG), (REMOTE_DISPATCH,)), (("prefill_started", "r1"), ()), (("prefill_started", "r1"), ()),
        (("prefill_done", "r1"), (("decode", "r1", "local-decode-1"),)), (("prefill_done", "r1"), ()),
        (("transfer_done", "r1"), ()), (("transfer_done", "r1"), ()), (("first_token", "r1"), ()),
        (("first_token", "r1"), ()), (("finished", "r1"), (("ended", "r1", "completed"),)),
        (("finished", "r1"), ())), engines=REPORTING),
    Script("a prefill node lost before it started is retried elsewhere", (
        (("arrive", "r1", LONG), (REMOTE_DISPATCH,)), (("lost", "remote-prefill-0"), (LOCAL_DISPATCH,)),
        *_complete("r1", "local-decode-1")), engines=REPORTING),
    Script("a prefill node lost while prefilling", (
        (("arrive", "r1", LONG), (REMOTE_DISPATCH,)), (("prefill_started", "r1"), ()),
        (("lost", "remote-prefill-0"), (LOCAL_DISPATCH,)), *_complete("r1", "local-decode-1"))),
    Script("a prefill node lost while its KV is on the way", (
        (("arrive", "r1", LONG), (REMOTE_DISPATCH,)), (("prefill_started", "r1"), ()),
        (("prefill_done", "r1"), (("decode", "r1", "local-decode-1"),)),
        (("lost", "remote-prefill-0"), (LOCAL_DISPATCH,)), *_complete("r1", "local-decode-1"))),
    Script("a decode node lost while decoding", (
        (("arrive", "r1", LONG), (REMOTE_DISPATCH,)), (("prefill_started", "r1"), ()),
        (("prefill_done", "r1"), (("decode", "r1", "local-decode-1"),)), (("transfer_done", "r1"), ()),
        (("first_token", "r1"), ()),
        (("lost", "local-decode-1"), (("dispatch", "r1", "remote-prefill-0", "local-decode-2"),)),
        *_complete("r1", "local-decode-2"))),
    Script("with no prefill node up a request fails at once", (
        (("lost", "remote-prefill-0"), ()), (("lost", "local-prefill-0"), ()),
        (("arrive", "r1", LONG), (("ended", "r1", "no_prefill_node"),)))),
    Script("an idle node flips at once", (
        (("flip", "local-decode-2", "prefill"), (("flip", "local-decode-2", "prefill"),)),
        (("flipped", "local-decode-2"), ()),  # both local prefill nodes idle: core_case's seed 1 starts
        # the rotation at the second, the flipped one
        (("arrive", "r1", SHORT), (("dispatch", "r1", "local-prefill-2", "local-decode-1"),)),
        *_complete("r1", "local-decode-1"))),
    Script("a busy node drains, then flips", (
        (("arrive", "r1", SHORT), (LOCAL_DISPATCH,)), (("flip", "local-decode-1", "prefill"), ()),
        (("arrive", "r2", SHORT), (("dispatch", "r2", "local-prefill-0", "local-decode-2"),)),
        (("prefill_started", "r1"), ()), (("prefill_done", "r1"), (("decode", "r1", "local-decode-1"),)),
        (("transfer_done", "r1"), ()), (("first_token", "r1"), ()),
        (("finished", "r1"), (("ended", "r1", "completed"), ("flip", "local-decode-1", "prefill"))),
        (("flipped", "local-decode-1"), ()), *_complete("r2", "local-decode-2"))),
    Script("the run ends when the last request ends after the arrivals", (
        (("arrive", "r1", SHORT), (LOCAL_DISPATCH,)), (("arrivals_over",), ()),
        *_complete("r1", "local-decode-1")[:-1],
        (("finished", "r1"), (("ended", "r1", "completed"), ("end_run",))))),
    Script("the run ends at once when nothing is open", ((("arrivals_over",), (("end_run",),)),)),
    Script("what is open when the drain is over fails unfinished", (
        (("arrive", "r1", LONG), (REMOTE_DISPATCH,)), (("prefill_started", "r1"), ()), (("arrivals_over",), ()),
        (("drain_over",), (("ended", "r1", "unfinished"), ("end_run",))))),
    Script("a stop fails what is open, interrupted", (
        (("arrive", "r1", LONG), (REMOTE_DISPATCH,)),
        (("arrive", "r2", SHORT), (("dispatch", "r2", "local-prefill-0", "local-decode-2"),)),
        (("stop",), (("ended", "r1", "interrupted"), ("ended", "r2", "interrupted"), ("end_run",))))),
)
