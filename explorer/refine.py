"""Refining a search's front with the vectorized simulator: deployment completion and shape polish.

A model shape is the expensive decision a search explores; its deployment (batch, tensor /
pipeline / expert parallelism, number format, hardware kind) is cheap to enumerate.  After the
Optuna study, two steps, each one vectorized simulator call per round:

1. **Deployment completion**: every distinct model shape on the feasible front is scored under
   every deployment combination the space allows.  Batch is a runtime knob that traces each
   design's throughput/interactivity curve; a sampler spends many trials rediscovering those curves
   (TPE leaves gaps along the front).
2. **Shape polish**: the shapes next to each front shape (one searched shape parameter moved one
   step of its range or choice list) get the same completion; repeated while new shapes reach the
   front, at most :data:`POLISH_ROUNDS` rounds.  A local search around the sampler's best shapes.

When a round would exceed :data:`MAX_ROWS` rows, the batch values are thinned geometrically (ends
kept).  Of the points scored, only those on the final front are kept (the rest are dominated; the
count scored is in ``attrs["scored"]``).  New rows are marked ``source = "batch-sweep"`` (completion) or ``"polish"`` and numbered
after the study's trials; they are not Optuna trials.  Enabled per space with
``search.refine_batch: true`` (``explorer sweep --no-refine`` skips it).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from explorer.frontier import front_table
from explorer.space import DEPLOY_KEYS, Choice, FloatRange, IntRange, SearchSpace

#: Most rows one round adds (bounded time and memory: about 1 s per 200k rows).
MAX_ROWS = 200_000
#: Rounds of shape polish.
POLISH_ROUNDS = 3


def _values(p) -> list:
    if isinstance(p, Choice):
        return list(p.choices)
    if isinstance(p, IntRange) or (isinstance(p, FloatRange) and p.step):
        return list(p.values())
    return []


def batch_values(space: SearchSpace) -> np.ndarray:
    """Every batch value the space allows (empty when batch is fixed)."""
    return np.asarray(_values(space.params["batch"]), dtype=np.float64) if "batch" in space.params else np.zeros(0)


def _thin(values: np.ndarray, n: int) -> np.ndarray:
    """At most ``n`` of sorted ``values``, geometrically spaced, ends kept."""
    if len(values) <= n:
        return values
    idx = np.unique(np.round(np.geomspace(1, len(values), max(2, n))).astype(int) - 1)
    return values[idx]


def _split(space: SearchSpace) -> tuple[list[str], list[str]]:
    """(shape keys, deployment keys) among the searched parameters."""
    keys = [k for k in space.searched if k != "batch"]
    deploy = [k for k in keys if k in DEPLOY_KEYS + ("hardware",) and len(_values(space.params[k])) > 0]
    return [k for k in keys if k not in deploy], deploy


def _empty(df: pd.DataFrame) -> pd.DataFrame:
    return df.iloc[0:0].assign(source=pd.Series(dtype=object))


def complete_shapes(space: SearchSpace, shapes: pd.DataFrame) -> pd.DataFrame:
    """Score every deployment combination of each row of ``shapes`` (columns: the shape keys)."""
    shape_keys, deploy = _split(space)
    if not len(shapes):
        return pd.DataFrame()
    grids = [_values(space.params[k]) for k in deploy]
    n_dep = int(np.prod([len(g) for g in grids])) if grids else 1
    batches = _thin(batch_values(space), max(2, MAX_ROWS // (len(shapes) * n_dep)))
    base = shapes.reset_index(drop=True)
    mesh = np.meshgrid(*[np.arange(len(g)) for g in grids], indexing="ij") if grids else []
    n_b = max(len(batches), 1)
    reps = np.repeat(np.arange(len(base)), n_dep * n_b)
    samples = {k: base[k].to_numpy()[reps] for k in shape_keys}
    for k, g, m in zip(deploy, grids, mesh, strict=True):
        samples[k] = np.tile(np.repeat(np.asarray(g, dtype=object)[m.ravel()], n_b), len(base))
    if len(batches):
        samples["batch"] = np.tile(batches, len(base) * n_dep)
    return space.score(samples, len(reps))


def _neighbours(space: SearchSpace, shapes: pd.DataFrame) -> pd.DataFrame:
    """Shapes one step away from each row of ``shapes`` along one searched shape parameter."""
    shape_keys, _ = _split(space)
    out = []
    for k in shape_keys:
        vals = _values(space.params[k])
        if len(vals) < 2:
            continue
        try:
            order = sorted(vals)
        except TypeError:  # unordered choices (names): every other choice is a neighbour
            order = None
        for _, row in shapes.iterrows():
            if order is None:
                cands = [v for v in vals if v != row[k]]
            else:
                pos = int(np.searchsorted(np.asarray(order, dtype=float), float(row[k])))
                cands = [order[i] for i in (pos - 1, pos + 1) if 0 <= i < len(order) and order[i] != row[k]]
            for v in cands:
                r = row.copy()
                r[k] = v
                out.append(r)
    return pd.DataFrame(out, columns=shapes.columns) if out else shapes.iloc[0:0]


def _key(frame: pd.DataFrame, cols: list[str]) -> pd.Index:
    return pd.MultiIndex.from_frame(frame[cols].astype(float).astype(str)) if cols else pd.Index([""] * len(frame))


def batch_completion(space: SearchSpace, df: pd.DataFrame, polish: bool = True) -> pd.DataFrame:
    """Rows of deployment completion (and, with ``polish``, shape polish) for the front of ``df``,
    without the points ``df`` already holds, numbered after its last trial."""
    keys = list(space.searched)
    shape_keys, deploy = _split(space)
    if not len(df) or not df["feasible"].any() or (len(batch_values(space)) == 0 and not deploy):
        return _empty(df)
    front = df[front_table(df, space.objectives, "feasible").to_numpy()]
    shapes = front[shape_keys].drop_duplicates()
    parts = [complete_shapes(space, shapes).assign(source="batch-sweep")]
    seen = set(_key(shapes, shape_keys))
    if polish and shape_keys:
        for _ in range(POLISH_ROUNDS):
            allrows = pd.concat([df] + parts, ignore_index=True)
            f = allrows[front_table(allrows, space.objectives, "feasible").to_numpy()][shape_keys].drop_duplicates()
            nb = _neighbours(space, f).drop_duplicates()
            nb = nb[~_key(nb, shape_keys).isin(list(seen))] if len(nb) else nb
            if not len(nb):
                break
            seen |= set(_key(nb, shape_keys))
            parts.append(complete_shapes(space, nb).assign(source="polish"))
    new = pd.concat(parts, ignore_index=True)
    have = pd.MultiIndex.from_frame(df[keys].astype(str))
    new = new[~pd.MultiIndex.from_frame(new[keys].astype(str)).isin(have)]
    new = new.drop_duplicates(keys).reset_index(drop=True)
    scored = len(new)
    # keep only what reaches the final front: the rest is dominated and would only bloat the table
    both = pd.concat([df, new], ignore_index=True)
    on = front_table(both, space.objectives, "feasible").to_numpy()[len(df):]
    new = new[on].reset_index(drop=True)
    new.attrs["scored"] = scored
    start = int(df["trial"].max()) + 1 if "trial" in df and len(df) else 0
    new.insert(0, "trial", np.arange(start, start + len(new), dtype=np.int64))
    return new
