"""GEMM alignment of design points: which widths waste tiles or waves, and what aligning them saves.

For each design point (typically the front of a sweep) and each weight GEMM of a layer, this lists
the GEMM's dimensions after tensor/expert sharding, its tile and wave efficiency from
:func:`explorer.costs.gemm.gemm_cost` in two regimes, and the nearest aligned width:

* **step** regime: ``M`` = the point's tokens per step (decode sequences of one micro-batch and
  attention group plus the prefill tokens chunked into the same step, as the simulator runs it);
* **prefill** regime: ``M = ISL`` (one prompt alone: the compute-bound TTFT case).

GEMMs (Megatron sharding, as :mod:`explorer.simulate`): ``qkv`` (``N = (n_q/t + 2*ceil(n_kv/t))*d``;
MLA: its input projections), ``o_proj`` (``K = n_q*d/t``), ``mlp_up`` (``N = g*F/t``), ``mlp_down``
(``K = F/t``), ``expert_up``/``expert_down`` (MoE: ``N = g*F_e/s``, ``K = F_e/s`` with
``s = t*dp/ep`` ways per expert, ``M`` = expected tokens per touched expert), ``lm_head``
(``N = V/t``, once per step).

The aligned width is the nearest multiple of the N of the tile the cost model picks in the prefill
regime (where quantization costs time); "saved" is the time of the GEMM at the current width minus
at the aligned width, times its calls per output token (``ceil(L/p)*p`` layers, as the simulator's
worst stage) or per TTFT.  Negative savings mean the aligned width is wider and costs more; the
column ``width_aligned`` also says which model dimension would change (``ffn``, ``vocab``...).
K dimensions are listed for completeness but are not aligned: the cost model ignores K tails
(see :mod:`explorer.costs.gemm`), so shrinking K only removes work, which is not alignment.

Ignored: shared experts, the MoE router, attention itself (not a weight GEMM), and the effect of a
changed width on memory feasibility or model quality.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from explorer.costs.gemm import gemm_cost
from explorer.design import build_design
from explorer.model import SHAPE_COLUMNS, attention_params_per_layer
from explorer.precision import TENSOR_FORMATS

#: Bytes per element of the LM head (kept bf16, as the simulator does).
_EMBED_BYTES = 2.0

COLUMNS = (
    "point", "gemm", "M_step", "M_prefill", "N", "K", "groups", "tile", "tile_eff_step", "wave_eff_step",
    "tile_eff_prefill", "wave_eff_prefill", "width_param", "width", "width_aligned", "N_aligned",
    "saved_per_token_s", "saved_tpot_pct", "saved_ttft_s", "saved_ttft_pct",
)


class _Hw:
    """Per-row hardware arrays for :func:`gemm_cost`."""

    def __init__(self, design: dict[str, np.ndarray], table):
        idx = np.asarray(design["hw_idx"], dtype=np.int64)
        col = table.column
        self.sms = col("sms")[idx]
        self.hbm_bw = col("hbm_bw")[idx]
        self.max_split_k = col("max_split_k")[idx]
        self.eta_c = col("eta_compute")[idx]
        self.eta_m = col("eta_memory")[idx]
        self.launch = col("kernel_launch_s")[idx]
        peaks = table.peak_matrix()
        peak = peaks[idx, np.asarray(design["compute_fmt"], dtype=np.int64)]
        self.bf16 = np.nanmax(peaks[:, : TENSOR_FORMATS.index("fp8")], axis=1)[idx]
        self.peak = np.where(np.isfinite(peak), peak, self.bf16)
        n_t = max(len(h.gemm_tiles) for h in table.kinds)
        self.tiles = [
            (np.array([h.gemm_tiles[min(j, len(h.gemm_tiles) - 1)][0] for h in table.kinds], float)[idx],
             np.array([h.gemm_tiles[min(j, len(h.gemm_tiles) - 1)][1] for h in table.kinds], float)[idx])
            for j in range(n_t)
        ]

    def best(self, M, N, K, b_a, b_w, b_out, groups=1.0, peak=None):
        """(time_s, tile_eff, wave_eff, Tm, Tn) of the fastest tile, per row."""
        out = None
        for tm, tn in self.tiles:
            c = gemm_cost(M, N, K, b_a, b_w, b_out, peak_flops=self.peak if peak is None else peak,
                          hbm_bw=self.hbm_bw, sms=self.sms, tiles_m=tm[:, None], tiles_n=tn[:, None],
                          max_split_k=self.max_split_k, eta_c=self.eta_c, eta_m=self.eta_m, launch_s=0.0,
                          groups=groups)
            cand = (c.time_s, c.tile_eff, c.wave_eff, tm, tn)
            if out is None:
                out = list(cand)
            else:
                better = c.time_s < out[0]
                out = [np.where(better, a, b) for a, b in zip(cand, out, strict=True)]
        assert out is not None
        return out


def _design(df: pd.DataFrame):
    values = {c: df[c].to_numpy() for c in SHAPE_COLUMNS if c in df.columns}
    for c in ("hardware", "precision", "isl", "osl", "batch", "tp", "pp", "ep", "dp"):
        if c in df.columns:
            values[c] = df[c].to_numpy()
    if len(values) < len(SHAPE_COLUMNS) + 9 and "model" in df.columns:
        values["model"] = df["model"].to_numpy()  # preset names fill the missing shape columns
    else:
        # build_design starts from a base shape; every shape column is overridden by the table's
        values["model"] = "llama-3.1-8b"
    return build_design(values, where="alignment")


def alignment_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (design point, weight GEMM); see the module docstring.

    ``df`` is a results table (or its front); ``point`` is the row's position in ``df``.  Needs the
    shape and deployment columns of :data:`explorer.results.PARAM_COLUMNS`; rows of unknown
    hardware or precision raise :class:`explorer.errors.SpecError`.
    """
    if len(df) == 0:
        return pd.DataFrame({c: [] for c in COLUMNS})
    design, table = _design(df)
    hw = _Hw(design, table)
    f = {k: np.asarray(v, dtype=np.float64) for k, v in design.items() if k not in ("hw_idx", "compute_fmt", "fmt_mask")}
    H, F, L, V = f["hidden"], f["ffn"], f["layers"], f["vocab"]
    nq, nkv, d = f["heads"], f["kv_heads"], f["head_dim"]
    t, p, e, dp = f["tp"], f["pp"], f["ep"], f["dp"]
    B, isl, osl = f["batch"], f["isl"], f["osl"]
    b_a, b_w = f["b_a"], f["b_w"]
    g = np.where(f["gated"] > 0, 2.0, 1.0)
    E, k, Fe = f["experts"], f["experts_per_token"], f["expert_ffn"]
    mla = f["kv_lora_rank"] > 0
    # tokens per GEMM call, as explorer.engine.layer_step.step_times
    m_a = B / (p * dp)
    n_pre = m_a / osl
    M_step = m_a + n_pre * isl
    M_lm_step = m_a + n_pre
    M_pre = isl
    # layer counts per token (worst stage times p), dense vs MoE layers
    layers_tok = np.ceil(L / p) * p
    n_moe = np.where(E > 0, L - f["dense_layers"], 0.0)
    w_dense, w_moe = (L - n_moe) / L, n_moe / L
    o_params = nq * d * H
    n_in = np.where(mla, (attention_params_per_layer(f) - o_params) / H / t, (nq / t + 2.0 * np.ceil(nkv / t)) * d)
    # MoE expected tokens per touched expert
    E_safe = np.maximum(E, 1.0)

    def moe_m(T):
        E_loc = np.where(E > 0, E / e, 0.0)
        touched = E_loc * (1.0 - np.power(np.clip(1.0 - k / E_safe, 0.0, 1.0), T))
        touched = np.where(E > 0, np.maximum(touched, 1e-9), 0.0)
        return np.where(E > 0, T * k / e / np.maximum(touched, 1e-9), 0.0), touched

    me_step, touched_step = moe_m(M_step * dp)
    me_pre, touched_pre = moe_m(M_pre + 0.0 * M_step)
    te = t * dp / e
    tpot = df["tpot_s"].to_numpy(dtype=np.float64) if "tpot_s" in df.columns else np.full(len(df), np.nan)
    ttft = df["ttft_s"].to_numpy(dtype=np.float64) if "ttft_s" in df.columns else np.full(len(df), np.nan)

    # name, N, K, M_step, M_pre, groups_step, groups_pre, calls per token, b_w, b_out, aligned dim,
    # model parameter, model width per unit of the sharded dim, rows it applies to
    ones = np.ones(len(df))
    specs: list[tuple[Any, ...]] = [
        ("qkv", n_in, H, M_step, M_pre, ones, ones, layers_tok, b_w, b_a, "N", "heads+2*kv_heads", t / d, ~mla),
        ("o_proj", H, nq * d / t, M_step, M_pre, ones, ones, layers_tok, b_w, b_a, "K", "heads", t / d, ones > 0),
        ("mlp_up", g * F / t, H, M_step, M_pre, ones, ones, layers_tok * w_dense, b_w, b_a, "N", "ffn", t / g,
         w_dense > 0),
        ("mlp_down", H, F / t, M_step, M_pre, ones, ones, layers_tok * w_dense, b_w, b_a, "K", "ffn", t,
         w_dense > 0),
        ("expert_up", g * Fe / te, H, me_step, me_pre, touched_step, touched_pre, layers_tok * w_moe, b_w, b_a,
         "N", "expert_ffn", te / g, E > 0),
        ("expert_down", H, Fe / te, me_step, me_pre, touched_step, touched_pre, layers_tok * w_moe, b_w, b_a,
         "K", "expert_ffn", te, E > 0),
        ("lm_head", V / t, H, M_lm_step, 1.0 + 0.0 * M_pre, ones, ones, p, _EMBED_BYTES, 4.0, "N", "vocab", t,
         ones > 0),
    ]
    frames = []
    points = np.arange(len(df))
    for name, N, K, Ms, Mp, gs, gp, calls, bw, bout, free, param, per_n, ok in specs:
        if not np.asarray(ok).any():
            continue
        peak = hw.bf16 if name == "lm_head" else None
        bw_a = bw * ones
        ts, tile_s, wave_s, _, _ = hw.best(Ms, N, K, b_a, bw_a, bout, groups=gs, peak=peak)
        tp_, tile_p, wave_p, tm_p, tn_p = hw.best(Mp, N, K, b_a, bw_a, bout, groups=gp, peak=peak)
        row = {
            "point": points, "gemm": name, "M_step": Ms, "M_prefill": Mp, "N": N, "K": K, "groups": gs,
            "tile": [f"{int(a)}x{int(b)}" for a, b in zip(tm_p, tn_p, strict=True)],
            "tile_eff_step": tile_s, "wave_eff_step": wave_s, "tile_eff_prefill": tile_p, "wave_eff_prefill": wave_p,
            "width_param": param,
        }
        if free == "N":
            n_al = np.maximum(np.round(N / tn_p), 1.0) * tn_p
            ts_al = hw.best(Ms, n_al, K, b_a, bw_a, bout, groups=gs, peak=peak)[0]
            tp_al = hw.best(Mp, n_al, K, b_a, bw_a, bout, groups=gp, peak=peak)[0]
            row["N_aligned"] = n_al
            row["width"] = N * per_n
            row["width_aligned"] = n_al * per_n
            row["saved_per_token_s"] = (ts - ts_al) * calls
            row["saved_ttft_s"] = (tp_ - tp_al) * calls
        else:
            nan = np.full(len(df), np.nan)
            row.update(N_aligned=nan, width=K * per_n, width_aligned=nan, saved_per_token_s=nan, saved_ttft_s=nan)
        row["saved_tpot_pct"] = 100.0 * row["saved_per_token_s"] / tpot
        row["saved_ttft_pct"] = 100.0 * row["saved_ttft_s"] / ttft
        part = pd.DataFrame(row)
        frames.append(part[np.asarray(ok, dtype=bool)])
    out = pd.concat(frames, ignore_index=True)
    order = {n: i for i, n in enumerate(s[0] for s in specs)}
    out["_o"] = out["gemm"].map(order)
    out = out.sort_values(["point", "_o"], kind="stable").drop(columns="_o").reset_index(drop=True)
    return out[list(COLUMNS)]


def _span(v: pd.Series, fmt: str = "{:.4g}") -> str:
    lo, hi = float(v.min()), float(v.max())
    return fmt.format(lo) if lo == hi else f"{fmt.format(lo)}–{fmt.format(hi)}"


def alignment_summary(table: pd.DataFrame) -> pd.DataFrame:
    """:func:`alignment_table` collapsed to one row per distinct sharded GEMM shape.

    Front points that share a shape and tensor parallelism differ only in batch, so their rows
    repeat the same widths; this groups them by (gemm, N, K, width) and keeps the points
    (``points``: how many, ``first``: the lowest point number), the range of tokens per step
    (``M_step``, text), the worst efficiencies, the tile, and the largest savings.  Sorted with
    the misaligned shapes that would save the most first.
    """
    if len(table) == 0:
        return pd.DataFrame(columns=["gemm", "N", "K", "width_param", "width", "width_aligned", "N_aligned",
                                     "points", "first", "M_step", "tile", "tile_eff_step", "wave_eff_step",
                                     "tile_eff_prefill", "wave_eff_prefill", "saved_per_token_s", "saved_tpot_pct",
                                     "saved_ttft_s", "saved_ttft_pct", "misaligned"])
    keys = ["gemm", "N", "K", "width_param", "width"]
    t = table.copy()
    t["_na"] = t["N_aligned"].fillna(-1.0)
    t["_wa"] = t["width_aligned"].fillna(-1.0)
    rows = []
    for key, g in t.groupby(keys + ["_na", "_wa"], sort=False, dropna=False):
        rec = dict(zip(keys, key[: len(keys)], strict=True))
        rec["N_aligned"] = np.nan if key[-2] < 0 else key[-2]
        rec["width_aligned"] = np.nan if key[-1] < 0 else key[-1]
        rec["points"] = int(g["point"].nunique())
        rec["first"] = int(g["point"].min())
        rec["M_step"] = _span(g["M_step"])
        rec["tile"] = str(g["tile"].mode().iloc[0])
        for c in ("tile_eff_step", "wave_eff_step", "tile_eff_prefill", "wave_eff_prefill"):
            rec[c] = float(g[c].min())
        for c in ("saved_per_token_s", "saved_tpot_pct", "saved_ttft_s", "saved_ttft_pct"):
            rec[c] = float(g[c].max()) if g[c].notna().any() else np.nan
        rec["misaligned"] = bool(np.isfinite(rec["N_aligned"]) and rec["N_aligned"] != rec["N"])
        rows.append(rec)
    out = pd.DataFrame(rows)
    gain = np.fmax(out["saved_tpot_pct"].to_numpy(float), out["saved_ttft_pct"].to_numpy(float))
    out["_gain"] = np.where(out["misaligned"], np.nan_to_num(gain, nan=-np.inf), -np.inf)
    out = out.sort_values(["misaligned", "_gain", "first"], ascending=[False, False, True], kind="stable")
    return out.drop(columns="_gain").reset_index(drop=True)
