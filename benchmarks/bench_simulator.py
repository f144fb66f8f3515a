"""Benchmark the vectorized simulator against a scalar loop measured in the same run (DESIGN.md 9:
>= 1,000,000 design points/s on one core; a scalar call well under 1 ms).

Plain script: ``python benchmarks/bench_simulator.py [--n 1000000] [--chunk 100000] [--scalar 300]
[--profile]``.  Prints rates and ratios; asserts nothing.

* vectorized: ``simulate`` on ``--n`` random design points (dense, GQA, MLA, MoE, sliding-window
  shapes on every hardware file, bf16/fp8/fp4), in chunks of ``--chunk`` rows, one process, one
  thread; with ``detail=True`` (breakdown) and ``detail=False`` (the grid's fast path).  Building
  the design table (``build_design``: text columns -> numbers) is timed separately.
* baseline: the same simulator called one row at a time (``--scalar`` rows), and ``api.evaluate``
  (what ``explorer evaluate`` runs) per call.
* ``--profile``: cProfile of ``simulate`` on 200,000 rows, top functions by own time.
* ``--floor``: the compiled GEMM kernel's cost per point (:func:`kernel_floor`): what a simulator
  that only evaluated the GEMMs it asks for could reach -- the bound a fully compiled engine
  step would still meet -- and whether that bound is under issue 12's 10⁶ points/s at all
  (:func:`floor_verdict`).
* today's code against its baseline, in the same run: every vectorized rate is also measured for
  the numpy-only path without reuse (``EXPLORER_NUMBA=0``: the compiled GEMM kernel of
  explorer/costs/gemm.py off; ``EXPLORER_REUSE=0``: every closed-loop pass recosts every GEMM),
  which is the simulator as it ran before the speed-ups of issue 12 item 1 (same numpy code;
  measured in the session that added the kernel: a frozen copy of the old simulator and the
  numpy-only path ran within noise of each other; one later speed-up has no switch and is in the
  baseline too: a table of several hardware kinds is gathered into kind order once, not once per
  kind, which made the random mix ~1.15x faster); ``--no-baseline`` skips it.
* ``--baseline REF``: the same tables, chunks and repeats through the simulator of git revision
  ``REF`` (a temporary worktree, timed in a subprocess of this run, one thread), beside each rate:
  how a change compares with the code before it, measured on the same machine at the same time
  (a one-line reason instead where it cannot run: no git checkout, an unknown revision).  That
  revision runs after today's timings, not between them, and its ratios spread by ~10 % from run to
  run (2026-12-07); ``--rounds K`` times the revision and this checkout in turn, K times each, both
  in subprocesses, and prints best and median of each side: the figure to trust for a change of a
  few percent.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import cProfile  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import pstats  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing


from explorer.api import evaluate  # noqa: E402
from explorer.costs.gemm import fast_path_available  # noqa: E402
from explorer.design import build_design  # noqa: E402
from explorer.hardware import list_hardware  # noqa: E402
from explorer.precision import parse_precision, tensor_formats_needed  # noqa: E402
from explorer.simulate import simulate  # noqa: E402

#: issue 12 item 1 and DESIGN.md 9: design points per second on one core, with the breakdown
TARGET_POINTS_PER_S = 1_000_000.0
KINDS = list_hardware()
HW_NAMES = [h.name for h in KINDS]
PRECS = ("bf16", "fp8", "fp4")
SUPPORTED = {h.name: [p for p in PRECS if tensor_formats_needed(parse_precision(p)) <= set(h.peak_flops)]
             for h in KINDS}


def random_values(rng: np.random.Generator, n: int) -> dict:
    """Random design points as build_design values (1-D arrays)."""
    hw = rng.choice(HW_NAMES, n)
    prec = np.empty(n, dtype=object)
    for name in HW_NAMES:  # per hardware kind, a supported precision
        m = hw == name
        prec[m] = rng.choice(SUPPORTED[name], int(m.sum()))
    nkv = rng.choice([1, 2, 4, 8, 16], n)
    nq = nkv * rng.choice([1, 2, 4, 8], n)
    L = rng.integers(1, 129, n)
    moe = rng.random(n) < 0.4
    E = np.where(moe, rng.choice([8, 16, 32, 64, 128, 256], n), 0)
    Fe = np.where(moe, rng.integers(256, 4097, n), 0)
    Es = np.where(moe, rng.integers(0, 2, n), 0)
    mla = rng.random(n) < 0.15
    sl = rng.random(n) < 0.2
    tp = rng.choice([1, 2, 4, 8], n)
    dp = rng.choice([1, 1, 2, 4], n)
    ep_raw = rng.choice([1, 2, 4, 8], n)
    ep = np.where(moe & ((tp * dp) % ep_raw == 0), ep_raw, 1)
    return dict(
        hardware=hw, precision=prec.astype(str), hidden=128 * rng.integers(8, 129, n), ffn=rng.integers(1024, 65537, n),
        layers=L, heads=nq, kv_heads=np.where(mla, nq, nkv), head_dim=rng.choice([64, 128], n),
        vocab=rng.integers(32000, 256001, n), gated=rng.integers(0, 2, n), tied=rng.integers(0, 2, n),
        experts=E, experts_per_token=np.where(moe, np.minimum(rng.integers(1, 9, n), np.maximum(E, 1)), 0),
        expert_ffn=Fe, shared_experts=Es, shared_expert_ffn=np.where(Es > 0, Fe, 0),
        dense_layers=np.where(moe, np.minimum(rng.integers(0, 4, n), L - 1), 0),
        kv_lora_rank=np.where(mla, 512, 0), rope_head_dim=np.where(mla, 64, 0),
        q_lora_rank=np.where(mla, 1536, 0), sliding_window=np.where(sl, 4096, 0),
        sliding_layers=np.where(sl, L // 2, 0),
        batch=rng.integers(1, 2049, n), isl=rng.choice([128, 1024, 4096, 8192], n), osl=rng.choice([128, 1024, 4096], n),
        tp=tp, pp=rng.choice([1, 2, 4], n), dp=dp, ep=ep,
    )


def sweep_values(rng: np.random.Generator, n: int) -> dict:
    """A sweep-like table: what a shape search on one hardware kind scores (quick.yaml's ranges)."""
    precision = rng.choice(["bf16", "fp8"], n)  # drawn in this order since 2026-12-01: the same table every run
    hidden = 512 * rng.integers(6, 11, n)
    values: dict = dict(
        hardware="h200", precision=precision, hidden=hidden,
        ffn=1024 * rng.integers(8, 19, n), layers=2 * rng.integers(12, 21, n), head_dim=128,
        kv_heads=rng.choice([4, 8], n), vocab=128256, batch=rng.integers(1, 513, n), tp=rng.choice([1, 2, 4, 8], n),
        isl=1024, osl=1024)
    values["heads"] = hidden // 128
    return values


def take(design: dict, i: slice | np.ndarray) -> dict:
    return {k: v[i] for k, v in design.items()}


def bench_vectorized(design: dict, table, chunk: int, detail: bool, fn=simulate) -> float:
    n = len(design["hidden"])
    t0 = time.perf_counter()
    for a in range(0, n, chunk):
        fn(take(design, slice(a, a + chunk)), table, detail=detail)
    return time.perf_counter() - t0


class numpy_only:
    """Today's code with its speed-ups off: the compiled GEMM kernel (EXPLORER_NUMBA=0) and the GEMM
    costs carried between closed-loop passes (EXPLORER_REUSE=0)."""

    SWITCHES = ("EXPLORER_NUMBA", "EXPLORER_REUSE")

    def __enter__(self):
        self.old = {k: os.environ.get(k) for k in self.SWITCHES}
        for k in self.SWITCHES:
            os.environ[k] = "0"

    def __exit__(self, *exc):
        for k, v in self.old.items():
            if v is None:
                del os.environ[k]
            else:
                os.environ[k] = v


def rates(design: dict, table, args, label: str, best: dict, key, ref: dict | None = None) -> None:
    """Best-of-repeats points/s of today's code, its numpy-only path and revision ``--baseline``'s
    (``ref``: :func:`revision_rates`)."""
    n = len(design["hidden"])
    for detail in (True, False):
        t = min(bench_vectorized(design, table, args.chunk, detail) for _ in range(args.repeats))
        best[(key, detail)] = t
        line = f"{label} detail={detail!s:5s}: {n / t:,.0f} points/s"
        if ref is not None:
            r = ref[f"{key}/{detail}"]
            line += f"  | {args.baseline} {r:,.0f} -> {n / t / r:.2f}x"
        if not args.no_baseline:
            with numpy_only():
                t_0 = min(bench_vectorized(design, table, args.chunk, detail) for _ in range(args.repeats))
            best[(key, detail, "baseline")] = t_0
            line += f"  | baseline (numpy-only path, no reuse) {n / t_0:,.0f}  -> {t_0 / t:.2f}x the baseline"
        print(line)


def make_tables(n: int) -> dict:
    """This benchmark's tables, the same every run and for every revision timed: the random mix's
    values and ``(design, table)`` (``mix``), the sweep-like ``(design, table)`` (``sweep``), the
    generator after them (``rng``: the scalar rows are drawn from it) and the seconds spent drawing
    the mix (``t_gen``) and building its design table (``t_build``)."""
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    values = random_values(rng, n)
    t1 = time.perf_counter()
    mix = build_design(values, "bench")
    t2 = time.perf_counter()
    return {"values": values, "mix": mix, "sweep": build_design(sweep_values(rng, n), "bench"), "rng": rng,
            "t_gen": t1 - t0, "t_build": t2 - t1}


def measure(n: int, chunk: int, repeats: int) -> dict[str, float]:
    """Best-of-``repeats`` points/s of ``simulate`` on :func:`make_tables`' two tables, with and
    without the breakdown: keys ``mix/True`` ... ``sweep/False``.  What :func:`revision_rates` runs
    on another revision's code."""
    made = make_tables(n)
    tables = {"mix": made["mix"], "sweep": made["sweep"]}
    import explorer.costs.gemm as gemm  # the timed revision's: load (or compile) its kernel before timing

    if hasattr(gemm, "fast_path_available"):
        gemm.fast_path_available()
    simulate(take(tables["mix"][0], slice(0, 1000)), tables["mix"][1])  # warm-up
    return {f"{key}/{detail}": n / min(bench_vectorized(d, t, chunk, detail) for _ in range(repeats))
            for key, (d, t) in tables.items() for detail in (True, False)}


#: what a revision's subprocess runs: this file's tables and timing on that revision's ``explorer``
_REVISION_SCRIPT = """
import json, sys
sys.path.insert(0, {tree!r}); sys.path.insert(1, {here!r})
import explorer  # the revision's package, before bench_simulator puts this checkout on the path
import bench_simulator as B
assert B.simulate.__module__ == "explorer.simulate" and B.simulate.__code__.co_filename.startswith({tree!r})
print("RATES " + json.dumps(B.measure({n}, {chunk}, {repeats})))
"""


def revision_rates(ref: str, n: int, chunk: int, repeats: int, rounds: int = 1) -> dict | str:
    """:func:`measure` on git revision ``ref`` of this repository, checked out in a temporary worktree
    and timed in a subprocess (one thread); a one-line reason instead where it cannot run.  With
    ``rounds > 1`` the revision and this checkout (also in a subprocess, so both run alike) are timed
    in turn, ``rounds`` times each: ``{"ref": [rates, ...], "here": [rates, ...]}`` -- what a slow or
    busy moment of the machine does to one side, it does to the next round of the other too."""
    import subprocess
    import tempfile

    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="bench-revision-") as tmp:
        tree = str(Path(tmp) / "tree")
        add = subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", tree, ref],
                             capture_output=True, text=True)
        if add.returncode != 0:
            return f"--baseline {ref} not run: {(add.stderr.strip().splitlines() or ['git worktree failed'])[-1]}"
        try:
            if rounds <= 1:
                return _tree_rates(tree, ref, n, chunk, repeats)
            out: dict[str, list] = {"ref": [], "here": []}
            for _ in range(rounds):
                for side, path in (("ref", tree), ("here", str(root))):
                    got = _tree_rates(path, ref if side == "ref" else "this checkout", n, chunk, repeats)
                    if isinstance(got, str):
                        return got
                    out[side].append(got)
            return out
        finally:
            subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", tree], capture_output=True)


def _tree_rates(tree: str, name: str, n: int, chunk: int, repeats: int) -> dict[str, float] | str:
    """:func:`measure` on the ``explorer`` package of the checkout at ``tree``, in a subprocess."""
    import subprocess

    code = _REVISION_SCRIPT.format(tree=tree, here=str(Path(__file__).resolve().parent), n=n, chunk=chunk,
                                   repeats=repeats)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tree,
                         env={**os.environ, "PYTHONPATH": tree})
    line = [ln for ln in run.stdout.splitlines() if ln.startswith("RATES ")]
    if run.returncode != 0 or not line:
        return f"--baseline: {name} failed: {(run.stderr.strip().splitlines() or ['no output'])[-1]}"
    return json.loads(line[-1][len("RATES "):])


def interleaved_report(ref: str, got: dict) -> list[str]:
    """Lines comparing this checkout with revision ``ref`` over interleaved rounds
    (:func:`revision_rates` with ``rounds > 1``): best and median points/s of each, and their ratios."""
    lines = [f"interleaved A/B, {len(got['here'])} rounds each (this checkout and {ref} in turn, each in a "
             "subprocess):"]
    for key in got["here"][0]:
        here = sorted(r[key] for r in got["here"])
        base = sorted(r[key] for r in got["ref"])
        h_med, b_med = float(np.median(here)), float(np.median(base))
        lines.append(f"  {key:12s} {ref} best {base[-1]:,.0f} median {b_med:,.0f} | this checkout best {here[-1]:,.0f} "
                     f"median {h_med:,.0f} -> {here[-1] / base[-1]:.2f}x best, {h_med / b_med:.2f}x median "
                     f"(range {here[0]:,.0f}-{here[-1]:,.0f} vs {base[0]:,.0f}-{base[-1]:,.0f})")
    return lines


def kernel_floor(label: str, design: dict, table) -> None:
    """How much of a design point the compiled GEMM kernel costs: the GEMM evaluations ``simulate``
    asks of it per point (all stacked elements, and those whose inputs moved since the site's last
    call -- the ones the kernel recomputes), its time per evaluation on the captured inputs with
    nothing reused, and so the most points/s a simulator could reach that evaluates those GEMMs and
    does nothing else.  Prints one line; needs numba."""
    import explorer.engine.hardware_columns as hc

    if not fast_path_available():
        print(f"{label}: floor needs the compiled kernel (numba)")
        return
    seen = {"all": 0, "moved": 0, "first": 0}
    calls: list = []
    real = hc.gemm_cost_stacked

    def counting(cols, eta_c, **kw):
        memo = kw.get("memo")
        prev = memo.get("cols") if memo else None
        stacked = np.stack(cols)  # (the inputs may come as a sequence of 8 planes)
        seen["all"] += stacked.shape[1] * stacked.shape[2]
        if prev is not None and prev.shape == stacked.shape:
            # (a static call's earlier inputs: M and the groups alone, the rest are the same)
            planes = [0, 6] if kw.get("static") else list(range(7))
            seen["moved"] += int(((stacked[planes] != prev[planes]).any(axis=0)).sum())
        else:  # a site's first call (the first closed-loop pass): every element is costed
            seen["moved"] += stacked.shape[1] * stacked.shape[2]
            seen["first"] += stacked.shape[1] * stacked.shape[2]
        calls.append((stacked, np.array(eta_c), {k: v for k, v in kw.items() if k not in ("memo", "keep")}))
        return real(cols, eta_c, **kw)

    hc.gemm_cost_stacked = counting
    try:
        n = len(design["hidden"])
        simulate(design, table)
    finally:
        hc.gemm_cost_stacked = real
    best = np.inf
    for _ in range(3):  # best of three: the first may pay for fresh pages
        t0 = time.perf_counter()
        for cols, eta_c, kw in calls:
            real(cols, eta_c, **kw, memo=None)
        best = min(best, time.perf_counter() - t0)
    ns = best / max(seen["all"], 1) * 1e9
    per_point = seen["moved"] / n
    ceiling = 1e9 / (per_point * ns)
    print(f"{label}: {seen['all'] / n:.1f} GEMM evaluations per point asked of the kernel, {per_point:.1f} with "
          f"moved inputs ({seen['first'] / n:.1f} of them on the first pass, where nothing can be reused); "
          f"{ns:.0f} ns per evaluation -> the kernel alone allows {ceiling:,.0f} points/s; {floor_verdict(ceiling)}")


def floor_verdict(ceiling_points_per_s: float, target_points_per_s: float = TARGET_POINTS_PER_S) -> str:
    """What the kernel's ceiling says of the target: how much of a point's time budget the GEMMs
    leave the rest of the engine, or that no engine around this kernel can reach the target."""
    budget_us = 1e6 / target_points_per_s
    gemm_us = 1e6 / ceiling_points_per_s
    if gemm_us >= budget_us:
        return (f"the GEMMs alone take {gemm_us:.2f} us of the {budget_us:.2f} us a point the "
                f"{target_points_per_s:,.0f} points/s target allows: no engine around this kernel reaches it here")
    return (f"the GEMMs take {gemm_us:.2f} us of the {budget_us:.2f} us a point the target allows, "
            f"leaving {budget_us - gemm_us:.2f} us for the rest of the engine")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--chunk", type=int, default=100_000)
    ap.add_argument("--scalar", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--no-baseline", action="store_true", help="skip the numpy-only rates")
    ap.add_argument("--baseline", metavar="REF", help="also time git revision REF's simulator on the same tables")
    ap.add_argument("--rounds", type=int, default=1,
                    help="with --baseline: time REF and this checkout in turn, ROUNDS times each, both in subprocesses, "
                         "and report best and median of each (a single --baseline run's ratio can be off by ~10 %%)")
    ap.add_argument("--floor", action="store_true",
                    help="the compiled GEMM kernel's share: evaluations per point and ns per evaluation, and the "
                         "points/s the kernel alone would allow")
    args = ap.parse_args()
    if args.rounds < 1:
        print(f"bench_simulator.py: --rounds: must be at least 1, got {args.rounds}", file=sys.stderr)
        raise SystemExit(2)
    made = make_tables(args.n)
    rng, values, t_gen, t_build = made["rng"], made["values"], made["t_gen"], made["t_build"]
    (design, table), (sweep_design, sweep_table) = made["mix"], made["sweep"]
    t0 = time.perf_counter()
    on = fast_path_available()  # imports numba and compiles the GEMM kernel, or loads it from numba's cache
    print(f"compiled GEMM kernel (numba): {'on' if on else 'off'}; loaded in {time.perf_counter() - t0:.2f} s")
    res = simulate(take(design, slice(0, 1000)), table)  # warm-up
    print(f"{args.n:,} random design points ({len(table.kinds)} hardware kinds); "
          f"generated in {t_gen:.2f} s, build_design {t_build:.2f} s = {args.n / t_build:,.0f} points/s")
    feasible = float(np.mean(simulate(take(design, slice(0, 100_000)), table)["feasible"]))
    print(f"feasible share (first 100k): {feasible:.1%}")

    ref = revision_rates(args.baseline, args.n, args.chunk, args.repeats, args.rounds) if args.baseline else None
    if isinstance(ref, str):
        print(ref)
        ref = None
    elif ref is not None and "here" in ref:
        print("\n".join(interleaved_report(args.baseline, ref)))
        ref = {k: max(r[k] for r in ref["ref"]) for k in ref["ref"][0]}  # the revision's best, beside today's
    best: dict = {}
    rates(design, table, args, f"vectorized simulate, random mix (chunks of {args.chunk:,})", best, "mix", ref)
    rates(sweep_design, sweep_table, args, "sweep-like table (one kind, dense shapes)", best, "sweep", ref)

    # baseline: one row at a time through the same simulator, and through api.evaluate
    rows = rng.choice(args.n, args.scalar, replace=False)
    one_rows = [take(design, np.array([i])) for i in rows]
    t0 = time.perf_counter()
    for r in one_rows:
        simulate(r, table)
    t_scalar = (time.perf_counter() - t0) / len(one_rows)
    with numpy_only():
        t0 = time.perf_counter()
        for r in one_rows:
            simulate(r, table)
        t_scalar0 = (time.perf_counter() - t0) / len(one_rows)
    shape_keys = ("hidden", "ffn", "layers", "heads", "kv_heads", "head_dim", "vocab", "experts",
                  "experts_per_token", "expert_ffn")
    evs: list[dict[str, Any]] = [
        dict(model=None, shape={k: int(values[k][i]) for k in shape_keys}, hardware=str(values["hardware"][i]),
             batch=int(values["batch"][i]), isl=int(values["isl"][i]), osl=int(values["osl"][i]),
             precision=str(values["precision"][i]))
        for i in rows]
    t0 = time.perf_counter()
    for e in evs:
        evaluate(**e)
    t_eval = (time.perf_counter() - t0) / len(evs)

    rate_vec = args.n / best[("mix", True)]
    print(f"scalar loop (simulate on 1-row tables, {args.scalar} rows): {t_scalar * 1e3:.3f} ms/call "
          f"-> {1 / t_scalar:,.0f} points/s")
    print(f"scalar loop, baseline (before issue 12): {t_scalar0 * 1e3:.3f} ms/call -> {1 / t_scalar0:,.0f} points/s")
    print(f"api.evaluate per call ({args.scalar} calls): {t_eval * 1e3:.3f} ms/call -> {1 / t_eval:,.0f} points/s")
    print(f"speed-up vectorized/scalar: {rate_vec * t_scalar:,.0f}x (detail=True), "
          f"{args.n / best[('mix', False)] * t_scalar:,.0f}x (detail=False)")
    tgt = TARGET_POINTS_PER_S
    print(f"target >= {tgt:,.0f} points/s: random mix detail=True {rate_vec / tgt:.2f}x of target, "
          f"detail=False {args.n / best[('mix', False)] / tgt:.2f}x; sweep-like detail=True "
          f"{args.n / best[('sweep', True)] / tgt:.2f}x, detail=False {args.n / best[('sweep', False)] / tgt:.2f}x")

    if args.floor:
        for label, d, t in (("random mix", design, table), ("sweep-like", sweep_design, sweep_table)):
            kernel_floor(label, take(d, slice(0, min(50_000, args.n))), t)
    if args.profile:
        sub = take(design, slice(0, min(200_000, args.n)))
        pr = cProfile.Profile()
        pr.enable()
        simulate(sub, table)
        pr.disable()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(15)
        print(s.getvalue())
    del res


if __name__ == "__main__":
    main()
