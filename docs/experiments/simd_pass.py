"""Experiment (issue 12, item 1): do a row's closed-loop passes run on SIMD lanes when they are
compiled as straight-line code?  Not read by the tool; run it from the repository root:

    python docs/experiments/simd_pass.py [--n 200000]

Background.  ``compiled_pass.py`` (beside this file) runs the dense closed-loop path one row at a
time in numba and reached 1.2-1.5 M points/s for the passes alone -- on *one* SIMD lane: its row
body has runtime loops (the tile list, the all-reduce protocols, the five GEMMs, two plans, three
passes), a GEMM memo in small heap arrays (``Mprev``/``Tprev``: a loop-carried store) and early
returns, and LLVM's loop vectorizer only takes an innermost loop whose body is free of all three.
Two small probes (``--probe``) show the rule on this host:

* a row loop applying one engine-like block (tiles, waves, roofline, ring/tree collective,
  selects) 12 times per row: numba with ``error_model="python"`` (the default) ~100 ns/row and no
  packed division; with ``error_model="numpy"`` (no zero-division check, so no branch per
  division) ~50 ns/row with packed ``vdivpd``; numpy over the same columns ~340 ns/row;
* a GEMM tile scan inside the row loop: over a runtime-length tile array 41 ns/row and scalar,
  unrolled (``numba.literal_unroll`` over a tuple) 22 ns/row and vectorized.

What this file does.  :func:`build_kernel` writes the row body of ``compiled_pass.compiled_rows``
as straight-line source for one hardware kind -- the kind's tile list, all-reduce protocol terms,
GEMM latency and epilogue share baked in as literals, the three passes, two plans and five GEMMs
unrolled, every ``if`` of the original turned into both sides computed and a select, no memo (it
only skipped work whose result is the same) -- and compiles it with numba (``error_model="numpy"``,
no fastmath: IEEE operations in the original's order).  ``main`` checks it bit for bit against
``compiled_rows`` (itself bit for bit ``simulate``) and times both on ``compiled_pass.py``'s
sweep-like table.  Same scope as ``compiled_pass.py``: the dense path only.

Measured (2026-12-07, sixth session; 2-core Intel Xeon VM with AVX-512, numba 0.68.1; LLVM chose
256-bit lanes throughout):

* **Bit for bit**: every variant reproduces ``compiled_rows`` (hence ``simulate``) on all 9
  columns -- branches turned into selects and the memo dropped change no figure.
* **One row loop for the whole closed loop** (``--unsplit``): not vectorized (0 packed divisions,
  3,268 scalar over 4 kernels), 927k points/s against ``compiled_rows``' 1.10 M, and ~100 s to
  compile per kind.  Bisected on one pass: ten GEMMs alone in the row loop vectorize (164 ns/row);
  the rest of the pass alone vectorizes (26 ns/row); both together do not (350 ns/row).
* **Split into loops** (per pass: the GEMMs, then the rest): LLVM's remark is "too many memory
  checks needed" until the limits of :data:`LLVM_OPTIONS` are raised; then, on one pass, the rest
  runs vectorized at 28 ns/row (68 scalar), while the GEMM loop vectorizes and is *not faster*
  (290 ns/row for ten GEMMs, 286 scalar): on lanes every branch is computed -- the occupancy
  envelope's five extra memory times, both split-K forms -- where scalar code skips them, and the
  ten output streams cost their stores.  Three passes: 830k points/s (0.73x of ``compiled_rows``),
  53 packed and 851 scalar divisions, 129 s to compile one kind.

What it says for issue 12: SIMD lanes do not rescue a per-row engine -- its cost is the GEMMs, and
a scalar row that skips the GEMMs whose token count did not move (``compiled_rows``' memo: half of
them) and the envelope where the SMs are full beats the lanes that compute every branch.  The
fastest form measured for the closed loop stays ``compiled_rows`` (1.1-1.5 M points/s for the dense
passes alone, before ``_prepare``), which leaves the random mix -- twice the GEMMs per point with
MoE layers -- short of 10^6 points/s even with everything compiled.  Compile time is a second
obstacle for generated straight-line code: minutes per hardware kind.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numba
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import compiled_pass as CP  # noqa: E402

from explorer.costs.comm import CUSTOM_ALLREDUCE_LATENCY_S  # noqa: E402
from explorer.costs.gemm import MEM_SLICE_N, MIN_K_PER_SPLIT  # noqa: E402
from explorer.engine.constants import ALLREDUCE_BYTES, CUSTOM_ALLREDUCE_MAX_GPUS, EMBED_BYTES  # noqa: E402
from explorer.simulate import FIXED_POINT_ITERATIONS  # noqa: E402

NJIT = dict(cache=False, nogil=True, error_model="numpy", fastmath=False)

#: LLVM's loop vectorizer refuses a loop whose arrays need more than 8 runtime overlap checks ("loop
#: not vectorized: too many memory checks needed", -pass-remarks-missed=loop-vectorize): a row loop
#: reading the fields, two state arrays and ten GEMM planes and writing the state back needs ~200.
#: These options raise the limits for every later compilation in the process (llvmlite passes them
#: to LLVM's command-line parser).  A production kernel would rather need fewer arrays.
LLVM_OPTIONS = ("-runtime-memory-check-threshold=1000", "-vectorize-memory-check-threshold=1000",
                "-pragma-vectorize-memory-check-threshold=1000", "-memory-check-merge-threshold=1000")


def _lit(x: float) -> str:
    """A float literal that parses back to the same double (``repr`` round-trips; inf spelled out)."""
    return "np.inf" if x == math.inf else repr(float(x))


class _Emitter:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.n = 0

    def tmp(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def __call__(self, line: str) -> None:
        self.lines.append("        " + line)


def _emit_mem_time(e: _Emitter, m, g, k, n, ba, bw, bo, rm, sm_, tmn, sl, sms) -> str:
    blocks, occ, out = e.tmp("mb"), e.tmp("mo"), e.tmp("mt")
    e(f"{blocks} = np.ceil(max({m}, 1e-9) / {tmn})")
    e(f"{occ} = min(1.0, max({sm_}, {blocks}) * {sl} / {sms})")
    e(f"{out} = {g} * ({ba} * {m} * {k} + {bw} * {k} * {n} + {bo} * {m} * {n}) * {rm} / {occ}")
    return out


def _emit_gemm(e: _Emitter, m, nn, k, ba, bw, bo, tms, tns, latency: float, epi: float) -> str:
    """``compiled_pass.gemm_time`` (groups = 1) as straight-line code: the same operations in the same
    order, its branches as selects.  Returns the name holding the GEMM's time_s."""
    v = {name: e.tmp(name) for name in ("g", "mc", "nc", "ksc", "bb", "sl", "sm", "mem", "env", "knw", "cb",
                                        "best", "t", "tout")}
    e(f"{v['g']} = 1.0")
    e(f"{v['mc']} = np.ceil(max({m}, 1e-9))")
    e(f"{v['nc']} = np.ceil({nn})")
    e(f"{v['ksc']} = max(1.0, min(msk, np.floor({k} / {_lit(MIN_K_PER_SPLIT)})))")
    e(f"{v['bb']} = {v['g']} * ({ba} * {m} * {k} + {bw} * {k} * {nn} + {bo} * {m} * {nn})")
    e(f"{v['sl']} = max({v['g']} * np.ceil({v['nc']} / {_lit(MEM_SLICE_N)}), 1e-9)")
    e(f"{v['sm']} = min(max(np.ceil(sms / {v['sl']}), 1.0), {v['ksc']})")
    e(f"{v['mem']} = {v['bb']} * rate_m")
    tm_min = _lit(min(tms))
    args = (v['g'], k, nn, ba, bw, bo, "rate_m", v['sm'], tm_min, v['sl'], "sms")
    env = _emit_mem_time(e, m, *args)
    e(f"{v['knw']} = np.ceil(np.ceil(max({m}, 1e-9)) / {tm_min})")
    env2 = _emit_mem_time(e, f"({v['knw']} * {tm_min} + 1.0)", *args)
    e(f"{v['env']} = min({env}, {env2})")
    for q in range(3):
        blocks = v['sm'] if q == 0 else (f"np.floor(sms / {v['sl']})" if q == 1 else f"np.ceil(sms / {v['sl']})")
        mm = e.tmp("mm")
        e(f"{mm} = max({m}, ({blocks} - 1.0) * {tm_min} + 1.0)")
        envq = _emit_mem_time(e, mm, *args)
        e(f"{v['env']} = min({v['env']}, {envq})")
    e(f"{v['mem']} = {v['env']} if {v['sl']} * {v['sm']} < sms else {v['mem']}")
    e(f"{v['cb']} = sms * {k} * rate_c")
    for j, (tm, tn) in enumerate(zip(tms, tns, strict=True)):
        ti, c1, s, c2, c = (e.tmp(x) for x in ("ti", "ca", "s", "cs", "c"))
        e(f"{ti} = max((np.ceil({v['nc']} / {_lit(tn)}) * {v['g']}) * np.ceil({v['mc']} / {_lit(tm)}), 1e-9)")
        e(f"{c1} = np.ceil({ti} / sms)")
        e(f"{s} = min(max(np.floor(sms / {ti}), 1.0), {v['ksc']})")
        e(f"{c2} = np.ceil({ti} * {s} / sms) / {s}")
        e(f"{c} = ({c1} if {ti} >= sms else {c2}) * {v['cb']}")
        e(f"{c} = {c} * {_lit(float(tm) * float(tn))}")
        e(f"{v['best']} = {c}" if j == 0 else f"{v['best']} = {c} if {c} < {v['best']} else {v['best']}")
    if epi > 0:
        e(f"{v['t']} = max({v['best']} + {_lit(epi)} * ({v['g']} * {bo} * {m} * {nn} * rate_m), {v['mem']})")
    else:
        e(f"{v['t']} = max({v['best']}, {v['mem']})")
    e(f"{v['tout']} = ({v['t']} + {_lit(latency)} + 0.0) if {m} > 0 else 0.0")
    return v['tout']


def _emit_graph_padded(e: _Emitter, b: str) -> str:
    def pad_whole(x: str) -> str:
        sm, st, sp, pd, out = (e.tmp(n) for n in ("psm", "pst", "psp", "ppd", "pw"))
        e(f"{sm} = 4.0 if {x} > 2.0 else (2.0 if {x} > 1.0 else 1.0)")
        e(f"{st} = max(g_step, 1.0)")
        e(f"{sp} = np.ceil({x} / {st}) * {st}")
        e(f"{pd} = {sm} if {x} <= 4.0 else max({sp}, {x})")
        e(f"{out} = min({pd}, max(g_max, {x})) if (g_step > 0) & ({x} <= g_max) & ({x} > 0) else {x}")
        return out
    lo, hi, w, a, out = (e.tmp(n) for n in ("glo", "ghi", "gw", "ga", "gp"))
    e(f"{lo} = np.floor({b})")
    e(f"{hi} = np.ceil({b})")
    e(f"{w} = {b} - {lo}")
    e(f"{a} = max({lo}, min({b}, 1.0))")
    p1 = pad_whole(a)
    p2 = pad_whole(hi)
    e(f"{out} = (1.0 - {w}) * {p1} + {w} * {p2}")
    return out


def _emit_allreduce(e: _Emitter, nbytes: str, ring: np.ndarray, nvls: np.ndarray) -> str:
    share, best, one, two, rate, out = (e.tmp(n) for n in ("ash", "abe", "aon", "atw", "ara", "ar"))
    e(f"{share} = 2.0 * (t - 1.0) / max(t, 1.0)")
    e(f"{best} = np.inf")
    for k in range(ring.shape[0]):
        e(f"{best} = min({best}, {_lit(ring[k, 0])} + {share} * {nbytes} / {_lit(ring[k, 1])})")
    if nvls[2] > 0:
        e(f"{best} = min({best}, {_lit(nvls[0])} + {nbytes} / {_lit(nvls[1])})")
    e(f"{best} = {best} + 0.0")
    e(f"{rate} = 1.0 / (up_bw * eta_n)")
    e(f"{one} = {_lit(CUSTOM_ALLREDUCE_LATENCY_S)} + (t - 1.0) * {nbytes} * {rate}")
    e(f"{two} = 2.0 * {_lit(CUSTOM_ALLREDUCE_LATENCY_S)} + 2.0 * (t - 1.0) / max(t, 1.0) * {nbytes} * {rate}")
    e(f"{out} = min({best}, min({one}, {two})) if custom_on else {best}")
    e(f"{out} = {out} if t > 1 else 0.0")
    return out


_FIELDS = ("H t n_in nq_loc d g F V kv_loc b_kv b_a b_w isl osl Ls kpl wd mixed max_tok g_step g_max rt_step "
           "rt_seq rt_req rt_attn custom poll clients b_cap peak peak_attn eta_c eta_m hbm_bw sms msk launch "
           "eta_n up_bw").split()  # compiled_pass.columns' rows of X, in order


def _emit_row_start(e: _Emitter) -> None:
    for j, name in enumerate(_FIELDS):
        e(f"{name} = X[{j}, i]")
    e("rate_c = 2.0 / (peak * eta_c)")
    e("rate_m = 1.0 / (hbm_bw * eta_m)")
    e("S_eff = (1.0 - 0.0) * (isl + osl / 2.0) + 0.0 * (isl + osl / 2.0)")
    e("fl_prompt = 2.0 * isl * (isl / 2.0) * nq_loc * (2.0 * d)")
    e(f"custom_on = (custom > 0) & (t > 1) & (t <= {_lit(CUSTOM_ALLREDUCE_MAX_GPUS)})")
    e("b_cap9 = max(b_cap, 1e-9)")


def _emit_pass(e: _Emitter, part: str, ring, nvls, tms, tns, latency: float, epi: float,
               scratch: bool) -> None:
    """One closed-loop pass of ``compiled_rows`` for row ``i``: ``part`` "gemms" (the ten GEMMs only,
    into ``S[2 + j, i]``), "rest" (everything else, the GEMM times read back from ``S``) or "all".
    ``scratch``: the batch and prompt count enter and leave through ``S[0, i]``, ``S[1, i]``."""
    if scratch:
        e("b_step = SB[i]")
        e("n_pf = SN[i]")
    e("b = b_step")
    b_tok = _emit_graph_padded(e, "b")
    e("budget = max((max_tok - b) if mixed > 0 else max_tok, 1.0)")
    e("npf = max(n_pf, 1.0)")
    e("Q = min(npf * isl, budget)")
    stage = []
    for plan in range(2):
        if plan == 0:
            e(f"m_dec = {b_tok}")
            e("n_pre = 0.0 * b")
            e("m_attn = b")
        else:
            e(f"m_dec = {b_tok} if mixed > 0 else 0.0")
            e("n_pre = Q / isl")
            e("m_attn = b if mixed > 0 else 0.0")
        e("M = m_dec + n_pre * isl")
        if part in ("gemms", "all"):
            e("n_lm = m_dec + n_pre")
            e("k_o = nq_loc * d")
            e("n_up = g * F / t")
            e("k_dn = F / t")
            e("n_v = V / t")
            reqs = (("M", "n_in", "H", "b_w", "b_a"), ("M", "H", "k_o", "b_w", "b_a"), ("M", "n_up", "H", "b_w", "b_a"),
                    ("M", "H", "k_dn", "b_w", "b_a"), ("n_lm", "n_v", "H", _lit(EMBED_BYTES), "4.0"))
            tg = [_emit_gemm(e, mm, nn, kk, "b_a", bw_, bo, tms, tns, latency, epi) for mm, nn, kk, bw_, bo in reqs]
            if part == "gemms":
                for r, name in enumerate(tg):
                    e(f"T{5 * plan + r}[i] = {name}")
                continue
        else:
            tg = [f"tg{plan}_{r}" for r in range(5)]
            for r, name in enumerate(tg):
                e(f"{name} = T{5 * plan + r}[i]")
        e("fl_d = 4.0 * m_attn * S_eff * nq_loc * d")
        e("by_d = m_attn * S_eff * kv_loc * b_kv")
        e("fl_p = n_pre * fl_prompt")
        e("by_p = n_pre * isl * kv_loc * (b_kv + 2.0 * b_a)")
        e("attn_c = (fl_d + fl_p) / (peak_attn * eta_c * rt_attn)")
        e("attn_m = (by_d + by_p) / (hbm_bw * eta_m * rt_attn)")
        e("t_attn = max(attn_c, attn_m)")
        e(f"ar_bytes = M * H * {_lit(ALLREDUCE_BYTES)}")
        t_ar = _emit_allreduce(e, "ar_bytes", ring, nvls)
        e(f"t_gemm = {tg[0]} + {tg[1]} + wd * ({tg[2]} + {tg[3]}) + 0.0 * (0.0 + 0.0)")
        e("t_moe = 0.0 * (0.0 + 0.0 + 0.0 + 0.0 + 0.0)")
        e(f"t_comm = 2.0 * {t_ar} + 0.0 * 0.0")
        e(f"gemm{plan} = Ls * t_gemm + {tg[4]}")
        e("overhead = Ls * (kpl * launch) + launch")
        st = f"stage{plan}"
        e(f"{st} = 0 + gemm{plan} + Ls * t_attn + Ls * t_moe + Ls * t_comm + overhead")
        stage.append(st)
        if plan == 0:
            e("p0, p1, p2, p3, p4 = gemm0, Ls * t_attn, Ls * t_moe, Ls * t_comm, overhead")
    if part == "gemms":
        return
    e("host = rt_step + rt_seq * b * 1.0")
    e(f"T_dec = 1.0 * {stage[0]} + (1.0 - 1.0) * 0.0 + host")
    e(f"T_pre = 1.0 * {stage[1]} + (1.0 - 1.0) * 0.0 + host")
    e("tau = (max(T_pre - T_dec, 0.0) if mixed > 0 else T_pre) * isl / Q")
    e("chunk_steps = max(1.0, np.ceil(npf * isl / Q - 1e-9))")
    e("busy = min(max(b - 1.0, 0.0), 1.0)")
    e("own_mixed = chunk_steps * T_dec + npf * isl / Q * (T_pre - T_dec)")
    e("own_sep = chunk_steps * T_pre")
    e("own = own_mixed if mixed > 0 else own_sep")
    e("Ts = 0.5 * busy * T_dec * poll + own + rt_req")
    e("rm_mixed = Q / isl / max(T_pre, 1e-30)")
    e("rate_max = rm_mixed if mixed > 0 else np.inf")
    e("T_full = T_pre if mixed > 0 else T_dec")
    e("C = clients")
    e("n_dec = max(osl - 1.0, 0.0)")
    e("Bq = Ts + n_dec * T_dec + C * tau")
    e("a = tau * Ts")
    e("disc = np.sqrt(max(Bq * Bq - 4.0 * a * C, 0.0))")
    e("rate_free0 = 2.0 * C / max(Bq + disc, 1e-300)")
    e("full = rate_free0 > rate_max")
    e("rate_free = rate_max if full else rate_free0")
    e("tpot_free0 = T_dec / max(1.0 - rate_free0 * tau, 1e-12)")
    e("tpot_free = T_full if full else tpot_free0")
    e("b_free = rate_free * n_dec * tpot_free")
    e("capped = (b_free > b_cap9) & (n_dec > 0)")
    e("tpot_cap0 = T_dec + b_cap9 * tau / max(n_dec, 1.0)")
    e("tpot_cap1 = min(tpot_cap0, T_full)")
    e("tpot_cap = tpot_cap1 if rate_max < np.inf else tpot_cap0")
    e("tpot_n = tpot_cap if capped else tpot_free")
    e("tpot = tpot_n if n_dec > 0 else T_dec")
    e("decode_s = n_dec * tpot")
    e("rate_c_ = b_cap9 / max(decode_s, 1e-30)")
    e("rate = rate_c_ if capped else rate_free")
    e("cycle = C / max(rate, 1e-300)")
    e("ttft = max(cycle - decode_s, Ts)")
    e("share = decode_s / max(cycle, 1e-300)")
    e("seen0 = min(1.0 + max(C - 1.0, 0.0) * share, max(b_cap9, 1.0))")
    e("seen = b_cap9 if capped else seen0")
    e("b_step = max(seen, 1e-9)")
    e("n_pf = rate * tpot")
    if scratch:
        e("SB[i] = b_step")
        e("SN[i] = n_pf")


def _emit_outputs(e: _Emitter) -> None:
    e("O0[i] = rate * osl * 1.0 / t")
    e("O1[i] = 1.0 / tpot")
    e("O2[i] = ttft")
    e("O3[i] = 1.0 * p0")
    e("O4[i] = 1.0 * p1")
    e("O5[i] = 1.0 * p2")
    e("O6[i] = 1.0 * p3 + (1.0 - 1.0) * 0.0")
    e("O7[i] = 1.0 * p4 + host")
    e("O8[i] = tpot - T_dec")


def kernel_source(ring: np.ndarray, nvls: np.ndarray, tms, tns, latency: float, epi: float, passes: int,
                  split: bool) -> str:
    """The source of one kind's ``rows(X, out, S)``: ``compiled_rows`` with every loop unrolled and every
    branch a select.  ``split=False``: one row loop holding the whole closed loop; ``split=True``: per
    pass one row loop costing the ten GEMMs into the scratch rows ``S[2:12]`` and one for the rest,
    the batch and prompt count carried in ``S[0:2]`` (loop fission: each body small enough for LLVM's
    vectorizer, which gives up on the single loop's)."""
    loops: list[list[str]] = []

    def loop(parts) -> None:
        e = _Emitter()
        _emit_row_start(e)
        parts(e)
        loops.append(e.lines)

    prs = (ring, nvls, tms, tns, latency, epi)
    if not split:
        def whole(e: _Emitter) -> None:
            e("b_step = max(min(clients, max(b_cap, 1.0)), 1e-9)")
            e("n_pf = max(1.0, b_step / max(osl - 1.0, 1.0))")
            for _ in range(passes):
                _emit_pass(e, "all", *prs, scratch=False)
            _emit_outputs(e)
        loop(whole)
    else:
        loop(lambda e: (e("b_step = max(min(clients, max(b_cap, 1.0)), 1e-9)"),
                        e("SB[i] = b_step"), e("SN[i] = max(1.0, b_step / max(osl - 1.0, 1.0))")))
        for k in range(passes):
            loop(lambda e: _emit_pass(e, "gemms", *prs, scratch=True))
            last = k == passes - 1
            loop(lambda e, last=last: (_emit_pass(e, "rest", *prs, scratch=True), _emit_outputs(e) if last else None))
    body = "".join("    for i in range(X.shape[1]):\n" + "\n".join(lines) + "\n" for lines in loops)
    return ("def rows(X, out, SB, SN, T):\n    " + ", ".join(f"T{j}" for j in range(10)) + " = T\n    "
            + ", ".join(f"O{j}" for j in range(9)) + " = out\n" + body)


def build_kernel(ring, nvls, tms, tns, latency, epi, passes=FIXED_POINT_ITERATIONS, split=True):
    """Compile one kind's straight-line kernel ``rows(X, out, S)`` (``S``: scratch, ``(12, rows)``)."""
    import llvmlite.binding as llvm

    for option in LLVM_OPTIONS:
        llvm.set_option("", option)
    ns: dict = {"np": np}
    src = kernel_source(ring, nvls, list(tms), list(tns), latency, epi, passes, split)
    exec(compile(src, "<simd_pass>", "exec"), ns)
    fn = numba.njit(**NJIT)(ns["rows"])
    return fn


def probe() -> None:
    """The two probes of the module docstring."""
    def blk(M, N, K, bw, peak, lat, H, t, b):
        tiles = math.ceil(M / 128.0) * math.ceil(N / 256.0)
        waves = math.ceil(tiles / 132.0)
        eff = tiles / (waves * 132.0)
        t_c = 2.0 * M * N * K / (peak * eff)
        t_m = ((M * K + N * K) * 2.0 + M * N * 2.0) / bw
        tt = max(t_c, t_m) + lat
        ring = 2.0 * (t - 1.0) / t * (b * H * 2.0) / bw + 2.0 * (t - 1.0) * lat if t > 1 else 0.0
        tree = max(t, 1.0) * lat * 2.0 + (b * H * 2.0) / bw if t > 1 else 0.0
        return tt + min(ring, tree) + (tt * 0.1 if b > 64 else 0.0)

    def chain_np(a):
        acc = 0.0 * a[0]
        for r in range(12):
            M, N, K, bw, peak, lat, H, t, b = (a[(r + k) % 12] for k in range(9))
            tiles = np.ceil(M / 128.0) * np.ceil(N / 256.0)
            waves = np.ceil(tiles / 132.0)
            eff = tiles / (waves * 132.0)
            tt = np.maximum(2.0 * M * N * K / (peak * eff), ((M * K + N * K) * 2.0 + M * N * 2.0) / bw) + lat
            ring = np.where(t > 1, 2.0 * (t - 1.0) / t * (b * H * 2.0) / bw + 2.0 * (t - 1.0) * lat, 0.0)
            tree = np.where(t > 1, np.maximum(t, 1.0) * lat * 2.0 + (b * H * 2.0) / bw, 0.0)
            acc = acc + (tt + np.minimum(ring, tree) + np.where(b > 64, tt * 0.1, 0.0))
        return acc

    n = 12_500
    rng = np.random.default_rng(0)
    A = np.stack([rng.uniform(1, 1000, n) for _ in range(12)])
    out = np.empty(n)
    print(f"numpy, the same formulas over columns: {_best(lambda: chain_np(A)) * 1e9 / n:6.1f} ns/row")
    for em in ("python", "numpy"):
        inner = numba.njit(inline="always", error_model=em)(blk)
        src = "def k(A, out):\n    for i in range(out.shape[0]):\n        acc = 0.0\n" + "".join(
            f"        acc = acc + blk({', '.join(f'A[{(r + k) % 12}, i]' for k in range(9))})\n" for r in range(12)) \
            + "        out[i] = acc\n"
        ns: dict = {"blk": inner}
        exec(src, ns)
        k = numba.njit(error_model=em)(ns["k"])
        k(A, out)
        asm = next(iter(k.inspect_asm().values()))
        print(f"numba row loop, error_model={em!r:8s}: {_best(lambda k=k: k(A, out)) * 1e9 / n:6.1f} ns/row, "
              f"packed divisions {asm.count('vdivpd')}, scalar {asm.count('vdivsd')}")


def _best(fn, k: int = 20, repeats: int = 5) -> float:
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        best = min(best, (time.perf_counter() - t0) / k)
    return best


#: rows per call of a kernel: the scratch rows and the fields a loop reads stay in the core's L2 (as
#: explorer/simulate.py's CHUNK_ROWS; the columns are laid out per chunk, as ``_prepare`` makes them)
CHUNK = 12_500


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--probe", action="store_true", help="the two probes of the docstring only")
    ap.add_argument("--unsplit", action="store_true",
                    help="also the single-loop kernel (every pass in one row loop: ~100 s to compile per kind)")
    ap.add_argument("--tps", default="1,2,4,8", help="tensor-parallel sizes of the table (one kernel each)")
    args = ap.parse_args()
    if args.probe:
        probe()
        return
    rng = np.random.default_rng(0)
    tps = [int(x) for x in args.tps.split(",")]
    m = args.n // len(tps)
    variants = [True, False] if args.unsplit else [True]
    t_scalar = 0.0
    t_var = dict.fromkeys(variants, 0.0)
    compile_s = dict.fromkeys(variants, 0.0)
    divs = {v: [0, 0] for v in variants}
    for tp in tps:  # compiled_pass.py's sweep-like table, one tensor-parallel size per call
        v = dict(hardware="h200", precision=rng.choice(["bf16", "fp8"], m), hidden=512 * rng.integers(6, 11, m),
                 ffn=1024 * rng.integers(8, 19, m), layers=2 * rng.integers(12, 21, m), head_dim=128,
                 kv_heads=rng.choice([4, 8], m), vocab=128256, batch=rng.integers(1, 513, m), tp=tp, isl=1024, osl=1024)
        v["heads"] = v["hidden"] // 128
        d, t = CP.build_design(v, "bench")
        X, ring, nvls, tms, tns, lat, epi = CP.columns(d, t)
        ref = np.empty((len(CP.OUTPUTS), X.shape[1]))
        CP.compiled_rows(X, ring, nvls, tms, tns, lat, epi, FIXED_POINT_ITERATIONS, ref)
        chunks = [np.ascontiguousarray(X[:, a:a + CHUNK]) for a in range(0, X.shape[1], CHUNK)]
        outs = [np.empty((len(CP.OUTPUTS), c.shape[1])) for c in chunks]
        S = (np.empty(CHUNK), np.empty(CHUNK), np.empty((10, CHUNK)))
        for split in variants:
            t0 = time.perf_counter()
            fn = build_kernel(ring, nvls, tms, tns, lat, epi, split=split)
            fn(chunks[0], outs[0], *S)
            compile_s[split] += time.perf_counter() - t0
            asm = next(iter(fn.inspect_asm().values()))
            divs[split][0] += asm.count("vdivpd")
            divs[split][1] += asm.count("vdivsd")

            def run_all(fn=fn, chunks=chunks, outs=outs, S=S) -> None:
                for c, o in zip(chunks, outs, strict=True):
                    fn(c, o, *S)

            run_all()
            got = np.concatenate(outs, axis=1)
            rel = float(np.max(np.abs(got - ref) / np.maximum(np.abs(ref), 1e-300)))
            print(f"tp={tp}, {'split into loops' if split else 'one row loop'}: "
                  f"{'bit for bit' if np.array_equal(got, ref) else f'max rel diff {rel:.2e}'} "
                  f"against compiled_rows on {X.shape[1]:,} rows x {len(CP.OUTPUTS)} columns")
            t_var[split] += _best(run_all, 1, 3)
        t_scalar += _best(lambda: CP.compiled_rows(X, ring, nvls, tms, tns, lat, epi, FIXED_POINT_ITERATIONS, ref),  # noqa: B023
                          1, 3)
    n = len(tps) * m
    print(f"compiled_rows (one row at a time, runtime loops, GEMM memo): {n / t_scalar:,.0f} points/s")
    for split in variants:
        print(f"straight-line, {'split into loops' if split else 'one row loop   '}: {n / t_var[split]:,.0f} points/s "
              f"({t_scalar / t_var[split]:.2f}x); compiled in {compile_s[split]:.1f} s for {len(tps)} kernels, "
              f"divisions {divs[split][0]} packed / {divs[split][1]} scalar")


if __name__ == "__main__":
    main()
