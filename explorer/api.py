"""Scoring one design point from Python or the CLI: the same vectorized simulator, one row."""

from __future__ import annotations

from typing import Any

import numpy as np

from explorer.design import build_design
from explorer.errors import SpecError
from explorer.hardware import load_hardware
from explorer.model import ModelShape, get_preset
from explorer.precision import parse_precision
from explorer.results import reasons_vector
from explorer.runtime import DEFAULT_RUNTIME, load_runtime
from explorer.simulate import COMPONENTS, MAX_BATCH_GRID, REASONS, simulate


def _shape_values(model: str | ModelShape | None, shape: dict[str, Any] | None) -> dict[str, Any]:
    vals: dict[str, Any] = {}
    if isinstance(model, ModelShape):
        vals.update(model.validate().columns())
    elif model is not None:
        vals["model"] = get_preset(model).shape.name
    if shape:
        vals.update({k: v for k, v in shape.items() if v is not None})
    if not vals:
        raise SpecError("evaluate", "model", "give a preset name or a custom shape")
    return vals


def evaluate(
    model: str | ModelShape | None = None,
    hardware: str = "h200",
    *,
    batch: int | str = 1,
    isl: int = 1024,
    osl: int = 1024,
    tp: int = 1,
    pp: int = 1,
    ep: int = 1,
    dp: int = 1,
    precision: str = "bf16",
    shape: dict[str, Any] | None = None,
    runtime: str = DEFAULT_RUNTIME,
    hw_override=None,
) -> dict[str, Any]:
    """Score one design point; ``batch`` is the number of concurrent requests (closed-loop
    clients); ``batch='max'`` picks the highest-throughput feasible one.

    Returns a JSON-ready dict: the figures, ``feasible``/``reason``, parameters, memory, the
    steady-state ``decode_batch`` and the per-component ``breakdown`` (seconds per output token of
    one sequence).
    """
    hw = hw_override or load_hardware(hardware)
    rt = load_runtime(runtime)
    prec = parse_precision(precision)
    vals = _shape_values(model, shape)
    base = dict(vals, hardware=np.array([hw], dtype=object), precision=prec.label,
                isl=isl, osl=osl, tp=tp, pp=pp, ep=ep, dp=dp, runtime=np.array([rt], dtype=object))
    if isinstance(batch, str):
        if batch != "max":
            raise SpecError("--batch", None, f"expected a positive whole number or 'max', got '{batch}'")
        batch_value, search = _best_batch(base, rt.max_batch)
    else:
        if int(batch) <= 0:
            raise SpecError("--batch", None, f"must be > 0, got {batch}")
        batch_value, search = int(batch), None
    base["batch"] = batch_value
    design, table = build_design(base, "evaluate")
    res = simulate(design, table)
    out = {k: (v[0].item() if isinstance(v, np.ndarray) else v) for k, v in res.items()}
    out["feasible"] = bool(out["feasible"])
    out["reason"] = str(reasons_vector(design, res, {"precision": prec.label, "hardware": hw.name})[0])
    out["batch"] = batch_value
    out["breakdown"] = {k: out.pop(f"t_{k}_s") for k in COMPONENTS}
    out["bounds"] = {
        "gemm": "compute" if out.pop("gemm_bound_compute") else "memory",
        "moe": "compute" if out.pop("moe_bound_compute") else "memory",
        "attention": "compute" if out.pop("attention_bound_compute") else "memory",
        "comm": "network",
        "overhead": "latency",
        "prefill": "compute",
    }
    out["hardware"] = hw.name
    out["precision"] = prec.label
    out["runtime"] = rt.name
    out["model"] = model.name if isinstance(model, ModelShape) else (get_preset(model).shape.name if model else "custom")
    out["shape"] = {k: design[k][0].item() for k in design if k in ModelShape.__dataclass_fields__}
    out["deployment"] = {"tp": tp, "pp": pp, "ep": ep, "dp": dp, "isl": isl, "osl": osl}
    if search is not None:
        out["batch_search"] = search
    return out


def _best_batch(base: dict[str, Any], max_batch: int) -> tuple[int, dict[str, Any]]:
    """Highest-throughput feasible concurrency among :data:`MAX_BATCH_GRID` and the memory maximum
    (the smallest one where several tie: beyond the running-batch cap requests only queue)."""
    probe = dict(base, batch=1)
    d1, t1 = build_design(probe, "evaluate")
    r1 = simulate(d1, t1)
    groups = float(d1["dp"][0]) * float(d1["pp"][0])
    free = float(r1["memory_capacity_bytes"][0] - (r1["memory_bytes_per_gpu"][0] - r1["kv_bytes_per_gpu"][0]))
    kv_seq = float(r1["kv_bytes_per_seq_per_gpu"][0])
    dp = float(d1["dp"][0])
    mem_max = int(max(1, np.floor(free / kv_seq * dp))) if kv_seq > 0 else int(MAX_BATCH_GRID[-1])
    cands = np.unique(np.concatenate([MAX_BATCH_GRID, [mem_max, max(1, mem_max - 1)]])).astype(np.int64)
    cands = cands[cands >= groups] if np.any(cands >= groups) else np.array([int(groups)])
    d, t = build_design(dict(base, batch=cands), "evaluate")
    r = simulate(d, t)
    tps = np.asarray(r["tokens_per_s_per_gpu"], dtype=np.float64)
    thr = np.where(np.asarray(r["feasible"], dtype=bool) & np.isfinite(tps), tps, -1.0)
    best = thr.max()  # -1 when no candidate is feasible: the smallest candidate is reported
    i = int(np.flatnonzero(thr >= best - abs(best) * 1e-9)[0])
    return int(cands[i]), {
        "candidates": int(len(cands)),
        "memory_limited_batch": mem_max,
        "limits": {"max_running_requests": max_batch},
        "any_feasible": bool(r["feasible"].any()),
    }


__all__ = ["evaluate", "REASONS"]
