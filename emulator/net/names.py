"""Canonical names of kernel objects: `prf-<run>-<role>`, so status and cleanup find leftovers."""

from __future__ import annotations

import re
import secrets

PREFIX = "prf"
_RUN_ID = re.compile(r"^[0-9a-f]{6}$")


def new_run_id() -> str:
    return secrets.token_hex(3)


def check_run_id(run_id: str) -> str:
    if not _RUN_ID.match(run_id):
        raise ValueError(f"run_id: {run_id!r} must be 6 lowercase hex digits (e.g. {new_run_id()})")
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
