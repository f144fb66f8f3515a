"""Helpers for the CLI's promise (issue 11): every bad input is ONE line on stderr naming the file or
flag, exit code 2, no traceback, and no new or changed file; interrupted work resumes.

``run_cli`` calls :func:`explorer.cli.main` in-process with captured stdout/stderr (fast); any
exception other than argparse's ``SystemExit`` is an escape and fails the test with its traceback.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from explorer.cli import main

ROOT = Path(__file__).resolve().parents[1]
QUICK = ROOT / "search_spaces" / "quick.yaml"


@dataclass
class Result:
    rc: int
    out: str
    err: str
    warned: list[str] = field(default_factory=list)  # RuntimeWarnings raised (a CLI would print them)


def run_cli(argv: list[str]) -> Result:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        try:
            rc = main([str(a) for a in argv])
        except SystemExit as e:  # argparse's own errors and --help
            rc = e.code if isinstance(e.code, int) else 2
        except Exception:  # an escape: the promise is broken
            pytest.fail(f"explorer {' '.join(map(str, argv))} raised:\n{traceback.format_exc()}\n"
                        f"stderr: {err.getvalue()}", pytrace=False)
    warned = [f"{w.filename}:{w.lineno}: {w.message}" for w in caught if issubclass(w.category, RuntimeWarning)]
    return Result(int(rc), out.getvalue(), err.getvalue(), warned)


def snapshot(folder: Path) -> dict[str, tuple[int, str]]:
    """Every file under ``folder`` (hidden ones included) with its size and hash."""
    if not folder.exists():
        return {}
    snap = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            snap[str(p.relative_to(folder))] = (p.stat().st_size, hashlib.sha1(p.read_bytes()).hexdigest())
        elif p.is_dir():
            snap[str(p.relative_to(folder)) + "/"] = (0, "")
    return snap


def assert_one_line_error(res: Result, command: str, names: list[str] | tuple[str, ...] = ()) -> None:
    """Exit 2, exactly one line on stderr starting 'explorer COMMAND: error:' (or argparse's
    'explorer COMMAND: error:'), naming one of ``names`` (a file or a flag), and no traceback."""
    assert res.rc == 2, (res.rc, res.err[-2000:])
    assert "Traceback" not in res.err, res.err
    assert res.err.endswith("\n") and res.err.count("\n") == 1, repr(res.err[-2000:])
    assert re.match(rf"explorer {re.escape(command)}: error: ", res.err), res.err
    if names:
        assert any(str(n) in res.err for n in names), (names, res.err)


def mini_space(folder: Path, name: str = "mini.yaml", trials: int = 10) -> Path:
    """The issue's ``mini.yaml``: search_spaces/quick.yaml with ``sampler: random`` and ``trials: N``."""
    text = QUICK.read_text(encoding="utf-8")
    text = re.sub(r"(?m)^(\s*sampler:).*$", r"\1 random", text)
    text = re.sub(r"(?m)^(\s*trials:).*$", rf"\1 {trials}", text)
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / name
    p.write_text(text, encoding="utf-8")
    return p


@contextlib.contextmanager
def chdir(path: Path):
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)
