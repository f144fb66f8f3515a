"""GEMM time with tile and wave quantization (DESIGN.md section 4).

``C[M x N] = A[M x K] . B[K x N]``, repeated ``groups`` times (grouped GEMM of MoE experts).

Model, per candidate output tile ``Tm x Tn`` (the hardware file lists the tiles its GEMM library
picks from; we take the fastest, as a library's heuristic would):

* ``tiles = groups * ceil(M/Tm) * ceil(N/Tn)``;
* split-K for compute: when ``tiles < SMs`` the K loop is split ``s = floor(SMs/tiles)`` ways
  (so the split work still fits one wave), capped at ``max_split_k`` and at ``K/256`` (each split
  keeps at least 256 of K: an assumption matching cuBLAS/CUTLASS split-K heuristics);
* ``waves = ceil(tiles*s / SMs)``, and every wave counts as full:
  ``compute_s = waves * SMs * 2*Tm*Tn*(K/s) / (peak * eta_c)``;
* memory: ``bytes = groups*(b_a*M*K + b_w*K*N + b_out*M*N)`` and
  ``memory_s = bytes / (hbm_bw * eta_m * occupancy)``, where a kernel with fewer CTAs than SMs
  cannot draw full bandwidth (one CTA per SM pulls at most its share: an assumption).  CTAs =
  ``groups*ceil(N/32)`` column slices (GEMV-style, :data:`MEM_SLICE_N`) times the larger of the
  K splits (``ceil(SMs/slices)``, capped as above) and the row blocks ``ceil(M/Tm_min)``.  Since
  occupancy jumps at row-block boundaries, the time taken is the lower envelope over padding M up
  to the next block or to the first block count that fills the SMs (a library can always pad
  rows): adding rows never makes a GEMM faster;
* split-K partial sums (fp32) are not counted as HBM traffic: split-K is used on skinny GEMMs whose
  partials (``M*N*4*s`` bytes, a few MB) stay in L2 (assumption);
* the epilogue: a tile's output is written after its last K-step, so a share ``epilogue_exposed`` of
  the output write ``out_s = groups*b_out*M*N / (hbm_bw*eta_m)`` does not overlap the main loop
  (all SMs of a wave finish together and store together).  In the compute-bound limit this is the
  K-dependent "pipeline drain" efficiency ``1 / (1 + epilogue_exposed * b_out*peak*eta_c /
  (2*K*hbm_bw*eta_m))``: no free K constant, it follows from the GPU's FLOP/byte ratio (TileLang's
  M=N=8192 K sweep on H800, 386 -> 766 TFLOPS from K=256 to 16384, is this curve with exposed ~1);
* ``time_s = max(compute_s + epilogue_exposed*out_s, memory_s) + latency_s + launch_s``, where
  ``latency_s`` is the fixed time of one kernel run back to back with others (prologue, pipeline
  fill, tail: what a 1024^3 GEMM is bound by) and ``launch_s`` the serving runtime's per-kernel gap.
  Both extras default to 0 (the model before them).

Ignored: L2 reuse effects beyond "each operand read once", epilogue fusion, K-tail quantization
(K padding to the MMA K-step), persistent/stream-K scheduling (which would soften the wave
staircase), and clock throttling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Minimum K per split-K slice (elements).  Assumption: libraries do not split K below ~256.
MIN_K_PER_SPLIT = 256.0
#: Columns per CTA of a weight-streaming (memory-bound) kernel: GEMV-style kernels slice N this finely
#: (assumption; it only matters for GEMMs with N*K too small to occupy every SM).
MEM_SLICE_N = 32.0


@dataclass
class GemmCost:
    time_s: np.ndarray
    compute_s: np.ndarray
    memory_s: np.ndarray
    flops: np.ndarray
    bytes: np.ndarray
    tile_eff: np.ndarray  # useful / computed output elements of the chosen tile
    wave_eff: np.ndarray  # busy / available SM-slots over the waves
    tiles: np.ndarray
    waves: np.ndarray


def gemm_cost(
    M: np.ndarray,
    N: np.ndarray,
    K: np.ndarray,
    b_a: np.ndarray | float,
    b_w: np.ndarray | float,
    b_out: np.ndarray | float,
    *,
    peak_flops: np.ndarray,
    hbm_bw: np.ndarray,
    sms: np.ndarray,
    tiles_m: np.ndarray,
    tiles_n: np.ndarray,
    max_split_k: np.ndarray,
    eta_c: np.ndarray,
    eta_m: np.ndarray,
    launch_s: np.ndarray | float,
    groups: np.ndarray | float = 1.0,
    latency_s: np.ndarray | float = 0.0,
    epilogue_exposed: np.ndarray | float = 0.0,
) -> GemmCost:
    """Time of a (grouped) GEMM for every design point.

    ``tiles_m``/``tiles_n`` have shape ``(n_points, n_tile_shapes)``; the fastest shape is used.
    ``M`` may be fractional (an expected token count); tile counts use ``ceil``.  ``M == 0`` or
    ``groups == 0`` costs nothing (no kernel launched).
    """
    M = np.asarray(M, dtype=np.float64)
    N = np.asarray(N, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    groups = np.asarray(groups, dtype=np.float64)
    shape = np.broadcast(M, N, K, groups, sms).shape
    active = (M > 0) & (groups > 0)
    if not active.any():  # e.g. MoE GEMMs of dense models: no kernel, no cost
        z = np.zeros(shape)
        one = np.ones(shape)
        return GemmCost(z, z, z, z, z, one, one, z, z)
    flops = 2.0 * M * N * K * groups
    base_bytes = groups * (b_a * M * K + b_w * K * N + b_out * M * N)
    mc = np.ceil(np.maximum(M, 1e-9))
    nc = np.ceil(N)
    k_split_cap = np.maximum(1.0, np.minimum(max_split_k, np.floor(K / MIN_K_PER_SPLIT)))
    rate_c = 2.0 / (peak_flops * eta_c)  # seconds per FLOP at the achievable peak
    rate_m = 1.0 / (hbm_bw * eta_m)

    # memory (see module docstring): CTAs = column slices x max(K splits, row blocks of the smallest
    # tile); the time is the lower envelope over padding M up to the next row block or to the first
    # row count that fills the SMs, so that adding rows never makes a GEMM faster
    slices = np.maximum(groups * np.ceil(nc / MEM_SLICE_N), 1e-9)
    s_m = np.clip(np.ceil(sms / slices), 1.0, k_split_cap)
    tm_min = np.min(tiles_m, axis=-1)

    memory_s = base_bytes * rate_m  # rows whose weight slices already fill the SMs (most layer GEMMs)
    need = slices * s_m < sms
    if need.any():  # the others: occupancy and its padding envelope, on those rows only
        shape_all = memory_s.shape
        need = np.broadcast_to(need, shape_all)

        def sub(x):
            return np.broadcast_to(np.asarray(x, dtype=np.float64), shape_all)[need]

        g_, k_, n_, ba, bw_, bo = sub(groups), sub(K), sub(N), sub(b_a), sub(b_w), sub(b_out)
        sl, sm_, sms_, tmn, rm = sub(slices), sub(s_m), sub(sms), sub(tm_min), sub(rate_m)
        m_ = sub(M)

        def mem_time(m):
            occ = np.minimum(1.0, np.maximum(sm_, np.ceil(np.maximum(m, 1e-9) / tmn)) * sl / sms_)
            return g_ * (ba * m * k_ + bw_ * k_ * n_ + bo * m * n_) * rm / occ

        k_now = np.ceil(np.ceil(np.maximum(m_, 1e-9)) / tmn)
        k_full = np.ceil(sms_ / sl)  # row blocks that fill the SMs
        # Between occupancy steps the time is monotone in the block count (bytes grow linearly while
        # occupancy ~ blocks), so the envelope's minimum is at a segment end: the next block, the
        # block count where split-K stops setting the occupancy, the last count short of full
        # occupancy and the first that fills the SMs.
        env = mem_time(m_)
        env = np.minimum(env, mem_time(k_now * tmn + 1.0))
        for blocks in (sm_, np.floor(sms_ / sl), k_full):
            env = np.minimum(env, mem_time(np.maximum(m_, (blocks - 1.0) * tmn + 1.0)))
        memory_s[need] = env

    # Tile shapes: plain numbers when every point has the same list (one hardware kind), so that
    # row/column tile counts are computed once per distinct Tm/Tn value (cheaper), else per point.
    n_tiles = tiles_m.shape[-1]
    shared = bool(np.all(tiles_m == tiles_m[..., :1, :]) and np.all(tiles_n == tiles_n[..., :1, :])) \
        if tiles_m.ndim > 1 and tiles_m.shape[-2] > 0 else True
    tms: list[float] | list[np.ndarray]
    tns: list[float] | list[np.ndarray]
    if shared:
        tms = [float(x) for x in np.reshape(tiles_m, (-1, n_tiles))[0]]
        tns = [float(x) for x in np.reshape(tiles_n, (-1, n_tiles))[0]]
    else:
        tms = [tiles_m[..., j] for j in range(n_tiles)]
        tns = [tiles_n[..., j] for j in range(n_tiles)]
    rows: dict = {}
    cols_: dict = {}

    def ceil_div(cache: dict, x, t, j: int, scale=None):
        key = t if shared else j
        if key not in cache:
            v = np.ceil(x / t)
            cache[key] = v if scale is None else v * scale
        return cache[key]

    compute_base = sms * K * rate_c  # seconds per (wave x tile area / split)

    def per_tile(j: int):
        tm, tn = tms[j], tns[j]
        tiles = ceil_div(cols_, nc, tn, j, groups) * ceil_div(rows, mc, tm, j)
        np.maximum(tiles, 1e-9, out=tiles)
        s = np.floor(sms / tiles)
        np.maximum(s, 1.0, out=s)
        np.minimum(s, k_split_cap, out=s)
        units = tiles * s
        waves = np.ceil(units / sms)
        c = waves / s
        c *= compute_base
        c *= tm * tn
        return tiles, units, waves, c

    # the fastest tile shape per point (as a library heuristic would pick); memory time is the same
    # for every tile, so the fastest is the one with the least compute time
    best = None
    for j in range(n_tiles):
        tiles_j, units_j, waves_j, c_j = per_tile(j)
        if best is None:
            tm_j = np.broadcast_to(np.asarray(tms[j], dtype=np.float64), c_j.shape)
            tn_j = np.broadcast_to(np.asarray(tns[j], dtype=np.float64), c_j.shape)
            best = [c_j, tiles_j, units_j, waves_j, tm_j.copy(), tn_j.copy()]
            continue
        better = c_j < best[0]
        if not better.any():
            continue
        for dst, src in zip(best, (c_j, tiles_j, units_j, waves_j, tms[j], tns[j]), strict=True):
            np.copyto(dst, src, where=better)
    assert best is not None
    compute_s, tiles, units, waves, tm, tn = best
    nbytes = base_bytes * np.ones_like(compute_s)
    epi = np.asarray(epilogue_exposed, dtype=np.float64)
    if (epi > 0).any():
        t = np.maximum(compute_s + epi * (groups * b_out * M * N * rate_m), memory_s)
    else:
        t = np.maximum(compute_s, memory_s)
    t = t + latency_s
    tile_eff = groups * M * N / np.maximum(tiles * tm * tn, 1e-30)
    wave_eff = units / (waves * sms)
    if active.all():  # nothing to blank out
        flops = flops * np.ones_like(t)
        return GemmCost(t + launch_s, compute_s, memory_s, flops, nbytes, tile_eff, wave_eff, tiles, waves)
    tile_eff = np.where(active, tile_eff, 1.0)
    wave_eff = np.where(active, wave_eff, 1.0)
    zero = np.zeros_like(t)
    return GemmCost(
        time_s=np.where(active, t + launch_s, zero),
        compute_s=np.where(active, compute_s, zero),
        memory_s=np.where(active, memory_s, zero),
        flops=np.where(active, flops, zero),
        bytes=np.where(active, nbytes, zero),
        tile_eff=tile_eff,
        wave_eff=wave_eff,
        tiles=np.where(active, tiles, zero),
        waves=np.where(active, waves, zero),
    )


# ------------------------------------------------------------------ compiled fast path (optional)
#
# The same formulas as :func:`gemm_cost`, written per element in the same order of operations, for
# stacked requests of one hardware kind (one tile list).  Used by the serving simulator when numba
# is installed (``pip install numba``) and ``EXPLORER_NUMBA`` is not ``0``; :func:`gemm_cost` stays
# the reference (tests/test_speed_equivalence.py checks both agree).  No temporaries: each output
# element is computed once, in registers.

#: Fields of :class:`GemmCost`, in the order of the fast path's output planes.
GEMM_FIELDS = ("time_s", "compute_s", "memory_s", "flops", "bytes", "tile_eff", "wave_eff", "tiles", "waves")

_KERNEL: Any = None  # the numba kernel once loaded; False when it cannot be


#: Smallest call (rows of one hardware kind) that takes the compiled kernel once it is loaded: every
#: call (64 until 2026-12-07; measured then with the kernel loaded: one-row calls 2.82 -> 2.34 ms on the
#: random mix, 2.19 -> 1.99 ms sweep-like, the same figures -- the frozen reference tables and the
#: validation predictions' digest unchanged -- and ``calibrate --hardware h100`` unchanged at ~4.1 s).
FAST_PATH_MIN_ROWS = 1
#: Smallest call that loads it: importing numba and its cached kernel costs ~0.7 s per process (1.6 s
#: the first time, compiling), what ~10^5 rows save -- so a one-row ``explorer evaluate`` stays on
#: numpy.  Results are the same either way.
FAST_PATH_LOAD_ROWS = 20_000


def fast_path_available() -> bool:
    """Whether the compiled GEMM kernel can run (numba installed and not disabled by
    ``EXPLORER_NUMBA=0``); compiles it (or loads it from numba's cache) on first use."""
    global _KERNEL
    import os

    if os.environ.get("EXPLORER_NUMBA", "1") == "0":
        return False
    if _KERNEL is None:
        try:
            from explorer.costs._gemm_numba import kernel

            _KERNEL = kernel
        except Exception:  # numba missing or unusable here: the numpy path (same results)
            _KERNEL = False
    return _KERNEL is not False


def use_fast_path(rows: int) -> bool:
    """Whether a call of ``rows`` rows (one hardware kind) should take the compiled kernel: numba is
    installed and enabled, the call is not tiny, and the kernel is loaded or worth loading."""
    import os

    if os.environ.get("EXPLORER_NUMBA", "1") == "0" or rows < FAST_PATH_MIN_ROWS:
        return False
    if _KERNEL is None and rows < FAST_PATH_LOAD_ROWS:
        return False
    return fast_path_available()


def gemm_cost_stacked(cols: np.ndarray, eta_c: np.ndarray, *, hbm_bw: np.ndarray, sms: np.ndarray,
                      tiles_m: list[float], tiles_n: list[float], max_split_k: np.ndarray, eta_m: np.ndarray,
                      launch_s: float, latency_s: float, epilogue_exposed: float,
                      memo: dict | None = None, static: bool = False, keep: np.ndarray | None = None) -> np.ndarray:
    """The compiled :func:`gemm_cost` over stacked requests of one hardware kind: ``cols`` is
    ``(8, R, n)`` -- M N K b_a b_w b_out groups peak per request and point -- ``eta_c`` ``(R, n)``,
    the hardware columns ``(n,)`` and one tile list.  Returns ``(9, R, n)``: the planes of
    :data:`GEMM_FIELDS`.  ``memo`` (optional, a dict the caller keeps between calls with the same
    hardware arguments and tile list): the call keeps ``cols`` (which the caller leaves unchanged), its
    compute rates and planes there; the next call of the same shapes updates those planes *in place*
    and returns them, recomputing only the elements whose inputs moved (the others keep the figures
    of the same inputs), so a memo's planes are valid until its next call.  ``static``: the caller
    vouches that only M and the groups (``cols[0]``, ``cols[6]``) can differ from the memo's call --
    the other planes and ``eta_c`` hold the same values -- so the compute rates are the memo's and
    only those two planes are compared.  ``cols`` may also be a sequence of the 8 ``(R, n)`` planes, with
    ``keep`` the ``(8, R, n)`` array the memo keeps as this call's inputs (default ``cols``): a later
    static call reads its planes 0 and 6 (M, groups) alone, any other call all of them.  Call only
    when :func:`fast_path_available`."""
    assert _KERNEL
    pairs = list(dict.fromkeys(zip(tiles_m, tiles_n, strict=True)))  # a repeated tile never wins (first of equals)
    tiles_m, tiles_n = [float(a) for a, _ in pairs], [float(b) for _, b in pairs]
    R, n = cols[0].shape
    pow2 = all(x > 0 and math.frexp(x)[0] == 0.5 for x in tiles_m + tiles_n)
    prev = memo.get("cols") if memo is not None else None
    reuse = prev is not None and prev.shape == (8, R, n)
    static = static and reuse
    if static:
        assert memo is not None
        rate_c = memo["rate_c"]  # the same peaks and efficiencies: the same rates
    else:
        rate_c = memo.pop("spare_rate_c", None) if memo is not None else None  # reuse a buffer (no page faults)
        if rate_c is None or rate_c.shape != (R, n):
            rate_c = np.empty((R, n))
        np.multiply(cols[7], eta_c, out=rate_c)
        np.divide(2.0, rate_c, out=rate_c)  # 2 / (peak * eta_c): the same expressions as gemm_cost
    if memo is not None and reuse:
        prev_cols, prev_rate_c, out = memo["cols"], memo["rate_c"], memo["planes"]
    else:
        prev_cols = cols if keep is None else keep  # (not read: no earlier inputs to compare with)
        prev_rate_c, out = rate_c, np.empty((9, R, n))
    rate_m = 1.0 / (np.broadcast_to(hbm_bw, (n,)) * eta_m)
    _KERNEL(cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], cols[6], rate_c,
            np.ascontiguousarray(np.broadcast_to(rate_m, (n,))), sms, max_split_k,
            np.asarray(tiles_m, dtype=np.float64), np.asarray(tiles_n, dtype=np.float64),
            float(latency_s), float(epilogue_exposed), float(launch_s), pow2, reuse, static, prev_cols,
            prev_rate_c, out)
    if memo is not None:
        if reuse and not static:
            memo["spare_rate_c"] = prev_rate_c
        memo["cols"], memo["rate_c"], memo["planes"] = cols if keep is None else keep, rate_c, out
    return out
