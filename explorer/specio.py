"""Reading YAML specs strictly: every loader (hardware, search spaces, measurements) uses these
helpers so that every error names the file, the key, the rule and the value, in one line."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from explorer.errors import SpecError, did_you_mean


def read_yaml(path: str | Path) -> Any:
    """Parse a YAML file; a missing or malformed file is a :class:`SpecError` naming it."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(str(p), None, "file not found") from None
    except OSError as e:
        raise SpecError(str(p), None, f"cannot read file ({e.strerror})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise SpecError(str(p), None, f"malformed YAML: {where}{problem}") from None


class Section:
    """A mapping being read: tracks the path for messages and rejects unknown keys."""

    def __init__(self, data: Any, where: str, path: str = ""):
        if not isinstance(data, Mapping):
            raise SpecError(where, path or None, f"expected a mapping, got {type(data).__name__} {data!r}")
        self.data = data
        self.where = where
        self.path = path

    def key(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def check_keys(self, allowed: set[str]) -> None:
        for k in self.data:
            if k not in allowed:
                raise SpecError(
                    self.where,
                    self.key(str(k)),
                    f"unknown key{did_you_mean(str(k), allowed)}; allowed: {', '.join(sorted(allowed))}",
                )

    def has(self, name: str) -> bool:
        return name in self.data and self.data[name] is not None

    def raw(self, name: str, default: Any = ...) -> Any:
        if name not in self.data or self.data[name] is None:
            if default is ...:
                raise SpecError(self.where, self.key(name), "required key is missing")
            return default
        return self.data[name]

    def section(self, name: str, required: bool = True) -> Section:
        if not required and not self.has(name):
            return Section({}, self.where, self.key(name))
        return Section(self.raw(name), self.where, self.key(name))

    def number(
        self,
        name: str,
        default: Any = ...,
        *,
        integer: bool = False,
        min_value: float | None = None,
        max_value: float | None = None,
        min_exclusive: bool = False,
    ) -> Any:
        v = self.raw(name, default)
        if v is None:
            return None
        return check_number(
            v, self.where, self.key(name), integer=integer, min_value=min_value, max_value=max_value,
            min_exclusive=min_exclusive,
        )

    def string(self, name: str, default: Any = ..., choices: Any = None) -> Any:
        v = self.raw(name, default)
        if v is None:
            return None
        if not isinstance(v, str):
            raise SpecError(self.where, self.key(name), f"expected text, got {v!r}")
        if choices is not None and v not in choices:
            raise SpecError(
                self.where, self.key(name),
                f"'{v}' is not allowed{did_you_mean(v, choices)}; allowed: {', '.join(sorted(choices))}",
            )
        return v


def check_number(
    v: Any,
    where: str,
    key: str | None,
    *,
    integer: bool = False,
    min_value: float | None = None,
    max_value: float | None = None,
    min_exclusive: bool = False,
) -> Any:
    """Validate one number; booleans and text are rejected."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise SpecError(where, key, f"expected a {'whole ' if integer else ''}number, got {v!r}")
    if isinstance(v, float) and not math.isfinite(v):
        raise SpecError(where, key, f"expected a finite number, got {v!r}")
    if integer:
        if isinstance(v, float):
            if not v.is_integer():
                raise SpecError(where, key, f"expected a whole number, got {v!r}")
            v = int(v)
    if min_value is not None and (v < min_value or (min_exclusive and v == min_value)):
        op = ">" if min_exclusive else ">="
        raise SpecError(where, key, f"must be {op} {min_value}, got {v!r}")
    if max_value is not None and v > max_value:
        raise SpecError(where, key, f"must be <= {max_value}, got {v!r}")
    return v
