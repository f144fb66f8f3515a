"""Reading and writing reports: atomic writes, parsing the data block back, loading CSV or HTML."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from explorer.errors import SpecError
from explorer.model import SHAPE_COLUMNS
from explorer.report.codec import decode_table, find_block
from explorer.report.sweep import SCHEMA, build_report_html
from explorer.specio import MAX_PARALLEL, MAX_SIZE, check_name_text, read_text_file

DATA_ID = "explorer-data"
#: Schemas of pages that carry a data block but are not sweep reports.
OTHER_SCHEMAS = {"explorer-compare/1": "a comparison page (explorer compare), not a sweep report"}


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to a temporary file in the same folder, then ``os.replace`` it into place.

    A crash or an error never leaves a half-written file at ``path``.
    """
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise SpecError(str(path), None, f"output folder '{folder}' does not exist")
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise SpecError(str(path), None, f"cannot write: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(e, OSError):  # a full disk, a folder made read-only meanwhile: one line, nothing left
            raise SpecError(str(path), None, f"cannot write: {e.strerror or e}") from None
        raise
    return path


def write_report(path: str | os.PathLike, df: pd.DataFrame, meta: Mapping[str, Any] | None = None,
                 plotlyjs: str = "inline", **kwargs: Any) -> Path:
    """Build the report (:func:`explorer.report.build_report_html`) and write it atomically.

    The page is built completely before anything touches ``path``.  Returns the path written.
    """
    text = build_report_html(df, meta, plotlyjs=plotlyjs, **kwargs)
    return write_text_atomic(path, text)


def _read_text(path: str | os.PathLike) -> str:
    return read_text_file(Path(path), "HTML report", max_bytes=MAX_TABLE_BYTES)


def read_data_block(path: str | os.PathLike, schema: str = SCHEMA) -> dict[str, Any]:
    """The parsed JSON data block of a page, checked against ``schema``."""
    text = _read_text(path)
    block = find_block(text, DATA_ID)
    if block is None:
        raise SpecError(str(path), None, "not an explorer report: no explorer-data block in the HTML")
    try:
        obj = json.loads(block)
    except json.JSONDecodeError as e:
        raise SpecError(str(path), None, f"corrupt report data block: {e.msg} at character {e.pos}") from None
    if not isinstance(obj, dict):
        raise SpecError(str(path), None, "corrupt report data block: not a JSON object")
    found = obj.get("schema")
    if found != schema:
        if isinstance(found, str) and found in OTHER_SCHEMAS and schema == SCHEMA:
            raise SpecError(str(path), "schema", f"'{found}' is {OTHER_SCHEMAS[found]}")
        shown = repr(found) if len(repr(found)) <= 60 else repr(found)[:57] + "..."
        raise SpecError(str(path), "schema", f"unknown report schema {shown}; this version of explorer reads "
                        f"'{schema}'")
    return obj


def read_report(path: str | os.PathLike) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The results table and meta stored in a report written by :func:`write_report`.

    The table has the original columns (plus ``on_front``); objective columns round-trip exactly,
    other floats to 5 significant digits.  Raises :class:`SpecError` for a missing file, a page
    without a data block, a corrupt block or an unknown schema.
    """
    obj = read_data_block(path)
    try:
        df = decode_table(obj["table"])
    except (KeyError, TypeError, ValueError, IndexError, OverflowError, MemoryError) as e:
        raise SpecError(str(path), "table", f"corrupt report table: {' '.join(str(e).split())[:200]}") from None
    meta = obj.get("meta") or {}
    if not isinstance(meta, Mapping):
        raise SpecError(str(path), "meta", "corrupt report data block: meta is not a JSON object")
    return check_results_table(df, str(path)), check_meta(dict(meta), str(path))


#: Largest results file read (bytes).
MAX_TABLE_BYTES = 1 << 30
#: Most rows a results table may hold.
MAX_ROWS = 20_000_000

_OBJECTIVES = ("tokens_per_s_per_user", "tokens_per_s_per_gpu")
#: Whole-number columns: the design's sizes (the simulator's range, as for search spaces).
_SIZE_COLUMNS = SHAPE_COLUMNS + ("isl", "osl", "batch")
_DEGREE_COLUMNS = ("tp", "pp", "ep", "dp")
_COUNT_COLUMNS = ("trial", "reason_code", "gpus")
_FLOAT_COLUMNS = _OBJECTIVES + ("ttft_s", "tpot_s", "memory_bytes_per_gpu", "memory_capacity_bytes",
                                "weights_bytes_per_gpu", "kv_bytes_per_gpu", "params_total", "params_active",
                                "tokens_per_s_per_kw", "usd_per_million_tokens")
_BOOL_COLUMNS = ("feasible", "on_front")
_TEXT_COLUMNS = ("model", "hardware", "precision", "runtime", "reason", "source", "kept")
_TRUE = {"true", "1", "1.0", "yes"}
_FALSE = {"false", "0", "0.0", "no"}


def parse_bool_column(s: pd.Series, where: str, name: str) -> np.ndarray:
    """A true/false column: booleans, 0/1 or the words true/false/yes/no; anything else is refused."""
    if pd.api.types.is_bool_dtype(s):
        return s.to_numpy(dtype=bool)
    text = s.astype(object).where(s.notna(), "").astype(str).str.strip().str.lower()
    bad = ~(text.isin(_TRUE) | text.isin(_FALSE))
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise SpecError(where, name, f"row {i + 1}: expected true or false, got {_shown(s.iloc[i])}")
    return text.isin(_TRUE).to_numpy(dtype=bool)


def _shown(v: Any) -> str:
    text = repr(v.item() if isinstance(v, np.generic) else v)
    return text if len(text) <= 60 else text[:57] + "..."


def check_results_table(df: pd.DataFrame, where: str) -> pd.DataFrame:
    """The one check of a results table read from a file (CSV or a report's data block): the
    objective columns exist, known numeric columns are numbers (sizes whole and in the simulator's
    range), true/false columns are true/false.  Returns the table with those columns typed; every
    problem is a :class:`SpecError` naming ``where``, the column and the row."""
    missing = [c for c in _OBJECTIVES if c not in df.columns]
    if missing:
        raise SpecError(where, None, f"not a results table: no column(s) {', '.join(missing)}")
    if not df.columns.is_unique:
        dup = sorted({str(c) for c in df.columns[df.columns.duplicated()]})
        raise SpecError(where, None, f"column(s) {', '.join(dup)} appear more than once")
    if len(df) > MAX_ROWS:
        raise SpecError(where, None, f"{len(df):,} rows is more than a results table holds (at most {MAX_ROWS:,})")
    out = df.copy()
    limits = {**{c: (0, MAX_SIZE) for c in _SIZE_COLUMNS}, **{c: (0, MAX_PARALLEL) for c in _DEGREE_COLUMNS},
              **{c: (-(2**53), 2**53) for c in _COUNT_COLUMNS}}
    for c in [c for c in out.columns if c in limits or c in _FLOAT_COLUMNS]:
        col = out[c]
        if pd.api.types.is_bool_dtype(col):
            raise SpecError(where, str(c), "expected numbers, got true/false values")
        num = pd.to_numeric(col, errors="coerce")
        bad = (num.isna() & col.notna()).to_numpy()
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise SpecError(where, str(c), f"row {i + 1}: expected a number, got {_shown(col.iloc[i])}")
        v = num.to_numpy(dtype=np.float64, na_value=np.nan)
        if c in limits:
            lo, hi = limits[c]
            bad = ~(np.isfinite(v) & (v == np.round(v)) & (v >= lo) & (v <= hi))
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise SpecError(where, str(c), f"row {i + 1}: expected a whole number in {lo:,} .. {hi:,}, "
                                               f"got {_shown(col.iloc[i])}")
            out[c] = v.astype(np.int64)
        else:
            out[c] = v
    for c in _BOOL_COLUMNS:
        if c in out.columns:
            out[c] = parse_bool_column(out[c], where, c)
    for c in out.columns:  # text columns: a missing value is empty text, never a float NaN among strings
        col = out[c]
        if c in _TEXT_COLUMNS or not (pd.api.types.is_numeric_dtype(col) or pd.api.types.is_bool_dtype(col)):
            out[c] = col.astype(object).where(col.notna(), "").astype(str).astype(object)
    if "hardware" in out.columns:  # the names reach the file system (hardware files are looked up)
        for name in pd.unique(out["hardware"]):
            check_name_text(str(name), where, "hardware", "hardware")
    return out


_META_TEXT = ("study", "space_file", "space_text", "sampler", "tool_version", "date", "source_file", "report_file",
              "storage", "refinement")
_META_MAPS = ("hardware_files", "hardware_paths", "objectives", "constraints", "workload", "grid")
_META_LISTS = ("references", "hypervolume_history", "hypervolume_reference", "reason_counts")


def check_meta(meta: dict[str, Any], where: str) -> dict[str, Any]:
    """The provenance block of a report read from a file: the keys the report uses have their types
    (text, mappings, lists; numbers finite); a wrong type is a :class:`SpecError` naming the key."""

    def bad(key: str, what: str) -> SpecError:
        return SpecError(where, f"meta.{key}", f"expected {what}, got {_shown(meta[key])}")

    def number(v: Any) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool) and bool(np.isfinite(v))

    for k in _META_TEXT:
        if meta.get(k) is not None and not isinstance(meta[k], str):
            raise bad(k, "text")
    for k in _META_MAPS:
        if meta.get(k) is not None and not isinstance(meta[k], Mapping):
            raise bad(k, "a mapping")
    for k in _META_LISTS:
        if meta.get(k) is not None and not isinstance(meta[k], list):
            raise bad(k, "a list")
    for k in ("seed", "trials", "hypervolume"):
        if meta.get(k) is not None and not number(meta[k]):
            raise bad(k, "a finite number")
    for k in ("hardware_files", "hardware_paths", "objectives"):
        if meta.get(k) is not None and not all(isinstance(v, str) for v in meta[k].values()):
            raise bad(k, "a mapping of text")
    if meta.get("references") is not None and not all(isinstance(v, str) for v in meta["references"]):
        raise bad("references", "a list of preset names")
    if meta.get("hypervolume_history") is not None and not all(
            v is None or number(v) for v in meta["hypervolume_history"]):
        raise bad("hypervolume_history", "a list of numbers")
    if meta.get("hypervolume_reference") is not None and not all(number(v) for v in meta["hypervolume_reference"]):
        raise bad("hypervolume_reference", "a list of numbers")
    if meta.get("reason_counts") is not None and not all(
            isinstance(r, Mapping) and (r.get("count") is None or number(r.get("count")))
            for r in meta["reason_counts"]):
        raise bad("reason_counts", "a list of {reason, count} mappings")
    return meta


def read_results_csv(path: str | os.PathLike) -> pd.DataFrame:
    """The one reading function of results tables (CSV), checked by :func:`check_results_table`."""
    import io

    text = read_text_file(Path(path), "CSV results", max_bytes=MAX_TABLE_BYTES)
    try:
        df = pd.read_csv(io.StringIO(text), low_memory=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError, OverflowError, MemoryError) as e:
        msg = " ".join(str(e).split())[:200] if str(e).strip() else type(e).__name__
        raise SpecError(str(path), None, f"cannot read as a CSV results table: {msg}") from None
    return check_results_table(df, str(path))


def load_results(path: str | os.PathLike) -> tuple[pd.DataFrame, dict[str, Any]]:
    """(table, meta) from a report (``.html``/``.htm``) or a results CSV (anything else).

    A CSV's meta is minimal: ``study`` (the file's stem) and ``source_file``.
    """
    p = Path(path)
    if p.suffix.lower() in (".html", ".htm"):
        return read_report(p)
    df = read_results_csv(p)
    stem = p.name[: -len(".csv")] if p.name.lower().endswith(".csv") else p.stem
    return df, {"study": stem, "source_file": str(p)}
