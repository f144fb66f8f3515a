"""Batch completion: trace every batch size of the front's designs after a search.

Batch is a runtime knob, not an architecture choice: once a search has found the shapes and
deployments on the front, the throughput/interactivity curve of each is obtained by varying the
batch alone.  A sampler spends many trials rediscovering those curves (TPE in particular leaves gaps
along the front); the vectorized simulator evaluates all of them in one call.  This step takes the
distinct non-batch configurations of the feasible front and scores each at every batch value of the
space (a geometric subset when that would exceed :data:`MAX_ROWS`).  The new rows are marked
``source = "batch-sweep"`` and numbered after the study's trials; they are not Optuna trials.
Enabled per space with ``search.refine_batch: true``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from explorer.frontier import front_table
from explorer.space import Choice, FloatRange, IntRange, SearchSpace

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


def batch_completion(space: SearchSpace, df: pd.DataFrame) -> pd.DataFrame:
    """Rows for every batch value of each distinct configuration on the feasible front of ``df``
    (without the rows ``df`` already holds).  Empty when batch is not searched or nothing is feasible."""
    batches = batch_values(space)
    keys = [k for k in space.searched if k != "batch"]
    if len(batches) == 0 or not len(df) or not df["feasible"].any():
        return df.iloc[0:0].assign(source=pd.Series(dtype=object))
    front = df[front_table(df, space.objectives, "feasible").to_numpy()]
    configs = front[keys].drop_duplicates() if keys else front.iloc[:1][[]]
    n_cfg = max(len(configs), 1)
    if n_cfg * len(batches) > MAX_ROWS:  # a geometric subset of the batch values
        idx = np.unique(np.round(np.geomspace(1, len(batches), max(2, MAX_ROWS // n_cfg))).astype(int) - 1)
        batches = batches[idx]
    reps = np.repeat(np.arange(n_cfg), len(batches))
    samples = {k: configs[k].to_numpy()[reps] for k in keys}
    samples["batch"] = np.tile(batches, n_cfg)
    new = space.score(samples, len(reps))
    # drop points the search already scored
    have = pd.MultiIndex.from_frame(df[keys + ["batch"]].astype(str))
    mine = pd.MultiIndex.from_frame(new[keys + ["batch"]].astype(str))
    new = new[~mine.isin(have)].reset_index(drop=True)
    start = int(df["trial"].max()) + 1 if "trial" in df and len(df) else 0
    new.insert(0, "trial", np.arange(start, start + len(new), dtype=np.int64))
    new["source"] = "batch-sweep"
    return new
