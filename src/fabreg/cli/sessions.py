"""``fabreg sessions``: list the sessions in the store."""

from __future__ import annotations

import argparse
from datetime import datetime, timezone

from fabreg.cli.store_option import add_db_argument, db_path
from fabreg.review.compare import list_sessions
from fabreg.review.series_splits import find_splits
from fabreg.review.store import Store


def register(subparsers: argparse._SubParsersAction) -> None:
    s = subparsers.add_parser("sessions", help="list the sessions in the store")
    add_db_argument(s)
    s.set_defaults(func=run_sessions)


def run_sessions(args: argparse.Namespace) -> int:
    with Store(db_path(args.db), create=False) as store:
        all_series = store.load()
        known = store.sessions()
    for info in list_sessions(all_series, known):
        when = datetime.fromtimestamp(info.start, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        extras = " ".join(f"{k}={v}" for k, v in sorted(info.extras.items()))
        print(f"{info.id}  {when}  {extras}".rstrip())
    splits = find_splits(all_series)
    if splits:
        print(f"\nseries split by a changed column ({len(splits)}): the newer series starts "
              "where the older stops")
        for split in splits:
            when = datetime.fromtimestamp(split.at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            print(f"  {when}  {split.text()}")
    return 0
