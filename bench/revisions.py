"""The revision an A/B bench compares against: git in this checkout, the commit a name stands for,
and a detached worktree of it that is removed on the way out, whatever happened. Also the one-line
error an A/B bench exits 2 with (a bad argument, or a run that cannot be trusted).

Bench scripts import it by its plain name, as Python puts a script's own folder first on the path."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class BenchError(Exception):
    """A bad argument, or a step that could not run or cannot be trusted: one line, exit 2."""


def git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise BenchError(f"git {' '.join(args)} failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return done.stdout.strip()


def resolve_rev(rev: str, option: str = "--baseline") -> str:
    """The commit sha that `rev` (given as `option`) names in this repository."""
    done = subprocess.run(["git", "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"],
                          cwd=ROOT, capture_output=True, text=True)
    if not rev.strip() or done.returncode:
        raise BenchError(f"{option}: {rev!r} names no commit in {ROOT}; give a sha, a branch or HEAD~1")
    return done.stdout.strip()


@contextlib.contextmanager
def detached_worktree(sha: str, prefix: str = "prfaas-ab-") -> Iterator[Path]:
    """A detached worktree of `sha` in a new temporary folder; removed on the way out, whatever happened."""
    folder = Path(tempfile.mkdtemp(prefix=prefix)).resolve()
    tree = folder / "tree"
    try:
        git("worktree", "add", "--detach", "--quiet", str(tree), sha)
        yield tree
    finally:
        removed = subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT,
                                 capture_output=True).returncode == 0
        shutil.rmtree(folder, ignore_errors=True)
        if not removed:  # never added, or half added: drop git's record of it once the folder is gone
            subprocess.run(["git", "worktree", "prune"], cwd=ROOT, capture_output=True)
