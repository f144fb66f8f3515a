"""Front-level agreement between predicted and measured serving curves.

Per-point errors say how far each prediction is from its measurement; a user reads a *front*:
which deployment wins at the interactivity they need.  A front can be right with every point 10 %
off (the same 10 %) and wrong with every point 5 % off (in opposite directions for two close
contenders).  So for every group of measured points a user would draw on one chart -- the same
model, GPU and workload (ISL/OSL); every runtime, precision, parallelism and concurrency measured
there -- this module compares the two fronts directly:

* **dominance pairs**: pairs of points where the measurements say one is better on both axes
  (tokens/s/user and tokens/s/GPU at least as high, one of them higher by more than
  :data:`TOLERANCE`); the predictions *agree* (same winner, same rule), *flip* (the other point
  wins) or call it a *tie* (neither dominates: the predicted points trade off);
* **front membership**: of the measured front's points (those no other measured point dominates),
  the share the predicted front also has (*recall*), and of the predicted front's points the share
  on the measured front (*precision*);
* **relative error**: for every pair of points on a chart, how far the predicted ratio of their
  figures is from the measured one, ``|(p_i / p_j) / (m_i / m_j) - 1|`` per axis -- what a
  comparison of two designs (the question co-design asks) gets wrong, which is less than two
  independent point errors where the errors are shared.

What it ignores: points that were not measured (a front drawn from measured curves is only as dense
as the concurrencies run) and the distance between fronts (the per-point errors hold that).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

#: Relative margin one axis must clear for a measured (or predicted) point to dominate another:
#: InferenceX repeat runs of one configuration differ by a few percent (its derived-throughput note:
#: +0.0 to +4.4 % between two measures of the same run), so closer pairs are not counted as won.
TOLERANCE = 0.02
#: the two axes of a point, in the order of the (x, y) pairs
AXES = ("tok_s_user", "tok_s_gpu")


def dominance(x: np.ndarray, y: np.ndarray, tol: float = TOLERANCE) -> np.ndarray:
    """``d[i, j]`` True where point i dominates point j: ``x_i >= x_j`` and ``y_i >= y_j``, and one of
    them larger by more than the relative margin ``tol``."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    ge = (x[:, None] >= x[None, :]) & (y[:, None] >= y[None, :])
    gt = (x[:, None] > x[None, :] * (1.0 + tol)) | (y[:, None] > y[None, :] * (1.0 + tol))
    return ge & gt


def front_mask(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Points no other point dominates (no margin: the plain Pareto front of the group)."""
    return np.asarray(~dominance(x, y, 0.0).any(axis=0))


def agreement(measured: np.ndarray, predicted: np.ndarray, tol: float = TOLERANCE) -> dict[str, Any]:
    """Agreement of one group: ``measured`` and ``predicted`` are ``(n, 2)`` arrays of
    (tokens/s/user, tokens/s/GPU) for the same n design points."""
    m = np.asarray(measured, dtype=np.float64)
    p = np.asarray(predicted, dtype=np.float64)
    dm = dominance(m[:, 0], m[:, 1], tol)
    dp = dominance(p[:, 0], p[:, 1], tol)
    pairs = int(dm.sum())
    agree = int((dm & dp).sum())
    flip = int((dm & dp.T).sum())
    fm, fp = front_mask(m[:, 0], m[:, 1]), front_mask(p[:, 0], p[:, 1])
    both = int((fm & fp).sum())
    i, j = np.triu_indices(len(m), 1)
    e = p / m  # predicted / measured per point and axis
    ratio = np.abs(e[i] / e[j] - 1.0)  # (p_i/p_j) / (m_i/m_j) - 1, one row per pair
    return {"points": int(len(m)), "pairs": pairs, "agree": agree, "flip": flip, "tie": pairs - agree - flip,
            "front_measured": int(fm.sum()), "front_predicted": int(fp.sum()), "front_both": both,
            "ratio_errors": {AXES[0]: ratio[:, 0], AXES[1]: ratio[:, 1]}}


def _shares(c: Mapping[str, int]) -> dict[str, Any]:
    out: dict[str, Any] = dict(c)
    out["agree_share"] = c["agree"] / c["pairs"] if c["pairs"] else None
    out["flip_share"] = c["flip"] / c["pairs"] if c["pairs"] else None
    out["front_recall"] = c["front_both"] / c["front_measured"] if c["front_measured"] else None
    out["front_precision"] = c["front_both"] / c["front_predicted"] if c["front_predicted"] else None
    return out


def summarize(points: Sequence[Mapping[str, Any]], tol: float = TOLERANCE) -> dict[str, Any]:
    """Agreement over groups of design points: each point a mapping with ``group`` and the measured
    and predicted ``tok_s_user``/``tok_s_gpu`` (keys ``measured`` and ``predicted``: pairs (x, y)).
    Returns the totals with shares and ``by_group``; groups of one point count no pairs."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for pt in points:
        groups.setdefault(str(pt["group"]), []).append(pt)
    total = {"points": 0, "pairs": 0, "agree": 0, "flip": 0, "tie": 0, "front_measured": 0,
             "front_predicted": 0, "front_both": 0}
    by_group: dict[str, Any] = {}
    ratios: dict[str, list[np.ndarray]] = {a: [] for a in AXES}
    for name in sorted(groups):
        g = groups[name]
        a = agreement(np.array([pt["measured"] for pt in g], dtype=np.float64),
                      np.array([pt["predicted"] for pt in g], dtype=np.float64), tol)
        for axis, v in a.pop("ratio_errors").items():
            ratios[axis].append(v)
        by_group[name] = _shares(a)
        for k in total:
            total[k] += a[k]
    out = _shares(total)
    out["ratio_error"] = {}
    for axis, parts in ratios.items():
        v = np.concatenate(parts) if parts else np.zeros(0)
        out["ratio_error"][axis] = {"pairs": int(len(v)),
                                    "median": float(np.median(v)) if len(v) else None,
                                    "p90": float(np.percentile(v, 90)) if len(v) else None}
    out["groups"] = len(groups)
    out["tolerance"] = tol
    out["by_group"] = by_group
    return out


def curve_points(rows: Sequence[Mapping[str, Any]], predicted: Mapping[str, float] | None = None) -> list[dict]:
    """Design points of curve case rows (``validate``'s JSON rows with ``front``): one per row id
    that has both tokens/s/user and tokens/s/GPU supported.  ``predicted`` (case id -> value)
    replaces the rows' predictions (held-out ones, say)."""
    pts: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r.get("kind") != "curve" or not r.get("supported") or r["metric"] not in ("tok_s_user", "tok_s_gpu"):
            continue
        pid = r["id"].rsplit(":", 1)[0]
        pred = r["predicted"] if predicted is None else predicted.get(r["id"])
        if pred is None or r.get("measured") is None or not r.get("front"):
            continue
        pt = pts.setdefault(pid, {"group": r["front"], "m": {}, "p": {}})
        pt["m"][r["metric"]], pt["p"][r["metric"]] = float(r["measured"]), float(pred)
    return [{"group": v["group"], "measured": (v["m"]["tok_s_user"], v["m"]["tok_s_gpu"]),
             "predicted": (v["p"]["tok_s_user"], v["p"]["tok_s_gpu"])}
            for v in pts.values() if len(v["m"]) == 2 and len(v["p"]) == 2]
