"""One signal policy for every command: SIGTERM is treated exactly like SIGINT (Ctrl-C).

Batch schedulers, ``timeout`` and ``kill`` send SIGTERM; by default it ends Python at once, skipping
every ``finally`` (temporary files stay, a trial stays RUNNING, no CSV is written).  Under this policy:

* outside a trial loop, SIGTERM raises :class:`KeyboardInterrupt` like SIGINT does, so clean-up runs
  and the CLI exits 130 with one line (:func:`terminate_as_interrupt`, installed by
  :func:`explorer.cli.main` and by sweep worker processes);
* inside a trial loop (:class:`GracefulInterrupt`), the first SIGINT or SIGTERM asks the loop to stop
  after the current batch (no trial is left RUNNING) and a second one stops at once; SIGUSR1 (what a
  sweep sends its worker processes when it is interrupted) only ever asks to stop;
* the CLI's exit code is its own even when CPython has marked an interrupt "unhandled"
  (:func:`clear_stale_interrupt`).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

#: Signals that stop a command (Ctrl-C, and what schedulers and ``timeout`` send).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: The signal a sweep forwards to its worker processes: "finish your batch and stop".
FORWARD_SIGNAL = getattr(signal, "SIGUSR1", None)

_Handler = Callable[[int, FrameType | None], Any] | int | None


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """While active (main thread only), SIGTERM raises KeyboardInterrupt, as SIGINT does."""
    if not _main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


class GracefulInterrupt:
    """While active (main thread only), the first SIGINT/SIGTERM sets ``requested`` instead of
    raising, a second one raises KeyboardInterrupt; :data:`FORWARD_SIGNAL` only sets ``requested``."""

    def __init__(self) -> None:
        self.requested = False
        self._old: dict[int, _Handler] = {}

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self.requested and signum != FORWARD_SIGNAL:
            raise KeyboardInterrupt
        self.requested = True

    def __enter__(self) -> GracefulInterrupt:
        if _main_thread():
            for sig in (*STOP_SIGNALS, FORWARD_SIGNAL):
                if sig is not None:
                    self._old[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old = {}


def clear_stale_interrupt() -> None:
    """Reset CPython's "unhandled KeyboardInterrupt" mark before the process exits.

    CPython (seen on 3.11.7) sets that mark whenever a KeyboardInterrupt leaves code run by
    ``exec()``/``eval()`` of a *string* -- dataclass, namedtuple and many libraries' generated
    methods, so any lazy import in flight when SIGINT/SIGTERM lands -- even if the program catches
    the interrupt further up.  Under ``python -m explorer`` the interpreter then ends the process
    by re-raising SIGINT at exit: return code -2 instead of our 130 (measured: 1 run in ~70 of
    ``tests/test_fuzz_cli.py::test_kill_and_resume`` on a loaded machine; a two-line reproduction
    is in ``tests/test_interrupts.py``).  Every ``exec`` of a string resets the mark on entry, so
    one of an empty statement clears it.  Call it only on the way out: a genuinely unhandled
    interrupt after it would still be reported."""
    exec("None")  # noqa: S102 -- a constant statement; the side effect is the point
