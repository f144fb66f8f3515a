"""Whole systems: ``N`` GPUs split into identical replicas of the best deployment they allow.

A system of ``N`` GPUs (one 8-GPU node, a 72-GPU NVL72 rack, several nodes) runs ``N / g``
replicas of a ``g``-GPU deployment (``g = tp * dp * pp``; the load splits evenly across replicas),
so its output tokens/s are ``N`` times the deployment's tokens/s per GPU.  The best deployment is
the one with the most tokens/s per GPU among the candidates whose GPU count divides ``N``:

* **saturated** (MLPerf Offline): each candidate at its highest-throughput concurrency;
* **latency-limited** (MLPerf Server / Interactive): each candidate at the highest Poisson rate
  whose p99 TTFT and TPOT meet the limits (:mod:`explorer.sla`).

Candidates: tensor parallelism 1, 2, 4, 8 (and the NVLink domain size when it is larger and
divides ``N``) for dense models; MoE models add expert parallelism over the same GPUs
(``ep = tp``) and attention data parallelism (``dp = ep``, ``tp = 1``).  Replicas never span more
GPUs than ``N``.  Ignored: uneven replicas (``N`` not a multiple of ``g``), and serving several
models on one system.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from explorer.design import build_design
from explorer.hardware import Hardware
from explorer.runtime import Runtime
from explorer.simulate import MAX_BATCH_GRID, simulate

#: tensor-parallel sizes tried (powers of two up to one HGX node; larger NVLink domains add theirs)
TP_CHOICES = (1, 2, 4, 8)


@dataclass(frozen=True)
class SystemPoint:
    """The best deployment of a system: its degrees, concurrency or rate, and figures."""

    tp: int
    ep: int
    dp: int
    gpus_per_replica: int
    replicas: int
    batch: int
    request_rate_per_replica: float  # 0 for the saturated (closed-loop) point
    tokens_per_s_per_gpu: float
    tokens_per_s_system: float
    tokens_per_s_per_user: float


def candidates(gpus: int, experts: int, domain: int, pp: int = 1) -> list[tuple[int, int, int]]:
    """(tp, ep, dp) deployments whose GPU count ``tp * dp * pp`` divides ``gpus``."""
    sizes = sorted({t for t in (*TP_CHOICES, domain) if t >= 1 and gpus % (t * pp) == 0})
    out = [(t, 1, 1) for t in sizes]
    if experts:
        out += [(t, t, 1) for t in sizes if t > 1 and experts % t == 0]
        out += [(1, d, d) for d in sizes if d > 1 and experts % d == 0]
    return out


@dataclass(frozen=True)
class SystemRequest:
    """One system to split (the arguments of :func:`best_system`)."""

    values: dict[str, Any]
    hw: Hardware
    rt: Runtime
    gpus: int
    experts: int = 0
    ttft_limit_s: float | None = None
    tpot_limit_s: float | None = None
    deployments: list[tuple[int, int, int]] | None = None
    request_s: float | None = None


def best_system(values: dict[str, Any], hw: Hardware, rt: Runtime, gpus: int, *, experts: int = 0,
                ttft_limit_s: float | None = None, tpot_limit_s: float | None = None,
                deployments: list[tuple[int, int, int]] | None = None,
                request_s: float | None = None, where: str = "system") -> SystemPoint | None:
    """Best replica split of ``gpus`` GPUs (module docstring) for the design ``values`` (model or
    shape, precision, isl, osl, pp; as :func:`explorer.design.build_design` takes them).  Latency
    limits (seconds, p99) select the MLPerf Server semantics.  ``request_s`` overrides the
    runtime's per-request host time (0 for in-process harnesses).  None when nothing is feasible."""
    return best_systems([SystemRequest(values, hw, rt, gpus, experts, ttft_limit_s, tpot_limit_s, deployments,
                                       request_s)], where)[0]


def _scalar(v: Any) -> Any:
    """A request's value as one table cell (a one-element array, as callers pass kinds, unwrapped)."""
    return v.reshape(-1)[0] if isinstance(v, np.ndarray) and v.size == 1 else v


#: design columns that hold objects or text (kept as object arrays, as build_design takes them)
_OBJECT_COLUMNS = ("hardware", "runtime", "model", "precision")


def _table(rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Rows (one dict of cells each, the same keys) as build_design columns."""
    return {k: (np.array([r[k] for r in rows], dtype=object) if k in _OBJECT_COLUMNS
                else np.array([r[k] for r in rows])) for k in rows[0]}


def _request_s(qs: list[SystemRequest]) -> np.ndarray:
    """Each request's per-request host time override, NaN where it keeps its runtime's."""
    return np.array([np.nan if q.request_s is None else float(q.request_s) for q in qs])


def best_systems(requests: list[SystemRequest], where: str = "system") -> list[SystemPoint | None]:
    """:func:`best_system` for many systems at once: every candidate deployment of every system is
    scored in one simulator call over the concurrency grid (one per set of value keys), then the
    latency-limited ones in one rate search (:func:`explorer.sla.max_rate_within_limits`).  Rows of
    a design table are independent, so each system gets what scoring it alone gives (the choice, the
    ties -- the first deployment of the most tokens/s per GPU -- and the figures)."""
    from explorer.sla import max_rate_within_limits

    # (request, deployment) pairs that fit the system, with the design cells of each
    pairs: list[tuple[int, tuple[int, int, int], dict[str, Any]]] = []
    for qi, q in enumerate(requests):
        pp = int(q.values.get("pp", 1))
        deps = q.deployments or candidates(q.gpus, q.experts, int(q.hw.scaleup_domain), pp)
        for t, e, dp in deps:
            g = t * dp * pp
            if g > q.gpus or q.gpus % g:
                continue
            cells = {k: _scalar(v) for k, v in q.values.items()}
            cells.update(tp=t, ep=e, dp=dp, hardware=q.hw, runtime=q.rt)
            pairs.append((qi, (t, e, dp), cells))
    nb = len(MAX_BATCH_GRID)
    # saturated point of each pair: one table per set of keys (build_design needs the same columns)
    sat: list[tuple[int, float, float, float] | None] = [None] * len(pairs)  # batch, rate, per GPU, per user
    by_keys: dict[tuple[str, ...], list[int]] = {}
    for pi, (_, _, cells) in enumerate(pairs):
        by_keys.setdefault(tuple(sorted(cells)), []).append(pi)
    for members in by_keys.values():
        rows = [dict(pairs[pi][2], batch=int(b)) for pi in members for b in MAX_BATCH_GRID]
        d, tab = build_design(_table(rows), where)
        over = np.repeat(_request_s([requests[pairs[pi][0]] for pi in members]), nb)
        d["rt_request_s"] = np.where(np.isnan(over), d["rt_request_s"], over)
        r = simulate(d, tab)
        thr_all = np.where(r["feasible"], r["tokens_per_s_per_gpu"], -1.0)
        for j, pi in enumerate(members):
            thr = thr_all[j * nb:(j + 1) * nb]
            i = int(np.argmax(thr))
            if thr[i] <= 0:
                continue
            row = j * nb + i
            sat[pi] = (int(MAX_BATCH_GRID[i]), float(r["request_rate"][row]), float(thr[i]),
                       float(r["tokens_per_s_per_user"][row]))
    # latency-limited pairs: the highest rate meeting the limits, all in one search per set of keys
    limited = [pi for pi, (qi, _, _) in enumerate(pairs) if sat[pi] is not None
               and (requests[qi].ttft_limit_s is not None or requests[qi].tpot_limit_s is not None)]
    served: dict[int, tuple[float, float]] = {}  # pair -> (rate per replica, tokens/s per user)
    by_keys = {}
    for pi in limited:
        by_keys.setdefault(tuple(sorted(pairs[pi][2])), []).append(pi)
    for members in by_keys.values():
        qs = [requests[pairs[pi][0]] for pi in members]
        rows = [dict(pairs[pi][2], batch=max(int(q.rt.max_batch), sat[pi][0]))  # type: ignore[index]
                for pi, q in zip(members, qs, strict=True)]
        lim = max_rate_within_limits(
            _table(rows), np.array([sat[pi][1] for pi in members]),  # type: ignore[index]
            np.array([np.nan if q.ttft_limit_s is None else q.ttft_limit_s for q in qs]),
            np.array([np.nan if q.tpot_limit_s is None else q.tpot_limit_s for q in qs]), where,
            request_s=_request_s(qs))
        for j, pi in enumerate(members):
            served[pi] = (float(lim["request_rate"][j]),
                          float(lim["results"]["tokens_per_s_per_user"][lim["row"][j]]))
    best: list[SystemPoint | None] = [None] * len(requests)
    for pi, (qi, (t, e, dp), _) in enumerate(pairs):
        got = sat[pi]
        if got is None:
            continue
        q = requests[qi]
        g = t * dp * int(q.values.get("pp", 1))
        batch, rate, per_gpu, per_user = got[0], 0.0, got[2], got[3]
        if pi in served:  # latency-limited
            rate, per_user = served[pi]
            if rate <= 0:
                continue
            per_gpu = rate * float(_scalar(q.values["osl"])) / g
        b = best[qi]
        if b is None or per_gpu > b.tokens_per_s_per_gpu:
            best[qi] = SystemPoint(t, e, dp, g, q.gpus // g, batch, rate, per_gpu, per_gpu * q.gpus, per_user)
    return best
