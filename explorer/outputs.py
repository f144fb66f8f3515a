"""The one place that checks output paths, before any work starts.

Every command that writes (``sweep``, ``report``, ``compare``) asks here first, so an output that
cannot be written is a one-line :class:`~explorer.errors.SpecError` naming the flag and the path
*before* the first trial, never a traceback after the work is done, and a refused run leaves no
new file or folder behind:

* :func:`prepare_folder` creates a missing output folder (or says why it cannot: a file in the way,
  a read-only or virtual file system, a name too long) and returns what it created, so
  :func:`remove_created` can take it back when a later check fails;
* :func:`check_output_file` checks a file that will be written atomically (temporary file in the
  same folder, then renamed): not a folder, not one of the command's inputs, and its folder takes a
  new file (probed by creating and removing a temporary file with the writer's naming pattern);
* :func:`check_append_file` checks a file that is appended to in place (a study journal).
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from explorer.errors import SpecError


def _why(e: OSError) -> str:
    if e.errno == errno.ENAMETOOLONG:
        return "file name too long"
    return e.strerror or str(e)


def prepare_folder(folder: str | os.PathLike, flag: str) -> list[Path]:
    """Make sure ``folder`` exists and takes new files; returns the folders created (outermost first)."""
    p = Path(folder)
    missing: list[Path] = []
    cur = p
    while True:
        try:
            os.stat(cur)
        except (FileNotFoundError, NotADirectoryError):
            missing.append(cur)
            if cur.parent == cur:
                break
            cur = cur.parent
            continue
        except OSError as e:
            raise SpecError(flag, None, f"cannot use '{p}': {_why(e)} ('{cur}')") from None
        if not os.path.isdir(cur):
            raise SpecError(flag, None, f"cannot use the folder '{p}': '{cur}' is a file")
        break
    created: list[Path] = []
    for d in reversed(missing):
        try:
            os.mkdir(d)
        except FileExistsError:
            continue
        except OSError as e:
            remove_created(created)
            raise SpecError(flag, None, f"cannot create the folder '{d}': {_why(e)}") from None
        created.append(d)
    try:
        _probe(p, "probe", flag, p, folder_only=True)
    except SpecError:
        remove_created(created)
        raise
    return created


def remove_created(created: Iterable[Path]) -> None:
    """Remove folders made by :func:`prepare_folder` (innermost first; only while empty)."""
    for d in reversed(list(created)):
        try:
            os.rmdir(d)
        except OSError:
            pass


def _probe(folder: Path, name: str, flag: str, shown: Path, folder_only: bool = False) -> None:
    """Create and remove a temporary file named like the atomic writers' ones (``.NAME.xxxxxxxx.tmp``)."""
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
    except OSError as e:
        what = f"files in the folder '{shown}'" if folder_only else f"'{shown}'"
        raise SpecError(flag, None, f"cannot write {what}: {_why(e)}") from None
    os.close(fd)
    os.unlink(tmp)


def _same(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return os.path.abspath(a) == os.path.abspath(b)


def check_output_file(path: str | os.PathLike, flag: str, *, inputs: Iterable[str | os.PathLike] = (),
                      suffixes: tuple[str, ...] | None = None) -> Path:
    """Check a file that will be replaced atomically; its folder must exist (see :func:`prepare_folder`)."""
    p = Path(path)
    if suffixes is not None and p.suffix.lower() not in suffixes:
        raise SpecError(flag, None, f"expected a {' or '.join(suffixes)} file name, got '{p}'")
    for src in inputs:
        if _same(p, Path(src)):
            raise SpecError(flag, None, f"'{p}' is one of the inputs; writing it would overwrite that input "
                                        "(give another output file)")
    if os.path.isdir(p):
        raise SpecError(flag, None, f"'{p}' is a folder; give a file name (or remove the folder)")
    if os.path.lexists(p) and not os.path.isfile(p):
        raise SpecError(flag, None, f"'{p}' exists and is not a regular file")
    folder = p.parent if str(p.parent) else Path(".")
    if not folder.is_dir():
        why = "is a file, not a folder" if folder.exists() else "does not exist"
        raise SpecError(flag, None, f"cannot write '{p}': the folder '{folder}' {why}")
    _probe(folder, p.name, flag, p)
    return p


def check_append_file(path: str | os.PathLike, flag: str) -> None:
    """Check a file appended to in place (its folder must exist)."""
    p = Path(path)
    if os.path.isdir(p):
        raise SpecError(flag, None, f"'{p}' is a folder; give a file path")
    if os.path.lexists(p):
        if not os.path.isfile(p):
            raise SpecError(flag, None, f"'{p}' exists and is not a regular file")
        try:
            os.close(os.open(p, os.O_RDWR | os.O_APPEND))
        except OSError as e:
            raise SpecError(flag, None, f"cannot write '{p}': {_why(e)}") from None
    else:
        folder = p.parent if str(p.parent) else Path(".")
        _probe(folder, p.name, flag, p)


def remove_stale_temporaries(folder: str | os.PathLike, stem: str) -> list[Path]:
    """Remove the temporary files ``.STEM.*.PID.tmp*`` that a killed writer (``kill -9``: no clean-up
    ran) left in ``folder``; only those whose process is gone.  Returns what was removed."""
    import re

    removed: list[Path] = []
    pat = re.compile(rf"^\.{re.escape(stem)}\.(?:.*\.)?(\d+)\.tmp(\.html)?$")
    try:
        entries = list(Path(folder).iterdir())
    except OSError:
        return removed
    for p in entries:
        m = pat.match(p.name)
        if not m or not p.is_file():
            continue
        pid = int(m.group(1))
        try:
            os.kill(pid, 0)
            continue  # still running (another sweep is writing it)
        except ProcessLookupError:
            pass
        except OSError:  # someone else's process: leave its files alone
            continue
        try:
            p.unlink()
            removed.append(p)
        except OSError:
            pass
    return removed
