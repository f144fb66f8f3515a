"""The joint fit's grouped finite-difference Jacobian (explorer/calibrate.py grouped_jacobian).

Parameters that move disjoint residual rows are stepped together (Curtis-Powell-Reid); the matrix
must be exactly scipy's dense 2-point one with the same relative step, bounds included."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize._numdiff import approx_derivative  # the reference: scipy's own 2-point scheme

import explorer.calibrate as cal


def _problem():
    # 5 rows driven by a "hardware" parameter (x0, every row) and two "runtimes" (x1 rows 0-1, x2 rows
    # 2-4), plus one prior row per parameter, as in the fit
    def fun(x):
        r = np.array([x[0] * x[1] ** 2, np.exp(x[0]) + x[1], x[0] * x[2], x[2] ** 3, np.log1p(x[0] + x[2])])
        return np.concatenate([r, 0.1 * x])
    rows_of = [np.array([0, 1, 2, 3, 4, 5]), np.array([0, 1, 6]), np.array([2, 3, 4, 7])]
    return fun, rows_of


def test_groups_share_no_row():
    _fun, rows_of = _problem()
    groups = cal._disjoint_groups(rows_of, 8)
    assert groups == [[0], [1, 2]]  # worked by hand: x1 and x2 touch disjoint rows, x0 every row
    for g in groups:
        seen = np.concatenate([rows_of[j] for j in g])
        assert len(seen) == len(set(seen.tolist()))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 2.0), min_size=3, max_size=3))
def test_grouped_equals_scipy_dense(x):
    fun, rows_of = _problem()
    x = np.array(x)
    lo, hi = np.zeros(3), np.array([2.0, 2.0, 2.0])
    f0 = fun(x)
    mine = cal.grouped_jacobian(fun, x, f0, rows_of, cal._disjoint_groups(rows_of, 8), lo, hi, 1e-3)
    ref = approx_derivative(fun, x, rel_step=1e-3, method="2-point", f0=f0, bounds=(lo, hi))
    np.testing.assert_allclose(mine, ref, rtol=1e-12, atol=1e-12)


def test_step_at_a_tight_bound_is_the_room_left():
    # a parameter held at 0 under a 1e-12 ceiling (a runtime without a front end): scipy steps the
    # whole room (1e-12), not sqrt(eps), and so must the grouped scheme
    def fun(x):
        return np.array([3.0 * x[0], x[1]])
    rows_of = [np.array([0]), np.array([1])]
    x, lo, hi = np.array([0.0, 1.0]), np.zeros(2), np.array([1e-12, 2.0])
    jac = cal.grouped_jacobian(fun, x, fun(x), rows_of, [[0, 1]], lo, hi, 1e-3)
    np.testing.assert_allclose(jac, [[3.0, 0.0], [0.0, 1.0]], rtol=1e-9)
