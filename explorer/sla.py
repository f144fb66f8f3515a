"""Latency-limited throughput (MLPerf Server / Interactive semantics): the highest Poisson request
rate whose p99 TTFT and p99 TPOT stay within the limits, and the throughput it serves.

Offline is today's saturated point; Server adds the limits.  For each design the search scores a
ladder of open-loop rates up to the closed-loop saturated rate in one vectorized simulator call,
then a finer ladder between the last rate that meets the limits and the first that does not
(resolution ``1 / (COARSE_STEPS * FINE_STEPS)`` of the saturated rate).  The percentiles are the
analytic ones of :mod:`explorer.open_loop`.

Ignored: latency limits on other percentiles, and MLPerf's early-stopping margin (the measured
p99 over a finite run is itself uncertain by a few percent).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from explorer.design import build_design
from explorer.simulate import simulate

#: rungs of the coarse and fine rate ladders (fractions of the saturated rate)
COARSE_STEPS = 40
FINE_STEPS = 20


def _meets(r: dict[str, np.ndarray], ttft_limit_s, tpot_limit_s) -> np.ndarray:
    """Rows that are feasible and within their limits (``None`` or NaN: no limit on that figure)."""
    ok = np.array(r["feasible"], dtype=bool)  # a copy: the results keep their own column
    for col, limit in (("ttft_p99_s", ttft_limit_s), ("tpot_p99_s", tpot_limit_s)):
        if limit is None:
            continue
        lim = np.asarray(limit, dtype=np.float64)
        ok &= np.where(np.isnan(lim), True, np.asarray(r[col]) <= lim)
    return ok


def max_rate_within_limits(values: dict[str, Any], saturated_rate, ttft_limit_s: float | np.ndarray | None,
                           tpot_limit_s: float | np.ndarray | None, where: str = "sla",
                           request_s: float | np.ndarray | None = None) -> dict[str, np.ndarray]:
    """For ``n`` designs (``values`` as :func:`explorer.design.build_design` takes them, arrays of
    length ``n`` or scalars; ``batch`` sizes memory and should be the runtime's maximum running
    requests) and their closed-loop saturated request rates (requests/s per replica), the highest
    rate meeting the limits.  Returns ``request_rate`` (0 where even the lowest rung fails) and
    ``row`` (index into the returned ``results``, the simulator's columns at that rate).
    ``request_s`` overrides the runtime's per-request host time (0 for in-process harnesses).  The
    limits and ``request_s`` are scalars or one per design (NaN: no limit, or the runtime's time)."""
    sat = np.atleast_1d(np.asarray(saturated_rate, dtype=np.float64))
    n = sat.size

    def score(fracs: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
        m = fracs.shape[1]
        rows: dict[str, Any] = {}
        for k, v in values.items():
            a = np.asarray(v, dtype=object) if not isinstance(v, np.ndarray) or v.dtype == object else v
            rows[k] = np.repeat(a, m) if a.ndim == 1 and len(a) == n else np.repeat(np.asarray([v] * n, dtype=a.dtype), m)
        rows["request_rate"] = (sat[:, None] * fracs).ravel()
        d, t = build_design(rows, where)
        if request_s is not None:  # per design; NaN keeps the runtime's
            over = np.repeat(np.broadcast_to(np.asarray(request_s, dtype=np.float64), (n,)), m)
            d["rt_request_s"] = np.where(np.isnan(over), d["rt_request_s"], over)
        r = simulate(d, t, detail=True)
        per_row = [None if x is None else np.repeat(np.broadcast_to(np.asarray(x, dtype=np.float64), (n,)), m)
                   for x in (ttft_limit_s, tpot_limit_s)]
        return r, _meets(r, *per_row).reshape(n, m)

    coarse = np.broadcast_to(np.linspace(1.0 / COARSE_STEPS, 1.0, COARSE_STEPS), (n, COARSE_STEPS))
    _, ok = score(coarse)
    # last rung that meets the limits (rungs below a failing one may pass again: take the highest)
    idx = np.where(ok.any(axis=1), COARSE_STEPS - 1 - np.argmax(ok[:, ::-1], axis=1), -1)
    lo = np.where(idx >= 0, (idx + 1.0) / COARSE_STEPS, 0.0)
    fine = lo[:, None] + np.linspace(0.0, 1.0 / COARSE_STEPS, FINE_STEPS + 1)[None, 1:]
    fine = np.concatenate([np.maximum(lo, 1e-3)[:, None], fine], axis=1)
    r, ok2 = score(fine)
    m = fine.shape[1]
    j = np.where(ok2.any(axis=1), m - 1 - np.argmax(ok2[:, ::-1], axis=1), 0)
    row = np.arange(n) * m + j
    rate = np.where(ok2[np.arange(n), j], sat * fine[np.arange(n), j], 0.0)
    return {"request_rate": rate, "row": row, "results": r}
