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

3. **Batch windows**: every batch value within one step of the thinnest scan ladder
   (``search.scan_batches``) around each front point, same design otherwise (:func:`batch_windows`):
   shape trials (:mod:`explorer.shapes`) scan a thinned batch ladder, and this fills it back in
   where the front is.

When a round would exceed :data:`MAX_ROWS` rows, the batch values are thinned geometrically (ends
kept).  Of the points scored, only those on the final front are kept (the rest are dominated; the
count scored is in ``attrs["scored"]``).  New rows are marked ``source = "batch-sweep"`` (completion), ``"polish"`` or ``"batch-window"`` and numbered
after the study's trials; they are not Optuna trials.  Enabled per space with
``search.refine_batch: true`` (``explorer sweep --no-refine`` skips it).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from explorer.frontier import front_table
from explorer.shapes import discrete_values as _values
from explorer.shapes import shape_mode_possible, shared_scanner, split, thin
from explorer.space import SearchSpace

#: Most rows one round adds (bounded time and memory: about 1 s per 200k rows).
MAX_ROWS = 200_000
#: Rounds of shape polish.
POLISH_ROUNDS = 3
#: Rounds of shape polish after shape trials (one- and two-parameter steps, explorer/shapes.py scans).
SHAPE_POLISH_ROUNDS = 6


def batch_values(space: SearchSpace) -> np.ndarray:
    """Every batch value the space allows (empty when batch is fixed)."""
    return np.asarray(_values(space.params["batch"]), dtype=np.float64) if "batch" in space.params else np.zeros(0)


def _empty(df: pd.DataFrame) -> pd.DataFrame:
    return df.iloc[0:0].assign(source=pd.Series(dtype=object))


def complete_shapes(space: SearchSpace, shapes: pd.DataFrame) -> pd.DataFrame:
    """Score every deployment combination of each row of ``shapes`` (columns: the shape keys)."""
    shape_keys, deploy = split(space)
    if not len(shapes):
        return pd.DataFrame()
    grids = [_values(space.params[k]) for k in deploy]
    n_dep = int(np.prod([len(g) for g in grids])) if grids else 1
    batches = thin(batch_values(space), max(2, MAX_ROWS // (len(shapes) * n_dep)))
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


def batch_windows(space: SearchSpace, front: pd.DataFrame, ladder: int | None = None) -> pd.DataFrame:
    """Every batch value of the space near each row of ``front``: the values within one step of the
    thinnest ladder a scan used (``search.scan_batches`` values, or the completion's thinned ladder),
    for the same design.  Fills the full ladder back in where the front is, at a cost bounded by
    :data:`MAX_ROWS` (the windows are thinned when they would exceed it).  ``ladder``: the scan's
    number of batch values (default ``search.scan_batches``)."""
    full = batch_values(space)
    if len(full) < 3 or not len(front):
        return _empty(front)
    keys = [k for k in space.searched if k != "batch"]
    coarse = thin(full, min(space.search.scan_batches if ladder is None else ladder, len(full)))
    ratio = float(np.max(coarse[1:] / coarse[:-1])) if len(coarse) > 1 else 1.0
    if ratio <= 1.0:
        return _empty(front)
    base = front[keys + ["batch"]].drop_duplicates().reset_index(drop=True)
    b = base["batch"].to_numpy(dtype=float)
    lo = np.searchsorted(full, b / ratio, side="left")
    hi = np.searchsorted(full, b * ratio, side="right")
    counts = hi - lo
    total = int(counts.sum())
    if total > MAX_ROWS:  # keep windows proportionally thinner
        step = int(np.ceil(total / MAX_ROWS))
    else:
        step = 1
    idx = [np.arange(a, z, step) for a, z in zip(lo, hi, strict=True)]
    reps = np.concatenate([np.full(len(i), r) for r, i in enumerate(idx)])
    if not len(reps):
        return _empty(front)
    samples = {k: base[k].to_numpy()[reps] for k in keys}
    samples["batch"] = full[np.concatenate(idx)]
    return space.score(samples, len(reps)).assign(source="batch-window")


def _neighbours_along(space: SearchSpace, shapes: pd.DataFrame, k: str, reach: int = 1) -> pd.DataFrame:
    """Shapes up to ``reach`` steps away from each row of ``shapes`` along the shape parameter ``k``."""
    vals = _values(space.params[k])
    if len(vals) < 2:
        return shapes.iloc[0:0]
    try:
        order = sorted(vals)
    except TypeError:  # unordered choices (names): every other choice is a neighbour
        order = None
    out = []
    for _, row in shapes.iterrows():
        if order is None:
            cands = [v for v in vals if v != row[k]]
        else:
            pos = int(np.searchsorted(np.asarray(order, dtype=float), float(row[k])))
            steps = [d for r in range(1, reach + 1) for d in (-r, r)]
            cands = [order[pos + d] for d in steps if 0 <= pos + d < len(order) and order[pos + d] != row[k]]
        for v in cands:
            r = row.copy()
            r[k] = v
            out.append(r)
    return pd.DataFrame(out, columns=shapes.columns) if out else shapes.iloc[0:0]


def _neighbours(space: SearchSpace, shapes: pd.DataFrame, pairs: bool = False) -> pd.DataFrame:
    """Shapes one step away from each row of ``shapes`` along one searched shape parameter (and,
    with ``pairs``, also those one step along one parameter and up to two along another: a capacity
    band often admits a wider layer only with a narrower MLP or fewer layers)."""
    shape_keys, _ = split(space)
    parts = [_neighbours_along(space, shapes, k) for k in shape_keys]
    one = pd.concat(parts, ignore_index=True) if parts else shapes.iloc[0:0]
    if not pairs or not len(one):
        return one
    two = pd.concat([_neighbours_along(space, one, k, reach=2) for k in shape_keys], ignore_index=True)
    both = pd.concat([one, two], ignore_index=True)
    return both[~_key(both, shape_keys).isin(list(_key(shapes, shape_keys)))]


def _key(frame: pd.DataFrame, cols: list[str]) -> pd.Index:
    return pd.MultiIndex.from_frame(frame[cols].astype(float).astype(str)) if cols else pd.Index([""] * len(frame))


def _shape_polish(space: SearchSpace, df: pd.DataFrame, shapes: pd.DataFrame,
                  polish: bool) -> tuple[list[pd.DataFrame], int]:
    """Shape trials (explorer/shapes.py): polish with the trials' scanner, moving one *or two* shape
    parameters one step (a capacity band often admits a wider layer only with fewer layers), shapes
    outside the band cost one probe each; rounds while new shapes reach the front (at most
    :data:`SHAPE_POLISH_ROUNDS`), then complete the final front's shapes on the full ladder.
    Returns the parts and the points scanned (a scan keeps only each shape's own front)."""
    shape_keys, _ = split(space)
    scanner = shared_scanner(space)
    parts: list[pd.DataFrame] = []
    scanned = 0
    seen = set(_key(shapes, shape_keys))
    front_shapes = shapes
    if polish:
        for _ in range(SHAPE_POLISH_ROUNDS):
            nb = _neighbours(space, front_shapes, pairs=True).drop_duplicates()
            nb = nb[~_key(nb, shape_keys).isin(list(seen))] if len(nb) else nb
            if not len(nb):
                break
            seen |= set(_key(nb, shape_keys))
            cand = nb.to_dict("records")
            rows = scanner.frame(cand, [0] * len(cand))
            scanned += sum(scanner.n_dep if r.feasible or r.rep >= 0 else 1 for r in scanner.scan(cand))
            parts.append(rows.drop(columns="trial").assign(source="polish"))
            allrows = pd.concat([df] + parts, ignore_index=True)
            new_front = allrows[front_table(allrows, space.objectives, "feasible").to_numpy()][shape_keys]
            new_front = new_front.drop_duplicates()
            if _key(new_front, shape_keys).isin(list(_key(front_shapes, shape_keys))).all():
                break
            front_shapes = new_front
    parts.append(complete_shapes(space, front_shapes).assign(source="batch-sweep"))
    return parts, max(scanned, 1)


def batch_completion(space: SearchSpace, df: pd.DataFrame, polish: bool = True) -> pd.DataFrame:
    """Rows of deployment completion (and, with ``polish``, shape polish) for the front of ``df``,
    without the points ``df`` already holds, numbered after its last trial."""
    keys = list(space.searched)
    shape_keys, deploy = split(space)
    if not len(df) or not df["feasible"].any() or (len(batch_values(space)) == 0 and not deploy):
        return _empty(df)
    front = df[front_table(df, space.objectives, "feasible").to_numpy()]
    shapes = front[shape_keys].drop_duplicates()
    extra_scored = 0
    if space.search.trial_unit == "shape" and shape_mode_possible(space):
        parts, extra_scored = _shape_polish(space, df, shapes, polish)
    else:
        parts = [complete_shapes(space, shapes).assign(source="batch-sweep")]
    seen = set(_key(shapes, shape_keys))
    if polish and shape_keys and not extra_scored:
        for _ in range(POLISH_ROUNDS):
            allrows = pd.concat([df] + parts, ignore_index=True)
            f = allrows[front_table(allrows, space.objectives, "feasible").to_numpy()][shape_keys].drop_duplicates()
            nb = _neighbours(space, f).drop_duplicates()
            nb = nb[~_key(nb, shape_keys).isin(list(seen))] if len(nb) else nb
            if not len(nb):
                break
            seen |= set(_key(nb, shape_keys))
            parts.append(complete_shapes(space, nb).assign(source="polish"))
    allrows = pd.concat([df] + parts, ignore_index=True)
    parts.append(batch_windows(space, allrows[front_table(allrows, space.objectives, "feasible").to_numpy()]))
    new = pd.concat(parts, ignore_index=True)
    have = pd.MultiIndex.from_frame(df[keys].astype(str))
    new = new[~pd.MultiIndex.from_frame(new[keys].astype(str)).isin(have)]
    new = new.drop_duplicates(keys).reset_index(drop=True)
    scored = len(new) + extra_scored
    # keep only what reaches the final front: the rest is dominated and would only bloat the table
    both = pd.concat([df, new], ignore_index=True)
    on = front_table(both, space.objectives, "feasible").to_numpy()[len(df):]
    new = new[on].reset_index(drop=True)
    new.attrs["scored"] = scored
    start = int(df["trial"].max()) + 1 if "trial" in df and len(df) else 0
    new.insert(0, "trial", np.arange(start, start + len(new), dtype=np.int64))
    return new
