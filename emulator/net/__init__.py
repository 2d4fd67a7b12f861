"""Shaped cross-datacenter links: namespaces per datacenter joined by a netem, tun or proxy link.

pyroute2 does its namespace work in forked helpers and ends each with SIGTERM, catching only
`Exception` in them. A helper that inherited a Python handler raising SystemExit (Ray's driver and
node leave one behind) or KeyboardInterrupt would unwind its copy of our stack and run on as a
second copy of the program. So a child forked from a process that imports this package dies of
SIGTERM and ignores SIGINT (a terminal's Ctrl-C is its parent's to handle); `subprocess` children
run no Python after the fork and are not affected.
"""

import os
import signal


def _helper_signals() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


os.register_at_fork(after_in_child=_helper_signals)
