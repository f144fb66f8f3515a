"""Shape trials (``search.trial_unit: shape``): Optuna samples a model *shape*, the vectorized
simulator scores it under every deployment at once.

A shape's deployment set (batch, tp, pp, ep, dp, precision, runtime, hardware, ... every searched
parameter of ``deployment:`` and ``hardware``) is the Cartesian product of their values, with the
batch ladder thinned geometrically to ``search.scan_batches`` values (ends kept; the refinement
of the front, :mod:`explorer.refine`, fills the full ladder back in around the front).  One trial:

1. a *probe*: the shape under one deployment.  The space's shape rules (codes 101-105) and the
   capacity band (110, 111) depend on the shape alone and come first in the reason order, so a
   shape that fails them fails under every deployment: the trial is told the probe's values and
   constraints and nothing else is scored;
2. otherwise the whole deployment set in one call (``detail=False``), and the shape's own feasible
   Pareto front.  The trial is told, per objective, the best value on that front (the shape's two
   extremes, for the default objectives) with every constraint 0; a shape no deployment of which is
   feasible is told its least-violating deployment's values and constraints.

The rows kept in the results table are each shape's own feasible front (the global front is a
subset of their union, so it is exactly the front of every scored row), or the probe / least
violating row of an infeasible shape, rebuilt by re-scanning the study's trials
(:func:`frame`) like point trials are re-scored.  Scans do not depend on how shapes are grouped
into calls (rows are scored independently), so a study's table does not depend on ``--workers``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import product
from typing import Any

import numpy as np
import pandas as pd

from explorer.dashboard_attrs import trial_attrs
from explorer.frontier import pareto_mask
from explorer.space import DEPLOY_KEYS, Choice, FloatRange, IntRange, SearchSpace

#: Shape-only reason codes (shape rules and the capacity band): fail one deployment, fail all.
SHAPE_ONLY = (101, 102, 103, 104, 105, 110, 111)
#: Most points per simulator call (bounded memory).
MAX_POINTS = 200_000


def discrete_values(p) -> list:
    """The values a parameter takes on a grid (choices, int steps, stepped floats); [] for a float
    range without a step."""
    if isinstance(p, Choice):
        return list(p.choices)
    if isinstance(p, IntRange) or (isinstance(p, FloatRange) and p.step):
        return list(p.values())
    return []


def thin(values: np.ndarray, n: int) -> np.ndarray:
    """At most ``n`` of sorted ``values``, geometrically spaced, ends kept."""
    if len(values) <= n:
        return values
    idx = np.unique(np.round(np.geomspace(1, len(values), max(2, n))).astype(int) - 1)
    return values[idx]


def split(space: SearchSpace) -> tuple[list[str], list[str]]:
    """(shape keys, deployment keys) among the searched parameters; batch is neither (it is the
    deployment ladder).  A continuous deployment parameter (a float range without a step) cannot be
    enumerated and stays with the shape keys (it is sampled)."""
    keys = [k for k in space.searched if k != "batch"]
    deploy = [k for k in keys if k in DEPLOY_KEYS + ("hardware",) and len(discrete_values(space.params[k])) > 0]
    return [k for k in keys if k not in deploy], deploy


def shape_mode_possible(space: SearchSpace) -> bool:
    """Whether trials can be shapes: some parameter to sample and some deployment to enumerate."""
    shape_keys, deploy = split(space)
    has_batch = "batch" in space.searched and len(discrete_values(space.params["batch"])) > 0
    return bool(shape_keys) and (bool(deploy) or has_batch)


@dataclass
class ShapeResult:
    """What one shape's scan tells its trial, and which of its rows the table keeps."""

    objectives: list[float]
    constraints: dict[str, float]
    feasible: bool
    keep: np.ndarray  # indices into the deployment table, or [-1] for the probe row
    front_points: int
    rep: int  # the row the dashboard attributes describe (first objective's best front row)
    #: the trial's dashboard attributes (explorer/dashboard_attrs.py), from the scan's own score of
    #: row ``rep`` (before 2026-12-01 that row was simulated a second time per trial: 8 ms each)
    attrs: dict[str, Any] = field(default_factory=dict)


class Scanner:
    """Scores shapes over the space's deployment set (the batch ladder thinned to ``batches``
    values; ``None``: ``search.scan_batches``; ``0``: the full ladder)."""

    def __init__(self, space: SearchSpace, batches: int | None = None):
        self.space = space
        self.shape_keys, self.deploy_keys = split(space)
        n = space.search.scan_batches if batches is None else batches
        full = (np.asarray(discrete_values(space.params["batch"]), dtype=np.float64)
                if "batch" in space.searched else np.zeros(0))
        self.batches = full if n == 0 else thin(full, n)
        axes = [discrete_values(space.params[k]) for k in self.deploy_keys]
        combos = list(product(*axes)) if axes else [()]
        nb = max(len(self.batches), 1)
        self.dep: dict[str, np.ndarray] = {}
        for i, k in enumerate(self.deploy_keys):
            col = np.asarray([c[i] for c in combos], dtype=object)
            self.dep[k] = np.repeat(col, nb)
        if len(self.batches):
            self.dep["batch"] = np.tile(self.batches, len(combos))
        self.n_dep = len(combos) * nb
        self.cache: dict[tuple, ShapeResult] = {}

    def key(self, shape: dict[str, Any]) -> tuple:
        return tuple(shape[k] for k in self.shape_keys)

    def samples(self, shapes: list[dict[str, Any]], rows: list[np.ndarray]) -> dict[str, np.ndarray]:
        """Sample columns for the deployment rows ``rows[i]`` (-1: the probe) of each shape ``i``."""
        reps = np.concatenate([np.full(len(r), i) for i, r in enumerate(rows)]) if rows else np.zeros(0, int)
        idx = np.concatenate(rows) if rows else np.zeros(0, int)
        idx = np.where(idx < 0, 0, idx).astype(np.int64)
        out: dict[str, np.ndarray] = {}
        for k in self.shape_keys:
            col = np.asarray([s[k] for s in shapes], dtype=object)
            out[k] = col[reps]
        for k, v in self.dep.items():
            out[k] = v[idx]
        return out

    def scan(self, shapes: list[dict[str, Any]]) -> list[ShapeResult]:
        """Scan ``shapes`` (cached by shape: a repeated shape is not scored again)."""
        todo: dict[tuple, dict[str, Any]] = {}
        for s in shapes:
            k = self.key(s)
            if k not in self.cache:
                todo.setdefault(k, s)
        if todo:
            self._scan(list(todo.values()))
        return [self.cache[self.key(s)] for s in shapes]

    def _scan(self, shapes: list[dict[str, Any]]) -> None:
        space = self.space
        keys = space.constraint_keys()
        probe = space.evaluate(self.samples(shapes, [np.array([-1])] * len(shapes)), len(shapes), detail=False)
        good = [i for i in range(len(shapes)) if int(probe.code[i]) not in SHAPE_ONLY]
        bad = [i for i in range(len(shapes)) if int(probe.code[i]) in SHAPE_ONLY]  # rejected by the probe
        bad_attrs = trial_attrs(space, probe.take(np.array(bad, dtype=np.int64))) if bad else []
        for i, attrs in zip(bad, bad_attrs, strict=True):
            self.cache[self.key(shapes[i])] = ShapeResult(
                probe.objectives[i].tolist(), {k: float(probe.constraints[k][i]) for k in keys}, False,
                np.array([-1]), 0, -1, attrs)
        per_call = max(1, MAX_POINTS // self.n_dep)
        for a in range(0, len(good), per_call):
            part = [shapes[i] for i in good[a:a + per_call]]
            full = np.arange(self.n_dep)
            ev = space.evaluate(self.samples(part, [full] * len(part)), len(part) * self.n_dep, detail=False)
            done: list[ShapeResult] = []
            for j, s in enumerate(part):
                sl = slice(j * self.n_dep, (j + 1) * self.n_dep)
                feas = ev.feasible[sl]
                obj = ev.objectives[sl]
                if feas.any():
                    fi = np.flatnonzero(feas)
                    m = pareto_mask(obj[fi], space.directions)
                    keep = fi[m]
                    best = [float(obj[keep, c].max() if d == "maximize" else obj[keep, c].min())
                            for c, d in enumerate(space.directions)]
                    first = obj[keep, 0]
                    rep = int(keep[np.argmax(first) if space.directions[0] == "maximize" else np.argmin(first)])
                    res = ShapeResult(best, dict.fromkeys(keys, 0.0), True, keep, int(len(keep)), rep)
                else:
                    viol = np.zeros(self.n_dep)
                    for k in keys:
                        viol += np.maximum(np.asarray(ev.constraints[k][sl], dtype=np.float64), 0.0)
                    r = int(np.argmin(viol))
                    res = ShapeResult(obj[r].tolist(), {k: float(ev.constraints[k][sl][r]) for k in keys}, False,
                                      np.array([r]), 0, r)
                self.cache[self.key(s)] = res
                done.append(res)
            # every shape's dashboard attributes from its representative row, as scored here
            reps = np.array([j * self.n_dep + d.rep for j, d in enumerate(done)], dtype=np.int64)
            for d, attrs in zip(done, trial_attrs(space, ev.take(reps)), strict=True):
                d.attrs = attrs

    def frame(self, shapes: list[dict[str, Any]], trials: list[int]) -> pd.DataFrame:
        """The results table of the shapes' kept rows, ``trial`` = the trial number of each shape."""
        results = self.scan(shapes)
        rows = [r.keep for r in results]
        n = int(sum(len(r) for r in rows))
        tr = np.concatenate([np.full(len(r), t, dtype=np.int64) for r, t in zip(rows, trials, strict=True)]) \
            if rows else np.zeros(0, dtype=np.int64)
        parts = []
        start = 0
        # chunks of whole shapes, so memory stays bounded on large studies
        while start < len(shapes):
            stop, size = start, 0
            while stop < len(shapes) and (size == 0 or size + len(rows[stop]) <= MAX_POINTS):
                size += len(rows[stop])
                stop += 1
            parts.append(self.space.score(self.samples(shapes[start:stop], rows[start:stop]), size))
            start = stop
        df = pd.concat(parts, ignore_index=True) if parts else self.space.score(self.samples([], []), 0)
        assert len(df) == n
        df.insert(0, "trial", tr)
        return df


_SHARED: list[Scanner] = []


def shared_scanner(space: SearchSpace) -> Scanner:
    """This process's scanner of ``space`` (the same object): the trial loop, the results table and
    the refinement of one sweep scan each shape once.  One slot: another space replaces it."""
    if not _SHARED or _SHARED[0].space is not space:
        _SHARED[:] = [Scanner(space)]
    return _SHARED[0]
