"""Speculative decoding and multi-token prediction (MTP): one named model, off unless asked for.

A decode step of a speculating engine does two things for each of its ``B`` sequences:

* **draft**: ``K`` draft tokens, one after the other (each needs the previous one).  The draft is
  either the preset's own MTP module(s) -- DeepSeek-V3/R1 ship one (HF ``num_nextn_predict_layers:
  1``): a 2H -> H projection of [embedding of the last token, last hidden state], one transformer
  layer of the main model's kind (an MoE layer), and the main model's shared LM head -- run ``K``
  times over ``B`` tokens (TensorRT-LLM's "MTP autoregressive" / Eagle-style reuse of the one
  module, blog1); or a separate draft model (``--draft-model PRESET``): ``K`` decode steps of that
  model over ``B`` tokens, on the same GPUs and tensor parallelism.
* **verify**: one step of the target model over ``B*(1+K)`` tokens: the GEMMs and the LM head see
  ``B*(1+K)`` rows (after CUDA-graph padding of ``B``), attention runs ``1+K`` queries per sequence
  against its context -- the KV cache is read once per sequence, the FLOPs are ``1+K`` times.

Accepted tokens follow the chain rule: position ``i`` is kept only if positions ``1..i`` all were,
so with per-position acceptance probabilities ``a_1..a_K`` a step yields on average

    E = 1 + sum_{i=1..K} prod_{j<=i} a_j        tokens per sequence   (the bonus token included)

and ``TPOT = (T_verify + T_draft) / E``; tokens/s/user and tokens/s/GPU follow from that TPOT
(explorer/engine/engine_step.py passes the per-token step time to the closed loop).  ``E`` is what papers and
blogs call the *acceptance length* (TensorRT-LLM's blog1 "acceptance rate" 2.82 for MTP 3); given
only a length, :func:`uniform_acceptance` finds the one per-position probability that produces it.

Memory: the draft's weights (the MTP module: one layer's weights in the model's format plus the
bf16 projection; a draft model: all its weights), the draft's KV cache (one layer for MTP), and the
``K`` scratch tokens every running sequence holds in the target's KV cache.

Ignored (named): the first draft pass running over the accepted tokens rather than one token per
sequence; the MTP module processing prompt tokens during prefill; host work of the draft and of
sampling/acceptance (CUDA graphs); context growth of ``K/2`` tokens inside the verify step;
acceptance that depends on the batch, the position in the output or the data (one ``E`` per point);
the draft's own format (blog1 keeps the MTP layers in bf16: the draft here uses the model's
format); tree drafts (Medusa/EAGLE trees: a chain only); a draft model on a pipelined target runs
on the last stage, once per micro-batch.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from explorer.errors import SpecError

#: Largest number of draft tokens per step.  Published chains use 1-5 (TensorRT-LLM blog1 explored
#: MTP 1-5 and found 3 best; EAGLE chains up to 7): beyond 16 the chain's expected gain
#: ``prod a_j`` is below 2 % even at a = 0.8, while verification keeps growing (assumption).
MAX_DRAFT_TOKENS = 16
#: Draft kinds (column ``spec_draft``).
DRAFT_NONE, DRAFT_MTP, DRAFT_MODEL = 0.0, 1.0, 2.0
#: Names that select the preset's own MTP module as the draft (``deployment.draft_model: mtp``).
MTP_NAMES = ("", "mtp", "none")
#: Design columns this module adds (only when a point asks for speculation); ``draft_<shape column>``
#: columns follow when a draft model is named.
SPEC_COLUMNS = ("spec_k", "spec_tokens", "spec_draft", "spec_mtp")
DRAFT_PREFIX = "draft_"
#: Keys of a design-value mapping that turn speculation on (explorer.design.build_design).
VALUE_KEYS = ("draft_tokens", "acceptance", "acceptance_per_position", "draft_model")
#: Small kernels of one MTP pass besides its layer and head: enorm, hnorm and the shared head's norm
#: (DeepSeek-V3 MTP module, HF modeling_deepseek / TensorRT-LLM DeepseekV3MTP); each costs a launch.
MTP_NORM_KERNELS = 3.0
#: Bytes per element of the MTP projection ``eh_proj`` (bf16 in TensorRT-LLM's DeepseekV3MTP:
#: ``Linear(2H, H, dtype=torch_dtype)``, row-parallel over tensor parallelism with an all-reduce).
PROJECTION_BYTES = 2.0

ALLOWED_K = f"a whole number from 0 to {MAX_DRAFT_TOKENS}"
ALLOWED_A = "a probability in [0, 1], or a comma list with one per draft position"


def expected_tokens_per_step(acceptance: Any, draft_tokens: Any) -> np.ndarray:
    """Expected tokens a speculative step yields per sequence (the acceptance length ``E``).

    ``acceptance`` is one probability per row (the same at every position, shape ``[n]`` or a
    scalar) or a ``[n, K_max]`` matrix of per-position probabilities; ``draft_tokens`` is ``K`` per
    row.  ``E = 1 + sum_{i<=K} prod_{j<=i} a_j``; ``K = 0`` gives exactly 1."""
    k = np.atleast_1d(np.asarray(draft_tokens, dtype=np.float64))
    a = np.asarray(acceptance, dtype=np.float64)
    k_max = int(np.max(k)) if k.size else 0
    n = max(k.size, a.shape[0] if a.ndim >= 1 else 1)
    k = np.broadcast_to(k, (n,))
    if k_max == 0:
        return np.ones(n)
    if a.ndim <= 1:
        mat = np.broadcast_to(np.broadcast_to(a, (n,))[:, None], (n, k_max))
    else:
        if a.shape[1] < k_max:
            raise ValueError(f"acceptance gives {a.shape[1]} positions, draft_tokens needs {k_max}")
        mat = np.broadcast_to(a[:, :k_max], (n, k_max))
    chain = np.cumprod(mat, axis=1)
    pos = np.arange(1, k_max + 1, dtype=np.float64)
    return 1.0 + np.where(pos[None, :] <= k[:, None], chain, 0.0).sum(axis=1)


def uniform_acceptance(length: float, draft_tokens: int) -> float:
    """The per-position acceptance probability ``a`` (the same at every position) whose chain of
    ``draft_tokens`` gives the acceptance length ``length``: ``1 + a + ... + a^K = length``.
    ``length`` must lie in ``[1, 1 + K]``; solved by bisection (the sum grows with ``a``)."""
    k = int(draft_tokens)
    if k <= 0:
        raise ValueError("an acceptance length needs draft_tokens >= 1")
    if not (math.isfinite(length) and 1.0 <= length <= 1.0 + k):
        raise ValueError(f"acceptance length must be between 1 and 1 + draft_tokens = {1 + k}, got {length!r}")
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if sum(mid ** i for i in range(k + 1)) < length:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


# ----------------------------------------------------------------------------------- checking


def check_draft_tokens(v: Any, where: str, key: str | None) -> int:
    """``K`` as a whole number in ``0..MAX_DRAFT_TOKENS``, or a SpecError naming ``where``/``key``."""
    if isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating) \
            or not math.isfinite(float(v)) or float(v) != int(v) or not 0 <= int(v) <= MAX_DRAFT_TOKENS:
        raise SpecError(where, key, f"must be {ALLOWED_K}, got {v!r}")
    return int(v)


def _probability(v: Any, where: str, key: str | None) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating) \
            or not math.isfinite(float(v)) or not 0.0 <= float(v) <= 1.0:
        raise SpecError(where, key, f"must be {ALLOWED_A}, got {v!r}")
    return float(v)


def check_acceptance(acceptance: Any, draft_tokens: int, where: str, key: str | None,
                     k_flag: str = "--draft-tokens") -> tuple[float, ...]:
    """Per-position acceptance probabilities for ``draft_tokens`` positions: one number (used at
    every position) or a list of exactly ``draft_tokens`` numbers, each in ``[0, 1]``.  ``None``
    is allowed only without drafting.  Returns ``draft_tokens`` values."""
    if acceptance is None:
        if draft_tokens > 0:
            raise SpecError(where, key, f"required with {k_flag} {draft_tokens}: {ALLOWED_A}")
        return ()
    values = list(acceptance) if isinstance(acceptance, list | tuple | np.ndarray) else [acceptance]
    probs = [_probability(v, where, key) for v in values]
    if draft_tokens == 0:
        raise SpecError(where, key, f"needs {k_flag} K >= 1 (got 0); allowed: {ALLOWED_K}")
    if len(probs) == 1:
        return tuple(probs * draft_tokens)
    if len(probs) != draft_tokens:
        raise SpecError(where, key, f"gives {len(probs)} values but {k_flag} is {draft_tokens}: "
                                    f"give one value (every position) or {draft_tokens} (one per position), "
                                    f"each in [0, 1]")
    return tuple(probs)


def parse_acceptance_text(text: str) -> tuple[float, ...]:
    """``--acceptance``: ``0.8`` or ``0.9,0.8,0.7`` (argparse type; the length is checked against
    ``--draft-tokens`` afterwards)."""
    parts = [p.strip() for p in str(text).split(",")]
    out = []
    for p in parts:
        try:
            v = float(p)
        except ValueError:
            shown = text if len(text) <= 40 else text[:37] + "..."
            raise argparse.ArgumentTypeError(f"expected {ALLOWED_A}, got '{shown}'") from None
        if not (math.isfinite(v) and 0.0 <= v <= 1.0):
            raise argparse.ArgumentTypeError(f"must be {ALLOWED_A}; got {p}")
        out.append(v)
    return tuple(out)


def parse_draft_tokens_text(text: str) -> int:
    """``--draft-tokens``: a whole number ``0..MAX_DRAFT_TOKENS`` (argparse type)."""
    try:
        v = int(text)
    except ValueError:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise argparse.ArgumentTypeError(f"must be {ALLOWED_K}, got '{shown}'") from None
    if not 0 <= v <= MAX_DRAFT_TOKENS:
        raise argparse.ArgumentTypeError(f"must be {ALLOWED_K}, got {v}")
    return v


# ----------------------------------------------------------------------------------- design columns


def is_mtp_name(name: Any) -> bool:
    return name is None or str(name).strip().lower() in MTP_NAMES


def spec_columns(values: Mapping[str, Any], out: Mapping[str, np.ndarray], n: int,
                 full: Callable[[Any], np.ndarray], mtp_layers: np.ndarray, where: str,
                 shape_of: Callable[[str], Mapping[str, float]]) -> dict[str, np.ndarray]:
    """Design columns of speculative decoding (see :data:`SPEC_COLUMNS`) for ``n`` rows.

    ``values`` may hold ``draft_tokens`` (K per row), ``acceptance`` (one probability per row, the
    same at every position), ``acceptance_per_position`` (one sequence for every row, of length K),
    ``draft_model`` (preset names; ``mtp``/empty = the model's own MTP module).  ``mtp_layers`` is
    each row's MTP module count (0 for custom shapes); ``shape_of`` maps a preset name to its shape
    columns.  Raises SpecError for values outside the allowed ranges and for drafting rows that
    have neither an MTP module nor a draft model."""
    k = full(values.get("draft_tokens", 0) if values.get("draft_tokens") is not None else 0).astype(np.float64)
    bad = ~np.isfinite(k) | (k < 0) | (k > MAX_DRAFT_TOKENS) | (k != np.round(k))
    if bad.any():
        raise SpecError(where, "draft_tokens", f"must be {ALLOWED_K}, got {k[bad][0]:g}")
    per_pos = values.get("acceptance_per_position")
    acc = values.get("acceptance")
    drafting = k > 0
    if per_pos is not None:
        ks = {int(v) for v in k[drafting]}
        if len(ks) > 1:
            raise SpecError(where, "acceptance", "a per-position list needs one draft_tokens for every point")
        kk = ks.pop() if ks else 0
        probs = check_acceptance(list(per_pos), kk, where, "acceptance", "draft_tokens")
        mat = np.broadcast_to(np.asarray(probs, dtype=np.float64)[None, :], (n, len(probs)))
        e = expected_tokens_per_step(mat, np.where(drafting, k, 0.0)) if kk else np.ones(n)
    else:
        a = full(acc if acc is not None else 0.0).astype(np.float64)
        bad_a = ~np.isfinite(a) | (a < 0.0) | (a > 1.0)
        if bad_a.any():
            raise SpecError(where, "acceptance", f"must be {ALLOWED_A}, got {a[bad_a][0]:g}")
        if acc is None and drafting.any():
            raise SpecError(where, "acceptance", f"required with draft_tokens {int(k[drafting][0])}: {ALLOWED_A}")
        e = expected_tokens_per_step(a, k)
    names = full(values.get("draft_model") if values.get("draft_model") is not None else "")
    names = np.asarray(["" if is_mtp_name(x) else str(x) for x in names.tolist()], dtype=object)
    use_model = drafting & (names != "")
    use_mtp = drafting & (names == "")
    no_mtp = use_mtp & (np.asarray(mtp_layers) <= 0)
    if no_mtp.any():
        raise SpecError(where, "draft_tokens", "the model has no MTP module (num_nextn_predict_layers); name a "
                                               "draft model (--draft-model PRESET, deployment.draft_model)")
    cols = {"spec_k": np.where(drafting, k, 0.0), "spec_tokens": e,
            "spec_draft": np.where(use_model, DRAFT_MODEL, np.where(use_mtp, DRAFT_MTP, DRAFT_NONE)),
            "spec_mtp": np.where(use_mtp, np.asarray(mtp_layers, dtype=np.float64), 0.0)}
    if use_model.any():
        from explorer.model import SHAPE_COLUMNS

        uniq, inv = np.unique(names.astype(str), return_inverse=True)
        shapes = [shape_of(u) if u else None for u in uniq]
        for col in SHAPE_COLUMNS:
            per = np.array([sh[col] if sh is not None else np.nan for sh in shapes], dtype=np.float64)[inv]
            cols[DRAFT_PREFIX + col] = np.where(use_model, per, out[col])  # non-drafting rows: finite stand-ins
    return cols


def active(c: Mapping[str, Any]) -> bool:
    """Whether a design table carries speculation columns (rows with ``spec_k = 0`` are plain)."""
    return "spec_k" in c


def draft_design(c: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The design columns of the draft, row by row, for the simulator's per-GPU shape: MTP rows get
    one layer of the model's own kind (an MoE layer when the model has experts), draft-model rows
    the draft preset's shape (on the target's tensor and attention data parallelism, unpipelined,
    without expert parallelism when the draft is dense).  The speculation columns are left out."""
    from explorer.model import SHAPE_COLUMNS

    d = {k: v for k, v in c.items() if k not in SPEC_COLUMNS and not k.startswith(DRAFT_PREFIX)}
    kind = np.asarray(c["spec_draft"], dtype=np.float64)
    model = kind == DRAFT_MODEL
    if DRAFT_PREFIX + "hidden" in c:
        for col in SHAPE_COLUMNS:
            d[col] = np.where(model, np.asarray(c[DRAFT_PREFIX + col], dtype=np.float64),
                              np.asarray(c[col], dtype=np.float64))
    layers = np.asarray(d["layers"], dtype=np.float64)
    moe = np.asarray(d["experts"], dtype=np.float64) > 0
    d["layers"] = np.where(model, layers, 1.0)
    d["dense_layers"] = np.where(model, np.asarray(d["dense_layers"], dtype=np.float64),
                                 np.where(moe, 0.0, 1.0))
    sl = np.asarray(d["sliding_layers"], dtype=np.float64)
    d["sliding_layers"] = np.where(model, sl, 0.0)  # the MTP block: full attention (DeepSeek-V3)
    d["pp"] = np.ones_like(layers)
    d["ep"] = np.where(moe, np.asarray(c["ep"], dtype=np.float64), 1.0)
    return d


def projection_bytes_per_gpu(hidden: np.ndarray, tp: np.ndarray) -> np.ndarray:
    """Weights of the MTP projection ``eh_proj`` (2H x H, bf16, row-parallel over ``tp``) per GPU."""
    return PROJECTION_BYTES * 2.0 * hidden * hidden / tp


def draft_weight_bytes(d: Any, kind: np.ndarray, mtp_modules: np.ndarray, k: np.ndarray, embed_bytes: float) -> np.ndarray:
    """Draft weights per GPU (only where ``k > 0``).  ``d`` is the simulator's per-GPU view of the
    draft (explorer.engine.shape_columns.ShapeColumns over :func:`draft_design`): its ``counts``, ``t``, ``dp``, ``b_w``.
    MTP: ``mtp_modules`` x (one layer, experts sharded like the model's, + the bf16 projection),
    embedding and head shared; a draft model: all its weights, embeddings in ``embed_bytes``."""
    cnt = d.counts
    layer = d.b_w * cnt["layer_dense"] / d.t + d.b_w * cnt["expert"] / (d.t * d.dp)
    mtp = mtp_modules * (layer + projection_bytes_per_gpu(d.H, d.t))
    model = layer + embed_bytes * (cnt["embedding_in"] + cnt["embedding_out"]) / d.t
    return np.where(k > 0, np.where(kind == DRAFT_MODEL, model, mtp), 0.0)


def draft_kv_bytes(s: Any, d: Any, kind: np.ndarray, mtp_modules: np.ndarray, k: np.ndarray,
                   context_tokens: np.ndarray) -> np.ndarray:
    """Extra KV cache one running sequence holds per GPU (only where ``k > 0``): the draft's own
    cache over ``context_tokens`` + ``k`` (MTP: ``mtp_modules`` layers; a draft model: its layers)
    and the ``k`` scratch tokens of the verify step in the target's layers of the worst stage."""
    layers = np.where(kind == DRAFT_MODEL, d.L, mtp_modules)
    own = layers * d.kv_loc * d.b_kv * (context_tokens + k)
    scratch = s.Ls * s.kv_loc * s.b_kv * k
    return np.where(k > 0, own + scratch, 0.0)


def describe(draft_tokens: int, acceptance: Sequence[float], draft_model: str | None) -> dict[str, Any]:
    """JSON-ready summary of one point's speculation (for ``explorer evaluate``)."""
    e = float(expected_tokens_per_step(np.asarray([list(acceptance)]) if acceptance else 0.0, draft_tokens)[0])
    return {"draft_tokens": int(draft_tokens), "acceptance": [float(a) for a in acceptance],
            "draft": "none" if draft_tokens == 0 else (draft_model or "mtp"), "accepted_tokens_per_step": e}
