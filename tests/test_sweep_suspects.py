"""The sweep's confirmation: a suspect fails the check only when a second sweep in the same job
names it again; the in-job test that decides whether to run that second sweep."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import REPO

from fabreg.isolation import PairValue, Suspect, localise_all, suspects_of
from fabreg.run import sweep_suspects

DATA = REPO / "tests" / "data" / "sweep"


def _suspects(perflog: str) -> list[Suspect]:
    """The suspects of a real Sweep perflog's pair table (the check's first sweep)."""
    lines = (DATA / perflog).read_text().splitlines()
    row = dict(zip(lines[0].split("|"), lines[-1].split("|")))
    table = json.loads(row["pair_table"])
    pairs = [dict(zip(table["fields"], r)) for r in table["rows"] if r[1] not in
             ("loopback", "memory")]
    return suspects_of(localise_all({
        "bandwidth": [PairValue(p["node_a"], p["node_b"], p["bandwidth"], p["round"])
                      for p in pairs]}))


def test_a_real_fault_named_by_both_sweeps_is_confirmed():
    node, link = _suspects("node.log"), _suspects("link.log")
    assert [(s.kind, s.nodes) for s in node] == [("node", ("node3",))]
    assert [(s.kind, s.nodes) for s in link] == [("link", ("node1", "node3"))]
    assert sweep_suspects.confirmed(node, node) == (node, [])
    # named again by another metric or with another deficit: still the same node
    assert sweep_suspects.confirmed(node, _suspects("node-inconclusive.log")) == (node, [])


def test_a_suspect_the_second_sweep_does_not_name_is_not_confirmed():
    link = _suspects("link.log")
    assert sweep_suspects.confirmed(link, []) == ([], link)
    # the second sweep naming something else confirms neither
    assert sweep_suspects.confirmed(link, _suspects("node.log")) == ([], link)


def test_the_job_runs_a_second_sweep_only_when_the_first_names_a_suspect(tmp_path, capsys):
    assert sweep_suspects.main([str(DATA / "healthy-job.out")]) == 1
    cut = tmp_path / "cut.out"
    cut.write_text("\n".join((DATA / "healthy-job.out").read_text().splitlines()[:12]))
    assert sweep_suspects.main([str(cut)]) == 1  # no complete sweep: nothing to confirm
    assert "sweep_suspects:" in capsys.readouterr().err
    assert sweep_suspects.main([str(Path(tmp_path / "absent.out"))]) == 1
    assert sweep_suspects.main([]) == 2
