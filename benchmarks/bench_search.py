"""Search quality and speed, measured against baselines from the same run.

Plain script: ``python benchmarks/bench_search.py [--quick] [--space search_spaces/quick.yaml]``.
Prints; asserts nothing about speed.

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
from explorer.refine import batch_completion
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one seed, fewer trials, a small grid")
    ap.add_argument("--space", default=str(ROOT / "search_spaces" / "quick.yaml"))
    ap.add_argument("--workers", type=int, default=2, help="processes for the exhaustive grid (default 2)")
    args = ap.parse_args()
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
