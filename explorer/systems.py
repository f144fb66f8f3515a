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


def best_system(values: dict[str, Any], hw: Hardware, rt: Runtime, gpus: int, *, experts: int = 0,
                ttft_limit_s: float | None = None, tpot_limit_s: float | None = None,
                deployments: list[tuple[int, int, int]] | None = None,
                request_s: float | None = None, where: str = "system") -> SystemPoint | None:
    """Best replica split of ``gpus`` GPUs (module docstring) for the design ``values`` (model or
    shape, precision, isl, osl, pp; as :func:`explorer.design.build_design` takes them).  Latency
    limits (seconds, p99) select the MLPerf Server semantics.  ``request_s`` overrides the
    runtime's per-request host time (0 for in-process harnesses).  None when nothing is feasible."""
    from explorer.sla import max_rate_within_limits

    limited = ttft_limit_s is not None or tpot_limit_s is not None
    pp = int(values.get("pp", 1))
    deps = deployments or candidates(gpus, experts, int(hw.scaleup_domain), pp)
    best: SystemPoint | None = None
    for t, e, dp in deps:
        g = t * dp * pp
        if g > gpus or gpus % g:
            continue
        vals = dict(values, tp=t, ep=e, dp=dp, hardware=np.array([hw], dtype=object),
                    runtime=np.array([rt], dtype=object))
        d, tab = build_design(dict(vals, batch=MAX_BATCH_GRID), where)
        if request_s is not None:
            d["rt_request_s"] = np.full_like(d["rt_request_s"], request_s)
        r = simulate(d, tab)
        thr = np.where(r["feasible"], r["tokens_per_s_per_gpu"], -1.0)
        i = int(np.argmax(thr))
        if thr[i] <= 0:
            continue
        batch, rate, per_gpu, per_user = int(MAX_BATCH_GRID[i]), 0.0, float(thr[i]), float(r["tokens_per_s_per_user"][i])
        if limited:
            sla_vals = dict(vals, batch=max(int(rt.max_batch), batch))
            lim = max_rate_within_limits(sla_vals, float(r["request_rate"][i]), ttft_limit_s, tpot_limit_s, where,
                                         request_s=request_s)
            rate = float(lim["request_rate"][0])
            if rate <= 0:
                continue
            per_gpu = rate * float(values["osl"]) / g
            per_user = float(lim["results"]["tokens_per_s_per_user"][lim["row"][0]])
        if best is None or per_gpu > best.tokens_per_s_per_gpu:
            best = SystemPoint(t, e, dp, g, gpus // g, batch, rate, per_gpu, per_gpu * gpus, per_user)
    return best
