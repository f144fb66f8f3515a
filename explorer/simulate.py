"""The analytic simulator: one decode step of a design point, written once over numpy arrays.

A *design table* is a mapping of column name -> 1-D array (see :data:`DESIGN_COLUMNS`); every
row is one design point (model shape + workload + deployment + precision + hardware index).  The
same call scores one point or a million.  The first-order model is DESIGN.md section 4, with
these refinements (each named and tested):

* **Mixed steps (chunked prefill).**  In steady state each of ``B`` sequences lives ``OSL`` decode
  steps, so every step also carries ``B*ISL/OSL`` prefill tokens on average.  We fuse them into the
  step's GEMMs (weights are read once for decode and prefill tokens, as chunked prefill does)
  instead of DESIGN's ``T_decode + (B/OSL)*T_prefill``, which would read the weights twice.  The
  breakdown's ``prefill`` component is the step time minus the same step without prefill tokens.
* **Attention data parallelism** (``dp``): attention and dense layers run on ``t``-GPU groups,
  ``dp`` groups per stage; MoE experts are sharded over all ``t*dp`` GPUs of a stage
  (``E/e`` experts per GPU, each split ``t*dp/e`` ways).  TensorRT-LLM's "DEP" = ``t=1, dp=e``.
* **LM head and embeddings stay bf16** whatever the weight format (TensorRT-LLM and vLLM FP8/FP4
  checkpoints keep ``lm_head`` unquantized).

Pipeline: ``p`` stages of ``ceil(L/p)`` layers (the worst stage also holds the LM head) and
``p`` micro-batches of ``B/p`` in flight: ``T_token = p*T_stage + (p-1)*t_p2p + step overhead``.
Throughput per GPU ``= B / (T_token * t*dp*p)``, interactivity ``= 1/T_token``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from explorer.costs.attention import decode_attention, mean_context_sliding, prefill_attention_flops
from explorer.costs.comm import allreduce_s, alltoall_s, link, p2p_s
from explorer.costs.gemm import GemmCost, gemm_cost
from explorer.hardware import HardwareTable
from explorer.model import (
    SHAPE_COLUMNS,
    attention_params_per_layer,
    kv_elements_per_token_layer,
    param_counts,
)
from explorer.precision import TENSOR_FORMATS

DEPLOY_COLUMNS = ("isl", "osl", "batch", "tp", "pp", "ep", "dp", "b_w", "b_a", "b_kv", "compute_fmt",
                  "fmt_mask", "hw_idx", "moe_imbalance")
DESIGN_COLUMNS = SHAPE_COLUMNS + DEPLOY_COLUMNS

#: Bytes per element of tensor-parallel all-reduces (bf16 even for FP8/FP4 models, as
#: TensorRT-LLM's default all-reduce runs).
ALLREDUCE_BYTES = 2.0
#: Bytes per element of the LM head and embedding tables (kept bf16, see module docstring).
EMBED_BYTES = 2.0
#: Bytes per element of MoE combine (expert outputs return in bf16; dispatch uses b_a).
COMBINE_BYTES = 2.0
#: Small kernels per layer besides GEMMs, attention and collectives: 2 norms, rotary, activation
#: (assumption: residual adds and quantization fused).  Each costs ``kernel_launch_s``.
ELEMENTWISE_KERNELS_PER_LAYER = 4.0
#: Extra small kernels per MoE layer: top-k routing, permute, unpermute (assumption).
MOE_EXTRA_KERNELS = 3.0

REASONS = {
    0: "ok",
    1: "number format not supported by the hardware",
    2: "tensor parallelism does not divide the attention heads",
    3: "pipeline parallelism exceeds the layer count",
    4: "expert parallelism does not fit the experts or the stage's GPUs",
    5: "tensor parallelism does not divide the MLP width",
    6: "out of memory",
    7: "batch smaller than pipeline micro-batches x attention data-parallel groups",
}

COMPONENTS = ("gemm", "attention", "moe", "comm", "prefill", "overhead")


@dataclass(frozen=True)
class Limits:
    """Serving limits used where the simulator picks a batch (``--batch max``, validation).

    TensorRT-LLM's defaults: ``max_batch_size`` 2048 and ``max_num_tokens`` 8192 per iteration
    (trtllm-bench / LLM API defaults); a batch needing more tokens per step than that cannot be
    sustained, since prefill would queue.
    """

    max_batch_per_group: int = 2048
    max_tokens_per_step: int = 8192

    def allows(self, batch, dp, pp, isl, osl) -> np.ndarray:
        """Which batches a serving runtime with these limits can sustain (per attention group:
        sequences, and tokens per step = decode tokens + their steady-state prefill share)."""
        per_group = np.asarray(batch, dtype=np.float64) / dp
        tokens_per_step = per_group / pp * (1.0 + np.asarray(isl, dtype=np.float64) / osl)
        return (per_group <= self.max_batch_per_group) & (tokens_per_step <= self.max_tokens_per_step)


DEFAULT_LIMITS = Limits()

#: Batches tried where the best feasible batch is picked (``--batch max``, validation's "max"):
#: 1 .. 16384 in steps of 2^(1/4).
MAX_BATCH_GRID = np.unique(np.round(2.0 ** (np.arange(0, 57) / 4.0))).astype(np.int64)


def _col(c: Mapping[str, np.ndarray], k: str) -> np.ndarray:
    return np.asarray(c[k], dtype=np.float64)


class _HW:
    """Hardware columns gathered per design point."""

    def __init__(self, table: HardwareTable, idx: np.ndarray, compute_fmt: np.ndarray, act_fmt_cap: np.ndarray):
        kinds = table.kinds
        def g(attr: str) -> np.ndarray:
            return table.column(attr)[idx]
        self.hbm_bw = g("hbm_bw")
        self.hbm_bytes = g("hbm_bytes")
        self.sms = g("sms")
        self.max_split_k = g("max_split_k")
        self.usable = g("usable_fraction")
        self.reserved = g("reserved_bytes")
        self.up_bw, self.up_lat = g("scaleup_bw"), g("scaleup_latency_s")
        self.out_bw, self.out_lat = g("scaleout_bw"), g("scaleout_latency_s")
        self.domain = g("scaleup_domain")
        self.launch = g("kernel_launch_s")
        self.step_overhead = g("step_overhead_s")
        self.eta_c, self.eta_m, self.eta_n = g("eta_compute"), g("eta_memory"), g("eta_network")
        self.eta_moe = g("eta_moe")
        self.per_seq = g("per_sequence_s")
        peaks = table.peak_matrix()  # [kinds, formats]
        self.peak = peaks[idx, compute_fmt.astype(np.int64)]
        self.peak_attn = peaks[idx, act_fmt_cap.astype(np.int64)]
        self.bf16_peak = np.nanmax(peaks[:, :2], axis=1)[idx]
        n_t = max(len(h.gemm_tiles) for h in kinds)
        tm = np.array([[h.gemm_tiles[min(j, len(h.gemm_tiles) - 1)][0] for j in range(n_t)] for h in kinds], float)
        tn = np.array([[h.gemm_tiles[min(j, len(h.gemm_tiles) - 1)][1] for j in range(n_t)] for h in kinds], float)
        self.tiles_m, self.tiles_n = tm[idx], tn[idx]
        self.support_mask = np.array(
            [sum(1 << i for i, f in enumerate(TENSOR_FORMATS) if h.supports(f)) for h in kinds], dtype=np.int64
        )[idx]

    def run_gemms(self, requests: list[tuple]) -> list[GemmCost]:
        """Cost many GEMMs in one vectorized call: each request is
        ``(M, N, K, b_a, b_w, b_out, groups, peak or None, moe)`` over the design points; they are
        stacked on a leading axis (requests whose rows are all empty are skipped and cost zero)."""
        n = len(self.sms)
        out: list[GemmCost | None] = [None] * len(requests)
        live = [i for i, r in enumerate(requests)
                if np.any((np.asarray(r[0]) > 0) & (np.asarray(r[6]) > 0))]
        zero = np.zeros(n)
        for i in set(range(len(requests))) - set(live):
            out[i] = GemmCost(zero, zero, zero, zero, zero, zero + 1.0, zero + 1.0, zero, zero)
        if live:
            cols = np.empty((9, len(live), n))  # M N K b_a b_w b_out groups peak moe-factor
            for row, i in enumerate(live):
                r = requests[i]
                for j in range(7):
                    cols[j, row] = r[j]
                cols[7, row] = self.peak if r[7] is None else r[7]
                cols[8, row] = self.eta_moe if r[8] else 1.0
            f = cols[8]
            g = gemm_cost(cols[0], cols[1], cols[2], cols[3], cols[4], cols[5],
                          peak_flops=cols[7], hbm_bw=self.hbm_bw, sms=self.sms,
                          tiles_m=self.tiles_m, tiles_n=self.tiles_n, max_split_k=self.max_split_k,
                          eta_c=self.eta_c * f, eta_m=self.eta_m * f, launch_s=0.0, groups=cols[6])
            fields = [getattr(g, k) for k in GemmCost.__dataclass_fields__]
            for row, i in enumerate(live):
                out[i] = GemmCost(*(a[row] for a in fields))
        return [o for o in out if o is not None]


class _Shape:
    """Per-GPU derived sizes of the shape under the deployment (computed once per call)."""

    def __init__(self, c: Mapping[str, np.ndarray]):
        self.H, self.F, self.L = _col(c, "hidden"), _col(c, "ffn"), _col(c, "layers")
        self.nq, self.nkv, self.d, self.V = _col(c, "heads"), _col(c, "kv_heads"), _col(c, "head_dim"), _col(c, "vocab")
        self.g = np.where(_col(c, "gated") > 0, 2.0, 1.0)  # up-projection matrices (gate+up or up)
        self.E, self.k, self.Fe = _col(c, "experts"), _col(c, "experts_per_token"), _col(c, "expert_ffn")
        self.Es, self.Fs = _col(c, "shared_experts"), _col(c, "shared_expert_ffn")
        self.kr, self.rope = _col(c, "kv_lora_rank"), _col(c, "rope_head_dim")
        self.mla = self.kr > 0
        self.W, self.n_sl = _col(c, "sliding_window"), _col(c, "sliding_layers")
        self.t, self.p, self.e, self.dp = _col(c, "tp"), _col(c, "pp"), _col(c, "ep"), _col(c, "dp")
        self.isl, self.osl, self.B = _col(c, "isl"), _col(c, "osl"), _col(c, "batch")
        self.b_w, self.b_a, self.b_kv = _col(c, "b_w"), _col(c, "b_a"), _col(c, "b_kv")
        self.imb = _col(c, "moe_imbalance")
        self.counts = param_counts(c)
        self.n_moe = np.where(self.E > 0, self.L - _col(c, "dense_layers"), 0.0)
        self.n_dense = self.L - self.n_moe
        self.Ls = np.ceil(self.L / self.p)  # layers on the worst stage
        self.nq_loc = self.nq / self.t
        kv_heads_loc = np.ceil(self.nkv / self.t)
        self.kv_loc = np.where(self.mla, kv_elements_per_token_layer(c), 2.0 * self.d * kv_heads_loc)
        attn_params = attention_params_per_layer(c)
        o_params = self.nq * self.d * self.H
        gqa_in = (self.nq_loc + 2.0 * kv_heads_loc) * self.d
        self.n_in = np.where(self.mla, (attn_params - o_params) / self.H / self.t, gqa_in)
        self.te = self.t * self.dp / self.e  # ways each expert is split
        self.E_loc = np.where(self.E > 0, self.E / self.e, 0.0)


#: GEMMs of one step, in the order of a plan's requests.
_GEMMS = ("qkv", "o", "up", "down", "eup", "edown", "router", "sup", "sdown", "lm")


def _plan(s: _Shape, hw: _HW, m_dec, n_pre, P, moe_groups) -> dict:
    """Token counts of one stage step and its GEMM requests (costed later, all passes at once).

    ``m_dec`` decode tokens (sequences) per attention group at mean context ``S``; ``n_pre``
    prompts of ``P`` tokens prefilled in the same step; ``moe_groups`` attention groups whose tokens
    meet in the MoE layers (``dp`` for steady state, 1 for a lone request's TTFT).
    """
    H, t = s.H, s.t
    M = m_dec + n_pre * P  # tokens through the weight GEMMs
    T_tot = M * moe_groups  # tokens meeting in the stage's experts
    is_moe = s.E > 0
    if np.any(is_moe):
        E_safe = np.maximum(s.E, 1.0)
        touched = s.E_loc * (1.0 - np.power(np.clip(1.0 - s.k / E_safe, 0.0, 1.0), T_tot))
        touched = np.where(is_moe, np.maximum(touched, 1e-9), 0.0)
        m_e = np.where(is_moe, T_tot * s.k / s.e * s.imb / np.maximum(touched, 1e-9), 0.0)
    else:
        touched = m_e = np.zeros_like(T_tot)
    shared_w = s.Es * s.Fs / t
    M_moe = np.where(is_moe, M, 0.0)
    M_shared = np.where(shared_w > 0, M, 0.0)
    requests = [
        (M, s.n_in, H, s.b_a, s.b_w, s.b_a, 1.0, None, False),  # qkv (or MLA projections)
        (M, H, s.nq_loc * s.d, s.b_a, s.b_w, s.b_a, 1.0, None, False),  # attention output
        (M, s.g * s.F / t, H, s.b_a, s.b_w, s.b_a, 1.0, None, False),  # dense MLP up (+gate)
        (M, H, s.F / t, s.b_a, s.b_w, s.b_a, 1.0, None, False),  # dense MLP down
        (m_e, s.g * s.Fe / s.te, H, s.b_a, s.b_w, s.b_a, touched, None, True),  # experts up
        (m_e, H, s.Fe / s.te, s.b_a, s.b_w, s.b_a, touched, None, True),  # experts down
        (M_moe, s.E, H, s.b_a, EMBED_BYTES, 4.0, 1.0, hw.bf16_peak, False),  # router (bf16)
        (M_shared, s.g * shared_w, H, s.b_a, s.b_w, s.b_a, 1.0, None, False),  # shared experts up
        (M_shared, H, shared_w, s.b_a, s.b_w, s.b_a, 1.0, None, False),  # shared experts down
        # LM head (bf16), once per step on the last stage: decode tokens + last token of each prompt
        (m_dec + n_pre, s.V / t, H, s.b_a, EMBED_BYTES, 4.0, 1.0, None, False),
    ]
    return {"m_dec": m_dec, "n_pre": n_pre, "P": P, "M": M, "T_tot": T_tot, "shared_w": shared_w,
            "requests": requests}


def _step(s: _Shape, hw: _HW, plan: dict, g: dict[str, GemmCost]):
    """Per-GPU times of one stage step (per-layer averages by component) and the LM head."""
    H, t = s.H, s.t
    m_dec, n_pre, P, M, T_tot = plan["m_dec"], plan["n_pre"], plan["P"], plan["M"], plan["T_tot"]
    S = s.isl + s.osl / 2.0  # mean decode context (DESIGN.md)
    frac_sl = np.where(s.L > 0, s.n_sl / s.L, 0.0)
    # --- attention scores/values
    S_eff = (1 - frac_sl) * S + frac_sl * mean_context_sliding(S, s.W)
    fl_d, by_d = decode_attention(m_dec, S_eff, s.nq_loc, s.d, s.kv_loc, s.b_kv, s.mla, s.kr, s.rope)
    fl_p = prefill_attention_flops(P, 0.0, s.nq_loc, s.d, s.mla, s.rope)
    if np.any(frac_sl > 0):  # sliding-window layers (skipped when no row has any)
        fl_p = (1 - frac_sl) * fl_p + frac_sl * prefill_attention_flops(P, s.W, s.nq_loc, s.d, s.mla, s.rope)
    fl_p = n_pre * fl_p
    by_p = n_pre * P * s.kv_loc * (s.b_kv + 2.0 * s.b_a)  # write new KV, read Q/K/V once
    attn_c = (fl_d + fl_p) / (hw.peak_attn * hw.eta_c)
    attn_m = (by_d + by_p) / (hw.hbm_bw * hw.eta_m)
    t_attn = np.maximum(attn_c, attn_m)
    # --- collectives
    bw_t, lat_t = link(t, hw.domain, hw.up_bw, hw.up_lat, hw.out_bw, hw.out_lat)
    t_ar = allreduce_s(M * H * ALLREDUCE_BYTES, t, bw_t, lat_t, hw.eta_n)
    is_moe = s.E > 0
    if np.any(is_moe & (s.e > 1)):
        group_ep = s.t * s.dp
        bw_e, lat_e = link(group_ep, hw.domain, hw.up_bw, hw.up_lat, hw.out_bw, hw.out_lat)
        tok_origin = T_tot / group_ep
        a2a_frac = (s.e - 1.0) / s.e
        t_a2a = (alltoall_s(tok_origin * s.k * H * s.b_a * a2a_frac, s.e, bw_e, lat_e, hw.eta_n)
                 + alltoall_s(tok_origin * s.k * H * COMBINE_BYTES * a2a_frac, s.e, bw_e, lat_e, hw.eta_n))
        t_a2a = np.where(is_moe, t_a2a, 0.0)
    else:
        t_a2a = np.zeros_like(T_tot)
    # --- per-layer sums (averaged over dense and MoE layers)
    qkv, o, up, down, eup, edown, router, sup, sdown = (g[k] for k in _GEMMS[:-1])
    wd, wm = s.n_dense / s.L, s.n_moe / s.L
    t_gemm = qkv.time_s + o.time_s + wd * (up.time_s + down.time_s) + wm * (sup.time_s + sdown.time_s)
    t_moe = wm * (eup.time_s + edown.time_s + router.time_s)
    t_comm = 2.0 * t_ar + wm * t_a2a
    comp = {
        "gemm_c": qkv.compute_s + o.compute_s + wd * (up.compute_s + down.compute_s)
        + wm * (sup.compute_s + sdown.compute_s),
        "gemm_m": qkv.memory_s + o.memory_s + wd * (up.memory_s + down.memory_s)
        + wm * (sup.memory_s + sdown.memory_s),
        "moe_c": wm * (eup.compute_s + edown.compute_s + router.compute_s),
        "moe_m": wm * (eup.memory_s + edown.memory_s + router.memory_s),
        "attn_c": attn_c, "attn_m": attn_m,
    }
    kernels = (2.0 + 1.0 + ELEMENTWISE_KERNELS_PER_LAYER + np.where(t > 1, 2.0, 0.0)
               + wd * 2.0 + wm * (3.0 + MOE_EXTRA_KERNELS + np.where(plan["shared_w"] > 0, 2.0, 0.0)
                                  + np.where(s.e > 1, 2.0, 0.0)))
    per_layer = {"gemm": t_gemm, "attention": t_attn, "moe": t_moe, "comm": t_comm,
                 "overhead": kernels * hw.launch}
    return per_layer, g["lm"], comp, {"gemm": qkv, "o": o, "up": up, "down": down, "eup": eup, "edown": edown}


def _steps(s: _Shape, hw: _HW, plans: list[dict]):
    """Cost every plan's GEMMs in one stacked call, then each step's times."""
    requests = [r for p in plans for r in p["requests"]]
    costs = hw.run_gemms(requests)
    n = len(_GEMMS)
    return [_step(s, hw, p, dict(zip(_GEMMS, costs[i * n:(i + 1) * n], strict=True))) for i, p in enumerate(plans)]


def _stage_time(s: _Shape, per_layer, lm, hw: _HW):
    """Worst stage: ceil(L/p) layers plus the LM head."""
    parts = {k: s.Ls * v for k, v in per_layer.items()}
    parts["gemm"] = parts["gemm"] + lm.time_s
    parts["overhead"] = parts["overhead"] + hw.launch  # LM head launch
    return parts


def simulate(c: Mapping[str, np.ndarray], table: HardwareTable, detail: bool = True) -> dict[str, np.ndarray]:
    """Score every row of a design table.  Never raises for infeasible rows: they come back with
    ``feasible=False`` and ``reason_code`` (see :data:`REASONS`); their performance figures are still
    computed (finite) so searches can grade how far they are from feasible.

    ``detail=False`` skips the decode-only pass that splits the breakdown into decode components and
    the prefill share (a third less work, for exhaustive grids): the ``t_*_s`` columns are then NaN;
    re-simulate the rows you keep with ``detail=True`` to get them.  Every other figure is identical.
    """
    idx = np.asarray(c["hw_idx"], dtype=np.int64)
    if idx.size > GROUP_BY_HARDWARE_ROWS and np.any(idx != idx.flat[0]):
        return _by_hardware(c, table, detail, idx)
    if idx.size > CHUNK_ROWS:  # bounded temporaries: large tables run in cache-friendly chunks
        return _chunked(c, table, detail, idx.size)
    s = _Shape(c)
    cfmt = np.asarray(c["compute_fmt"], dtype=np.int64)
    # attention runs in the activation's tensor format, at most fp8 (no FP4 attention kernels)
    # (FP8 attention kernels exist for GQA -- FlashAttention-3, TensorRT-LLM FP8 FMHA; MLA kernels
    # such as FlashMLA compute in bf16 whatever the cache format)
    a_idx = np.where((s.b_a >= 2.0) | s.mla, 0, TENSOR_FORMATS.index("fp8"))
    hw = _HW(table, idx, cfmt, a_idx)
    # Missing formats: compute with the bf16 peak so figures stay finite; the row is infeasible.
    hw.peak = np.where(np.isfinite(hw.peak), hw.peak, hw.bf16_peak)
    hw.peak_attn = np.where(np.isfinite(hw.peak_attn), hw.peak_attn, hw.bf16_peak)

    m_a = s.B / (s.p * s.dp)  # decode sequences per attention group per micro-batch
    n_pre = m_a / s.osl
    plans = [_plan(s, hw, m_a, n_pre, s.isl, s.dp),  # steady-state mixed step
             _plan(s, hw, 0.0 * m_a, 1.0 + 0.0 * m_a, s.isl, 1.0 + 0.0 * m_a)]  # a lone prefill (TTFT)
    if detail:
        plans.append(_plan(s, hw, m_a, 0.0 * m_a, s.isl, s.dp))  # the same step without prefill
    steps = _steps(s, hw, plans)
    mixed, lm_mixed, comp, gemms = steps[0]
    ttft_pl, lm_ttft, _, _ = steps[1]
    if detail:
        dec, lm_dec, _, _ = steps[2]

    bw_p, lat_p = hw.out_bw, hw.out_lat  # stages may sit in other NVLink domains: assume scale-out
    bw_p = np.where(s.t * s.dp * s.p <= hw.domain, hw.up_bw, bw_p)
    lat_p = np.where(s.t * s.dp * s.p <= hw.domain, hw.up_lat, lat_p)
    M_mixed = m_a * (1.0 + s.isl / s.osl)
    t_p2p = np.where(s.p > 1, p2p_s(M_mixed * s.H * s.b_a, bw_p, lat_p, hw.eta_n), 0.0)

    st_mixed = _stage_time(s, mixed, lm_mixed, hw)
    p = s.p
    T_stage_mixed = sum(st_mixed.values())
    # host work per token: a fixed step cost plus bookkeeping of each sequence a scheduler (one per
    # attention data-parallel rank) carries
    t_host = hw.step_overhead + hw.per_seq * s.B / s.dp
    T_token = p * T_stage_mixed + (p - 1.0) * t_p2p + t_host
    # breakdown per token: decode-only components, prefill = the rest
    if detail:
        st_dec = _stage_time(s, dec, lm_dec, hw)
        bd = {k: p * st_dec[k] for k in ("gemm", "attention", "moe", "comm", "overhead")}
        bd["comm"] = bd["comm"] + (p - 1.0) * t_p2p
        bd["overhead"] = bd["overhead"] + t_host
        bd["prefill"] = np.maximum(T_token - sum(bd.values()), 0.0)
    else:
        bd = {k: np.full(len(s.H), np.nan) for k in COMPONENTS}

    st_ttft = _stage_time(s, ttft_pl, lm_ttft, hw)
    t_p2p_pf = np.where(s.p > 1, p2p_s(s.isl * s.H * s.b_a, bw_p, lat_p, hw.eta_n), 0.0)
    ttft = p * sum(st_ttft.values()) + (p - 1.0) * t_p2p_pf + hw.step_overhead + hw.per_seq

    # --- memory per GPU (worst stage)
    cnt = s.counts
    stage_frac = s.Ls / s.L
    emb = np.where(p > 1, np.maximum(cnt["embedding_in"], cnt["embedding_out"]),
                   cnt["embedding_in"] + cnt["embedding_out"])
    weights = (s.b_w * cnt["layer_dense"] * stage_frac / s.t
               + s.b_w * cnt["expert"] * stage_frac / (s.t * s.dp)
               + EMBED_BYTES * emb / s.t)
    ctx = s.isl + s.osl
    frac_sl = s.n_sl / s.L
    tokens_stored = (1 - frac_sl) * ctx + frac_sl * np.where(s.W > 0, np.minimum(ctx, s.W), ctx)
    kv_per_seq = s.Ls * s.kv_loc * s.b_kv * tokens_stored
    kv = (s.B / s.dp) * kv_per_seq
    M_ws = np.maximum(M_mixed, s.isl)
    F_loc = np.maximum(s.g * s.F / s.t, s.g * np.maximum(s.Es * s.Fs, s.Fe) / s.t)
    workspace = M_ws * (8.0 * s.H + 2.0 * F_loc) + (m_a + n_pre + 1.0) * 4.0 * s.V / s.t
    needed = weights + kv + workspace + hw.reserved
    capacity = hw.hbm_bytes * hw.usable

    # --- feasibility, first failing rule wins
    reason = np.zeros(len(s.H), dtype=np.int64)
    fmt_mask = np.asarray(c["fmt_mask"], dtype=np.int64)
    checks = [
        (7, s.B < s.p * s.dp),
        (6, needed > capacity),
        (5, np.mod(s.F, s.t) != 0),
        (4, (s.E == 0) & (s.e > 1) | (s.E > 0) & ((np.mod(s.E, s.e) != 0) | (np.mod(s.t * s.dp, s.e) != 0))),
        (3, s.p > s.L),
        (2, (np.mod(s.nq, s.t) != 0) | (~s.mla & (np.mod(s.nkv, s.t) != 0) & (np.mod(s.t, s.nkv) != 0))),
        (1, (fmt_mask & ~hw.support_mask) != 0),
    ]
    for code, bad in checks:  # later entries take precedence: structural reasons before OOM
        reason = np.where(bad, code, reason)
    feasible = reason == 0

    gpus = s.t * s.dp * s.p
    res = {
        "feasible": feasible,
        "reason_code": reason,
        "tokens_per_s_per_user": 1.0 / T_token,
        "tokens_per_s_per_gpu": s.B / (T_token * gpus),
        "ttft_s": ttft,
        "tpot_s": T_token,
        "gpus": gpus,
        "memory_bytes_per_gpu": needed,
        "memory_capacity_bytes": capacity,
        "weights_bytes_per_gpu": weights,
        "kv_bytes_per_gpu": kv,
        "kv_bytes_per_seq_per_gpu": kv_per_seq,
        "workspace_bytes_per_gpu": workspace,
        "params_total": cnt["total"],
        "params_active": cnt["active"],
        "tokens_per_step": M_mixed,
    }
    for k in COMPONENTS:
        res[f"t_{k}_s"] = bd[k]
    # bound of the decode work: compute if compute time exceeds memory time
    res["gemm_bound_compute"] = comp["gemm_c"] > comp["gemm_m"]
    res["moe_bound_compute"] = comp["moe_c"] > comp["moe_m"]
    res["attention_bound_compute"] = comp["attn_c"] > comp["attn_m"]
    res["mlp_up_tile_eff"] = gemms["up"].tile_eff
    res["mlp_up_wave_eff"] = gemms["up"].wave_eff
    res["qkv_tile_eff"] = gemms["gemm"].tile_eff
    return res


#: Tables with several hardware kinds and more rows than this are scored one kind at a time (the
#: GEMM tile scan is cheaper when every row shares one tile list); results are identical.
GROUP_BY_HARDWARE_ROWS = 4096


#: Rows scored per call inside :func:`simulate`; larger tables are split (measured on the 2-core
#: machine: one 10^6-row call took 15 s, 20 chunks of 50,000 rows 4 s -- the (GEMMs x rows) temporaries
#: otherwise spill out of cache).
CHUNK_ROWS = 50_000


def _chunked(c: Mapping[str, np.ndarray], table: HardwareTable, detail: bool, n: int):
    parts = [simulate({k: (np.asarray(v)[a:a + CHUNK_ROWS] if np.ndim(v) else v) for k, v in c.items()}, table, detail)
             for a in range(0, n, CHUNK_ROWS)]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _by_hardware(c: Mapping[str, np.ndarray], table: HardwareTable, detail: bool, idx: np.ndarray):
    n = idx.size
    order = np.argsort(idx, kind="stable")
    cuts = np.flatnonzero(np.diff(idx[order])) + 1
    out: dict[str, np.ndarray] = {}
    for sel in np.split(order, cuts):
        part = simulate({k: (np.asarray(v)[sel] if np.ndim(v) else v) for k, v in c.items()}, table, detail)
        for k, v in part.items():
            if k not in out:
                out[k] = np.empty(n, dtype=v.dtype)
            out[k][sel] = v
    return out
