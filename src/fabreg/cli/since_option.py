"""The ``--since TIME`` option of the review commands: a time from ISO 8601, or a one-line
error naming the option."""

from __future__ import annotations

from fabreg.errors import FabregError
from fabreg.review.perflog import parse_time


def since_time(given: str | None) -> float | None:
    """``--since`` as seconds since the epoch (UTC), None when not given."""
    if not given:
        return None
    try:
        return parse_time(given)
    except ValueError as err:
        raise FabregError(f"--since: {err}") from None
