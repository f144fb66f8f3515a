"""Command line: a thin layer over the library.  Every user error is one line on stderr and exit 2.

Each subcommand lives in ``explorer/commands/<name>.py`` with ``register(subparsers)``; the
function it sets as ``func`` receives the parsed arguments and returns an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NoReturn

from explorer import __version__
from explorer.errors import ExplorerError
from explorer.interrupts import clear_stale_interrupt, terminate_as_interrupt

COMMAND_MODULES = ("evaluate", "catalog", "sweep", "report", "compare", "validate", "calibrate")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse's own errors: one line, exit 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="explorer", description="LLM model/hardware co-design explorer")
    parser.add_argument("--version", action="version", version=f"explorer {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMAND_MODULES:
        try:
            mod = importlib.import_module(f"explorer.commands.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"explorer.commands.{name}":
                continue  # command not built yet
            raise
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    command = "explorer"
    try:
        with terminate_as_interrupt():  # one signal policy: SIGTERM is Ctrl-C (explorer/interrupts.py)
            try:
                parser = build_parser()
                args = parser.parse_args(argv)
                command = f"explorer {args.command}"
                return int(args.func(args) or 0)
            except ExplorerError as e:
                print(f"{command}: error: {_one_line(str(e))}", file=sys.stderr)
                return 2
            except KeyboardInterrupt:
                print(f"{command}: interrupted", file=sys.stderr)
                return 130
            except BrokenPipeError:
                return 0
    finally:  # every way out, SystemExit from argparse included: our exit code, not SIGINT
        clear_stale_interrupt()


def _one_line(message: str) -> str:
    """The promise is one line on stderr: fold any line breaks a message picked up from its input."""
    return " ".join(message.split()) if "\n" in message or "\r" in message else message


if __name__ == "__main__":
    sys.exit(main())
