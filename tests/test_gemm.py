"""GEMM cost model (DESIGN.md section 4, explorer/costs/gemm.py): known answers computed by hand,
split-K for skinny GEMMs, and the sawtooth (tile quantization) and staircase (wave quantization)
on the real H100 tile list.

Every expected value below is written from the equations, never copied from the code's output:
``flops = 2MNK``; ``bytes = b_a*M*K + b_w*K*N + b_out*M*N``; ``tiles = ceil(M/Tm)*ceil(N/Tn)``;
``waves = ceil(tiles*s/SMs)``; ``compute_s = waves*SMs*2*Tm*Tn*(K/s)/(peak*eta_c)``;
``memory_s = bytes/(bw*eta_m*min(1, tiles*s/SMs))``; ``time = max(compute_s, memory_s) + launch``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from explorer.costs.gemm import gemm_cost
from explorer.hardware import load_hardware

TFLOP = 1e12
TBPS = 1e12


def run_gemm(M, N, K, *, peak=100 * TFLOP, bw=1 * TBPS, sms=4, tiles=((128, 128),), max_split_k=1,
             eta_c=1.0, eta_m=1.0, launch=0.0, b_a=2.0, b_w=2.0, b_out=2.0, groups=1.0):
    """gemm_cost on arrays of design points (scalars broadcast); tiles shared by every point."""
    M = np.atleast_1d(np.asarray(M, dtype=float))
    N = np.broadcast_to(np.asarray(N, dtype=float), M.shape) if np.ndim(N) == 0 else np.asarray(N, float)
    n = max(len(M), len(N))
    M = np.broadcast_to(M, (n,))
    N = np.broadcast_to(N, (n,))
    K = np.broadcast_to(np.asarray(K, dtype=float), (n,))
    tm = np.tile(np.array([[t[0] for t in tiles]], dtype=float), (n, 1))
    tn = np.tile(np.array([[t[1] for t in tiles]], dtype=float), (n, 1))
    return gemm_cost(M, N, K, b_a, b_w, b_out, peak_flops=peak, hbm_bw=bw, sms=float(sms), tiles_m=tm, tiles_n=tn,
                     max_split_k=float(max_split_k), eta_c=eta_c, eta_m=eta_m, launch_s=launch, groups=groups)


def one(x) -> float:
    a = np.asarray(x)
    assert a.size == 1
    return float(a.reshape(-1)[0])


# ------------------------------------------------------------------------------- known answers


def test_known_answer_full_waves_compute_bound():
    """M=512, N=384, K=1024, bf16, 4 SMs, one 128x128 tile, 100 TFLOPS, 1 TB/s, launch 1 us.

    tiles = 4*3 = 12, waves = ceil(12/4) = 3 (full: no wave waste, no tile waste);
    compute = 3*4*2*128*128*1024 / 1e14 = 402,653,184/1e14 = 4.02653184 us (= 2MNK/peak here);
    bytes = 2*512*1024 + 2*1024*384 + 2*512*384 = 1,048,576 + 786,432 + 393,216 = 2,228,224
    -> memory = 2.228224 us; time = 4.02653184 + 1 us.
    """
    g = run_gemm(512, 384, 1024, launch=1e-6)
    assert one(g.flops) == 2 * 512 * 384 * 1024 == 402_653_184
    assert one(g.bytes) == 2_228_224
    assert one(g.tiles) == 12
    assert one(g.waves) == 3
    assert one(g.compute_s) == pytest.approx(4.02653184e-6, rel=1e-12)
    assert one(g.memory_s) == pytest.approx(2.228224e-6, rel=1e-12)
    assert one(g.time_s) == pytest.approx(5.02653184e-6, rel=1e-12)
    assert one(g.tile_eff) == pytest.approx(1.0)
    assert one(g.wave_eff) == pytest.approx(1.0)


def test_known_answer_one_row_past_a_tile_costs_a_tile_row_and_a_wave():
    """M=513 (one row past 4*128): tiles = ceil(513/128)*3 = 5*3 = 15, waves = ceil(15/4) = 4.

    compute = 4*4*2*128*128*1024/1e14 = 16*33,554,432/1e14 = 5.36870912 us although the useful
    FLOPs grew by 1/512 only; tile efficiency = 513*384/(15*128*128) = 0.8015625, wave
    efficiency = 15/16.
    """
    g = run_gemm(513, 384, 1024)
    assert one(g.flops) == 2 * 513 * 384 * 1024
    assert one(g.tiles) == 15
    assert one(g.waves) == 4
    assert one(g.compute_s) == pytest.approx(5.36870912e-6, rel=1e-12)
    assert one(g.tile_eff) == pytest.approx(513 * 384 / (15 * 128 * 128), rel=1e-12)
    assert one(g.wave_eff) == pytest.approx(15 / 16, rel=1e-12)
    assert one(g.time_s) == pytest.approx(5.36870912e-6, rel=1e-12)


def test_known_answer_memory_bound_with_efficiencies():
    """M=4, N=K=4096 at 1 PFLOPS (so the padded tiles stay cheap), eta_c=0.5, eta_m=0.8.

    tiles = 1*32 = 32, waves = 8; compute = 8*4*2*128*128*4096/(1e15*0.5) = 8.589934592 us;
    bytes = 2*4*4096 + 2*4096*4096 + 2*4*4096 = 32,768 + 33,554,432 + 32,768 = 33,619,968;
    memory = 33,619,968/(1e12*0.8) = 42.02496 us; time = memory + 2 us launch.
    """
    g = run_gemm(4, 4096, 4096, peak=1000 * TFLOP, eta_c=0.5, eta_m=0.8, launch=2e-6)
    assert one(g.bytes) == 33_619_968
    assert one(g.compute_s) == pytest.approx(8.589934592e-6, rel=1e-12)
    assert one(g.memory_s) == pytest.approx(42.02496e-6, rel=1e-12)
    assert one(g.time_s) == pytest.approx(44.02496e-6, rel=1e-12)


def test_bytes_use_each_operand_format():
    """b_a=1 (fp8 activations), b_w=0.5625 (NVFP4 weights), b_out=4 (fp32 logits), M=256, N=512, K=1024:
    bytes = 1*256*1024 + 0.5625*1024*512 + 4*256*512 = 262,144 + 294,912 + 524,288 = 1,081,344."""
    g = run_gemm(256, 512, 1024, b_a=1.0, b_w=0.5625, b_out=4.0)
    assert one(g.bytes) == 1_081_344


def test_grouped_gemm_counts_every_group():
    """3 groups (experts) of M=N=128, K=1024 on 4 SMs, no split-K: tiles = 3, waves = 1,
    compute = 1*4*2*128*128*1024/1e14 = 1.34217728 us (one SM idle still counts);
    bytes = 3*(2*128*1024 + 2*1024*128 + 2*128*128) = 3*(262,144 + 262,144 + 32,768) = 1,671,168;
    3 groups x ceil(128/32) = 12 column slices occupy the 4 SMs: memory = 1.671168 us."""
    g = run_gemm(128, 128, 1024, groups=3.0)
    assert one(g.flops) == 3 * 2 * 128 * 128 * 1024
    assert one(g.bytes) == 1_671_168
    assert one(g.tiles) == 3
    assert one(g.compute_s) == pytest.approx(1.34217728e-6, rel=1e-12)
    assert one(g.memory_s) == pytest.approx(1.671168e-6, rel=1e-12)
    assert one(g.wave_eff) == pytest.approx(3 / 4)


def test_fastest_tile_is_picked():
    """Tiles 128x128 and 64x64, one SM, M=N=64, K=1024: the 128x128 tile computes 2*128*128*1024
    FLOPs, the 64x64 tile 2*64*64*1024 = 8,388,608 -> 83.88608 ns at 100 TFLOPS, the pick."""
    g = run_gemm(64, 64, 1024, sms=1, tiles=((128, 128), (64, 64)), bw=1e18)
    assert one(g.compute_s) == pytest.approx(8_388_608 / 1e14, rel=1e-12)
    assert one(g.tile_eff) == pytest.approx(1.0)


def test_zero_tokens_cost_nothing():
    g = run_gemm(0.0, 4096, 4096, launch=5e-6)
    assert one(g.time_s) == 0.0 and one(g.flops) == 0.0 and one(g.bytes) == 0.0


# ------------------------------------------------------------------------------------ split-K


def test_split_k_divides_the_compute_of_a_skinny_gemm():
    """Decode-like M=1, N=128, K=4096 on 4 SMs, tile 128x128, max_split_k=8.

    Compute: one output tile; s = floor(SMs/tiles) = 4, under both caps (8, K/256 = 16); units 4,
    waves 1: compute = 1*4*2*128*128*(4096/4)/1e15 = 0.134217728 us.  Without split-K
    (max_split_k=1): s = 1, compute = 4*2*128*128*4096/1e15 = 0.536870912 us.
    Memory: column slices ceil(128/32) = 4 already occupy the 4 SMs (s_m = 1), so split-K does not
    change it: bytes = 2*4096 + 2*4096*128 + 2*128 = 1,057,024 -> 1.057024 us either way.
    """
    g = run_gemm(1, 128, 4096, max_split_k=8, peak=1000 * TFLOP)
    g1 = run_gemm(1, 128, 4096, max_split_k=1, peak=1000 * TFLOP)
    assert one(g.compute_s) == pytest.approx(0.134217728e-6, rel=1e-12)
    assert one(g1.compute_s) == pytest.approx(0.536870912e-6, rel=1e-12)
    assert one(g.waves) == 1 and one(g1.waves) == 1
    for x in (g, g1):
        assert one(x.bytes) == 1_057_024
        assert one(x.memory_s) == pytest.approx(1.057024e-6, rel=1e-12)


def test_memory_occupancy_capped_by_k_per_split():
    """N=32 is one column slice on 4 SMs; K=512 allows floor(512/256) = 2 splits: s_m = 2,
    occupancy 2/4.  bytes = 2*512 + 2*512*32 + 2*32 = 1,024 + 32,768 + 64 = 33,856;
    memory = 33,856/(1e12*0.5) = 67.712 ns."""
    g = run_gemm(1, 32, 512, max_split_k=8, peak=1000 * TFLOP)
    assert one(g.bytes) == 33_856
    assert one(g.memory_s) == pytest.approx(67.712e-9, rel=1e-12)


def test_memory_occupancy_capped_by_max_split_k():
    """16 SMs, N=32 (one slice), K=8192 (K/256 = 32), max_split_k = 8: s_m = min(16, 8, 32) = 8,
    occupancy 8/16; bytes = 2*8192 + 2*8192*32 + 2*32 = 16,384 + 524,288 + 64 = 540,736;
    memory = 540,736/(1e12*0.5) = 1.081472 us."""
    g = run_gemm(1, 32, 8192, sms=16, max_split_k=8, peak=1000 * TFLOP)
    assert one(g.bytes) == 540_736
    assert one(g.memory_s) == pytest.approx(1.081472e-6, rel=1e-12)


def test_split_k_keeps_the_split_work_in_one_wave():
    """3 tiles (N=384) on 4 SMs: s = floor(4/3) = 1 (a split of 2 would need 6 units, 2 waves),
    units 3, waves 1, compute = 1*4*2*128*128*4096/1e15 = 0.536870912 us, wave efficiency 3/4.
    2 tiles (N=256): s = floor(4/2) = 2, units 4, compute = 4*2*128*128*2048/1e15 = 0.268435456 us.
    Memory (N=384): 12 slices occupy the SMs; bytes = 2*4096 + 2*4096*384 + 2*384 = 3,154,688."""
    g = run_gemm(1, 384, 4096, max_split_k=8, peak=1000 * TFLOP)
    assert one(g.waves) == 1
    assert one(g.compute_s) == pytest.approx(0.536870912e-6, rel=1e-12)
    assert one(g.wave_eff) == pytest.approx(3 / 4)
    assert one(g.bytes) == 3_154_688
    assert one(g.memory_s) == pytest.approx(3.154688e-6, rel=1e-12)
    g2 = run_gemm(1, 256, 4096, max_split_k=8, peak=1000 * TFLOP)
    assert one(g2.compute_s) == pytest.approx(0.268435456e-6, rel=1e-12)


# ---------------------------------------------------------------- sawtooth and staircase (H100)


@pytest.fixture(scope="module")
def h100():
    return load_hardware("h100")


def h100_gemm(h, M, N, K):
    return run_gemm(M, N, K, peak=h.peak_flops["bf16"], bw=h.hbm_bw, sms=h.sms, tiles=h.gemm_tiles,
                    max_split_k=h.max_split_k, eta_c=h.eta_compute, eta_m=h.eta_memory, launch=h.kernel_launch_s)


def test_h100_tiles_are_the_ones_derived_below(h100):
    assert h100.sms == 132
    assert set(h100.gemm_tiles) == {(128, 256), (128, 128), (64, 256), (64, 128)}


def test_sawtooth_mlp_width_one_past_a_tile_multiple(h100):
    """Tile quantization.  M = 16,896 = 132*128 tokens, K = 4096, bf16 on H100 (132 SMs).

    With 128-row tiles there are 132 tile rows, so every tile column is exactly one full wave;
    with 64-row tiles 264 rows = two waves per column at half the tile area: the same cost.  So
    (no wave waste at all) the fastest tile costs ``ceil(N/128)`` waves of 128x128 tiles:
    ``compute_s = ceil(N/128) * 132*2*128*128*K/(peak*eta_c)`` (a 256-wide tile costs
    ``128*2*ceil(N/256)`` >= that).  N = 128k + 1 therefore costs (k+1)/k times N = 128k.
    """
    M, K = 16_896, 4096
    col = 132 * 2 * 128 * 128 * K / (h100.peak_flops["bf16"] * h100.eta_compute)
    N = np.arange(1024, 4097)
    g = h100_gemm(h100, M, N, K)
    assert np.all(g.compute_s > g.memory_s)  # compute-bound throughout
    np.testing.assert_allclose(g.compute_s, np.ceil(N / 128) * col, rtol=1e-12)
    for k in (8, 12, 24, 31):
        a, b = h100_gemm(h100, M, [128 * k, 128 * k + 1], K).time_s
        launch = h100.kernel_launch_s
        assert (b - launch) / (a - launch) == pytest.approx((k + 1) / k, rel=1e-12)
        assert b / a == pytest.approx((k + 1) / k, rel=0.015)  # the 2 us launch hardly matters
    # the sawtooth: achieved FLOP/s peaks at multiples of 128 and drops right after them
    rate = g.flops / g.time_s
    at = rate[(N % 128) == 0]
    after = rate[(N % 128) == 1]
    assert np.all(at[:-1] > after[:len(at) - 1] * 1.03)
    assert np.max(rate) <= h100.peak_flops["bf16"] * h100.eta_compute


def test_staircase_tile_count_past_a_multiple_of_the_sm_count(h100):
    """Wave quantization.  M = 2,112 = 33*64 tokens, K = 8192, bf16 on H100 (132 SMs).

    64x128 tiles: tiles = 33*ceil(N/128), a multiple of 132 exactly when ceil(N/128) is a multiple
    of 4, i.e. at N = 512j; at N = 512j + 1 the count is 132j + 33 -> one extra wave.  Each wave
    costs ``132*2*64*128*K/(peak*eta_c)``; so ``compute_s = ceil(N/512) * wave`` -- a staircase
    with steps of exactly one wave at N = 512j + 1 and flat treads between.  (The other tiles
    never do better here: 128-row tiles waste 64 of 2,176 rows and need 17*ceil(N/128) tiles,
    256-wide ones need ``ceil(N/256)`` columns; ``_wave_cost`` below enumerates them with the
    DESIGN equations.)  Sweep N from 512 (from there on every tile count fills the SMs, so split-K
    is not involved).
    """
    M, K = 2112, 8192
    wave = 132 * 2 * 64 * 128 * K / (h100.peak_flops["bf16"] * h100.eta_compute)
    N = np.arange(512, 8193)
    g = h100_gemm(h100, M, N, K)
    assert np.all(g.compute_s > g.memory_s)
    np.testing.assert_allclose(g.compute_s, np.ceil(N / 512) * wave, rtol=1e-12)
    # the other tiles do not beat 64x128 (DESIGN equations enumerated by hand, no split-K needed)
    for n in (512, 513, 1000, 1025, 4096, 4097, 8192):
        assert _wave_cost(M, n, h100) == 64 * 128 * math.ceil(n / 512)
    # steps: where the time changes, it grows by one wave, exactly at N = 512j + 1
    t = g.time_s
    jumps = np.flatnonzero(np.diff(t) != 0) + 1
    np.testing.assert_array_equal(N[jumps], np.arange(513, 8193, 512))
    np.testing.assert_allclose(np.diff(t)[jumps - 1], wave, rtol=1e-9)
    # the tile count of the winning 64x128 tile has just passed a multiple of 132 at each step
    tiles_64x128 = 33 * np.ceil(N[jumps] / 128)
    assert np.all(np.mod(tiles_64x128, 132) == 33)
    # and a step of one wave is 1/j of the time (j waves before it), launch aside
    launch = h100.kernel_launch_s
    assert (t[N == 4097][0] - launch) / (t[N == 4096][0] - launch) == pytest.approx(9 / 8, rel=1e-12)


def _wave_cost(M: int, N: int, h) -> int:
    """min over tiles of waves*Tm*Tn (output elements computed per SM): DESIGN's tile + wave model."""
    return min(math.ceil(math.ceil(M / tm) * math.ceil(N / tn) / h.sms) * tm * tn for tm, tn in h.gemm_tiles)


def test_known_answer_gaudi2_matrix_engines_as_the_wave_unit():
    """Intel Gaudi 2 (hardware/gaudi2.yaml): its 2 MMEs are the units output tiles spread over, one
    engine block a tile, 256x256, 128x512 or 512x128.  BF16 at 432 TFLOPS, eta 1.

    M=N=768, K=4096: 256x256 gives 3*3 = 9 blocks in ceil(9/2) = 5 waves; 128x512 gives 6*2 = 12
    blocks in 6 waves; 512x128 gives 2*6 = 12 in 6 -- each block costs the same 2*65,536*K FLOP, so
    256x256 wins: compute = 5*2*2*256*256*4096/432e12 = 5,368,709,120/432e12 = 12.4275674 us (wave
    efficiency 9/10) against the useful 2*768*768*4096/432e12 = 11.1848107 us.
    M=128 (a decode batch), N=K=8192: 256x256 pads M to 256 (32 blocks, 16 waves); 128x512 fits it
    (1*16 = 16 blocks, 8 waves): compute = 8*2*2*128*512*8192/432e12 = 39.768 us, tile efficiency 1."""
    h = load_hardware("gaudi2")
    assert h.sms == 2 and h.family == "gaudi" and h.vendor == "intel"
    assert h.gemm_tiles == ((256, 256), (128, 512), (512, 128))
    g = run_gemm(768, 768, 4096, peak=h.peak_flops["bf16"], bw=h.hbm_bw, sms=h.sms, tiles=h.gemm_tiles)
    assert one(g.tiles) == 9 and one(g.waves) == 5
    assert one(g.wave_eff) == pytest.approx(0.9, rel=1e-12)
    assert one(g.compute_s) == pytest.approx(5 * 2 * 2 * 256 * 256 * 4096 / 432e12, rel=1e-12)
    assert one(g.compute_s) == pytest.approx(12.4275674e-6, rel=1e-8)
    g = run_gemm(128, 8192, 8192, peak=h.peak_flops["bf16"], bw=h.hbm_bw, sms=h.sms, tiles=h.gemm_tiles)
    assert one(g.tiles) == 16 and one(g.waves) == 8 and one(g.tile_eff) == pytest.approx(1.0)
    assert one(g.compute_s) == pytest.approx(8 * 2 * 2 * 128 * 512 * 8192 / 432e12, rel=1e-12)
    assert one(g.compute_s) == pytest.approx(39.768e-6, rel=1e-4)
