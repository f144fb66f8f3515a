"""Real models on the map: the Pareto fronts of model presets over a small deployment grid.

A sweep's frontier means little on its own: "is 12,000 tokens/s/GPU at 80 tokens/s/user good?"
The answer is the same chart with known models on it.  :func:`reference_fronts` scores each preset
with the same vectorized simulator over a fixed deployment grid and keeps each preset's front.

The grid (:data:`TP`, :data:`PP`, :data:`BATCH`; MoE presets also :data:`EP` and :data:`DP`) is
small on purpose: powers of two up to 8 GPUs per parallel dimension and batches 1..2048.  A real
deployment tool searches more (odd batches, disaggregated serving, speculative decoding), so a
reference front is a fair but not an optimal placement of the preset.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from explorer.design import build_design
from explorer.frontier import front_table
from explorer.model import get_preset, param_counts, presets
from explorer.results import OBJECTIVES, results_frame
from explorer.simulate import simulate

TP = (1, 2, 4, 8)
PP = (1, 2, 4, 8)
EP = (1, 2, 4, 8)  # MoE presets only (dense: 1)
DP = (1, 2, 4, 8)  # MoE presets only: attention data parallelism, so that ep can reach tp*dp
BATCH = tuple(int(b) for b in 2 ** np.arange(12))  # 1 .. 2048

#: Presets drawn when the caller names none and the front's size cannot be measured.
DEFAULT_PRESETS = ("llama-3.1-70b", "llama-3.1-8b")


def _grid(moe: bool) -> dict[str, np.ndarray]:
    eps, dps = (EP, DP) if moe else ((1,), (1,))
    rows = np.array(list(itertools.product(TP, PP, eps, dps, BATCH)), dtype=np.int64)
    return {"tp": rows[:, 0], "pp": rows[:, 1], "ep": rows[:, 2], "dp": rows[:, 3], "batch": rows[:, 4]}


def reference_fronts(
    presets: Sequence[str],
    hardware: Sequence[str],
    isl: int,
    osl: int,
    precisions: Iterable[str],
) -> pd.DataFrame:
    """The Pareto front of each (preset, hardware) over the deployment grid and ``precisions``.

    Returns a results table (the columns of :func:`explorer.results.results_frame`) holding only
    front rows, plus ``reference`` (the preset's canonical name) and ``reference_label`` (its
    display name, with the hardware when several are given), sorted by preset, hardware and
    interactivity.  ``df.attrs["skipped"]`` lists ``{"preset", "hardware", "reason"}`` for every
    pair with no feasible point on the grid (e.g. a 405B model in BF16 on 8 x 80 GB), with the most
    common infeasibility reason; such pairs have no rows.

    Raises :class:`explorer.errors.SpecError` for an unknown preset, hardware or precision.
    """
    precisions = [str(p) for p in precisions] or ["bf16"]
    hardware = [str(h) for h in hardware]
    frames: list[pd.DataFrame] = []
    skipped: list[dict[str, str]] = []
    for name in dict.fromkeys(presets):
        preset = get_preset(name, "references", "presets")
        moe = preset.shape.experts > 0
        grid = _grid(moe)
        n_grid = len(grid["tp"])
        for hw in hardware:
            n = n_grid * len(precisions)
            prec = np.repeat(np.asarray(precisions, dtype=object), n_grid)
            values: dict[str, Any] = {k: np.tile(v, len(precisions)) for k, v in grid.items()}
            values.update(model=preset.shape.name, hardware=hw, precision=prec, isl=int(isl), osl=int(osl))
            design, table = build_design(values, where="references")
            res = simulate(design, table)
            df = results_frame(design, table, res, text={"model": preset.shape.name, "precision": prec})
            assert len(df) == n
            if not df["feasible"].any():
                reason = df["reason"].str.split(":").str[0].mode()
                skipped.append({"preset": preset.shape.name, "hardware": hw,
                                "reason": str(reason.iloc[0]) if len(reason) else "infeasible"})
                continue
            front = df[front_table(df, OBJECTIVES, feasible_col="feasible").to_numpy()]
            front = front.sort_values("tokens_per_s_per_user", kind="stable")
            label = preset.display_name if len(hardware) == 1 else f"{preset.display_name} on {table.kinds[0].name}"
            front = front.assign(reference=preset.shape.name, reference_label=label)
            frames.append(front)
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["reference", "reference_label", "tokens_per_s_per_user", "tokens_per_s_per_gpu"])
    out.attrs["skipped"] = skipped
    return out


def nearest_presets(params_active: float, k: int = 2, dense_only: bool = False) -> list[str]:
    """The ``k`` presets whose active parameter count is closest (in log) to ``params_active``."""
    if not np.isfinite(params_active) or params_active <= 0:
        return list(DEFAULT_PRESETS[:k])
    scored = []
    for name, p in presets().items():
        if dense_only and p.shape.experts:
            continue
        active = float(param_counts(p.shape.columns())["active"])
        scored.append((abs(np.log(active / params_active)), name))
    scored.sort()
    return [name for _, name in scored[:k]]
