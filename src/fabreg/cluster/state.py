"""The record of what `fabreg cluster up` created, kept in the state directory.

It is written after every step of `up`, so that `down` can undo a half-started
cluster, and read by `status`, the fault commands and the ReFrame configuration.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from fabreg.cluster.layout import Layout, Paths
from fabreg.cluster.processes import Daemon
from fabreg.errors import FabregError


@dataclass
class ClusterState:
    """Layout, daemons and injected faults of one cluster."""

    layout: Layout
    daemons: dict[str, Daemon] = field(default_factory=dict)
    degraded: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {
            "layout": self.layout.to_dict(),
            "daemons": {name: d.to_dict() for name, d in self.daemons.items()},
            "degraded": dict(self.degraded),
        }

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> ClusterState:
        daemons = data.get("daemons") or {}
        return cls(
            layout=Layout.from_dict(data["layout"]),  # type: ignore[arg-type]
            daemons={n: Daemon.from_dict(d) for n, d in daemons.items()},  # type: ignore[union-attr]
            degraded=dict(data.get("degraded") or {}),  # type: ignore[call-overload]
        )


def load(paths: Paths) -> ClusterState | None:
    """The recorded state, or None when no cluster was started from this state directory."""
    try:
        text = paths.state_file.read_text()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise FabregError(f"cannot read {paths.state_file}: {err.strerror}") from None
    try:
        return ClusterState.from_dict(json.loads(text))
    except (ValueError, KeyError, TypeError) as err:
        raise FabregError(
            f"{paths.state_file}: unreadable cluster state ({err}); "
            "`fabreg cluster down` removes what it can find by name"
        ) from None


def save(paths: Paths, state: ClusterState) -> None:
    """Write the state atomically (a crash never leaves half a file)."""
    paths.root.mkdir(parents=True, exist_ok=True)
    tmp = paths.state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(state.to_dict(), indent=2) + "\n")
    os.replace(tmp, paths.state_file)


def remove(paths: Paths) -> None:
    for path in (paths.state_file, paths.state_file.with_suffix(".tmp")):
        path.unlink(missing_ok=True)
