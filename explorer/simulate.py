"""The analytic simulator: a design point served by a runtime under closed-loop load, written once
over numpy arrays.

A *design table* is a mapping of column name -> 1-D array (see :data:`DESIGN_COLUMNS`); every
row is one design point (model shape + workload + deployment + precision + hardware index +
serving-runtime columns).  The same call scores one point or a million.  The first-order model is
DESIGN.md section 4; the serving layer is DESIGN.md section 4b.  What a row means:

* ``batch`` is the number of **concurrent requests** per replica (closed-loop clients, see
  :mod:`explorer.closed_loop`).  The steady-state **decode batch** follows from Little's law and is
  capped by the KV cache and the runtime's maximum running requests; surplus clients queue.
* **Prompts run as chunks** (DESIGN 4b).  A new request's ISL tokens go through the model in chunks
  of at most the runtime's tokens per step, either mixed into a decode step (TensorRT-LLM, vLLM:
  the marginal cost is the mixed step minus the pure decode step) or as their own prefill steps
  (SGLang: decoders wait).  Each decode step of a sequence carries its share
  ``b / (OSL - 1)`` of one prompt's cost, so ``TPOT = T_decode(b) + b * tau_prefill / (OSL - 1)``.
  (Refinement over the previous version, which fused a sliver of ``B*ISL/OSL`` prompt tokens into
  every decode step: that read expert weights for prompt tokens on every step, pessimistic for MoE,
  and made dense prompts almost free, optimistic for dense.)
* **CUDA-graph padding**: the decode batch is padded to the runtime's captured sizes in the GEMMs
  and MoE routing (not in attention or host work).
* **MoE** (DESIGN MoE layer): expected experts touched per GPU; expert weights are read at the
  memory roofline (``eta_memory``) -- the grouped-GEMM factor ``eta_moe`` applies to compute only;
  each touched expert's token group is padded to whole tiles; with expert parallelism the slowest
  GPU's load is the expected maximum of ``e`` per-GPU loads under uniform multinomial routing
  (normal approximation, Blom's order-statistic formula) times the named ``moe_imbalance`` factor;
  permute/unpermute traffic is counted.
* **Attention data parallelism** (``dp``): attention and dense layers run on ``t``-GPU groups,
  ``dp`` groups per stage; MoE experts are sharded over all ``t*dp`` GPUs of a stage
  (``E/e`` experts per GPU, each split ``t*dp/e`` ways).  TensorRT-LLM's "DEP" = ``t=1, dp=e``.
* **LM head and embeddings stay bf16** whatever the weight format (TensorRT-LLM and vLLM FP8/FP4
  checkpoints keep ``lm_head`` unquantized).

Pipeline: ``p`` stages of ``ceil(L/p)`` layers (the worst stage also holds the LM head) and
``p`` micro-batches in flight: ``T_token = p*T_stage + (p-1)*t_p2p + host``.
Throughput per GPU ``= p*dp * X * OSL / (t*dp*p)`` with ``X`` the request rate of one engine,
interactivity ``= 1/TPOT``.

Where the pieces live: this module holds the memory budget (:func:`_prepare`), the fixed point of
the closed (or open) loop, feasibility and the result columns; the step it iterates on is built in
:mod:`explorer.engine` (per-GPU sizes, hardware columns and the stacked GEMM runner, one stage
step, one engine's step times), on the formulas of :mod:`explorer.costs`.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from explorer import allocator, speculative
from explorer.closed_loop import closed_loop
from explorer.costs.gemm import use_fast_path
from explorer.engine.constants import EMBED_BYTES
from explorer.engine.engine_step import engine_steps
from explorer.engine.hardware_columns import HardwareColumns, format_support_masks, reuse_enabled
from explorer.engine.layer_step import expected_max_load_factor, graph_padded
from explorer.engine.shape_columns import ShapeColumns, float_column
from explorer.hardware import HardwareTable
from explorer.model import SHAPE_COLUMNS
from explorer.open_loop import open_loop, percentiles
from explorer.precision import TENSOR_FORMATS
from explorer.runtime import RUNTIME_COLUMNS

#: the step pieces :mod:`explorer.engine` holds, re-exported where callers have always found them
__all__ = ["COMPONENTS", "DESIGN_COLUMNS", "DISAGG_COLUMNS", "MAX_BATCH_GRID", "PERCENTILE_COLUMNS", "REASONS",
           "engine_profile", "expected_max_load_factor", "format_support_masks", "graph_padded", "reuse_enabled",
           "simulate", "structural_checks"]

DEPLOY_COLUMNS = ("isl", "osl", "batch", "request_rate", "disagg", "ttft_extra_s", "prefill_tp", "prefill_pp",
                  "pool_prefill", "pool_decode", "latency_percentiles", "isl_cv", "osl_cv", "batch_wait_iters",
                  "batch_wait_ratio", "front_end", "num_requests", "tp", "pp", "ep", "dp", "b_w", "b_a", "b_kv", "compute_fmt",
                  "fmt_mask", "hw_idx", "moe_imbalance", "w_only", "poll_interval", "max_num_tokens", "allreduce_fusion") + RUNTIME_COLUMNS
DESIGN_COLUMNS = SHAPE_COLUMNS + DEPLOY_COLUMNS

#: Passes of the closed-loop fixed point (step costs -> batches -> step costs).  Measured on the
#: invariant sweep (20,000 random designs): 2 passes leave ~1 % oscillation on prefill-heavy rows
#: (OSL < 50, ISL > 2k), 3 passes leave at most 7e-4 (tests/test_invariants.py FIXED_POINT_TOLERANCE).
FIXED_POINT_ITERATIONS = 3
#: Extra passes for open-loop rows, whose batch follows the step time (b = X (OSL-1) TPOT(b)):
#: the iteration contracts by the batch-dependent share of the step, slow near compute-bound.
OPEN_LOOP_EXTRA_ITERATIONS = 3

REASONS = {
    0: "ok",
    1: "number format not supported by the hardware",
    2: "tensor parallelism does not divide the attention heads",
    3: "pipeline parallelism exceeds the layer count",
    4: "expert parallelism does not fit the experts or the stage's GPUs",
    5: "tensor parallelism does not divide the MLP width",
    6: "out of memory",
    7: "batch smaller than pipeline micro-batches x attention data-parallel groups",
    8: "offered request rate exceeds the engine's capacity (open loop: the queue grows without bound)",
    9: "the prefill pool's replica cannot serve the model (out of memory or an invalid split; raise prefill_tp/prefill_pp)",
}

COMPONENTS = ("gemm", "attention", "moe", "comm", "prefill", "overhead")
#: latency percentiles (explorer/open_loop.py): NaN for closed-loop rows unless ``latency_percentiles``
PERCENTILE_COLUMNS = tuple(f"{m}_{q}_s" for m in ("ttft", "tpot") for q in ("p50", "p90", "p99"))
#: result columns of disaggregated rows (explorer/disagg.py)
DISAGG_COLUMNS = ("prefill_replicas", "decode_replicas", "prefill_gpus_per_replica", "kv_transfer_s", "prefill_load")


#: Concurrencies tried where the best feasible one is picked (``--batch max``, validation's "max"):
#: 1 .. 16384 in steps of 2^(1/4).  Beyond the running-batch cap (KV cache, runtime maximum)
#: requests queue and throughput stays flat, so the smallest best one is taken.
MAX_BATCH_GRID = np.unique(np.round(2.0 ** (np.arange(0, 57) / 4.0))).astype(np.int64)


def _indivisible(a, b, whole: dict | None = None) -> np.ndarray:
    """``np.mod(a, b) != 0`` element-wise.  Where every ``a`` and ``b`` is a whole number (int64's
    range) and every ``b`` is positive, taken in int64: float ``mod`` of whole numbers is exact, so
    the mask is the same, and the integer remainder costs a fifth of numpy's float ``mod`` (~15 ns an
    element, the costliest op of a sweep's chunk); anything else (fractions, zeros, NaN) takes
    ``np.mod`` itself.  ``whole``: a dict the caller keeps over several calls, so that a column
    taken again (``tp`` by four checks) is cast and tested once (see :func:`_as_whole`)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind == "f" and b.dtype.kind == "f" and a.size > 64:
        ai = _as_whole(a, whole)
        bi = _as_whole(b, whole) if ai is not None else None
        if ai is not None and bi is not None and _positive(b, bi, whole):
            return np.mod(ai, bi) != 0
    return np.mod(a, b) != 0


def _as_whole(x: np.ndarray, whole: dict | None) -> np.ndarray | None:
    """``x`` cast to int64 where that keeps every value (``(xi == x).all()``), else None; kept in
    ``whole`` by the array's id (with the array: no other takes its id while the dict lives)."""
    got = whole.get(id(x)) if whole is not None else None
    if got is not None:
        return got[1]
    with np.errstate(invalid="ignore"):  # NaN / inf / out of range: not equal after the cast, so np.mod
        xi = x.astype(np.int64)
    got = (x, xi if (xi == x).all() else None, None)
    if whole is not None:
        whole[id(x)] = got
    return got[1]


def _positive(x: np.ndarray, xi: np.ndarray, whole: dict | None) -> bool:
    """``(xi > 0).all()`` for :func:`_as_whole`'s ``xi`` of ``x``, kept beside it in ``whole``."""
    got = whole.get(id(x)) if whole is not None else None
    if got is not None and got[2] is not None:
        return got[2]
    pos = bool((xi > 0).all())
    if whole is not None:
        whole[id(x)] = (x, xi, pos)
    return pos


def structural_checks(F, t, E, e, dp, p, L, nq, nkv, mla, fmt_mask, support_mask) -> list[tuple[int, np.ndarray]]:
    """The design's structural feasibility rules, as ``(reason code, violated)`` in the order the
    simulator applies them (later entries take precedence): 5 ``ffn`` not splitting over ``tp``; 4
    ``ep`` not dividing the experts or ``tp*dp`` (or ``ep`` without experts); 3 more pipeline stages
    than layers; 2 query / KV heads not splitting over ``tp`` (MLA's latent KV needs no split); 1 a
    tensor format the hardware lacks.  The one definition: :func:`simulate` and the grid's screen
    (``explorer.space``, before any simulation) both apply it."""
    whole: dict = {}  # (each column's int64 cast and its tests once: see _indivisible)
    return [
        (5, _indivisible(F, t, whole)),
        (4, (E == 0) & (e > 1) | (E > 0) & (_indivisible(E, e, whole) | _indivisible(t * dp, e, whole))),
        (3, p > L),
        (2, _indivisible(nq, t, whole) | (~mla & _indivisible(nkv, t, whole) & _indivisible(t, nkv, whole))),
        (1, (fmt_mask & ~support_mask) != 0),
    ]



def _prepare(c: Mapping[str, np.ndarray], table: HardwareTable) -> dict:
    """Per-row shape, hardware columns, memory budget and running-request cap of one engine (one
    hardware kind per call): everything :func:`simulate` needs before the operating point."""
    idx = np.asarray(c["hw_idx"], dtype=np.int64)
    s = ShapeColumns(c)
    cfmt = np.asarray(c["compute_fmt"], dtype=np.int64)
    # attention runs in the activation's tensor format, at most fp8 (no FP4 attention kernels)
    # (FP8 attention kernels exist for GQA -- FlashAttention-3, TensorRT-LLM FP8 FMHA; MLA kernels
    # such as FlashMLA compute in bf16 whatever the cache format)
    a_idx = np.where((s.b_a >= 2.0) | s.mla, 0, TENSOR_FORMATS.index("fp8"))
    hw = HardwareColumns(table, idx, cfmt, a_idx)
    hw.w_only = s.w_only
    hw.eta_c = hw.eta_c * s.rt_compute  # the runtime's served GEMMs vs the kernel benchmarks (fitted residual)
    # ... and its memory-bound kernels (decode GEMMs' weight streaming, expert weights, KV and decode
    # attention reads) vs the kind's fitted memory efficiency: a fitted residual per runtime and model
    # family (explorer/runtime.py RuntimeFit.memory / memory_moe; 1 = as the kind).  One factor for every
    # memory-bound term of a row -- which kernel a runtime streams slower is not resolved from curves
    hw.eta_m = hw.eta_m * s.rt_memory
    if (s.rt_release != 1.0).any():
        # an older software release (explorer/runtime.py Release): its memory-bound kernels -- decode
        # GEMMs, expert-weight and KV streaming, decode attention -- reach `rt_release` of the newest
        # release's memory efficiency (fitted per release, calibrate.py).  Compute-bound kernels
        # (prefill) keep the kind's: with the speed on both, MI300X/MI325X SGLang 0.5.9's 8k-prompt
        # TTFTs went +96 % held out while its decode fitted -- the builds differ in decode kernels
        # (fused MoE and MLA decode at small batch), not in prefill GEMMs.  One factor for every
        # memory-bound kernel: what a release changed is not resolved kernel by kernel.  Capped at 1.
        hw.eta_m = np.minimum(hw.eta_m * s.rt_release, 1.0)
    if (s.rt_latency != 1.0).any():
        # ... and its fixed per-step costs (Release.latency, fitted per release): kernel launches, the
        # engine's host step and per-sequence work, the serving front end's.  SGLang 0.5.9 on MI300X and
        # MI325X ran each DeepSeek-R1 step ~9.5 ms slower than 0.5.12 from 4 to 64 clients -- a constant
        # per step, not a kernel speed.  One factor for all of them: which part a build changed is not
        # resolved from served curves
        lat = s.rt_latency
        hw.launch = hw.launch * lat
        s.rt_step, s.rt_per_seq = s.rt_step * lat, s.rt_per_seq * lat
        s.rt_serve_step, s.rt_serve_seq = s.rt_serve_step * lat, s.rt_serve_seq * lat
    # Missing formats: compute with the bf16 peak so figures stay finite; the row is infeasible.
    hw.peak = np.where(np.isfinite(hw.peak), hw.peak, hw.bf16_peak)
    hw.peak_attn = np.where(np.isfinite(hw.peak_attn), hw.peak_attn, hw.bf16_peak)
    p = s.p
    groups = p * s.dp  # engines (attention groups x micro-batches) sharing the replica's clients
    clients = s.B / groups

    # --- memory per GPU (worst stage): weights, KV cache of the running batch, workspace
    cnt = s.counts
    stage_frac = s.Ls / s.L
    emb = np.where(p > 1, np.maximum(cnt["embedding_in"], cnt["embedding_out"]),
                   cnt["embedding_in"] + cnt["embedding_out"])
    weights = (s.b_w * cnt["layer_dense"] * stage_frac / s.t
               + s.b_w * cnt["expert"] * stage_frac / (s.t * s.dp)
               + EMBED_BYTES * emb / s.t)
    frac_sl = s.n_sl / s.L

    def kv_tokens(ctx):
        return (1 - frac_sl) * ctx + frac_sl * np.where(s.W > 0, np.minimum(ctx, s.W), ctx)

    kv_per_seq = s.Ls * s.kv_loc * s.b_kv * kv_tokens(s.isl + s.osl)  # a finished sequence's cache
    # what admission reserves per running sequence: the whole ISL+OSL (TensorRT-LLM's no-evict
    # scheduler) or, allocated as tokens come, ISL + OSL/2 on average (vLLM, SGLang)
    kv_held = s.Ls * s.kv_loc * s.b_kv * kv_tokens(s.isl + np.where(s.rt_reserve_full, s.osl, s.osl / 2.0))
    if s.draft is not None and s.spec_k is not None:  # speculative decoding: draft weights and KV, K scratch tokens
        weights = weights + speculative.draft_weight_bytes(s.draft, s.spec_kind, s.spec_mtp, s.spec_k, EMBED_BYTES)
        kv_per_seq = kv_per_seq + speculative.draft_kv_bytes(s, s.draft, s.spec_kind, s.spec_mtp, s.spec_k,
                                                             s.isl + s.osl)
        kv_held = kv_held + speculative.draft_kv_bytes(s, s.draft, s.spec_kind, s.spec_mtp, s.spec_k, s.isl
                                                       + np.where(s.rt_reserve_full, s.osl, s.osl / 2.0))
    F_loc = np.maximum(s.g * s.F / s.t, s.g * np.maximum(s.Es * s.Fs, s.Fe) / s.t)
    tokens_at_once = np.minimum(np.maximum(clients * (1.0 + s.isl / s.osl), s.isl), s.rt_max_tokens + clients)
    workspace = tokens_at_once * (8.0 * s.H + 2.0 * F_loc) + (np.minimum(clients, s.rt_max_batch) + 1.0) * 4.0 * s.V / s.t
    capacity = hw.hbm_bytes * hw.usable
    free = capacity - (weights + workspace + hw.reserved)
    b_cap_mem = np.floor(np.maximum(free, 0.0) / np.maximum(kv_held, 1e-30) / p)  # per micro-batch engine
    # a design whose memory holds no sequence is out of memory (reason 6) but is still scored, as if
    # one sequence fit: its figures say what it would serve (not a TTFT of 1e14 ms from a zero cap)
    b_cap = np.minimum(np.maximum(b_cap_mem, 1.0), s.rt_max_batch / p)

    bw_p, lat_p = hw.out_bw, hw.out_lat  # stages may sit in other NVLink domains: assume scale-out
    inside = s.t * s.dp * s.p <= hw.domain
    link_pp = (np.where(inside, hw.up_bw, bw_p), np.where(inside, hw.up_lat, lat_p))
    return {"s": s, "hw": hw, "p": p, "groups": groups, "clients": clients, "weights": weights,
            "kv_per_seq": kv_per_seq, "kv_held": kv_held, "workspace": workspace, "capacity": capacity,
            "b_cap_mem": b_cap_mem, "b_cap": b_cap, "link_pp": link_pp, "cnt": cnt}


def simulate(c: Mapping[str, np.ndarray], table: HardwareTable, detail: bool = True) -> dict[str, np.ndarray]:
    """Score every row of a design table.  Never raises for infeasible rows: they come back with
    ``feasible=False`` and ``reason_code`` (see :data:`REASONS`); their performance figures are still
    computed (finite) so searches can grade how far they are from feasible -- a row out of memory
    with no room for even one sequence is scored as if one fit.

    Each row is served by its runtime (``rt_*`` columns) under ``batch`` closed-loop clients; the
    decode batch is solved by one fixed-point iteration of :func:`explorer.closed_loop.closed_loop`
    (step costs at ``min(C, cap)``, then again at the batch Little's law gives).

    ``detail=False`` leaves the breakdown columns ``t_*_s`` NaN (grids re-score the rows they keep);
    every other figure is identical.
    """
    if "disagg" in c and np.any(np.asarray(c["disagg"]) == 1):  # disaggregated rows: explorer/disagg.py
        from explorer.disagg import serve

        return serve(c, table, detail, simulate)
    if "num_requests" in c and (np.asarray(c["num_requests"]) > 0).any():  # finite offline runs: explorer/offline_run.py
        from explorer.offline_run import finite_run

        return finite_run(c, table, detail, simulate)
    idx = np.asarray(c["hw_idx"], dtype=np.int64)
    allocator.keep_freed_memory()  # temporaries reuse heap pages instead of faulting in fresh ones (once)
    use_fast_path(idx.size)  # a large table loads the compiled GEMM kernel for its per-kind calls
    if idx.size and (idx != idx.flat[0]).any():  # one kind per call: kernel constants are the kind's scalars
        return _by_hardware(c, table, detail, idx)
    if idx.size > CHUNK_ROWS:  # bounded temporaries: large tables run in cache-friendly chunks
        return _chunked(c, table, detail, idx.size)
    env = _prepare(c, table)
    s, hw, p, groups, clients = env["s"], env["hw"], env["p"], env["groups"], env["clients"]
    weights, kv_per_seq, kv_held, workspace = env["weights"], env["kv_per_seq"], env["kv_held"], env["workspace"]
    capacity, b_cap_mem, b_cap, link_pp, cnt = env["capacity"], env["b_cap_mem"], env["b_cap"], env["link_pp"], env["cnt"]

    # --- closed loop: one fixed-point iteration on the decode batch
    # TPOT = T_dec(b_step) + b_avg * tau / (OSL - 1): each decode step carries b_avg/(OSL-1)
    # prompts' cost (the engine's time shares: N_dec*T_dec + X*tau = 1 with X = b_avg/((OSL-1)*TPOT))
    b_step = np.maximum(np.minimum(clients, np.maximum(b_cap, 1.0)), 1e-9)
    n_pf = np.maximum(1.0, b_step / np.maximum(s.osl - 1.0, 1.0))  # first guess: X*TPOT = b/(OSL-1)
    f_chunk: np.ndarray | None = None  # share of a rank's steps that carry a prompt chunk (from the previous pass)
    is_open = s.rate > 0  # open-loop rows: Poisson arrivals (explorer/open_loop.py)
    any_open = bool(is_open.any())
    lam = s.rate / groups  # arrivals per engine
    passes = FIXED_POINT_ITERATIONS + (OPEN_LOOP_EXTRA_ITERATIONS if any_open else 0)
    b_cap_floor = np.maximum(b_cap, 1e-9)  # (every pass's, the same values: taken once)
    prefill_only = bool((s.osl <= 1).any())  # rows without decode steps (see n_pf below)
    if any_open:  # open rows climb from a lone request; secant steps on b = F(b) (F nearly linear)
        b_step = np.where(is_open, 1.0, b_step)
        n_pf = np.where(is_open, 1.0, n_pf)
        b_prev = f_prev = None
    for i in range(passes):  # fixed-point iterations on the batches the steps are costed at
        b_in, n_in, f_in = b_step, n_pf, f_chunk  # this pass's inputs
        eng = engine_steps(s, hw, b_step, n_pf, link_pp, f_chunk)
        op = closed_loop(clients, b_cap_floor, s.osl, eng["T_dec"], eng["tau"], eng["ttft_service"],
                         eng["rate_max"], eng["T_full"])
        if any_open:
            opo = open_loop(lam, b_cap_floor, s.osl, eng["T_dec"], eng["tau"], eng["ttft_service"],
                            eng["prompt_service_s"], eng["rate_max"], eng["T_full"])
            op = {k: np.where(is_open, opo[k], v) for k, v in op.items()}
            op["overloaded"] = is_open & opo["overloaded"]
            op["prompt_load"] = np.where(is_open, opo["prompt_load"],
                                         np.clip(op["request_rate"] * eng["prompt_service_s"], 0.0, 1.0 - 1e-9))
            f_now = op["step_batch"]
            b_next = f_now
            if b_prev is not None:
                slope = np.clip((f_now - f_prev) / np.where(b_step != b_prev, b_step - b_prev, 1.0), 0.0, 0.95)
                b_next = np.where(is_open, b_step + (f_now - b_step) / (1.0 - slope), f_now)
            b_prev, f_prev = b_step, f_now
            b_step = np.maximum(np.minimum(np.where(is_open, b_next, f_now), np.maximum(b_cap, 1.0) + 1.0), 1e-9)
        else:
            b_step = np.maximum(op["step_batch"], 1e-9)
        # prompts arriving per output-token time (engine_steps turns it into per step: max(1, .) there);
        # a row without decode steps (OSL <= 1, prefill only) has no output-token time -- its closed
        # loop reports the idle decode step T_dec as "tpot" -- and its steps are the prompt steps,
        # T_full long: counted per T_dec, the mixed steps' prompt-rate cap Q/ISL/T_full shrank by
        # T_dec/T_full every pass and the rate depended on the pass count (2x HBM bandwidth read 3 %
        # *lower* throughput on a gh200 row, tests/test_invariants.py)
        step_s = np.where(s.osl > 1, op["tpot_s"], eng["T_full"]) if prefill_only else op["tpot_s"]
        n_pf = op["request_rate"] * step_s
        f_chunk = np.clip(n_pf * s.isl / eng["Q"], 0.0, 1.0)  # (n_pf: the same product)
        if any_open and FIXED_POINT_ITERATIONS - 1 <= i < passes - 1:
            # closed rows have had their passes: the open rows' extra ones recost them at the same
            # batches (the same figures), and the last one hands on what their last pass gave -- a
            # closed row scores the same whether or not open rows share its table (before: up to 1 %
            # apart on 0.3 % of rows, from the extra passes)
            assert f_in is not None and f_chunk is not None  # set by every pass before this one
            b_step = np.where(is_open, b_step, b_in)
            n_pf = np.where(is_open, n_pf, n_in)
            f_chunk = np.where(is_open, f_chunk, f_in)
    tpot = op["tpot_s"]
    prefill_share = tpot - eng["T_dec"]
    b_run = np.maximum(op["decode_batch"], 0.0)
    pct = {k: np.full(len(s.H), np.nan) for k in PERCENTILE_COLUMNS}
    want = is_open | ((float_column(c, "latency_percentiles") > 0) if "latency_percentiles" in c else False)
    if np.any(want):  # latency percentiles (open-loop rows, or asked for): the batch slope from one more step
        if not any_open:  # closed loop: its prompt server's load, as the open loop computes it
            op = dict(op, prompt_load=np.clip(op["request_rate"] * eng["prompt_service_s"], 0.0, 1.0 - 1e-9))
        b_hi = b_step + np.maximum(1.0, 2.5 * np.sqrt(2.0 / 3.0 * b_run))
        T_hi = engine_steps(s, hw, b_hi, n_pf, link_pp, f_chunk, site=None)["T_dec"]  # eng's GEMM figures stay valid
        slope = (T_hi - eng["T_dec"]) / (b_hi - b_step)
        busy = 1.0 - np.exp(-b_run)  # a step of other requests is in flight at an arrival
        # percentiles are element-wise: computed on the rows that want them only (their Poisson
        # quantile is an iterative inverse, the costliest step of a validation run's open rows)
        sel = np.flatnonzero(want)
        w = (lambda x: x[sel] if np.ndim(x) else x) if sel.size < len(s.H) else (lambda x: x)  # noqa: E731
        got = percentiles({k: w(v) for k, v in op.items()}, w(s.osl), w(eng["T_dec"]), w(slope), w(eng["tau"]),
                          w(eng["ttft_service"]), w(eng["prompt_service_s"]), w(busy), w(eng["T_pre_step"]),
                          w(f_chunk), step_tokens=1.0 if s.spec_k is None else w(s.spec_tokens),
                          mixed=w(s.rt_mixed), isl_per_budget=w(eng["isl_per_budget"]),
                          isl_cv=w(float_column(c, "isl_cv")) if "isl_cv" in c else 0.0,
                          osl_cv=w(float_column(c, "osl_cv")) if "osl_cv" in c else 0.0)
        for k in pct:
            pct[k][sel] = got[k]

    parts = eng["parts"]
    if detail:
        bd = {k: p * parts[k] for k in ("gemm", "attention", "moe", "comm", "overhead")}
        bd["comm"] = bd["comm"] + eng["p2p"]
        bd["overhead"] = bd["overhead"] + eng["host"]
        bd["prefill"] = prefill_share
    else:
        bd = {k: np.full(len(s.H), np.nan) for k in COMPONENTS}

    # every admitted request holds its KV, prefilling or decoding (open loop: the running batch)
    kv = np.where(is_open, np.minimum(b_run + 1.0, b_cap), np.minimum(clients, b_cap)) * p * kv_held
    needed = weights + kv + workspace + hw.reserved

    # --- feasibility, first failing rule wins
    reason = np.zeros(len(s.H), dtype=np.int64)
    fmt_mask = np.asarray(c["fmt_mask"], dtype=np.int64)
    checks = [
        (8, op["overloaded"] if any_open else np.zeros(len(s.H), dtype=bool)),
        (7, s.B < s.p * s.dp),
        (6, (needed > capacity) | (b_cap_mem < 1.0)),
        *structural_checks(s.F, s.t, s.E, s.e, s.dp, s.p, s.L, s.nq, s.nkv, s.mla, fmt_mask, hw.support_mask),
    ]
    for code, bad in checks:  # later entries take precedence: structural reasons before OOM before overload
        reason = np.where(bad, code, reason)
    feasible = reason == 0

    gpus = s.t * s.dp * s.p
    res = {
        "feasible": feasible,
        "reason_code": reason,
        "tokens_per_s_per_user": 1.0 / tpot,
        "tokens_per_s_per_gpu": op["output_tokens_per_s"] * groups / gpus,
        "ttft_s": op["ttft_s"],
        "tpot_s": tpot,
        "gpus": gpus,
        "decode_batch": b_run * groups,
        "step_batch": op["step_batch"] * groups,
        "queued_requests": op["queued"] * groups,
        "memory_bytes_per_gpu": needed,
        "memory_capacity_bytes": capacity,
        "weights_bytes_per_gpu": weights,
        "kv_bytes_per_gpu": kv,
        "kv_bytes_per_seq_per_gpu": kv_per_seq,
        "workspace_bytes_per_gpu": workspace,
        "params_total": cnt["total"],
        "params_active": cnt["active"],
        "tokens_per_step": b_run * (1.0 + s.isl / s.osl),
        # engine seconds per prompt when prompts run back to back (a burst of arrivals)
        "prefill_s_per_request": eng["prompt_s"],
        "clients_per_engine": clients,
        "request_rate": op["request_rate"] * groups,  # requests/s per replica (given, or the closed loop's)
        # disaggregated serving (explorer/disagg.py fills these; NaN for aggregated rows)
        **{k: np.full(len(s.H), np.nan) for k in DISAGG_COLUMNS},
        **pct,
    }
    if s.spec_k is not None:  # speculative decoding: 1+K tokens per sequence through each step's GEMMs,
        # E output tokens per step, so a step's share of prompt tokens is E times a token's
        res["tokens_per_step"] = b_run * ((1.0 + s.spec_k) + s.spec_tokens * (s.isl / s.osl))
        res["draft_tokens"], res["accepted_tokens_per_step"] = s.spec_k, s.spec_tokens
    for k in COMPONENTS:
        res[f"t_{k}_s"] = bd[k]
    comp, gemms = eng["comp"], eng["gemms"]
    # bound of the decode work: compute if compute time exceeds memory time
    res["gemm_bound_compute"] = comp["gemm_c"] > comp["gemm_m"]
    res["moe_bound_compute"] = comp["moe_c"] > comp["moe_m"]
    res["attention_bound_compute"] = comp["attn_c"] > comp["attn_m"]
    res["mlp_up_tile_eff"] = gemms["up"].tile_eff
    res["mlp_up_wave_eff"] = gemms["up"].wave_eff
    res["qkv_tile_eff"] = gemms["gemm"].tile_eff
    return res


# Tables with several hardware kinds are always scored one kind at a time (see simulate): the
# kernel-level constants of explorer/costs -- GEMM latency, collective protocols -- are then plain
# numbers of that kind, and the GEMM tile scan is cheaper when every row shares one tile list.


#: Rows scored per call inside :func:`simulate`; larger tables are split (measured on the 2-core
#: machine: one 10^6-row call took 15 s, 20 chunks of 50,000 rows 4 s -- the (GEMMs x rows) temporaries
#: otherwise spill out of cache).  12,500 since 2026-12-02: the sweep-like table of
#: benchmarks/bench_simulator.py (200,000 rows, best of 3, one process) ran 356,000 / 370,000 /
#: 398,000 / 380,000 / 330,000 points/s at 50,000 / 25,000 / 12,500 / 6,250 / 3,125 rows a chunk --
#: 100 KB float64 temporaries stay in the core's L2, below that the per-call Python work dominates.
#: Rows are independent: results are identical whatever the chunk (tests/test_speed_paths.py).
CHUNK_ROWS = 12_500


def _chunked(c: Mapping[str, np.ndarray], table: HardwareTable, detail: bool, n: int):
    parts = [simulate({k: (np.asarray(v)[a:a + CHUNK_ROWS] if np.ndim(v) else v) for k, v in c.items()}, table, detail)
             for a in range(0, n, CHUNK_ROWS)]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _pick(v, sel: np.ndarray, back: np.ndarray):
    """Rows ``sel`` of a design column; a broadcast constant (build_design's scalars) stays a view.
    ``back``: the inverse of ``sel`` (a permutation).  A 1-D column is scattered, ``out[back] = v``,
    not gathered: the same elements (``out[j] = v[sel[j]]``) in a fresh array of ``v``'s dtype, with
    the column read in its order and written in one run per hardware kind, where ``np.take`` reads
    each kind's rows across the whole column (23 ms against 18 for the random mix's 100,000 rows x
    76 columns)."""
    if not np.ndim(v):
        return v
    a = np.asarray(v)
    if a.ndim == 1 and a.strides[0] == 0 and len(a):
        return np.broadcast_to(a[:1], (len(sel),))
    if a.ndim == 1 and len(a) == len(back):
        out = np.empty(len(a), dtype=a.dtype)
        out[back] = a
        return out
    return np.take(a, sel, axis=0)


def _by_hardware(c: Mapping[str, np.ndarray], table: HardwareTable, detail: bool, idx: np.ndarray):
    """Score a table of several hardware kinds one kind at a time.  Every column is put once into
    hardware order (each kind's rows are then a contiguous slice: one pass over a column instead
    of one per kind) and the results are put back into the table's order once."""
    n = idx.size
    order = np.argsort(idx, kind="stable")
    bounds = [0, *(np.flatnonzero(np.diff(idx[order])) + 1).tolist(), n]
    back = np.empty(n, dtype=np.int64)
    back[order] = np.arange(n)
    ordered = {k: _pick(v, order, back) for k, v in c.items()}
    sorted_out: dict[str, np.ndarray] = {}
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        part = simulate({k: (v[a:b] if np.ndim(v) else v) for k, v in ordered.items()}, table, detail)
        for k, v in part.items():
            if k not in sorted_out:
                sorted_out[k] = np.empty(n, dtype=v.dtype)
            sorted_out[k][a:b] = v
    return {k: np.take(v, back) for k, v in sorted_out.items()}


def engine_profile(c: Mapping[str, np.ndarray], table: HardwareTable, batches,
                   chunk_points: int = 10) -> dict[str, np.ndarray]:
    """Step times of the first row's engine at each decode batch in ``batches`` -- the inputs of the
    discrete-event oracle (:mod:`explorer.events`), computed by the same :func:`~explorer.engine.engine_step.engine_steps` as
    :func:`simulate`, without the attention-DP straggler factor (the oracle runs one engine).

    Returns ``batch``, ``t_decode_s`` (pure decode step), ``budget_tokens`` (prompt tokens a step
    may carry), ``chunk_tokens`` (a grid of chunk sizes from one prompt up to the largest budget,
    ``chunk_points`` of them) and ``chunk_extra_s`` (batch x chunk size: the seconds a chunk of that
    many prompt tokens adds to a mixed decode step, or a separate prefill step's whole time -- a
    chunk's cost is not linear in its tokens: a small chunk rides a memory-bound step nearly free),
    ``chunk_s_per_token`` (at the full budget, the old linear figure), and the row's scalars
    ``b_cap``, ``isl``, ``osl``, ``request_s``, ``mixed``, and the context batching wait
    (``batch_wait_iters``, ``batch_wait_ratio``, ``max_tokens``: explorer/batch_wait.py).
    """
    b = np.asarray(batches, dtype=np.float64)
    row = {k: (np.repeat(np.asarray(v)[:1], len(b)) if np.ndim(v) else v) for k, v in c.items()}
    env = _prepare(row, table)
    s, hw = env["s"], env["hw"]
    budget = np.maximum(np.where(s.rt_mixed, s.rt_max_tokens - b, s.rt_max_tokens), 1.0)
    bb = np.maximum(b, 1e-9)
    eng = engine_steps(s, hw, bb, budget / s.isl + 1.0, env["link_pp"], None, site=None)
    isl = float(s.isl[0])
    q_lo = min(isl, float(budget.max()))
    q_grid = np.unique(np.round(np.geomspace(q_lo, max(float(budget.max()), q_lo), max(chunk_points, 2))))
    extra = np.empty((len(b), len(q_grid)))
    for j, q in enumerate(q_grid):  # chunks of q tokens (capped by each batch's budget)
        e = engine_steps(s, hw, bb, np.full(len(b), q / isl), env["link_pp"], None, site=None)
        Q = e["Q"]
        step_extra = np.where(s.rt_mixed, e["T_pre_step"] - e["T_dec"], e["T_pre_step"])
        extra[:, j] = np.where(Q >= q, step_extra, step_extra * q / np.maximum(Q, 1.0))  # past the budget: linear
    return {"batch": b, "t_decode_s": eng["T_dec"], "chunk_s_per_token": eng["tau"] / s.isl,
            "budget_tokens": eng["Q"], "chunk_tokens": q_grid, "chunk_extra_s": extra,
            "b_cap": float(env["b_cap"][0]), "isl": isl,
            "osl": float(s.osl[0]), "request_s": float(s.rt_request[0]), "mixed": bool(s.rt_mixed[0]),
            "batch_wait_iters": float(s.bw_iters[0]), "batch_wait_ratio": float(s.bw_ratio[0]),
            "max_tokens": float(s.rt_max_tokens[0])}

