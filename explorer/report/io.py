"""Reading and writing reports: atomic writes, parsing the data block back, loading CSV or HTML."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from explorer.errors import SpecError
from explorer.report.codec import decode_table, find_block
from explorer.report.sweep import SCHEMA, build_report_html

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
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
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
    p = Path(path)
    if not p.exists():
        raise SpecError(str(path), None, "no such file")
    if p.is_dir():
        raise SpecError(str(path), None, "is a folder, not a file")
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(str(path), None, f"not a UTF-8 text file ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise SpecError(str(path), None, f"cannot read: {e.strerror}") from None


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
        if found in OTHER_SCHEMAS and schema == SCHEMA:
            raise SpecError(str(path), "schema", f"'{found}' is {OTHER_SCHEMAS[found]}")
        raise SpecError(str(path), "schema", f"unknown report schema {found!r}; this version of explorer reads "
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
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise SpecError(str(path), "table", f"corrupt report table: {e}") from None
    meta = obj.get("meta") or {}
    return df, dict(meta)


def read_results_csv(path: str | os.PathLike) -> pd.DataFrame:
    p = Path(path)
    if not p.exists():
        raise SpecError(str(path), None, "no such file")
    try:
        df = pd.read_csv(p)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SpecError(str(path), None, f"cannot read as a CSV results table: {msg}") from None
    except OSError as e:
        raise SpecError(str(path), None, f"cannot read: {e.strerror}") from None
    missing = [c for c in ("tokens_per_s_per_user", "tokens_per_s_per_gpu") if c not in df.columns]
    if missing:
        raise SpecError(str(path), None, f"not a results table: no column(s) {', '.join(missing)}")
    return df


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
