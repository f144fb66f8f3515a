"""The exhaustive grid's checkpoint: every finished chunk, kept so that an interrupted grid resumes.

``explorer sweep SPACE --sampler grid`` keeps ``<out>/<study>.grid-checkpoint`` while it runs
(:func:`explorer.grid.run_grid`); Ctrl-C, SIGTERM, ``kill -9`` or a crash lose no finished chunk,
and the same command started again scores only the chunks the file lacks.  The sweep removes the
file once the CSV (and report) are written.

The file is a header line and one line per finished chunk (JSON: its reason counts, feasible count,
points simulated and the points of its front still on the grid's running front when it finished:
flat indices and objective values, floats written exactly),
appended as each chunk arrives in one ``write`` (flushed to the disk at most once a second and when
the run stops; a killed process loses nothing it wrote).  On opening:

* the header's **key** must match: a hash of the space's definition (:meth:`SearchSpace.fingerprint`),
  the grid's axes in file order, the chunk size, the explorer code (:func:`explorer.cluster.code_fingerprint`),
  the hardware and runtime files and numpy's version.  A file of anything else is ignored and
  replaced (one line on stderr): a changed space, code or calibration never reuses a chunk;
* a torn or damaged line (a writer killed mid-line, a truncated disk) ends what is read: it and
  everything after it are cut off, and those chunks are scored again;
* an advisory ``flock`` on the file keeps two runs of one study from writing it at once (the
  second is refused with one line; the kernel releases the lock of a killed holder).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from explorer.errors import SpecError
from explorer.space import SearchSpace

if TYPE_CHECKING:
    from explorer.grid import _Chunk

FORMAT = "explorer-grid-checkpoint"
VERSION = 1
#: Seconds between fsyncs of the appended lines (and one when the run stops).
SYNC_EVERY_S = 1.0


def checkpoint_path(out: str | Path, study: str) -> Path:
    """Where ``explorer sweep`` keeps the grid's checkpoint of ``study``."""
    return Path(out) / f"{study}.grid-checkpoint"


def checkpoint_key(space: SearchSpace, chunk: int, total: int) -> str:
    """What a chunk's result depends on (module docstring), hashed."""
    from explorer.cluster import code_fingerprint
    from explorer.hardware import HARDWARE_DIR
    from explorer.runtime import RUNTIME_DIR

    names, values, _ = space.grid
    h = hashlib.sha256()
    h.update(json.dumps({"space": space.fingerprint(), "axes": [[n, [repr(x) for x in v.tolist()]]
                                                                for n, v in zip(names, values, strict=True)],
                         "chunk": chunk, "points": total, "code": code_fingerprint(),
                         "numpy": np.__version__}, sort_keys=True).encode())
    files = sorted(HARDWARE_DIR.glob("*.y*ml")) + sorted(RUNTIME_DIR.glob("*.y*ml"))
    files += [Path(p) for _, p in sorted(space.hardware_files.items())]
    for p in files:
        h.update(str(p).encode() + b"\0")
        try:
            h.update(p.read_bytes())
        except OSError:
            h.update(b"unreadable")
    return h.hexdigest()[:32]


class GridCheckpoint:
    """``open`` -> finished chunks; ``add`` each new one; ``close`` (module docstring)."""

    def __init__(self, path: str | Path, space: SearchSpace, chunk: int, total: int) -> None:
        self.path = Path(path)
        self.space = space
        self.chunk = chunk
        self.total = total
        self.key = checkpoint_key(space, chunk, total)
        self.fd: int | None = None
        self.bounds: list[tuple[int, int]] = []
        self._synced = time.monotonic()

    def _header(self) -> bytes:
        return (json.dumps({"format": FORMAT, "version": VERSION, "key": self.key, "space": self.space.where,
                            "points": self.total, "chunk": self.chunk}) + "\n").encode()

    def open(self, todo: set[int], bounds: list[tuple[int, int]]) -> dict[int, _Chunk]:
        """Lock the file (create it) and read the finished chunks among ``todo`` (indices into
        ``bounds``); start it afresh when it belongs to another space, code or calibration."""
        from explorer.grid import _Chunk

        self.bounds = bounds
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise SpecError(str(self.path), None, f"cannot write the grid's checkpoint ({e.strerror or e})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise SpecError(str(self.path), None, "another run of this grid is writing this checkpoint; wait for "
                                                  "it to end, or use another --study or --out") from None
        self.fd = fd
        data = b""
        with open(self.path, "rb") as f:  # the locked file (a second descriptor, for reading only)
            data = f.read()
        done: dict[int, _Chunk] = {}
        m = len(self.space.objectives)
        good = 0  # bytes of whole, valid lines
        lines = data.split(b"\n")
        header_ok = False
        if len(lines) > 1:
            try:
                head = json.loads(lines[0])
                header_ok = isinstance(head, dict) and head.get("format") == FORMAT and head.get("key") == self.key
            except ValueError:
                header_ok = False
        if header_ok:
            good = len(lines[0]) + 1
            for line in lines[1:-1]:  # the last piece has no newline: empty, or a torn line
                try:
                    i, c = self._record(json.loads(line), todo, bounds, m, _Chunk)
                except (ValueError, TypeError, KeyError, IndexError):
                    break
                done[i] = c
                good += len(line) + 1
            if good < len(data):
                print(f"note: {self.path}: a torn or damaged line; the chunks from it on are scored again",
                      file=sys.stderr)
                os.ftruncate(fd, good)
            if done:
                print(f"explorer sweep: resuming the grid from {self.path}: {len(done):,} of {len(todo):,} chunks "
                      "to score are done", file=sys.stderr)
        else:
            if data:
                print(f"note: {self.path} belongs to another space, code or calibration (or is damaged); "
                      "the grid starts afresh", file=sys.stderr)
            os.ftruncate(fd, 0)
            self._write(self._header())
            os.fsync(fd)
        os.lseek(fd, 0, os.SEEK_END)
        return done

    @staticmethod
    def _record(r: Any, todo: set[int], bounds: list[tuple[int, int]], m: int, chunk_cls) -> tuple[int, _Chunk]:
        i = int(r["i"])
        if i not in todo or [int(r["a"]), int(r["b"])] != list(bounds[i]):
            raise ValueError("not a chunk of this grid")
        counts = {int(k): int(v) for k, v in r["counts"].items()}
        idx = np.asarray(r["idx"], dtype=np.int64).reshape(-1)
        obj = np.asarray(r["obj"], dtype=np.float64).reshape(len(idx), m)
        a, b = bounds[i]
        if sum(counts.values()) != b - a or min(counts.values(), default=1) < 1 or \
                (len(idx) and (idx.min() < a or idx.max() >= b)):
            raise ValueError("inconsistent chunk")
        return i, chunk_cls(counts, int(r["feasible"]), idx, obj, int(r["simulated"]))

    def _write(self, data: bytes) -> None:
        assert self.fd is not None
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]

    def add(self, i: int, c: _Chunk, keep: np.ndarray | None = None) -> None:
        """Append chunk ``i``'s result (one write; fsync at most every SYNC_EVERY_S); of its front,
        only the points ``keep`` (those still on the grid's running front: a point dominated once is
        never on the final front, so the front of what is kept is the front of every chunk)."""
        a, b = self.bounds[i]
        idx, obj = (c.front_idx, c.front_obj) if keep is None else (c.front_idx[keep], c.front_obj[keep])
        rec = {"i": i, "a": a, "b": b, "counts": {str(k): v for k, v in c.counts.items()},
               "feasible": c.feasible, "simulated": c.simulated, "idx": idx.tolist(), "obj": obj.tolist()}
        self._write((json.dumps(rec, separators=(",", ":")) + "\n").encode())
        now = time.monotonic()
        if now - self._synced >= SYNC_EVERY_S:
            assert self.fd is not None
            os.fsync(self.fd)
            self._synced = now

    def close(self) -> None:
        """Flush to the disk and release the lock (the file stays: the sweep removes it when done)."""
        if self.fd is None:
            return
        try:
            os.fsync(self.fd)
        except OSError:
            pass
        os.close(self.fd)  # releases the flock
        self.fd = None


def remove_checkpoint(path: str | Path) -> None:
    """Remove a finished grid's checkpoint (its results are in the CSV)."""
    Path(path).unlink(missing_ok=True)
