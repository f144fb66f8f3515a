"""Pareto fronts, hypervolume and front-to-front comparison.

This module is the "frontier" stage of the pipeline (results table -> frontier -> report).  It is pure
numpy/pandas plus :mod:`moocore` for the O(n log n) non-dominance test and the exact hypervolume; it
knows nothing about the simulator, Optuna or plotting.

Conventions used throughout:

* ``values`` is an ``(n, m)`` array, one row per design point, one column per objective.
* ``directions`` is a sequence of ``m`` strings, each exactly ``"maximize"`` or ``"minimize"``.
* Dominance is Pareto dominance: ``a`` dominates ``b`` when ``a`` is at least as good on every
  objective and strictly better on at least one.  Exact duplicates do not dominate each other.
* Rows containing NaN or +/-inf are treated as failed evaluations: they are never on a front and
  never contribute hypervolume.

What this module does *not* model: measurement noise or confidence intervals (a point 0.1 % better
dominates), epsilon-dominance, objective scaling/normalisation, or any preference between
objectives.  Hypervolumes are in the raw units of the objectives, so they are only comparable
between runs that share objectives, units and reference point.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from typing import Any

import moocore
import numpy as np
import pandas as pd

__all__ = [
    "DIRECTIONS",
    "pareto_mask",
    "hypervolume",
    "hypervolume_history",
    "front_table",
    "staircase",
    "ratio_at_equal_x",
    "ratio_at_equal_y",
    "compare_fronts",
    "to_jsonable",
]

DIRECTIONS = ("maximize", "minimize")


# --------------------------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------------------------


def _as_values(values: Any, name: str = "values") -> np.ndarray:
    """Return ``values`` as a 2-D float64 array or raise ValueError."""
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be numeric, got {type(values).__name__}: {exc}") from exc
    if arr.ndim != 2:
        raise ValueError(
            f"{name} must be a 2-D array of shape (n_points, n_objectives); got shape {arr.shape}"
        )
    if arr.shape[1] == 0:
        raise ValueError(f"{name} must have at least one objective column; got shape {arr.shape}")
    return arr


def _maximise_flags(directions: Sequence[str], m: int) -> np.ndarray:
    """Validate ``directions`` against ``m`` objectives; return a bool array (True = maximize)."""
    if isinstance(directions, str):
        raise ValueError(
            f"directions must be a sequence of {m} strings, got the single string {directions!r}; "
            f"wrap it in a list, e.g. [{directions!r}]"
        )
    dirs = list(directions)
    if len(dirs) != m:
        raise ValueError(f"got {len(dirs)} directions {dirs!r} for {m} objective column(s); they must match")
    bad = [d for d in dirs if d not in DIRECTIONS]
    if bad:
        raise ValueError(f"unknown direction(s) {bad!r}; each direction must be one of {list(DIRECTIONS)}")
    return np.array([d == "maximize" for d in dirs], dtype=bool)


def _to_minimisation(arr: np.ndarray, maximise: np.ndarray) -> np.ndarray:
    """Negate maximized columns so that every objective is minimized."""
    return np.where(maximise, -arr, arr)


def _reference(reference: Any, maximise: np.ndarray) -> np.ndarray:
    m = maximise.shape[0]
    if reference is None:
        if not maximise.all():
            raise ValueError(
                "reference is required when any objective is minimized "
                "(the origin is only a sensible default when every objective is maximized)"
            )
        return np.zeros(m)
    ref = np.asarray(reference, dtype=np.float64).reshape(-1)
    if ref.shape[0] != m:
        raise ValueError(f"reference has {ref.shape[0]} coordinate(s) but there are {m} objectives")
    if not np.isfinite(ref).all():
        raise ValueError(f"reference must be finite, got {ref.tolist()}")
    return ref


# --------------------------------------------------------------------------------------------
# non-dominance and hypervolume
# --------------------------------------------------------------------------------------------


def pareto_mask(values: np.ndarray, directions: Sequence[str]) -> np.ndarray:
    """Boolean mask of the non-dominated rows of ``values``.

    Models plain Pareto dominance (see module docstring) over all ``m`` objectives.

    * Duplicated non-dominated rows: **all copies** are marked True (none of them dominates the
      other), so the mask is invariant under row permutation.
    * Rows with any NaN or +/-inf are never on the front and are ignored when deciding whether
      other rows are dominated.
    * ``n == 0`` returns an empty bool array.

    Ignores: feasibility (filter first, or use :func:`front_table`), noise and tolerances.

    Raises ValueError when ``values`` is not 2-D or ``directions`` has the wrong length or a
    string other than ``"maximize"``/``"minimize"``.
    """
    arr = _as_values(values)
    maximise = _maximise_flags(directions, arr.shape[1])
    n = arr.shape[0]
    mask = np.zeros(n, dtype=bool)
    if n == 0:
        return mask
    finite = np.isfinite(arr).all(axis=1)
    if not finite.any():
        return mask
    pts = np.ascontiguousarray(arr[finite])
    mask[finite] = moocore.is_nondominated(pts, maximise=maximise.tolist(), keep_weakly=True)
    return mask


def _useful_min_points(
    arr: np.ndarray, maximise: np.ndarray, ref: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Rows converted to minimisation, keeping only finite rows strictly better than ``ref``."""
    pts = _to_minimisation(arr, maximise)
    r = _to_minimisation(ref, maximise)
    keep = np.isfinite(pts).all(axis=1) & (pts < r).all(axis=1)
    return pts[keep], r


def hypervolume(values: np.ndarray, directions: Sequence[str], reference: Any = None) -> float:
    """Exact hypervolume dominated by ``values`` and bounded by ``reference``.

    The hypervolume is the Lebesgue measure of the region that is dominated by at least one point
    and dominates the reference point.  Dominated points add nothing.  Points that are not strictly
    better than the reference on every objective contribute nothing, and NaN/inf rows are ignored.

    ``reference=None`` means the origin and is only allowed when every direction is
    ``"maximize"``; otherwise an explicit reference of length ``m`` is required.

    Computed by :func:`moocore.hypervolume` after negating maximized objectives.  The result is in
    the product of the objectives' units; it ignores scaling, so an objective with large numbers
    dominates the value.
    """
    arr = _as_values(values)
    maximise = _maximise_flags(directions, arr.shape[1])
    ref = _reference(reference, maximise)
    pts, r = _useful_min_points(arr, maximise, ref)
    if pts.shape[0] == 0:
        return 0.0
    return float(moocore.hypervolume(np.ascontiguousarray(pts), ref=r))


class _Front2D:
    """Incrementally maintained 2-D minimisation front with its hypervolume w.r.t. ``ref``.

    The front is kept as two lists sorted by x ascending (hence y strictly descending).  Inserting
    a point costs a binary search plus the removal of the points it dominates (amortised O(1)
    removals per insertion) and a list insert.
    """

    def __init__(self, ref: np.ndarray):
        self.rx = float(ref[0])
        self.ry = float(ref[1])
        self.xs: list[float] = []
        self.ys: list[float] = []
        self.hv = 0.0

    def add(self, px: float, py: float) -> None:
        if not (px < self.rx and py < self.ry):
            return
        xs, ys = self.xs, self.ys
        # predecessor: last point with x <= px; it (weakly) dominates p iff its y <= py.
        i = bisect_right(xs, px)
        if i > 0 and ys[i - 1] <= py:
            return
        # Area of p's box [px, rx] x [py, ry] not yet covered.  Between px and the next
        # front abscissa the covered level is the predecessor's y (or ry).
        level = ys[i - 1] if i > 0 else self.ry
        start = px
        j = i
        delta = 0.0
        while j < len(xs) and ys[j] >= py:  # front points dominated by p (x >= px, y >= py)
            delta += (xs[j] - start) * (level - py)
            start, level = xs[j], ys[j]
            j += 1
        end = xs[j] if j < len(xs) else self.rx
        delta += (end - start) * (level - py)
        self.hv += delta
        xs[i:j] = [px]
        ys[i:j] = [py]


def hypervolume_history(
    values: np.ndarray,
    directions: Sequence[str],
    reference: Any = None,
    order: Any = None,
) -> np.ndarray:
    """Hypervolume of the first ``i`` points, for ``i = 1..n``: the convergence curve of a search.

    ``order`` (optional) is a length-``n`` array of sort keys giving the trial order (trial number,
    completion time, ...); rows are processed in stable ascending order of the key.  With
    ``order=None`` the row order is the trial order.  Element ``k`` of the result is the
    hypervolume of the first ``k + 1`` rows in that order, so the curve is non-decreasing and its
    last value equals :func:`hypervolume` of all rows.  ``reference`` follows the same rules as in
    :func:`hypervolume`; NaN/inf rows and rows not strictly better than the reference leave the
    curve flat.

    For 2 objectives the front is maintained incrementally (O(n log n) overall in practice;
    10,000 points take milliseconds).  For other numbers of objectives the hypervolume is
    recomputed with moocore only when a new point enters the front, which is correct but can be
    O(n) exact hypervolume calls in the worst case.
    """
    arr = _as_values(values)
    maximise = _maximise_flags(directions, arr.shape[1])
    ref = _reference(reference, maximise)
    n, m = arr.shape
    if order is not None:
        keys = np.asarray(order).reshape(-1)
        if keys.shape[0] != n:
            raise ValueError(f"order has {keys.shape[0]} entries but values has {n} rows")
        arr = arr[np.argsort(keys, kind="stable")]
    pts = _to_minimisation(arr, maximise)
    r = _to_minimisation(ref, maximise)
    ok = np.isfinite(pts).all(axis=1) & (pts < r).all(axis=1)
    out = np.zeros(n, dtype=np.float64)
    if m == 2:
        front = _Front2D(r)
        xs = pts[:, 0].tolist()
        ys = pts[:, 1].tolist()
        okl = ok.tolist()
        for k in range(n):
            if okl[k]:
                front.add(xs[k], ys[k])
            out[k] = front.hv
        return out
    current = np.empty((0, m))
    hv = 0.0
    for k in range(n):
        if ok[k]:
            p = pts[k]
            if not (current.shape[0] and (current <= p).all(axis=1).any()):
                keep = ~((p <= current).all(axis=1))
                current = np.vstack([current[keep], p[None, :]])
                hv = float(moocore.hypervolume(current, ref=r))
        out[k] = hv
    return out


def front_table(
    df: pd.DataFrame,
    objectives: Mapping[str, str],
    feasible_col: str | None = "feasible",
) -> pd.Series:
    """Mark the Pareto-front rows of a results table.

    ``objectives`` maps column name -> ``"maximize"``/``"minimize"``.  When ``feasible_col`` is not
    None only rows whose value in that column is truthy can be on the front (missing values count
    as infeasible), and infeasible rows cannot dominate feasible ones.  Rows with a NaN/inf
    objective are never on the front.  Returns a bool Series named ``"on_front"``, index-aligned
    with ``df`` (duplicate index labels are fine).

    Ignores everything in the table except the objective columns and the feasibility flag.
    """
    if not isinstance(objectives, Mapping) or not objectives:
        raise ValueError("objectives must be a non-empty mapping of column name -> 'maximize'/'minimize'")
    cols = list(objectives)
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"objective column(s) {missing} not in table; columns are {list(df.columns)}")
    directions = [objectives[c] for c in cols]
    _maximise_flags(directions, len(cols))
    eligible = np.ones(len(df), dtype=bool)
    if feasible_col is not None:
        if feasible_col not in df.columns:
            raise ValueError(
                f"feasibility column {feasible_col!r} not in table; pass feasible_col=None to treat all rows as feasible"
            )
        eligible = df[feasible_col].fillna(False).astype(bool).to_numpy()
    try:
        vals = df[cols].to_numpy(dtype=np.float64, na_value=np.nan)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"objective columns {cols} must be numeric: {exc}") from exc
    mask = np.zeros(len(df), dtype=bool)
    if eligible.any():
        mask[eligible] = pareto_mask(vals[eligible], directions)
    return pd.Series(mask, index=df.index, name="on_front", dtype=bool)


# --------------------------------------------------------------------------------------------
# comparing two 2-D fronts (x = interactivity tokens/s/user, y = throughput tokens/s/GPU)
# --------------------------------------------------------------------------------------------


def _as_xy(front_xy: Any, name: str) -> np.ndarray:
    arr = _as_values(front_xy, name)
    if arr.shape[1] != 2:
        raise ValueError(f"{name} must have exactly 2 columns (x, y); got shape {arr.shape}")
    return arr


def _positive_rows(arr: np.ndarray) -> np.ndarray:
    return arr[np.isfinite(arr).all(axis=1) & (arr > 0).all(axis=1)]


def staircase(front_xy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Attainable-throughput step function of a front (both axes maximized).

    For a required interactivity ``x`` the best attainable throughput is
    ``max(y_i for points with x_i >= x)``: a design that is faster per user can always be used when
    less speed is required.  Returns ``(xs, ys)`` with ``xs`` the distinct x values in ascending
    order and ``ys[k]`` the best throughput for any requirement in ``(xs[k-1], xs[k]]`` (for
    ``k = 0``, any requirement ``<= xs[0]``); ``ys`` is non-increasing.  Requirements above
    ``xs[-1]`` are unattainable.

    Accepts any point set, not only a front (dominated points do not change the step function).
    Rows with NaN/inf are dropped.  Ignores interpolation between designs (no mixing of
    configurations): the function is piecewise constant and left-continuous.
    """
    arr = _as_xy(front_xy, "front_xy")
    arr = arr[np.isfinite(arr).all(axis=1)]
    if arr.shape[0] == 0:
        return np.empty(0), np.empty(0)
    xs, inv = np.unique(arr[:, 0], return_inverse=True)
    best = np.full(xs.shape[0], -np.inf)
    np.maximum.at(best, inv.reshape(-1), arr[:, 1])
    ys = np.maximum.accumulate(best[::-1])[::-1]
    return xs, ys


def _staircase_at(xs: np.ndarray, ys: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Evaluate a staircase at requirements ``q``; NaN where unattainable (q > xs[-1])."""
    idx = np.searchsorted(xs, q, side="left")
    out = np.full(q.shape, np.nan)
    ok = idx < xs.shape[0]
    out[ok] = ys[idx[ok]]
    return out


def _ratio_along(a: np.ndarray, b: np.ndarray, n: int, axis: str) -> dict:
    """Ratio of attainable columns 1 of ``a`` over ``b`` at equal column 0, on a log grid."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    other = "y" if axis == "x" else "x"
    empty = {
        f"{axis}_grid": np.empty(0),
        "ratio": np.empty(0),
        "min": None,
        "median": None,
        "max": None,
        f"{axis}_at_min": None,
        f"{axis}_at_max": None,
        "overlap": False,
        "description": f"{other}_a / {other}_b at equal {axis}",
    }
    a = _positive_rows(a)
    b = _positive_rows(b)
    if a.shape[0] == 0 or b.shape[0] == 0:
        return empty
    lo = max(a[:, 0].min(), b[:, 0].min())
    hi = min(a[:, 0].max(), b[:, 0].max())
    if lo > hi:
        return empty
    grid = np.geomspace(lo, hi, n) if hi > lo else np.full(n, lo)
    if n >= 2:
        grid[0], grid[-1] = lo, hi  # exact ends, whatever rounding geomspace does
    ya = _staircase_at(*staircase(a), grid)
    yb = _staircase_at(*staircase(b), grid)
    ratio = ya / yb
    i_min = int(np.argmin(ratio))
    i_max = int(np.argmax(ratio))
    res = {
        f"{axis}_grid": grid,
        "ratio": ratio,
        "min": float(ratio[i_min]),
        "median": float(np.median(ratio)),
        "max": float(ratio[i_max]),
        f"{axis}_at_min": float(grid[i_min]),
        f"{axis}_at_max": float(grid[i_max]),
        "overlap": True,
        "description": f"{other}_a / {other}_b at equal {axis}",
    }
    return res


def ratio_at_equal_x(front_a: np.ndarray, front_b: np.ndarray, n: int = 200) -> dict:
    """Throughput ratio of front A over front B at equal interactivity ("iso-interactivity").

    ``x_grid`` is ``n`` log-spaced interactivity values from ``max(min x_a, min x_b)`` to
    ``min(max x_a, max x_b)`` (endpoints exact); ``ratio[k] = y_a(x_k) / y_b(x_k)`` with each
    ``y(x)`` the :func:`staircase` of that front.  Both staircases are defined over the whole grid.
    Also returns ``min``, ``median``, ``max`` of the ratio, ``x_at_min``, ``x_at_max`` (first grid
    point where the extreme occurs), ``overlap`` and a human ``description``.  When the x ranges do
    not overlap, ``overlap`` is False, the arrays are empty and the statistics are None.

    Only rows with finite, strictly positive x and y are used (a log grid and a ratio need them).
    Ignores everything between grid points except through the step function, and weights the
    statistics uniformly in log(x), not by how likely each interactivity target is.
    """
    a = _as_xy(front_a, "front_a")
    b = _as_xy(front_b, "front_b")
    return _ratio_along(a, b, n, "x")


def ratio_at_equal_y(front_a: np.ndarray, front_b: np.ndarray, n: int = 200) -> dict:
    """Interactivity ratio of front A over front B at equal throughput ("iso-throughput").

    :func:`ratio_at_equal_x` with the axes swapped: the grid is ``n`` log-spaced throughput values
    over the throughput range both fronts cover, the attainable interactivity for a required
    throughput ``y`` is ``max(x_i for points with y_i >= y)``, and ``ratio = x_a(y) / x_b(y)``.
    Keys are ``y_grid``, ``ratio``, ``min``, ``median``, ``max``, ``y_at_min``, ``y_at_max``,
    ``overlap`` and ``description``.  Same caveats as :func:`ratio_at_equal_x`.
    """
    a = _as_xy(front_a, "front_a")[:, ::-1]
    b = _as_xy(front_b, "front_b")[:, ::-1]
    return _ratio_along(a, b, n, "y")


def _share_dominated(p: np.ndarray, q: np.ndarray) -> float | None:
    """Share of rows of ``p`` strictly Pareto-dominated (both axes maximized) by some row of ``q``.

    A point ``(px, py)`` is dominated iff some ``q`` has ``x >= px`` and ``y > py``, or ``x > px``
    and ``y >= py``; both are read off the staircase of ``q`` (O((|p| + |q|) log |q|)).
    """
    if p.shape[0] == 0:
        return None
    if q.shape[0] == 0:
        return 0.0
    xs, ys = staircase(q)
    best_ge = _staircase_at(xs, ys, p[:, 0])  # best y among q with x >= px
    idx = np.searchsorted(xs, p[:, 0], side="right")
    best_gt = np.full(p.shape[0], np.nan)  # best y among q with x > px
    ok = idx < xs.shape[0]
    best_gt[ok] = ys[idx[ok]]
    with np.errstate(invalid="ignore"):
        dominated = (best_ge > p[:, 1]) | (best_gt >= p[:, 1])
    return float(dominated.mean())


def compare_fronts(
    values_a: np.ndarray,
    values_b: np.ndarray,
    n: int = 200,
    reference: Any = None,
) -> dict:
    """Compare two sets of (interactivity, throughput) points, both maximized.

    Each set is reduced to its Pareto front with :func:`pareto_mask`, then reports:

    * ``equal_x``: :func:`ratio_at_equal_x` (throughput A/B at equal interactivity),
    * ``equal_y``: :func:`ratio_at_equal_y` (interactivity A/B at equal throughput),
    * ``hypervolume_a``, ``hypervolume_b``, ``hypervolume_union`` w.r.t. ``reference``
      (default the origin),
    * ``dominance``: ``{"a_dominated_by_b": share of A's front points strictly dominated by a point
      of B's front, "b_dominated_by_a": vice versa}`` (None for an empty front),
    * ``n_front_a``, ``n_front_b``: front sizes.

    Returns numpy arrays inside; pass the result through :func:`to_jsonable` to serialise.
    Ignores everything except the two objectives (cost, power, accuracy must be compared
    separately).
    """
    a = _as_xy(values_a, "values_a")
    b = _as_xy(values_b, "values_b")
    dirs = ("maximize", "maximize")
    fa = a[pareto_mask(a, dirs)]
    fb = b[pareto_mask(b, dirs)]
    return {
        "equal_x": ratio_at_equal_x(fa, fb, n=n),
        "equal_y": ratio_at_equal_y(fa, fb, n=n),
        "hypervolume_a": hypervolume(fa, dirs, reference),
        "hypervolume_b": hypervolume(fb, dirs, reference),
        "hypervolume_union": hypervolume(np.vstack([fa, fb]), dirs, reference),
        "dominance": {
            "a_dominated_by_b": _share_dominated(fa, fb),
            "b_dominated_by_a": _share_dominated(fb, fa),
        },
        "n_front_a": int(fa.shape[0]),
        "n_front_b": int(fb.shape[0]),
    }


def to_jsonable(d: Any, fallback: Any = None) -> Any:
    """Recursively convert a result (dicts, lists, numpy arrays/scalars) to plain JSON types.

    numpy arrays become lists, numpy scalars Python scalars, tuples and sets lists, mapping keys
    strings, and non-finite floats (NaN, inf) become None so ``json.dumps(..., allow_nan=False)``
    works.  Other objects go to ``fallback(obj)`` when given, else raise TypeError.
    """
    if isinstance(d, Mapping):
        return {str(k): to_jsonable(v, fallback) for k, v in d.items()}
    if isinstance(d, np.ndarray):
        return [to_jsonable(v, fallback) for v in d.tolist()]
    if isinstance(d, (list, tuple, set, frozenset)):
        return [to_jsonable(v, fallback) for v in d]
    if isinstance(d, np.generic):
        d = d.item()
    if isinstance(d, float):
        return d if math.isfinite(d) else None
    if d is None or isinstance(d, (bool, int, str)):
        return d
    if fallback is not None:
        return fallback(d)
    raise TypeError(f"cannot convert {type(d).__name__} to JSON")
