"""Canonical names of kernel objects: `prf-<run>-<role>`, so status and cleanup find leftovers."""

from __future__ import annotations

import re
import secrets

from emulator.errors import RunIdError

PREFIX = "prf"
_RUN_ID = re.compile(r"[0-9a-f]{6}")  # fullmatch: `$` would let a trailing newline through
_SHOWN_CHARS = 40  # of a refused value, in the one-line error


def new_run_id() -> str:
    return secrets.token_hex(3)


def check_run_id(run_id: str, field: str = "run_id") -> str:
    """`run_id` if it is one: 6 lowercase hex digits, so a name that fits the kernel's 15-character
    interface names (`prf-<run>-<role>`) and can never be a path ('/', '..'). The one check, wherever
    a run id enters (CLI, run API, dashboard, ledger); RunIdError names `field` and the fix."""
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        shown = repr(run_id[:_SHOWN_CHARS + 1] if isinstance(run_id, str | bytes) else run_id)
        shown = shown if len(shown) <= _SHOWN_CHARS else shown[:_SHOWN_CHARS] + "..."
        raise RunIdError(f"{field}: {shown} is not a run id; use 6 lowercase hex digits such as "
                         f"{new_run_id()}, or leave it out for a fresh one")
    return run_id


def netns_name(run_id: str, dc: str) -> str:
    return f"{PREFIX}-{check_run_id(run_id)}-{dc}"


def ifname(run_id: str, role: str) -> str:
    """Interface names stay within the kernel's 15 characters: `prf-<run>-<role>`, role <= 4."""
    if not 0 < len(role) <= 4:
        raise ValueError(f"ifname role: {role!r} must be 1-4 characters")
    return f"{PREFIX}-{check_run_id(run_id)}-{role}"


def run_id_of(name: str) -> str | None:
    """The run id inside a project name, or None for names that are not the project's."""
    match = re.match(rf"^{PREFIX}-([0-9a-f]{{6}})-", name)
    return match.group(1) if match else None
