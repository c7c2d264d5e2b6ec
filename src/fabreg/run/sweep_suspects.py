"""Suspects of one sweep's output, and the in-job test that asks for a confirming sweep.

``python -m fabreg.run.sweep_suspects OUTPUT`` exits 0 when the sweep in ``OUTPUT`` names a
suspect, 1 when it names none or cannot be read: the sweep job then runs the probe a second
time only when there is something to confirm (``checks/sweep.py``), and a suspect must be named
by both sweeps. One sweep's suspect can be the scheduler, not the fabric: on the emulated
cluster (four ranks on two cores) a healthy sweep in ten named a link 34 % slow for one round.
"""

from __future__ import annotations

import sys
from pathlib import Path

from fabreg import isolation
from fabreg.run.parsers.probes import ProbeOutputError, SweepResult, parse_sweep


def localise_sweep(result: SweepResult) -> list[isolation.Localisation]:
    """Bandwidth and latency localised over the sweep's pairs (controls left out)."""
    pairs = result.pairs
    return isolation.localise_all({
        "bandwidth": [isolation.PairValue(p.node_a, p.node_b, p.bandwidth_mbs, p.round)
                      for p in pairs],
        "latency": [isolation.PairValue(p.node_a, p.node_b, p.latency_us, p.round)
                    for p in pairs],
    })


def confirmed(first: list[isolation.Suspect], second: list[isolation.Suspect]
              ) -> tuple[list[isolation.Suspect], list[isolation.Suspect]]:
    """(named again by the second sweep, not named again): a node or link counts as named
    again whatever metric named it the second time."""
    again = {(s.kind, s.nodes) for s in second}
    return ([s for s in first if (s.kind, s.nodes) in again],
            [s for s in first if (s.kind, s.nodes) not in again])


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m fabreg.run.sweep_suspects SWEEP_OUTPUT", file=sys.stderr)
        return 2
    try:
        result = parse_sweep(Path(args[0]).read_text(errors="replace"))
    except (OSError, ValueError, ProbeOutputError) as err:
        print(f"sweep_suspects: {err}", file=sys.stderr)
        return 1
    found = isolation.suspects_of(localise_sweep(result))
    for s in found:
        print(f"sweep_suspects: to confirm: {s.text()}", file=sys.stderr)
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
