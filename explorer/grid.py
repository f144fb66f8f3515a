"""Exhaustive grid: every combination of a discrete search space, scored by the vectorized simulator
in chunks (no Optuna, no per-point overhead).  It gives the true front: the yardstick for every
sampler, and a mode users can run (``explorer sweep SPACE --sampler grid``).

Memory is bounded by the chunk (default 50,000 points): each chunk is decoded from flat indices
(mixed radix over the parameter axes, last axis fastest), scored, and reduced to

* counts of points by final reason code (0 = feasible),
* the chunk's feasible Pareto front (flat index + objective values),

and the chunks' fronts are merged into the global front.  What the table (and so the CSV) holds:

* grids of at most :data:`KEEP_ALL_MAX` points: **every** point (``kept = "all"``);
* larger grids: the global feasible front (``kept = "front"``) plus a uniform random sample of
  ``search.grid_sample`` points (default 20,000; seeded by ``search.seed``; ``kept = "sample"``),
  feasible or not, so plots show the cloud behind the front.  Counts of every reason over the whole
  grid come back in :attr:`GridResult.reason_counts` (the CLI writes them to ``<study>.reasons.csv``).

``trial`` is the point's flat index in the grid, so rows are comparable across runs, and the result
does not depend on the number of worker processes or on where the chunks run (this process,
``--workers`` local processes or a Dask cluster, ``--cluster``: :mod:`explorer.cluster`): the
chunks' results are merged as they finish, and neither the counts nor the front of the fronts
depends on their order (:func:`explorer.frontier.pareto_mask` keeps every copy of a
non-dominated point, so the front of a union is the front of its parts' fronts).

**Points that need no simulation.**  A point's reason code is often decided before the simulator
runs (:meth:`explorer.space.SearchSpace.classify`, the same precedence as
:meth:`~explorer.space.SearchSpace.evaluate`): a shape rule, the capacity band or the quality
limit, or a structural simulator check (format, parallel splits).  Such points are counted, never
simulated, and the counts, the front and the table are the same as when every point is simulated
(tests/test_grid_screen.py):

* *whole blocks*: the shape rules and the band depend only on the shape parameters
  (:attr:`~explorer.space.SearchSpace.screen_params`).  With the axes in file order (hardware, shape,
  deployment) the points that share the digits of every axis up to the last shape axis form blocks
  of consecutive indices; one point per block is classified (:func:`_plan`), and a chunk whose
  blocks all fail is counted from the block codes without being built or sent anywhere;
* *rows*: in the other chunks every row is classified and only the undecided rows are simulated.

**Resuming** (:mod:`explorer.grid_checkpoint`).  With ``checkpoint`` (the CLI passes
``<out>/<study>.grid-checkpoint``) each finished chunk's result is appended to the file as soon as
it arrives; an interrupted or killed run, started again on the same space and code, scores only the
chunks the file lacks.  A file of another space, code or calibration is ignored (and replaced).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from explorer.errors import SpecError
from explorer.frontier import pareto_mask
from explorer.space import SearchSpace

if TYPE_CHECKING:
    from explorer.cluster import ClusterSpec

GRID_CHUNK = 50_000  # measured: 1.35x the points/s of 200,000 (numpy temporaries stay in cache)
KEEP_ALL_MAX = 50_000


@dataclass
class GridResult:
    frame: pd.DataFrame  # kept rows; 'trial' = flat grid index; 'kept' = all | front | sample
    total: int
    feasible: int
    reason_counts: dict[int, int]  # final reason code -> points, over the whole grid
    kept_all: bool
    seconds: float
    #: Points the simulator scored (the others were classified without it: module docstring).
    simulated: int = 0
    #: Chunks scored in this run / taken from the checkpoint / counted from the block codes.
    chunks_run: int = 0
    chunks_resumed: int = 0
    chunks_skipped: int = 0

    @property
    def points_per_s(self) -> float:
        return self.total / self.seconds if self.seconds > 0 else float("inf")


def decode(space: SearchSpace, flat: np.ndarray) -> dict[str, np.ndarray]:
    """Parameter columns of the grid points with flat indices ``flat``."""
    names, values, shape = space.grid
    if not names:
        return {}
    digits = np.unravel_index(np.asarray(flat, dtype=np.int64), shape)
    return {n: v[d] for n, v, d in zip(names, values, digits, strict=True)}


@dataclass
class _Chunk:
    counts: dict[int, int]
    feasible: int
    front_idx: np.ndarray
    front_obj: np.ndarray
    simulated: int = 0


def _score_chunk(space: SearchSpace, start: int, stop: int) -> _Chunk:
    from explorer.costs.gemm import use_fast_path

    use_fast_path(stop - start)  # the compiled GEMM kernel loads as when the whole chunk was simulated
    flat = np.arange(start, stop, dtype=np.int64)
    cols = decode(space, flat)
    code = space.classify(cols, len(flat))  # decided without the simulator (module docstring)
    live = np.flatnonzero(code == 0)
    idx, obj = flat[:0], np.zeros((0, len(space.objectives)))
    if len(live):
        sub = {k: v[live] for k, v in cols.items()}
        ev = space.evaluate(sub, len(live), detail=False)  # kept rows are re-scored in full
        code[live] = ev.code
        idx, obj = flat[live[ev.feasible]], ev.objectives[ev.feasible]
    codes, counts = np.unique(code, return_counts=True)
    m = pareto_mask(obj, space.directions) if len(idx) else np.zeros(0, dtype=bool)
    return _Chunk({int(c): int(k) for c, k in zip(codes, counts, strict=True)}, len(idx), idx[m], obj[m],
                  len(live))


#: Most blocks :func:`_plan` classifies (one point each) before giving up on whole-block counts.
MAX_SCREEN_BLOCKS = 2_000_000


def _block_size(space: SearchSpace) -> int:
    """Points per block: the product of the axes after the last one :meth:`SearchSpace.classify`
    ``(structure=False)`` depends on (all points when it depends on none)."""
    names, _, shape = space.grid
    deps = space.screen_params
    last = max((i for i, n in enumerate(names) if n in deps), default=-1)
    return int(np.prod(shape[last + 1:], dtype=np.int64))


def _plan(space: SearchSpace, bounds: list[tuple[int, int]]) -> tuple[list[int], dict[int, int]]:
    """The chunks that must be scored (indices into ``bounds``) and the reason counts of all the
    others, from one classified point per block (module docstring)."""
    total = bounds[-1][1] if bounds else 0
    size = _block_size(space) if total else 1
    blocks = total // size if total else 0
    if not blocks or blocks > MAX_SCREEN_BLOCKS:
        return list(range(len(bounds))), {}
    code = np.empty(blocks, dtype=np.int64)
    for a in range(0, blocks, GRID_CHUNK):
        rep = np.arange(a, min(a + GRID_CHUNK, blocks), dtype=np.int64) * size
        code[a:a + len(rep)] = space.classify(decode(space, rep), len(rep), structure=False)
    starts = np.array([a for a, _ in bounds], dtype=np.int64)
    stops = np.array([b for _, b in bounds], dtype=np.int64)
    first, last = starts // size, (stops - 1) // size
    live_cum = np.concatenate([[0], np.cumsum(code == 0)])
    live = np.flatnonzero(live_cum[last + 1] - live_cum[first] > 0)
    dead = code != 0
    uniq, n_blocks = np.unique(code[dead], return_counts=True)
    counts = {int(c): int(k) * size for c, k in zip(uniq, n_blocks, strict=True)}
    for i in live:  # their points are counted by the chunk itself
        a, b = int(starts[i]), int(stops[i])
        blk = np.arange(first[i], last[i] + 1, dtype=np.int64)
        sel = dead[blk]
        if not sel.any():
            continue
        blk = blk[sel]
        overlap = np.minimum(b, (blk + 1) * size) - np.maximum(a, blk * size)
        for c, k in zip(code[blk].tolist(), overlap.tolist(), strict=True):
            counts[c] -= k
    return live.tolist(), {c: k for c, k in counts.items() if k}


def check_grid(space: SearchSpace) -> int:
    """Grid size, or a SpecError when the space cannot be gridded or is too large."""
    total = space.grid_size()
    limit = space.search.max_grid_points
    if total > limit:
        raise SpecError(space.where, "search.max_grid_points",
                        f"the grid has {total:,} points, more than the limit {limit:,}; narrow the ranges, add "
                        "steps, raise the limit or use a sampler (tpe, nsga2, random)")
    return total


def check_cluster(space: SearchSpace, cluster: ClusterSpec) -> None:
    """Connect to the Dask scheduler ``cluster`` and probe its workers on ``space`` (before any
    output is written; :mod:`explorer.cluster`); a SpecError names what is wrong."""
    from explorer.cluster import DaskCluster

    total = check_grid(space)
    bounds = [(a, min(a + GRID_CHUNK, total)) for a in range(0, total, GRID_CHUNK)]
    todo, _ = _plan(space, bounds)
    with DaskCluster(cluster) as c:  # the probe scores points that are simulated, when there are any
        c.check(space, _score_chunk, total, bounds[todo[0]][0] if todo else 0)


def run_grid(space: SearchSpace, *, workers: int = 1, chunk: int | None = None, progress: bool = False,
             seed: int | None = None, cluster: ClusterSpec | None = None,
             checkpoint: str | Path | None = None) -> GridResult:
    """Score the whole grid (see the module docstring for what the returned table holds); ``seed``
    (default ``search.seed``) picks the sample rows of a large grid.  The chunks run in this
    process, on ``workers`` local processes or on the Dask scheduler ``cluster``
    (:func:`explorer.cluster.map_chunks`); the result is the same either way.
    ``checkpoint``: a file that keeps every finished chunk, so that an interrupted run resumes
    (:mod:`explorer.grid_checkpoint`)."""
    from explorer.cluster import map_chunks
    from explorer.grid_checkpoint import GridCheckpoint

    t0 = time.perf_counter()
    chunk = GRID_CHUNK if chunk is None else chunk
    total = check_grid(space)
    bounds = [(a, min(a + chunk, total)) for a in range(0, total, chunk)]
    todo, counts = _plan(space, bounds)
    m = len(space.objectives)
    front_idx, front_obj = np.zeros(0, dtype=np.int64), np.zeros((0, m))
    feasible = simulated = 0

    def merge(c: _Chunk) -> np.ndarray:
        """Add a chunk's counts and front; which of its front points are on the running front.  The
        front of the fronts does not depend on the order they come in (pareto_mask keeps every copy
        of a non-dominated point), so chunks merge as they finish, in any order."""
        nonlocal front_idx, front_obj, feasible, simulated
        for k, v in c.counts.items():
            counts[k] = counts.get(k, 0) + v
        feasible += c.feasible
        simulated += c.simulated
        if not len(c.front_idx):
            return np.zeros(0, dtype=bool)
        idx = np.concatenate([front_idx, c.front_idx])
        obj = np.concatenate([front_obj, c.front_obj])
        keep = pareto_mask(obj, space.directions)
        front_idx, front_obj = idx[keep], obj[keep]
        return keep[len(idx) - len(c.front_idx):]

    ckpt = GridCheckpoint(checkpoint, space, chunk, total) if checkpoint is not None and todo else None
    bar = None
    resumed: dict[int, _Chunk] = {}
    try:
        if ckpt is not None:
            resumed = ckpt.open(set(todo), bounds)
            for c in resumed.values():
                merge(c)
        run = [i for i in todo if i not in resumed]
        bar = _bar(total, progress, sum(counts.values()))
        results = map_chunks(_score_chunk, space, [bounds[i] for i in run], workers=workers, cluster=cluster,
                             ordered=False)
        try:
            for j, c in results:
                i = run[j]
                on_front = merge(c)
                if ckpt is not None:  # only its points still on the front: the others never will be
                    ckpt.add(i, c, on_front)
                if bar is not None:
                    bar.update(bounds[i][1] - bounds[i][0])
        finally:
            results.close()  # stops the workers (or cancels the cluster's ranges) on an error or Ctrl-C
    finally:
        if bar is not None:
            bar.close()
        if ckpt is not None:
            ckpt.close()

    front = np.sort(front_idx)
    kept_all = total <= KEEP_ALL_MAX
    if kept_all:
        keep = np.arange(total, dtype=np.int64)
        label = np.full(total, "all", dtype=object)
    else:
        rng = np.random.default_rng(space.search.seed if seed is None else seed)
        sample = rng.choice(total, size=min(space.search.grid_sample, total), replace=False).astype(np.int64)
        keep = np.union1d(front, sample)
        label = np.where(np.isin(keep, front), "front", "sample").astype(object)
    frames = []
    for a in range(0, len(keep), chunk):
        part = keep[a:a + chunk]
        frames.append(space.score(decode(space, part), len(part)))
    df = pd.concat(frames, ignore_index=True) if frames else space.score(decode(space, keep), 0)
    df.insert(0, "trial", keep)
    df["kept"] = label
    return GridResult(df, total, feasible, dict(sorted(counts.items())), kept_all, time.perf_counter() - t0,
                      simulated=simulated, chunks_run=len(run), chunks_resumed=len(resumed),
                      chunks_skipped=len(bounds) - len(todo))


def _bar(total: int, enabled: bool, initial: int = 0):
    """Points scored, with rate and ETA (tqdm; stderr on a terminal only).  ``initial``: the points
    already counted (whole blocks classified without simulating, chunks resumed from the
    checkpoint), so the rate and the time left are those of the points still to score."""
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc="grid", unit="pt", unit_scale=True, file=sys.stderr,
                dynamic_ncols=True, leave=False, smoothing=0.05)
