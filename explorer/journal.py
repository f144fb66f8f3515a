"""Optuna journal files that survive being killed.

A study's default storage is an append-only journal, ``<out>/<study>.journal``: one JSON operation
per line, fsync'ed where a finished trial or the study depends on it (:data:`DURABLE_OPS`).  Two
things can go wrong when a process is killed (``kill -9``, a scheduler's
SIGKILL, a power cut), and this module handles both at the root:

* **the lock.**  Optuna's default :class:`~optuna.storages.journal.JournalFileSymlinkLock` is a
  symlink ``<journal>.lock`` that a killed process leaves behind; when its (relative) target does not
  resolve, the stale-lock breaker cannot ``stat`` it and every later writer spins forever.
  :class:`FlockLock` takes an advisory ``flock`` on the regular file ``<journal>.lock`` instead:
  the kernel drops the lock when its holder dies, so no kill can leave a lock behind (a file left
  by a kill is just locked again; a symlink left by the old lock is removed).
* **a torn or damaged journal.**  A writer killed mid-line leaves a last line without its newline;
  appending after it would glue the next operation onto the fragment and corrupt the journal for
  good.  :class:`SafeJournalBackend` never writes after a torn line: under the lock it checks the
  last byte before every append and cuts a torn tail (saving the fragment beside the journal).
  Before a study opens, :func:`prepare_journal` checks that every line is a journal operation;
  :func:`repair_journal` recovers a journal that is not (or that Optuna cannot replay): it keeps,
  in order, every whole operation that Optuna's own replay accepts (an operation glued onto the
  fragment of a torn line, as Optuna's backend writes after a kill, is cut free), saves the
  original as ``<journal>.damaged-<time>`` and says in one line what was dropped.

Every trial whose operations are whole lines is kept.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from optuna.storages.journal import JournalFileBackend
from optuna.storages.journal._file import BaseJournalFileLock
from optuna.storages.journal._storage import JournalStorageReplayResult

from explorer.errors import SpecError

try:  # POSIX; elsewhere Optuna's open-file lock (which a kill can leave behind) is the fallback
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

LOCK_SUFFIX = ".lock"


def _note(message: str) -> None:
    print(f"explorer: warning: {message}", file=sys.stderr, flush=True)


class FlockLock(BaseJournalFileLock):
    """An exclusive ``flock`` on ``<journal>.lock``: released by the kernel when the holder exits or
    is killed, so it cannot go stale; blocking (no busy wait).  The holder removes the file before it
    releases the lock, and a waiter that then wins the lock of a removed file tries again, so the
    folder keeps no lock file and two holders can never overlap."""

    def __init__(self, journal_path: str) -> None:
        self._path = journal_path + LOCK_SUFFIX
        self._fd: int | None = None

    def _open(self) -> int:
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        for _ in range(100):
            try:
                return os.open(self._path, flags, 0o666)
            except OSError as e:
                # a symlink: the lock of an older version (Optuna's symlink lock), maybe dangling
                if e.errno == errno.ELOOP or (e.errno == errno.EEXIST and os.path.islink(self._path)):
                    try:
                        os.unlink(self._path)
                    except FileNotFoundError:
                        pass
                    continue
                raise
        return os.open(self._path, flags, 0o666)

    def acquire(self) -> bool:
        while True:
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    same = os.path.samestat(os.fstat(fd), os.stat(self._path, follow_symlinks=False))
                except FileNotFoundError:
                    same = False
            except BaseException:
                os.close(fd)
                raise
            if same:
                self._fd = fd
                return True
            os.close(fd)  # the holder before us removed the file: lock the current one

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            try:
                os.unlink(self._path)
            except FileNotFoundError:
                pass
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> FlockLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def _last_newline(fd: int, size: int) -> int:
    """Offset just after the last b"\\n" of the file (0 when there is none)."""
    pos = size
    while pos > 0:
        start = max(0, pos - 65536)
        chunk = os.pread(fd, pos - start, start)
        i = chunk.rfind(b"\n")
        if i >= 0:
            return start + i + 1
        pos = start
    return 0


def _stamp() -> str:
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f"-{os.getpid()}"


def _fix_torn_tail(path: str, fd: int) -> None:
    """Caller holds the lock.  If the file does not end with a newline, a writer died mid-line: end
    the line when it holds one whole JSON operation, else cut it (saving the fragment)."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    cut = _last_newline(fd, size)
    tail = os.pread(fd, size - cut, cut)
    try:
        whole = isinstance(json.loads(tail), dict)
    except (ValueError, UnicodeDecodeError):
        whole = False
    if whole:
        os.write(fd, b"\n")
        os.fsync(fd)
        return
    saved = f"{path}.torn-{_stamp()}"
    with open(saved, "wb") as f:
        f.write(tail)
    os.ftruncate(fd, cut)
    os.fsync(fd)
    _note(f"{path}: cut a torn last line of {len(tail)} bytes (a process was killed while writing it); "
          f"every whole line is kept; the fragment is in {saved}")


#: Journal operations after which an append is fsync'ed (optuna.storages.journal._storage.JournalOperation):
#: the study's own (create, delete, study attributes: 0-3), a trial's state and values (6: the
#: operation that finishes a trial) and discards (10).  A trial's other operations (create 4, params
#: 5, intermediate values 7, attributes 8-9) are written (``os.write``: in the kernel's page cache
#: at once, so a killed process loses none of them; ``close`` flushes them to an NFS server) but not
#: forced to disk one by one: the fsync of the finishing operation forces every earlier line of the
#: file with it, so a power cut can only take operations of trials that had not finished -- which a
#: resumed study runs again anyway -- and a torn tail is cut as above.  Measured on the 2-core
#: machine, dense-70b-h200's default sweep: 17,906 appends, 18 per trial, whose fsyncs took 4.2 s of
#: the run's 58 s under cProfile; Optuna's own backend fsyncs every append.
DURABLE_OPS = frozenset({0, 1, 2, 3, 6, 10})
_LAZY_OPS = frozenset(range(11)) - DURABLE_OPS


def needs_fsync(logs: list[dict[str, Any]]) -> bool:
    """Whether an append of ``logs`` must reach the disk before it returns (:data:`DURABLE_OPS`)."""
    return any(log.get("op_code") not in _LAZY_OPS for log in logs)  # an unknown operation: fsync


class SafeJournalBackend(JournalFileBackend):
    """:class:`JournalFileBackend` with :class:`FlockLock` that never appends after a torn line, and
    that fsyncs the appends a finished trial or the study depends on (:data:`DURABLE_OPS`)."""

    def __init__(self, file_path: str) -> None:
        lock = FlockLock(file_path) if fcntl is not None else None
        super().__init__(file_path, lock_obj=lock)

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        if fcntl is None:  # pragma: no cover
            return super().append_logs(logs)
        data = ("\n".join(json.dumps(log, separators=(",", ":")) for log in logs) + "\n").encode("utf-8")
        with FlockLock(self._file_path):
            fd = os.open(self._file_path, os.O_RDWR | os.O_APPEND | getattr(os, "O_CLOEXEC", 0))
            try:
                _fix_torn_tail(self._file_path, fd)
                view = memoryview(data)
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
                if needs_fsync(logs):
                    os.fsync(fd)
            finally:
                os.close(fd)


def check_journal_path(path: str, flag: str = "--storage") -> None:
    """Refuse a journal path that is a folder, not a regular file, or not readable and writable."""
    p = Path(path)
    if p.is_dir():
        raise SpecError(flag, None, f"'{path}' is a folder; give a file path ending in .journal")
    if p.exists() and not p.is_file():
        raise SpecError(flag, None, f"'{path}' is not a regular file")
    lock = Path(path + LOCK_SUFFIX)
    if lock.is_dir():
        raise SpecError(flag, None, f"'{lock}' (the journal's lock file) is a folder; remove it")


_OPS = range(0, 11)  # optuna.storages.journal._storage.JournalOperation
_OP_START = b'{"op_code"'


def _as_op(line: bytes) -> dict[str, Any] | None:
    try:
        log = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if isinstance(log, dict) and type(log.get("op_code")) is int and log["op_code"] in _OPS \
            and isinstance(log.get("worker_id"), str):
        return log
    return None


def _parse_line(line: bytes) -> tuple[dict[str, Any] | None, bytes]:
    """(operation, the line to keep) of one journal line; a line that glued a whole operation onto
    the fragment of a torn one (what Optuna's own backend appends after a kill) keeps the operation."""
    log = _as_op(line)
    if log is not None:
        return log, line
    i = line.rfind(_OP_START)
    if i > 0:
        log = _as_op(line[i:])
        if log is not None:
            return log, line[i:]
    return None, line


def _lines_look_whole(data: bytes) -> bool:
    """Cheap check: every line is one JSON journal operation."""
    return all(_as_op(line) is not None for line in data.splitlines())


def _recover(data: bytes) -> tuple[bytes, list[int], int]:
    """(kept bytes, numbers of dropped lines, lines salvaged from glued fragments): every line that
    parses and that Optuna's replay accepts, in order."""
    replay = JournalStorageReplayResult("explorer-journal-check-")
    kept: list[bytes] = []
    dropped: list[int] = []
    salvaged = 0
    for number, line in enumerate(data.splitlines(keepends=True), start=1):
        body = line.rstrip(b"\r\n")
        log, keep = _parse_line(body)
        if log is not None and line.endswith(b"\n"):
            try:
                replay.apply_logs([log])
            except Exception:  # Optuna's replay refuses it: the operation is damaged
                log = None
        if log is None or not line.endswith(b"\n"):
            dropped.append(number)
            continue
        salvaged += keep is not body
        kept.append(keep + b"\n")
    return b"".join(kept), dropped, salvaged


def _numbers(nums: list[int]) -> str:
    shown = ", ".join(str(n) for n in nums[:5])
    return shown + (f" and {len(nums) - 5} more" if len(nums) > 5 else "")


def _repair_locked(path: str, flag: str, data: bytes) -> bool:
    new, dropped, salvaged = _recover(data)
    if not dropped and not salvaged:
        return False
    if not new and data.strip():
        raise SpecError(flag, None, f"{path} is not an Optuna journal (no line is a journal operation); move it "
                                    "away or give another --storage/--study")
    saved = f"{path}.damaged-{_stamp()}"
    shutil.copyfile(path, saved)
    tmp = f"{path}.{os.getpid()}.repair.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(new)
            f.flush()
            os.fsync(f.fileno())
        shutil.copymode(path, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    total = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
    what = []
    if dropped:
        what.append(f"dropped {len(dropped)} damaged line(s) (line {_numbers(dropped)})")
    if salvaged:
        what.append(f"recovered {salvaged} operation(s) glued onto torn lines")
    kept = new.count(b"\n")
    _note(f"{path}: {' and '.join(what)}; kept {kept} of {total} operations (the original is saved as "
          f"{saved})")
    return True


def repair_journal(path: str, flag: str = "--storage") -> bool:
    """Recover a damaged journal: keep every line that is a whole operation Optuna's replay accepts
    (in order), save the original beside it and print one line saying what was dropped.  Returns True
    when the file was changed.  A non-empty file without any journal operation is refused
    (:class:`SpecError`): it is probably not a journal."""
    if fcntl is None:  # pragma: no cover
        return False
    with FlockLock(path):
        try:
            data = Path(path).read_bytes()
        except OSError as e:
            raise SpecError(flag, None, f"cannot read {path}: {e.strerror}") from None
        return _repair_locked(path, flag, data)


def prepare_journal(path: str, flag: str = "--storage") -> None:
    """Before a study opens its journal (under the lock): end or cut a torn last line, then check that
    every line is a journal operation and recover the journal (:func:`repair_journal`) if not."""
    if fcntl is None or not os.path.exists(path):  # pragma: no cover
        return
    with FlockLock(path):
        fd = os.open(path, os.O_RDWR | os.O_APPEND | getattr(os, "O_CLOEXEC", 0))
        try:
            _fix_torn_tail(path, fd)
        finally:
            os.close(fd)
        data = Path(path).read_bytes()
        if not _lines_look_whole(data):
            _repair_locked(path, flag, data)
