"""The ``--db`` option every review command shares: which store to read or write."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from fabreg.review.store import DEFAULT_DB


def db_path(given: str | None) -> Path:
    """``--db`` if given, else ``$FABREG_DB``, else ``perflogs/fabreg.db``."""
    return Path(given or os.environ.get("FABREG_DB") or DEFAULT_DB)


def add_db_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", metavar="PATH",
                        help=f"the store (default: $FABREG_DB or {DEFAULT_DB})")
