"""The suite as it was at a git revision, for a benchmark's ``--before`` column.

A detached git worktree of the repository at ``rev``: its checks, its config, its tests and
(through ``PYTHONPATH=<tree>/src``) its ``fabreg`` package; removed again when the
benchmark is done with it, also when it fails.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def checked_out(repo: Path, rev: str, tree: Path) -> Iterator[Path]:
    """``repo`` at ``rev`` in ``tree`` (created here), for the length of the ``with``; a
    worktree left in ``tree`` by a benchmark that was killed is replaced."""
    remove = ["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)]
    if tree.exists():
        subprocess.run(remove, capture_output=True)
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", "-f", str(tree),
                    rev], check=True, capture_output=True)
    try:
        yield tree
    finally:
        subprocess.run(remove, capture_output=True)


def with_package(env: dict[str, str], tree: Path) -> dict[str, str]:
    """``env`` with ``tree``'s ``fabreg`` package first on ``PYTHONPATH`` (for the child
    processes: ReFrame, the jobs it starts, pytest)."""
    return {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(tree / "src"),
                                                               env.get("PYTHONPATH")]))}
