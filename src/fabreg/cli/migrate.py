"""``fabreg migrate``: rewrite a store of an earlier layout in the current one."""

from __future__ import annotations

import argparse

from fabreg.cli.store_option import add_db_argument, db_path
from fabreg.review.progress import Progress
from fabreg.review.store_migrate import migrate


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "migrate", help="rewrite a store of an earlier layout in the current one",
        description="Copy every value, run, series, session and file mark of a store written "
                    "by an earlier fabreg into the current layout (docs/trends.md, 'The "
                    "store'), check that all arrived, and put the new file in the store's "
                    "place. The old file is kept as <store>.schemaN (N: its layout). Run it "
                    "when no ingest runs: it holds the store's write lock while it copies.")
    add_db_argument(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    path = db_path(args.db)
    done = migrate(path, Progress("migrate: values copied", 0))
    print(f"migrated {path}: {done.values} value(s), {done.runs} run(s), {done.series} "
          f"series; {done.bytes_before / 1e6:.1f} MB -> {done.bytes_after / 1e6:.1f} MB "
          f"({done.bytes_before / max(done.values, 1):.0f} -> "
          f"{done.bytes_after / max(done.values, 1):.0f} bytes a value); the old file is "
          f"{done.backup} (remove it once the new store serves you)")
    return 0
