"""The compiled kernel of :func:`explorer.costs.gemm.gemm_cost` (numba): imported only by
:func:`explorer.costs.gemm.fast_path_available`, so that numba stays optional and is not imported for
small tables.  Module-level functions, so numba's on-disk cache (``cache=True``) is hit by every
later process.  Same formulas, same order of operations as the numpy reference."""

from __future__ import annotations

import numba
import numpy as np

from explorer.costs.gemm import MEM_SLICE_N, MIN_K_PER_SPLIT


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _mem_time(m, g, k, n, ba, bw, bo, rm, sm_, tmn, rtmn, pow2, sl, sms):
    blocks = np.ceil(max(m, 1e-9) * rtmn) if pow2 else np.ceil(max(m, 1e-9) / tmn)
    occ = min(1.0, max(sm_, blocks) * sl / sms)
    return g * (ba * m * k + bw * k * n + bo * m * n) * rm / occ


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _distinct(vals, uniq, index):
    """The distinct entries of ``vals`` into ``uniq`` (first-seen order) and each entry's position
    there into ``index``; returns how many are distinct."""
    nu = 0
    for j in range(vals.shape[0]):
        for u in range(nu + 1):
            if u == nu:
                uniq[nu] = vals[j]
                nu += 1
            if uniq[u] == vals[j]:
                index[j] = u
                break
    return nu


@numba.njit(cache=True, nogil=True, error_model="numpy")
def kernel(M, N, K, BA, BW, BO, G, RATE_C, RATE_M, sms_, msk, tms, tns, latency, epi, launch, pow2, reuse, PREV,
           PREV_RATE_C, out):
    """Time of each stacked GEMM ``(r, i)`` as :func:`explorer.costs.gemm.gemm_cost` models it, into the
    planes of ``out``.  With ``reuse``, ``PREV`` ``(>= 7, R, n)`` and ``PREV_RATE_C`` hold an earlier call's
    element inputs (M N K b_a b_w b_out groups, rate_c; same hardware columns and tiles) and ``out``
    that call's planes: an element whose inputs are all equal keeps them instead of being recomputed."""
    R, n = M.shape
    nt = tms.shape[0]
    tm_min = tms[0]
    for j in range(1, nt):
        tm_min = min(tm_min, tms[j])
    # distinct tile heights / widths: ceil(M/Tm) and ceil(N/Tn) once per value (as gemm_cost caches)
    um = np.empty(nt)
    un = np.empty(nt)
    im = np.empty(nt, dtype=np.int64)
    jn = np.empty(nt, dtype=np.int64)
    nm = _distinct(tms, um, im)
    nn_ = _distinct(tns, un, jn)
    rows = np.empty(nt)
    cols_ = np.empty(nt)
    # tile sizes that are powers of two: x / T == x * (1/T) exactly (no rounding), and cheaper
    rum = 1.0 / um
    rtm_min = 1.0 / tm_min
    run = 1.0 / un
    for r in range(R):
        for i in range(n):
            m, nn, k, g = M[r, i], N[r, i], K[r, i], G[r, i]
            if reuse and m == PREV[0, r, i] and nn == PREV[1, r, i] and k == PREV[2, r, i] \
                    and BA[r, i] == PREV[3, r, i] and BW[r, i] == PREV[4, r, i] and BO[r, i] == PREV[5, r, i] \
                    and g == PREV[6, r, i] and RATE_C[r, i] == PREV_RATE_C[r, i]:
                continue
            if not (m > 0 and g > 0):
                out[0, r, i] = 0.0
                out[1, r, i] = 0.0
                out[2, r, i] = 0.0
                out[3, r, i] = 0.0
                out[4, r, i] = 0.0
                out[5, r, i] = 1.0
                out[6, r, i] = 1.0
                out[7, r, i] = 0.0
                out[8, r, i] = 0.0
                continue
            ba, bw, bo = BA[r, i], BW[r, i], BO[r, i]
            sms = sms_[i]
            flops = 2.0 * m * nn * k * g
            base_bytes = g * (ba * m * k + bw * k * nn + bo * m * nn)
            mc = np.ceil(max(m, 1e-9))
            nc = np.ceil(nn)
            ksc = max(1.0, min(msk[i], np.floor(k / MIN_K_PER_SPLIT)))
            rate_c = RATE_C[r, i]  # 2 / (peak * eta_c), as gemm_cost (computed vectorized by the caller)
            rate_m = RATE_M[i]  # 1 / (hbm_bw * eta_m)
            slices = max(g * np.ceil(nc / MEM_SLICE_N), 1e-9)
            s_m = min(max(np.ceil(sms / slices), 1.0), ksc)
            memory_s = base_bytes * rate_m
            if slices * s_m < sms:
                env = _mem_time(m, g, k, nn, ba, bw, bo, rate_m, s_m, tm_min, rtm_min, pow2, slices, sms)
                k_now = np.ceil(np.ceil(max(m, 1e-9)) * rtm_min) if pow2 else \
                    np.ceil(np.ceil(max(m, 1e-9)) / tm_min)
                env = min(env, _mem_time(k_now * tm_min + 1.0, g, k, nn, ba, bw, bo, rate_m, s_m, tm_min,
                                         rtm_min, pow2, slices, sms))
                for q in range(3):
                    blocks = s_m if q == 0 else (np.floor(sms / slices) if q == 1 else np.ceil(sms / slices))
                    mm = max(m, (blocks - 1.0) * tm_min + 1.0)
                    env = min(env, _mem_time(mm, g, k, nn, ba, bw, bo, rate_m, s_m, tm_min, rtm_min, pow2,
                                             slices, sms))
                memory_s = env
            compute_base = sms * k * rate_c
            best_c = 0.0
            best_tiles = best_units = best_waves = best_tm = best_tn = 0.0
            if pow2:
                for u in range(nm):
                    rows[u] = np.ceil(mc * rum[u])
                for u in range(nn_):
                    cols_[u] = np.ceil(nc * run[u]) * g
            else:
                for u in range(nm):
                    rows[u] = np.ceil(mc / um[u])
                for u in range(nn_):
                    cols_[u] = np.ceil(nc / un[u]) * g
            for j in range(nt):
                tm, tn = tms[j], tns[j]
                tiles = cols_[jn[j]] * rows[im[j]]
                tiles = max(tiles, 1e-9)
                if tiles >= sms:  # no split-K: s = 1 exactly (floor(sms/tiles) <= 1, cap >= 1)
                    units = tiles
                    waves = np.ceil(units / sms)
                    c = waves
                else:
                    s = np.floor(sms / tiles)
                    s = max(s, 1.0)
                    s = min(s, ksc)
                    units = tiles * s
                    waves = np.ceil(units / sms)
                    c = waves / s
                c = c * compute_base
                c = c * (tm * tn)
                if j == 0 or c < best_c:
                    best_c, best_tiles, best_units, best_waves, best_tm, best_tn = c, tiles, units, waves, tm, tn
            if epi > 0:
                t = max(best_c + epi * (g * bo * m * nn * rate_m), memory_s)
            else:
                t = max(best_c, memory_s)
            t = t + latency
            out[0, r, i] = t + launch
            out[1, r, i] = best_c
            out[2, r, i] = memory_s
            out[3, r, i] = flops
            out[4, r, i] = base_bytes
            out[5, r, i] = g * m * nn / max(best_tiles * best_tm * best_tn, 1e-30)
            out[6, r, i] = best_units / (best_waves * sms)
            out[7, r, i] = best_tiles
            out[8, r, i] = best_waves
