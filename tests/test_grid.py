"""Exhaustive grid: every point (small grids), the true front and reason counts (large grids),
independent of chunking and worker processes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from test_space import space_from

import explorer.grid as grid
from explorer.errors import SpecError
from explorer.frontier import front_table
from explorer.space import load_space


@pytest.fixture
def space(tmp_path):
    return load_space(space_from(tmp_path, {"shape.kv_heads": [4, 8, 16]}))


def test_small_grid_keeps_every_point(space):
    g = grid.run_grid(space, chunk=100)
    n = 3 * 3 * 3 * 3 * 4 * 2 * 2
    assert g.total == n == space.grid_size() and g.kept_all
    df = g.frame
    assert df["trial"].tolist() == list(range(n)) and (df["kept"] == "all").all()
    assert g.feasible == int(df["feasible"].sum())
    assert sum(g.reason_counts.values()) == n
    assert g.reason_counts == df["reason_code"].value_counts().sort_index().to_dict()
    # mixed radix, last axis fastest: tp alternates, hidden changes slowest
    assert df["tp"].iloc[:4].tolist() == [1, 2, 1, 2]
    assert df["hidden"].iloc[0] == 2048 and df["hidden"].iloc[-1] == 4096
    combos = df[["hidden", "ffn", "layers", "kv_heads", "batch", "precision", "tp"]].drop_duplicates()
    assert len(combos) == n


def test_large_grid_keeps_the_true_front_and_a_sample(tmp_path, monkeypatch):
    space = load_space(space_from(tmp_path, {"shape.kv_heads": [4, 8, 16], "search.grid_sample": 50}))
    full = grid.run_grid(space)  # small: all rows
    true_front = set(full.frame.loc[front_table(full.frame, space.objectives).to_numpy(), "trial"])
    monkeypatch.setattr(grid, "KEEP_ALL_MAX", 10)
    g = grid.run_grid(space, chunk=37)
    assert not g.kept_all and g.total == full.total and g.reason_counts == full.reason_counts
    front_rows = g.frame[g.frame["kept"] == "front"]
    assert set(front_rows["trial"]) == true_front
    assert set(g.frame.loc[front_table(g.frame, space.objectives).to_numpy(), "trial"]) == true_front
    assert (g.frame["kept"] == "sample").sum() + len(set(front_rows["trial"])) >= 50
    assert g.frame["trial"].is_unique and g.frame["trial"].is_monotonic_increasing
    # every kept row is scored exactly as in the full table
    merged = g.frame.merge(full.frame, on="trial", suffixes=("", "_full"))
    assert np.allclose(merged["tokens_per_s_per_gpu"], merged["tokens_per_s_per_gpu_full"])
    # chunking and worker processes change nothing
    again = grid.run_grid(space, chunk=500, workers=2)
    pd.testing.assert_frame_equal(g.frame, again.frame)


def test_grid_limits_and_float_steps(tmp_path):
    big = load_space(space_from(tmp_path, {"search.max_grid_points": 100}, name="big.yaml"))
    with pytest.raises(SpecError, match=r"search.max_grid_points: the grid has 432 points, more than the limit 100"):
        grid.run_grid(big)
    flt = load_space(space_from(tmp_path, {"deployment.moe_imbalance": {"low": 1.0, "high": 2.0}}, name="f.yaml"))
    with pytest.raises(SpecError, match="cannot be gridded"):
        grid.check_grid(flt)
    stepped = load_space(space_from(tmp_path, {"deployment.moe_imbalance": {"low": 1.0, "high": 2.0, "step": 0.5}},
                                    name="g.yaml"))
    assert grid.check_grid(stepped) == 432 * 3
    huge = load_space(space_from(tmp_path, {"deployment.batch": {"low": 1, "high": 2 * 10**9}}, name="h.yaml"))
    with pytest.raises(SpecError, match="more than the limit"):  # counted, never listed
        grid.check_grid(huge)


def test_decode_round_trip(space):
    flat = np.array([0, 5, 431, 200])
    cols = grid.decode(space, flat)
    names, values, shape = space.grid
    digits = [np.searchsorted(np.asarray(v, dtype=float), np.asarray(cols[n], dtype=float))
              if n != "precision" else np.array([list(v).index(x) for x in cols[n]])
              for n, v in zip(names, values, strict=True)]
    assert np.ravel_multi_index(digits, shape).tolist() == flat.tolist()
