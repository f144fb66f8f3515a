"""Errors the user can act on.  The CLI turns every :class:`ExplorerError` into one line and exit code 2."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class ExplorerError(Exception):
    """Base class: a problem with the user's input, explained in one line."""


class SpecError(ExplorerError):
    """A spec (YAML file, CLI flag, preset name) is malformed or contradicts itself.

    The message names where (file and key), the rule that was broken and the offending value.
    """

    def __init__(self, where: str, key: str | None, message: str):
        self.where = where
        self.key = key
        self.message = message
        loc = f"{where}: {key}" if key else where
        super().__init__(f"{loc}: {message}")


def did_you_mean(name: str, options: Iterable[str]) -> str:
    """Return ' (did you mean 'x'?)' when a close match exists, else ''."""
    match = difflib.get_close_matches(str(name), [str(o) for o in options], n=1, cutoff=0.6)
    return f" (did you mean '{match[0]}'?)" if match else ""


def unknown(where: str, key: str | None, kind: str, name: object, options: Iterable[str]) -> SpecError:
    opts = sorted(str(o) for o in options)
    text = str(name)
    shown = text if len(text) <= 80 else text[:77] + "..."  # the message stays one readable line
    return SpecError(
        where, key, f"unknown {kind} '{shown}'{did_you_mean(text[:200], opts)}; allowed: {', '.join(opts)}"
    )
