"""Tests for explorer.frontier: Pareto masks, hypervolume, convergence curves and front comparison."""

from __future__ import annotations

import json

import moocore
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from explorer.frontier import (
    compare_fronts,
    front_table,
    hypervolume,
    hypervolume_history,
    pareto_mask,
    ratio_at_equal_x,
    ratio_at_equal_y,
    staircase,
    to_jsonable,
)

MAX2 = ["maximize", "maximize"]


# ----------------------------------------------------------------------------------------------
# reference implementations
# ----------------------------------------------------------------------------------------------


def dominates(a: np.ndarray, b: np.ndarray, directions) -> bool:
    """Hand-written Pareto dominance: a at least as good everywhere and strictly better somewhere."""
    sign = np.array([1.0 if d == "maximize" else -1.0 for d in directions])
    sa, sb = a * sign, b * sign
    return bool((sa >= sb).all() and (sa > sb).any())


def reference_mask(values, directions) -> np.ndarray:
    """O(n^2) reference: finite rows not dominated by any finite row."""
    values = np.asarray(values, dtype=float)
    n = values.shape[0]
    finite = np.isfinite(values).all(axis=1)
    out = np.zeros(n, dtype=bool)
    for i in range(n):
        if not finite[i]:
            continue
        out[i] = not any(
            finite[j] and dominates(values[j], values[i], directions) for j in range(n) if j != i
        )
    return out


def moocore_hv(values, directions, reference) -> float:
    maximise = [d == "maximize" for d in directions]
    v = np.asarray(values, dtype=float)
    if v.shape[0] == 0:
        return 0.0
    return float(moocore.hypervolume(v, ref=np.asarray(reference, dtype=float), maximise=maximise))


# ----------------------------------------------------------------------------------------------
# strategies: small integer grids produce plenty of ties and duplicates
# ----------------------------------------------------------------------------------------------

direction_st = st.sampled_from(["maximize", "minimize"])


SMALL_INTS = st.integers(-5, 5)


@st.composite
def problems(draw, m_values=(2, 3), max_n=40, coord=SMALL_INTS):
    m = draw(st.sampled_from(m_values))
    n = draw(st.integers(0, max_n))
    rows = draw(st.lists(st.lists(coord, min_size=m, max_size=m), min_size=n, max_size=n))
    directions = draw(st.lists(direction_st, min_size=m, max_size=m))
    values = np.array(rows, dtype=float).reshape(n, m)
    return values, directions


# ----------------------------------------------------------------------------------------------
# pareto_mask
# ----------------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(problems())
def test_pareto_mask_matches_reference_on_integer_grids(problem):
    values, directions = problem
    np.testing.assert_array_equal(pareto_mask(values, directions), reference_mask(values, directions))


@settings(max_examples=100, deadline=None)
@given(problems(m_values=(2, 3, 4), coord=st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)))
def test_pareto_mask_matches_reference_on_floats(problem):
    values, directions = problem
    np.testing.assert_array_equal(pareto_mask(values, directions), reference_mask(values, directions))


@pytest.mark.parametrize("m", [2, 3])
@pytest.mark.parametrize("seed", range(5))
def test_pareto_mask_random_mixed_directions(m, seed):
    rng = np.random.default_rng(seed)
    values = rng.normal(size=(200, m))
    directions = [["maximize", "minimize"][k % 2] for k in range(m)]
    np.testing.assert_array_equal(pareto_mask(values, directions), reference_mask(values, directions))


@settings(max_examples=150, deadline=None)
@given(problems(), st.randoms(use_true_random=False))
def test_pareto_mask_permutation_invariant(problem, rnd):
    values, directions = problem
    perm = list(range(values.shape[0]))
    rnd.shuffle(perm)
    perm = np.array(perm, dtype=int)
    mask = pareto_mask(values, directions)
    np.testing.assert_array_equal(pareto_mask(values[perm], directions), mask[perm])


@settings(max_examples=150, deadline=None)
@given(problems())
def test_no_front_point_is_dominated(problem):
    values, directions = problem
    mask = pareto_mask(values, directions)
    for i in np.flatnonzero(mask):
        assert not any(dominates(v, values[i], directions) for v in values)
    # and every point off the front is dominated by some front point
    front = values[mask]
    for i in np.flatnonzero(~mask):
        assert any(dominates(f, values[i], directions) for f in front)


def test_pareto_mask_empty():
    out = pareto_mask(np.empty((0, 2)), MAX2)
    assert out.dtype == bool and out.shape == (0,)


def test_pareto_mask_single_point():
    np.testing.assert_array_equal(pareto_mask([[1.0, 2.0]], MAX2), [True])


def test_pareto_mask_all_identical_points_all_kept():
    values = np.full((5, 3), 7.0)
    np.testing.assert_array_equal(pareto_mask(values, ["maximize", "minimize", "maximize"]), [True] * 5)


def test_pareto_mask_exact_duplicates_all_copies_kept():
    values = np.array([[1, 3], [1, 3], [3, 1], [2, 2], [2, 2], [1, 1]], dtype=float)
    np.testing.assert_array_equal(pareto_mask(values, MAX2), [True, True, True, True, True, False])


def test_pareto_mask_ties_on_one_axis():
    # same x: only the best y survives; same y: only the best x survives
    values = np.array([[1, 5], [1, 4], [1, 3], [4, 2], [3, 2], [2, 2]], dtype=float)
    np.testing.assert_array_equal(pareto_mask(values, MAX2), [True, False, False, True, False, False])
    # minimizing the first axis flips which tie-breaker wins on the y = 2 row
    np.testing.assert_array_equal(
        pareto_mask(values, ["minimize", "maximize"]), [True, False, False, False, False, False]
    )


def test_pareto_mask_all_dominated_by_one():
    rng = np.random.default_rng(3)
    values = np.vstack([rng.random((50, 2)), [[2.0, 2.0]]])
    expected = np.zeros(51, dtype=bool)
    expected[-1] = True
    np.testing.assert_array_equal(pareto_mask(values, MAX2), expected)
    np.testing.assert_array_equal(pareto_mask(-values, ["minimize", "minimize"]), expected)


def test_pareto_mask_nonfinite_rows_never_on_front():
    values = np.array([[np.nan, 10.0], [np.inf, 0.0], [1.0, 1.0], [0.5, -np.inf], [0.0, 2.0]])
    np.testing.assert_array_equal(pareto_mask(values, MAX2), [False, False, True, False, True])
    assert not pareto_mask([[np.nan, np.nan]], MAX2).any()


@pytest.mark.parametrize(
    "directions",
    [["maximize"], ["maximise", "minimize"], ["max", "min"], ["Maximize", "minimize"], "maximize", []],
)
def test_pareto_mask_bad_directions(directions):
    with pytest.raises(ValueError):
        pareto_mask(np.ones((3, 2)), directions)


@pytest.mark.parametrize("values", [np.ones(3), np.ones((2, 2, 2)), np.ones((3, 0)), [["a", "b"]]])
def test_pareto_mask_bad_shapes(values):
    with pytest.raises(ValueError):
        pareto_mask(values, MAX2)


def test_bad_direction_message_names_allowed_values():
    with pytest.raises(ValueError, match="maximize"):
        pareto_mask(np.ones((3, 2)), ["up", "down"])


# ----------------------------------------------------------------------------------------------
# hypervolume
# ----------------------------------------------------------------------------------------------


def test_hypervolume_hand_computed():
    assert hypervolume([[1, 3], [2, 2], [3, 1]], MAX2) == pytest.approx(6.0)
    assert hypervolume([[2, 5]], MAX2) == pytest.approx(10.0)
    assert hypervolume([[2, 5]], MAX2, reference=[1, 1]) == pytest.approx(4.0)
    # a dominated point changes nothing
    assert hypervolume([[1, 3], [2, 2], [3, 1], [1, 1]], MAX2) == pytest.approx(6.0)
    # minimize both w.r.t. (4, 4): boxes [1,4]x[3,4] U [2,4]x[2,4] U [3,4]x[1,4] = 3 + 2 + 1
    assert hypervolume([[1, 3], [2, 2], [3, 1]], ["minimize", "minimize"], [4, 4]) == pytest.approx(6.0)
    # mixed: maximize x from 0, minimize y from 4: [0,2]x[1,4] = 6
    assert hypervolume([[2, 1]], ["maximize", "minimize"], [0, 4]) == pytest.approx(6.0)
    # 3-D unit cubes: (1,1,2) and (2,1,1) overlap in a 1x1x1 cube -> 2 + 2 - 1
    assert hypervolume([[1, 1, 2], [2, 1, 1]], ["maximize"] * 3) == pytest.approx(3.0)


def test_hypervolume_points_not_strictly_better_than_reference_contribute_nothing():
    assert hypervolume([[0, 5], [5, 0], [-1, 3]], MAX2) == 0.0
    assert hypervolume([[0, 5], [2, 5]], MAX2) == pytest.approx(10.0)
    assert hypervolume(np.empty((0, 2)), MAX2) == 0.0
    assert hypervolume([[np.nan, 5], [np.inf, 1], [1, 1]], MAX2) == pytest.approx(1.0)


def test_hypervolume_reference_rules():
    with pytest.raises(ValueError, match="reference"):
        hypervolume([[1, 1]], ["maximize", "minimize"])
    with pytest.raises(ValueError):
        hypervolume([[1, 1]], MAX2, reference=[0, 0, 0])
    with pytest.raises(ValueError):
        hypervolume([[1, 1]], MAX2, reference=[0, np.nan])


@settings(max_examples=100, deadline=None)
@given(problems(m_values=(2, 3)))
def test_hypervolume_matches_moocore(problem):
    values, directions = problem
    ref = np.array([-6.0 if d == "maximize" else 6.0 for d in directions])
    assert hypervolume(values, directions, ref) == pytest.approx(moocore_hv(values, directions, ref))


# ----------------------------------------------------------------------------------------------
# hypervolume_history
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("directions", [MAX2, ["maximize", "minimize"], ["minimize", "minimize"]])
def test_history_matches_moocore_prefixes(seed, directions):
    rng = np.random.default_rng(seed)
    values = rng.random((300, 2))
    if seed % 2:
        values = np.round(values * 10) / 10  # ties and duplicates
    ref = np.array([0.0 if d == "maximize" else 1.0 for d in directions])
    hist = hypervolume_history(values, directions, ref)
    expected = [moocore_hv(values[: i + 1], directions, ref) for i in range(len(values))]
    np.testing.assert_allclose(hist, expected, rtol=1e-9, atol=1e-12)


@settings(max_examples=150, deadline=None)
@given(problems(m_values=(2, 3)))
def test_history_monotone_and_ends_at_hypervolume(problem):
    values, directions = problem
    ref = np.array([-3.0 if d == "maximize" else 3.0 for d in directions])
    hist = hypervolume_history(values, directions, ref)
    assert hist.shape == (values.shape[0],)
    assert (np.diff(hist) >= 0).all()
    if values.shape[0]:
        assert hist[-1] == pytest.approx(hypervolume(values, directions, ref), abs=1e-9)
        prefix = [moocore_hv(values[: i + 1], directions, ref) for i in range(values.shape[0])]
        np.testing.assert_allclose(hist, prefix, rtol=1e-9, atol=1e-9)


def test_history_hand_computed_and_order():
    values = np.array([[1, 3], [1, 1], [3, 1], [2, 2]], dtype=float)
    np.testing.assert_allclose(hypervolume_history(values, MAX2), [3, 3, 5, 6])
    # order gives trial numbers: process rows 3, 2, 1, 0
    np.testing.assert_allclose(hypervolume_history(values, MAX2, order=[9, 8, 7, 6]), [4, 5, 5, 6])
    with pytest.raises(ValueError):
        hypervolume_history(values, MAX2, order=[1, 2])


def test_history_skips_nonfinite_and_empty():
    values = np.array([[np.nan, 3], [2, 2], [np.inf, 9]])
    np.testing.assert_allclose(hypervolume_history(values, MAX2), [0, 4, 4])
    assert hypervolume_history(np.empty((0, 2)), MAX2).shape == (0,)


def test_history_10k_points_is_fast_and_correct():
    import time

    rng = np.random.default_rng(7)
    values = rng.random((10_000, 2))
    t0 = time.perf_counter()
    hist = hypervolume_history(values, MAX2)
    elapsed = time.perf_counter() - t0
    assert hist[-1] == pytest.approx(hypervolume(values, MAX2), rel=1e-9)
    for i in (0, 9, 99, 999, 4999):
        assert hist[i] == pytest.approx(moocore_hv(values[: i + 1], MAX2, [0, 0]), rel=1e-9)
    assert elapsed < 5.0  # generous: the target is well under a second


# ----------------------------------------------------------------------------------------------
# front_table
# ----------------------------------------------------------------------------------------------


def test_front_table_feasibility_and_index_alignment():
    df = pd.DataFrame(
        {
            "tps_user": [10.0, 20.0, 30.0, 40.0, 5.0],
            "tps_gpu": [100.0, 90.0, 50.0, 500.0, 10.0],
            "feasible": [True, True, True, False, True],
        },
        index=["a", "b", "c", "d", "e"],
    )
    objectives = {"tps_user": "maximize", "tps_gpu": "maximize"}
    out = front_table(df, objectives)
    assert out.dtype == bool and list(out.index) == list(df.index)
    # d would dominate everything but is infeasible
    assert out.to_dict() == {"a": True, "b": True, "c": True, "d": False, "e": False}
    everything = front_table(df, objectives, feasible_col=None)
    assert everything.to_dict() == {"a": False, "b": False, "c": False, "d": True, "e": False}


def test_front_table_missing_columns_and_nan_feasible():
    df = pd.DataFrame({"x": [1.0, 2.0], "y": [2.0, 1.0], "feasible": [True, None]})
    out = front_table(df, {"x": "maximize", "y": "maximize"})
    assert out.tolist() == [True, False]
    with pytest.raises(ValueError, match="feasib"):
        front_table(df.drop(columns="feasible"), {"x": "maximize", "y": "maximize"})
    with pytest.raises(ValueError, match="z"):
        front_table(df, {"x": "maximize", "z": "maximize"})
    with pytest.raises(ValueError):
        front_table(df, {"x": "up"})
    empty = front_table(df.iloc[:0], {"x": "maximize"})
    assert empty.shape == (0,)


# ----------------------------------------------------------------------------------------------
# staircase and ratios
# ----------------------------------------------------------------------------------------------


def test_staircase_hand_computed():
    front = np.array([[30, 1], [10, 5], [20, 3], [20, 2], [5, 4]], dtype=float)
    xs, ys = staircase(front)
    np.testing.assert_array_equal(xs, [5, 10, 20, 30])
    np.testing.assert_array_equal(ys, [5, 5, 3, 1])
    xs, ys = staircase(np.empty((0, 2)))
    assert xs.shape == ys.shape == (0,)


def test_ratio_at_equal_x_scaled_front_is_exactly_two():
    front_a = np.array([[10, 1000], [20, 800], [50, 400], [100, 100]], dtype=float)
    front_b = front_a * [1.0, 0.5]
    r = ratio_at_equal_x(front_a, front_b, n=200)
    assert r["overlap"] is True
    assert r["x_grid"].shape == (200,) and r["x_grid"][0] == 10 and r["x_grid"][-1] == 100
    np.testing.assert_array_equal(r["ratio"], np.full(200, 2.0))
    assert r["min"] == r["median"] == r["max"] == 2.0
    # axes swapped: B = A with interactivity halved -> interactivity ratio 2 at every throughput
    ry = ratio_at_equal_y(front_a, front_a * [0.5, 1.0], n=50)
    assert ry["overlap"] is True
    np.testing.assert_array_equal(ry["ratio"], np.full(50, 2.0))
    assert ry["y_grid"][0] == 100 and ry["y_grid"][-1] == 1000


def test_ratio_at_equal_x_partial_overlap_hand_computed():
    # A covers x in [10, 100], B covers x in [40, 400]; overlap [40, 100].
    front_a = np.array([[10, 900], [40, 600], [100, 300]], dtype=float)
    front_b = np.array([[40, 200], [80, 150], [400, 50]], dtype=float)
    r = ratio_at_equal_x(front_a, front_b, n=3)
    # log grid from 40 to 100 with 3 points: 40, sqrt(4000), 100
    np.testing.assert_allclose(r["x_grid"], [40, np.sqrt(4000.0), 100])
    assert r["x_grid"][0] == 40 and r["x_grid"][-1] == 100
    # x=40: A gives 600 (point at 40), B gives 200 -> 3
    # x=63.2: A gives 300 (only x=100 reaches it), B gives 150 (x=80) -> 2
    # x=100: A gives 300, B gives 50 (only x=400 reaches it) -> 6
    np.testing.assert_allclose(r["ratio"], [3.0, 2.0, 6.0])
    assert r["min"] == pytest.approx(2.0) and r["max"] == pytest.approx(6.0)
    assert r["median"] == pytest.approx(3.0)
    assert r["x_at_min"] == pytest.approx(np.sqrt(4000.0)) and r["x_at_max"] == 100


def test_ratio_no_overlap():
    front_a = np.array([[1, 10], [2, 5]], dtype=float)
    front_b = np.array([[3, 10], [4, 5]], dtype=float)
    r = ratio_at_equal_x(front_a, front_b)
    assert r["overlap"] is False
    assert r["x_grid"].size == 0 and r["ratio"].size == 0
    assert r["min"] is None and r["median"] is None and r["max"] is None
    assert r["x_at_min"] is None and r["x_at_max"] is None
    ry = ratio_at_equal_y(np.array([[1, 1], [2, 2]]), np.array([[1, 3], [2, 4]]))
    assert ry["overlap"] is False and ry["y_at_min"] is None


def test_ratio_single_point_overlap():
    r = ratio_at_equal_x(np.array([[5.0, 10.0]]), np.array([[5.0, 4.0]]), n=4)
    assert r["overlap"] is True
    np.testing.assert_array_equal(r["x_grid"], [5.0] * 4)
    np.testing.assert_array_equal(r["ratio"], [2.5] * 4)


# ----------------------------------------------------------------------------------------------
# compare_fronts and JSON
# ----------------------------------------------------------------------------------------------


def test_compare_fronts_hand_computed():
    a = np.array([[1, 3], [2, 2], [3, 1], [1, 1]], dtype=float)  # last point dominated
    b = np.array([[1, 1.5], [2, 1], [3, 0.5]], dtype=float)  # a with y halved
    out = compare_fronts(a, b, n=10)
    assert out["hypervolume_a"] == pytest.approx(6.0)
    assert out["hypervolume_b"] == pytest.approx(3.0)
    assert out["hypervolume_union"] == pytest.approx(6.0)
    assert out["dominance"] == {"a_dominated_by_b": 0.0, "b_dominated_by_a": 1.0}
    assert out["n_front_a"] == 3 and out["n_front_b"] == 3
    np.testing.assert_allclose(out["equal_x"]["ratio"], 2.0)
    text = json.dumps(to_jsonable(out), allow_nan=False)
    back = json.loads(text)
    assert back["equal_x"]["min"] == 2.0 and len(back["equal_x"]["x_grid"]) == 10


def test_compare_fronts_partial_dominance_and_ties():
    a = np.array([[1, 4], [2, 3], [4, 1]], dtype=float)
    b = np.array([[1, 4], [3, 3], [4, 0.5]], dtype=float)
    out = compare_fronts(a, b)
    # (2,3) in A is dominated by (3,3) in B; (1,4) equal in both is not dominated; (4,1) beats (4,0.5)
    assert out["dominance"]["a_dominated_by_b"] == pytest.approx(1 / 3)
    assert out["dominance"]["b_dominated_by_a"] == pytest.approx(1 / 3)


@settings(max_examples=100, deadline=None)
@given(
    problems(m_values=(2,), max_n=15, coord=st.integers(1, 6)),
    problems(m_values=(2,), max_n=15, coord=st.integers(1, 6)),
)
def test_compare_fronts_dominance_matches_reference(pa, pb):
    a, b = pa[0], pb[0]
    out = compare_fronts(a, b, n=5)
    fa, fb = a[reference_mask(a, MAX2)], b[reference_mask(b, MAX2)]

    def share(p, q):
        if len(p) == 0:
            return None
        return sum(any(dominates(y, x, MAX2) for y in q) for x in p) / len(p)

    assert out["dominance"]["a_dominated_by_b"] == pytest.approx(share(fa, fb))
    assert out["dominance"]["b_dominated_by_a"] == pytest.approx(share(fb, fa))
    json.dumps(to_jsonable(out), allow_nan=False)


def test_to_jsonable_types():
    d = {
        1: np.float32(1.5),
        "a": np.arange(3),
        "b": (np.bool_(True), None, float("nan"), np.inf),
        "c": {"d": np.array([[1.0, np.nan]])},
    }
    assert to_jsonable(d) == {
        "1": 1.5,
        "a": [0, 1, 2],
        "b": [True, None, None, None],
        "c": {"d": [[1.0, None]]},
    }
    with pytest.raises(TypeError):
        to_jsonable({"x": object()})
