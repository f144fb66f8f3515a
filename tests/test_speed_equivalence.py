"""The simulator reproduces a frozen copy of its results from before the speed-ups of issue 12
item 1 (tests/data/speed_reference.npz, written by tests/speed_reference.py): a faster code path may
reorder work, never change a formula's result.  Also: scalar calls (one row) agree with the grid."""

from __future__ import annotations

import numpy as np
import pytest
import speed_reference as R

from explorer.design import build_design
from explorer.simulate import COMPONENTS, simulate

RTOL = 1e-9
BREAKDOWN = {f"t_{k}_s" for k in COMPONENTS}


@pytest.fixture(scope="module")
def reference():
    return np.load(R.REFERENCE)


@pytest.fixture(scope="module")
def designs():
    return {name: build_design(v, "reference") for name, v in R.tables().items()}


def _close(name: str, k: str, got, want) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (name, k)
    if want.dtype.kind in "biu":
        assert np.array_equal(got, want), (name, k, np.flatnonzero(got != want)[:10])
        return
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), (name, k)
    g, w = got[~nan], want[~nan]
    bad = ~np.isclose(g, w, rtol=RTOL, atol=0.0)
    assert not bad.any(), (name, k, int(bad.sum()), g[bad][:5], w[bad][:5])


@pytest.mark.parametrize("detail", [True, False])
@pytest.mark.parametrize("name", ["random", "runtimes", "open", "spec", "mtp"])
def test_matches_frozen_reference(reference, designs, name, detail):
    design, table = designs[name]
    res = simulate(design, table, detail=detail)
    for k in R.COLUMNS:
        if not detail and k in BREAKDOWN:
            assert np.all(np.isnan(res[k])), k  # the grid's fast path leaves the breakdown out
            continue
        _close(name, k, res[k], reference[f"{name}/{k}"])


def test_scalar_rows_match_the_grid(reference, designs):
    """One-row calls (what api.evaluate runs) agree with the vectorized call, row by row."""
    design, table = designs["random"]
    rows = np.random.default_rng(3).choice(len(design["hidden"]), 40, replace=False)
    for i in rows:
        one = simulate({k: (np.asarray(v)[i:i + 1] if np.ndim(v) else v) for k, v in design.items()}, table)
        for k in R.COLUMNS:
            _close("random", k, one[k], reference[f"random/{k}"][i:i + 1])
