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
unabsorbed ``qk = d + rope``).  Softmax, masking and rotary embedding FLOPs are ignored.
"""

from __future__ import annotations

import numpy as np


def mean_context_sliding(S, W):
    """Mean attended context when the context is S and the window W (0 = no window)."""
    return np.where(W > 0, np.minimum(S, W), S)


def decode_attention(m, S, n_q_loc, d, kv_loc, b_kv, mla, kv_lora, rope):
    """(flops, bytes) of decode attention for ``m`` sequences at mean context ``S``."""
    gqa_flops = 4.0 * m * S * n_q_loc * d
    mla_flops = 2.0 * m * S * n_q_loc * (2.0 * kv_lora + rope)
    flops = np.where(mla, mla_flops, gqa_flops)
    nbytes = m * S * kv_loc * b_kv
    return flops, nbytes


def prefill_attention_flops(P, W, n_q_loc, d, mla, rope):
    """FLOPs of causal attention over one prompt of ``P`` tokens (per GPU, one layer)."""
    P = np.asarray(P, dtype=np.float64)
    sbar_full = P / 2.0
    Wf = np.asarray(W, dtype=np.float64)
    sbar_win = np.where(P > Wf, Wf - Wf * Wf / (2.0 * np.maximum(P, 1.0)), sbar_full)
    sbar = np.where(Wf > 0, sbar_win, sbar_full)
    dims = np.where(mla, 2.0 * d + rope, 2.0 * d)
    return 2.0 * P * sbar * n_q_loc * dims
