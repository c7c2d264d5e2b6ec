"""The one line of a tool's output that explains what went wrong."""

from __future__ import annotations

import re


def first_line(text: str, pattern: re.Pattern[str], limit: int = 300) -> str | None:
    """The first line of ``text`` that ``pattern`` finds, stripped and cut at ``limit``."""
    for line in text.splitlines():
        if pattern.search(line):
            return line.strip()[:limit]
    return None
