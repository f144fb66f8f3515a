"""Benchmark explorer.frontier against a pure-numpy baseline measured in the same run.

Plain script: ``python benchmarks/bench_frontier.py [--n 1000000] [--repeats 5]``.  Prints timings;
asserts nothing about speed (only that the two front computations agree).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from explorer.frontier import hypervolume, hypervolume_history, pareto_mask  # noqa: E402

MAX2 = ["maximize", "maximize"]


def numpy_front_2d(values: np.ndarray) -> np.ndarray:
    """Baseline: sort-based 2-D front (both maximized), same semantics as pareto_mask.

    Sort by x descending, then y descending.  A point is on the front iff it has the best y of its
    x-group (so all exact duplicates of a front point are kept) and that y beats every y seen at a
    strictly larger x.
    """
    x, y = values[:, 0], values[:, 1]
    order = np.lexsort((-y, -x))
    xs, ys = x[order], y[order]
    n = len(xs)
    start = np.ones(n, dtype=bool)
    start[1:] = xs[1:] != xs[:-1]
    group_first = np.maximum.accumulate(np.where(start, np.arange(n), 0))
    group_best = ys[group_first]
    run_max = np.maximum.accumulate(ys)
    prev_max = np.full(n, -np.inf)
    has_prev = group_first > 0
    prev_max[has_prev] = run_max[group_first[has_prev] - 1]
    on = (ys == group_best) & (ys > prev_max)
    mask = np.zeros(n, dtype=bool)
    mask[order] = on
    return mask


def best_of(fn, repeats: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=1_000_000, help="points for pareto_mask")
    ap.add_argument("--n-hv", type=int, default=10_000, help="points for hypervolume")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)

    print(f"numpy {np.__version__}; best of {args.repeats} runs each")

    for label, values in [
        ("uniform", rng.random((args.n, 2))),
        ("anti-correlated (large front)", _anticorrelated(rng, args.n)),
        ("integer grid (ties)", rng.integers(0, 1000, size=(args.n, 2)).astype(float)),
    ]:
        t_ours, mask = best_of(lambda v=values: pareto_mask(v, MAX2), args.repeats)
        t_base, base = best_of(lambda v=values: numpy_front_2d(v), args.repeats)
        agree = bool(np.array_equal(mask, base))
        print(
            f"pareto_mask  {label:30s} n={args.n:>9,d}  front={int(mask.sum()):>6,d}  "
            f"moocore {t_ours:7.4f} s ({args.n / t_ours / 1e6:6.2f} M pts/s)  "
            f"numpy-sort {t_base:7.4f} s ({args.n / t_base / 1e6:6.2f} M pts/s)  "
            f"speedup x{t_base / t_ours:5.2f}  agree={agree}"
        )
        if not agree:
            raise SystemExit("pareto_mask and the numpy baseline disagree")

    for label, values in [
        ("uniform", rng.random((args.n_hv, 2))),
        ("anti-correlated (large front)", _anticorrelated(rng, args.n_hv)),
    ]:
        t_hv, hv = best_of(lambda v=values: hypervolume(v, MAX2), args.repeats)
        t_hist, hist = best_of(lambda v=values: hypervolume_history(v, MAX2), args.repeats)
        print(
            f"hypervolume  {label:30s} n={args.n_hv:>9,d}  hv={hv:.6f}  {t_hv * 1e3:8.3f} ms   "
            f"hypervolume_history {t_hist * 1e3:8.3f} ms  (last == hv: {np.isclose(hist[-1], hv, rtol=1e-9)})"
        )
    values3 = rng.random((args.n_hv, 3))
    t_hv3, hv3 = best_of(lambda: hypervolume(values3, ["maximize"] * 3), args.repeats)
    print(
        f"hypervolume  {'uniform, 3 objectives':30s} n={args.n_hv:>9,d}  hv={hv3:.6f}  {t_hv3 * 1e3:8.3f} ms"
    )


def _anticorrelated(rng: np.random.Generator, n: int) -> np.ndarray:
    """Points near the line x + y = 1: a large share of them is on the front."""
    x = rng.random(n)
    return np.column_stack([x, 1.0 - x - 0.01 * rng.random(n)])


if __name__ == "__main__":
    main()
