"""The compiled kernel of :func:`explorer.costs.gemm.gemm_cost` (numba): imported only by
:func:`explorer.costs.gemm.fast_path_available`, so that numba stays optional and is not imported for
small tables.  Module-level functions, so numba's on-disk cache (``cache=True``) is hit by every
later process.  Same formulas, same order of operations as the numpy reference."""

from __future__ import annotations

import numba
import numpy as np

from explorer.costs.gemm import MEM_SLICE_N, MIN_K_PER_SPLIT

#: elements costed together by :func:`_block`: its working set, ~40 rows of this length (2 KiB each),
#: stays in the core's L2
_BLOCK = 256


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
def _block(cnt, R_, I_, m_, n_, k_, g_, ba_, bw_, bo_, rc_, rm_, sms_, msk_, tms, tns, um, un, im, jn, nm, nn_,
           tm_min, rtm_min, rum, run, pow2, latency, epi, launch, W, rows, cols, out):
    """Cost the ``cnt`` GEMMs gathered into the block's input rows (``m_`` ... ``msk_``; ``R_``, ``I_``:
    their place in ``out``).  Every step is a loop over the block's elements without a branch that
    depends on the element (a select instead), so that the compiler runs it on SIMD lanes: the
    divisions of the tile scan, which bound a per-element loop, go 4-8 at a time.  Same operations
    in the same order as the per-element form (:func:`explorer.costs.gemm.gemm_cost`), hence the
    same figures bit for bit; ``W``, ``rows``, ``cols``: working planes of the block's length."""
    mc, nc, ksc, sl, s_m, mem, cb = W[0], W[1], W[2], W[3], W[4], W[5], W[6]
    bc, bt, bu, bwv, btm, btn = W[7], W[8], W[9], W[10], W[11], W[12]
    for j in range(cnt):
        m = m_[j]
        mc[j] = np.ceil(max(m, 1e-9))
        nc[j] = np.ceil(n_[j])
        ksc[j] = max(1.0, min(msk_[j], np.floor(k_[j] / MIN_K_PER_SPLIT)))
        sl[j] = max(g_[j] * np.ceil(nc[j] / MEM_SLICE_N), 1e-9)
        s_m[j] = min(max(np.ceil(sms_[j] / sl[j]), 1.0), ksc[j])
        mem[j] = g_[j] * (ba_[j] * m * k_[j] + bw_[j] * k_[j] * n_[j] + bo_[j] * m * n_[j]) * rm_[j]
        cb[j] = sms_[j] * k_[j] * rc_[j]
    # the padding envelope where too few CTAs draw full bandwidth (masked lanes where they do)
    for j in range(cnt):
        if sl[j] * s_m[j] < sms_[j]:
            m, g, k, nn, ba, bw, bo, rm, sm_, slices, sms = m_[j], g_[j], k_[j], n_[j], ba_[j], bw_[j], bo_[j], \
                rm_[j], s_m[j], sl[j], sms_[j]
            e = _mem_time(m, g, k, nn, ba, bw, bo, rm, sm_, tm_min, rtm_min, pow2, slices, sms)
            k_now = np.ceil(np.ceil(max(m, 1e-9)) * rtm_min) if pow2 else np.ceil(np.ceil(max(m, 1e-9)) / tm_min)
            e = min(e, _mem_time(k_now * tm_min + 1.0, g, k, nn, ba, bw, bo, rm, sm_, tm_min, rtm_min, pow2, slices, sms))
            for q in range(3):
                blocks = sm_ if q == 0 else (np.floor(sms / slices) if q == 1 else np.ceil(sms / slices))
                mm = max(m, (blocks - 1.0) * tm_min + 1.0)
                e = min(e, _mem_time(mm, g, k, nn, ba, bw, bo, rm, sm_, tm_min, rtm_min, pow2, slices, sms))
            mem[j] = e
    if pow2:
        for u in range(nm):
            r_ = rum[u]
            ru = rows[u]
            for j in range(cnt):
                ru[j] = np.ceil(mc[j] * r_)
        for u in range(nn_):
            r_ = run[u]
            cu = cols[u]
            for j in range(cnt):
                cu[j] = np.ceil(nc[j] * r_) * g_[j]
    else:
        for u in range(nm):
            d_ = um[u]
            ru = rows[u]
            for j in range(cnt):
                ru[j] = np.ceil(mc[j] / d_)
        for u in range(nn_):
            d_ = un[u]
            cu = cols[u]
            for j in range(cnt):
                cu[j] = np.ceil(nc[j] / d_) * g_[j]
    for t in range(tms.shape[0]):
        tm, tn = tms[t], tns[t]
        area = tm * tn
        ru = rows[im[t]]
        cu = cols[jn[t]]
        for j in range(cnt):
            tiles = max(cu[j] * ru[j], 1e-9)
            sms = sms_[j]
            # s = 1 exactly where tiles >= sms (no split-K); x / 1 and x * 1 are x exactly
            s = 1.0 if tiles >= sms else min(max(np.floor(sms / tiles), 1.0), ksc[j])
            units = tiles * s
            waves = np.ceil(units / sms)
            c = waves / s
            c = c * cb[j]
            c = c * area
            if t == 0 or c < bc[j]:
                bc[j] = c
                bt[j] = tiles
                bu[j] = units
                bwv[j] = waves
                btm[j] = tm
                btn[j] = tn
    for j in range(cnt):
        m, nn, g = m_[j], n_[j], g_[j]
        if epi > 0:
            t_ = max(bc[j] + epi * (g * bo_[j] * m * nn * rm_[j]), mem[j])
        else:
            t_ = max(bc[j], mem[j])
        t_ = t_ + latency
        r, i = R_[j], I_[j]
        out[0, r, i] = t_ + launch
        out[1, r, i] = bc[j]
        out[2, r, i] = mem[j]
        out[3, r, i] = 2.0 * m * nn * k_[j] * g
        out[4, r, i] = g * (ba_[j] * m * k_[j] + bw_[j] * k_[j] * nn + bo_[j] * m * nn)
        out[5, r, i] = g * m * nn / max(bt[j] * btm[j] * btn[j], 1e-30)
        out[6, r, i] = bu[j] / (bwv[j] * sms_[j])
        out[7, r, i] = bt[j]
        out[8, r, i] = bwv[j]


@numba.njit(cache=True, nogil=True, error_model="numpy")
def kernel(M, N, K, BA, BW, BO, G, RATE_C, RATE_M, sms_, msk, tms, tns, latency, epi, launch, pow2, reuse, static,
           PREV, PREV_RATE_C, out):
    """Time of each stacked GEMM ``(r, i)`` as :func:`explorer.costs.gemm.gemm_cost` models it, into the
    planes of ``out``.  With ``reuse``, ``PREV`` ``(>= 7, R, n)`` and ``PREV_RATE_C`` hold an earlier call's
    element inputs (M N K b_a b_w b_out groups, rate_c; same hardware columns and tiles) and ``out``
    that call's planes: an element whose inputs are all equal keeps them instead of being recomputed.
    ``static`` (with ``reuse``): the caller vouches that N, K, the byte widths and the rates are those of
    the earlier call, so only M and the groups are compared."""
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
    # tile sizes that are powers of two: x / T == x * (1/T) exactly (no rounding), and cheaper
    rum = 1.0 / um
    rtm_min = 1.0 / tm_min
    run = 1.0 / un
    B = _BLOCK
    R_ = np.empty(B, dtype=np.int64)
    I_ = np.empty(B, dtype=np.int64)
    IN = np.empty((11, B))
    W = np.empty((13, B))
    rows = np.empty((nt, B))
    cols = np.empty((nt, B))
    # gather the elements to cost (inputs moved since the memo's call, a kernel launched) into blocks
    cnt = 0
    for r in range(R):
        for i in range(n):
            m, nn, k, g = M[r, i], N[r, i], K[r, i], G[r, i]
            if reuse and m == PREV[0, r, i] and g == PREV[6, r, i] and (static or (
                    nn == PREV[1, r, i] and k == PREV[2, r, i] and BA[r, i] == PREV[3, r, i]
                    and BW[r, i] == PREV[4, r, i] and BO[r, i] == PREV[5, r, i] and RATE_C[r, i] == PREV_RATE_C[r, i])):
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
            R_[cnt] = r
            I_[cnt] = i
            IN[0, cnt] = m
            IN[1, cnt] = nn
            IN[2, cnt] = k
            IN[3, cnt] = g
            IN[4, cnt] = BA[r, i]
            IN[5, cnt] = BW[r, i]
            IN[6, cnt] = BO[r, i]
            IN[7, cnt] = RATE_C[r, i]
            IN[8, cnt] = RATE_M[i]
            IN[9, cnt] = sms_[i]
            IN[10, cnt] = msk[i]
            cnt += 1
            if cnt == B:
                _block(cnt, R_, I_, IN[0], IN[1], IN[2], IN[3], IN[4], IN[5], IN[6], IN[7], IN[8], IN[9], IN[10],
                       tms, tns, um, un, im, jn, nm, nn_, tm_min, rtm_min, rum, run, pow2, latency, epi, launch, W,
                       rows, cols, out)
                cnt = 0
    if cnt:
        _block(cnt, R_, I_, IN[0], IN[1], IN[2], IN[3], IN[4], IN[5], IN[6], IN[7], IN[8], IN[9], IN[10],
               tms, tns, um, un, im, jn, nm, nn_, tm_min, rtm_min, rum, run, pow2, latency, epi, launch, W,
               rows, cols, out)
