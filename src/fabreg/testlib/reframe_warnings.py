"""ReFrame's deprecation warnings for the price of a frame walk, not of the stack's source.

ReFrame 4.10 finds the frame a deprecation warning points at with ``inspect.stack()``, which
reads the source line of every frame on the stack and looks each frame's module up by file.
It does so twice for every test case it instantiates (the deprecated ``variables``, an alias
of ``env_vars``, is injected into each), also where the warning is suppressed: on the 2-core
VM that was more than half of the time a session takes to load the suite's checks
(``ci/bench/reframe_load_bench.py``). :func:`install` gives ReFrame's own function an
``inspect`` that walks the frames lazily, without their source, and names a frame's module
by its globals: the same frames, the same warnings, the same place they point at.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterator
from types import FrameType, ModuleType, SimpleNamespace
from typing import Any

import reframe.core.warnings as reframe_warnings


class FrameWalk:
    """What ``reframe.core.warnings`` uses of :mod:`inspect`, cheaply; the rest delegated."""

    @staticmethod
    def stack(context: int = 1) -> Iterator[SimpleNamespace]:
        """The caller's frame, then its callers', one at a time (``.frame`` only: all ReFrame
        reads of a stack entry, and it stops at the first frame outside ReFrame)."""
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:
            yield SimpleNamespace(frame=frame)
            frame = frame.f_back

    @staticmethod
    def getmodule(obj: Any, _filename: str | None = None) -> ModuleType | None:
        if isinstance(obj, FrameType):
            return sys.modules.get(obj.f_globals.get("__name__", ""))
        return inspect.getmodule(obj, _filename)

    def __getattr__(self, name: str) -> Any:
        return getattr(inspect, name)


def install() -> None:
    """Make ReFrame's deprecation warnings cheap (once; idempotent)."""
    if getattr(reframe_warnings, "inspect", None) is inspect:
        reframe_warnings.inspect = FrameWalk()


def installed() -> bool:
    """Whether ReFrame's deprecation warnings walk the frames (:func:`install`)."""
    return isinstance(getattr(reframe_warnings, "inspect", None), FrameWalk)
