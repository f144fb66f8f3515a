"""Where studies live: an embedded Optuna journal file by default, a database for many machines.

* default: ``JournalStorage(JournalFileBackend("<out>/<study>.journal"))``: no server, safe for
  several local processes (file lock), survives interruption (every finished trial is an appended,
  fsync'ed line), readable by optuna-dashboard;
* ``--storage postgresql://user@host:port/db`` (or ``mysql://...``): ``RDBStorage`` with heartbeats,
  so trials of a crashed worker go stale, are failed and re-run once
  (``RetryHeartbeatStaleTrialCallback``);
* ``--storage path/to/file.journal``: a journal file elsewhere.

SQLite is refused with several workers (one writer at a time; DESIGN.md section 5).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from explorer.errors import SpecError

#: Seconds between heartbeats of a running trial, and how long a silent trial lives before it is
#: failed and retried (RDB storage only).
HEARTBEAT_INTERVAL_S = 30
HEARTBEAT_GRACE_S = 120
MAX_RETRY = 2

_URL = re.compile(r"^(?P<scheme>[a-z][a-z0-9+]*)://")
_RDB_SCHEMES = ("postgresql", "postgresql+psycopg2", "postgres", "mysql", "mysql+pymysql", "sqlite")


@dataclass(frozen=True)
class StorageSpec:
    """A picklable description of a storage (worker processes open their own connection)."""

    kind: str  # "journal" | "rdb" | "memory"
    target: str  # file path or URL

    def describe(self) -> str:
        if self.kind == "rdb":
            return re.sub(r"//([^:@/]+):[^@/]*@", r"//\1:***@", self.target)  # hide a password
        return self.target


def storage_spec(url: str | None, out_dir: Path, study: str, workers: int) -> StorageSpec:
    """Validate ``--storage`` (before anything is written)."""
    if url is None:
        return StorageSpec("journal", str(out_dir / f"{study}.journal"))
    if url == ":memory:":
        return StorageSpec("memory", url)
    m = _URL.match(url)
    if m:
        scheme = m.group("scheme")
        if scheme not in _RDB_SCHEMES:
            raise SpecError("--storage", None, f"unsupported URL scheme '{scheme}://'; use postgresql://..., "
                                               "mysql://... or a .journal file path")
        if scheme == "postgres":
            url = "postgresql" + url[len("postgres"):]
        if scheme == "sqlite" and workers > 1:
            raise SpecError("--storage", None, "SQLite allows one writer at a time: use the default journal file "
                                               "or PostgreSQL with --workers > 1")
        return StorageSpec("rdb", url)
    if not url.endswith(".journal"):
        raise SpecError("--storage", None, f"expected a database URL (postgresql://...) or a path ending in "
                                           f".journal, got '{url}'")
    return StorageSpec("journal", url)


def _with_driver(url: str) -> str:
    """SQLAlchemy 2.1 maps ``postgresql://`` to psycopg 3; use psycopg2 (our optional dependency)
    when only that is installed."""
    if url.startswith("postgresql://"):
        import importlib.util

        if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2") is not None:
            return "postgresql+psycopg2://" + url[len("postgresql://"):]
    return url


def _open_journal(target: str):
    """A journal storage that a kill cannot lock or corrupt (:mod:`explorer.journal`): a torn last
    line is ended or cut first; a journal Optuna cannot replay is cut back to its valid prefix."""
    import optuna

    from explorer.journal import SafeJournalBackend, check_journal_path, prepare_journal, repair_journal

    check_journal_path(target)
    try:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        prepare_journal(target)
        try:
            return optuna.storages.JournalStorage(SafeJournalBackend(target))
        except (OSError, SpecError):
            raise
        except Exception as e:  # Optuna could not replay the journal: recover its valid prefix
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
            if not repair_journal(target):
                raise SpecError("--storage", None, f"cannot replay the study journal {target} ({type(e).__name__}: "
                                                   f"{first}); move it away or give another --study") from None
        return optuna.storages.JournalStorage(SafeJournalBackend(target))
    except OSError as e:
        raise SpecError("--storage", None, f"cannot open {target}: {e.strerror or e}") from None


def open_storage(spec: StorageSpec):
    """The Optuna storage object for ``spec`` (imports Optuna)."""
    import optuna

    if spec.kind == "memory":
        return optuna.storages.InMemoryStorage()
    if spec.kind == "journal":
        return _open_journal(spec.target)
    try:
        return optuna.storages.RDBStorage(
            _with_driver(spec.target),
            heartbeat_interval=HEARTBEAT_INTERVAL_S,
            grace_period=HEARTBEAT_GRACE_S,
            heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRY),
            engine_kwargs={"pool_pre_ping": True},
        )
    except ImportError:
        raise SpecError("--storage", None, "no database driver for this URL; for PostgreSQL: "
                                           "pip install psycopg2-binary (or psycopg)") from None
    except Exception as e:  # sqlalchemy.exc.OperationalError and friends: unreachable server, bad login
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SpecError("--storage", None, f"cannot open {spec.describe()}: {first}") from None
