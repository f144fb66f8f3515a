"""What every trial of a study carries for optuna-dashboard: its feasibility, the reason, and the
headline figures of its design point (or, for a shape trial, of its front's best row in the first
objective), as Optuna user attributes.  Used by the trial loop (explorer/search.py) and by the shape
scan (explorer/shapes.py), which computes a shape's attributes from the rows it scored, so that no
row is simulated twice."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from explorer.space import Evaluation, SearchSpace


#: Figures every trial carries as user attributes (optuna-dashboard's trial table and detail), with
#: the results-table column each comes from and its scale; objectives are left out (they are the
#: trial's named values already).
DASHBOARD_FIGURES = {
    "tokens_per_s_per_gpu": ("tokens_per_s_per_gpu", 1.0),
    "tokens_per_s_per_user": ("tokens_per_s_per_user", 1.0),
    "ttft_s": ("ttft_s", 1.0),
    "gpus": ("gpus", 1.0),
    "memory_GB_per_gpu": ("memory_bytes_per_gpu", 1e-9),
    "params_total_B": ("params_total", 1e-9),
    "params_active_B": ("params_active", 1e-9),
}


def trial_attrs(space: SearchSpace, ev: Evaluation) -> list[dict[str, Any]]:
    """Per trial of an evaluation: ``feasible``, ``reason`` (the results table's text, "feasible"
    for a feasible point) and the headline figures of :data:`DASHBOARD_FIGURES` that are not
    objectives, rounded to 4 significant digits.  Written as user attributes because
    optuna-dashboard 0.21 shows those, and reads neither Optuna 5's per-key constraints nor any
    feasibility; the results table is still rebuilt by re-scoring, never from these."""
    reasons = space.frame(ev)["reason"].to_numpy(dtype=object)
    figures = {k: (col, scale) for k, (col, scale) in DASHBOARD_FIGURES.items()
               if col not in space.objectives and col in ev.res}
    out = []
    for i in range(ev.n):
        ok = bool(ev.feasible[i])
        attrs: dict[str, Any] = {"feasible": ok, "reason": "feasible" if ok else str(reasons[i])}
        for k, (col, scale) in figures.items():
            v = float(ev.res[col][i]) * scale
            attrs[k] = str(v) if not np.isfinite(v) else int(v) if k == "gpus" else float(f"{v:.4g}")
        out.append(attrs)
    return out
