"""`fabreg` command line: a thin dispatcher over subcommand modules.

Each module in COMMANDS exposes ``register(subparsers)``, which adds its subcommand(s)
and sets ``func`` on the parser; the function receives the parsed namespace and returns
an exit status. Only the module of the subcommand given is imported (all of them for
``fabreg --help`` or an unknown name): a command pays for its own imports only, so
``fabreg ingest`` of one night does not load matplotlib, numpy or prometheus-client.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from fabreg import __version__
from fabreg.errors import FabregError

#: Subcommand -> the module that registers it (tests/test_cli_dispatch.py checks this table
#: against what the modules register).
COMMANDS: dict[str, str] = {
    # review side (issue 5): perflogs -> store -> verdicts, reports, metrics
    "ingest": "fabreg.cli.ingest",
    "sessions": "fabreg.cli.sessions",
    "migrate": "fabreg.cli.migrate",
    "trends": "fabreg.cli.trends",
    "compare": "fabreg.cli.compare",
    "report": "fabreg.cli.report",
    "export": "fabreg.cli.export",
    "serve-metrics": "fabreg.cli.export",
    # the nightly in one command: reframe, ingest, trends gate, report, Prometheus textfile
    "nightly": "fabreg.cli.nightly",
    # checks/references/<system>.yaml from stored runs
    "references": "fabreg.cli.references",
    # workloads (issue 6): fabric counters, bounded stress traffic
    "counters": "fabreg.cli.counters",
    "stress": "fabreg.cli.stress",
    # the emulated Slurm cluster (issue 4)
    "cluster": "fabreg.cli.cluster",
    # where a fault is (issue 14): the sweep's suspects
    "isolate": "fabreg.cli.isolate",
    # a site configuration drawn from the live Slurm cluster
    "site": "fabreg.cli.site",
}


def command_of(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv`` (the first word that is not an option), if known."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser with ``command``'s subcommands, or with every subcommand if None."""
    parser = argparse.ArgumentParser(
        prog="fabreg",
        description="HPC interconnect regression suite: perflog review and test-cluster tools.",
    )
    parser.add_argument("--version", action="version", version=f"fabreg {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = [COMMANDS[command]] if command in COMMANDS else list(dict.fromkeys(
        COMMANDS.values()))
    for name in modules:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(command_of(argv))
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
