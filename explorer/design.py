"""Design tables: turn user-level choices (preset or shape, hardware names, precision policies,
deployment) into the numeric columns :func:`explorer.simulate.simulate` reads.

Everything is broadcast to one length, so a single point and a million sampled points take the
same path.  Text columns (``model``, ``hardware``, ``precision``) are mapped through their unique
values, so the cost is per distinct value, not per row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, fields
from typing import Any

import numpy as np

from explorer import speculative
from explorer.errors import SpecError
from explorer.hardware import Hardware, HardwareTable, load_hardware
from explorer.model import SHAPE_COLUMNS, ModelShape, get_model, get_preset
from explorer.precision import FORMATS, TENSOR_FORMATS, compute_index, parse_precision, tensor_formats_needed
from explorer.runtime import DEFAULT_RUNTIME, Runtime, load_runtime, runtime_columns

_SHAPE_DEFAULTS = {f.name: f.default for f in fields(ModelShape) if f.name in SHAPE_COLUMNS and f.default is not MISSING}
DEPLOY_DEFAULTS: dict[str, float] = {"tp": 1, "pp": 1, "ep": 1, "dp": 1, "moe_imbalance": 1.0, "request_rate": 0.0,
                                   "disagg": 0.0, "ttft_extra_s": 0.0, "prefill_tp": 1, "prefill_pp": 1,
                                   "pool_prefill": 0, "pool_decode": 0, "latency_percentiles": 0,
                                   "isl_cv": 0.0, "osl_cv": 0.0, "batch_wait_iters": 0, "batch_wait_ratio": 0.0,
                                   "front_end": 0, "num_requests": 0, "poll_interval": 1,
                                   "max_num_tokens": 0, "allreduce_fusion": 0}
TEXT_COLUMNS = ("model", "hardware", "precision", "runtime")


def _length(values: Mapping[str, Any]) -> int:
    n = 1
    for k, v in values.items():
        a = np.asarray(v)
        if a.ndim > 1:
            raise SpecError("design", k, f"expected a scalar or 1-D array, got shape {a.shape}")
        if a.ndim == 1:
            if n not in (1, len(a)):
                raise SpecError("design", k, f"length {len(a)} does not match other columns ({n})")
            n = len(a)
    return n


def _by_identity(objs: np.ndarray) -> tuple[list[Any], np.ndarray]:
    """The distinct objects of an object column by identity (first-seen order; equal but distinct
    profiles stay apart: a calibration's candidate and the shipped one) and each row's index there."""
    items = objs.tolist()
    ids = np.fromiter(map(id, items), dtype=np.uint64, count=len(items))  # alive in ``items``: distinct
    _, first, inv = np.unique(ids, return_index=True, return_inverse=True)
    order = np.argsort(first)  # distinct objects in first-seen order
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return [items[int(first[o])] for o in order], rank[inv.reshape(-1)]


def build_design(values: Mapping[str, Any], where: str = "design") -> tuple[dict[str, np.ndarray], HardwareTable]:
    """Numeric design columns and the hardware table they index.

    ``values`` holds, as scalars or 1-D arrays: ``hardware`` (names or paths), ``precision``
    (policy names such as ``fp8``), ``isl``, ``osl``, ``batch`` (concurrent requests per replica:
    the closed loop's clients); optionally ``tp pp ep dp moe_imbalance``, ``runtime`` (profile
    names or :class:`~explorer.runtime.Runtime` objects; default :data:`DEFAULT_RUNTIME`); and
    either ``model`` (preset names) or shape columns (missing ones take :class:`ModelShape`
    defaults).  Shape columns given alongside ``model`` override the preset.  Speculative decoding
    (off unless one is given): ``draft_tokens``, ``acceptance`` (per row) or
    ``acceptance_per_position`` (one list for every row), ``draft_model`` (see
    :func:`explorer.speculative.spec_columns`).
    """
    n = _length({k: v for k, v in values.items() if k != "acceptance_per_position"})  # one list for every row
    out: dict[str, np.ndarray] = {}

    def full(v: Any) -> np.ndarray:
        a = np.asarray(v)
        return np.broadcast_to(a, (n,)) if a.ndim == 0 or len(a) == 1 else a

    # shape
    if "model" in values and values["model"] is not None:
        names = full(values["model"]).astype(str)
        uniq, inv = np.unique(names, return_inverse=True)
        shapes = [get_model(u, where, "model").columns() for u in uniq]
        for col in SHAPE_COLUMNS:
            out[col] = np.array([sh[col] for sh in shapes], dtype=np.float64)[inv]
    else:
        for col in SHAPE_COLUMNS:
            if col in values and values[col] is not None:
                continue  # taken from ``values`` below
            if col not in _SHAPE_DEFAULTS:
                raise SpecError(where, col, "required: give a model preset or this shape column")
            out[col] = np.full(n, float(_SHAPE_DEFAULTS[col]))
    for col in SHAPE_COLUMNS:
        if col in values and values[col] is not None:
            out[col] = full(values[col]).astype(np.float64).copy()
    # workload and deployment
    for col in ("isl", "osl", "batch"):
        if col not in values:
            raise SpecError(where, col, "required")
        out[col] = full(values[col]).astype(np.float64).copy()
    for col, default in DEPLOY_DEFAULTS.items():
        out[col] = full(values.get(col, default)).astype(np.float64).copy()
    for col in ("hidden", "ffn", "layers", "heads", "kv_heads", "head_dim", "vocab", "isl", "osl", "batch",
                "tp", "pp", "ep", "dp"):
        bad = ~(out[col] > 0)
        if bad.any():
            raise SpecError(where, col, f"must be > 0, got {out[col][bad][0]:g}")
    # precision
    precs = full(values.get("precision", "bf16"))
    uniq_p, inv_p = np.unique(precs.astype(str), return_inverse=True)
    parsed = [parse_precision(u, where, "precision") for u in uniq_p]
    out["b_w"] = np.array([FORMATS[p.weights].bytes_per_element for p in parsed])[inv_p]
    out["b_a"] = np.array([FORMATS[p.activations].bytes_per_element for p in parsed])[inv_p]
    out["b_kv"] = np.array([FORMATS[p.kv_cache].bytes_per_element for p in parsed])[inv_p]
    out["compute_fmt"] = np.array([compute_index(p) for p in parsed], dtype=np.int64)[inv_p]
    # weights stored in a weight-only format (dequantized inside the GEMM): hardware's eta_dequant applies
    out["w_only"] = np.array([FORMATS[p.weights].tensor is None for p in parsed], dtype=np.float64)[inv_p]
    out["fmt_mask"] = np.array(
        [sum(1 << TENSOR_FORMATS.index(f) for f in tensor_formats_needed(p)) for p in parsed], dtype=np.int64
    )[inv_p]
    # hardware
    hws = full(values["hardware"]) if "hardware" in values else None
    if hws is None:
        raise SpecError(where, "hardware", "required")
    kinds: list[Hardware]
    if hws.dtype == object and len(hws) and isinstance(hws[0], Hardware):
        kinds, out["hw_idx"] = _by_identity(hws)
    else:
        uniq_h, inv_h = np.unique(hws.astype(str), return_inverse=True)
        kinds = [load_hardware(u) for u in uniq_h]
        out["hw_idx"] = inv_h.astype(np.int64)
    # serving runtime: numeric columns per (runtime, hardware kind) pair
    rts = full(values.get("runtime", DEFAULT_RUNTIME) if values.get("runtime") is not None else DEFAULT_RUNTIME)
    rt_objs: list[Runtime]
    if rts.dtype == object and len(rts) and isinstance(rts[0], Runtime):
        rt_objs, rt_idx = _by_identity(rts)
    else:
        uniq_r, rt_idx = np.unique(rts.astype(str), return_inverse=True)
        rt_objs = [load_runtime(u, where, "runtime") for u in uniq_r]
    pair = rt_idx * len(kinds) + out["hw_idx"]
    uniq_pair, inv_pair = np.unique(pair, return_inverse=True)
    out.update(runtime_columns([rt_objs[int(q) // len(kinds)] for q in uniq_pair],
                               [kinds[int(q) % len(kinds)] for q in uniq_pair], inv_pair))
    # a deployment's own token budget per step (a launch's --max_num_tokens / --max-num-batched-tokens /
    # --chunked-prefill-size) replaces its runtime profile's where given (> 0)
    if "max_num_tokens" in out and (out["max_num_tokens"] > 0).any():
        out["rt_max_tokens"] = np.where(out["max_num_tokens"] > 0, out["max_num_tokens"], out["rt_max_tokens"])
    # a deployment's own all-reduce fusion (vLLM's pass_config fuse_allreduce_rms, SGLang's
    # --enable-flashinfer-allreduce-fusion) replaces its runtime profile's where given: 1 = the fused
    # kernel (FlashInfer's port of TensorRT-LLM's one-/two-shot all-reduce with the residual add and
    # RMSNorm in it: the profile's fusion.allreduce_norm and collectives.custom_allreduce both on),
    # -1 = NCCL's all-reduce and separate norm kernels (both off), 0 = the profile's
    if "allreduce_fusion" in out and (out["allreduce_fusion"] != 0).any():
        f = out["allreduce_fusion"]
        for k in ("rt_ar_norm", "rt_custom_ar"):
            out[k] = np.where(f > 0, 1.0, np.where(f < 0, 0.0, out[k]))
    # speculative decoding / MTP (explorer/speculative.py): ``spec_*`` columns only when asked for
    if any(values.get(k) is not None for k in speculative.VALUE_KEYS):
        out.update(_spec_columns(values, out, n, full, where))
    return out, HardwareTable(tuple(kinds))


def _spec_columns(values: Mapping[str, Any], out: dict[str, np.ndarray], n: int, full, where: str):
    """``spec_*`` (and ``draft_*``) columns: each row's MTP module count comes from its preset."""
    if "model" in values and values["model"] is not None:
        names = full(values["model"]).astype(str)
        uniq, inv = np.unique(names, return_inverse=True)
        mtp = np.array([get_preset(u, where, "model").mtp_layers for u in uniq], dtype=np.float64)[inv]
    else:
        mtp = np.zeros(n)
    return speculative.spec_columns(values, out, n, full, mtp, where,
                                    lambda name: get_model(name, where, "draft_model").columns())
