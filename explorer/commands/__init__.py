"""CLI subcommands, one module each (see explorer/cli.py)."""
