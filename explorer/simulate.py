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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from explorer import allocator, batch_wait, speculative
from explorer.closed_loop import closed_loop
from explorer.costs.attention import decode_attention, mean_context_sliding, prefill_attention_flops
from explorer.costs.comm import collective_s, custom_allreduce_s, ep_alltoall_s, p2p_s, protocols_of
from explorer.costs.gemm import (
    GemmCost,
    gemm_cost,
    gemm_cost_stacked,
    use_fast_path,
)
from explorer.hardware import HardwareTable
from explorer.model import (
    SHAPE_COLUMNS,
    attention_params_per_layer,
    kv_elements_per_token_layer,
    param_counts,
)
from explorer.open_loop import open_loop, percentiles
from explorer.precision import TENSOR_FORMATS
from explorer.runtime import RUNTIME_COLUMNS

DEPLOY_COLUMNS = ("isl", "osl", "batch", "request_rate", "disagg", "ttft_extra_s", "prefill_tp", "prefill_pp",
                  "pool_prefill", "pool_decode", "latency_percentiles", "isl_cv", "osl_cv", "batch_wait_iters",
                  "batch_wait_ratio", "front_end", "num_requests", "tp", "pp", "ep", "dp", "b_w", "b_a", "b_kv", "compute_fmt",
                  "fmt_mask", "hw_idx", "moe_imbalance", "w_only") + RUNTIME_COLUMNS
DESIGN_COLUMNS = SHAPE_COLUMNS + DEPLOY_COLUMNS

#: Bytes per element of tensor-parallel all-reduces (bf16 even for FP8/FP4 models, as
#: TensorRT-LLM's default all-reduce runs).
ALLREDUCE_BYTES = 2.0
#: the largest tensor-parallel group a runtime's custom all-reduce serves (vLLM custom_all_reduce.py:
#: world sizes 2, 4, 6, 8; beyond, NCCL)
CUSTOM_ALLREDUCE_MAX_GPUS = 8
#: Bytes per element of the LM head and embedding tables (kept bf16, see module docstring).
EMBED_BYTES = 2.0
#: Bytes per element of MoE combine (expert outputs return in bf16; dispatch uses b_a).
COMBINE_BYTES = 2.0
#: Small kernels per layer besides GEMMs, attention and collectives: 2 norms, rotary, activation
#: (assumption: residual adds and quantization fused).  Each costs ``kernel_launch_s``.
ELEMENTWISE_KERNELS_PER_LAYER = 4.0
#: Extra small kernels per MoE layer: top-k routing, permute, unpermute (assumption).
MOE_EXTRA_KERNELS = 3.0

#: Passes of the closed-loop fixed point (step costs -> batches -> step costs).  Measured on the
#: invariant sweep (20,000 random designs): 2 passes leave ~1 % oscillation on prefill-heavy rows
#: (OSL < 50, ISL > 2k), 3 passes leave at most 7e-4 (tests/test_invariants.py FIXED_POINT_TOLERANCE).
FIXED_POINT_ITERATIONS = 3
#: Extra passes for open-loop rows, whose batch follows the step time (b = X (OSL-1) TPOT(b)):
#: the iteration contracts by the batch-dependent share of the step, slow near compute-bound.
OPEN_LOOP_EXTRA_ITERATIONS = 3

#: Token rows of the smallest tile a grouped expert GEMM may use: MoE kernels size their M tile to
#: the tokens per expert (vLLM/SGLang fused_moe tuned configs use BLOCK_SIZE_M 16 for small
#: groups; TensorRT-LLM's MoE GEMMs swap A and B so tokens sit on the MMA's N side).
MOE_SMALL_TILE_M = 16.0

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


def reuse_enabled() -> bool:
    """Whether repeated sub-problems are costed once (``EXPLORER_REUSE`` not ``0``): GEMM costs carried
    between the closed-loop passes.  Results are the same either way (tests/test_speed_paths.py)."""
    import os

    return os.environ.get("EXPLORER_REUSE", "1") != "0"


def format_support_masks(kinds: Sequence) -> np.ndarray:
    """Per hardware kind, the bit mask (bit i = ``TENSOR_FORMATS[i]``) of the tensor formats it runs."""
    return np.array([sum(1 << i for i, f in enumerate(TENSOR_FORMATS) if h.supports(f)) for h in kinds],
                    dtype=np.int64)


def structural_checks(F, t, E, e, dp, p, L, nq, nkv, mla, fmt_mask, support_mask) -> list[tuple[int, np.ndarray]]:
    """The design's structural feasibility rules, as ``(reason code, violated)`` in the order the
    simulator applies them (later entries take precedence): 5 ``ffn`` not splitting over ``tp``; 4
    ``ep`` not dividing the experts or ``tp*dp`` (or ``ep`` without experts); 3 more pipeline stages
    than layers; 2 query / KV heads not splitting over ``tp`` (MLA's latent KV needs no split); 1 a
    tensor format the hardware lacks.  The one definition: :func:`simulate` and the grid's screen
    (``explorer.space``, before any simulation) both apply it."""
    return [
        (5, np.mod(F, t) != 0),
        (4, (E == 0) & (e > 1) | (E > 0) & ((np.mod(E, e) != 0) | (np.mod(t * dp, e) != 0))),
        (3, p > L),
        (2, (np.mod(nq, t) != 0) | (~mla & (np.mod(nkv, t) != 0) & (np.mod(t, nkv) != 0))),
        (1, (fmt_mask & ~support_mask) != 0),
    ]


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
        self.eta_dequant = g("eta_dequant")
        self.moe_group = g("moe_group_s")
        self.w_only = np.zeros(len(idx), dtype=bool)  # set by simulate() from the design
        self.kind = kinds[int(idx[0])] if len(idx) else kinds[0]  # one kind per call (see simulate)
        self.one_kind = bool(len(idx)) and bool((idx == idx[0]).all())  # one tile list: the compiled GEMMs
        self.per_seq = g("per_sequence_s")
        peaks = table.peak_matrix()  # [kinds, formats]
        self.peak = peaks[idx, compute_fmt.astype(np.int64)]
        self.peak_attn = peaks[idx, act_fmt_cap.astype(np.int64)]
        self.bf16_peak = np.nanmax(peaks[:, :2], axis=1)[idx]
        n_t = max(len(h.gemm_tiles) for h in kinds)
        tm = np.array([[h.gemm_tiles[min(j, len(h.gemm_tiles) - 1)][0] for j in range(n_t)] for h in kinds], float)
        tn = np.array([[h.gemm_tiles[min(j, len(h.gemm_tiles) - 1)][1] for j in range(n_t)] for h in kinds], float)
        self.tiles_m, self.tiles_n = tm[idx], tn[idx]
        # grouped expert GEMMs may also take token tiles of MOE_SMALL_TILE_M rows (small groups)
        small = np.full((len(kinds), 1), MOE_SMALL_TILE_M)
        self.moe_tiles_m = np.concatenate([tm, small], axis=1)[idx]
        self.moe_tiles_n = np.concatenate([tn, tn.min(axis=1, keepdims=True)], axis=1)[idx]
        self.support_mask = format_support_masks(kinds)[idx]
        #: (call site, grouped) -> inputs and cost planes of the last run_gemms call from there
        self.memo: dict[tuple, dict] = {}

    def run_gemms(self, requests: list[tuple], site: str | None = None) -> list[GemmCost]:
        """Cost many GEMMs in one vectorized call: each request is
        ``(M, N, K, b_a, b_w, b_out, groups, peak or None, moe)`` over the design points; they are
        stacked on a leading axis (requests whose rows are all empty are skipped and cost zero).

        ``site`` names the call site (e.g. the engine's step plans): a later call from the same site
        reuses, element by element, the costs of the previous call's GEMM at the same stacked
        position and point whose inputs are all equal (the closed-loop passes re-cost GEMMs whose
        padded batch did not move).  A GEMM's cost is a function of those inputs and this object's
        hardware columns only, so the reused figures are the ones a recomputation gives
        (``EXPLORER_REUSE=0`` turns it off).  The costs a call from a site returns are updated in
        place by that site's next call: use them before it (or call with ``site=None``)."""
        n = len(self.sms)
        out: list[GemmCost | None] = [None] * len(requests)
        live = [i for i, r in enumerate(requests)
                if ((np.asarray(r[0]) > 0).any() if not isinstance(r[6], np.ndarray) and r[6] > 0
                    else ((np.asarray(r[0]) > 0) & (np.asarray(r[6]) > 0)).any())]
        zero = np.zeros(n)
        for i in set(range(len(requests))) - set(live):
            out[i] = GemmCost(zero, zero, zero, zero, zero, zero + 1.0, zero + 1.0, zero, zero)
        memo = self.memo if site is not None and reuse_enabled() else None
        for moe in (False, True):
            sel = [i for i in live if bool(requests[i][8]) == moe]
            if not sel:
                continue
            slot = memo.setdefault((site, moe), {}) if memo is not None else None
            cols = slot.pop("spare", None) if slot is not None else None  # the buffer of two calls ago
            if cols is None or cols.shape != (8, len(sel), n):
                cols = np.empty((8, len(sel), n))  # M N K b_a b_w b_out groups peak
            for row, i in enumerate(sel):
                r = requests[i]
                for j in range(7):
                    cols[j, row] = r[j]
                cols[7, row] = self.peak if r[7] is None else r[7]
            # the grouped-GEMM factor slows expert *compute* only: expert weights stream from HBM at
            # the same achievable bandwidth as any other weight (it used to divide reads too, which
            # tripled the memory-bound expert time of small-batch MoE decode)
            # weight-only formats dequantize in the kernel: their compute runs at eta_dequant of the
            # plain GEMM's (the bf16 router and LM head are never weight-only)
            deq = np.where(self.w_only & (cols[4] != EMBED_BYTES), self.eta_dequant, 1.0) \
                if self.w_only.any() else 1.0
            eta_c = np.broadcast_to(self.eta_c * (self.eta_moe if moe else 1.0) * deq, (len(sel), n))
            tiles_m, tiles_n = (self.moe_tiles_m, self.moe_tiles_n) if moe else (self.tiles_m, self.tiles_n)
            spare = slot.get("cols") if slot is not None else None
            planes: Any  # (9, R, n) cost planes, or the kernel's per-field sequence of them
            if self.one_kind and use_fast_path(n):  # the compiled kernel of the same formulas (explorer/costs/gemm.py)
                planes = gemm_cost_stacked(
                    cols, eta_c, hbm_bw=self.hbm_bw, sms=self.sms, tiles_m=list(tiles_m[0]), tiles_n=list(tiles_n[0]),
                    max_split_k=self.max_split_k, eta_m=self.eta_m, launch_s=0.0, latency_s=self.kind.kernel_latency_s,
                    epilogue_exposed=self.kind.gemm_epilogue_exposed, memo=slot)
            else:
                planes = self._gemms_numpy(cols, eta_c, tiles_m, tiles_n, slot)
            if slot is not None and spare is not None:  # the previous inputs: the next call's buffer
                slot["spare"] = spare
            for row, i in enumerate(sel):
                out[i] = GemmCost(*(plane[row] for plane in planes))
        return [o for o in out if o is not None]

    def _gemms_numpy(self, cols: np.ndarray, eta_c: np.ndarray, tiles_m: np.ndarray, tiles_n: np.ndarray,
                     slot: dict | None) -> Sequence[np.ndarray]:
        """numpy's :func:`gemm_cost` (the reference) over stacked requests ``cols`` ``(8, R, n)``: the
        ``(R, n)`` planes of :class:`GemmCost`, field by field.  With ``slot`` (run_gemms' memo of the previous
        call from the same site), only the elements whose inputs moved are costed, into the previous
        call's planes in place (gemm_cost is element-wise, so the others keep the figures it gave
        them)."""
        R, n = cols.shape[1], cols.shape[2]
        prev = slot.get("cols") if slot is not None else None
        todo = None
        if slot is not None and prev is not None and prev.shape == cols.shape:
            same = eta_c == slot["eta_c"]
            for j in range(8):
                same &= cols[j] == prev[j]
            if same.any():
                planes = slot["planes"]  # the previous call's, updated in place
                todo = np.flatnonzero(~same.ravel())
        if todo is None:
            g = gemm_cost(cols[0], cols[1], cols[2], cols[3], cols[4], cols[5],
                          peak_flops=cols[7], hbm_bw=self.hbm_bw, sms=self.sms, tiles_m=tiles_m, tiles_n=tiles_n,
                          max_split_k=self.max_split_k, eta_c=eta_c, eta_m=self.eta_m, launch_s=0.0,
                          groups=cols[6], latency_s=self.kind.kernel_latency_s,
                          epilogue_exposed=self.kind.gemm_epilogue_exposed)
            fields = [np.broadcast_to(getattr(g, k), (R, n)) for k in GemmCost.__dataclass_fields__]
            if slot is None:
                return fields
            planes = np.empty((9, R, n))  # kept for the next call from the site
            for f, a in enumerate(fields):
                planes[f] = a
        elif todo.size:
            pt = todo % n  # the design point of each stacked element
            sub = cols.reshape(8, -1)[:, todo]
            g = gemm_cost(sub[0], sub[1], sub[2], sub[3], sub[4], sub[5],
                          peak_flops=sub[7], hbm_bw=self.hbm_bw[pt], sms=self.sms[pt], tiles_m=tiles_m[pt],
                          tiles_n=tiles_n[pt], max_split_k=self.max_split_k[pt], eta_c=eta_c.ravel()[todo],
                          eta_m=self.eta_m[pt], launch_s=0.0, groups=sub[6], latency_s=self.kind.kernel_latency_s,
                          epilogue_exposed=self.kind.gemm_epilogue_exposed)
            flat = planes.reshape(9, -1)
            for f, k in enumerate(GemmCost.__dataclass_fields__):
                flat[f, todo] = getattr(g, k)
        if slot is not None:
            slot["cols"], slot["eta_c"], slot["planes"] = cols, eta_c, planes
        return planes


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
        # open-loop Poisson arrivals (requests/s per replica); 0 = closed loop of ``batch`` clients
        self.rate = _col(c, "request_rate") if "request_rate" in c else np.zeros(len(self.H))
        # disaggregated decode pool (explorer/disagg.py): prompts arrive prefilled, their KV moved in;
        # ``ttft_extra_s`` is the time to first token spent outside this engine (prefill pool, transfer)
        self.disagg = _col(c, "disagg") > 0 if "disagg" in c else np.zeros(len(self.H), dtype=bool)
        self.ttft_extra = _col(c, "ttft_extra_s") if "ttft_extra_s" in c else np.zeros(len(self.H))
        self.b_w, self.b_a, self.b_kv = _col(c, "b_w"), _col(c, "b_a"), _col(c, "b_kv")
        self.imb = _col(c, "moe_imbalance")
        # context batching wait (explorer/batch_wait.py): iterations a new prompt may be held, token ratio
        self.bw_iters = _col(c, "batch_wait_iters") if "batch_wait_iters" in c else np.zeros(len(self.H))
        self.bw_ratio = _col(c, "batch_wait_ratio") if "batch_wait_ratio" in c else np.zeros(len(self.H))
        self.w_only = _col(c, "w_only") > 0 if "w_only" in c else np.zeros(len(self.H), dtype=bool)
        # serving runtime (explorer/runtime.py)
        self.rt_mixed = _col(c, "rt_mixed") > 0
        self.rt_overlap = _col(c, "rt_overlap") > 0 if "rt_overlap" in c else np.zeros(len(self.H), dtype=bool)
        self.rt_ar_norm = _col(c, "rt_ar_norm") > 0 if "rt_ar_norm" in c else np.zeros(len(self.H), dtype=bool)
        self.rt_custom_ar = _col(c, "rt_custom_ar") > 0 if "rt_custom_ar" in c else np.zeros(len(self.H), dtype=bool)
        self.rt_max_tokens, self.rt_max_batch = _col(c, "rt_max_tokens"), _col(c, "rt_max_batch")
        self.rt_reserve_full = _col(c, "rt_reserve_full") > 0
        self.rt_graph_step, self.rt_graph_max = _col(c, "rt_graph_step"), _col(c, "rt_graph_max")
        self.rt_step, self.rt_per_seq = _col(c, "rt_step_s"), _col(c, "rt_per_seq_s")
        # the serving front end's host work, where asked for (``front_end``: off by default -- the
        # engine alone, as an offline benchmark sees it; validate turns it on for served curve rows)
        zero = np.zeros(len(self.H))
        on = (_col(c, "front_end") > 0) if "front_end" in c else zero > 0
        self.rt_serve_step = np.where(on, _col(c, "rt_serve_step_s"), 0.0) if "rt_serve_step_s" in c else zero
        self.rt_serve_seq = np.where(on, _col(c, "rt_serve_seq_s"), 0.0) if "rt_serve_seq_s" in c else zero
        self.rt_request, self.rt_attention = _col(c, "rt_request_s"), _col(c, "rt_attention")
        self.rt_compute = _col(c, "rt_compute") if "rt_compute" in c else np.ones(len(self.H))
        self.counts = param_counts(c)
        self.n_moe = np.where(self.E > 0, self.L - _col(c, "dense_layers"), 0.0)
        self.n_dense = self.L - self.n_moe
        # kernels one layer launches (averaged over dense and MoE layers): the qkv and o
        # GEMMs, attention, the small kernels, two all-reduces at tp > 1, the dense MLP's two GEMMs or
        # the MoE layer's (router, two grouped GEMMs, routing/permute/unpermute, shared experts,
        # dispatch + combine under attention DP).  A runtime that fuses the residual add + RMSNorm
        # into its tensor-parallel all-reduces (fusion.allreduce_norm) launches the layer's two norms
        # inside those two kernels.  A function of the shape and deployment only: counted once here.
        self.wd, self.wm = wd, wm = self.n_dense / self.L, self.n_moe / self.L  # layer shares
        tp_ar = self.t > 1
        fused_norms = np.where(self.rt_ar_norm & tp_ar & (self.dp == 1), 2.0, 0.0)
        shared = self.Es * self.Fs / self.t > 0
        self.kernels_per_layer = (2.0 + 1.0 + ELEMENTWISE_KERNELS_PER_LAYER - fused_norms + np.where(tp_ar, 2.0, 0.0)
                                  + wd * 2.0 + wm * (3.0 + MOE_EXTRA_KERNELS + np.where(shared, 2.0, 0.0)
                                                     + np.where((self.e > 1) & (self.dp > 1), 2.0, 0.0)))
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
        # speculative decoding / MTP (explorer/speculative.py): None unless the table asks for it;
        # ``draft`` is the per-GPU view of the draft (one MTP layer, or the draft model)
        self.spec_k = _col(c, "spec_k") if speculative.active(c) else None
        drafting = self.spec_k is not None and bool(np.any(self.spec_k > 0))
        self.draft = _Shape(speculative.draft_design(c)) if drafting else None
        if self.spec_k is not None:
            self.spec_tokens, self.spec_kind, self.spec_mtp = (_col(c, k) for k in ("spec_tokens", "spec_draft",
                                                                                     "spec_mtp"))


#: GEMMs of one step, in the order of a plan's requests.
_GEMMS = ("qkv", "o", "up", "down", "eup", "edown", "router", "sup", "sdown", "lm")


def expected_max_load_factor(n: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """Expected maximum over ``n`` GPUs of the tokens routed to each, as a multiple of the mean,
    when ``slots`` token-expert assignments are spread uniformly (multinomial routing).

    Normal approximation of the binomial per-GPU load (mean ``mu = slots/n``, sd
    ``sqrt(slots (1/n)(1 - 1/n))``) and Blom's formula for the expected maximum of ``n`` standard
    normals, ``Phi^-1((n - 0.375)/(n + 0.25))`` (1.43 for n = 8; exact 1.42).  Capped at ``n`` (all
    tokens on one GPU); 1 for ``n = 1``.  Ignores hot experts (real routers are not uniform: the
    named ``moe_imbalance`` factor takes that).
    """
    from scipy.special import ndtri

    n = np.asarray(n, dtype=np.float64)
    slots = np.maximum(np.asarray(slots, dtype=np.float64), 1e-9)
    z = np.where(n > 1, ndtri((n - 0.375) / (n + 0.25)), 0.0)
    cv = np.sqrt(np.maximum(n - 1.0, 0.0) / slots)  # sd / mean of one GPU's load
    return np.clip(1.0 + z * cv, 1.0, np.maximum(n, 1.0))


def _pad_whole(b: np.ndarray, step: np.ndarray, max_batch: np.ndarray) -> np.ndarray:
    small = np.power(2.0, np.ceil(np.log2(np.maximum(b, 1.0))))
    stepped = np.ceil(b / np.maximum(step, 1.0)) * np.maximum(step, 1.0)
    padded = np.where(b <= 4.0, small, np.maximum(stepped, b))
    use = (step > 0) & (b <= max_batch) & (b > 0)
    return np.where(use, np.minimum(padded, np.maximum(max_batch, b)), b)


def graph_padded(b: np.ndarray, step: np.ndarray, max_batch: np.ndarray) -> np.ndarray:
    """Decode batch as a CUDA graph runs it: captured sizes 1, 2, 4, then multiples of ``step``, up
    to ``max_batch`` (above it, or with ``step == 0``, the step runs unpadded).

    ``b`` is a steady-state mean, so the padded size is the expectation over the two whole batches
    around it (``floor(b)`` and ``ceil(b)``, weighted by the fraction): a mean of 8.01 pads to 8.08,
    not to 16 -- the step function applied to a mean would jump where the served batch does not."""
    b = np.asarray(b, dtype=np.float64)
    lo, hi = np.floor(b), np.ceil(b)
    w = b - lo
    return (1.0 - w) * _pad_whole(np.maximum(lo, np.minimum(b, 1.0)), step, max_batch) \
        + w * _pad_whole(hi, step, max_batch)


def _plan(s: _Shape, hw: _HW, m_dec, n_pre, P, moe_groups, m_attn=None, q_attn=None) -> dict:
    """Token counts of one stage step and its GEMM requests (costed later, all passes at once).

    ``m_dec`` decode tokens through the GEMMs per attention group (the CUDA-graph padded batch),
    ``m_attn`` real decode sequences attending at mean context ``S`` (default ``m_dec``);
    ``n_pre`` prompts of ``P`` tokens prefilled in the same step (fractional: a chunk of
    ``n_pre*P`` tokens); ``moe_groups`` attention groups whose tokens meet in the MoE layers
    (``dp`` when every group steps together, 1 for a prefill step of one group).  ``q_attn``
    query tokens per attending sequence (speculative verification: ``1 + K``; default 1): the
    attention FLOPs scale with it, the KV cache is read once per sequence.
    """
    H, t = s.H, s.t
    M = m_dec + n_pre * P  # tokens through the weight GEMMs
    T_tot = M * moe_groups  # tokens meeting in the stage's experts
    is_moe = s.E > 0
    if is_moe.any():
        E_safe = np.maximum(s.E, 1.0)
        # the slowest GPU sees its expected-maximum share of the routed tokens (uniform routing)
        slots = T_tot * s.k
        load = np.where(s.e > 1, expected_max_load_factor(s.e, slots), 1.0) * s.imb
        T_gpu = T_tot * load  # tokens the slowest GPU's experts see, counted as if all its own
        touched = s.E_loc * (1.0 - np.power(np.clip(1.0 - s.k / E_safe, 0.0, 1.0), T_gpu))
        touched = np.where(is_moe, np.maximum(touched, 1e-9), 0.0)
        m_e = np.where(is_moe, T_gpu * s.k / s.e / np.maximum(touched, 1e-9), 0.0)
        slots_gpu = np.where(is_moe, T_gpu * s.k / s.e, 0.0)
    else:
        touched = m_e = slots_gpu = np.zeros_like(T_tot)
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
    return {"m_dec": m_dec, "m_attn": m_dec if m_attn is None else m_attn, "q_attn": q_attn,
            "n_pre": n_pre, "P": P, "M": M,
            "T_tot": T_tot, "slots_gpu": slots_gpu, "requests": requests,
            "touched": np.where(M_moe > 0, touched, 0.0)}


def _step(s: _Shape, hw: _HW, plan: dict, g: dict[str, GemmCost]):
    """Per-GPU times of one stage step (per-layer averages by component) and the LM head."""
    H, t = s.H, s.t
    n_pre, P, M, T_tot = plan["n_pre"], plan["P"], plan["M"], plan["T_tot"]
    m_attn = plan["m_attn"]
    S = s.isl + s.osl / 2.0  # mean decode context (DESIGN.md)
    frac_sl = np.where(s.L > 0, s.n_sl / s.L, 0.0)
    # --- attention scores/values
    S_eff = (1 - frac_sl) * S + frac_sl * mean_context_sliding(S, s.W)
    fl_d, by_d = decode_attention(m_attn, S_eff, s.nq_loc, s.d, s.kv_loc, s.b_kv, s.mla, s.kr, s.rope)
    if plan["q_attn"] is not None:  # speculative verification: 1+K queries per sequence, one KV read
        fl_d = fl_d * plan["q_attn"]
    fl_p = prefill_attention_flops(P, 0.0, s.nq_loc, s.d, s.mla, s.rope)
    if (frac_sl > 0).any():  # sliding-window layers (skipped when no row has any)
        fl_p = (1 - frac_sl) * fl_p + frac_sl * prefill_attention_flops(P, s.W, s.nq_loc, s.d, s.mla, s.rope)
    fl_p = n_pre * fl_p
    by_p = n_pre * P * s.kv_loc * (s.b_kv + 2.0 * s.b_a)  # write new KV, read Q/K/V once
    # the runtime's attention kernels reach `rt_attention` of the roofline's efficiency (fitted residual)
    attn_c = (fl_d + fl_p) / (hw.peak_attn * hw.eta_c * s.rt_attention)
    attn_m = (by_d + by_p) / (hw.hbm_bw * hw.eta_m * s.rt_attention)
    t_attn = np.maximum(attn_c, attn_m)
    # --- collectives
    # the collective model of explorer/costs/comm.py (NCCL's algorithms and protocols, fitted on the
    # kernels file); serving runs its TP all-reduces inside CUDA graphs (custom or NCCL kernels), so
    # the per-call launch/proxy cost of a stand-alone collective is left out (call_s = 0) -- each
    # collective's launch is one of the step's counted kernels
    k_ = hw.kind
    ar_bytes = M * H * ALLREDUCE_BYTES
    t_ar = np.where(t > 1, collective_s(ar_bytes, t, domain=float(k_.scaleup_domain),
                                        up_bw=k_.scaleup_bw, up_step_s=k_.scaleup_latency_s,
                                        out_bw=k_.scaleout_bw, out_step_s=k_.scaleout_latency_s,
                                        eta_n=k_.eta_network, kind="allreduce", protocols=protocols_of(k_),
                                        call_s=0.0, nvls_eta=k_.nvls_eta, nvls_latency_s=k_.nvls_latency_s,
                                        mesh=k_.scaleup_mesh), 0.0)
    # the runtime's own peer-to-peer all-reduce kernels (one-shot / two-shot) where they beat NCCL:
    # groups of up to 8 GPUs inside one NVLink/xGMI domain (the world sizes vLLM's custom_all_reduce
    # takes; TensorRT-LLM's AUTO strategy picks its ONESHOT/TWOSHOT kernels there too)
    if k_.peer_allreduce and s.rt_custom_ar.any():
        custom = s.rt_custom_ar & (t > 1) & (t <= CUSTOM_ALLREDUCE_MAX_GPUS) & (t <= k_.scaleup_domain)
        t_ar = np.where(custom, np.minimum(t_ar, custom_allreduce_s(ar_bytes, t, up_bw=k_.scaleup_bw,
                                                                     eta_n=k_.eta_network)), t_ar)
    is_moe = s.E > 0
    if (is_moe & (s.e > 1)).any():
        tok_origin = T_tot / (s.t * s.dp)  # tokens each GPU of the stage sends (dispatch) and receives back

        def a2a(token_bytes):
            return ep_alltoall_s(tok_origin, s.k, token_bytes, s.e, domain=float(k_.scaleup_domain),
                                 up_bw=k_.scaleup_bw, out_bw=k_.scaleout_bw, eta_n=k_.eta_network,
                                 up_step_s=k_.scaleup_latency_s, out_step_s=k_.scaleout_latency_s,
                                 call_s=k_.collective_latency_s)[0]

        # dispatch + combine only when attention data parallelism splits the tokens (dp > 1): with
        # tp >= ep and dp = 1 every GPU of the group already holds every token after the attention
        # all-reduce, computes its own experts on them, and the MoE output is summed by the layer's
        # all-reduce (TensorRT-LLM/SGLang "TP attention + EP MoE") -- no all-to-all
        t_a2a = np.where(is_moe & (s.e > 1) & (s.dp > 1), a2a(H * s.b_a) + a2a(H * COMBINE_BYTES), 0.0)
    else:
        t_a2a = np.zeros_like(T_tot)
    # --- per-layer sums (averaged over dense and MoE layers)
    qkv, o, up, down, eup, edown, router, sup, sdown = (g[k] for k in _GEMMS[:-1])
    wd, wm = s.wd, s.wm
    t_gemm = qkv.time_s + o.time_s + wd * (up.time_s + down.time_s) + wm * (sup.time_s + sdown.time_s)
    # permute (gather tokens by expert) and unpermute (weighted scatter-add, bf16): read + write each
    t_perm = plan["slots_gpu"] * H * (2.0 * s.b_a + 2.0 * COMBINE_BYTES) / (hw.hbm_bw * hw.eta_m)
    # each touched expert of the slowest GPU costs its grouped GEMMs (up, down) a fixed start-up
    t_groups = np.where(s.E > 0, 2.0 * plan["touched"] * hw.moe_group, 0.0)
    t_moe = wm * (eup.time_s + edown.time_s + router.time_s + t_perm + t_groups)
    t_comm = 2.0 * t_ar + wm * t_a2a
    comp = {
        "gemm_c": qkv.compute_s + o.compute_s + wd * (up.compute_s + down.compute_s)
        + wm * (sup.compute_s + sdown.compute_s),
        "gemm_m": qkv.memory_s + o.memory_s + wd * (up.memory_s + down.memory_s)
        + wm * (sup.memory_s + sdown.memory_s),
        "moe_c": wm * (eup.compute_s + edown.compute_s + router.compute_s),
        "moe_m": wm * (eup.memory_s + edown.memory_s + router.memory_s + t_perm),
        "attn_c": attn_c, "attn_m": attn_m,
        "t_ar": t_ar,  # one tensor-parallel all-reduce of the step's M tokens (the MTP projection's)
    }
    per_layer = {"gemm": t_gemm, "attention": t_attn, "moe": t_moe, "comm": t_comm,
                 "overhead": s.kernels_per_layer * hw.launch}
    return per_layer, g["lm"], comp, {"gemm": qkv, "o": o, "up": up, "down": down, "eup": eup, "edown": edown}


def _steps(s: _Shape, hw: _HW, plans: list[dict], site: str | None = None):
    """Cost every plan's GEMMs in one stacked call (``site``: see :meth:`_HW.run_gemms`), then each
    step's times."""
    requests = [r for p in plans for r in p["requests"]]
    costs = hw.run_gemms(requests, site)
    n = len(_GEMMS)
    return [_step(s, hw, p, dict(zip(_GEMMS, costs[i * n:(i + 1) * n], strict=True))) for i, p in enumerate(plans)]


def _stage_time(s: _Shape, per_layer, lm, hw: _HW):
    """Worst stage: ceil(L/p) layers plus the LM head."""
    parts = {k: s.Ls * v for k, v in per_layer.items()}
    parts["gemm"] = parts["gemm"] + lm.time_s
    parts["overhead"] = parts["overhead"] + hw.launch  # LM head launch
    return parts


def _stage_total(s: _Shape, step, hw: _HW) -> tuple[dict, np.ndarray]:
    parts = _stage_time(s, step[0], step[1], hw)
    return parts, sum(parts.values())


def dp_straggler_factor(dp: np.ndarray, f_chunk: np.ndarray) -> np.ndarray:
    """How much more engine time a prompt costs when ``dp`` attention data-parallel ranks step
    together (their MoE layers synchronise every step) and each rank's steps carry a prompt chunk
    with probability ``f_chunk``: a step is as slow as its slowest rank, so it carries a chunk's
    cost with probability ``1 - (1 - f)^dp`` instead of ``f``.  Returns that ratio (``dp`` for rare
    chunks, 1 when every step carries one, 1 without attention DP).  Assumes independent ranks
    (TensorRT-LLM's attention-DP balancing, which waits to align context steps, would lower it)."""
    f = np.clip(np.asarray(f_chunk, dtype=np.float64), 1e-9, 1.0)
    dp = np.maximum(np.asarray(dp, dtype=np.float64), 1.0)
    return np.where(dp > 1, (1.0 - np.power(1.0 - f, dp)) / f, 1.0)


def _engine(s: _Shape, hw: _HW, b: np.ndarray, n_pf: np.ndarray, link_pp: tuple[np.ndarray, np.ndarray],
            f_chunk: np.ndarray | None = None, site: str | None = "engine"):
    """Step times of one engine (attention group) whose decode steps run ``b`` sequences (per
    micro-batch) and that receives ``n_pf`` new prompts per step.

    Returns the pure decode step ``T_dec``, the per-request prefill cost ``tau`` (seconds of engine
    time one prompt adds, spread over the decode steps), the time to first token without queueing,
    the decode step's components and GEMM figures.  Prompts of ``ISL`` tokens go in chunks of
    ``Q = min(n_pf*ISL, budget)`` tokens, ``n_pf = max(1, X*TPOT)`` prompts arriving per step
    (closed loop: requests arrive at the rate ``X`` they finish).

    ``site`` names the GEMM call site (see :meth:`_HW.run_gemms`): calls of one site reuse the GEMM
    costs of the previous one where their inputs are equal (the closed-loop passes), and the GEMM
    figures in the result are valid until the site's next call.
    """
    p = s.p
    bw_p, lat_p = link_pp
    q = None if s.spec_k is None else 1.0 + s.spec_k  # tokens per sequence through the verify step
    spec = q is not None  # speculative decoding (explorer/speculative.py)
    if spec:  # the caller counts prompts and chunk shares per output token; a step yields E of them
        n_pf = np.maximum(1.0, n_pf * s.spec_tokens)
        f_chunk = None if f_chunk is None else np.minimum(f_chunk * s.spec_tokens, 1.0)
    arrivals = n_pf  # prompts arriving per step, before the one-prompt floor of a chunk
    b_pad = graph_padded(b, s.rt_graph_step, s.rt_graph_max)
    b_tok = b_pad if q is None else b_pad * q  # decode tokens through the GEMMs
    budget = np.maximum(np.where(s.rt_mixed, s.rt_max_tokens - (b if q is None else b * q), s.rt_max_tokens), 1.0)
    n_pf = np.maximum(n_pf, 1.0)  # at least one prompt's tokens per prefill-carrying step
    Q = np.minimum(n_pf * s.isl, budget)  # prompt tokens per prefill-carrying step
    zero = 0.0 * b
    plans = [_plan(s, hw, b_tok, zero, s.isl, s.dp, m_attn=b, q_attn=q),
             _plan(s, hw, np.where(s.rt_mixed, b_tok, 0.0), Q / s.isl, s.isl,
                   np.where(s.rt_mixed, s.dp, 1.0), m_attn=np.where(s.rt_mixed, b, 0.0), q_attn=q)]
    dec, pre = _steps(s, hw, plans, site=site)
    parts_dec, stage_dec = _stage_total(s, dec, hw)
    parts_pre, stage_pre = _stage_total(s, pre, hw)
    if s.draft is not None:  # K draft passes per step (mixed steps draft for their decoders too)
        draft = _draft_parts(s, hw, b_pad, b, site)
        parts_dec = {k: v + draft[k] for k, v in parts_dec.items()}
        parts_pre = {k: v + np.where(s.rt_mixed, draft[k], 0.0) for k, v in parts_pre.items()}
        stage_dec, stage_pre = sum(parts_dec.values()), sum(parts_pre.values())
    # the engine loop's host work (one scheduler per attention group serves p micro-batches) is in the
    # step; the serving front end's (HTTP server, detokenising and streaming every running sequence)
    # adds to it, or -- where it runs beside the engine loop (host_overlap) -- shows only where it is
    # the longer of the two: the engine then waits for it
    host = s.rt_step + s.rt_per_seq * b * p
    p2p = lambda m: np.where(p > 1, p2p_s(m * s.H * s.b_a, bw_p, lat_p, hw.eta_n), 0.0)  # noqa: E731
    T_dec = p * stage_dec + (p - 1.0) * p2p(b_tok) + host
    T_pre_step = p * stage_pre + (p - 1.0) * p2p(np.where(s.rt_mixed, b_tok, 0.0) + Q) + host
    host_dec = host
    if (s.rt_serve_step > 0).any() or (s.rt_serve_seq > 0).any():  # off unless asked for (front_end)
        serve = s.rt_serve_step + s.rt_serve_seq * b * p
        wait_dec, wait_pre = (np.where(s.rt_overlap, np.maximum(serve - e, 0.0), serve) for e in (T_dec, T_pre_step))
        T_dec, T_pre_step, host_dec = T_dec + wait_dec, T_pre_step + wait_pre, host + wait_dec
    # engine seconds one prompt costs: mixed -> the extra time of the mixed steps; separate -> its steps
    tau = np.where(s.rt_mixed, np.maximum(T_pre_step - T_dec, 0.0), T_pre_step) * s.isl / Q
    if f_chunk is not None and (s.dp > 1).any():
        # attention-DP ranks wait for the one with a chunk: the rank's own work (attention, dense
        # GEMMs, its collectives) is paid at the straggler rate; the expert GEMMs are shared by all
        # ranks -- the mixed step above already runs dp ranks' chunks through them -- so their
        # extra time is counted once, not dp times when chunks are rare
        moe_extra = p * np.maximum(np.where(s.rt_mixed, parts_pre["moe"] - parts_dec["moe"], parts_pre["moe"]), 0.0)
        moe_extra = np.minimum(moe_extra * s.isl / Q, tau)
        tau = (tau - moe_extra) * dp_straggler_factor(s.dp, f_chunk) + moe_extra
    chunk_steps = np.maximum(1.0, np.ceil(n_pf * s.isl / Q - 1e-9))
    # TTFT without queueing: the step in flight when the request arrives (half a step on average),
    # then the steps that carry its prompt, then the runtime's per-request work
    busy = np.clip(b - 1.0, 0.0, 1.0)  # a step of the other requests is in flight (none when alone)
    # the prompt's own steps: mixed, every chunk but the last fills the budget and the last carries the
    # remainder -- each step is a decode step plus its chunk's share of the prompt work (a 9.4k-token
    # prompt in 8k chunks costs one full and one 1.4k-token step, not two full ones); separate
    # prefill steps are costed whole (a partial chunk's fixed cost is not separated out: assumption)
    own_steps = np.where(s.rt_mixed, chunk_steps * T_dec + n_pf * s.isl / Q * (T_pre_step - T_dec),
                         chunk_steps * T_pre_step)
    ttft_service = 0.5 * busy * T_dec + own_steps + s.rt_request
    if (s.bw_iters > 0).any():  # the runtime holds new prompts to batch them (explorer/batch_wait.py):
        # the held decode steps, then the batch's other prompts in the prompt's own step
        wait_steps, mates = batch_wait.hold(s.bw_iters, s.bw_ratio, s.rt_max_tokens, s.isl, b - 1.0, arrivals)
        ttft_service = ttft_service + T_dec * wait_steps + np.maximum(1.0 + mates - n_pf, 0.0) * tau
    # mixed steps carry one chunk each at most: the prompt rate cannot exceed Q/ISL per mixed step
    rate_max = np.where(s.rt_mixed, Q / s.isl / np.maximum(T_pre_step, 1e-30), np.inf)
    if s.disagg.any():  # disaggregated decode pool: no prompt work here, TTFT mostly spent outside
        tau = np.where(s.disagg, 0.0, tau)
        ttft_service = np.where(s.disagg, s.ttft_extra + 0.5 * busy * T_dec + s.rt_request, ttft_service)
        rate_max = np.where(s.disagg, np.inf, rate_max)
    out = {"T_dec": T_dec, "tau": tau, "ttft_service": ttft_service, "parts": parts_dec, "host": host_dec,
            "rate_max": rate_max, "T_full": np.where(s.rt_mixed, T_pre_step, T_dec),
            "prompt_s": T_pre_step * s.isl / Q, "T_pre_step": T_pre_step,
            # one prompt's share of the prefill server when chunks fill the whole token budget
            # (mixed: a step carries every waiting prompt up to the budget; separate: as tau)
            "prompt_service_s": np.where(s.rt_mixed, tau + T_dec * np.minimum(s.isl / budget, 1.0), tau),
            "isl_per_budget": np.where(s.rt_mixed, s.isl / budget, 0.0),  # a prompt's chunks (mixed steps)
            "p2p": (p - 1.0) * p2p(b_tok), "comp": dec[2], "gemms": dec[3], "Q": Q, "b_pad": b_pad}
    if spec:  # per output token: each step yields E tokens per sequence (TTFT, tau, rates stay per step)
        E = s.spec_tokens
        out.update({k: out[k] / E for k in ("T_dec", "T_full", "T_pre_step", "host", "p2p")})
        out["parts"] = {k: v / E for k, v in parts_dec.items()}
    return out


def _draft_parts(s: _Shape, hw: _HW, b_pad: np.ndarray, b: np.ndarray, site: str | None = None) -> dict[str, np.ndarray]:
    """Per-GPU component times of one step's ``K`` draft passes over ``b`` sequences (``b_pad``
    through the GEMMs), on the last stage (explorer/speculative.py): each pass is a decode step of
    the draft -- one MTP layer + the shared LM head, or the draft model's layers + its head -- and,
    for MTP, the bf16 projection ``eh_proj`` (2H -> H, row-parallel: one all-reduce) and its norms.
    ``site``: the engine's GEMM call site (:func:`_engine`), None for no reuse."""
    d = s.draft
    assert d is not None and s.spec_k is not None
    step = _steps(d, hw, [_plan(d, hw, b_pad, 0.0 * b, d.isl, d.dp, m_attn=b)],
                  site=None if site is None else site + "/draft")[0]
    parts, _ = _stage_total(d, step, hw)
    mtp = s.spec_kind == speculative.DRAFT_MTP
    proj = hw.run_gemms([(np.where(mtp, b_pad, 0.0), s.H, 2.0 * s.H / s.t, s.b_a, speculative.PROJECTION_BYTES,
                          s.b_a, 1.0, hw.bf16_peak, False)],
                        site=None if site is None else site + "/mtp_proj")[0]
    parts["gemm"] = parts["gemm"] + np.where(mtp, proj.time_s, 0.0)
    parts["comm"] = parts["comm"] + np.where(mtp, step[2]["t_ar"], 0.0)
    parts["overhead"] = parts["overhead"] + np.where(mtp, (1.0 + speculative.MTP_NORM_KERNELS) * hw.launch, 0.0)
    return {k: s.spec_k * v for k, v in parts.items()}


def _prepare(c: Mapping[str, np.ndarray], table: HardwareTable) -> dict:
    """Per-row shape, hardware columns, memory budget and running-request cap of one engine (one
    hardware kind per call): everything :func:`simulate` needs before the operating point."""
    idx = np.asarray(c["hw_idx"], dtype=np.int64)
    s = _Shape(c)
    cfmt = np.asarray(c["compute_fmt"], dtype=np.int64)
    # attention runs in the activation's tensor format, at most fp8 (no FP4 attention kernels)
    # (FP8 attention kernels exist for GQA -- FlashAttention-3, TensorRT-LLM FP8 FMHA; MLA kernels
    # such as FlashMLA compute in bf16 whatever the cache format)
    a_idx = np.where((s.b_a >= 2.0) | s.mla, 0, TENSOR_FORMATS.index("fp8"))
    hw = _HW(table, idx, cfmt, a_idx)
    hw.w_only = s.w_only
    hw.eta_c = hw.eta_c * s.rt_compute  # the runtime's served GEMMs vs the kernel benchmarks (fitted residual)
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
    f_chunk = None  # share of a rank's steps that carry a prompt chunk (from the previous pass)
    is_open = s.rate > 0  # open-loop rows: Poisson arrivals (explorer/open_loop.py)
    any_open = bool(is_open.any())
    lam = s.rate / groups  # arrivals per engine
    passes = FIXED_POINT_ITERATIONS + (OPEN_LOOP_EXTRA_ITERATIONS if any_open else 0)
    if any_open:  # open rows climb from a lone request; secant steps on b = F(b) (F nearly linear)
        b_step = np.where(is_open, 1.0, b_step)
        n_pf = np.where(is_open, 1.0, n_pf)
        b_prev = f_prev = None
    for _ in range(passes):  # fixed-point iterations on the batches the steps are costed at
        eng = _engine(s, hw, b_step, n_pf, link_pp, f_chunk)
        op = closed_loop(clients, np.maximum(b_cap, 1e-9), s.osl, eng["T_dec"], eng["tau"], eng["ttft_service"],
                         eng["rate_max"], eng["T_full"])
        if any_open:
            opo = open_loop(lam, np.maximum(b_cap, 1e-9), s.osl, eng["T_dec"], eng["tau"], eng["ttft_service"],
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
        # prompts arriving per output-token time (_engine turns it into per step: max(1, .) there)
        n_pf = op["request_rate"] * op["tpot_s"]
        f_chunk = np.clip(op["request_rate"] * op["tpot_s"] * s.isl / eng["Q"], 0.0, 1.0)
    tpot = op["tpot_s"]
    prefill_share = tpot - eng["T_dec"]
    b_run = np.maximum(op["decode_batch"], 0.0)
    pct = {k: np.full(len(s.H), np.nan) for k in PERCENTILE_COLUMNS}
    want = is_open | ((_col(c, "latency_percentiles") > 0) if "latency_percentiles" in c else False)
    if np.any(want):  # latency percentiles (open-loop rows, or asked for): the batch slope from one more step
        if not any_open:  # closed loop: its prompt server's load, as the open loop computes it
            op = dict(op, prompt_load=np.clip(op["request_rate"] * eng["prompt_service_s"], 0.0, 1.0 - 1e-9))
        b_hi = b_step + np.maximum(1.0, 2.5 * np.sqrt(2.0 / 3.0 * b_run))
        T_hi = _engine(s, hw, b_hi, n_pf, link_pp, f_chunk, site=None)["T_dec"]  # eng's GEMM figures stay valid
        slope = (T_hi - eng["T_dec"]) / (b_hi - b_step)
        busy = 1.0 - np.exp(-b_run)  # a step of other requests is in flight at an arrival
        got = percentiles(op, s.osl, eng["T_dec"], slope, eng["tau"], eng["ttft_service"], eng["prompt_service_s"], busy,
                          eng["T_pre_step"], f_chunk, step_tokens=1.0 if s.spec_k is None else s.spec_tokens,
                          mixed=s.rt_mixed, isl_per_budget=eng["isl_per_budget"],
                          isl_cv=_col(c, "isl_cv") if "isl_cv" in c else 0.0,
                          osl_cv=_col(c, "osl_cv") if "osl_cv" in c else 0.0)
        pct = {k: np.where(want, got[k], np.nan) for k in pct}

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


def _pick(v, sel: np.ndarray):
    """Rows ``sel`` of a design column; a broadcast constant (build_design's scalars) stays a view."""
    if not np.ndim(v):
        return v
    a = np.asarray(v)
    if a.ndim == 1 and a.strides[0] == 0 and len(a):
        return np.broadcast_to(a[:1], (len(sel),))
    return np.take(a, sel, axis=0)


def _by_hardware(c: Mapping[str, np.ndarray], table: HardwareTable, detail: bool, idx: np.ndarray):
    """Score a table of several hardware kinds one kind at a time.  Every column is gathered once
    into hardware order (each kind's rows are then a contiguous slice: one pass over a column instead
    of one per kind) and the results are put back into the table's order once."""
    n = idx.size
    order = np.argsort(idx, kind="stable")
    bounds = [0, *(np.flatnonzero(np.diff(idx[order])) + 1).tolist(), n]
    ordered = {k: _pick(v, order) for k, v in c.items()}
    sorted_out: dict[str, np.ndarray] = {}
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        part = simulate({k: (v[a:b] if np.ndim(v) else v) for k, v in ordered.items()}, table, detail)
        for k, v in part.items():
            if k not in sorted_out:
                sorted_out[k] = np.empty(n, dtype=v.dtype)
            sorted_out[k][a:b] = v
    back = np.empty(n, dtype=np.int64)
    back[order] = np.arange(n)
    return {k: np.take(v, back) for k, v in sorted_out.items()}


def engine_profile(c: Mapping[str, np.ndarray], table: HardwareTable, batches,
                   chunk_points: int = 10) -> dict[str, np.ndarray]:
    """Step times of the first row's engine at each decode batch in ``batches`` -- the inputs of the
    discrete-event oracle (:mod:`explorer.events`), computed by the same :func:`_engine` as
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
    eng = _engine(s, hw, bb, budget / s.isl + 1.0, env["link_pp"], None, site=None)
    isl = float(s.isl[0])
    q_lo = min(isl, float(budget.max()))
    q_grid = np.unique(np.round(np.geomspace(q_lo, max(float(budget.max()), q_lo), max(chunk_points, 2))))
    extra = np.empty((len(b), len(q_grid)))
    for j, q in enumerate(q_grid):  # chunks of q tokens (capped by each batch's budget)
        e = _engine(s, hw, bb, np.full(len(b), q / isl), env["link_pp"], None, site=None)
        Q = e["Q"]
        step_extra = np.where(s.rt_mixed, e["T_pre_step"] - e["T_dec"], e["T_pre_step"])
        extra[:, j] = np.where(Q >= q, step_extra, step_extra * q / np.maximum(Q, 1.0))  # past the budget: linear
    return {"batch": b, "t_decode_s": eng["T_dec"], "chunk_s_per_token": eng["tau"] / s.isl,
            "budget_tokens": eng["Q"], "chunk_tokens": q_grid, "chunk_extra_s": extra,
            "b_cap": float(env["b_cap"][0]), "isl": isl,
            "osl": float(s.osl[0]), "request_s": float(s.rt_request[0]), "mixed": bool(s.rt_mixed[0]),
            "batch_wait_iters": float(s.bw_iters[0]), "batch_wait_ratio": float(s.bw_ratio[0]),
            "max_tokens": float(s.rt_max_tokens[0])}
