"""Predicted quality: pre-training loss from published scaling laws, for any design columns.

:func:`predict_loss` is the one function: over numpy arrays of shape columns
(:data:`explorer.model.SHAPE_COLUMNS`), training tokens ``D`` and the serving number formats of
weights and activations, it returns the predicted loss L̂ (nats/token) with its band, the training
compute, and for every point which fitted ranges of the laws it leaves.  Docs: docs/quality.md.

**Modelled** (QUALITY_LAWS.md section 5, the proposed default; every constant below carries its unit
and source)::

    L̂ = L_Epoch(N_eff, D) · S_width(x) · S_mlp(r) · S_depth(R) · (1 + δ_w + δ_a)

* ``L_Epoch(N, D) = E + A/N^α + B/D^β``: the Besiroglu et al. 2024 (Epoch) refit of Chinchilla's
  "Approach 3" (arXiv 2404.10102), N = all parameters including embeddings (as Chinchilla counts).
* ``S_width(x)·S_mlp(r)``: the conditional law of Bian, Yu, Venkataraman & Park 2025 (arXiv
  2510.18245, Eq. 3, "Task 3" coefficients), normalised to 1 at its optimum: ``x = H/√N_non-emb``,
  ``r`` = MLP / attention parameters.  An MoE is scored as the dense model its effective parameters
  stand for: its attention, and the rest of ``N_eff`` (non-embedding) as MLP (each band end with
  its own N; the band is the envelope of the three estimates).
* ``S_depth(R) = 1 + c·ln(R/32)²``, ``R = H/L``: Kaplan et al. 2020 Fig. 5 aspect-ratio points.
* MoE on the same axis: ``N_eff = √(N_total·N_active)`` (central), ``N_active`` (pessimistic, the
  band's upper loss) and ``N_total`` (optimistic, the band's lower loss); a community heuristic with
  no fitted source (QUALITY_LAWS.md 3.5), so every MoE point is flagged.  Dense: the band is one value.
* ``δ_w, δ_a``: relative loss increase of serving the weights / activations in a number format,
  from published format studies (:data:`WEIGHT_FORMAT_PENALTY`, :data:`ACTIVATION_FORMAT_PENALTY`).

Outside a shape law's fitted range the factor is **held at its value at the nearest edge** (the
law is not extrapolated: a quadratic in ln x fitted on 80M-3B models says nothing about 70B) and
the point is flagged.  The base law is extrapolated in N and D (that is its purpose), flagged.

**Ignored**: data quality, tokenizer and vocabulary effects (the absolute loss is tied to
MassiveText and a 32k SentencePiece tokenizer: only *relative* differences carry over), GQA/KV
heads, MLA and sliding-window attention (no continuous loss law exists: treated as quality-neutral,
flagged), the KV-cache format, post-training (SFT/RL), and the growth of the quantization penalty
with tokens per parameter (Kumar et al. 2024, arXiv 2411.04330: over-trained models lose more to
post-training quantization; not modelled, so the format penalties are a floor for D/N ≫ 20).
Krajewski et al.'s fine-grained MoE law is not used: its fitted range (expansion 64, N ≤ 3.7B,
D ≤ 130B) excludes every MoE this tool explores (docs/quality.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from explorer.model import (
    attention_params_per_layer,
    embedding_params,
    get_preset,
    moe_layer_count,
    param_counts,
)

# ------------------------------------------------------------------------------------------------
# constants (units and sources)
# ------------------------------------------------------------------------------------------------

#: Epoch refit of Chinchilla Approach 3 (Besiroglu, Erdil, Barnett, You 2024, arXiv 2404.10102; MLE
#: cell of epoch-research/analyzing-chinchilla data_analysis.ipynb: ln A, ln B, ln E = 6.17796,
#: 7.64273, 0.59711; alpha = 0.34781, beta = 0.36585).  E in nats/token (irreducible loss);
#: A in nats·params^alpha; B in nats·tokens^beta; alpha, beta dimensionless.  Bootstrap SE:
#: E 0.0257, A 124.5, B 1293.3, alpha 0.0154, beta 0.0206 (same notebook).
EPOCH_E_NATS = 1.817
EPOCH_A = 482.01
EPOCH_B = 2085.43
EPOCH_ALPHA = 0.3478
EPOCH_BETA = 0.3658
#: Range the Epoch fit's 240 points cover (their data/svg_extracted_data.csv, from Hoffmann et al.
#: Fig. 4): total parameters, training tokens, and tokens per parameter.
EPOCH_N_RANGE = (5.7e7, 1.62e10)
EPOCH_D_RANGE = (2.5e8, 3.2e11)
EPOCH_D_PER_N_RANGE = (0.04, 341.0)

#: Bian, Yu, Venkataraman, Park 2025 (arXiv 2510.18245) Eq. 3, coefficients fitted on the 80M, 145M
#: and 297M models ("Task 3", paper section 5.1): f(x) = a0 + a1 ln x + a2/x, g(r) = b0 + b1 ln r +
#: b2/r, all dimensionless (x = d_model/sqrt(N_non-embedding), r = MLP/attention parameters).
#: Optima x* = a2/a1 = 0.080, r* = b2/b1 = 1.032 (the paper's 0.08 and 1.032).
BIAN_A = (2.697, 0.0974, 0.0078)
BIAN_B = (0.3870, 0.0063, 0.0065)
#: Where the width term is trusted: the paper's Table 1 points span x = 0.058-0.082 and its sweep
#: range was not extracted; QUALITY_LAWS.md section 5 guards 0.05-0.12 (its author's guard, not a
#: published bound).  Outside, f is held at the nearest edge.
BIAN_X_RANGE = (0.05, 0.12)
#: The paper fits only r in [0.5, 5] (outliers at 0.1 and 12.6 hurt its ranking).
BIAN_R_RANGE = (0.5, 5.0)
#: Non-embedding parameters of the models the coefficients were fitted and tested on (80M-3B).
BIAN_N_RANGE = (8.0e7, 3.0e9)

#: Kaplan et al. 2020 (arXiv 2001.08361) Fig. 5, loss increase against aspect ratio R = d_model /
#: n_layer for the largest size shown (1.5B non-embedding parameters), digitised in QUALITY_LAWS.md
#: section 2.3: (R, relative loss increase).
KAPLAN_ASPECT_POINTS_1P5B = ((4.0, 0.021), (13.0, 0.005), (27.0, 0.0), (250.0, 0.006), (700.0, 0.028))
#: Centre of the quadratic in ln R (dimensionless aspect ratio; the flat region's middle, Fig. 5).
KAPLAN_R_CENTRE = 32.0
#: Coefficient c of S_depth = 1 + c ln(R/32)^2 (dimensionless): least squares without intercept
#: through :data:`KAPLAN_ASPECT_POINTS_1P5B` (this module's refit, 0.00303; tests/test_quality.py
#: recomputes it).  QUALITY_LAWS.md's all-size fit (50M-1.5B) gives 0.0040 (RMSE 0.9 %); the 1.5B
#: points are the nearest to the sizes explored here, and reproduce Kaplan's caption ("(6, 4288)
#: within 3 % of (48, 1600)") where the all-size fit does not (+3.9 %).
KAPLAN_DEPTH_COEFF = 0.00303
#: Aspect ratios Kaplan's shape sweep covered (N <= 1.5B); outside, S_depth is held at the edge.
KAPLAN_R_RANGE = (2.0, 1700.0)
#: The flat region marked on Fig. 5 (outside it the penalty is more than noise): flagged outside.
KAPLAN_R_FLAT = (10.0, 300.0)
#: Largest (non-embedding) model in Kaplan's shape sweep.
KAPLAN_N_MAX = 1.5e9

#: Levine et al. 2020 (arXiv 2006.12467): below n_layers = log3(d_model) depth is still
#: "double-exponentially" efficient; the shape laws above assume a model past that threshold.
LEVINE_DEPTH_BASE = 3.0

#: Largest query heads per KV head with a published loss measurement: Bian et al. 2025 Table 1
#: (Surefire-1B, GQA 9, loss 2.804 against LLaMA-3.2-1B's 2.803).  Beyond it GQA is flagged.
GQA_GROUP_MAX = 9.0

#: Relative increase of pre-training loss (fraction, dimensionless) when the weights are served in
#: a number format, against bf16.  Studies measure whole policies (weights and activations); where a
#: study quantized both, its figure is split evenly between the two so mixed policies (w4a8, w8a16)
#: add up.  Sources (QUALITY_LAWS.md has no format section; these are this module's reading):
#:
#: * fp8 (E4M3 W8A8): 0.1 % for the policy -> 0.05 % each.  SmoothQuant W8A8 (Xiao et al. 2023,
#:   arXiv 2211.10438) keeps OPT-13B's WikiText-2 perplexity at 10.13 -> 10.14 (+0.04 % in loss
#:   ln ppl), rounded up; Kurtic et al. 2024 (arXiv 2411.02355) find FP8 W8A8 at least as accurate
#:   as INT8 W8A8 on Llama-3.1 8B-405B (accuracy recovery >= 99 %). [secondary reading]
#: * int8 weight-only (per-channel): 0.05 %, the weight share of W8A8 (Dettmers et al. 2022,
#:   LLM.int8(), arXiv 2208.07339: 8-bit weights without degradation up to 175B). [secondary]
#: * int4 weight-only (group 32-128): 2.2 %.  AWQ (Lin et al. 2024, arXiv 2306.00978) INT4 g128 on
#:   Llama-2-70B: WikiText-2 perplexity 3.32 -> 3.41, ln(3.41/3.32)/ln(3.32) = 2.2 % of the loss
#:   (the group-32 format here is finer, so this is an upper bound). [secondary: the llm-awq table]
#: * fp4 (NVFP4, W4A4): 1.5 % for the policy -> 0.75 % each.  NVIDIA 2025, "Pretraining LLMs with
#:   NVFP4" (arXiv 2509.25149): a 12B model trained in NVFP4 on 10T tokens ends within 1.5 %
#:   relative loss of its FP8 run; quantized training, so post-training quantization to NVFP4 may
#:   lose more. [secondary: digest of the paper]
#: * mxfp4 (E2M1 + power-of-two scale per 32): 1.5 % for the weights, **unverified**: twice NVFP4's
#:   weight share, from the qualitative findings that MXFP4's power-of-two scales "severely degrade"
#:   accuracy against NVFP4 under post-training quantization (Egiazarian/Castro et al. 2025, arXiv
#:   2509.23202).  Points served in MXFP4 are flagged.
WEIGHT_FORMAT_PENALTY: dict[str, float] = {
    "bf16": 0.0, "fp16": 0.0, "fp8": 0.0005, "int8": 0.0005, "fp4": 0.0075, "int4": 0.022,
    "mxfp4": 0.015, "mxfp4-wo": 0.015,
}
#: Same for the activations (fraction of the loss; sources as above).
ACTIVATION_FORMAT_PENALTY: dict[str, float] = {"bf16": 0.0, "fp16": 0.0, "fp8": 0.0005, "fp4": 0.0075}
#: Weight formats whose penalty no study gives as a number.
UNVERIFIED_WEIGHT_FORMATS = ("mxfp4", "mxfp4-wo")

#: FLOP per parameter per training token (forward 2 + backward 4; Kaplan et al. 2020 section 2.1).
TRAINING_FLOP_PER_PARAM_TOKEN = 6.0

#: Band estimates: which effective parameter count a loss uses (MoE; identical for dense).
ESTIMATES = ("central", "optimistic", "pessimistic")

# ------------------------------------------------------------------------------------------------
# fitted-range flags
# ------------------------------------------------------------------------------------------------

#: Bit -> (short name, what the point leaves).  ``quality_flags`` holds their OR.
RANGE_FLAGS: tuple[tuple[str, str], ...] = (
    ("N>1.6e10", "total parameters above the Epoch fit's 1.62e10"),
    ("N<5.7e7", "total parameters below the Epoch fit's 5.7e7"),
    ("D>3.2e11", "training tokens above the Epoch fit's 3.2e11"),
    ("D<2.5e8", "training tokens below the Epoch fit's 2.5e8"),
    ("D/N>341", "tokens per parameter above the Epoch fit's 341"),
    ("D/N<0.04", "tokens per parameter below the Epoch fit's 0.04"),
    ("x", "width H/sqrt(N_non-emb) outside 0.05-0.12 (width term held at the edge)"),
    ("r", "MLP/attention parameters outside 0.5-5 (MLP-share term held at the edge)"),
    ("N_shape>3e9", "non-embedding parameters above the shape law's 3e9 (Bian et al. 2025)"),
    ("R", "aspect ratio H/L outside Kaplan's flat region 10-300"),
    ("N_depth>1.5e9", "non-embedding parameters above Kaplan's shape sweep (1.5e9)"),
    ("MoE", "MoE effective parameters: sqrt(total x active) heuristic, no fitted law"),
    ("GQA", "query heads per KV head above 9 (no loss law; treated as quality-neutral)"),
    ("attention", "MLA or sliding-window attention (no loss law; treated as quality-neutral)"),
    ("format", "number-format penalty not given by a study (MXFP4)"),
    ("depth<log3(H)", "layers below Levine's depth threshold log3(H)"),
)
_BIT = {name: 1 << i for i, (name, _) in enumerate(RANGE_FLAGS)}


def range_names(flags: int) -> list[str]:
    """The short names of the fitted ranges a point leaves (from its ``quality_flags``)."""
    return [name for i, (name, _) in enumerate(RANGE_FLAGS) if int(flags) >> i & 1]


def range_text(flags: np.ndarray) -> np.ndarray:
    """``quality_ranges_left`` text per point: the short names joined by ``;`` (empty inside every
    range), computed once per distinct flag set."""
    f = np.asarray(flags, dtype=np.int64).reshape(-1)
    uniq, inv = np.unique(f, return_inverse=True)
    return np.array([";".join(range_names(int(u))) for u in uniq], dtype=object)[inv.reshape(-1)]


def describe_ranges(flags: int) -> list[str]:
    """Long descriptions of the ranges a point leaves (for ``explorer evaluate``)."""
    return [text for i, (_, text) in enumerate(RANGE_FLAGS) if int(flags) >> i & 1]


# ------------------------------------------------------------------------------------------------
# the laws
# ------------------------------------------------------------------------------------------------


def epoch_loss(n_params: Any, tokens: Any) -> np.ndarray:
    """Epoch's Chinchilla refit ``E + A/N^α + B/D^β`` (nats/token) for N parameters (embeddings
    included) trained on D tokens; defined for N, D > 0 (no range check: see :func:`predict_loss`)."""
    n = np.asarray(n_params, dtype=np.float64)
    d = np.asarray(tokens, dtype=np.float64)
    return EPOCH_E_NATS + EPOCH_A / n ** EPOCH_ALPHA + EPOCH_B / d ** EPOCH_BETA


def compute_optimal(training_flop: float) -> tuple[float, float]:
    """(N, D) minimising :func:`epoch_loss` at ``C = 6·N·D`` FLOP (closed form of the power law:
    ``N = G·(C/6)^(β/(α+β))``, ``G = (αA/(βB))^(1/(α+β))``)."""
    a, b = EPOCH_ALPHA, EPOCH_BETA
    g = (a * EPOCH_A / (b * EPOCH_B)) ** (1.0 / (a + b))
    n = g * (float(training_flop) / TRAINING_FLOP_PER_PARAM_TOKEN) ** (b / (a + b))
    return n, float(training_flop) / (TRAINING_FLOP_PER_PARAM_TOKEN * n)


def _f_width(x: np.ndarray) -> np.ndarray:
    a0, a1, a2 = BIAN_A
    return a0 + a1 * np.log(x) + a2 / x


def _g_mlp(r: np.ndarray) -> np.ndarray:
    b0, b1, b2 = BIAN_B
    return b0 + b1 * np.log(r) + b2 / r


X_OPT = BIAN_A[2] / BIAN_A[1]
R_OPT = BIAN_B[2] / BIAN_B[1]


def width_factor(x: Any) -> np.ndarray:
    """``f(x)/f(x*)`` (>= 1) with x clipped to :data:`BIAN_X_RANGE`."""
    xc = np.clip(np.asarray(x, dtype=np.float64), *BIAN_X_RANGE)
    return _f_width(xc) / _f_width(np.asarray(X_OPT))


def mlp_factor(r: Any) -> np.ndarray:
    """``g(r)/g(r*)`` (>= 1) with r clipped to :data:`BIAN_R_RANGE`."""
    rc = np.clip(np.asarray(r, dtype=np.float64), *BIAN_R_RANGE)
    return _g_mlp(rc) / _g_mlp(np.asarray(R_OPT))


def depth_factor(aspect_ratio: Any) -> np.ndarray:
    """``1 + c·ln(R/32)²`` with R clipped to :data:`KAPLAN_R_RANGE`."""
    rc = np.clip(np.asarray(aspect_ratio, dtype=np.float64), *KAPLAN_R_RANGE)
    return 1.0 + KAPLAN_DEPTH_COEFF * np.log(rc / KAPLAN_R_CENTRE) ** 2


def _format_penalty(names: Any, table: Mapping[str, float], n: int, role: str) -> np.ndarray:
    arr = np.broadcast_to(np.asarray(names, dtype=object), (n,)).astype(str)
    uniq, inv = np.unique(arr, return_inverse=True)
    missing = [u for u in uniq if u not in table]
    if missing:
        raise KeyError(f"no quality penalty for {role} format(s) {missing}; known: {sorted(table)}")
    return np.array([table[u] for u in uniq], dtype=np.float64)[inv.reshape(-1)]


def _col(c: Mapping[str, Any], k: str, n: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(c[k], dtype=np.float64), (n,))


def predict_loss(
    shape: Mapping[str, Any],
    training_tokens: Any,
    weights_format: Any = "bf16",
    activations_format: Any = "bf16",
) -> dict[str, np.ndarray]:
    """Predicted pre-training loss of design columns (see the module docstring for the law).

    ``shape`` maps every name of :data:`explorer.model.SHAPE_COLUMNS` to a scalar or 1-D array;
    ``training_tokens`` (D, tokens) and the format names (keys of :data:`WEIGHT_FORMAT_PENALTY` /
    :data:`ACTIVATION_FORMAT_PENALTY`) broadcast against them.  Returns 1-D arrays:

    * ``predicted_loss`` (nats/token, central), ``predicted_loss_low`` / ``predicted_loss_high``
      (the band: MoE effective parameters = total / active; equal to the central value for dense);
    * ``loss_base`` (the Epoch term at the central N_eff), ``shape_factor`` (width x MLP share x
      depth), ``format_factor`` (1 + δ_w + δ_a), ``params_effective`` (N_eff);
    * ``training_tokens``, ``training_flop`` (6·N_active·D, FLOP);
    * ``quality_flags`` (bit mask of :data:`RANGE_FLAGS`) and ``quality_extrapolated``
      (any flag set).
    """
    n = 1
    for v in list(shape.values()) + [training_tokens, weights_format, activations_format]:
        a = np.asarray(v)
        if a.ndim == 1 and len(a) != 1:
            n = len(a) if n == 1 else n
            if len(a) != n:
                raise ValueError(f"column lengths differ ({len(a)} vs {n})")
    c = {k: _col(shape, k, n) for k in shape}
    d = np.broadcast_to(np.asarray(training_tokens, dtype=np.float64), (n,)).copy()
    if not (np.isfinite(d) & (d > 0)).all():
        raise ValueError("training tokens must be finite and > 0")
    counts = param_counts(c)
    total, active = counts["total"], counts["active"]
    emb_in, emb_out = embedding_params(c)
    moe = c["experts"] > 0
    n_eff = np.where(moe, np.sqrt(total * active), total)
    n_pess = np.where(moe, active, total)
    emb = emb_in + emb_out

    # shape terms of the dense model each estimate stands for: this attention, the rest of its
    # (effective) non-embedding parameters as MLP (dense: exactly the shape's own x and r)
    H, L = c["hidden"], c["layers"]
    attn = attention_params_per_layer(c) * L
    other = attn + 2 * H * L + H + moe_layer_count(c) * H * c["experts"]  # attention, norms, router

    def shape_terms(n_total: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        nonemb = np.maximum(n_total - emb, 1.0)
        x_ = H / np.sqrt(nonemb)
        r_ = np.maximum(nonemb - other, 0.0) / np.maximum(attn, 1.0)
        return width_factor(x_) * mlp_factor(r_) * depth_factor(H / L), x_, r_, nonemb

    fmt = (1.0 + _format_penalty(weights_format, WEIGHT_FORMAT_PENALTY, n, "weight")
           + _format_penalty(activations_format, ACTIVATION_FORMAT_PENALTY, n, "activation"))
    shape_f, x, r, nonemb_eff = shape_terms(n_eff)
    base = epoch_loss(n_eff, d)
    central = base * shape_f * fmt
    opt = epoch_loss(total, d) * shape_terms(total)[0] * fmt
    pess = epoch_loss(n_pess, d) * shape_terms(n_pess)[0] * fmt
    # the shape factor differs between estimates, so the band is the envelope of the three
    low = np.minimum(np.minimum(opt, pess), central)
    high = np.maximum(np.maximum(opt, pess), central)
    aspect = H / L

    # fitted ranges
    flags = np.zeros(n, dtype=np.int64)

    def flag(name: str, bad: np.ndarray) -> None:
        flags[np.asarray(bad, dtype=bool)] |= _BIT[name]

    flag("N>1.6e10", n_eff > EPOCH_N_RANGE[1])
    flag("N<5.7e7", n_eff < EPOCH_N_RANGE[0])
    flag("D>3.2e11", d > EPOCH_D_RANGE[1])
    flag("D<2.5e8", d < EPOCH_D_RANGE[0])
    flag("D/N>341", d / n_eff > EPOCH_D_PER_N_RANGE[1])
    flag("D/N<0.04", d / n_eff < EPOCH_D_PER_N_RANGE[0])
    flag("x", (x < BIAN_X_RANGE[0]) | (x > BIAN_X_RANGE[1]))
    flag("r", (r < BIAN_R_RANGE[0]) | (r > BIAN_R_RANGE[1]))
    flag("N_shape>3e9", nonemb_eff > BIAN_N_RANGE[1])
    flag("R", (aspect < KAPLAN_R_FLAT[0]) | (aspect > KAPLAN_R_FLAT[1]))
    flag("N_depth>1.5e9", nonemb_eff > KAPLAN_N_MAX)
    flag("MoE", moe)
    mla = c["kv_lora_rank"] > 0
    flag("GQA", ~mla & (c["heads"] / np.maximum(c["kv_heads"], 1.0) > GQA_GROUP_MAX))
    flag("attention", mla | ((c["sliding_window"] > 0) & (c["sliding_layers"] > 0)))
    wf = np.broadcast_to(np.asarray(weights_format, dtype=object), (n,)).astype(str)
    flag("format", np.isin(wf, UNVERIFIED_WEIGHT_FORMATS))
    flag("depth<log3(H)", L < np.log(H) / np.log(LEVINE_DEPTH_BASE))
    return {
        "predicted_loss": central,
        "predicted_loss_low": low,
        "predicted_loss_high": high,
        "loss_base": base,
        "shape_factor": shape_f,
        "format_factor": fmt,
        "params_effective": n_eff,
        "training_tokens": d,
        "training_flop": TRAINING_FLOP_PER_PARAM_TOKEN * active * d,
        "quality_flags": flags,
        "quality_extrapolated": flags != 0,
    }


# ------------------------------------------------------------------------------------------------
# named models
# ------------------------------------------------------------------------------------------------


def preset_tokens(name: str, where: str = "--model", key: str | None = None) -> float | None:
    """A preset's published training tokens, or None when the vendor did not publish them."""
    return get_preset(name, where, key).training_tokens


def preset_loss(name: str, training_tokens: float | None = None, weights_format: str = "bf16",
                activations_format: str = "bf16", where: str = "--model", key: str | None = None
                ) -> dict[str, float | int | bool]:
    """:func:`predict_loss` of a preset (as released: bf16 unless formats are given), trained on
    its published tokens unless ``training_tokens`` is given; scalars.  A preset without published
    tokens needs ``training_tokens`` (:class:`~explorer.errors.SpecError` naming ``where``/``key``)."""
    from explorer.errors import SpecError

    p = get_preset(name, where, key)
    d = p.training_tokens if training_tokens is None else float(training_tokens)
    if d is None:
        known = sorted(k for k, v in _presets_with_tokens().items() if v)
        raise SpecError(where, key, f"{p.shape.name} has no published training tokens; give them explicitly "
                                    f"(models with published tokens: {', '.join(known)})")
    out = predict_loss(p.shape.columns(), d, weights_format, activations_format)
    return {k: (bool(v[0]) if v.dtype == bool else int(v[0]) if v.dtype.kind == "i" else float(v[0]))
            for k, v in out.items()}


def _presets_with_tokens() -> dict[str, bool]:
    from explorer.model import presets

    return {k: p.training_tokens is not None for k, p in presets().items()}


def loss_delta_pct(loss: Any, reference_loss: float) -> np.ndarray:
    """Relative difference to a reference loss, in percent (positive = worse than the reference)."""
    return (np.asarray(loss, dtype=np.float64) / float(reference_loss) - 1.0) * 100.0


#: Result columns :func:`predict_loss` adds to a results table (``quality_ranges_left`` is the text
#: form of ``quality_flags``).
QUALITY_COLUMNS: Sequence[str] = (
    "training_tokens", "training_flop", "params_effective", "predicted_loss", "predicted_loss_low",
    "predicted_loss_high", "quality_extrapolated", "quality_flags", "quality_ranges_left",
)


def point_quality(shape: Mapping[str, Any], training_tokens: float | None, weights_format: str,
                  activations_format: str) -> dict[str, Any]:
    """JSON-ready quality of one design point (``explorer evaluate``): ``predicted_loss`` (nats/token),
    ``predicted_loss_band`` ([optimistic, pessimistic]), ``quality_extrapolated``,
    ``quality_ranges_left`` (descriptions), ``training_tokens``, ``training_flop`` and the factors;
    every value None when the training tokens are unknown."""
    if training_tokens is None:
        return {"predicted_loss": None, "predicted_loss_band": None, "quality_extrapolated": None,
                "quality_ranges_left": None, "training_tokens": None, "training_flop": None,
                "quality": {"note": "training tokens unknown: give --training-tokens D"}}
    q = predict_loss(shape, float(training_tokens), weights_format, activations_format)
    flags = int(q["quality_flags"][0])
    return {
        "predicted_loss": float(q["predicted_loss"][0]),
        "predicted_loss_band": [float(q["predicted_loss_low"][0]), float(q["predicted_loss_high"][0])],
        "quality_extrapolated": bool(q["quality_extrapolated"][0]),
        "quality_ranges_left": describe_ranges(flags),
        "training_tokens": float(training_tokens),
        "training_flop": float(q["training_flop"][0]),
        "quality": {"loss_base": float(q["loss_base"][0]), "shape_factor": float(q["shape_factor"][0]),
                    "format_factor": float(q["format_factor"][0]),
                    "params_effective": float(q["params_effective"][0]), "quality_flags": flags,
                    "law": "Epoch refit of Chinchilla x Bian et al. 2025 shape x Kaplan aspect x format "
                           "(docs/quality.md); nats/token on the Chinchilla/MassiveText scale: compare, "
                           "do not read absolutely"},
    }
