"""Held-out error bands (explorer/uncertainty.py): the arithmetic, the fallback, the shipped table
against the cross-validation it was made from, and the bands in `evaluate` and in reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from explorer.api import evaluate
from explorer.errors import SpecError
from explorer.report.demo import sweep_like_table
from explorer.report.sweep import BAND_COLUMNS, front_bands, front_of, prepare_table
from explorer.uncertainty import AXES, Band, band, bounds_table, load_bands, serving_fit

ROOT = Path(__file__).resolve().parent.parent


def _bands(tmp_path: Path, groups: dict, min_cases: int = 10) -> str:
    p = tmp_path / "bands.yaml"
    p.write_text(yaml.safe_dump({"source": "test", "quantiles": [0.1, 0.5, 0.9], "min_cases": min_cases,
                                 "groups": groups}))
    load_bands.cache_clear()
    return str(p)


def _group(cases: int, e: list[float]) -> dict:
    return {axis: {"cases": cases, "e": e} for axis in AXES}


def test_band_bounds_worked_by_hand():
    # held out, predictions ran 20 % under to 25 % over the measured value: a prediction of 100 means
    # the measured value was 100 / 1.25 = 80 .. 100 / 0.8 = 125
    lo, hi = Band("trtllm/dense", 50, -0.2, 0.0, 0.25).bounds(100.0)
    assert (float(lo), float(hi)) == pytest.approx((80.0, 125.0))


def test_small_groups_fall_back_to_their_family_then_to_all(tmp_path):
    path = _bands(tmp_path, {"vllm/moe": _group(5, [-0.3, -0.2, -0.1]), "*/moe": _group(40, [-0.25, 0.0, 0.3]),
                             "*/*": _group(100, [-0.2, 0.0, 0.2])})
    b = band("vllm", "moe", "tok_s_gpu", path)
    assert (b.group, b.cases, b.e10) == ("*/moe", 40, -0.25)  # 5 cases < min_cases 10
    assert band("sglang", "dense", "ttft", path).group == "*/*"  # no dense group at all
    path2 = _bands(tmp_path, {"vllm/moe": _group(12, [-0.3, -0.2, -0.1]), "*/*": _group(100, [-0.2, 0.0, 0.2])})
    assert band("vllm", "moe", "tok_s_user", path2).group == "vllm/moe"
    load_bands.cache_clear()


@pytest.mark.parametrize("groups, key", [
    ({"*/moe": _group(40, [-0.25, 0.0, 0.3])}, "groups"),  # no */* fallback
    ({"*/*": {"tok_s_gpu": {"cases": 9, "e": [0.1, 0.0, 0.2]}}}, "groups.*/*"),  # axes missing
    ({"*/*": _group(9, [0.2, 0.1, 0.3])}, "groups.*/*"),  # e10 > e50
    ({"*/*": _group(9, [-1.5, 0.0, 0.3])}, "groups.*/*"),  # e <= -1: a negative measured value
])
def test_a_bad_band_table_names_its_file_and_key(tmp_path, groups, key):
    path = _bands(tmp_path, groups)
    with pytest.raises(SpecError) as e:
        band("trtllm", "dense", "tok_s_gpu", path)
    assert str(tmp_path / "bands.yaml") in str(e.value) and key in str(e.value)
    load_bands.cache_clear()


@given(p=st.floats(1e-3, 1e6), e10=st.floats(-0.9, 0.9), de=st.floats(0.0, 2.0))
def test_bands_are_ordered_and_scale_with_the_prediction(p, e10, de):
    b = Band("g", 10, e10, e10, e10 + de)
    lo, hi = b.bounds(p)
    assert 0 < lo <= hi
    lo2, hi2 = b.bounds(2 * p)
    assert lo2 == pytest.approx(2 * lo) and hi2 == pytest.approx(2 * hi)
    # the prediction lies inside its band exactly when the held-out errors straddle zero
    assert (lo <= p * (1 + 1e-12) and p <= hi * (1 + 1e-12)) == (e10 <= 0 <= e10 + de) or \
        min(abs(e10), abs(e10 + de)) < 1e-9


def test_the_shipped_table_is_the_cross_validation_it_names():
    """explorer/data/error_bands.yaml is what benchmarks/error_bands.py makes of the shipped
    cross-validation by configuration (fails when one moved without the other)."""
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "error_bands.py"),
                          "--cv", str(ROOT / "docs" / "cross_validation_config.json"), "--check"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    data = load_bands()
    cv = json.loads((ROOT / "docs" / "cross_validation_config.json").read_text())["errors"]
    n_curve_cases = sum(1 for k in cv if k.endswith(":tok_s_gpu"))
    assert data["groups"]["*/*"]["tok_s_gpu"]["cases"] == n_curve_cases


def test_bounds_table_groups_rows_by_runtime_and_family():
    pred = {"tokens_per_s_per_gpu": np.array([100.0, 100.0, 100.0]), "ttft_s": np.array([0.2, 0.2, 0.2])}
    out = bounds_table(pred, ["trtllm", "trtllm", "vllm"], [False, True, False])
    assert set(out) == {"tokens_per_s_per_gpu_low", "tokens_per_s_per_gpu_high", "ttft_s_low", "ttft_s_high",
                        "band_group"}
    for i, (rt, fam) in enumerate((("trtllm", "dense"), ("trtllm", "moe"), ("vllm", "dense"))):
        b = band(rt, fam, "tok_s_gpu")
        assert out["band_group"][i] == b.group
        assert out["tokens_per_s_per_gpu_low"][i] == pytest.approx(100.0 / (1 + b.e90))
        assert out["tokens_per_s_per_gpu_high"][i] == pytest.approx(100.0 / (1 + b.e10))


def test_evaluate_reports_the_band_of_its_runtime_and_family():
    r = evaluate(model="gpt-oss-120b", hardware="b200", tp=2, precision="fp4", batch=16, runtime="trtllm")
    b = r["band"]
    want = band("trtllm", "moe", "tok_s_user")
    assert b["group"] == want.group and b["serving_fit"] == "own"
    assert b["tokens_per_s_per_user"] == pytest.approx([r["tokens_per_s_per_user"] / (1 + want.e90),
                                                        r["tokens_per_s_per_user"] / (1 + want.e10)])
    r2 = evaluate(model="llama-3.1-70b", hardware="gh200", tp=1, precision="fp8", batch=8, runtime="vllm")
    assert r2["band"]["group"] == band("vllm", "dense", "ttft").group
    assert r2["band"]["serving_fit"].startswith("transferred from")


def test_serving_fit_says_where_fits_come_from():
    assert serving_fit("trtllm", "h200") == "own"
    assert serving_fit("sglang", "l40s") == "lent by lineage"  # no SGLang curve on L40S


def test_evaluate_cli_prints_the_band():
    out = subprocess.run([sys.executable, "-m", "explorer", "evaluate", "--model", "llama-3.1-8b", "--batch", "4"],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    assert "held-out band" in out.stdout and "trtllm/dense" in out.stdout


def test_report_front_bands_in_front_order():
    front = front_of(prepare_table(sweep_like_table(300, seed=3)))
    bands = front_bands(front)
    assert len(bands) == len(front) > 3
    assert list(bands["tokens_per_s_per_user"]) == list(front["tokens_per_s_per_user"])
    assert bands[list(BAND_COLUMNS)].notna().all().all()
    b = band("trtllm", "dense", "tok_s_gpu")  # the demo table has no runtime column: the default's
    y = front["tokens_per_s_per_gpu"].to_numpy()
    assert bands["band_y_plus"].to_numpy() == pytest.approx(y / (1 + b.e10) - y)
    assert bands["band_y_minus"].to_numpy() == pytest.approx(y - y / (1 + b.e90))
    assert set(bands["band_group"]) == {b.group}
