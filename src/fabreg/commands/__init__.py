"""CLI subcommands; each module registers its own parser (see fabreg.cli)."""
