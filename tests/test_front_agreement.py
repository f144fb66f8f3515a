"""Front-level agreement between predicted and measured curves (explorer/front_agreement.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from explorer.front_agreement import agreement, curve_points, dominance, front_mask, summarize

ROOT = Path(__file__).resolve().parent.parent


def test_three_points_worked_by_hand():
    # measured: A (10, 100) dominates C (9, 80); B (20, 50) trades off against both
    measured = np.array([[10.0, 100.0], [20.0, 50.0], [9.0, 80.0]])
    # predicted: C (12, 90) now beats A (11, 85) on both axes -- a flip; B stays a trade-off
    predicted = np.array([[11.0, 85.0], [20.0, 50.0], [12.0, 90.0]])
    a = agreement(measured, predicted)
    assert (a["pairs"], a["agree"], a["flip"], a["tie"]) == (1, 0, 1, 0)
    # measured front {A, B}; predicted front {B, C}: one in both
    assert (a["front_measured"], a["front_predicted"], a["front_both"]) == (2, 2, 1)


def test_ratio_error_worked_by_hand():
    # both points predicted 10 % high: every comparison between them is exact
    m = np.array([[10.0, 100.0], [20.0, 50.0]])
    a = agreement(m, m * 1.1)
    assert a["ratio_errors"]["tok_s_user"] == pytest.approx([0.0]) and a["ratio_errors"]["tok_s_gpu"] == pytest.approx([0.0])
    # the first 10 % high, the second 10 % low on throughput: their ratio is off by 1.1/0.9 - 1 = 22.2 %
    p = m * np.array([[1.0, 1.1], [1.0, 0.9]])
    a = agreement(m, p)
    assert a["ratio_errors"]["tok_s_gpu"] == pytest.approx([1.1 / 0.9 - 1.0])
    s = summarize([{"group": "g", "measured": tuple(m[k]), "predicted": tuple(p[k])} for k in range(2)])
    assert s["ratio_error"]["tok_s_gpu"] == {"pairs": 1, "median": pytest.approx(0.2222, abs=1e-4),
                                             "p90": pytest.approx(0.2222, abs=1e-4)}


def test_the_margin_keeps_near_ties_out():
    x, y = np.array([10.0, 10.1]), np.array([100.0, 100.5])  # 1 % and 0.5 % apart: within 2 %
    assert not dominance(x, y).any()
    assert dominance(x, y, tol=0.0)[1, 0]  # without a margin the second point wins
    assert front_mask(x, y).tolist() == [False, True]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(1.0, 1e4), st.floats(1.0, 1e4)), min_size=1, max_size=25))
def test_perfect_predictions_agree_on_everything(pts):
    m = np.array(pts)
    a = agreement(m, m)
    assert a["agree"] == a["pairs"] and a["flip"] == 0 and a["tie"] == 0
    assert a["front_both"] == a["front_measured"] == a["front_predicted"] >= 1
    # predictions that swap every point's figures with its mirror image flip every won pair
    mirrored = agreement(m, 1.0 / m)
    assert mirrored["flip"] == mirrored["pairs"] and mirrored["agree"] == 0


def test_summary_groups_and_shares():
    pts = [{"group": "g1", "measured": (10.0, 100.0), "predicted": (10.0, 100.0)},
           {"group": "g1", "measured": (9.0, 80.0), "predicted": (9.5, 70.0)},
           {"group": "g2", "measured": (5.0, 5.0), "predicted": (5.0, 5.0)}]
    s = summarize(pts)
    assert s["groups"] == 2 and s["points"] == 3 and s["pairs"] == 1
    assert s["agree_share"] == 1.0 and s["flip_share"] == 0.0
    assert s["by_group"]["g2"]["pairs"] == 0 and s["by_group"]["g2"]["agree_share"] is None


def test_curve_points_pairs_the_two_axes_of_a_row():
    rows = [{"id": "r1:tok_s_user", "kind": "curve", "supported": True, "metric": "tok_s_user", "measured": 10.0,
             "predicted": 11.0, "front": "g"},
            {"id": "r1:tok_s_gpu", "kind": "curve", "supported": True, "metric": "tok_s_gpu", "measured": 100.0,
             "predicted": 90.0, "front": "g"},
            {"id": "r1:ttft", "kind": "curve", "supported": True, "metric": "ttft", "measured": 50.0,
             "predicted": 60.0, "front": "g"},
            {"id": "r2:tok_s_user", "kind": "curve", "supported": True, "metric": "tok_s_user", "measured": 5.0,
             "predicted": 5.0, "front": "g"}]  # r2 has no tok_s_gpu: left out
    assert curve_points(rows) == [{"group": "g", "measured": (10.0, 100.0), "predicted": (11.0, 90.0)}]
    held = curve_points(rows, {"r1:tok_s_user": 9.0, "r1:tok_s_gpu": 95.0})
    assert held[0]["predicted"] == (9.0, 95.0)


def test_validate_reports_front_agreement_on_the_shipped_curves():
    out = subprocess.run([sys.executable, "-m", "explorer", "validate", "--measurements",
                          str(ROOT / "validation" / "fronts.yaml"), "--json"],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    fa = json.loads(out.stdout)["summary"]["fronts"]
    assert fa["groups"] >= 10 and fa["pairs"] > 100
    assert fa["agree"] + fa["flip"] + fa["tie"] == fa["pairs"]
    assert 0.0 <= fa["flip_share"] <= fa["agree_share"] <= 1.0
    assert fa["front_recall"] == pytest.approx(fa["front_both"] / fa["front_measured"])
