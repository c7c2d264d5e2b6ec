"""`fabreg` command line: a thin dispatcher over subcommand modules.

Each module in COMMAND_MODULES exposes ``register(subparsers)``, which adds its
subcommand(s) and sets ``func`` on the parser; the function receives the parsed
namespace and returns an exit status.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from fabreg import __version__
from fabreg.errors import FabregError

COMMAND_MODULES: tuple[str, ...] = (
    # review side (issue 5): perflogs -> store -> verdicts, reports, metrics
    "fabreg.cli.ingest",
    "fabreg.cli.trends",
    "fabreg.cli.compare",
    "fabreg.cli.report",
    "fabreg.cli.export",
    # the nightly in one command: reframe, ingest, trends gate, report, Prometheus textfile
    "fabreg.cli.nightly",
    # checks/references/<system>.yaml from stored runs
    "fabreg.cli.references",
    # workloads (issue 6): fabric counters, bounded stress traffic
    "fabreg.cli.counters",
    "fabreg.cli.stress",
    # the emulated Slurm cluster (issue 4)
    "fabreg.cli.cluster",
    # where a fault is (issue 14): the sweep's suspects
    "fabreg.cli.isolate",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fabreg",
        description="HPC interconnect regression suite: perflog review and test-cluster tools.",
    )
    parser.add_argument("--version", action="version", version=f"fabreg {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except FabregError as err:
        print(f"fabreg: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fabreg: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`fabreg trends | head`): not our error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
