"""Collective communication times (DESIGN.md section 4).

* ring all-reduce of ``m`` bytes over ``n`` GPUs: ``2(n-1)/n * m / (bw*eta_n) + 2(n-1)*alpha``;
* all-to-all (MoE dispatch or combine) of ``m`` bytes leaving each GPU:
  ``m / (bw*eta_n) + alpha*(1 + log2 n)`` -- the latency term is an assumption (pairwise sends
  issued concurrently through the NVLink switch; log-depth synchronisation);
* point-to-point hand-off (pipeline stages): ``m / (bw*eta_n) + alpha``.

``bw`` and ``alpha`` are the scale-up (NVLink/xGMI) figures when the group fits in one domain,
else the scale-out network's.  Ignored: NVLink SHARP / one-shot in-switch reductions (they cut
the latency term; calibration absorbs part of it), congestion, and overlap with compute.
"""

from __future__ import annotations

import numpy as np


def link(group: np.ndarray, domain: np.ndarray, up_bw, up_lat, out_bw, out_lat):
    """(bandwidth bytes/s, latency s) for a group of ``group`` GPUs."""
    inside = group <= domain
    return np.where(inside, up_bw, out_bw), np.where(inside, up_lat, out_lat)


def allreduce_s(nbytes, n, bw, alpha, eta_n) -> np.ndarray:
    n = np.asarray(n, dtype=np.float64)
    t = 2.0 * (n - 1.0) / n * nbytes / (bw * eta_n) + 2.0 * (n - 1.0) * alpha
    return np.where(n > 1, t, 0.0)


def alltoall_s(nbytes, n, bw, alpha, eta_n) -> np.ndarray:
    n = np.asarray(n, dtype=np.float64)
    t = nbytes / (bw * eta_n) + alpha * (1.0 + np.log2(np.maximum(n, 1.0)))
    return np.where(n > 1, t, 0.0)


def p2p_s(nbytes, bw, alpha, eta_n) -> np.ndarray:
    return nbytes / (bw * eta_n) + alpha
