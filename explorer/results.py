"""Results tables: one row per design point, every parameter, every figure, feasibility and reason.

This is the hand-off between the simulator and everything after it (search, grid, frontier,
report, validation).  Column names are the contract:

* parameters: ``model`` (preset name or ``custom``), ``hardware``, ``precision``, the shape columns
  of :data:`explorer.model.SHAPE_COLUMNS`, ``isl osl batch tp pp ep dp``;
* figures: ``tokens_per_s_per_gpu tokens_per_s_per_user ttft_s tpot_s gpus memory_bytes_per_gpu
  memory_capacity_bytes weights_bytes_per_gpu kv_bytes_per_gpu params_total params_active``;
* cost (explorer/cost.py, after the simulator): ``tokens_per_s_per_kw usd_per_million_tokens``;
* breakdown (seconds per output token): ``t_gemm_s t_attention_s t_moe_s t_comm_s t_prefill_s
  t_overhead_s``; bounds ``gemm_bound_compute`` ...;
* ``feasible`` (bool) and ``reason`` (text, empty when feasible).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from explorer.cost import add_cost
from explorer.hardware import HardwareTable
from explorer.model import SHAPE_COLUMNS
from explorer.runtime import DEFAULT_RUNTIME
from explorer.simulate import REASONS

if TYPE_CHECKING:  # pandas is imported where a frame is built: api.evaluate needs only reasons_vector
    import pandas as pd

PARAM_COLUMNS = ("model", "hardware", "precision", "runtime") + SHAPE_COLUMNS + ("isl", "osl", "batch", "tp", "pp", "ep", "dp")
OBJECTIVES = {"tokens_per_s_per_gpu": "maximize", "tokens_per_s_per_user": "maximize"}
_INT_COLUMNS = set(SHAPE_COLUMNS) | {"isl", "osl", "batch", "tp", "pp", "ep", "dp", "reason_code", "gpus"}
_DROP = {"b_w", "b_a", "b_kv", "compute_fmt", "fmt_mask", "hw_idx", "moe_imbalance", "w_only"}  # + the rt_* columns


def reasons_vector(design: Mapping[str, np.ndarray], res: Mapping[str, np.ndarray],
                   labels: Mapping[str, Any] | None = None) -> np.ndarray:
    """Reason text for every row, with the numbers that break the rule (vectorized per code).
    ``labels`` may give ``precision`` and ``hardware`` names (scalars or arrays) for the format rule."""
    code = np.asarray(res["reason_code"])
    n = len(code)
    out = np.full(n, "", dtype=object)
    labels = dict(labels or {})

    def col(k: str) -> np.ndarray:
        return np.broadcast_to(np.asarray(design[k]), (n,))

    for c in np.unique(code):
        if c == 0:
            continue
        m = code == c
        if c == 6:
            need = res["memory_bytes_per_gpu"][m] / 1e9
            cap = res["memory_capacity_bytes"][m] / 1e9
            w = res["weights_bytes_per_gpu"][m] / 1e9
            kv = res["kv_bytes_per_gpu"][m] / 1e9
            out[m] = [f"out of memory: needs {a:.1f} GB per GPU (weights {b:.1f}, KV {c_:.1f}), has {d:.1f} GB"
                      for a, b, c_, d in zip(need, w, kv, cap, strict=True)]
        elif c == 1 and "precision" in labels and "hardware" in labels:
            p = np.broadcast_to(np.asarray(labels["precision"], dtype=object), (n,))[m]
            h = np.broadcast_to(np.asarray(labels["hardware"], dtype=object), (n,))[m]
            out[m] = [f"precision '{a}' needs a number format that {b} lacks (no emulation)" for a, b in
                      zip(p, h, strict=True)]
        elif c == 2:
            out[m] = [f"tp={int(t)} does not divide heads={int(h)}/kv_heads={int(k)}" for t, h, k in
                      zip(col("tp")[m], col("heads")[m], col("kv_heads")[m], strict=True)]
        elif c == 3:
            out[m] = [f"pp={int(p)} exceeds layers={int(n_)}" for p, n_ in zip(col("pp")[m], col("layers")[m], strict=True)]
        elif c == 4:
            out[m] = [f"ep={int(e)} must divide experts={int(x)} and tp*dp={int(t * d)}" if x else
                      f"ep={int(e)} on a dense model" for e, x, t, d in
                      zip(col("ep")[m], col("experts")[m], col("tp")[m], col("dp")[m], strict=True)]
        elif c == 5:
            out[m] = [f"tp={int(t)} does not divide ffn={int(f)}" for t, f in zip(col("tp")[m], col("ffn")[m], strict=True)]
        elif c == 7:
            out[m] = [f"batch={int(b)} < pp*dp={int(p * d)} micro-batches" for b, p, d in
                      zip(col("batch")[m], col("pp")[m], col("dp")[m], strict=True)]
        else:
            out[m] = REASONS[int(c)]
    return out


def results_frame(
    design: Mapping[str, np.ndarray],
    table: HardwareTable,
    res: Mapping[str, np.ndarray],
    text: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """One DataFrame row per design point.  ``text`` supplies ``model``/``precision`` labels
    (scalars or arrays); ``hardware`` comes from the table."""
    n = len(res["feasible"])
    if "usd_per_million_tokens" not in res:  # callers that did not price the rows get the files' defaults
        res = add_cost(dict(res), design, table)
    cols: dict[str, Any] = {}
    text = dict(text or {})
    cols["model"] = np.broadcast_to(np.asarray(text.get("model", "custom"), dtype=object), (n,))
    cols["hardware"] = np.array([h.label for h in table.kinds], dtype=object)[np.asarray(design["hw_idx"], dtype=int)]
    cols["precision"] = np.broadcast_to(np.asarray(text.get("precision", ""), dtype=object), (n,))
    cols["runtime"] = np.broadcast_to(np.asarray(text.get("runtime", DEFAULT_RUNTIME), dtype=object), (n,))
    for k in PARAM_COLUMNS[4:]:
        cols[k] = np.asarray(design[k]).astype(np.int64)
    for k, v in res.items():
        if k in _DROP or k.startswith("rt_"):
            continue
        cols[k] = np.asarray(v).astype(np.int64) if k in _INT_COLUMNS else np.asarray(v)
    cols["reason"] = reasons_vector(design, res, {"precision": cols["precision"], "hardware": cols["hardware"]})
    import pandas as pd

    df = pd.DataFrame(cols)
    df["feasible"] = df["feasible"].astype(bool)
    return df
