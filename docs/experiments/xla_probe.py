"""Experiment (issue 12, item 1): what would XLA (JAX's compiler, on the CPU) buy the simulator?
Not read by the tool; needs ``pip install jax`` (not a dependency of the project).  Run it from the
repository root:

    python docs/experiments/xla_probe.py [--n 100000]

The issue names JAX "where its compile time pays off" as one way to a faster simulator; no session
had measured it.  A port of the whole engine to ``jax.numpy`` is thousands of lines, so this probe
measures the two kinds of code the engine is made of, on the benchmark's own inputs, one thread:

* **the GEMM cost** (branchy, division-heavy, ~35 % of ``simulate`` today in the compiled numba
  kernel of explorer/costs/_gemm_numba.py): :func:`explorer.costs.gemm.gemm_cost`'s formulas written
  in ``jax.numpy`` over the stacked ``(8, R, n)`` requests that ``simulate`` hands the kernel on
  benchmarks/bench_simulator.py's random mix and sweep-like tables (captured from a real run: the
  first pass of every site, where every element is costed), every branch computed (XLA has no
  per-element branches: the padding envelope and both split-K forms for every element), jitted
  per tile list.  Against the numba kernel on the same calls with nothing reused.
* **an elementwise chain** (the rest of the engine: numpy calls over columns, ~65 % of the time):
  :func:`explorer.closed_loop.closed_loop` itself, its source executed with ``np`` bound to
  ``jax.numpy`` and jitted (XLA fuses the ~60 operations into a few loops), against numpy on the
  same 12,500-row columns (the simulator's chunk).

Both report ns per element / row and the largest relative difference from numpy's figures (XLA
may reorder or fuse operations; the frozen reference's tolerance is 1e-9).  The process pins itself
to one core: unpinned, XLA spreads a fusion over the machine's threads (on 2 cores its GEMM cost read
39-44 ns/element, pinned 65-85).

Measured 2026-12-07 (seventh session; AMD EPYC, 2 cores, AVX2 without AVX-512, jax 0.10.2, numba
0.68.1), ``--n 100000``, one core:

| code | numpy / numba | XLA | max rel. diff |
|---|---:|---:|---:|
| GEMM cost, random mix (2.0 M first-pass elements, 34 calls) | numba 43.4 ns/element | 64.5 (compile 26 s) | 4.4e-16 |
| GEMM cost, sweep-like (1.0 M elements, 8 calls) | numba 56.7 | 84.9 (compile 5 s) | 3.5e-16 |
| closed_loop, 12,500 rows | numpy 42.7 ns/row | 14.0 (3.05x) | 1.7e-12 |

What it says: XLA fuses the engine's elementwise chains ~3x tighter than numpy runs them, and
loses to the numba kernel on the GEMM cost (it computes every branch for every element, where the
kernel skips the padding envelope on the ~88-98 % of elements that do not need it).  A whole
engine in ``jax.numpy`` with the GEMMs left to numba would take today's non-GEMM ~3.3 / 1.3 us a point
(random mix / sweep-like) to ~1.1 / 0.45 and leave the kernel's ~1.1-1.5 / 0.9: ~2.4 / 1.4 us,
~420k / 730k points/s, 1.8x / 1.6x today -- and still short of 10^6 (docs/speed_history.md,
seventh session).
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
if hasattr(os, "sched_setaffinity"):  # one core: XLA runs a fusion on several threads where it has them
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

import argparse  # noqa: E402
import inspect  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

jax.config.update("jax_enable_x64", True)

import bench_simulator as B  # noqa: E402

import explorer.engine.hardware_columns as hc  # noqa: E402
from explorer import allocator  # noqa: E402
from explorer import closed_loop as CL  # noqa: E402
from explorer.costs import gemm as G  # noqa: E402
from explorer.costs.gemm import MEM_SLICE_N, MIN_K_PER_SPLIT  # noqa: E402
from explorer.simulate import simulate  # noqa: E402


def xla_gemm(tms: list[float], tns: list[float], latency_s: float, epilogue: float):
    """gemm_cost's formulas (explorer/costs/gemm.py, same order of operations) over stacked
    ``(8, R, n)`` requests, every branch computed, jitted for one tile list; returns the 9 planes of
    :data:`explorer.costs.gemm.GEMM_FIELDS`."""
    tm_min = min(tms)

    def f(c, eta_c, hbm_bw, sms, msk, eta_m):
        M, N, K, ba, bw, bo, g, peak = (c[i] for i in range(8))
        rate_c = 2.0 / (peak * eta_c)
        rate_m = 1.0 / (hbm_bw * eta_m)
        mc, nc = jnp.ceil(jnp.maximum(M, 1e-9)), jnp.ceil(N)
        ksc = jnp.maximum(1.0, jnp.minimum(msk, jnp.floor(K / MIN_K_PER_SPLIT)))
        sl = jnp.maximum(g * jnp.ceil(nc / MEM_SLICE_N), 1e-9)
        s_m = jnp.minimum(jnp.maximum(jnp.ceil(sms / sl), 1.0), ksc)
        base = g * (ba * M * K + bw * K * N + bo * M * N)

        def mem_time(m):
            occ = jnp.minimum(1.0, jnp.maximum(s_m, jnp.ceil(jnp.maximum(m, 1e-9) / tm_min)) * sl / sms)
            return g * (ba * m * K + bw * K * N + bo * m * N) * rate_m / occ

        env = mem_time(M)
        env = jnp.minimum(env, mem_time(jnp.ceil(jnp.ceil(jnp.maximum(M, 1e-9)) / tm_min) * tm_min + 1.0))
        for blocks in (s_m, jnp.floor(sms / sl), jnp.ceil(sms / sl)):
            env = jnp.minimum(env, mem_time(jnp.maximum(M, (blocks - 1.0) * tm_min + 1.0)))
        mem = jnp.where(sl * s_m < sms, env, base * rate_m)
        cb = sms * K * rate_c
        best: list | None = None
        for tm, tn in zip(tms, tns, strict=True):
            tiles = jnp.maximum(jnp.ceil(nc / tn) * g * jnp.ceil(mc / tm), 1e-9)
            s = jnp.minimum(jnp.maximum(jnp.floor(sms / tiles), 1.0), ksc)
            units = tiles * s
            waves = jnp.ceil(units / sms)
            cost = waves / s * cb * (tm * tn)
            now = [cost, tiles, units, waves, jnp.full_like(cost, tm), jnp.full_like(cost, tn)]
            best = now if best is None else [jnp.where(cost < best[0], x, y) for x, y in zip(now, best, strict=True)]
        assert best is not None
        comp, tiles, units, waves, tm_b, tn_b = best
        t = jnp.maximum(comp + epilogue * (g * bo * M * N * rate_m), mem) if epilogue > 0 else jnp.maximum(comp, mem)
        t = t + latency_s
        on = (M > 0) & (g > 0)
        z = jnp.zeros_like(t)
        return jnp.stack([jnp.where(on, t, z), jnp.where(on, comp, z), jnp.where(on, mem, z),
                          jnp.where(on, 2.0 * M * N * K * g, z), jnp.where(on, base, z),
                          jnp.where(on, g * M * N / jnp.maximum(tiles * tm_b * tn_b, 1e-30), 1.0),
                          jnp.where(on, units / (waves * sms), 1.0), jnp.where(on, tiles, z), jnp.where(on, waves, z)])

    return jax.jit(f)


def first_pass_calls(design: dict, table) -> list:
    """The kernel calls of one ``simulate`` run that cost every element (no earlier call from the
    site to reuse): ``(cols (8, R, n), eta_c, keywords)``."""
    calls: list = []
    real = hc.gemm_cost_stacked

    def capture(cols, eta_c, **kw):
        memo = kw.get("memo")
        if memo is None or memo.get("cols") is None:
            calls.append((np.stack(cols).copy(), np.array(eta_c), {k: v for k, v in kw.items() if k not in ("memo", "keep")}))
        return real(cols, eta_c, **kw)

    hc.gemm_cost_stacked = capture
    try:
        simulate(design, table)
    finally:
        hc.gemm_cost_stacked = real
    return calls


def best_of(fn, repeats: int = 5) -> float:
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def probe_gemm(label: str, design: dict, table) -> None:
    calls = first_pass_calls(design, table)
    jobs = []
    for cols, eta_c, kw in calls:
        pairs = list(dict.fromkeys(zip(kw["tiles_m"], kw["tiles_n"], strict=True)))
        fn = xla_gemm([float(a) for a, _ in pairs], [float(b) for _, b in pairs], float(kw["latency_s"]),
                      float(kw["epilogue_exposed"]))
        n = cols.shape[2]
        args = tuple(jnp.asarray(a) for a in (cols, np.broadcast_to(eta_c, cols.shape[1:]), np.broadcast_to(kw["hbm_bw"], (n,)),
                                               kw["sms"], kw["max_split_k"], np.broadcast_to(kw["eta_m"], (n,))))
        jobs.append((fn, args))
    t0 = time.perf_counter()
    got = [np.asarray(fn(*args)) for fn, args in jobs]
    t_compile = time.perf_counter() - t0
    want = [G.gemm_cost_stacked(cols, eta_c, **kw, memo=None) for cols, eta_c, kw in calls]
    diff = max(float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-300))) for a, b in zip(got, want, strict=True))
    elements = sum(cols.shape[1] * cols.shape[2] for cols, _, _ in calls)
    t_xla = best_of(lambda: [fn(*args).block_until_ready() for fn, args in jobs])
    t_numba = best_of(lambda: [G.gemm_cost_stacked(cols, eta_c, **kw, memo=None) for cols, eta_c, kw in calls])
    print(f"GEMM cost, {label}: {elements:,} first-pass elements in {len(calls)} calls; XLA {t_xla / elements * 1e9:.1f} "
          f"ns/element (compile {t_compile:.1f} s), numba kernel {t_numba / elements * 1e9:.1f}; max rel. diff {diff:.1e}")


def probe_closed_loop(rows: int = 12_500) -> None:
    namespace: dict = {"np": jnp}
    exec(inspect.getsource(CL.closed_loop), namespace)  # the same source, np bound to jax.numpy
    jitted = jax.jit(namespace["closed_loop"])
    rng = np.random.default_rng(0)
    args = (rng.integers(1, 2000, rows).astype(float), rng.uniform(1, 500, rows), rng.choice([128.0, 1024.0], rows),
            rng.uniform(1e-3, 5e-2, rows), rng.uniform(1e-3, 1e-1, rows), rng.uniform(1e-2, 1.0, rows),
            rng.uniform(1, 100, rows), rng.uniform(1e-3, 6e-2, rows))
    want = CL.closed_loop(*args)
    jargs = [jnp.asarray(a) for a in args]
    got = jitted(*jargs)
    diff = max(float(np.max(np.abs(np.asarray(got[k]) - want[k]) / np.maximum(np.abs(want[k]), 1e-300))) for k in want)
    reps = 200
    t_np = best_of(lambda: [CL.closed_loop(*args) for _ in range(reps)])
    t_xla = best_of(lambda: jax.block_until_ready([jitted(*jargs) for _ in range(reps)]))
    print(f"closed_loop, {rows:,} rows: numpy {t_np / reps / rows * 1e9:.1f} ns/row, XLA {t_xla / reps / rows * 1e9:.1f} "
          f"({t_np / t_xla:.2f}x); max rel. diff {diff:.1e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000, help="rows of each benchmark table")
    args = ap.parse_args()
    allocator.keep_freed_memory()
    if not G.fast_path_available():
        sys.exit("xla_probe: the numba kernel is needed for the comparison (pip install -e .[fast])")
    made = B.make_tables(args.n)
    for key in ("mix", "sweep"):
        probe_gemm(key, *made[key])
    probe_closed_loop()


if __name__ == "__main__":
    main()
