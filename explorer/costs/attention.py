"""Attention score/value work: decode reads the KV cache, prefill is quadratic in the prompt.

Per GPU and layer.  ``kv_loc`` is the KV elements one token stores per layer on one GPU
(GQA: ``2*d*ceil(n_kv/t)``, KV heads replicated when ``t > n_kv``; MLA: the latent
``kv_lora_rank + rope_head_dim``, replicated on every tensor-parallel rank).

Decode, ``m`` sequences at context ``S`` (window ``W`` caps it on sliding layers):
``bytes = m*S*kv_loc*b_kv``; GQA ``flops = 4*m*S*n_q_loc*d``; MLA (weights absorbed, as
FlashMLA runs it) ``flops = 2*m*S*n_q_loc*(2*kv_lora + rope)``.  Its arithmetic intensity does not
grow with ``m``: batching never makes decode attention compute-bound.

Prefill of one prompt of ``P`` tokens, causal: each head does ``P*Sbar*(qk_dim + v_dim)*2`` FLOPs
with ``Sbar = P/2`` without a window and ``W - W^2/(2P)`` with one (GQA ``qk = v = d``; MLA
unabsorbed ``qk = d + rope``).  Softmax, masking and rotary embedding FLOPs are ignored in the
FLOP counts (they are what benchmarks count, too); their *time* is in the time functions below.

Kernel times (:func:`prefill_attention_time`, :func:`decode_attention_time`), FlashAttention-style:

* prefill works on ``T x T`` blocks (``T`` = query/key rows per tile).  Per (sequence, head):
  ``nq = ceil(S/T)`` query tiles; non-causal each sees ``nk = ceil(S_kv/T)`` key blocks, causal
  ``nq(nq+1)/2`` blocks in all (the diagonal blocks are computed whole and masked).  Each query tile
  also costs ``tile_overhead`` blocks (Q load, O store, softmax finalisation, pipeline fill).  One
  block takes ``2*T*T*(d_qk + d_v) / (peak*eta*legacy)`` of the whole GPU's matmul time plus
  ``softmax_exposed * T*T / exp_rate`` of its exponential time (the share of softmax not hidden
  under the matmuls; FA3 overlaps most of it).  With fewer tiles than SMs, the longest tile bounds
  the time.  Memory: Q, K, V read and O written once; the output write is exposed like a GEMM's
  epilogue.  ``time = max(compute + epilogue_exposed*out_s, memory) + latency``;
* decode streams the KV cache: ``bytes * (1 + page_overhead/page_bytes) / (hbm_bw*eta_m)`` (paged
  KV: every page read costs a fixed extra, per head and per K or V), against the FLOPs at the
  attention rate; when ``batch * kv_heads`` work items cannot fill the SMs the KV is split across
  CTAs (flash-decoding) and a second, combining kernel adds one more kernel latency.

Ignored: rotary embedding, dropout, load imbalance across causal tiles beyond the longest-tile bound,
and L2 reuse of K/V across query tiles (reads are counted once).
"""

from __future__ import annotations

import numpy as np

from explorer.masks import where_uniform


def mean_context_sliding(S, W):
    """Mean attended context when the context is S and the window W (0 = no window)."""
    return np.where(W > 0, np.minimum(S, W), S)


def decode_attention(m, S, n_q_loc, d, kv_loc, b_kv, mla, kv_lora, rope):
    """(flops, bytes) of decode attention for ``m`` sequences at mean context ``S``."""
    # (where no row is MLA, or every row is, the one branch's values: explorer/masks.py)
    shape = np.broadcast_shapes(*(np.shape(x) for x in (m, S, n_q_loc, d, kv_lora, rope, mla)))
    flops = where_uniform(mla, lambda: 2.0 * m * S * n_q_loc * (2.0 * kv_lora + rope), lambda: 4.0 * m * S * n_q_loc * d,
                          shape=shape)
    nbytes = m * S * kv_loc * b_kv
    return flops, nbytes


def prefill_attention_flops(P, W, n_q_loc, d, mla, rope, causal=True):
    """FLOPs of attention over one prompt of ``P`` tokens (per GPU, one layer); causal by default,
    ``causal=False`` counts every query against every key (``Sbar = P``)."""
    P = np.asarray(P, dtype=np.float64)
    sbar_full = np.where(causal, P / 2.0, P)
    Wf = np.asarray(W, dtype=np.float64)
    sbar_win = np.where(P > Wf, Wf - Wf * Wf / (2.0 * np.maximum(P, 1.0)), sbar_full)
    sbar = np.where(Wf > 0, sbar_win, sbar_full)
    dims = np.where(mla, 2.0 * d + rope, 2.0 * d)
    return 2.0 * P * sbar * n_q_loc * dims


def prefill_attention_time(batch, S, heads, kv_heads, d_qk, d_v, causal, *, b_act, peak_flops, eta, hbm_bw, eta_m,
                           sms, tile=128.0, tile_overhead=0.0, exp_rate=0.0, softmax_exposed=0.0, legacy=1.0,
                           epilogue_exposed=0.0, latency_s=0.0):
    """Time (s) of one FlashAttention-style forward over ``batch`` sequences of ``S`` tokens (self-
    attention, ``heads`` query heads, ``kv_heads`` K/V heads), as in the module docstring.  Arrays
    broadcast; ``exp_rate = 0`` leaves the softmax uncosted."""
    S = np.asarray(S, dtype=np.float64)
    bh = np.asarray(batch, dtype=np.float64) * heads
    nq = np.ceil(S / tile)
    blocks = np.where(causal, nq * (nq + 1.0) / 2.0, nq * nq)
    units = blocks + tile_overhead * nq  # per (sequence, head)
    mm = 2.0 * tile * tile * (np.asarray(d_qk, dtype=np.float64) + d_v) / (peak_flops * eta * legacy)
    sm = np.where(np.asarray(exp_rate) > 0, softmax_exposed * tile * tile / np.maximum(exp_rate, 1e-30), 0.0)
    t_block = mm + sm  # whole-GPU seconds per block
    longest = (nq + tile_overhead) * t_block * sms  # one tile's blocks on one SM
    compute = np.maximum(bh * units * t_block, longest)
    tok = np.asarray(batch, dtype=np.float64) * S
    out_bytes = tok * heads * d_v * b_act
    in_bytes = tok * (heads * d_qk + kv_heads * (d_qk + d_v)) * b_act
    rate_m = 1.0 / (hbm_bw * eta_m)
    return np.maximum(compute + epilogue_exposed * out_bytes * rate_m, (in_bytes + out_bytes) * rate_m) + latency_s


def decode_attention_time(batch, S, s_q, heads, kv_heads, d, kv_loc, b_kv, mla, kv_lora, rope, *, peak_flops, eta,
                          hbm_bw, eta_m, sms, page_size=0.0, page_overhead_bytes=0.0, exp_rate=0.0,
                          softmax_exposed=0.0, latency_s=0.0):
    """(time s, flops, bytes) of one decode-attention kernel: ``batch`` sequences, ``s_q`` query tokens
    each (1 = plain decode, 2 = one speculative token), context ``S``.  ``kv_loc`` as
    :func:`decode_attention` (``2*d*kv_heads`` for GQA, the latent width for MLA); ``page_size = 0``
    means a contiguous cache.  See the module docstring."""
    m = np.asarray(batch, dtype=np.float64)
    flops1, nbytes = decode_attention(m, S, heads, d, kv_loc, b_kv, mla, kv_lora, rope)
    flops = flops1 * s_q
    heads_kv = np.where(mla, 1.0, kv_heads)  # MLA: one latent shared by every head (K and V at once)
    row_dim = np.where(mla, kv_loc, d)  # elements per token per head in one page row (K or V)
    page_bytes = np.asarray(page_size, dtype=np.float64) * row_dim * b_kv
    page_extra = np.where(page_bytes > 0, page_overhead_bytes / np.maximum(page_bytes, 1e-30), 0.0)
    memory = nbytes * (1.0 + page_extra) / (hbm_bw * eta_m)
    exps = m * s_q * heads * np.asarray(S, dtype=np.float64)
    sm = np.where(np.asarray(exp_rate) > 0, softmax_exposed * exps / np.maximum(exp_rate, 1e-30), 0.0)
    compute = flops / (peak_flops * eta) + sm
    split = m * heads_kv < sms  # too few (sequence, KV head) items: split the KV and combine after
    t = np.maximum(compute, memory) + latency_s * np.where(split, 2.0, 1.0)
    return t, flops, nbytes
