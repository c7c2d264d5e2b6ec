"""``python -m fabreg.cli``: the same entry point as the ``fabreg`` command."""

import sys

from fabreg.cli import main

sys.exit(main())
