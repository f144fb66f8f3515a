"""Kernel microbenchmarks as validation cases (explorer/kernel_cases.py) and the kernel cost model
behind them: known answers worked by hand from the equations (never copied from the code's output),
bad rows kept as unsupported cases, the physical roofline as an invariant, and the shipped
validation/kernels.yaml scored against the kernel bar (median |error| per kernel group).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from conftest import make_toy_hardware
from hypothesis import given, settings
from hypothesis import strategies as st

from explorer.costs.comm import allreduce_s, collective_s
from explorer.hardware import load_hardware
from explorer.kernel_cases import (
    DEFAULT_KERNELS,
    TARGETS,
    is_kernels_file,
    kernel_ideal,
    load_kernel_cases,
    parse_kernel_rows,
    predict_kernel_cases,
    roofline_kernel_cases,
    target_medians,
)
from explorer.kernel_fit import PARAMS, fit_kind, kernel_residuals
from explorer.specio import read_yaml


def toy(**kw):
    """Round numbers: 100 TFLOPS bf16, 1 TB/s, 1 SM, one 128x128 tile, no split-K, efficiencies 1."""
    base = dict(gemm_tiles=((128, 128),), max_split_k=1)
    return make_toy_hardware(**{**base, **kw})


def one(rows, hw, field_="value"):
    cases = parse_kernel_rows(rows, "test")
    for c in cases:
        assert c.supported, c.reason
    return predict_kernel_cases(cases, lambda _n: hw)


def gemm_row(m, n, k, dtype="bf16", **kw):
    return {"id": f"g{m}x{n}x{k}", "kind": "gemm", "gpu_class": "H100", "num_gpus": 1, "dtype": dtype,
            "m": m, "n": n, "k": k, "metric": "achieved_tflops", "value": 1.0, **kw}


# ------------------------------------------------------------------------------------ GEMM


def test_gemm_latency_bound_known_answer():
    """M=N=K=128 bf16 on the toy GPU with a 5 us kernel latency and the epilogue exposed.

    One tile, one wave: compute = 2*128^3/1e14 = 41.94304 ns; output write = 2*128*128/1e12 =
    32.768 ns; all bytes = 3*2*128*128 = 98,304 -> 98.304 ns.  time = max(41.94304 + 32.768,
    98.304) ns + 5 us = 5.098304 us, so 4,194,304 FLOP / 5.098304 us = 0.82269... TFLOPS: the
    latency, not the tensor cores, sets the rate (a 1024^3-class GEMM).
    """
    hw = toy(kernel_latency_s=5e-6, gemm_epilogue_exposed=1.0)
    [p] = one([gemm_row(128, 128, 128)], hw)
    assert p == pytest.approx(4_194_304 / 5.098304e-6 / 1e12, rel=1e-9)
    assert p < 0.01 * hw.peak_flops["bf16"] / 1e12


def test_gemm_compute_bound_known_answer():
    """M=N=K=4096 bf16, 4 SMs, tile 128x128, eta_c = 0.5, latency 5 us, epilogue exposed.

    tiles = 32*32 = 1024, waves = 256 (full); compute = 256*4*2*128*128*4096/(1e14*0.5) =
    2.748779069 ms (= 2MNK/(peak*eta)); output write = 2*4096^2/1e12 = 33.554432 us; bytes =
    3*2*4096^2 -> 100.663296 us of memory, hidden.  time = 2748.779069 + 33.554432 + 5 us.
    """
    hw = toy(sms=4, eta_compute=0.5, kernel_latency_s=5e-6, gemm_epilogue_exposed=1.0)
    [p] = one([gemm_row(4096, 4096, 4096)], hw)
    flops = 2 * 4096**3
    t = flops / (1e14 * 0.5) + 2 * 4096**2 / 1e12 + 5e-6
    assert p == pytest.approx(flops / t / 1e12, rel=1e-9)
    # without the new terms the same GEMM is the old max(compute, memory) model
    [p0] = one([gemm_row(4096, 4096, 4096)], toy(sms=4, eta_compute=0.5))
    assert p0 == pytest.approx(50.0, rel=1e-9)


def test_gemm_epilogue_is_the_k_dependent_drain():
    """Compute-bound efficiency with the output write exposed is 1/(1 + b_out*peak*eta/(2*K*bw*eta_m)):
    on the toy GPU (100 TFLOPS, 1 TB/s, bf16 out) that is K/(K + 100): K=100 -> 1/2, K=900 -> 9/10."""
    hw = toy(sms=1, gemm_epilogue_exposed=1.0)
    for k, eff in ((128 * 100 // 128, 0.5), (900, 0.9)):
        [p] = one([gemm_row(2048, 2048, k)], hw)
        assert p == pytest.approx(100.0 * eff, rel=1e-9)


def test_grouped_gemm_counts_experts_and_pads_each():
    """4 experts of 100 tokens, N=K=1024, toy GPU with 4 SMs: each expert pads 100 rows to one
    128-row tile: tiles = 4*8 = 32, waves = 8, compute = 8*4*2*128*128*1024/1e14 = 10.73741824 us;
    useful FLOPs = 4*2*100*1024*1024 = 838,860,800 -> 78.125 TFLOPS (= 100 * 100/128)."""
    row = {"id": "gg", "kind": "grouped_gemm", "gpu_class": "H800", "num_gpus": 1, "dtype": "bf16",
           "experts": 4, "tokens_per_expert": 100, "n": 1024, "k": 1024, "layout": "m-grouped contiguous",
           "metric": "achieved_tflops", "value": 1.0}
    [p] = one([row], toy(sms=4))
    assert p == pytest.approx(838_860_800 / 10.73741824e-6 / 1e12, rel=1e-9)
    assert p == pytest.approx(78.125, rel=1e-9)


# ------------------------------------------------------------------------------- attention


def test_decode_attention_is_bytes_over_bandwidth():
    """16 sequences x 1000 tokens, 8 KV heads of 128, bf16, contiguous, eta_m = 0.8, latency 2 us.

    bytes = 16*1000*8*128*2 (K,V)*2 = 65,536,000 -> 81.92 us at 0.8 TB/s; FLOPs 4*16*1000*8*128 =
    65,536,000 -> 0.65536 us at 100 TFLOPS (hidden); 16*8 = 128 work items >= 1 SM: no split, one
    latency: 83.92 us -> 780.934... GB/s.  Paged by 16 tokens with 1024 bytes of overhead a page:
    each 16*128*2 = 4096-byte page row costs 1.25x -> 102.4 us of reads.
    """
    row = {"id": "d", "kind": "decode_attention", "gpu_class": "H100", "num_gpus": 1, "dtype": "bf16",
           "batch": 16, "seqlen": 1000, "heads": 8, "kv_heads": 8, "head_dim": 128, "metric": "achieved_GB_s",
           "value": 1.0}
    hw = toy(eta_memory=0.8, kernel_latency_s=2e-6)
    [p] = one([row], hw)
    assert p == pytest.approx(65_536_000 / 83.92e-6 / 1e9, rel=1e-9)
    [pp] = one([{**row, "page_size": 16}], replace(hw, kv_page_overhead_bytes=1024.0))
    assert pp == pytest.approx(65_536_000 / 104.4e-6 / 1e9, rel=1e-9)
    [lat] = one([{**row, "metric": "latency_us"}], hw)
    assert lat == pytest.approx(83.92, rel=1e-9)


def test_prefill_attention_known_answer():
    """One sequence of 256 tokens, one head of 128, non-causal, tile 128, 0.5 tile overhead,
    exp 1e12/s with half exposed, output write exposed.

    nq = 2 query tiles x 2 key blocks = 4 blocks + 0.5*2 = 5 block units; a block is
    2*128*128*256/1e14 = 83.886080 ns of matmul + 0.5*128*128/1e12 = 8.192 ns of softmax =
    92.078080 ns -> 460.3904 ns; output write 2*256*128/1e12 = 65.536 ns; reads and writes
    (256*(128+256) + 256*128)*2 = 262,144 bytes -> 262.144 ns, hidden.  Benchmark FLOPs
    4*256^2*128 = 33,554,432 over 525.9264 ns.  Causal: 3 blocks + 1 = 4 units -> 368.31232 ns
    + 65.536 ns for half the FLOPs.
    """
    row = {"id": "a", "kind": "attention_fwd", "gpu_class": "H100", "num_gpus": 1, "dtype": "bf16",
           "batch": 1, "seqlen": 256, "heads": 1, "head_dim": 128, "causal": False,
           "metric": "achieved_tflops", "value": 1.0, "library": "FlashAttention-3"}
    hw = toy(attention_tile=128.0, attention_tile_overhead=0.5, exp_rate=1e12, softmax_exposed=0.5,
             gemm_epilogue_exposed=1.0)
    [p] = one([row], hw)
    assert p == pytest.approx(33_554_432 / 525.9264e-9 / 1e12, rel=1e-9)
    [pc] = one([{**row, "causal": True}], hw)
    assert pc == pytest.approx(16_777_216 / (368.31232e-9 + 65.536e-9) / 1e12, rel=1e-9)


def test_flash_attention_2_on_hopper_is_legacy():
    """FA2 on an H100 runs mma.sync: its matmuls get legacy_mma_fraction; FA3 does not; on an A100
    (Ampere, where mma.sync is native) FA2 is not legacy."""
    base = {"kind": "attention_fwd", "num_gpus": 1, "dtype": "bf16", "batch": 4, "seqlen": 4096, "heads": 16,
            "head_dim": 128, "causal": False, "metric": "achieved_tflops", "value": 1.0}
    cases = parse_kernel_rows([{**base, "id": "fa2", "gpu_class": "H100", "library": "FlashAttention-2"},
                               {**base, "id": "fa3", "gpu_class": "H100", "library": "FlashAttention-3"},
                               {**base, "id": "a100", "gpu_class": "A100", "library": "FlashAttention 2.0"}], "t")
    assert [c.values["legacy"] for c in cases] == [True, False, False]
    hw = toy(legacy_mma_fraction=0.5)
    fa2, fa3, _ = predict_kernel_cases(cases, lambda _n: hw)
    assert fa2 == pytest.approx(fa3 / 2, rel=1e-6)


# ------------------------------------------------------------------------------ collectives


def test_allreduce_latency_and_bandwidth_regimes():
    """8 GPUs, 100 GB/s, 1 us Simple step, LL at 1/4 bandwidth with 0.5 us steps, 10 us per call;
    NCCL base latencies LL 6.6 us, Simple 8.4 us.

    1 KiB: Simple 8.4 + 14*1 + 1.75*1024/100e9 = 22.41792 us; LL 6.6 + 14*0.5 + 1.75*1024/25e9 =
    13.67168 us -> LL, t = 23.67168 us.  1 GB: Simple 22.4 us + 17.5 ms wins (LL: 70 ms).
    With NVLS at 0.8 and 20 us: 1 GB takes 20 us + 12.5 ms instead (busbw 1.75 GB / t).
    """
    hw = toy(scaleup_bw=100e9, scaleup_latency_s=1e-6, collective_latency_s=10e-6, ll_bw_fraction=0.25,
             ll_step_s=0.5e-6)
    row = {"id": "r", "kind": "allreduce", "gpu_class": "H100", "num_gpus": 8, "dtype": "fp32",
           "metric": "busbw_GB_s", "value": 1.0}
    small, big = one([{**row, "id": "s", "message_bytes": 1024}, {**row, "id": "b", "message_bytes": 1e9}], hw)
    assert small == pytest.approx(1.75 * 1024 / 23.67168e-6 / 1e9, rel=1e-9)
    assert big == pytest.approx(1.75e9 / (10e-6 + 22.4e-6 + 17.5e-3) / 1e9, rel=1e-9)
    nv = replace(hw, nvls_eta=0.8, nvls_latency_s=20e-6)
    [p] = one([{**row, "message_bytes": 1e9}], nv)
    assert p == pytest.approx(1.75e9 / (10e-6 + 20e-6 + 12.5e-3) / 1e9, rel=1e-9)
    [ring] = one([{**row, "message_bytes": 1e9, "algo": "Ring (NCCL_NVLS_ENABLE=0)"}], nv)
    assert ring == pytest.approx(big, rel=1e-12)


def test_mesh_scaleup_gives_a_pair_one_link():
    """xGMI mesh of 8: 2 GPUs have 1 of the 7 links: 448/7 = 64 GB/s, ring busbw = 64 GB/s * eta."""
    hw = toy(scaleup_bw=448e9, scaleup_latency_s=0.0, scaleup_mesh=True)
    row = {"id": "m", "kind": "allreduce", "gpu_class": "MI300X", "num_gpus": 2, "dtype": "fp32",
           "message_bytes": 4e9, "metric": "busbw_GB_s", "value": 1.0}
    [p] = one([row], hw)
    assert p == pytest.approx(64.0, rel=1e-9)


def test_old_allreduce_formula_is_kept():
    n, S, bw, a, eta = np.array([1.0, 2, 8]), np.array([1e6, 2e6, 4e7]), 4.5e11, 1e-6, 0.8
    want = np.where(n > 1, 2 * (n - 1) / n * S / (bw * eta) + 2 * (n - 1) * a, 0.0)
    np.testing.assert_allclose(allreduce_s(S, n, bw, a, eta), want, rtol=1e-12)


def test_ep_dispatch_low_latency_known_answer():
    """DeepEP low-latency dispatch: 128 tokens x top-8, hidden 7168 in FP8 + one fp32 scale per 128
    channels = 7392 bytes a copy; logical bytes 128*8*7392 = 7,569,408.  EP 16 over two 8-GPU
    domains: 8/16 of the copies leave the node at 50 GB/s: 3,784,704 B -> 75.69408 us, plus the
    5 us scale-out hop and a 10 us call: 90.69408 us, and 7,569,408 B / t as 'logical' GB/s."""
    hw = toy(scaleout_bw=50e9, scaleout_latency_s=5e-6, collective_latency_s=10e-6, scaleup_bw=1e15)
    row = {"id": "ll", "kind": "alltoall_dispatch", "gpu_class": "H800", "num_gpus": 16, "ep": 16, "dtype": "fp8",
           "tokens": 128, "hidden": 7168, "topk": 8, "metric": "latency_us", "value": 1.0}
    lat, gbs = one([row, {**row, "id": "bw", "metric": "achieved_GB_s"}], hw)
    assert lat == pytest.approx(90.69408, rel=1e-9)
    assert gbs == pytest.approx(7_569_408 / 90.69408e-6 / 1e9, rel=1e-9)


def test_collective_never_beats_the_link():
    S = np.logspace(3, 10, 30)
    t = collective_s(S, 8.0, domain=8.0, up_bw=450e9, up_step_s=1e-6, out_bw=50e9, out_step_s=5e-6, eta_n=0.8,
                     nvls_eta=0.6, nvls_latency_s=25e-6)
    busbw = 1.75 * S / t
    assert np.all(busbw <= 1.75 * 450e9 * 0.6 + 1e-6) and np.all(np.diff(t) > 0)


# ------------------------------------------------------------------------------- bad rows


@pytest.mark.parametrize("row, field_", [
    ({"kind": "gemm", "m": float("nan"), "n": 8, "k": 8}, "m"),
    ({"kind": "gemm", "m": 8, "n": -8, "k": 8}, "n"),
    ({"kind": "gemm", "m": 8, "n": 8, "k": 0}, "k"),
    ({"kind": "gemm", "m": 8, "n": 8}, "k missing"),
    ({"kind": "gemm", "m": 8, "n": 8, "k": 8, "value": float("inf")}, "value"),
    ({"kind": "gemm", "m": 8, "n": 8, "k": 8, "value": -3}, "value"),
    ({"kind": "gemm", "m": 8, "n": 8, "k": 8, "value": "fast"}, "value"),
    ({"kind": "gemm", "m": "big", "n": 8, "k": 8}, "m"),
    ({"kind": "gemm", "m": 8, "n": 8, "k": 8, "dtype": "int2"}, "dtype"),
    ({"kind": "gemm", "m": 8, "n": 8, "k": 8, "dtype": "fp4"}, "fp4 tensor cores"),
    ({"kind": "conv2d", "m": 8}, "kind 'conv2d'"),
    ({"kind": "gemm", "m": 8, "n": 8, "k": 8, "gpu_class": "TPUv5"}, "gpu_class 'TPUv5'"),
    ({"kind": "gemm", "m": 8, "n": 8, "k": 8, "gpu_class": "H20-3e"}, "gpu_class 'H20-3e'"),
    ({"kind": "gemm", "m": 8, "n": 8, "k": 8, "metric": "busbw_GB_s"}, "metric 'busbw_GB_s'"),
    ({"kind": "allreduce", "message_bytes": None, "metric": "busbw_GB_s"}, "message_bytes missing"),
    ({"kind": "allreduce", "message_bytes": 1e6, "num_gpus": 1, "metric": "busbw_GB_s"}, "num_gpus"),
    ({"kind": "attention_fwd", "batch": None, "seqlen": 4, "head_dim": 64}, "batch missing"),
    ({"kind": "attention_fwd", "batch": 1, "seqlen": 4, "head_dim": 64, "causal": "yes"}, "causal"),
    ({"kind": "alltoall_combine", "tokens": 1, "hidden": None, "topk": 8, "ep": 8, "dtype": "bf16",
      "metric": "latency_us"}, "hidden missing"),
    ({"kind": "grouped_gemm", "experts": 4, "m": 64, "n": 8, "k_avg": 8, "layout": "k-grouped (weight-gradient)"},
     "training"),
])
def test_bad_rows_are_kept_unsupported_with_a_reason_naming_the_field(row, field_):
    full = {"id": "bad", "gpu_class": "A100", "num_gpus": 1, "dtype": "bf16", "metric": "achieved_tflops",
            "value": 1.0, **row}
    [c] = parse_kernel_rows([full], "test")
    assert not c.supported and field_ in c.reason
    assert np.isnan(predict_kernel_cases([c])[0])


def test_rows_that_are_not_mappings_and_duplicates():
    cases = parse_kernel_rows(["oops", None, gemm_row(8, 8, 8), gemm_row(8, 8, 8)], "t")
    assert [c.supported for c in cases] == [False, False, True, False]
    assert "not a mapping" in cases[0].reason and "duplicate id" in cases[3].reason
    assert parse_kernel_rows("not a list", "t") == []  # type: ignore[arg-type]


def test_zero_bus_bandwidth_is_scored_on_its_latency():
    row = {"id": "z", "kind": "allreduce", "gpu_class": "H100", "num_gpus": 8, "dtype": "fp32", "message_bytes": 8,
           "metric": "busbw_GB_s", "value": 0.0, "also_reported": {"latency_us": 30.0}}
    [c] = parse_kernel_rows([row], "t")
    assert c.supported and c.metric == "latency_us" and c.measured == 30.0


def test_is_kernels_file():
    assert is_kernels_file(read_yaml(DEFAULT_KERNELS))
    assert not is_kernels_file({"measurements": [{"id": "x", "metric": "tok/s"}]})
    assert not is_kernels_file([]) and not is_kernels_file({"measurements": []})


# ------------------------------------------------------------------------ physical invariants

KINDS = {"h100": "H100", "b200": "B200", "mi355x": "MI355X", "a100-80gb": "A100"}


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(KINDS)), st.integers(1, 20000), st.integers(16, 30000), st.integers(16, 30000),
       st.sampled_from(["bf16", "fp8"]))
def test_gemm_never_above_peak_nor_faster_with_more_rows(name, m, n, k, dtype):
    hw = load_hardware(name)
    if dtype not in hw.peak_flops:
        dtype = "bf16"
    rows = [gemm_row(m, n, k, dtype, gpu_class=KINDS[name]),
            {**gemm_row(m + 1 + m // 3, n, k, dtype, gpu_class=KINDS[name]), "id": "bigger"}]
    cases = parse_kernel_rows(rows, "h")
    tf = predict_kernel_cases(cases)
    roof = roofline_kernel_cases(cases)
    assert np.all(tf <= hw.peak_flops[dtype] / 1e12 * (1 + 1e-9))
    assert np.all(tf <= roof * (1 + 1e-9))
    flops = np.array([2.0 * r["m"] * n * k for r in rows])
    t = flops / (tf * 1e12)
    assert t[1] >= t[0] * (1 - 1e-12)  # more rows never take less time


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["h100", "b200", "gb200", "a100-80gb", "mi300x"]), st.floats(3.0, 10.3),
       st.integers(2, 300))
def test_collectives_never_beat_the_roofline(name, log_bytes, n):
    row = {"id": "c", "kind": "allreduce", "gpu_class": {"h100": "H100", "b200": "B200", "gb200": "GB200",
                                                          "a100-80gb": "A100", "mi300x": "MI300X"}[name],
           "num_gpus": n, "dtype": "fp32", "message_bytes": 10**log_bytes, "metric": "busbw_GB_s", "value": 1.0}
    cases = parse_kernel_rows([row], "h")
    [p], [r] = predict_kernel_cases(cases), roofline_kernel_cases(cases)
    hw = load_hardware(name)
    assert 0 < p <= r * (1 + 1e-9)
    assert r <= 2 * hw.scaleup_bw / 1e9 * (1 + 1e-9)  # NVLS's bound: every byte in and out once


def test_no_shipped_prediction_beats_its_roofline():
    cases = load_kernel_cases()
    pred, roof = predict_kernel_cases(cases), roofline_kernel_cases(cases)
    ok = np.isfinite(pred)
    lower = np.array([c.metric == "latency_us" for c in cases])
    assert np.all(np.where(lower, pred >= roof * (1 - 1e-9), pred <= roof * (1 + 1e-9))[ok])
    for c, p in zip(cases, pred, strict=True):
        if c.supported and c.metric == "achieved_GB_s" and c.kind == "decode_attention":
            assert p <= load_hardware(c.hardware).hbm_bw / 1e9


def test_kernel_ideal_zeroes_every_loss():
    hw = kernel_ideal(load_hardware("h100"))
    assert hw.eta_compute == hw.eta_memory == hw.eta_network == hw.attn_eta == 1.0
    assert hw.kernel_latency_s == hw.collective_latency_s == hw.scaleup_latency_s == 0.0


# ----------------------------------------------------------------------------- the shipped set


@pytest.fixture(scope="module")
def shipped():
    cases = load_kernel_cases()
    return cases, predict_kernel_cases(cases)


def test_every_row_is_kept_and_unsupported_ones_say_why(shipped):
    cases, pred = shipped
    raw = read_yaml(DEFAULT_KERNELS)["measurements"]
    assert len(cases) == len(raw) == 663
    assert {c.id for c in cases} == {r["id"] for r in raw}
    assert all(c.reason for c in cases if not c.supported)
    assert sum(c.supported for c in cases) / len(cases) >= 0.85
    assert np.all(np.isfinite(pred[[c.supported for c in cases]]))


def test_shipped_kernels_meet_the_bar(shipped):
    """median |predicted/measured - 1| <= 15% for GEMMs, <= 20% for attention and collectives."""
    cases, pred = shipped
    med = target_medians(cases, pred)
    for name, (_kinds, target) in TARGETS.items():
        m, n, tgt = med[name]
        assert n >= 10 and tgt == target
        assert m <= target, f"{name}: median |error| {m:.1%} over {n} rows > {target:.0%}"


def test_fit_recovers_known_parameters():
    """Rows generated by the model with known factors are fitted back (no prior, from another start)."""
    truth = load_hardware("h800")
    cases = [c for c in load_kernel_cases() if c.supported and c.hardware == "h800" and c.kind in
             ("gemm", "grouped_gemm")]
    truth = replace(truth, eta_compute=0.71, eta_memory=0.83, kernel_latency_s=4e-6, gemm_epilogue_exposed=0.6)
    for c, p in zip(cases, predict_kernel_cases(cases, lambda _n: truth), strict=True):
        c.measured = float(p)
    start = replace(truth, eta_compute=0.55, eta_memory=0.95, kernel_latency_s=1e-6, gemm_epilogue_exposed=0.2)
    fit = fit_kind(start, cases, prior_weight=0.0, loss="linear")
    assert np.max(np.abs(fit.errors_after)) < 0.01
    assert fit.hardware.eta_compute == pytest.approx(0.71, rel=0.02)
    assert np.max(np.abs(kernel_residuals(cases, fit.hardware))) < 0.01
    assert set(fit.active) >= {"compute", "memory", "kernel_latency_us", "gemm_epilogue_exposed"}
    assert "network" not in fit.active  # no collective row: left at its prior
    assert all(k in PARAMS for k in fit.values) and math.isfinite(fit.values["compute"])


def test_a_gpu_class_outside_the_table_is_read_as_a_gpu_label():
    """gpu_class values the table does not list resolve like any run's GPU label (hardware files and
    their aliases); a part without a file stays unsupported with the reason."""
    cases = parse_kernel_rows([gemm_row(4096, 4096, 4096, gpu_class="L40S"),
                               gemm_row(4096, 4096, 4096, gpu_class="GB300 NVL72", id="gb300"),
                               gemm_row(4096, 4096, 4096, gpu_class="Gaudi3", id="gaudi")], "test")
    assert [c.supported for c in cases] == [True, True, False]
    assert [c.hardware for c in cases[:2]] == ["l40s", "gb300"]
    assert "Gaudi3" in cases[2].reason


def test_a_slide_plateau_is_read_at_the_size_its_notes_name():
    base = {"kind": "allreduce", "gpu_class": "H100", "num_gpus": 8, "message_bytes": None, "metric": "busbw_GB_s",
            "value": 370, "notes": "large-message plateau read off a vendor slide; author matched 480/370 at ~8GiB."}
    off, on = parse_kernel_rows([dict(base, id="off", gpu="H100 (NVLink 4, non-SHARP)"),
                                 dict(base, id="on", gpu="H100 (NVLink 4, NVLS SHARP)")], "t")
    assert off.supported and on.supported
    assert off.values["bytes"] == on.values["bytes"] == 8 * 2**30 and "from the row's notes" in off.note
    assert off.values["ring_only"] and not on.values["ring_only"]  # NVLS off in the non-SHARP run
    p_off, p_on = predict_kernel_cases([off, on])
    assert p_on > p_off  # in-switch reduction is faster at 8 GiB
