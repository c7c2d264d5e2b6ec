"""Shared helpers for the review-side tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def fabreg(*args: str, db: Path | None = None, check: bool = False,
           env: dict[str, str] | None = None, timeout: float = 300
           ) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a child process (as a user would)."""
    full_env = dict(os.environ if env is None else env)
    if db is not None:
        full_env["FABREG_DB"] = str(db)
    proc = subprocess.run([sys.executable, "-m", "fabreg.cli", *args], env=full_env,
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"fabreg {' '.join(args)} -> {proc.returncode}\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def run_fabreg():
    return fabreg


def reframe_binary() -> str | None:
    """The ReFrame next to this interpreter (the project's .venv), else on PATH."""
    here = Path(sys.executable).parent / "reframe"
    return str(here) if here.exists() else shutil.which("reframe")
