"""Deployment completion: after a search, score every deployment of the front's model shapes.

A model shape is the expensive decision the search explores; its deployment (batch, tensor /
pipeline / expert parallelism, number format, hardware kind) is cheap to enumerate with the
vectorized simulator.  Once the search has found the shapes on the front, this step scores each of
them under every deployment value combination the space allows, in one call: batch is a runtime
knob that traces each design's throughput/interactivity curve, and a sampler spends many trials
rediscovering those curves (TPE leaves gaps along the front).  When the full product would exceed
:data:`MAX_ROWS`, the batch values are thinned geometrically; if that is not enough, only the batch
is completed for each front configuration.  The new rows are marked ``source = "batch-sweep"``
and numbered after the study's trials; they are not Optuna trials.  Enabled per space with
``search.refine_batch: true``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from explorer.frontier import front_table
from explorer.space import DEPLOY_KEYS, Choice, FloatRange, IntRange, SearchSpace

#: Most rows one completion adds (bounded time and memory: ~1 s per 200k rows).
MAX_ROWS = 200_000


def batch_values(space: SearchSpace) -> np.ndarray:
    """Every batch value the space allows (empty when batch is fixed)."""
    p = space.params.get("batch")
    if isinstance(p, IntRange):
        return p.values()
    if isinstance(p, FloatRange) and p.step:
        return p.values()
    if isinstance(p, Choice):
        return np.array(sorted(float(c) for c in p.choices))
    return np.zeros(0)


def _values(p) -> np.ndarray | list:
    if isinstance(p, Choice):
        return list(p.choices)
    if isinstance(p, IntRange) or (isinstance(p, FloatRange) and p.step):
        return p.values()
    return []


def _thin(values: np.ndarray, n: int) -> np.ndarray:
    """At most ``n`` of sorted ``values``, geometrically spaced, ends kept."""
    if len(values) <= n:
        return values
    idx = np.unique(np.round(np.geomspace(1, len(values), max(2, n))).astype(int) - 1)
    return values[idx]


def batch_completion(space: SearchSpace, df: pd.DataFrame) -> pd.DataFrame:
    """Rows for every deployment of each distinct model shape on the feasible front of ``df`` (see the
    module docstring), without the rows ``df`` already holds.  Empty when nothing is feasible or no
    deployment knob is searched."""
    batches = batch_values(space)
    keys = list(space.searched)
    deploy = [k for k in keys if k in DEPLOY_KEYS + ("hardware",) and k != "batch" and len(_values(space.params[k])) > 0]
    shape_keys = [k for k in keys if k not in deploy and k != "batch"]
    if not len(df) or not df["feasible"].any() or (len(batches) == 0 and not deploy):
        return df.iloc[0:0].assign(source=pd.Series(dtype=object))
    front = df[front_table(df, space.objectives, "feasible").to_numpy()]
    shapes = front[shape_keys].drop_duplicates() if shape_keys else front.iloc[:1][[]]
    grids = [list(_values(space.params[k])) for k in deploy]
    n_dep = int(np.prod([len(g) for g in grids])) if grids else 1
    n_b = max(len(batches), 1)
    if len(shapes) * n_dep * 2 <= MAX_ROWS:  # every deployment of every front shape
        batches = _thin(batches, MAX_ROWS // (len(shapes) * n_dep)) if len(batches) else batches
        mesh = np.meshgrid(*[np.arange(len(g)) for g in grids], indexing="ij") if grids else []
        combos = {k: np.asarray(g, dtype=object)[m.ravel()] for k, g, m in zip(deploy, grids, mesh, strict=True)}
        base = shapes.reset_index(drop=True)
        n_c = n_dep
        configs = pd.DataFrame({k: np.repeat(base[k].to_numpy(), n_c) for k in shape_keys})
        for k, v in combos.items():
            configs[k] = np.tile(v, len(base))
    else:  # too many: only the batch of each front configuration
        configs = front[[k for k in keys if k != "batch"]].drop_duplicates().reset_index(drop=True)
        batches = _thin(batches, MAX_ROWS // max(len(configs), 1))
    n_b = max(len(batches), 1)
    reps = np.repeat(np.arange(len(configs)), n_b)
    samples = {k: configs[k].to_numpy()[reps] for k in configs.columns}
    if len(batches):
        samples["batch"] = np.tile(batches, len(configs))
    for k in keys:  # a key with one value everywhere (e.g. shape search without batch)
        samples.setdefault(k, front[k].to_numpy()[np.zeros(len(reps), dtype=int)])
    new = space.score(samples, len(reps))
    # drop points the search already scored
    have = pd.MultiIndex.from_frame(df[keys].astype(str))
    mine = pd.MultiIndex.from_frame(new[keys].astype(str))
    new = new[~mine.isin(have)].drop_duplicates(keys).reset_index(drop=True)
    start = int(df["trial"].max()) + 1 if "trial" in df and len(df) else 0
    new.insert(0, "trial", np.arange(start, start + len(new), dtype=np.int64))
    new["source"] = "batch-sweep"
    return new
