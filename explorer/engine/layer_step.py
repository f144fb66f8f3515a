"""One stage step of the layers: its token counts and GEMM requests (:func:`plan_step`), the
per-GPU component times of a step -- GEMMs, attention, MoE, collectives, kernel launches
(:func:`step_times`) -- and the worst stage's total with the LM head (:func:`stage_total`).
CUDA-graph padding of the decode batch (:func:`graph_padded`) and the expected maximum expert load
under multinomial routing (:func:`expected_max_load_factor`) live here too."""

from __future__ import annotations

import numpy as np

from explorer.costs.attention import decode_attention, mean_context_sliding, prefill_attention_flops
from explorer.costs.comm import (
    collective_from_terms,
    collective_terms,
    custom_allreduce_from_terms,
    custom_allreduce_terms,
    ep_alltoall_from_terms,
    ep_alltoall_terms,
    protocols_of,
)
from explorer.costs.gemm import GemmCost
from explorer.engine.constants import ALLREDUCE_BYTES, COMBINE_BYTES, CUSTOM_ALLREDUCE_MAX_GPUS, EMBED_BYTES
from explorer.engine.hardware_columns import HardwareColumns
from explorer.engine.shape_columns import ShapeColumns

#: GEMMs of one step, in the order of a plan's requests.
GEMMS = ("qkv", "o", "up", "down", "eup", "edown", "router", "sup", "sdown", "lm")


def blom_z(n: np.ndarray) -> np.ndarray:
    """Blom's approximation of the expected maximum of ``n`` standard normals,
    ``Phi^-1((n - 0.375)/(n + 0.25))`` (0 for ``n <= 1``): the factor of
    :func:`expected_max_load_factor` that depends on the GPU count only."""
    from scipy.special import ndtri

    n = np.asarray(n, dtype=np.float64)
    return np.where(n > 1, ndtri((n - 0.375) / (n + 0.25)), 0.0)


def expected_max_load_factor(n: np.ndarray, slots: np.ndarray, z: np.ndarray | None = None,
                             spread: np.ndarray | None = None, cap: np.ndarray | None = None) -> np.ndarray:
    """Expected maximum over ``n`` GPUs of the tokens routed to each, as a multiple of the mean,
    when ``slots`` token-expert assignments are spread uniformly (multinomial routing).

    Normal approximation of the binomial per-GPU load (mean ``mu = slots/n``, sd
    ``sqrt(slots (1/n)(1 - 1/n))``) and Blom's formula for the expected maximum of ``n`` standard
    normals, ``Phi^-1((n - 0.375)/(n + 0.25))`` (1.43 for n = 8; exact 1.42).  Capped at ``n`` (all
    tokens on one GPU); 1 for ``n = 1``.  Ignores hot experts (real routers are not uniform: the
    named ``moe_imbalance`` factor takes that).  ``z``: :func:`blom_z` of ``n`` where the caller
    already has it (the simulator computes it once per call, not once per pass); ``spread``,
    ``cap``: ``max(n - 1, 0)`` and ``max(n, 1)``, likewise.
    """
    n = np.asarray(n, dtype=np.float64)
    slots = np.maximum(np.asarray(slots, dtype=np.float64), 1e-9)
    if z is None:
        z = blom_z(n)
    cv = np.sqrt((np.maximum(n - 1.0, 0.0) if spread is None else spread) / slots)  # sd / mean of one GPU's load
    return np.clip(1.0 + z * cv, 1.0, np.maximum(n, 1.0) if cap is None else cap)


def _pad_whole(b: np.ndarray, step: np.ndarray, max_batch: np.ndarray, step_1: np.ndarray,
               stepping: np.ndarray) -> np.ndarray:
    # the captured sizes up to 4: 1, 2, 4 -- 2**ceil(log2(max(b, 1))) where b <= 4, written as two
    # comparisons (the same values; the transcendental pair cost ~5 % of a sweep, 2026-12-06)
    # (step_1, stepping: np.maximum(step, 1.0) and step > 0, the figures of step alone, taken once)
    small = np.where(b > 2.0, 4.0, np.where(b > 1.0, 2.0, 1.0))
    stepped = np.ceil(b / step_1) * step_1
    padded = np.where(b <= 4.0, small, np.maximum(stepped, b))
    use = stepping & (b <= max_batch) & (b > 0)
    return np.where(use, np.minimum(padded, np.maximum(max_batch, b)), b)


def graph_steps(step: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The figures of :func:`graph_padded` that depend on ``step`` alone (a caller padding many
    batches with the same graph steps computes them once)."""
    return np.maximum(step, 1.0), step > 0


def graph_padded(b: np.ndarray, step: np.ndarray, max_batch: np.ndarray,
                 steps: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Decode batch as a CUDA graph runs it: captured sizes 1, 2, 4, then multiples of ``step``, up
    to ``max_batch`` (above it, or with ``step == 0``, the step runs unpadded).

    ``b`` is a steady-state mean, so the padded size is the expectation over the two whole batches
    around it (``floor(b)`` and ``ceil(b)``, weighted by the fraction): a mean of 8.01 pads to 8.08,
    not to 16 -- the step function applied to a mean would jump where the served batch does not.
    ``steps``: :func:`graph_steps` of ``step`` where the caller has it."""
    b = np.asarray(b, dtype=np.float64)
    step_1, stepping = graph_steps(step) if steps is None else steps
    lo, hi = np.floor(b), np.ceil(b)
    w = b - lo
    return (1.0 - w) * _pad_whole(np.maximum(lo, np.minimum(b, 1.0)), step, max_batch, step_1, stepping) \
        + w * _pad_whole(hi, step, max_batch, step_1, stepping)


def plan_step(s: ShapeColumns, hw: HardwareColumns, m_dec, n_pre, P, moe_groups, m_attn=None, q_attn=None) -> dict:
    """Token counts of one stage step and its GEMM requests (costed later, all passes at once).

    ``m_dec`` decode tokens through the GEMMs per attention group (the CUDA-graph padded batch),
    ``m_attn`` real decode sequences attending at mean context ``S`` (default ``m_dec``);
    ``n_pre`` prompts of ``P`` tokens prefilled in the same step (fractional: a chunk of
    ``n_pre*P`` tokens); ``moe_groups`` attention groups whose tokens meet in the MoE layers
    (``dp`` when every group steps together, 1 for a prefill step of one group).  ``q_attn``
    query tokens per attending sequence (speculative verification: ``1 + K``; default 1): the
    attention FLOPs scale with it, the KV cache is read once per sequence.
    """
    H = s.H
    M = m_dec + n_pre * P  # tokens through the weight GEMMs
    T_tot = M * moe_groups  # tokens meeting in the stage's experts
    is_moe, moe_any = s.once("moe_rows", lambda: (s.E > 0, bool((s.E > 0).any())))
    if moe_any:
        # Blom's z of the EP group and the chance that a token skips a given expert: the shape's
        z_e, miss = s.once("routing", lambda: (blom_z(s.e), np.clip(1.0 - s.k / np.maximum(s.E, 1.0), 0.0, 1.0)))
        # the slowest GPU sees its expected-maximum share of the routed tokens (uniform routing)
        slots = T_tot * s.k
        ep, spread, cap = s.once("load_terms", lambda: (s.e > 1, np.maximum(s.e - 1.0, 0.0), np.maximum(s.e, 1.0)))
        load = np.where(ep, expected_max_load_factor(s.e, slots, z_e, spread, cap), 1.0) * s.imb
        T_gpu = T_tot * load  # tokens the slowest GPU's experts see, counted as if all its own
        touched = s.E_loc * (1.0 - np.power(miss, T_gpu))
        touched = np.where(is_moe, np.maximum(touched, 1e-9), 0.0)
        per_gpu = T_gpu * s.k / s.e  # (once: m_e and slots_gpu both take it)
        m_e = np.where(is_moe, per_gpu / np.maximum(touched, 1e-9), 0.0)
        slots_gpu = np.where(is_moe, per_gpu, 0.0)
    else:
        touched = m_e = slots_gpu = np.zeros_like(T_tot)
    nk = s.gemm_nk  # the GEMMs' N and K: the shape's, computed once per call (ShapeColumns)
    # (where no row has experts / shared experts, np.where(mask, M, 0.0) is 0.0 everywhere: zeros)
    M_moe = np.where(is_moe, M, 0.0) if moe_any else np.zeros(np.broadcast_shapes(is_moe.shape, np.shape(M)))
    has_shared, any_shared = s.once("shared_experts", lambda: (nk["sdown"] > 0, bool((nk["sdown"] > 0).any())))
    M_shared = np.where(has_shared, M, 0.0) if any_shared \
        else np.zeros(np.broadcast_shapes(has_shared.shape, np.shape(M)))
    requests = [
        (M, nk["qkv"], H, s.b_a, s.b_w, s.b_a, 1.0, None, False),  # qkv (or MLA projections)
        (M, H, nk["o"], s.b_a, s.b_w, s.b_a, 1.0, None, False),  # attention output
        (M, nk["up"], H, s.b_a, s.b_w, s.b_a, 1.0, None, False),  # dense MLP up (+gate)
        (M, H, nk["down"], s.b_a, s.b_w, s.b_a, 1.0, None, False),  # dense MLP down
        (m_e, nk["eup"], H, s.b_a, s.b_w, s.b_a, touched, None, True),  # experts up
        (m_e, H, nk["edown"], s.b_a, s.b_w, s.b_a, touched, None, True),  # experts down
        (M_moe, s.E, H, s.b_a, EMBED_BYTES, 4.0, 1.0, hw.bf16_peak, False),  # router (bf16)
        (M_shared, nk["sup"], H, s.b_a, s.b_w, s.b_a, 1.0, None, False),  # shared experts up
        (M_shared, H, nk["sdown"], s.b_a, s.b_w, s.b_a, 1.0, None, False),  # shared experts down
        # LM head (bf16), once per step on the last stage: decode tokens + last token of each prompt
        (m_dec + n_pre, nk["lm"], H, s.b_a, EMBED_BYTES, 4.0, 1.0, None, False),
    ]
    return {"m_dec": m_dec, "m_attn": m_dec if m_attn is None else m_attn, "q_attn": q_attn,
            "n_pre": n_pre, "P": P, "M": M,
            "T_tot": T_tot, "slots_gpu": slots_gpu, "requests": requests,
            # (no MoE row: touched is zeros already, and np.where(., zeros, 0.0) the same zeros)
            "touched": np.where(M_moe > 0, touched, 0.0) if moe_any else touched}


def _attention_per_shape(s: ShapeColumns, P) -> tuple[np.ndarray, np.ndarray]:
    """The attention figures of a step that depend on the shape and workload only: the mean decode
    context a sequence attends over (sliding-window layers see at most their window) and the
    attention FLOPs of one ``P``-token prompt, averaged over full and sliding-window layers."""
    S = s.isl + s.osl / 2.0  # mean decode context (DESIGN.md)
    frac_sl = np.where(s.L > 0, s.n_sl / s.L, 0.0)
    S_eff = (1 - frac_sl) * S + frac_sl * mean_context_sliding(S, s.W)
    fl_p = prefill_attention_flops(P, 0.0, s.nq_loc, s.d, s.mla, s.rope)
    if (frac_sl > 0).any():  # sliding-window layers (skipped when no row has any)
        fl_p = (1 - frac_sl) * fl_p + frac_sl * prefill_attention_flops(P, s.W, s.nq_loc, s.d, s.mla, s.rope)
    return S_eff, fl_p


def _step_constants(s: ShapeColumns, hw: HardwareColumns) -> dict:
    """The factors of :func:`step_times` that depend on the shape and hardware columns only (each
    the very subexpression step_times evaluated in every pass, computed once per call: the same
    values, so the same figures), and which of its branches no row of the call takes."""
    t, k_ = s.t, hw.kind
    custom = s.rt_custom_ar & (t > 1) & (t <= CUSTOM_ALLREDUCE_MAX_GPUS) & (t <= k_.scaleup_domain) \
        if k_.peer_allreduce and s.rt_custom_ar.any() else None
    is_moe = s.E > 0
    a2a_rows = is_moe & (s.e > 1) & (s.dp > 1)
    return {
        "attn_den_c": hw.peak_attn * hw.eta_c * s.rt_attention, "attn_den_m": hw.hbm_bw * hw.eta_m * s.rt_attention,
        "kv_rw": s.b_kv + 2.0 * s.b_a, "perm_bytes": 2.0 * s.b_a + 2.0 * COMBINE_BYTES, "perm_den": hw.hbm_bw * hw.eta_m,
        "custom": custom, "custom_any": custom is not None and bool(custom.any()),
        "custom_all": custom is not None and bool(custom.all()),
        "custom_terms": custom_allreduce_terms(t, up_bw=k_.scaleup_bw, eta_n=k_.eta_network) if custom is not None else None,
        "is_moe": is_moe, "any_moe": bool(is_moe.any()), "a2a": bool((is_moe & (s.e > 1)).any()),
        "a2a_rows": a2a_rows, "a2a_any": bool(a2a_rows.any()),
        "a2a_terms": ep_alltoall_terms(s.e, domain=float(k_.scaleup_domain)),
        "token_bytes": s.H * s.b_a, "combine_bytes": s.H * COMBINE_BYTES,
        "overhead": s.kernels_per_layer * hw.launch,
    }


def step_times(s: ShapeColumns, hw: HardwareColumns, plan: dict, g: dict[str, GemmCost]):
    """Per-GPU times of one stage step (per-layer averages by component) and the LM head."""
    H, t = s.H, s.t
    n_pre, P, M, T_tot = plan["n_pre"], plan["P"], plan["M"], plan["T_tot"]
    m_attn = plan["m_attn"]
    cst = s.once("step_constants", lambda: _step_constants(s, hw), hw)
    # --- attention scores/values
    S_eff, fl_prompt = s.once("attention", lambda: _attention_per_shape(s, P), P)
    fl_d, by_d = decode_attention(m_attn, S_eff, s.nq_loc, s.d, s.kv_loc, s.b_kv, s.mla, s.kr, s.rope)
    if plan["q_attn"] is not None:  # speculative verification: 1+K queries per sequence, one KV read
        fl_d = fl_d * plan["q_attn"]
    fl_p = n_pre * fl_prompt
    by_p = n_pre * P * s.kv_loc * cst["kv_rw"]  # write new KV, read Q/K/V once
    # the runtime's attention kernels reach `rt_attention` of the roofline's efficiency (fitted residual)
    attn_c = (fl_d + fl_p) / cst["attn_den_c"]
    attn_m = (by_d + by_p) / cst["attn_den_m"]
    t_attn = np.maximum(attn_c, attn_m)
    # --- collectives
    # the collective model of explorer/costs/comm.py (NCCL's algorithms and protocols, fitted on the
    # kernels file); serving runs its TP all-reduces inside CUDA graphs (custom or NCCL kernels), so
    # the per-call launch/proxy cost of a stand-alone collective is left out (call_s = 0) -- each
    # collective's launch is one of the step's counted kernels
    k_ = hw.kind
    ar_bytes = M * H * ALLREDUCE_BYTES
    # (collective_s in two parts: the group's size-independent terms once per call, then this step's size)
    ar_terms = s.once("allreduce", lambda: collective_terms(
        t, domain=float(k_.scaleup_domain), up_bw=k_.scaleup_bw, up_step_s=k_.scaleup_latency_s,
        out_bw=k_.scaleout_bw, out_step_s=k_.scaleout_latency_s, eta_n=k_.eta_network, kind="allreduce",
        protocols=protocols_of(k_), call_s=0.0, nvls_eta=k_.nvls_eta, nvls_latency_s=k_.nvls_latency_s,
        mesh=k_.scaleup_mesh), hw)
    # (collective_from_terms is 0 already where t <= 1, the groups of ar_terms being t: the mask
    # np.where(t > 1, ., 0.0) put on it again changed nothing)
    t_ar = collective_from_terms(ar_bytes, ar_terms)
    # the runtime's own peer-to-peer all-reduce kernels (one-shot / two-shot) where they beat NCCL:
    # groups of up to 8 GPUs inside one NVLink/xGMI domain (the world sizes vLLM's custom_all_reduce
    # takes; TensorRT-LLM's AUTO strategy picks its ONESHOT/TWOSHOT kernels there too)
    if cst["custom_any"]:
        # (custom_allreduce_s before its t > 1 mask: every custom row has t > 1; np.where on a mask
        # every row takes is np.minimum's values as they are)
        t_cu = np.minimum(t_ar, custom_allreduce_from_terms(ar_bytes, cst["custom_terms"]))
        t_ar = t_cu if cst["custom_all"] else np.where(cst["custom"], t_cu, t_ar)
    is_moe = cst["is_moe"]
    if cst["a2a"] and cst["a2a_any"]:
        tok_origin = T_tot / (s.t * s.dp)  # tokens each GPU of the stage sends (dispatch) and receives back

        def a2a(token_bytes):  # ep_alltoall_s before its e > 1 mask: the rows of t_a2a's mask have e > 1
            return ep_alltoall_from_terms(tok_origin, s.k, token_bytes, cst["a2a_terms"],
                                          up_bw=k_.scaleup_bw, out_bw=k_.scaleout_bw, eta_n=k_.eta_network,
                                          up_step_s=k_.scaleup_latency_s, out_step_s=k_.scaleout_latency_s,
                                          call_s=k_.collective_latency_s)[0]

        # dispatch + combine only when attention data parallelism splits the tokens (dp > 1): with
        # tp >= ep and dp = 1 every GPU of the group already holds every token after the attention
        # all-reduce, computes its own experts on them, and the MoE output is summed by the layer's
        # all-reduce (TensorRT-LLM/SGLang "TP attention + EP MoE") -- no all-to-all
        t_a2a = np.where(cst["a2a_rows"], a2a(cst["token_bytes"]) + a2a(cst["combine_bytes"]), 0.0)
    elif cst["a2a"]:  # no row of the mask: np.where's 0.0 everywhere
        t_a2a = np.zeros(np.broadcast_shapes(cst["a2a_rows"].shape, np.shape(T_tot)))
    else:
        t_a2a = np.zeros_like(T_tot)
    # --- per-layer sums (averaged over dense and MoE layers)
    qkv, o, up, down, eup, edown, router, sup, sdown = (g[k] for k in GEMMS[:-1])
    wd, wm = s.wd, s.wm
    t_gemm = qkv.time_s + o.time_s + wd * (up.time_s + down.time_s) + wm * (sup.time_s + sdown.time_s)
    # permute (gather tokens by expert) and unpermute (weighted scatter-add, bf16): read + write each
    t_perm = plan["slots_gpu"] * H * cst["perm_bytes"] / cst["perm_den"]
    if cst["any_moe"]:
        # each touched expert of the slowest GPU costs its grouped GEMMs (up, down) a fixed start-up
        t_groups = np.where(is_moe, 2.0 * plan["touched"] * hw.moe_group, 0.0)
        t_moe = wm * (eup.time_s + edown.time_s + router.time_s + t_perm + t_groups)
        moe_c = wm * (eup.compute_s + edown.compute_s + router.compute_s)
        moe_m = wm * (eup.memory_s + edown.memory_s + router.memory_s + t_perm)
    else:
        # no MoE row: the expert and router GEMMs cost nothing (run_gemms' zeros: no tokens reach
        # them) and t_groups is np.where's 0.0 everywhere, so the sums above are 0 + 0 + 0 + t_perm
        # (+ 0): t_perm + 0.0 (x + 0.0 is x but for -0.0, as 0.0 + x is)
        t_perm0 = t_perm + 0.0
        t_moe = wm * t_perm0
        moe_c = wm * eup.compute_s  # (0 + 0 + 0: the zeros)
        moe_m = wm * t_perm0
    t_comm = 2.0 * t_ar + wm * t_a2a
    comp = {
        "gemm_c": qkv.compute_s + o.compute_s + wd * (up.compute_s + down.compute_s)
        + wm * (sup.compute_s + sdown.compute_s),
        "gemm_m": qkv.memory_s + o.memory_s + wd * (up.memory_s + down.memory_s)
        + wm * (sup.memory_s + sdown.memory_s),
        "moe_c": moe_c,
        "moe_m": moe_m,
        "attn_c": attn_c, "attn_m": attn_m,
        "t_ar": t_ar,  # one tensor-parallel all-reduce of the step's M tokens (the MTP projection's)
    }
    per_layer = {"gemm": t_gemm, "attention": t_attn, "moe": t_moe, "comm": t_comm,
                 "overhead": cst["overhead"]}
    return per_layer, g["lm"], comp, {"gemm": qkv, "o": o, "up": up, "down": down, "eup": eup, "edown": edown}


def cost_steps(s: ShapeColumns, hw: HardwareColumns, plans: list[dict], site: str | None = None):
    """Cost every plan's GEMMs in one stacked call (``site``: see :meth:`HardwareColumns.run_gemms`), then each
    step's times."""
    requests = [r for p in plans for r in p["requests"]]
    costs = hw.run_gemms(requests, site)
    n = len(GEMMS)
    return [step_times(s, hw, p, dict(zip(GEMMS, costs[i * n:(i + 1) * n], strict=True))) for i, p in enumerate(plans)]


def stage_time(s: ShapeColumns, per_layer, lm, hw: HardwareColumns):
    """Worst stage: ceil(L/p) layers plus the LM head."""
    parts = {k: s.Ls * v for k, v in per_layer.items()}
    parts["gemm"] = parts["gemm"] + lm.time_s
    parts["overhead"] = parts["overhead"] + hw.launch  # LM head launch
    return parts


def stage_total(s: ShapeColumns, step, hw: HardwareColumns) -> tuple[dict, np.ndarray]:
    parts = stage_time(s, step[0], step[1], hw)
    return parts, sum(parts.values())

