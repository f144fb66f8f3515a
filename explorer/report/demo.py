"""Synthetic sweep-like results tables (for tests, benchmarks and the documentation screenshot).

:func:`sweep_like_table` samples dense GQA shapes inside a capacity band (like a sweep with a
quality anchor, DESIGN.md section 3), random deployments, and scores them with the real
vectorized simulator, so every figure in the table comes from :func:`explorer.simulate.simulate`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from explorer.design import build_design
from explorer.frontier import front_table
from explorer.results import OBJECTIVES, results_frame
from explorer.simulate import simulate


def sweep_like_table(n: int = 500, seed: int = 0, hardware: str = "h200", isl: int = 1024, osl: int = 1024,
                     params_band: tuple[float, float] = (65e9, 75e9),
                     precisions: tuple[str, ...] = ("bf16", "fp8")) -> pd.DataFrame:
    """``n`` rows: a results table plus ``trial`` (0..n-1) and ``on_front``.

    Shapes: hidden in multiples of 512 from 6144 to 12288 (head dim 128), MLP width 2.5-4x hidden
    rounded to 64 (so some widths are misaligned), KV heads 1-16, layers chosen so the total
    parameters fall in ``params_band``.  Deployments: batch 1..2048, tp and pp 1..8 (powers of two).
    """
    rng = np.random.default_rng(seed)
    hidden = rng.choice(np.arange(6144, 12289, 512), n)
    heads = hidden // 128
    kv_heads = np.minimum(rng.choice([1, 2, 4, 8, 16], n), heads)
    kv_heads = np.where(heads % kv_heads == 0, kv_heads, 8)
    ffn = (hidden * rng.uniform(2.5, 4.0, n)).astype(np.int64) // 64 * 64
    vocab = 128256
    per_layer = hidden * (heads + 2 * kv_heads) * 128 + heads * 128 * hidden + 3 * hidden * ffn
    target = rng.uniform(params_band[0], params_band[1], n) - 2 * vocab * hidden
    layers = np.clip(np.round(target / per_layer), 4, 400).astype(np.int64)
    prec = rng.choice(np.asarray(precisions, dtype=object), n)
    values = {
        "model": "llama-3.1-8b",  # base shape only; every shape column below overrides it
        "hardware": hardware, "precision": prec, "isl": isl, "osl": osl,
        "batch": 2 ** rng.integers(0, 12, n), "tp": 2 ** rng.integers(0, 4, n), "pp": 2 ** rng.integers(0, 4, n),
        "hidden": hidden, "heads": heads, "kv_heads": kv_heads, "ffn": ffn, "layers": layers,
        "head_dim": 128, "vocab": vocab,
    }
    design, table = build_design(values, where="demo")
    res = simulate(design, table)
    df = results_frame(design, table, res, text={"model": "custom", "precision": prec})
    df.insert(0, "trial", np.arange(n))
    df["on_front"] = front_table(df, OBJECTIVES, feasible_col="feasible").to_numpy()
    return df
