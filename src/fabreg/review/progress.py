"""Progress of long work (many files, many series) on stderr.

On a terminal one line is rewritten in place; otherwise (CI logs, pipes) a line is
printed at most every few seconds, so logs stay short. Nothing is printed for work
that finishes within the first interval.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, label: str, total: int, stream: TextIO | None = None,
                 interval: float = 2.0, enabled: bool = True) -> None:
        self.label = label
        self.total = total
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.interval = 0.2 if self.tty else interval
        self.enabled = enabled
        self.start = self.last = time.monotonic()
        self.shown = False

    def __call__(self, done: int, total: int | None = None, detail: str = "") -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if total is not None:
            self.total = total
        if now - self.last < self.interval and done < self.total:
            return
        if not self.shown and done >= self.total and now - self.start < self.interval:
            return  # quick work: no progress noise
        self.last = now
        self.shown = True
        pct = 100.0 * done / self.total if self.total else 100.0
        text = f"{self.label}: {done}/{self.total} ({pct:.0f} %){' ' + detail if detail else ''}"
        if self.tty:
            end = "\n" if done >= self.total else ""
            self.stream.write("\r" + text + "\x1b[K" + end)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
