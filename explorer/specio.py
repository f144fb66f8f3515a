"""Reading YAML specs strictly: every loader (hardware, search spaces, measurements) uses these
helpers so that every error names the file, the key, the rule and the value, in one line."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from explorer.errors import SpecError, did_you_mean

#: Largest size (shape dimension, tokens, batch) a spec or flag may give: the simulator computes in
#: float64 and reports sizes as int64, so every product of sizes must stay finite and exact.
MAX_SIZE = 2**31 - 1
#: Largest degree of each parallelism (tp, pp, ep, dp): GPUs = tp * pp * dp must fit an int64.
MAX_PARALLEL = 2**20
#: Largest seed (NumPy's and Optuna's samplers take 32-bit seeds).
MAX_SEED = 2**32 - 1

#: Sizes a spec number may have (besides 0): the simulator multiplies figures in float64, so a file
#: value of 1e308 (or 1e-300) would overflow to inf (or vanish) instead of meaning anything.
MAX_MAGNITUDE = 1e15
MIN_MAGNITUDE = 1e-15

#: Largest spec file read (bytes): the shipped files are below 1 MB; anything far larger is not a spec.
MAX_SPEC_BYTES = 64 * 1024 * 1024
#: Most nodes a document may expand to through YAML aliases (refuses "billion laughs" documents).
MAX_EXPANDED_NODES = 2_000_000
#: Deepest nesting a document may have (levels): PyYAML's pure-Python parser recurses and gives up
#: between 400 and 500 levels; libyaml's does not, so the limit is set here for both.
MAX_NESTING = 400


class _StrictChecks(yaml.constructor.SafeConstructor):
    """What a strict loader adds to PyYAML's safe one: it refuses duplicate mapping keys (naming both
    lines) and documents whose aliases expand beyond :data:`MAX_EXPANDED_NODES` nodes."""

    get_single_node: Callable[[], Any]  # the parser's (pure-Python or libyaml), mixed in beside it

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                try:
                    key = self.construct_object(key_node, deep=True)
                    hash(key)
                except (TypeError, yaml.YAMLError):
                    continue  # the base class reports unhashable keys
                if key in seen:
                    first = seen[key]
                    raise yaml.constructor.ConstructorError(
                        None, None,
                        f"duplicate key {_short(key)} (first given at line {first.start_mark.line + 1}); "
                        "give each key once",
                        key_node.start_mark)
                seen[key] = key_node
        return super().construct_mapping(node, deep=deep)

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        return self.construct_document(node)


class _StrictLoader(_StrictChecks, yaml.SafeLoader):
    """``yaml.SafeLoader`` with :class:`_StrictChecks`: the pure-Python parser, whose messages name
    the offending character or alias."""


#: libyaml's parser (where PyYAML was built with it) with the same checks: ~7x faster on the
#: validation files (fronts.yaml 2.0 s -> 0.3 s on the 2-core machine); a document it refuses is read
#: again by :class:`_StrictLoader`, so an error's message does not depend on which parser PyYAML has
_FastStrictLoader: Any = (type("_FastStrictLoader", (_StrictChecks, yaml.CSafeLoader), {})
                          if getattr(yaml, "__with_libyaml__", False) else None)


def _check_expansion(root) -> None:
    """Count the nodes of ``root`` with aliases expanded (memoized, iterative); refuse more than
    :data:`MAX_EXPANDED_NODES` of them, or nesting deeper than :data:`MAX_NESTING` levels (raised as
    RecursionError, which is what the pure-Python parser raises first on such documents)."""
    sizes: dict[int, int] = {}
    stack: list[tuple[Any, bool, int]] = [(root, False, 0)]
    while stack:
        node, done, depth = stack.pop()
        if id(node) in sizes:
            continue
        if depth > MAX_NESTING:
            raise RecursionError(f"nested deeper than {MAX_NESTING} levels")
        kids: list[Any] = []
        if isinstance(node, yaml.SequenceNode):
            kids = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            kids = [x for kv in node.value for x in kv]
        if not done:
            stack.append((node, True, depth))
            stack.extend((k, False, depth + 1) for k in kids if id(k) not in sizes)
            continue
        total = 1 + sum(sizes.get(id(k), 1) for k in kids)
        if total > MAX_EXPANDED_NODES:
            raise yaml.constructor.ConstructorError(
                None, None, f"the document expands to more than {MAX_EXPANDED_NODES:,} values through aliases",
                node.start_mark)
        sizes[id(node)] = total


def _short(v: Any, limit: int = 80) -> str:
    """``repr(v)`` cut to ``limit`` characters (values in messages stay one short line)."""
    try:
        text = repr(v)
    except ValueError:  # an int too long to print
        text = f"<a {v.bit_length() if isinstance(v, int) else '?'}-bit number>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_yaml_text(text: str, where: str) -> Any:
    """Parse YAML text strictly (safe types only, no duplicate keys); errors are one-line
    :class:`SpecError` naming ``where``, the line and the problem."""
    if _FastStrictLoader is not None:
        try:
            return yaml.load(text, Loader=_FastStrictLoader)  # noqa: S506 - a CSafeLoader subclass
        except (yaml.YAMLError, ValueError, RecursionError):
            pass  # read again below, for the pure-Python parser's message
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(e, "problem", None) or (str(e).strip().splitlines() or [type(e).__name__])[0]
        problem = " ".join(str(problem).split())
        raise SpecError(where, None, f"malformed YAML: {at}{problem}") from None
    except ValueError as e:  # Python refuses integers of more than 4,300 digits
        msg = "a number with more than 4,300 digits" if "digits" in str(e) else " ".join(str(e).split())[:200]
        raise SpecError(where, None, f"malformed YAML: {msg}") from None
    except RecursionError:
        raise SpecError(where, None, "malformed YAML: nested too deeply (more than a few hundred levels)") from None


def check_name_text(v: str, where: str, key: str | None, what: str = "name") -> str:
    """A name or path given as text, before it reaches the file system: no NUL character, no part
    longer than a file name may be (255 bytes), at most 4096 bytes in all."""
    if "\x00" in v:
        raise SpecError(where, key, f"{what} {_short(v)} contains a NUL character")
    parts = v.replace("\\", "/").split("/")
    if len(v.encode("utf-8", "surrogatepass")) > 4096 or any(len(x.encode("utf-8", "surrogatepass")) > 255
                                                            for x in parts):
        raise SpecError(where, key, f"{what} {_short(v)} is too long for a file name")
    return v


def read_text_file(path: str | Path, kind: str = "text", max_bytes: int = MAX_SPEC_BYTES) -> str:
    """The UTF-8 text of a regular file; a missing, unreadable, non-text or oversized file is a
    one-line :class:`SpecError` naming it."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise SpecError(str(p), None, "file not found") from None
    except OSError as e:
        raise SpecError(_short(str(p)), None, f"cannot read file ({e.strerror or e})") from None
    except ValueError:  # a NUL character in the path
        raise SpecError(_short(str(p)), None, "not a usable file path (NUL character)") from None
    import stat as _stat

    if _stat.S_ISDIR(st.st_mode):
        raise SpecError(str(p), None, f"is a folder, not a {kind} file")
    if not _stat.S_ISREG(st.st_mode):
        raise SpecError(str(p), None, f"not a regular file (device, pipe or socket); expected a {kind} file")
    if st.st_size > max_bytes:
        raise SpecError(str(p), None, f"{st.st_size:,} bytes is too large for a {kind} file "
                                      f"(at most {max_bytes:,})")
    try:
        data = p.read_bytes()
    except OSError as e:
        raise SpecError(str(p), None, f"cannot read file ({e.strerror or e})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        hint = " (looks compressed)" if data[:2] in (b"\x1f\x8b", b"BZ", b"PK") or data[:4] == b"\x28\xb5\x2f\xfd" \
            else " (looks like UTF-16)" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else ""
        raise SpecError(str(p), None, f"not a UTF-8 {kind} file{hint}: byte {data[e.start]:#04x} at offset "
                                      f"{e.start}") from None


def read_yaml(path: str | Path) -> Any:
    """Parse a YAML file (the one reading function of every YAML loader: hardware, search spaces,
    measurements); a missing, unreadable, non-UTF-8 or malformed file, a duplicate key or a document
    nested too deeply is a :class:`SpecError` naming it."""
    return parse_yaml_text(read_text_file(path, "YAML"), str(Path(path)))


def find_named(directory: Path, name: str, load: Callable[[Path], Any],
               cache: dict[str, Any]) -> tuple[Any | None, list[str]]:
    """A spec of a folder of ``<name>.yaml`` files by (lower-case) name or alias: the direct file,
    else the first whose ``name`` or ``aliases`` match.  Returns (spec or None, the known names);
    loaded files are cached by stem.  One lookup for hardware kinds and runtime profiles."""
    def get(f: Path) -> Any:
        if f.stem not in cache:
            cache[f.stem] = load(f)
        return cache[f.stem]

    try:
        direct = directory / f"{name}.yaml"
        if direct.exists():
            return get(direct), []
    except (OSError, ValueError):  # too long for a file name, or a NUL: not a file
        pass
    names: list[str] = []
    for f in sorted(directory.glob("*.yaml")):
        spec = get(f)
        names.append(spec.name)
        if name in (spec.name, *spec.aliases) or name.replace(" ", "") in spec.aliases:
            return spec, names
    return None, names


class Section:
    """A mapping being read: tracks the path for messages and rejects unknown keys."""

    def __init__(self, data: Any, where: str, path: str = ""):
        if not isinstance(data, Mapping):
            raise SpecError(where, path or None, f"expected a mapping, got {type(data).__name__} {_short(data)}")
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

    def names(self, name: str) -> list[str]:
        """A list of names (``aliases: [a, b]``), empty when absent."""
        v = self.raw(name, [])
        if not isinstance(v, list) or not all(isinstance(a, str) for a in v):
            raise SpecError(self.where, self.key(name), f"expected a list of names, got {v!r}")
        return list(v)

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

    def boolean(self, name: str, default: Any = ...) -> bool:
        """A YAML ``true``/``false`` (anything else is a one-line error naming the key)."""
        v = self.raw(name, default)
        if not isinstance(v, bool):
            raise SpecError(self.where, self.key(name), f"expected true or false, got {_short(v)}")
        return v

    def string(self, name: str, default: Any = ..., choices: Any = None) -> Any:
        v = self.raw(name, default)
        if v is None:
            return None
        if not isinstance(v, str):
            raise SpecError(self.where, self.key(name), f"expected text, got {_short(v)}")
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
        raise SpecError(where, key, f"expected a {'whole ' if integer else ''}number, got {_short(v)}")
    if isinstance(v, float) and not math.isfinite(v):
        raise SpecError(where, key, f"expected a finite number, got {_short(v)}")
    if integer:
        if isinstance(v, float):
            if not v.is_integer():
                raise SpecError(where, key, f"expected a whole number, got {_short(v)}")
            v = int(v)
    if min_value is not None and (v < min_value or (min_exclusive and v == min_value)):
        op = ">" if min_exclusive else ">="
        raise SpecError(where, key, f"must be {op} {min_value}, got {_short(v)}")
    if max_value is not None and v > max_value:
        allowed = f" (allowed: {min_value} .. {max_value})" if min_value is not None else ""
        raise SpecError(where, key, f"must be <= {max_value}{allowed}, got {_short(v)}")
    if v != 0 and not MIN_MAGNITUDE <= abs(v) <= MAX_MAGNITUDE:  # beyond what float64 arithmetic carries
        raise SpecError(where, key, f"{_short(v)} is out of range: a spec number is 0 or between "
                                    f"{MIN_MAGNITUDE:g} and {MAX_MAGNITUDE:g} in size")
    return v
