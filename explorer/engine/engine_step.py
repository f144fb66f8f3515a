"""One engine's step times under a decode batch and a prompt arrival rate: the pure decode step, the
engine time one prompt costs (its chunks mixed into decode steps or as their own steps), the
time to first token without queueing, the host and serving front end's share, speculative
drafting -- the inputs of the closed- and open-loop load models (explorer/closed_loop.py,
explorer/open_loop.py)."""

from __future__ import annotations

import numpy as np

from explorer import adp_balance, batch_wait, speculative
from explorer.costs.comm import p2p_s
from explorer.engine.hardware_columns import HardwareColumns
from explorer.engine.layer_step import cost_steps, graph_padded, graph_steps, plan_step, stage_total
from explorer.engine.shape_columns import ShapeColumns
from explorer.masks import where_uniform


def dp_straggler_factor(dp: np.ndarray, f_chunk: np.ndarray) -> np.ndarray:
    """How much more engine time a prompt costs when ``dp`` attention data-parallel ranks step
    together (their MoE layers synchronise every step) and each rank's steps carry a prompt chunk
    with probability ``f_chunk``: a step is as slow as its slowest rank, so it carries a chunk's
    cost with probability ``1 - (1 - f)^dp`` instead of ``f``.  Returns that ratio (``dp`` for rare
    chunks, 1 when every step carries one, 1 without attention DP).  Assumes independent ranks
    (TensorRT-LLM's attention-DP balancing, which waits to align context steps, bounds it:
    :func:`explorer.adp_balance.straggler_bound`)."""
    f = np.clip(np.asarray(f_chunk, dtype=np.float64), 1e-9, 1.0)
    dp = np.maximum(np.asarray(dp, dtype=np.float64), 1.0)
    return np.where(dp > 1, (1.0 - np.power(1.0 - f, dp)) / f, 1.0)


def engine_steps(s: ShapeColumns, hw: HardwareColumns, b: np.ndarray, n_pf: np.ndarray, link_pp: tuple[np.ndarray, np.ndarray],
            f_chunk: np.ndarray | None = None, site: str | None = "engine"):
    """Step times of one engine (attention group) whose decode steps run ``b`` sequences (per
    micro-batch) and that receives ``n_pf`` new prompts per step.

    Returns the pure decode step ``T_dec``, the per-request prefill cost ``tau`` (seconds of engine
    time one prompt adds, spread over the decode steps), the time to first token without queueing,
    the decode step's components and GEMM figures.  Prompts of ``ISL`` tokens go in chunks of
    ``Q = min(n_pf*ISL, budget)`` tokens, ``n_pf = max(1, X*TPOT)`` prompts arriving per step
    (closed loop: requests arrive at the rate ``X`` they finish).

    ``site`` names the GEMM call site (see :meth:`HardwareColumns.run_gemms`): calls of one site reuse the GEMM
    costs of the previous one where their inputs are equal (the closed-loop passes), and the GEMM
    figures in the result are valid until the site's next call.
    """
    p = s.p
    bw_p, lat_p = link_pp
    q = None if s.spec_k is None else 1.0 + s.spec_k  # tokens per sequence through the verify step
    spec = q is not None  # speculative decoding (explorer/speculative.py)
    if spec:  # the caller counts prompts and chunk shares per output token; a step yields E of them
        n_pf = n_pf * s.spec_tokens  # (the one-prompt floor below, after ``arrivals`` is taken)
        f_chunk = None if f_chunk is None else np.minimum(f_chunk * s.spec_tokens, 1.0)
    arrivals = n_pf  # prompts arriving per step, before the one-prompt floor of a chunk
    # attention-DP balance (explorer/adp_balance.py): the hold before a prompt and the bound it puts on stragglers
    # (the balancing rows and their figures of the shape alone: once per call; none balance where no
    # row has rt_adp_iters > 0 and dp > 1)
    adp_rows = s.once("adp_rows", lambda: adp_balance.balancing_rows(s.rt_adp_iters, s.dp))
    adp_on = adp_rows[1] is not None
    adp_wait, adp_bound = adp_balance.hold(s.rt_adp_iters, s.dp, arrivals, adp_rows) if adp_on else (0.0, np.inf)
    # the shape's figures every pass used again (the same values, computed once per call) and
    # whether every row, or none, runs mixed steps / a pipeline (np.where on a mask every row takes,
    # or none does, gives one branch's values as they are: the other is not computed)
    cst = s.once("engine_constants", lambda: _engine_constants(s))
    mixed, all_mixed, any_mixed = s.rt_mixed, cst["all_mixed"], cst["any_mixed"]

    def if_mixed(a, b):  # np.where(s.rt_mixed, a(), b())'s values, a() or b() alone where that is the same
        return where_uniform(mixed, a, b, all_mixed, any_mixed)

    b_pad = graph_padded(b, s.rt_graph_step, s.rt_graph_max, cst["graph_steps"])
    b_tok = b_pad if q is None else b_pad * q  # decode tokens through the GEMMs
    budget = np.maximum(if_mixed(lambda: s.rt_max_tokens - (b if q is None else b * q), lambda: s.rt_max_tokens), 1.0)
    n_pf = np.maximum(n_pf, 1.0)  # at least one prompt's tokens per prefill-carrying step
    Q = np.minimum(n_pf * s.isl, budget)  # prompt tokens per prefill-carrying step
    zero = 0.0 * b
    b_tok_pre = if_mixed(lambda: b_tok, lambda: np.zeros(np.broadcast_shapes(mixed.shape, np.shape(b_tok))))
    q_share = Q / s.isl
    plans = [plan_step(s, hw, b_tok, zero, s.isl, s.dp, m_attn=b, q_attn=q),
             plan_step(s, hw, b_tok_pre, q_share, s.isl, cst["mixed_dp"],
                       m_attn=if_mixed(lambda: b, lambda: np.zeros(np.broadcast_shapes(mixed.shape, np.shape(b)))),
                       q_attn=q)]
    dec, pre = cost_steps(s, hw, plans, site=site)
    parts_dec, stage_dec = stage_total(s, dec, hw)
    parts_pre, stage_pre = stage_total(s, pre, hw)
    if s.draft is not None:  # K draft passes per step (mixed steps draft for their decoders too)
        draft = draft_parts(s, hw, b_pad, b, site)
        parts_dec = {k: v + draft[k] for k, v in parts_dec.items()}
        parts_pre = {k: v + np.where(s.rt_mixed, draft[k], 0.0) for k, v in parts_pre.items()}
        stage_dec, stage_pre = sum(parts_dec.values()), sum(parts_pre.values())
    # the engine loop's host work (one scheduler per attention group serves p micro-batches) is in the
    # step; the serving front end's (HTTP server, detokenising and streaming every running sequence)
    # adds to it, or -- where it runs beside the engine loop (host_overlap) -- shows only where it is
    # the longer of the two: the engine then waits for it
    host = s.rt_step + s.rt_per_seq * b * p
    if cst["any_pipeline"]:
        p2p = lambda m: (p - 1.0) * np.where(p > 1, p2p_s(m * s.H * s.b_a, bw_p, lat_p, hw.eta_n), 0.0)  # noqa: E731
    else:  # no row has p > 1: np.where's 0.0 everywhere, (p - 1.0) * 0.0 as before
        p2p = lambda m: cst["p_less_1"] * 0.0  # noqa: E731
    p2p_dec = p2p(b_tok)  # (one figure for T_dec and the result's "p2p": the same expression)
    T_dec = p * stage_dec + p2p_dec + host
    T_pre_step = p * stage_pre + p2p(b_tok_pre + Q) + host
    host_dec = host
    if (s.rt_serve_step > 0).any() or (s.rt_serve_seq > 0).any():  # off unless asked for (front_end)
        serve = s.rt_serve_step + s.rt_serve_seq * b * p
        wait_dec, wait_pre = (np.where(s.rt_overlap, np.maximum(serve - e, 0.0), serve) for e in (T_dec, T_pre_step))
        T_dec, T_pre_step, host_dec = T_dec + wait_dec, T_pre_step + wait_pre, host + wait_dec
    # engine seconds one prompt costs: mixed -> the extra time of the mixed steps; separate -> its steps
    tau = if_mixed(lambda: np.maximum(T_pre_step - T_dec, 0.0), lambda: T_pre_step) * s.isl / Q
    if f_chunk is not None and (s.dp > 1).any():
        # attention-DP ranks wait for the one with a chunk: the rank's own work (attention, dense
        # GEMMs, its collectives) is paid at the straggler rate; the expert GEMMs are shared by all
        # ranks -- the mixed step above already runs dp ranks' chunks through them -- so their
        # extra time is counted once, not dp times when chunks are rare
        moe_extra = p * np.maximum(np.where(s.rt_mixed, parts_pre["moe"] - parts_dec["moe"], parts_pre["moe"]), 0.0)
        moe_extra = np.minimum(moe_extra * s.isl / Q, tau)
        # a balancing runtime steps its ranks' prompts together (explorer/adp_balance.py): bounded
        # (rows without attention DP keep tau as is: (tau - m) * 1 + m can differ from tau in the last
        # bit, and a row's figures must not depend on the other rows of its table)
        tau = np.where(s.dp > 1, (tau - moe_extra) * np.minimum(dp_straggler_factor(s.dp, f_chunk), adp_bound)
                       + moe_extra, tau)
    chunks = n_pf * s.isl / Q  # (once: chunk_steps and own_steps both take it)
    chunk_steps = np.maximum(1.0, np.ceil(chunks - 1e-9))
    # TTFT without queueing: the step in flight when the request arrives (half a step on average),
    # then the steps that carry its prompt, then the runtime's per-request work
    busy = np.clip(b - 1.0, 0.0, 1.0)  # a step of the other requests is in flight (none when alone)
    # the prompt's own steps: mixed, every chunk but the last fills the budget and the last carries the
    # remainder -- each step is a decode step plus its chunk's share of the prompt work (a 9.4k-token
    # prompt in 8k chunks costs one full and one 1.4k-token step, not two full ones); separate
    # prefill steps are costed whole (a partial chunk's fixed cost is not separated out: assumption)
    own_steps = if_mixed(lambda: chunk_steps * T_dec + chunks * (T_pre_step - T_dec), lambda: chunk_steps * T_pre_step)
    # A new request first waits for the step in flight (half a step on average) -- or, where the
    # scheduler takes in requests only every ``poll`` decode steps (SGLang's --scheduler-recv-interval,
    # --num-continuous-decode-steps: "may increase time-to-first-token", SGLang server arguments), for
    # the next poll: uniform over ``poll`` steps, ``poll/2`` on average.  Ignored: the poll SGLang makes
    # right after a prefill step (recv_skipper weights prefill 1000), which shortens the wait where
    # prompts arrive every few steps; percentiles shift by this mean (the wait's own spread is left out)
    ttft_service = 0.5 * busy * T_dec * s.poll + own_steps + s.rt_request
    if (s.bw_iters > 0).any():  # the runtime holds new prompts to batch them (explorer/batch_wait.py):
        # the held decode steps, then the batch's other prompts in the prompt's own step
        wait_steps, mates = batch_wait.hold(s.bw_iters, s.bw_ratio, s.rt_max_tokens, s.isl, b - 1.0, arrivals)
        ttft_service = ttft_service + T_dec * wait_steps + np.maximum(1.0 + mates - n_pf, 0.0) * tau
    if adp_on:  # held until every attention-DP rank has a prompt
        ttft_service = ttft_service + T_dec * busy * adp_wait
    # mixed steps carry one chunk each at most: the prompt rate cannot exceed Q/ISL per mixed step
    rate_max = np.where(s.rt_mixed, q_share / np.maximum(T_pre_step, 1e-30), np.inf)
    if s.disagg.any():  # disaggregated decode pool: no prompt work here, TTFT mostly spent outside
        tau = np.where(s.disagg, 0.0, tau)
        ttft_service = np.where(s.disagg, s.ttft_extra + 0.5 * busy * T_dec + s.rt_request, ttft_service)
        rate_max = np.where(s.disagg, np.inf, rate_max)
    isl_budget = s.isl / budget
    out = {"T_dec": T_dec, "tau": tau, "ttft_service": ttft_service, "parts": parts_dec, "host": host_dec,
            "rate_max": rate_max, "T_full": np.where(s.rt_mixed, T_pre_step, T_dec),
            "prompt_s": T_pre_step * s.isl / Q, "T_pre_step": T_pre_step,
            # one prompt's share of the prefill server when chunks fill the whole token budget
            # (mixed: a step carries every waiting prompt up to the budget; separate: as tau)
            "prompt_service_s": np.where(s.rt_mixed, tau + T_dec * np.minimum(isl_budget, 1.0), tau),
            "isl_per_budget": np.where(s.rt_mixed, isl_budget, 0.0),  # a prompt's chunks (mixed steps)
            "p2p": p2p_dec, "comp": dec[2], "gemms": dec[3], "Q": Q, "b_pad": b_pad}
    if spec:  # per output token: each step yields E tokens per sequence (TTFT, tau, rates stay per step)
        E = s.spec_tokens
        out.update({k: out[k] / E for k in ("T_dec", "T_full", "T_pre_step", "host", "p2p")})
        out["parts"] = {k: v / E for k, v in parts_dec.items()}
    return out


def _engine_constants(s: ShapeColumns) -> dict:
    """:func:`engine_steps`' figures of the shape columns alone (see there)."""
    return {"all_mixed": bool(s.rt_mixed.all()), "any_mixed": bool(s.rt_mixed.any()),
            "mixed_dp": np.where(s.rt_mixed, s.dp, 1.0), "any_pipeline": bool((s.p > 1).any()),
            "p_less_1": s.p - 1.0, "graph_steps": graph_steps(s.rt_graph_step)}


def draft_parts(s: ShapeColumns, hw: HardwareColumns, b_pad: np.ndarray, b: np.ndarray, site: str | None = None) -> dict[str, np.ndarray]:
    """Per-GPU component times of one step's ``K`` draft passes over ``b`` sequences (``b_pad``
    through the GEMMs), on the last stage (explorer/speculative.py): each pass is a decode step of
    the draft -- one MTP layer + the shared LM head, or the draft model's layers + its head -- and,
    for MTP, the bf16 projection ``eh_proj`` (2H -> H, row-parallel: one all-reduce) and its norms.
    ``site``: the engine's GEMM call site (:func:`engine_steps`), None for no reuse."""
    d = s.draft
    assert d is not None and s.spec_k is not None
    step = cost_steps(d, hw, [plan_step(d, hw, b_pad, 0.0 * b, d.isl, d.dp, m_attn=b)],
                  site=None if site is None else site + "/draft")[0]
    parts, _ = stage_total(d, step, hw)
    mtp = s.spec_kind == speculative.DRAFT_MTP
    proj = hw.run_gemms([(np.where(mtp, b_pad, 0.0), s.H, 2.0 * s.H / s.t, s.b_a, speculative.PROJECTION_BYTES,
                          s.b_a, 1.0, hw.bf16_peak, False)],
                        site=None if site is None else site + "/mtp_proj")[0]
    parts["gemm"] = parts["gemm"] + np.where(mtp, proj.time_s, 0.0)
    parts["comm"] = parts["comm"] + np.where(mtp, step[2]["t_ar"], 0.0)
    parts["overhead"] = parts["overhead"] + np.where(mtp, (1.0 + speculative.MTP_NORM_KERNELS) * hw.launch, 0.0)
    return {k: s.spec_k * v for k, v in parts.items()}

