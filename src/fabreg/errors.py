"""The one exception type the CLI turns into a one-line message instead of a traceback."""


class FabregError(Exception):
    """A user-facing error: bad input, a missing tool, an impossible request."""
