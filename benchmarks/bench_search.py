"""Search quality and speed, measured against baselines from the same run.

Plain script: ``python benchmarks/bench_search.py [--front-only] [--exhaustive] [--quick] [--space ...]``.
Prints; asserts nothing about speed.

0. **Time to a true front** (issue 12): for ``quick``, ``dense-70b-h200`` and ``moe-b200``, the wall
   time of the default sweep (``explorer sweep SPACE.yaml --no-report``: the study in its journal
   file, the results table and the refinement) and its hypervolume ÷ the exhaustive front's, for the
   shipped spaces (shape trials, explorer/shapes.py) and, as the baseline in the same run, the same
   sweep with ``--trial-unit point`` (one design point per trial, the previous default).
   The exhaustive fronts: every deployment of every shape that passes the shape rules and the
   capacity band (the others are infeasible under every deployment, so this is exact).  ``quick``
   is computed in the run; ``dense-70b-h200`` (full batch ladder, exact) and ``moe-b200`` (batch
   ladder thinned to 64 geometric values, every other axis exhaustive: *not* exact) are read from
   ``benchmarks/data/<space>-front.csv`` (``--exhaustive`` recomputes and rewrites them, minutes on
   2 cores; see ``benchmarks/data/README.md``).  ``--front-only`` stops after this part.

1. The exhaustive grid of a discrete space (default: ``search_spaces/quick.yaml``, 4.06 M points)
   gives the true front and its hypervolume; its points/s on ``--workers`` processes is
   extrapolated to a 10^7-point grid.  A 10^6-point slice is also timed on one process.
2. Each sampler (tpe, nsga2, random) runs 1,000 trials on 3 seeds (in-memory storage); the
   hypervolume of its feasible front after 100/300/1,000 trials / the exhaustive hypervolume is
   printed as the median over seeds, with random as the baseline ratio, plus trials/s.  (Trials
   ``1..k`` of a 1,000-trial run are exactly a ``k``-trial run: samplers are sequential and seeded.)
3. Journal-file storage overhead per trial (random sampler, 1,000 trials) against in-memory.
4. ``pareto_mask`` on 10^6 random points.

``--quick``: one seed, 100/300 trials, and a 10^5-point slice instead of the full grid.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from explorer.frontier import hypervolume, hypervolume_history, pareto_mask  # noqa: E402
from explorer.grid import run_grid  # noqa: E402
from explorer.refine import batch_completion  # noqa: E402
from explorer.search import optimize, study_frame  # noqa: E402
from explorer.space import load_space, space_from_text  # noqa: E402
from explorer.storage import StorageSpec  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MEMORY = StorageSpec("memory", ":memory:")


def sliced(space_path: Path, batch_high: int):
    """The same space with a smaller batch range (a smaller grid)."""
    text = space_path.read_text().replace("batch: {low: 1, high: 512, log: true}",
                                          f"batch: {{low: 1, high: {batch_high}, log: true}}")
    return space_from_text(text, str(space_path))


DATA = ROOT / "benchmarks" / "data"
FRONT_SPACES = {"quick": None, "dense-70b-h200": 0, "moe-b200": 64}  # stored front's batch ladder (0: full)


def _scan_part(job):
    from explorer.shapes import Scanner

    space_path, batches, shapes = job
    space = load_space(space_path)
    sc = Scanner(space, batches=batches)
    df = sc.frame(shapes, list(range(len(shapes))))
    df = df[df["feasible"].to_numpy()]
    objs = list(space.objectives)
    return df[pareto_mask(df[objs].to_numpy(), space.directions)]


def exhaustive_front(space_path: Path, batches: int, workers: int) -> tuple[pd.DataFrame, int, float]:
    """The feasible front of every deployment (batch ladder: ``batches`` values, 0 = all) of every
    shape that passes the shape rules and capacity band.  Returns (front rows, points scored, s)."""
    import itertools
    import multiprocessing as mp

    from explorer.shapes import SHAPE_ONLY, Scanner

    space = load_space(space_path)
    t = time.perf_counter()
    sc = Scanner(space, batches=batches)
    axes = [list(space.grid[1][space.grid[0].index(k)]) for k in sc.shape_keys]
    shapes = [dict(zip(sc.shape_keys, v, strict=True)) for v in itertools.product(*axes)]
    probe = space.evaluate(sc.samples(shapes, [np.array([-1])] * len(shapes)), len(shapes), detail=False)
    good = [s for s, c in zip(shapes, probe.code, strict=True) if int(c) not in SHAPE_ONLY]
    per = max(1, 200_000 // sc.n_dep)
    jobs = [(str(space_path), batches, good[a:a + per]) for a in range(0, len(good), per)]
    with mp.get_context("fork").Pool(workers) as pool:
        parts = pool.map(_scan_part, jobs, chunksize=1)
    df = pd.concat(parts, ignore_index=True)
    objs = list(space.objectives)
    df = df[pareto_mask(df[objs].to_numpy(), space.directions)].reset_index(drop=True)
    scored = len(good) * sc.n_dep
    if batches:  # a thinned ladder: every batch value near the front, until the front stops moving
        from explorer.refine import batch_windows

        for _ in range(5):
            extra = batch_windows(space, df, ladder=batches)
            scored += len(extra)
            both = pd.concat([df, extra.drop(columns="source")], ignore_index=True)
            both = both[both["feasible"].to_numpy(dtype=bool)]
            both = both[pareto_mask(both[objs].to_numpy(), space.directions)].drop_duplicates(
                [k for k in space.searched]).reset_index(drop=True)
            if len(both) == len(df) and np.allclose(np.sort(both[objs].to_numpy(), axis=0),
                                                    np.sort(df[objs].to_numpy(), axis=0)):
                break
            df = both
    return df, scored, time.perf_counter() - t


def timed_sweep(space_path: Path, *extra: str) -> tuple[float, pd.DataFrame]:
    """Wall time of ``explorer sweep SPACE --no-report`` (in a fresh folder) and its table."""
    import contextlib
    import io

    from explorer.cli import main as cli

    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            rc = cli(["sweep", str(space_path), "--out", d, "--no-report", *extra])
        dt = time.perf_counter() - t
        assert rc == 0, rc
        # (low_memory=False: one pass over the file, so a column such as `reason` -- empty on
        # feasible rows -- gets one dtype instead of a mixed-type warning)
        return dt, pd.read_csv(Path(d) / f"{space_path.stem}.csv", low_memory=False)


def time_to_front(args) -> None:
    print("[time to a true front] default sweep (explorer sweep SPACE --no-report, journal storage) vs the "
          "same sweep with one design point per trial (--trial-unit point, the previous default)")
    rows = []
    for name, batches in FRONT_SPACES.items():
        path = ROOT / "search_spaces" / f"{name}.yaml"
        space = load_space(path)
        objs, dirs, ref = list(space.objectives), space.directions, space.hypervolume_reference()
        stored = DATA / f"{name}-front.csv"
        if batches is None or args.exhaustive or not stored.exists():
            front, scored, dt = exhaustive_front(path, batches or 0, args.workers)
            how = f"computed now: {scored:,} points of shape-feasible designs in {dt:.0f} s on {args.workers} processes"
            if batches is not None:
                DATA.mkdir(exist_ok=True)
                front.to_csv(stored, index=False)
                how += f", written to {stored.relative_to(ROOT)}"
        else:
            front = pd.read_csv(stored)
            how = f"read from {stored.relative_to(ROOT)}"
        ladder = ("full batch ladder, exact" if not batches else f"batch ladder thinned to {batches} values, then "
                  "every batch value near its front, not exact by construction; it equalled the full grid's "
                  "front on the calibrations checked, benchmarks/data/README.md")
        hv_true = hypervolume(front[objs].to_numpy(), dirs, ref)
        print(f"  {name}: exhaustive front {len(front)} points, hypervolume {hv_true:.5g} ({ladder}; {how})")
        for label, extra in (("after (shape trials)", ()), ("before (point trials)", ("--trial-unit", "point"))):
            dt, df = timed_sweep(path, *extra)
            f = df[df["feasible"]]
            share = hypervolume(f[objs].to_numpy(), dirs, ref) / hv_true
            rows.append((name, label, share, dt, len(df)))
            print(f"    {label:22s} HV share {share:.4f}  wall {dt:6.1f} s  ({len(df):,} rows)", flush=True)
    print("\n  | space | HV share before | wall before | HV share after | wall after |")
    print("  |---|---|---|---|---|")
    for name in FRONT_SPACES:
        a = next(r for r in rows if r[0] == name and r[1].startswith("after"))
        b = next(r for r in rows if r[0] == name and r[1].startswith("before"))
        print(f"  | `{name}` | {b[2]:.3f} | {b[3]:.1f} s | {a[2]:.3f} | {a[3]:.1f} s |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one seed, fewer trials, a small grid")
    ap.add_argument("--front-only", action="store_true", help="only the time-to-a-true-front table")
    ap.add_argument("--skip-front", action="store_true", help="skip the time-to-a-true-front table")
    ap.add_argument("--exhaustive", action="store_true",
                    help="recompute the stored exhaustive fronts (benchmarks/data/*-front.csv)")
    ap.add_argument("--space", default=str(ROOT / "search_spaces" / "quick.yaml"))
    ap.add_argument("--workers", type=int, default=2, help="processes for the exhaustive grid (default 2)")
    args = ap.parse_args()
    if not args.skip_front:
        time_to_front(args)
        if args.front_only:
            return 0
        print()
    seeds = [0] if args.quick else [0, 1, 2]
    budgets = [100, 300] if args.quick else [100, 300, 1000]
    space = load_space(args.space)
    if args.quick:
        space = sliced(Path(args.space), 12)
    ref = space.hypervolume_reference()
    dirs = space.directions
    objs = list(space.objectives)
    print(f"space {space.where}: {space.grid_size():,} grid points; objectives {objs}; reference {ref}")

    # 1. exhaustive grid -------------------------------------------------------------------
    g = run_grid(space, workers=args.workers)
    f = g.frame[g.frame["feasible"]]
    hv_true = hypervolume(f[objs].to_numpy(), dirs, ref)
    n_front = int((g.frame["kept"] == "front").sum()) if not g.kept_all else int(
        pareto_mask(f[objs].to_numpy(), dirs).sum())
    print(f"\n[grid] {g.total:,} points on {args.workers} process(es): {g.seconds:.1f} s = {g.points_per_s:,.0f} points/s; "
          f"feasible {g.feasible:,} ({g.feasible / g.total:.1%}); front {n_front} points; hypervolume {hv_true:.5g}")
    print(f"[grid] extrapolated 10^7 points on {args.workers} process(es): {1e7 / g.points_per_s:.0f} s "
          f"(budget: 60 s on 2 cores)")
    one = space if args.quick else sliced(Path(args.space), 128)  # 1.01 M points for quick.yaml
    t = time.perf_counter()
    g1 = run_grid(one, workers=1)
    dt = time.perf_counter() - t
    print(f"[grid] {g1.total:,}-point slice on 1 process: {dt:.1f} s = {g1.total / dt:,.0f} points/s "
          f"(x{args.workers} processes would be {1e7 / (g1.total / dt) / args.workers:.0f} s per 10^7)")

    # 2. samplers ----------------------------------------------------------------------------
    print(f"\n[samplers] hypervolume / exhaustive hypervolume, median of {len(seeds)} seed(s)")
    rows = {}
    refined: dict[str, dict[int, list[float]]] = {}
    for sampler in ("random", "tpe", "nsga2"):
        ratios = {b: [] for b in budgets}
        rates = []
        for seed in seeds:
            run = optimize(space, MEMORY, f"{sampler}-{seed}", trials=budgets[-1], sampler=sampler, seed=seed)
            df, _ = study_frame(space, run.study)
            vals = np.where(df["feasible"].to_numpy()[:, None], df[objs].to_numpy(), np.nan)
            hist = hypervolume_history(vals, dirs, ref, order=df["trial"].to_numpy())
            for b in budgets:
                ratios[b].append(hist[b - 1] / hv_true)
            rates.append(budgets[-1] / run.seconds)
            if sampler != "random":  # the sweep's pipeline: the study, then refine.py on its front
                for b in budgets:
                    part = df[df["trial"] < b]
                    both = pd.concat([part, batch_completion(space, part)], ignore_index=True)
                    fv = both[both["feasible"]][objs].to_numpy()
                    refined.setdefault(sampler, {}).setdefault(b, []).append(hypervolume(fv, dirs, ref) / hv_true)
        rows[sampler] = ({b: statistics.median(v) for b, v in ratios.items()}, statistics.median(rates))
    for sampler, per_budget in refined.items():
        rows[f"{sampler}+refine"] = ({b: statistics.median(v) for b, v in per_budget.items()}, rows[sampler][1])
    head = "  ".join(f"{b:>6d}" for b in budgets)
    print(f"  {'sampler':13s} {head}   trials/s   vs random at {budgets[-1]}")
    print("  (+refine: the trials plus explorer/refine.py's completion and polish of their front, as sweeps run)")
    base = rows["random"][0][budgets[-1]]
    for sampler, (r, rate) in rows.items():
        cells = "  ".join(f"{r[b]:6.3f}" for b in budgets)
        print(f"  {sampler:13s} {cells}   {rate:8.1f}   x{r[budgets[-1]] / base:.3f}")

    # 3. storage overhead ------------------------------------------------------------------------
    n = 300 if args.quick else 1000
    with tempfile.TemporaryDirectory() as d:
        mem = optimize(space, MEMORY, "m", trials=n, sampler="random", seed=0)
        jr = optimize(space, StorageSpec("journal", str(Path(d) / "j.journal")), "j", trials=n, sampler="random", seed=0)
    print(f"\n[storage] random sampler, {n} trials: in-memory {n / mem.seconds:,.0f} trials/s, journal file "
          f"{n / jr.seconds:,.0f} trials/s ({(jr.seconds - mem.seconds) / n * 1e3:.2f} ms/trial for the journal)")

    # 4. pareto_mask --------------------------------------------------------------------------
    rng = np.random.default_rng(0)
    pts = rng.lognormal(size=(1_000_000, 2))
    t = time.perf_counter()
    m = pareto_mask(pts, ["maximize", "maximize"])
    dt = time.perf_counter() - t
    print(f"\n[pareto_mask] 10^6 points: {dt:.3f} s ({int(m.sum())} on the front; budget 1 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
