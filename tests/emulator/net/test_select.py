"""Backend selection: netem where the kernel has it, tun otherwise, proxy without root."""

import subprocess
import sys
from pathlib import Path

import pytest

from emulator.errors import LinkBackendUnavailable
from emulator.net.select import choose_backend

from .conftest import kernel_has_netem, needs_root

REPO = Path(__file__).resolve().parents[3]


@needs_root
def test_auto_picks_netem_when_the_kernel_has_it_else_tun():
    choice = choose_backend("auto")
    if kernel_has_netem():
        assert choice.name == "netem"
    else:
        assert choice.name == "tun"
        assert "sch_netem" in choice.reason and choice.describe().startswith("link backend: tun (")


@needs_root
def test_explicit_netem_on_a_kernel_without_it_is_refused_with_the_reason():
    if kernel_has_netem():
        assert choose_backend("netem").name == "netem"
    else:
        with pytest.raises(LinkBackendUnavailable, match="sch_netem"):
            choose_backend("netem")


def test_unknown_backend_is_refused():
    with pytest.raises(LinkBackendUnavailable, match="link.backend: 'wire'"):
        choose_backend("wire")


@needs_root
def test_without_network_privileges_auto_falls_back_to_proxy_with_the_reason():
    """Drop CAP_NET_ADMIN and CAP_SYS_ADMIN from the bounding set: what a non-root user lacks."""
    code = (
        "from emulator.net.select import choose_backend\n"
        "from emulator.errors import LinkBackendUnavailable\n"
        "c = choose_backend('auto'); print(c.name); print(c.reason)\n"
        "try:\n    choose_backend('tun')\nexcept LinkBackendUnavailable as e:\n    print('refused:', e)\n"
    )
    out = subprocess.run(
        ["setpriv", "--bounding-set", "-net_admin,-sys_admin", sys.executable, "-c", code],
        cwd="/", capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    name, reason, refused = out.stdout.strip().splitlines()
    assert name == "proxy"
    assert "without CAP_NET_ADMIN" in reason and "cannot drop packets" in reason
    assert refused.startswith("refused: link backend tun: root without CAP_NET_ADMIN")
