"""The simulator (explorer/simulate.py) against DESIGN.md section 4, with expected values worked by
hand on a toy GPU of round numbers (tests/conftest.py: 100 TFLOPS bf16, 1 TB/s, one SM, one 16x128
tile, no split-K, efficiencies 1, no launch or step overheads), plus the collectives, the MLP-width
sawtooth through the whole simulator, and Llama-3.1-8B on H200 against the weight-streaming bound.

On the toy GPU every decode GEMM is memory-bound (a 16-row tile computes 16 rows for 1 useful one:
16 FLOPs per weight byte pair vs a ridge of 100 FLOP/byte), so the decode step is bytes / 1 TB/s.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from explorer.api import evaluate
from explorer.costs.comm import allreduce_s, link
from explorer.hardware import load_hardware
from explorer.model import ModelShape, param_counts
from tests.conftest import TOY_RUNTIME

PEAK = 100e12
BW = 1e12

#: Toy dense model: H=1024, F=4096 (SwiGLU), L=2, 8 query heads = 8 KV heads of d=128, V=32000.
TOY = ModelShape(hidden=1024, ffn=4096, layers=2, heads=8, kv_heads=8, head_dim=128, vocab=32000, name="toy")


def gbytes(M, N, K, b_a=2.0, b_w=2.0, b_out=2.0):
    """DESIGN: bytes = b_a*M*K + b_w*K*N + b_out*M*N."""
    return b_a * M * K + b_w * K * N + b_out * M * N


def gtime(M, N, K, b_out=2.0, tile=(16, 128)):
    """Roofline of one GEMM on the toy GPU (1 SM: waves = tiles; occupancy 1; s = 1)."""
    tiles = math.ceil(math.ceil(M) / tile[0]) * math.ceil(N / tile[1])
    compute = tiles * 2 * tile[0] * tile[1] * K / PEAK
    memory = gbytes(M, N, K, b_out=b_out) / BW
    return max(compute, memory), compute, memory


# ---------------------------------------------------------------------- decode step by hand


def test_decode_step_by_hand(toy_hardware):
    """Batch 1, ISL = OSL = 512 (mean decode context S = 512 + 512/2 = 768), bf16 everywhere.

    Per layer (tokens M = 1): QKV K=1024, N=(8+2*8)*128=3072; O K=1024, N=1024; gate+up K=1024,
    N=2*4096; down K=4096, N=1024; attention reads S*2*n_kv*d*b_kv = 768*2048*2 bytes.  LM head
    once: K=1024, N=32000, fp32 logits.  Decode part of TPOT = sum(bytes)/1 TB/s; the breakdown's
    components (prefill excluded) are exactly that decode-only step.
    """
    hw = toy_hardware()
    r = evaluate(model=TOY, hw_override=hw, runtime=TOY_RUNTIME, batch=1, isl=512, osl=512)
    assert r["feasible"], r["reason"]
    qkv = gbytes(1, 3072, 1024)
    o = gbytes(1, 1024, 1024)
    up = gbytes(1, 8192, 1024)
    down = gbytes(1, 1024, 4096)
    attn = 768 * 2 * 8 * 128 * 2
    lm = gbytes(1, 32000, 1024, b_out=4.0)
    # all memory-bound on the toy GPU (compute = padded 16-row tiles / 100 TFLOPS):
    for M, N, K, b_out in ((1, 3072, 1024, 2), (1, 1024, 1024, 2), (1, 8192, 1024, 2), (1, 1024, 4096, 2),
                           (1, 32000, 1024, 4)):
        _, c, m = gtime(M, N, K, b_out)
        assert c < m
    assert 4 * 768 * 8 * 128 / PEAK < attn / BW  # attention FLOPs 4*S*n_q*d
    bd = r["breakdown"]
    assert bd["gemm"] == pytest.approx((2 * (qkv + o + up + down) + lm) / BW, rel=1e-9)
    assert bd["attention"] == pytest.approx(2 * attn / BW, rel=1e-9)
    assert bd["moe"] == 0.0 and bd["comm"] == 0.0 and bd["overhead"] == 0.0
    decode = sum(v for k, v in bd.items() if k != "prefill")
    assert decode == pytest.approx((2 * (qkv + o + attn + up + down) + lm) / BW, rel=1e-9)
    # and every figure is "memory-bound"
    assert r["bounds"]["gemm"] == "memory" and r["bounds"]["attention"] == "memory"


def _toy_decode_step():
    """Decode step of TOY at batch 1 (ISL = OSL = 512, mean context 768) on the toy GPU, by hand."""
    layer = (gbytes(1, 3072, 1024) + gbytes(1, 1024, 1024) + gbytes(1, 8192, 1024) + gbytes(1, 1024, 4096)
             + 768 * 2 * 8 * 128 * 2)
    return (2 * layer + gbytes(1, 32000, 1024, b_out=4.0)) / BW


def _toy_mixed_step():
    """The step that carries the prompt (ISL 512) beside the one decode token: GEMMs at M = 513
    (compute-bound: ceil(513/16) = 33 row tiles), decode + prefill attention (FLOPs
    4*768*8*128 + 2*512*256*8*256, bytes 768*2048*2 + 512*2048*6, memory-bound), LM head over
    2 rows (the decode token and the prompt's last)."""
    layer = sum(gtime(513, N, K)[0] for N, K in ((3072, 1024), (1024, 1024), (8192, 1024), (1024, 4096)))
    attn_c = (4 * 768 * 8 * 128 + 2 * 512 * 256 * 8 * 256) / PEAK
    attn_m = (768 * 2048 * 2 + 512 * 2048 * 6) / BW
    assert attn_m > attn_c
    return 2 * (layer + attn_m) + gtime(2, 32000, 1024, b_out=4.0)[0]


def test_tpot_of_one_closed_loop_client_by_hand(toy_hardware):
    """One client (closed loop), ISL = OSL = 512, prompts mixed into decode steps.

    T_dec (decode step) and T_mix (the step with the prompt chunk) by hand; the prompt costs
    tau = T_mix - T_dec of engine time; TTFT = T_mix (nothing else runs); the request rate solves
    tau*Ts*X^2 - (Ts + 511*T_dec + tau)*X + 1 = 0 (explorer/closed_loop.py) and
    TPOT = T_dec / (1 - X*tau).
    """
    hw = toy_hardware()
    r = evaluate(model=TOY, hw_override=hw, runtime=TOY_RUNTIME, batch=1, isl=512, osl=512)
    t_dec, t_mix = _toy_decode_step(), _toy_mixed_step()
    tau, ts = t_mix - t_dec, t_mix
    b = ts + 511 * t_dec + tau
    x = (b - math.sqrt(b * b - 4 * tau * ts)) / (2 * tau * ts)
    tpot = t_dec / (1 - x * tau)
    assert r["ttft_s"] == pytest.approx(ts, rel=1e-9)
    assert r["tpot_s"] == pytest.approx(tpot, rel=1e-9)
    assert r["tokens_per_s_per_user"] == pytest.approx(1 / tpot, rel=1e-9)
    assert r["tokens_per_s_per_gpu"] == pytest.approx(x * 512, rel=1e-9)  # one GPU
    assert sum(r["breakdown"].values()) == pytest.approx(tpot, rel=1e-9)
    assert r["breakdown"]["prefill"] == pytest.approx(tpot - t_dec, rel=1e-9)


def test_ttft_of_a_lone_prompt_by_hand(toy_hardware):
    """TTFT at one client = the mixed step by hand; a prompt alone (OSL 1, no decode) costs the
    prompt's step without the decode token.  GEMMs at M = 512 are compute-bound and tile-exact
    (32 tiles of 16 rows): time = 2*M*N*K/peak; prefill attention is memory-bound."""
    hw = toy_hardware()
    r = evaluate(model=TOY, hw_override=hw, runtime=TOY_RUNTIME, batch=1, isl=512, osl=512)
    assert r["ttft_s"] == pytest.approx(_toy_mixed_step(), rel=1e-9)
    layer = 0.0
    for N, K in ((3072, 1024), (1024, 1024), (8192, 1024), (1024, 4096)):
        t, c, m = gtime(512, N, K)
        assert c == pytest.approx(2 * 512 * N * K / PEAK) and c > m
        layer += t
    layer += 512 * 2048 * 6 / BW  # prefill attention bytes (memory-bound)
    lm = gtime(1, 32000, 1024, b_out=4.0)[0]
    assert lm < _toy_mixed_step()


def test_memory_by_hand(toy_hardware):
    """Weights: attention 1024*3072 + 1024*1024 = 4,194,304 and SwiGLU 3*1024*4096 = 12,582,912 per
    layer, 2 norms of 1024 per layer + a final one, embedding and untied head 2*32000*1024:
    2*(4,194,304 + 12,582,912 + 2,048) + 1,024 + 65,536,000 = 99,095,552 params -> 198,191,104 bytes.
    KV: B*(ISL+OSL)*L*2*n_kv*d*b_kv = 1*1024*2*2048*2 = 8,388,608 bytes."""
    hw = toy_hardware()
    r = evaluate(model=TOY, hw_override=hw, runtime=TOY_RUNTIME, batch=1, isl=512, osl=512)
    assert r["params_total"] == 99_095_552
    assert r["weights_bytes_per_gpu"] == pytest.approx(198_191_104, rel=1e-12)
    assert r["kv_bytes_per_gpu"] == pytest.approx(8_388_608, rel=1e-12)
    assert r["memory_bytes_per_gpu"] > 198_191_104 + 8_388_608
    # two-way tensor parallelism halves both (8 KV heads split 4 + 4; DESIGN: weights/(t*p) -- the
    # simulator splits the tiny norm vectors too)
    r2 = evaluate(model=TOY, hw_override=hw, runtime=TOY_RUNTIME, batch=1, isl=512, osl=512, tp=2)
    assert r2["weights_bytes_per_gpu"] == pytest.approx(198_191_104 / 2, rel=1e-12)
    assert r2["kv_bytes_per_gpu"] == pytest.approx(8_388_608 / 2, rel=1e-12)


def test_pipeline_adds_gpus_not_speed(toy_hardware):
    """pp=2 with two clients (one micro-batch each): each stage holds one layer and the worst stage
    also the LM head, so the decode step is 2*T_stage + t_p2p, T_stage = one layer + LM head at M = 1,
    and the hand-off M*H*b_a = 1*1024*2 bytes over NVLink: 2048/100e9 + 1 us (inside the domain)."""
    hw = toy_hardware()
    r = evaluate(model=TOY, hw_override=hw, runtime=TOY_RUNTIME, batch=2, isl=512, osl=512, pp=2)
    layer = (gbytes(1, 3072, 1024) + gbytes(1, 1024, 1024) + gbytes(1, 8192, 1024) + gbytes(1, 1024, 4096)
             + 768 * 2048 * 2) / BW
    lm = gbytes(1, 32000, 1024, b_out=4.0) / BW
    p2p = 1 * 1024 * 2 / 100e9 + 1e-6
    decode = sum(v for k, v in r["breakdown"].items() if k != "prefill")
    assert decode == pytest.approx(2 * (layer + lm) + p2p, rel=1e-9)
    assert r["gpus"] == 2
    r1 = evaluate(model=TOY, hw_override=hw, runtime=TOY_RUNTIME, batch=1, isl=512, osl=512)
    assert r["tokens_per_s_per_user"] < r1["tokens_per_s_per_user"]


def test_moe_decode_by_hand(toy_hardware):
    """Toy MoE: 8 experts, top-2, expert width 512, every layer MoE, batch 4, decode-only part.

    Expected experts touched with uniform routing: E*(1 - (1 - k/E)^B) = 8*(1 - 0.75^4) = 5.46875;
    routed pairs B*k = 8 -> m_e = 8/5.46875 tokens per touched expert.  Grouped up (N = 2*512) and
    down (K = 512) GEMMs read each touched expert once; the router (N = E = 8, bf16 weights,
    fp32 scores) is compute-bound on the padded 16x128 tile.  moe = L*(up + down + router).
    """
    hw = toy_hardware()
    shape = ModelShape(hidden=1024, ffn=4096, layers=2, heads=8, kv_heads=8, vocab=32000, experts=8,
                       experts_per_token=2, expert_ffn=512, name="toy-moe")
    r = evaluate(model=shape, hw_override=hw, runtime=TOY_RUNTIME, batch=4, isl=512, osl=512)
    touched = 8 * (1 - 0.75**4)
    assert touched == 5.46875
    # closed loop: a decoding request sees 1 + 3*share of the 4 clients decoding (share = D/cycle
    # ~ 0.997 here); the hand formula is evaluated at that batch
    B = r["step_batch"]
    assert 3.9 < B < 4.0
    touched = 8 * (1 - 0.75**B)
    m_e = 2 * B / touched
    up_bytes = touched * gbytes(m_e, 1024, 1024)
    down_bytes = touched * gbytes(m_e, 1024, 512)
    up_c = math.ceil(touched * 1 * 8) * 2 * 16 * 128 * 1024 / PEAK  # waves = ceil(tiles) on 1 SM
    down_c = math.ceil(touched * 1 * 8) * 2 * 16 * 128 * 512 / PEAK
    assert up_c < up_bytes / BW and down_c < down_bytes / BW
    router_c = 1 * 2 * 16 * 128 * 1024 / PEAK
    router_m = gbytes(B, 8, 1024, b_out=4.0) / BW
    assert router_c > router_m
    perm = 2 * B * 1024 * (2 * 2 + 2 * 2) / BW  # permute + unpermute: B*k routed rows, read + write, bf16
    expected = 2 * (up_bytes / BW + down_bytes / BW + router_c + perm)
    assert r["breakdown"]["moe"] == pytest.approx(expected, rel=1e-9)
    assert r["params_total"] - r["params_active"] == 2 * (8 - 2) * 3 * 1024 * 512


# ---------------------------------------------------------------------------- communication


def test_allreduce_by_hand():
    """Ring all-reduce of m = 1 MB, bw 100 GB/s, eta_n 0.5, alpha 1 us:
    2(t-1)/t * m/(bw*eta) + 2(t-1)*alpha with m/(bw*eta) = 20 us:
    t=2: 1*20 + 2 = 22 us; t=4: 1.5*20 + 6 = 36 us; t=8: 1.75*20 + 14 = 49 us; t=1: 0."""
    t = np.array([1, 2, 4, 8])
    got = allreduce_s(1e6, t, 100e9, 1e-6, 0.5)
    np.testing.assert_allclose(got, [0.0, 22e-6, 36e-6, 49e-6], rtol=1e-12, atol=0)


def test_link_beyond_the_nvlink_domain_uses_scale_out():
    bw, lat = link(np.array([1, 8, 9, 16, 72]), np.array([8, 8, 8, 8, 72]), 450e9, 1e-6, 50e9, 5e-6)
    np.testing.assert_array_equal(bw, [450e9, 450e9, 50e9, 50e9, 450e9])
    np.testing.assert_array_equal(lat, [1e-6, 1e-6, 5e-6, 5e-6, 1e-6])


@pytest.mark.parametrize("tp", [2, 4, 8, 16])
def test_tensor_parallel_allreduces_in_the_step(toy_hardware, tp):
    """Two all-reduces per layer of m = M*H*2 bytes (bf16) -- decode-only M = 1 -> 2,048 bytes.
    Toy links: NVLink 100 GB/s, 1 us inside an 8-GPU domain; scale-out 10 GB/s, 5 us beyond it
    (tp = 16); eta_n = 0.5.  Inside the domain a ring: 2(t-1)/t * m/(bw*eta) + 2(t-1)*alpha.  At
    tp = 16 (two domains of 8) the faster of a flat ring (2*15 steps of 5 us: 150 us) and the
    hierarchical all-reduce (explorer/costs/comm.py: 2*7 steps of 1 us inside, 2*1 of 5 us across,
    plus the larger of the intra 2*7/8*2048/(100e9*0.5) and inter 2*(1/2)*(2048/8)/(10e9*0.5)
    transfers) = 14 + 10 + 0.0717 us.  comm = L * 2 * all-reduce."""
    hw = toy_hardware(eta_network=0.5)
    shape = ModelShape(hidden=1024, ffn=4096, layers=2, heads=16, kv_heads=16, head_dim=64, vocab=32000)
    r = evaluate(model=shape, hw_override=hw, runtime=TOY_RUNTIME, batch=1, isl=512, osl=512, tp=tp)
    if tp <= 8:
        ar = 2 * (tp - 1) / tp * 2048 / (100e9 * 0.5) + 2 * (tp - 1) * 1e-6
    else:
        ar = 14e-6 + 10e-6 + 2 * 7 / 8 * 2048 / (100e9 * 0.5)
    assert r["breakdown"]["comm"] == pytest.approx(2 * 2 * ar, rel=1e-9)


# -------------------------------------------------------- MLP width sawtooth through evaluate()


def test_mlp_width_off_the_tile_grid_slows_a_compute_bound_step():
    """Llama-8B-like layer (H=4096, 32/8 heads, SwiGLU), L=4, on H200: one client's prompt of
    ISL = 16,896 = 132*128 tokens runs as one SGLang prefill step (chunk budget 32,768), so every
    GEMM of the step is compute-bound and 128-row tiles fill the 132 SMs exactly once per column.

    F = 14,336 = 128*112 -> gate+up width 2F = 28,672 = 224 tile columns; F = 14,337 -> 28,674 = 225
    columns: one more wave of 128x128 tiles, 132*2*128*128*H/(peak*eta_c), per layer.  The down
    projection's K grows by 1: its 32 waves (N = 4096 = 32 columns) each do 132*2*128*128 more FLOPs
    per unit of K.  Nothing else changes.  So dTTFT = L*132*2*128*128*(H + 32)/(peak*eta_c).
    """
    h200 = load_hardware("h200")
    common = dict(hidden=4096, layers=4, heads=32, kv_heads=8, vocab=32000)
    kw = dict(hardware="h200", batch=1, isl=16_896, osl=2, runtime="sglang")
    a = evaluate(model=ModelShape(ffn=128 * 112, **common), **kw)
    b = evaluate(model=ModelShape(ffn=128 * 112 + 1, **common), **kw)
    assert a["feasible"] and b["feasible"]
    from explorer.runtime import load_runtime

    pe = h200.peak_flops["bf16"] * h200.eta_compute * load_runtime("sglang").fit_for("h200").compute
    d_t = 4 * 132 * 2 * 128 * 128 * (4096 + 32) / pe
    # the 2 extra output columns of the up projection also write 2*16896 more bf16 outputs, a share
    # gemm_epilogue_exposed of which is not hidden under the main loop
    d_t += 4 * h200.gemm_epilogue_exposed * 2 * 16_896 * 2.0 / (h200.hbm_bw * h200.eta_memory)
    assert b["ttft_s"] - a["ttft_s"] == pytest.approx(d_t, rel=1e-6)
    assert b["tokens_per_s_per_gpu"] < a["tokens_per_s_per_gpu"]
    # the decode step's up projection (M = 1) shows the tile waste too
    # the lost share is the tile waste of the up projection: 1/225 of it
    assert b["mlp_up_tile_eff"] < a["mlp_up_tile_eff"]


# --------------------------------------------------------- Llama-3.1-8B vs the streaming bound


def test_llama_8b_on_h200_near_the_weight_streaming_bound():
    """bf16 Llama-3.1-8B on one H200 at batch 1 (ISL/OSL 1024/1024) is weight-streaming bound:
    tokens/s/user <= hbm_bw / (2 bytes * 8.03e9 params) = 4.8e12/16.06e9 ~ 299.  The model must land
    within [55 %, 100 %] of that (efficiency, KV reads, kernel and step overheads eat the rest: at the
    2026-12-02 calibration 81 % of HBM bandwidth, ~1 ms of per-kernel gaps and fixed GEMM latencies
    over 32 layers, TensorRT-LLM's fitted 0.23 ms per step -- 59.8 % of the bound; the bar was 60 %
    until that refit on the InferenceX fixture curves raised the per-step host cost from 0.13 ms)."""
    h200 = load_hardware("h200")
    r = evaluate("llama-3.1-8b", "h200", batch=1, isl=1024, osl=1024)
    counts = param_counts(ModelShape(hidden=4096, ffn=14336, layers=32, heads=32, kv_heads=8).columns())
    assert float(counts["total"]) == pytest.approx(8.03e9, rel=1e-3)
    bound = h200.hbm_bw / (2.0 * float(counts["total"]))
    assert bound == pytest.approx(299, abs=1)
    assert 0.55 * bound <= r["tokens_per_s_per_user"] <= bound
    # the strict bound (input embedding is a lookup, not streamed) holds too
    strict = h200.hbm_bw / (2.0 * float(counts["total"] - counts["embedding_in"]))
    assert r["tokens_per_s_per_user"] <= strict


def test_a_design_with_no_room_for_one_sequence_is_scored_as_if_one_fit():
    """Out of memory with no room for a single sequence: infeasible with the reason, and figures a
    user can read -- one sequence served at a time, the other clients queued -- instead of a zero
    batch cap's TTFT of 1e14 ms (FIELD.md, 'clear failure messages instead of silent nonsense')."""
    from explorer.api import evaluate

    r = evaluate(model="llama-3.1-70b", hardware="h100", tp=1, precision="fp8", batch=4)
    assert not r["feasible"] and "out of memory" in r["reason"]
    assert r["decode_batch"] == pytest.approx(1.0, rel=1e-6)
    assert r["queued_requests"] == pytest.approx(3.0, rel=0.05)
    # one request at a time: a request waits for the three ahead of it, each decoding OSL-1 tokens
    assert 0 < r["ttft_s"] < 4 * 1024 * r["tpot_s"] * 1.2
    assert r["tokens_per_s_per_gpu"] == pytest.approx(r["tokens_per_s_per_user"] * r["decode_batch"], rel=0.05)


@pytest.mark.parametrize("memory, memory_moe, factor", [(0.5, 1.0, 2.0), (1.0, 0.5, 1.0), (0.25, 0.5, 4.0)])
def test_runtime_memory_residual_slows_a_dense_memory_bound_step_by_its_inverse(toy_hardware, memory, memory_moe,
                                                                                  factor):
    """A runtime's memory residual (RuntimeFit.memory, dense rows) divides the memory efficiency of
    every memory-bound term: on the toy GPU the whole decode step is memory-bound, so a residual of
    0.5 doubles its GEMM and attention times and 0.25 quadruples them; ``memory_moe`` leaves a dense
    model alone."""
    from dataclasses import replace

    hw = toy_hardware()
    rt = replace(TOY_RUNTIME, prior=replace(TOY_RUNTIME.prior, memory=memory, memory_moe=memory_moe))
    base = evaluate(model=TOY, hw_override=hw, runtime=TOY_RUNTIME, batch=1, isl=512, osl=512)["breakdown"]
    slow = evaluate(model=TOY, hw_override=hw, runtime=rt, batch=1, isl=512, osl=512)["breakdown"]
    lm = gbytes(1, 32000, 1024, b_out=4.0)
    layer = gbytes(1, 3072, 1024) + gbytes(1, 1024, 1024) + gbytes(1, 8192, 1024) + gbytes(1, 1024, 4096)
    assert base["gemm"] == pytest.approx((2 * layer + lm) / BW, rel=1e-9)
    assert slow["gemm"] == pytest.approx(factor * (2 * layer + lm) / BW, rel=1e-9)
    assert slow["attention"] == pytest.approx(factor * 2 * 768 * 2 * 8 * 128 * 2 / BW, rel=1e-9)


def test_runtime_memory_residual_for_moe_rows_is_memory_moe(toy_hardware):
    """An MoE model takes ``memory_moe``, not ``memory``.  One client (step batch 1): its attention
    and memory-bound expert streaming and permutes take 1/memory_moe as long, while the router
    (N = E = 8 columns on a 16x128 tile: compute-bound, 2*16*128*1024 FLOPs per layer, still so at
    half the memory speed) keeps its time; a dense-only residual leaves the MoE model as it was."""
    from dataclasses import replace

    hw = toy_hardware()
    shape = ModelShape(hidden=1024, ffn=4096, layers=2, heads=8, kv_heads=8, vocab=32000, experts=8,
                       experts_per_token=2, expert_ffn=512, name="toy-moe")
    kw = dict(model=shape, hw_override=hw, batch=1, isl=512, osl=512)
    base = evaluate(runtime=TOY_RUNTIME, **kw)
    dense_only = evaluate(runtime=replace(TOY_RUNTIME, prior=replace(TOY_RUNTIME.prior, memory=0.5)), **kw)
    moe_half = evaluate(runtime=replace(TOY_RUNTIME, prior=replace(TOY_RUNTIME.prior, memory_moe=0.5)), **kw)
    assert base["step_batch"] == moe_half["step_batch"] == 1
    assert dense_only["breakdown"] == base["breakdown"]
    router_c = 2 * 16 * 128 * 1024 / PEAK
    assert router_c > 2 * gbytes(1, 8, 1024, b_out=4.0) / BW
    assert moe_half["breakdown"]["attention"] == pytest.approx(2 * base["breakdown"]["attention"], rel=1e-9)
    assert moe_half["breakdown"]["moe"] == pytest.approx(2 * base["breakdown"]["moe"] - 2 * router_c, rel=1e-9)
