"""The JSON data block a report carries: compact columnar tables, safe embedding in HTML, parsing back.

A report's data block is ``<script type="application/json" id="explorer-data">`` holding::

    {"schema": "explorer-report/1", "meta": {...}, "table": TABLE, "derived": {...}}

``TABLE`` is column-oriented so 10,000 rows stay small (DESIGN.md section 7):

* ``{"n": rows, "columns": [COLUMN, ...]}`` in the DataFrame's column order;
* ``COLUMN`` is ``{"name", "kind"}`` plus one of ``"const"`` (every row the same value),
  ``"values"`` (one JSON value per row) or ``"levels"`` + ``"codes"`` (text, dictionary-encoded);
* ``kind`` is ``float``, ``int``, ``bool`` (stored 0/1) or ``str``;
* floats are written with :data:`FLOAT_DIGITS` significant digits, except the columns named in
  ``exact`` (the objectives), written with Python's shortest round-trip repr so the front computed
  from a report equals the front of the original table; NaN and +/-inf become ``null`` (read back
  as NaN).

Embedding: every ``<``, ``>`` and ``&`` inside the JSON text is written as a ``\\u003c``-style escape
(JSON strings are the only place they can occur), so no ``</script>`` or ``<!--`` can end the block
early, whatever the study name or space file says.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import PurePath
from typing import Any

import numpy as np
import pandas as pd

from explorer.frontier import to_jsonable

#: Significant digits kept for float columns other than the exact ones.
FLOAT_DIGITS = 5

_DATA_RE_TEMPLATE = r'<script type="application/json" id="{id}">(.*?)</script>'


def _plain(obj: Any) -> Any:
    if isinstance(obj, PurePath):
        return str(obj)
    if isinstance(obj, pd.Timestamp):
        return obj.isoformat()
    return str(obj)


def jsonable(obj: Any) -> Any:
    """Plain JSON types from dicts/lists/numpy/pandas values; unknown objects become ``str(obj)``.

    Non-finite floats become None.  Used for ``meta``, which callers fill from many places.
    """
    return to_jsonable(obj, fallback=_plain)


def dumps(obj: Any) -> str:
    """Compact JSON (no NaN) for embedding."""
    return json.dumps(obj, separators=(",", ":"), allow_nan=False, ensure_ascii=False)


def escape_for_script(text: str) -> str:
    """Make JSON text safe inside a ``<script>`` element (see module docstring)."""
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def script_block(element_id: str, json_text: str) -> str:
    return f'<script type="application/json" id="{element_id}">{escape_for_script(json_text)}</script>'


def find_block(html_text: str, element_id: str) -> str | None:
    """The raw JSON text of ``<script type="application/json" id=element_id>``, or None."""
    m = re.search(_DATA_RE_TEMPLATE.format(id=re.escape(element_id)), html_text, flags=re.DOTALL)
    return None if m is None else m.group(1)


# ------------------------------------------------------------------------------------------------
# tables
# ------------------------------------------------------------------------------------------------


def _floats_json(a: np.ndarray, exact: bool) -> str:
    a = np.asarray(a, dtype=np.float64)
    finite = np.isfinite(a)
    if exact:
        if finite.all():
            return json.dumps(a.tolist(), separators=(",", ":"))
        # numpy stubs reject None as the scalar branch; at runtime it yields an object array with None
        return json.dumps(np.where(finite, a, None).tolist(), separators=(",", ":"))  # type: ignore[call-overload]
    fmt = f"{{:.{FLOAT_DIGITS}g}}".format
    if finite.all():
        return "[" + ",".join(map(fmt, a.tolist())) + "]"
    return "[" + ",".join(fmt(v) if ok else "null" for v, ok in zip(a.tolist(), finite.tolist(), strict=True)) + "]"


def _kind(s: pd.Series) -> str:
    if pd.api.types.is_bool_dtype(s):
        return "bool"
    if pd.api.types.is_integer_dtype(s):
        return "int"
    if pd.api.types.is_numeric_dtype(s):
        return "float"
    return "str"


def _column_json(name: str, s: pd.Series, exact: bool) -> str:
    kind = _kind(s)
    head = f'"name":{dumps(str(name))},"kind":"{kind}"'
    n = len(s)
    if kind == "str":
        text = s.astype(object).where(s.notna(), "").astype(str).to_numpy()
        levels, codes = np.unique(text, return_inverse=True) if n else (np.array([], dtype=object), np.array([]))
        if len(levels) == 1:
            return "{" + head + f',"const":{dumps(str(levels[0]))}}}'
        return ("{" + head + f',"levels":{dumps([str(v) for v in levels])},'
                f'"codes":{json.dumps(codes.astype(np.int64).tolist(), separators=(",", ":"))}}}')
    if kind == "bool":
        v = s.to_numpy(dtype=bool)
        if n and (v == v[0]).all():
            return "{" + head + f',"const":{int(v[0])}}}'
        return "{" + head + f',"values":{json.dumps(v.astype(np.int8).tolist(), separators=(",", ":"))}}}'
    if kind == "int":
        v = s.to_numpy(dtype=np.int64)
        if n and (v == v[0]).all():
            return "{" + head + f',"const":{int(v[0])}}}'
        return "{" + head + f',"values":{json.dumps(v.tolist(), separators=(",", ":"))}}}'
    v = s.to_numpy(dtype=np.float64, na_value=np.nan)
    if n and (np.isfinite(v).all() and (v == v[0]).all()):
        return "{" + head + f',"const":{dumps(float(v[0]))}}}'
    return "{" + head + f',"values":{_floats_json(v, exact)}}}'


def encode_table(df: pd.DataFrame, exact: Iterable[str] = ()) -> str:
    """JSON text of a column-oriented table (see module docstring)."""
    exact = set(exact)
    if not df.columns.is_unique:
        dup = df.columns[df.columns.duplicated()].tolist()
        raise ValueError(f"table has duplicated column names {dup}")
    cols = [_column_json(str(c), df[c], str(c) in exact) for c in df.columns]
    return '{"n":' + str(len(df)) + ',"columns":[' + ",".join(cols) + "]}"


def decode_table(obj: Mapping[str, Any]) -> pd.DataFrame:
    """DataFrame from :func:`encode_table`'s structure (parsed JSON)."""
    n = int(obj["n"])
    data: dict[str, Any] = {}
    for col in obj["columns"]:
        name, kind = str(col["name"]), col["kind"]
        raw: list[Any] | np.ndarray
        if "const" in col:
            raw = [col["const"]] * n
        elif "levels" in col:
            levels = np.asarray(col["levels"], dtype=object)
            raw = levels[np.asarray(col["codes"], dtype=np.int64)] if n else np.array([], dtype=object)
        else:
            raw = col["values"]
            if len(raw) != n:
                raise ValueError(f"column {name!r} has {len(raw)} values for {n} rows")
        if kind == "float":
            data[name] = np.array(raw, dtype=np.float64)  # JSON null -> NaN
        elif kind == "int":
            data[name] = np.asarray(raw, dtype=np.int64)
        elif kind == "bool":
            data[name] = np.asarray(raw, dtype=bool)
        elif kind == "str":
            data[name] = pd.array(np.asarray(raw, dtype=object), dtype="str")
        else:
            raise ValueError(f"column {name!r} has unknown kind {kind!r}")
    return pd.DataFrame(data, index=pd.RangeIndex(n))
