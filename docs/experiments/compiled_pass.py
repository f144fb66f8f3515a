"""Experiment (issue 12, item 1): how fast would the simulator's closed-loop fixed point be if each
row's passes ran as compiled scalar code?  Not read by the tool; run it from the repository root:

    python docs/experiments/compiled_pass.py [--n 200000]

What it does.  ``compiled_rows`` reproduces :func:`explorer.simulate.simulate`'s closed-loop passes
for the *common dense path only* -- dense shapes, one hardware kind, closed loop, no speculative
decoding, ``dp = pp = 1``, no serving front end, no context batching wait, no attention-DP
balance, no sliding window, no MLA, tensor-parallel groups inside one scale-up domain (it refuses
other tables) -- as one numba function per row: the same formulas, written per element in the
same order of operations, the GEMMs of a pass costed in registers (the tile scan of
explorer/costs/_gemm_numba.py) and carried to the next pass where their token count did not
move.  It takes ``_prepare``'s per-row columns (computed by numpy, once per call, as today) and
returns tokens/s/GPU, tokens/s/user and TTFT.  The script checks that these agree with
``simulate`` on the benchmark's sweep-like table (benchmarks/bench_simulator.py) and times both.

Why it is not the simulator: it covers one path.  Shipping it means every mechanism of the step
(MoE routing and all-to-all, speculative drafts, attention DP, batch wait, front end, open loop,
disaggregation, pipeline hand-offs, sliding windows, MLA) written once in this form, with the
numpy versions deleted -- the plan in docs/speed_history.md.  This measures what that plan buys
on the table where it is most likely to reach issue 12's 10^6 points/s.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numba
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from explorer.costs.comm import CUSTOM_ALLREDUCE_LATENCY_S, collective_terms, protocols_of  # noqa: E402
from explorer.costs.gemm import MEM_SLICE_N, MIN_K_PER_SPLIT  # noqa: E402
from explorer.design import build_design  # noqa: E402
from explorer.engine.constants import ALLREDUCE_BYTES, CUSTOM_ALLREDUCE_MAX_GPUS, EMBED_BYTES  # noqa: E402
from explorer.simulate import FIXED_POINT_ITERATIONS, _prepare, simulate  # noqa: E402

NJIT = dict(cache=False, nogil=True, error_model="numpy", fastmath=False)


@numba.njit(**NJIT)
def _mem_time(m, g, k, n, ba, bw, bo, rm, sm_, tmn, sl, sms):
    blocks = np.ceil(max(m, 1e-9) / tmn)
    occ = min(1.0, max(sm_, blocks) * sl / sms)
    return g * (ba * m * k + bw * k * n + bo * m * n) * rm / occ


@numba.njit(**NJIT)
def gemm_time(m, nn, k, ba, bw, bo, rate_c, rate_m, sms, msk, tms, tns, latency, epi):
    """One GEMM's time_s as explorer/costs/_gemm_numba.py ``kernel`` computes it (groups = 1)."""
    if not m > 0:
        return 0.0
    g = 1.0
    mc = np.ceil(max(m, 1e-9))
    nc = np.ceil(nn)
    ksc = max(1.0, min(msk, np.floor(k / MIN_K_PER_SPLIT)))
    base_bytes = g * (ba * m * k + bw * k * nn + bo * m * nn)
    slices = max(g * np.ceil(nc / MEM_SLICE_N), 1e-9)
    s_m = min(max(np.ceil(sms / slices), 1.0), ksc)
    memory_s = base_bytes * rate_m
    tm_min = tms[0]
    for j in range(1, tms.shape[0]):
        tm_min = min(tm_min, tms[j])
    if slices * s_m < sms:
        env = _mem_time(m, g, k, nn, ba, bw, bo, rate_m, s_m, tm_min, slices, sms)
        k_now = np.ceil(np.ceil(max(m, 1e-9)) / tm_min)
        env = min(env, _mem_time(k_now * tm_min + 1.0, g, k, nn, ba, bw, bo, rate_m, s_m, tm_min, slices, sms))
        for q in range(3):
            blocks = s_m if q == 0 else (np.floor(sms / slices) if q == 1 else np.ceil(sms / slices))
            mm = max(m, (blocks - 1.0) * tm_min + 1.0)
            env = min(env, _mem_time(mm, g, k, nn, ba, bw, bo, rate_m, s_m, tm_min, slices, sms))
        memory_s = env
    compute_base = sms * k * rate_c
    best_c = 0.0
    for j in range(tms.shape[0]):
        tm, tn = tms[j], tns[j]
        tiles = (np.ceil(nc / tn) * g) * np.ceil(mc / tm)
        tiles = max(tiles, 1e-9)
        if tiles >= sms:
            c = np.ceil(tiles / sms)
        else:
            s = min(max(np.floor(sms / tiles), 1.0), ksc)
            c = np.ceil(tiles * s / sms) / s
        c = c * compute_base
        c = c * (tm * tn)
        if j == 0 or c < best_c:
            best_c = c
    if epi > 0:
        t = max(best_c + epi * (g * bo * m * nn * rate_m), memory_s)
    else:
        t = max(best_c, memory_s)
    return t + latency + 0.0


@numba.njit(**NJIT)
def _pad_whole(b, step, max_batch):
    small = 4.0 if b > 2.0 else (2.0 if b > 1.0 else 1.0)
    st = max(step, 1.0)
    stepped = np.ceil(b / st) * st
    padded = small if b <= 4.0 else max(stepped, b)
    if step > 0 and b <= max_batch and b > 0:
        return min(padded, max(max_batch, b))
    return b


@numba.njit(**NJIT)
def graph_padded(b, step, max_batch):
    lo, hi = np.floor(b), np.ceil(b)
    w = b - lo
    return (1.0 - w) * _pad_whole(max(lo, min(b, 1.0)), step, max_batch) + w * _pad_whole(hi, step, max_batch)


@numba.njit(**NJIT)
def allreduce_time(nbytes, t, ring, nvls, custom_on, up_bw, eta_n):
    """The step's tensor-parallel all-reduce: NCCL's best ring protocol or NVLS (inside one
    domain), then the runtime's custom kernel where it is faster (explorer/engine/layer_step.py)."""
    if not t > 1:
        return 0.0
    best = np.inf
    share = 2.0 * (t - 1.0) / max(t, 1.0)
    for k in range(ring.shape[0]):
        best = min(best, ring[k, 0] + share * nbytes / ring[k, 1])
    if nvls[2] > 0:
        best = min(best, nvls[0] + nbytes / nvls[1])
    out = best + 0.0
    if custom_on:
        rate = 1.0 / (up_bw * eta_n)
        one = CUSTOM_ALLREDUCE_LATENCY_S + (t - 1.0) * nbytes * rate
        two = 2.0 * CUSTOM_ALLREDUCE_LATENCY_S + 2.0 * (t - 1.0) / max(t, 1.0) * nbytes * rate
        out = min(out, min(one, two))
    return out


@numba.njit(**NJIT)
def compiled_rows(X, ring, nvls, tms, tns, latency, epi, passes, out):
    """Every row's closed-loop operating point (see the module docstring).  ``X`` is the (field, row)
    table of :func:`columns`; ``out`` gets tokens/s/GPU, tokens/s/user, TTFT per row."""
    n = X.shape[1]
    Mprev = np.empty(10)
    Tprev = np.empty(10)
    stage = np.empty(2)
    tg = np.empty(5)
    parts = np.empty(5)  # the decode step's gemm, attention, moe, comm, overhead (the breakdown)
    for i in range(n):
        H = X[0, i]
        t = X[1, i]
        n_in = X[2, i]
        nq_loc = X[3, i]
        d = X[4, i]
        g = X[5, i]
        F = X[6, i]
        V = X[7, i]
        kv_loc = X[8, i]
        b_kv = X[9, i]
        b_a = X[10, i]
        b_w = X[11, i]
        isl = X[12, i]
        osl = X[13, i]
        Ls = X[14, i]
        kpl = X[15, i]
        wd = X[16, i]
        mixed = X[17, i]
        max_tok = X[18, i]
        g_step = X[19, i]
        g_max = X[20, i]
        rt_step = X[21, i]
        rt_seq = X[22, i]
        rt_req = X[23, i]
        rt_attn = X[24, i]
        custom = X[25, i]
        poll = X[26, i]
        clients = X[27, i]
        b_cap = X[28, i]
        peak = X[29, i]
        peak_attn = X[30, i]
        eta_c = X[31, i]
        eta_m = X[32, i]
        hbm_bw = X[33, i]
        sms = X[34, i]
        msk = X[35, i]
        launch = X[36, i]
        eta_n = X[37, i]
        up_bw = X[38, i]
        rate_c = 2.0 / (peak * eta_c)
        rate_m = 1.0 / (hbm_bw * eta_m)
        S_eff = (1.0 - 0.0) * (isl + osl / 2.0) + 0.0 * (isl + osl / 2.0)
        fl_prompt = 2.0 * isl * (isl / 2.0) * nq_loc * (2.0 * d)
        custom_on = custom > 0 and t > 1 and t <= CUSTOM_ALLREDUCE_MAX_GPUS
        for k in range(10):
            Mprev[k] = -1.0
        b_cap9 = max(b_cap, 1e-9)
        b_step = max(min(clients, max(b_cap, 1.0)), 1e-9)
        n_pf = max(1.0, b_step / max(osl - 1.0, 1.0))
        tpot = ttft = rate = 0.0
        for _ in range(passes):
            b = b_step
            b_tok = graph_padded(b, g_step, g_max)
            budget = max((max_tok - b) if mixed > 0 else max_tok, 1.0)
            npf = max(n_pf, 1.0)
            Q = min(npf * isl, budget)
            for plan in range(2):
                if plan == 0:
                    m_dec, n_pre, m_attn = b_tok, 0.0 * b, b
                else:
                    m_dec = b_tok if mixed > 0 else 0.0
                    n_pre = Q / isl
                    m_attn = b if mixed > 0 else 0.0
                M = m_dec + n_pre * isl
                req = ((M, n_in, H, b_w, b_a), (M, H, nq_loc * d, b_w, b_a), (M, g * F / t, H, b_w, b_a),
                       (M, H, F / t, b_w, b_a), (m_dec + n_pre, V / t, H, EMBED_BYTES, 4.0))
                for r in range(5):
                    mm, nn, kk, bw_, bo = req[r]
                    slot = 5 * plan + r
                    if mm == Mprev[slot]:
                        tg[r] = Tprev[slot]
                    else:
                        tg[r] = gemm_time(mm, nn, kk, b_a, bw_, bo, rate_c, rate_m, sms, msk, tms, tns, latency, epi)
                        Mprev[slot], Tprev[slot] = mm, tg[r]
                fl_d = 4.0 * m_attn * S_eff * nq_loc * d
                by_d = m_attn * S_eff * kv_loc * b_kv
                fl_p = n_pre * fl_prompt
                by_p = n_pre * isl * kv_loc * (b_kv + 2.0 * b_a)
                attn_c = (fl_d + fl_p) / (peak_attn * eta_c * rt_attn)
                attn_m = (by_d + by_p) / (hbm_bw * eta_m * rt_attn)
                t_attn = max(attn_c, attn_m)
                t_ar = allreduce_time(M * H * ALLREDUCE_BYTES, t, ring, nvls, custom_on, up_bw, eta_n)
                t_gemm = tg[0] + tg[1] + wd * (tg[2] + tg[3]) + 0.0 * (0.0 + 0.0)
                t_moe = 0.0 * (0.0 + 0.0 + 0.0 + 0.0 + 0.0)
                t_comm = 2.0 * t_ar + 0.0 * 0.0
                gemm = Ls * t_gemm + tg[4]
                overhead = Ls * (kpl * launch) + launch
                stage[plan] = 0 + gemm + Ls * t_attn + Ls * t_moe + Ls * t_comm + overhead
                if plan == 0:
                    parts[0], parts[1], parts[2], parts[3], parts[4] = gemm, Ls * t_attn, Ls * t_moe, Ls * t_comm, overhead
            host = rt_step + rt_seq * b * 1.0
            T_dec = 1.0 * stage[0] + (1.0 - 1.0) * 0.0 + host
            T_pre = 1.0 * stage[1] + (1.0 - 1.0) * 0.0 + host
            tau = (max(T_pre - T_dec, 0.0) if mixed > 0 else T_pre) * isl / Q
            chunk_steps = max(1.0, np.ceil(npf * isl / Q - 1e-9))
            busy = min(max(b - 1.0, 0.0), 1.0)
            if mixed > 0:
                own = chunk_steps * T_dec + npf * isl / Q * (T_pre - T_dec)
            else:
                own = chunk_steps * T_pre
            Ts = 0.5 * busy * T_dec * poll + own + rt_req
            rate_max = Q / isl / max(T_pre, 1e-30) if mixed > 0 else np.inf
            T_full = T_pre if mixed > 0 else T_dec
            # closed loop (explorer/closed_loop.py), one engine
            C = clients
            n_dec = max(osl - 1.0, 0.0)
            Bq = Ts + n_dec * T_dec + C * tau
            a = tau * Ts
            disc = np.sqrt(max(Bq * Bq - 4.0 * a * C, 0.0))
            rate_free = 2.0 * C / max(Bq + disc, 1e-300)
            full = rate_free > rate_max
            if full:
                rate_free = rate_max
                tpot_free = T_full
            else:
                tpot_free = T_dec / max(1.0 - rate_free * tau, 1e-12)
            b_free = rate_free * n_dec * tpot_free
            capped = b_free > b_cap9 and n_dec > 0
            tpot_cap = T_dec + b_cap9 * tau / max(n_dec, 1.0)
            if rate_max < np.inf:
                tpot_cap = min(tpot_cap, T_full)
            tpot = (tpot_cap if capped else tpot_free) if n_dec > 0 else T_dec
            decode_s = n_dec * tpot
            rate = b_cap9 / max(decode_s, 1e-30) if capped else rate_free
            bb = b_cap9 if capped else b_free
            cycle = C / max(rate, 1e-300)
            ttft = max(cycle - decode_s, Ts)
            share = decode_s / max(cycle, 1e-300)
            seen = b_cap9 if capped else min(1.0 + max(C - 1.0, 0.0) * share, max(b_cap9, 1.0))
            b_step = max(seen, 1e-9)
            n_pf = rate * tpot
            bb = bb + 0.0
        out[0, i] = rate * osl * 1.0 / t
        out[1, i] = 1.0 / tpot
        out[2, i] = ttft
        # the breakdown (simulate's t_*_s columns, detail=True), from the last pass's decode step
        out[3, i] = 1.0 * parts[0]
        out[4, i] = 1.0 * parts[1]
        out[5, i] = 1.0 * parts[2]
        out[6, i] = 1.0 * parts[3] + (1.0 - 1.0) * 0.0
        out[7, i] = 1.0 * parts[4] + host
        out[8, i] = tpot - T_dec


FIELDS = ("H", "t", "n_in", "nq_loc", "d", "g", "F", "V", "kv_loc", "b_kv", "b_a", "b_w", "isl", "osl", "Ls",
          "kernels_per_layer", "wd", "rt_mixed", "rt_max_tokens", "rt_graph_step", "rt_graph_max", "rt_step",
          "rt_per_seq", "rt_request", "rt_attention", "rt_custom_ar", "poll")


def columns(design, table):
    """``_prepare`` (numpy, once per call) and the per-row fields :func:`compiled_rows` reads."""
    env = _prepare(design, table)
    s, hw = env["s"], env["hw"]
    ok = ((s.E == 0).all() and (s.dp == 1).all() and (s.p == 1).all() and s.spec_k is None and not s.mla.any()
          and not (s.n_sl > 0).any() and not (s.rate > 0).any() and not s.disagg.any() and not (s.bw_iters > 0).any()
          and not (s.rt_serve_step > 0).any() and not (s.rt_serve_seq > 0).any() and not s.w_only.any()
          and hw.one_kind and (s.t <= hw.domain).all())
    if not ok:
        raise SystemExit("compiled_pass covers the dense closed-loop path only (see its docstring)")
    n = len(s.H)
    k = hw.kind
    X = np.empty((len(FIELDS) + 12, n))
    for j, f in enumerate(FIELDS):
        X[j] = np.broadcast_to(np.asarray(getattr(s, f), dtype=np.float64), (n,))
    # the runtime's own all-reduce kernels run only where the kind's fabric allows peer access
    X[FIELDS.index("rt_custom_ar")] *= float(bool(k.peer_allreduce))
    extra = (env["clients"], env["b_cap"], hw.peak, hw.peak_attn, hw.eta_c, hw.eta_m, hw.hbm_bw, hw.sms,
             hw.max_split_k, hw.launch, hw.eta_n, hw.up_bw)
    for j, v in enumerate(extra):
        X[len(FIELDS) + j] = np.broadcast_to(np.asarray(v, dtype=np.float64), (n,))
    terms = collective_terms(s.t, domain=float(k.scaleup_domain), up_bw=k.scaleup_bw, up_step_s=k.scaleup_latency_s,
                             out_bw=k.scaleout_bw, out_step_s=k.scaleout_latency_s, eta_n=k.eta_network,
                             kind="allreduce", protocols=protocols_of(k), call_s=0.0, nvls_eta=k.nvls_eta,
                             nvls_latency_s=k.nvls_latency_s, mesh=k.scaleup_mesh)
    # one kind, every group inside its domain: the terms are the same for every row of a tensor-parallel size
    ring = np.array([[float(np.ravel(f)[0]) for f in (fixed, den)] for fixed, den in terms["ring"]])
    nv = terms["nvls"]
    nvls = np.array([float(np.ravel(nv[0])[0]), float(np.ravel(nv[1])[0]), float(np.ravel(nv[2])[0])]) \
        if nv is not None else np.zeros(3)
    if any(np.ptp(np.broadcast_to(np.asarray(x, dtype=np.float64), (n,))) > 0
           for x in [f for pair in terms["ring"] for f in pair] + ([] if nv is None else list(nv))):
        raise SystemExit("compiled_pass: collective terms vary by row (several tensor-parallel sizes); run per size")
    tiles = np.array(k.gemm_tiles, dtype=np.float64)
    return X, ring, nvls, tiles[:, 0].copy(), tiles[:, 1].copy(), float(k.served_gemm_latency_s), \
        float(k.gemm_epilogue_exposed)


def run(design, table):
    X, ring, nvls, tms, tns, lat, epi = columns(design, table)
    out = np.empty((len(OUTPUTS), X.shape[1]))
    compiled_rows(X, ring, nvls, tms, tns, lat, epi, FIXED_POINT_ITERATIONS, out)
    return out


#: what :func:`compiled_rows` writes, row by row: simulate's columns of the same names
OUTPUTS = ("tokens_per_s_per_gpu", "tokens_per_s_per_user", "ttft_s", "t_gemm_s", "t_attention_s", "t_moe_s",
           "t_comm_s", "t_overhead_s", "t_prefill_s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    m = args.n
    # benchmarks/bench_simulator.py's sweep-like table, one tensor-parallel size per call (the
    # all-reduce terms are then the same for every row)
    per_tp = {}
    for tp in (1, 2, 4, 8):
        v = dict(hardware="h200", precision=rng.choice(["bf16", "fp8"], m // 4), hidden=512 * rng.integers(6, 11, m // 4),
                 ffn=1024 * rng.integers(8, 19, m // 4), layers=2 * rng.integers(12, 21, m // 4), head_dim=128,
                 kv_heads=rng.choice([4, 8], m // 4), vocab=128256, batch=rng.integers(1, 513, m // 4), tp=tp,
                 isl=1024, osl=1024)
        v["heads"] = v["hidden"] // 128
        per_tp[tp] = build_design(v, "bench")
    worst = 0.0
    for d, t in per_tp.values():
        got = run(d, t)
        ref = simulate(d, t, detail=True)
        for j, k in enumerate(OUTPUTS):
            rel = np.abs(got[j] - ref[k]) / np.maximum(np.abs(ref[k]), 1e-300)
            worst = max(worst, float(rel.max()))
    print(f"agreement with simulate on {m:,} rows, {len(OUTPUTS)} columns (breakdown included): "
          f"max |compiled / simulate - 1| = {worst:.2e}")

    def timed(fn) -> float:
        best = np.inf
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            for d, t in per_tp.values():
                for a in range(0, m // 4, 12_500):
                    fn({k: (v[a:a + 12_500] if np.ndim(v) else v) for k, v in d.items()}, t)
            best = min(best, time.perf_counter() - t0)
        return best

    t_ref = timed(lambda d, t: simulate(d, t, detail=True))
    t_new = timed(run)
    args_ = columns(*per_tp[1])
    X = args_[0]
    out = np.empty((len(OUTPUTS), X.shape[1]))
    best = np.inf
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        compiled_rows(*args_, FIXED_POINT_ITERATIONS, out)
        best = min(best, time.perf_counter() - t0)
    print(f"simulate (today's code, detail=True): {m / t_ref:,.0f} points/s")
    print(f"_prepare (numpy) + compiled passes:   {m / t_new:,.0f} points/s ({t_ref / t_new:.2f}x)")
    print(f"compiled passes alone:                {X.shape[1] / best:,.0f} points/s")


if __name__ == "__main__":
    main()
