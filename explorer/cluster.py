"""Where chunked scans of a search space run: in this process, on local worker processes
(``--workers N``) or on a Dask distributed cluster (``--cluster dask://HOST:PORT``).

A scan is a list of half-open flat-index ranges ``(start, stop)`` of one space and a module-level
function ``fn(space, start, stop)`` (the exhaustive grid's is :func:`explorer.grid._score_chunk`).
:func:`map_chunks` returns ``fn``'s results **in range order** on every backend, so whatever the
caller merges from them is identical across backends and worker counts; with ``ordered=False`` it
yields ``(range number, result)`` as each range finishes (the grid keeps every finished range in its
checkpoint at once, and merges in range order itself).  Every backend rebuilds the space from its
YAML text (:func:`explorer.space.space_from_text`) and runs the same ``fn``.

The Dask backend (:class:`DaskCluster`):

* **bounded memory.**  At most :data:`WINDOW_PER_THREAD` ranges per worker thread are in flight;
  the client takes results in order and releases each one as soon as it is merged.  A worker thread
  scores one range at a time (50,000 points, about 0.3-0.5 GB of numpy temporaries), so a worker's
  memory is bounded by its threads, not by the grid.
* **the same answer.**  Before the first range, every worker is probed (:func:`_probe`): it must run
  the same explorer code (a hash of the package's files) and score the first range's first points
  bit-for-bit like this machine (same numpy, same hardware files at the same absolute paths).
  A worker that cannot is named in a one-line error.
* **failures.**  A range whose worker dies is re-run elsewhere by the scheduler (Dask's
  ``distributed.scheduler.allowed-failures``); past that, or when the scheduler goes away, the scan
  stops with a one-line error and writes nothing.

Ignored: data locality (a range carries only two integers; the space's text is scattered once),
scheduler-side priorities of other clients' work, and TLS/authentication (``dask://`` is plain
TCP on a trusted network).
"""

from __future__ import annotations

import functools
import hashlib
import multiprocessing as mp
import re
import socket
import uuid
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from explorer.errors import SpecError
from explorer.space import SearchSpace, space_from_text

#: ``fn(space, start, stop)``: a module-level function (workers import it by name).
ChunkFn = Callable[[SearchSpace, int, int], Any]

#: Seconds to reach the scheduler, and to wait for its first worker.
CONNECT_TIMEOUT_S = 10.0
WORKER_WAIT_S = 20.0
#: Ranges in flight per worker thread (enough to hide the round trip; bounds client memory).
WINDOW_PER_THREAD = 2
#: Grid points every worker scores at start-up to show it computes what this machine does.
PROBE_POINTS = 256

ALLOWED = "dask://HOST:PORT (a Dask scheduler: 'dask scheduler --port PORT')"
_ADDRESS = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):(?P<port>[0-9]{1,5})$")


@dataclass(frozen=True)
class ClusterSpec:
    """A validated ``--cluster`` value (picklable; no connection)."""

    url: str  # as given: dask://host:port
    host: str
    port: int

    @property
    def address(self) -> str:
        """The scheduler address Dask speaks to (plain TCP)."""
        return f"tcp://{self.host}:{self.port}"


def _shown(value: str) -> str:
    return value if len(value) <= 80 else value[:77] + "..."


def parse_cluster(value: str) -> ClusterSpec:
    """Validate ``--cluster`` (no network): ``dask://HOST:PORT``."""
    scheme, sep, rest = value.partition("://")
    if not sep:
        raise SpecError("--cluster", None, f"'{_shown(value)}' is not a cluster address; allowed: {ALLOWED}")
    if scheme.lower() != "dask":
        raise SpecError("--cluster", None, f"'{_shown(value)}': scheme '{_shown(scheme)}://' is not supported; "
                                           f"allowed: {ALLOWED}")
    m = _ADDRESS.match(rest.rstrip("/"))
    port = int(m.group("port")) if m else 0
    if m is None or not 1 <= port <= 65535:
        raise SpecError("--cluster", None, f"'{_shown(value)}' has no usable HOST:PORT (port 1-65535); "
                                           f"allowed: {ALLOWED}")
    return ClusterSpec(value, m.group("host").strip("[]"), port)


def _import_distributed():
    try:
        import distributed
    except ImportError:
        raise SpecError("--cluster", None, "needs Dask distributed: pip install -e '.[cluster]' (on this machine "
                                           "and on every worker machine)") from None
    return distributed


# --------------------------------------------------------------------------------------------
# the same code, the same answer
# --------------------------------------------------------------------------------------------


@functools.cache
def code_fingerprint() -> str:
    """Hash of the explorer package's source and data files (what a worker must share)."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.suffix in (".py", ".yaml", ".yml", ".json") and "__pycache__" not in p.parts:
            h.update(p.relative_to(root).as_posix().encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class _Source:
    """What a worker needs to rebuild the space (scattered once to every worker)."""

    text: str
    where: str
    token: str  # hash of (where, text): the worker's cache key


def _source(space: SearchSpace) -> _Source:
    token = hashlib.sha256(f"{space.where}\0{space.text}".encode()).hexdigest()[:16]
    return _Source(space.text, space.where, token)


_SPACES: dict[str, SearchSpace] = {}


def _space_of(src: _Source) -> SearchSpace:
    """The space of ``src``, built once per worker process."""
    space = _SPACES.get(src.token)
    if space is None:
        if len(_SPACES) > 8:
            _SPACES.clear()
        space = _SPACES[src.token] = space_from_text(src.text, src.where)
    return space


def _result_hash(result: Any) -> str:
    import pickle

    return hashlib.sha256(pickle.dumps(result, protocol=5)).hexdigest()[:16]


def _probe(src: _Source, fn: ChunkFn, start: int, stop: int) -> dict[str, str]:
    """Run on every worker: its code hash and the hash of ``fn`` over the points ``start..stop``."""
    try:
        return {"code": code_fingerprint(), "result": _result_hash(fn(_space_of(src), start, stop))}
    except Exception as e:  # reported by name, one line
        return {"code": code_fingerprint(), "error": f"{type(e).__name__}: {e}"}


# --------------------------------------------------------------------------------------------
# Dask
# --------------------------------------------------------------------------------------------


def _dask_chunk(fn: ChunkFn, src: _Source, start: int, stop: int):
    return fn(_space_of(src), start, stop)


def _identity(address: str, timeout_s: float) -> str:
    """What answers at ``address``: Dask's ``identity`` type ("Scheduler", "Worker", ...) or why
    nothing does.  Bounded in time (Dask's own handshake waits forever on a silent peer), and run
    on a thread of its own so that a caller's event loop is left alone."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from distributed.comm import connect

    async def ask() -> str:
        comm = await connect(address, timeout=timeout_s)
        try:
            await comm.write({"op": "identity"})
            reply = await comm.read()
        finally:
            comm.abort()
        return str(reply.get("type", "no type")) if isinstance(reply, dict) else type(reply).__name__

    def run() -> str:
        try:
            return asyncio.run(asyncio.wait_for(ask(), timeout_s))
        except TimeoutError:
            return f"no Dask handshake in {timeout_s:g} s"
        except Exception as e:  # whatever the peer sent was not Dask's protocol
            return f"{type(e).__name__}: {str(e)[:80]}"

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()


class DaskCluster:
    """A connection to a Dask scheduler (``with DaskCluster(spec) as c: c.map(...)``)."""

    def __init__(self, spec: ClusterSpec, timeout_s: float | None = None) -> None:
        distributed = _import_distributed()
        timeout_s = CONNECT_TIMEOUT_S if timeout_s is None else timeout_s
        self.spec = spec
        self.client: Any = None
        self._reachable(timeout_s)
        kind = _identity(spec.address, timeout_s)
        if kind != "Scheduler":
            raise SpecError("--cluster", None, f"'{_shown(spec.url)}' answers but is not a Dask scheduler ({kind}); "
                                               f"allowed: {ALLOWED}")
        try:
            self.client = distributed.Client(spec.address, timeout=timeout_s, set_as_default=False)
        except (OSError, TimeoutError) as e:
            raise SpecError("--cluster", None, f"cannot connect to the Dask scheduler at '{_shown(spec.url)}' "
                                               f"({type(e).__name__}: {str(e)[:120]})") from None
        try:
            self.client.wait_for_workers(1, timeout=WORKER_WAIT_S)
        except (OSError, TimeoutError):
            self.close()
            raise SpecError("--cluster", None, f"the Dask scheduler at '{_shown(spec.url)}' has no workers after "
                                               f"{WORKER_WAIT_S:g} s; start some with 'dask worker "
                                               f"{spec.address} --nthreads 1'") from None

    def _reachable(self, timeout_s: float) -> None:
        """A plain TCP connect first: a wrong host or a closed port fails at once, with the OS reason."""
        try:
            with socket.create_connection((self.spec.host, self.spec.port), timeout=timeout_s):
                pass
        except OSError as e:
            why = f"no answer in {timeout_s:g} s" if isinstance(e, TimeoutError) else e.strerror or type(e).__name__
            raise SpecError("--cluster", None, f"cannot reach a Dask scheduler at '{_shown(self.spec.url)}' ({why}); "
                                               f"allowed: {ALLOWED}, with the scheduler running") from None

    def __enter__(self) -> DaskCluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        client = getattr(self, "client", None)
        if client is not None:
            try:
                client.close(timeout=5)
            except Exception:  # closing is best effort; the scheduler forgets a vanished client
                pass
            self.client = None

    def threads(self) -> int:
        """Worker threads the scheduler has now."""
        return max(1, sum(self.client.nthreads().values()))

    def _ask(self, who: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except Exception as e:  # typically: explorer is not importable there
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
            raise SpecError("--cluster", None, f"the {who} of '{_shown(self.spec.url)}' cannot run explorer "
                                               f"({first}); install this checkout where the scheduler and every "
                                               "worker run (pip install -e '.[cluster]')") from None

    def check(self, space: SearchSpace, fn: ChunkFn, total: int, start: int = 0) -> _Source:
        """Probe the scheduler and every worker (see the module docstring) on the points from
        ``start`` (at most PROBE_POINTS, not past ``total``); the space's source when they all pass.
        The scheduler unpickles every task, so it imports explorer too."""
        src = _source(space)
        start = max(0, min(start, total - 1))
        stop = min(total, start + PROBE_POINTS)
        mine = _probe(src, fn, start, stop)
        if "error" in mine:  # pragma: no cover - the caller scored this space already
            raise SpecError(space.where, None, mine["error"])
        self._ask("scheduler", lambda: self.client.run_on_scheduler(code_fingerprint))  # importable there
        theirs = self._ask("workers", lambda: self.client.run(_probe, src, fn, start, stop))
        for worker, got in sorted(theirs.items()):
            if got["code"] != mine["code"]:
                raise SpecError("--cluster", None, f"worker {worker} runs other explorer code (files hash "
                                                   f"{got['code']}, here {mine['code']}); install this checkout "
                                                   "on every worker machine")
            if "error" in got:
                raise SpecError("--cluster", None, f"worker {worker} cannot score {space.where} "
                                                   f"({got['error'][:200]}); every worker needs the space's "
                                                   "hardware files at the same paths")
            if got["result"] != mine["result"]:
                raise SpecError("--cluster", None, f"worker {worker} scores {space.where} differently from this "
                                                   "machine (numpy or hardware files differ); results would not "
                                                   "match --workers")
        return src

    def map(self, fn: ChunkFn, space: SearchSpace, bounds: list[tuple[int, int]],
            ordered: bool = True) -> Iterator[Any]:
        """``fn(space, a, b)`` for every range, a bounded window in flight: results in range order, or
        with ``ordered=False`` ``(range number, result)`` as they finish.  The probe scores the
        first range's first points."""
        distributed = _import_distributed()
        if not bounds:
            return
        src = self.client.scatter(self.check(space, fn, bounds[0][1], bounds[0][0]), broadcast=True, hash=False)
        run = uuid.uuid4().hex[:8]
        pending: dict[int, Any] = {}
        nxt = 0
        window = WINDOW_PER_THREAD * self.threads()

        def submit() -> None:
            nonlocal nxt
            a, b = bounds[nxt]
            pending[nxt] = self.client.submit(_dask_chunk, fn, src, a, b, key=f"explorer-{run}-{nxt}", pure=False)
            nxt += 1

        def result(i: int, fut: Any) -> Any:
            try:
                return fut.result()
            except distributed.KilledWorker as e:
                a, b = bounds[i]
                raise SpecError("--cluster", None, f"points {a:,}..{b:,} killed their workers too often "
                                                   f"({e}); check the workers' logs (memory limit?)") from None
            except (OSError, distributed.comm.CommClosedError) as e:
                raise SpecError("--cluster", None, f"lost the Dask scheduler at '{_shown(self.spec.url)}' "
                                                   f"({type(e).__name__}); nothing was written") from None

        try:
            if ordered:
                for i in range(len(bounds)):
                    while nxt < len(bounds) and nxt - i < window:
                        submit()
                    yield result(i, pending.pop(i))
                    if i % 128 == 127:  # workers may have joined or left
                        window = WINDOW_PER_THREAD * self.threads()
                return
            number: dict[str, int] = {}
            ready = distributed.as_completed(loop=self.client.loop)  # no default client is set

            def top_up() -> None:
                while nxt < len(bounds) and len(pending) < window:
                    submit()
                    number[pending[nxt - 1].key] = nxt - 1
                    ready.add(pending[nxt - 1])

            top_up()
            for finished, fut in enumerate(ready, 1):
                i = number.pop(fut.key)
                del pending[i]
                yield i, result(i, fut)
                del fut
                if finished % 128 == 0:  # workers may have joined or left
                    window = WINDOW_PER_THREAD * self.threads()
                top_up()
        finally:
            if pending:
                self.client.cancel(list(pending.values()))


# --------------------------------------------------------------------------------------------
# local processes
# --------------------------------------------------------------------------------------------


_WORKER_SPACE: SearchSpace | None = None


def _init_worker(text: str, where: str) -> None:
    global _WORKER_SPACE
    _WORKER_SPACE = space_from_text(text, where)


def _local_chunk(fn: ChunkFn, bounds: tuple[int, int]):
    assert _WORKER_SPACE is not None
    return fn(_WORKER_SPACE, *bounds)


def _local_numbered(fn: ChunkFn, job: tuple[int, tuple[int, int]]):
    assert _WORKER_SPACE is not None
    return job[0], fn(_WORKER_SPACE, *job[1])


def map_chunks(fn: ChunkFn, space: SearchSpace, bounds: list[tuple[int, int]], *, workers: int = 1,
               cluster: ClusterSpec | None = None, ordered: bool = True) -> Generator[Any, None, None]:
    """``fn(space, a, b)`` for every range of ``bounds``: on the Dask scheduler ``cluster``, else on
    ``workers`` spawned local processes, else in this process.  In range order, or with
    ``ordered=False`` ``(range number, result)`` pairs as the ranges finish."""
    if cluster is not None:
        with DaskCluster(cluster) as c:
            yield from c.map(fn, space, bounds, ordered=ordered)
    elif workers > 1 and len(bounds) > 1:
        ctx = mp.get_context("spawn")
        with ctx.Pool(min(workers, len(bounds)), initializer=_init_worker, initargs=(space.text, space.where)) as pool:
            if ordered:
                yield from pool.imap(functools.partial(_local_chunk, fn), bounds)
            else:
                yield from pool.imap_unordered(functools.partial(_local_numbered, fn), enumerate(bounds))
    else:
        for i, (a, b) in enumerate(bounds):
            yield fn(space, a, b) if ordered else (i, fn(space, a, b))
