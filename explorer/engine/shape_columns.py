"""Per-GPU derived sizes of a model shape under its deployment and serving runtime, as columns over
the design points (computed once per :func:`explorer.simulate.simulate` call)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from explorer import speculative
from explorer.engine.constants import ELEMENTWISE_KERNELS_PER_LAYER, MLA_EXTRA_KERNELS, MOE_EXTRA_KERNELS
from explorer.model import attention_params_per_layer, kv_elements_per_token_layer, param_counts


def float_column(c: Mapping[str, np.ndarray], k: str) -> np.ndarray:
    """Design column ``k`` as float64."""
    return np.asarray(c[k], dtype=np.float64)


class ShapeColumns:
    """Per-GPU derived sizes of the shape under the deployment (computed once per call)."""

    def __init__(self, c: Mapping[str, np.ndarray]):
        self.H, self.F, self.L = float_column(c, "hidden"), float_column(c, "ffn"), float_column(c, "layers")
        self.nq, self.nkv, self.d, self.V = float_column(c, "heads"), float_column(c, "kv_heads"), float_column(c, "head_dim"), float_column(c, "vocab")
        self.g = np.where(float_column(c, "gated") > 0, 2.0, 1.0)  # up-projection matrices (gate+up or up)
        self.E, self.k, self.Fe = float_column(c, "experts"), float_column(c, "experts_per_token"), float_column(c, "expert_ffn")
        self.Es, self.Fs = float_column(c, "shared_experts"), float_column(c, "shared_expert_ffn")
        self.kr, self.rope = float_column(c, "kv_lora_rank"), float_column(c, "rope_head_dim")
        self.mla = self.kr > 0
        self.W, self.n_sl = float_column(c, "sliding_window"), float_column(c, "sliding_layers")
        self.t, self.p, self.e, self.dp = float_column(c, "tp"), float_column(c, "pp"), float_column(c, "ep"), float_column(c, "dp")
        self.isl, self.osl, self.B = float_column(c, "isl"), float_column(c, "osl"), float_column(c, "batch")
        # open-loop Poisson arrivals (requests/s per replica); 0 = closed loop of ``batch`` clients
        self.rate = float_column(c, "request_rate") if "request_rate" in c else np.zeros(len(self.H))
        # disaggregated decode pool (explorer/disagg.py): prompts arrive prefilled, their KV moved in;
        # ``ttft_extra_s`` is the time to first token spent outside this engine (prefill pool, transfer)
        self.disagg = float_column(c, "disagg") > 0 if "disagg" in c else np.zeros(len(self.H), dtype=bool)
        self.ttft_extra = float_column(c, "ttft_extra_s") if "ttft_extra_s" in c else np.zeros(len(self.H))
        self.b_w, self.b_a, self.b_kv = float_column(c, "b_w"), float_column(c, "b_a"), float_column(c, "b_kv")
        self.imb = float_column(c, "moe_imbalance")
        # context batching wait (explorer/batch_wait.py): iterations a new prompt may be held, token ratio
        self.bw_iters = float_column(c, "batch_wait_iters") if "batch_wait_iters" in c else np.zeros(len(self.H))
        # the scheduler takes in new requests every ``poll`` decode steps (1: every step; SGLang's
        # --scheduler-recv-interval / --num-continuous-decode-steps; explorer/engine/engine_step.py)
        self.poll = np.maximum(float_column(c, "poll_interval"), 1.0) if "poll_interval" in c else np.ones(len(self.H))
        self.bw_ratio = float_column(c, "batch_wait_ratio") if "batch_wait_ratio" in c else np.zeros(len(self.H))
        self.w_only = float_column(c, "w_only") > 0 if "w_only" in c else np.zeros(len(self.H), dtype=bool)
        # serving runtime (explorer/runtime.py)
        self.rt_mixed = float_column(c, "rt_mixed") > 0
        self.rt_overlap = float_column(c, "rt_overlap") > 0 if "rt_overlap" in c else np.zeros(len(self.H), dtype=bool)
        self.rt_ar_norm = float_column(c, "rt_ar_norm") > 0 if "rt_ar_norm" in c else np.zeros(len(self.H), dtype=bool)
        self.rt_custom_ar = float_column(c, "rt_custom_ar") > 0 if "rt_custom_ar" in c else np.zeros(len(self.H), dtype=bool)
        self.rt_max_tokens, self.rt_max_batch = float_column(c, "rt_max_tokens"), float_column(c, "rt_max_batch")
        self.rt_reserve_full = float_column(c, "rt_reserve_full") > 0
        # attention-DP balance: iterations a prompt may be held for every rank to have one (explorer/adp_balance.py)
        self.rt_adp_iters = float_column(c, "rt_adp_iters") if "rt_adp_iters" in c else np.zeros(len(self.H))
        self.rt_graph_step, self.rt_graph_max = float_column(c, "rt_graph_step"), float_column(c, "rt_graph_max")
        self.rt_step, self.rt_per_seq = float_column(c, "rt_step_s"), float_column(c, "rt_per_seq_s")
        # the serving front end's host work, where asked for (``front_end``: off by default -- the
        # engine alone, as an offline benchmark sees it; validate turns it on for served curve rows)
        zero = np.zeros(len(self.H))
        on = (float_column(c, "front_end") > 0) if "front_end" in c else zero > 0
        self.rt_serve_step = np.where(on, float_column(c, "rt_serve_step_s"), 0.0) if "rt_serve_step_s" in c else zero
        self.rt_serve_seq = np.where(on, float_column(c, "rt_serve_seq_s"), 0.0) if "rt_serve_seq_s" in c else zero
        self.rt_request, self.rt_attention = float_column(c, "rt_request_s"), float_column(c, "rt_attention")
        self.rt_compute = float_column(c, "rt_compute") if "rt_compute" in c else np.ones(len(self.H))
        self.rt_memory = float_column(c, "rt_memory") if "rt_memory" in c else np.ones(len(self.H))
        if "rt_memory_moe" in c:
            self.rt_memory = np.where(self.E > 0, float_column(c, "rt_memory_moe"), self.rt_memory)
        # the run's software release: its served kernels' speed relative to the newest measured (1.0)
        # (per model family: a release's MoE kernels and its dense ones changed apart)
        one = np.ones(len(self.H))
        self.rt_release = np.where(self.E > 0,
                                   float_column(c, "rt_release_moe") if "rt_release_moe" in c else one,
                                   float_column(c, "rt_release_dense") if "rt_release_dense" in c else one)
        # ... and its fixed per-step costs (launches, host step, front end) relative to the newest's
        self.rt_latency = np.where(self.E > 0,
                                   float_column(c, "rt_latency_moe") if "rt_latency_moe" in c else one,
                                   float_column(c, "rt_latency_dense") if "rt_latency_dense" in c else one)
        attn_params = attention_params_per_layer(c)  # (param_counts' per-layer attention weights too)
        self.counts = param_counts(c, attn_params)
        self.n_moe = np.where(self.E > 0, self.L - float_column(c, "dense_layers"), 0.0)
        self.n_dense = self.L - self.n_moe
        # kernels one layer launches (averaged over dense and MoE layers): the qkv and o
        # GEMMs, attention, the small kernels, an MLA layer's 3 extra (MLA_EXTRA_KERNELS), two all-reduces
        # at tp > 1, the dense MLP's two GEMMs or
        # the MoE layer's (router, two grouped GEMMs, routing/permute/unpermute, shared experts,
        # dispatch + combine under attention DP).  A runtime that fuses the residual add + RMSNorm
        # into its tensor-parallel all-reduces (fusion.allreduce_norm) launches the layer's two norms
        # inside those two kernels.  A function of the shape and deployment only: counted once here.
        self.wd, self.wm = wd, wm = self.n_dense / self.L, self.n_moe / self.L  # layer shares
        tp_ar = self.t > 1
        fused_norms = np.where(self.rt_ar_norm & tp_ar & (self.dp == 1), 2.0, 0.0)
        shared = self.Es * self.Fs / self.t > 0
        self.kernels_per_layer = (2.0 + 1.0 + ELEMENTWISE_KERNELS_PER_LAYER - fused_norms + np.where(tp_ar, 2.0, 0.0)
                                  + np.where(self.mla, MLA_EXTRA_KERNELS, 0.0)
                                  + wd * 2.0 + wm * (3.0 + MOE_EXTRA_KERNELS + np.where(shared, 2.0, 0.0)
                                                     + np.where((self.e > 1) & (self.dp > 1), 2.0, 0.0)))
        self.Ls = np.ceil(self.L / self.p)  # layers on the worst stage
        self.nq_loc = self.nq / self.t
        kv_heads_loc = np.ceil(self.nkv / self.t)
        self.kv_loc = np.where(self.mla, kv_elements_per_token_layer(c), 2.0 * self.d * kv_heads_loc)
        o_params = self.nq * self.d * self.H
        gqa_in = (self.nq_loc + 2.0 * kv_heads_loc) * self.d
        self.n_in = np.where(self.mla, (attn_params - o_params) / self.H / self.t, gqa_in)
        self.te = self.t * self.dp / self.e  # ways each expert is split
        self.E_loc = np.where(self.E > 0, self.E / self.e, 0.0)
        #: figures the step functions derive from these columns alone (see :meth:`once`)
        self._once: dict = {}
        # per-GPU output / reduction widths of the layer GEMMs (explorer/engine/layer_step.py plan_step):
        # functions of the shape and deployment only, so computed once per call
        shared_w = self.Es * self.Fs / self.t
        self.gemm_nk = {"qkv": self.n_in, "o": self.nq_loc * self.d, "up": self.g * self.F / self.t,
                        "down": self.F / self.t, "eup": self.g * self.Fe / self.te, "edown": self.Fe / self.te,
                        "sup": self.g * shared_w, "sdown": shared_w, "lm": self.V / self.t}
        # speculative decoding / MTP (explorer/speculative.py): None unless the table asks for it;
        # ``draft`` is the per-GPU view of the draft (one MTP layer, or the draft model)
        self.spec_k = float_column(c, "spec_k") if speculative.active(c) else None
        drafting = self.spec_k is not None and bool(np.any(self.spec_k > 0))
        self.draft = ShapeColumns(speculative.draft_design(c)) if drafting else None
        if self.spec_k is not None:
            self.spec_tokens, self.spec_kind, self.spec_mtp = (float_column(c, k) for k in ("spec_tokens", "spec_draft",
                                                                                     "spec_mtp"))

    def once(self, name: str, compute: Callable[[], Any], *inputs: object) -> Any:
        """``compute()`` the first time ``name`` is asked for with these ``inputs`` (the same objects),
        its stored result after: for figures that depend on this object's columns and those inputs
        only, which every closed-loop pass and step plan would otherwise recompute.  The entry keeps
        the inputs alive, so that no other object can take their ids while it lives."""
        key = (name, *map(id, inputs))
        if key not in self._once:
            self._once[key] = (inputs, compute())
        return self._once[key][1]
