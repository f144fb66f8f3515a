"""Cost per token (explorer/cost.py): formulas worked by hand, the hardware files' power and price,
the overrides (space ``cost:``, ``explorer evaluate --usd-per-gpu-hour``), cost objectives and
constraints, and that cost is pure post-processing: no other figure and no front moves."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from explorer.api import evaluate
from explorer.cli import main
from explorer.cost import (
    COST_COLUMNS,
    HOST_POWER_FACTOR,
    POWER_OVERHEAD_FACTOR,
    PUE,
    add_cost,
    tokens_per_s_per_kw,
    usd_per_million_tokens,
)
from explorer.design import build_design
from explorer.errors import SpecError
from explorer.frontier import pareto_mask
from explorer.hardware import HARDWARE_DIR, list_hardware, load_hardware
from explorer.report.sweep import front_table_html
from explorer.results import results_frame
from explorer.simulate import simulate
from explorer.space import parse_space

NEW_KINDS = ("h200-nvl", "gh200", "rtx-pro-6000")
#: kinds no measurement was fitted on (rtx-pro-6000 is calibrated on its two MLPerf Offline rows)
UNFITTED_KINDS = ("h200-nvl", "gh200", "h20")


# ------------------------------------------------------------------ formulas, worked by hand

def test_tokens_per_kw_known_answer():
    # 1,000 tok/s/GPU on a 700 W board with facility factor 2.0: 1.4 kW per GPU -> 714.2857 tok/s/kW
    assert tokens_per_s_per_kw(1000.0, 700.0, 2.0) == pytest.approx(1000 / 1.4, rel=1e-12)
    # 350 W, factor 1 (board power only): 0.35 kW -> 2,000 / 0.35 = 5,714.29
    assert tokens_per_s_per_kw(2000.0, 350.0, 1.0) == pytest.approx(5714.2857142857, rel=1e-10)


def test_usd_per_million_known_answer():
    # $3.60 per GPU-hour = $0.001 per GPU-second; at 1,000 tok/s that is $1e-6 per token = $1.00 per 1M
    assert usd_per_million_tokens(1000.0, 3.6) == pytest.approx(1.0, rel=1e-12)
    # $2.00/h at 500 tok/s: 2 / 3600 / 500 * 1e6 = 1.1111
    assert usd_per_million_tokens(500.0, 2.0) == pytest.approx(1.1111111111, rel=1e-9)


def test_default_factor_is_host_times_pue():
    assert HOST_POWER_FACTOR == pytest.approx(10.2 / 5.6)  # DGX H100: 10.2 kW max over 8 x 700 W
    assert PUE == 1.3
    assert POWER_OVERHEAD_FACTOR == pytest.approx(10.2 / 5.6 * 1.3)  # 2.3679


def test_missing_and_zero():
    out = usd_per_million_tokens(np.array([1000.0, 0.0, 1000.0]), np.array([3.6, 3.6, np.nan]))
    assert out[0] == pytest.approx(1.0) and out[1] == math.inf and math.isnan(out[2])
    kw = tokens_per_s_per_kw(np.array([1000.0, 1000.0]), np.array([np.nan, 0.0]))
    assert np.isnan(kw).all()


def test_add_cost_per_kind_and_override():
    h200, b200 = load_hardware("h200"), load_hardware("b200")
    design, table = build_design({"model": "llama-3.1-8b", "hardware": np.array([h200, b200], dtype=object),
                                  "batch": 16, "isl": 1024, "osl": 1024, "precision": "fp8"}, "test")
    res = simulate(design, table)
    tps = res["tokens_per_s_per_gpu"]
    add_cost(res, design, table)
    assert res["usd_per_million_tokens"][0] == pytest.approx(h200.usd_per_gpu_hour / 3600 / tps[0] * 1e6)
    assert res["usd_per_million_tokens"][1] == pytest.approx(b200.usd_per_gpu_hour / 3600 / tps[1] * 1e6)
    assert res["tokens_per_s_per_kw"][1] == pytest.approx(tps[1] / (b200.board_power_w * POWER_OVERHEAD_FACTOR / 1e3))
    add_cost(res, design, table, {"b200": 3.6}, power_overhead_factor=1.0)  # mapping: only b200's price changes
    assert res["usd_per_million_tokens"][0] == pytest.approx(h200.usd_per_gpu_hour / 3600 / tps[0] * 1e6)
    assert res["usd_per_million_tokens"][1] == pytest.approx(1e3 / tps[1])
    assert res["tokens_per_s_per_kw"][0] == pytest.approx(tps[0] / 0.7)


# ------------------------------------------------------------------ hardware files

def test_every_shipped_kind_has_sourced_power_and_dated_price():
    for h in list_hardware():
        assert 100 <= h.board_power_w <= 2000, h.name
        assert str(h.raw["power"]["source"]).strip(), h.name
        if "price" in h.raw:
            pr = h.raw["price"]
            assert pr["kind"] == "market_assumption" and re.match(r"^\d{4}(-\d\d){0,2}$", pr["date"]), h.name
            assert "http" in pr["source"] and 0.1 < h.usd_per_gpu_hour < 100, h.name
        else:
            assert math.isnan(h.usd_per_gpu_hour), h.name


@pytest.mark.parametrize("name", sorted(set(NEW_KINDS) | set(UNFITTED_KINDS)))
def test_new_kinds_load_and_serve_llama70b(name):
    h = load_hardware(name)
    assert h.name == name
    if name in UNFITTED_KINDS:
        assert h.efficiency_kind == "assumption" and "transferred" in str(h.raw["efficiency"])
    r = evaluate("llama-3.1-70b", name, batch="max", precision="fp8", tp=2 if name == "rtx-pro-6000" else 1)
    assert r["feasible"] and r["tokens_per_s_per_gpu"] > 100
    assert r["tokens_per_s_per_kw"] == pytest.approx(
        r["tokens_per_s_per_gpu"] / (h.board_power_w * POWER_OVERHEAD_FACTOR / 1e3))
    assert r["usd_per_million_tokens"] is None  # no sourced price for these kinds


def test_new_kind_figures():
    nvl, h200 = load_hardware("h200-nvl"), load_hardware("h200")
    assert nvl.peak_flops["fp8"] < h200.peak_flops["fp8"] and nvl.hbm_bw == h200.hbm_bw and nvl.scaleup_domain == 4
    assert load_hardware("gh200").hbm_bytes == pytest.approx(144e9)
    rtx = load_hardware("rtx-pro-6000")
    assert rtx.supports("fp4") and rtx.scaleup_bw == pytest.approx(64e9) and rtx.sms == 188


def _h100_with(tmp_path: Path, block: str, name: str) -> Path:
    text = (HARDWARE_DIR / "h100.yaml").read_text(encoding="utf-8")
    text = re.sub(r"^power:\n(  .*\n)+price:\n(  .*\n)+", block, text, flags=re.M)
    assert "usd_per_gpu_hour: 2.99" not in text
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


@pytest.mark.parametrize("block, key", [
    ("power:\n  board_W: -5\n  source: x\n", "power.board_W"),
    ("power:\n  board_W: 700\n", "power.source"),
    ("power:\n  board_watts: 700\n  source: x\n", "power.board_watts"),
    ("price:\n  usd_per_gpu_hour: 2\n  date: '2026-01'\n  kind: datasheet\n  source: x\n", "price.kind"),
    ("price:\n  usd_per_gpu_hour: 2\n  kind: market_assumption\n  source: x\n", "price.date"),
    ("price:\n  usd_per_gpu_hour: 0\n  date: '2026-01'\n  kind: market_assumption\n  source: x\n",
     "price.usd_per_gpu_hour"),
])
def test_bad_cost_sections_name_file_and_key(tmp_path, block, key):
    p = _h100_with(tmp_path, block, "bad.yaml")
    with pytest.raises(SpecError) as e:
        load_hardware(str(p))
    msg = str(e.value)
    assert str(p) in msg and key in msg and "\n" not in msg


def test_file_without_cost_sections_loads_with_nan(tmp_path):
    h = load_hardware(str(_h100_with(tmp_path, "", "plain.yaml")))
    assert math.isnan(h.board_power_w) and math.isnan(h.usd_per_gpu_hour)


# ------------------------------------------------------------------ evaluate (API and CLI)

def test_evaluate_prints_and_json_has_both(capsys):
    assert main(["evaluate", "--model", "llama-3.1-8b", "--hardware", "h100", "--batch", "32",
                 "--precision", "fp8"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"tokens/s/kW\s+[\d,.]+", out) and re.search(r"\$ per 1M tokens\s+[\d,.]+", out)
    assert main(["evaluate", "--model", "llama-3.1-8b", "--hardware", "h100", "--batch", "32",
                 "--precision", "fp8", "--usd-per-gpu-hour", "3.6", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert set(COST_COLUMNS) <= set(r) and r["usd_per_gpu_hour"] == 3.6
    assert r["usd_per_million_tokens"] == pytest.approx(3.6 / 3600 / r["tokens_per_s_per_gpu"] * 1e6)


def test_evaluate_without_price_says_so(capsys):
    assert main(["evaluate", "--model", "llama-3.1-8b", "--hardware", "gh200", "--batch", "8"]) == 0
    assert "no price in the hardware file; give --usd-per-gpu-hour" in capsys.readouterr().out


@pytest.mark.parametrize("flag, value", [("--usd-per-gpu-hour", "0"), ("--usd-per-gpu-hour", "abc"),
                                         ("--usd-per-gpu-hour", "nan"), ("--power-overhead-factor", "0.5")])
def test_bad_cost_flags_exit_2(flag, value):
    p = subprocess.run([sys.executable, "-m", "explorer", "evaluate", "--model", "llama-3.1-8b", flag, value],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and flag in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) <= 3  # argparse: usage lines + one error line


def test_api_rejects_bad_price():
    with pytest.raises(SpecError, match="--usd-per-gpu-hour"):
        evaluate("llama-3.1-8b", "h100", usd_per_gpu_hour=-1.0)


# ------------------------------------------------------------------ spaces

BASE = {
    "hardware": ["h200", "b200"],
    "model": "llama-3.1-8b",
    "workload": {"isl": 1024, "osl": 1024},
    "deployment": {"batch": [1, 8, 64, 256], "precision": "fp8", "tp": [1, 2]},
}
SAMPLES = {"hardware": ["h200", "b200", "h200", "b200"], "batch": [1, 8, 64, 256], "tp": [1, 2, 2, 1]}


def _space(extra: dict | None = None, where: str = "cost.yaml"):
    data = json.loads(json.dumps(BASE))
    for k, v in (extra or {}).items():
        data[k] = v
    return parse_space(data, where, yaml.safe_dump(data))


def test_cost_objectives_and_constraints_parse_and_grade():
    sp = _space({"objectives": {"usd_per_million_tokens": "minimize", "tokens_per_s_per_kw": "maximize"},
                 "constraints": {"max_usd_per_million_tokens": 1.0, "min_tokens_per_s_per_kw": 50}})
    assert sp.directions == ["minimize", "maximize"]
    df = sp.score(SAMPLES)
    usd, kw = df["usd_per_million_tokens"].to_numpy(), df["tokens_per_s_per_kw"].to_numpy()
    np.testing.assert_allclose(df["c_max_usd_per_million_tokens"], (usd - 1.0) / 1.0)
    np.testing.assert_allclose(df["c_min_tokens_per_s_per_kw"], (50 - kw) / 50)
    bad = (usd > 1.0) | (kw < 50)
    assert bad.any() and (~bad).any()
    assert (df["feasible"].to_numpy() == ~bad).all()
    assert df.loc[usd > 1.0, "reason"].str.contains("per million tokens above the maximum 1").all()
    ev = sp.evaluate(SAMPLES)
    np.testing.assert_allclose(ev.objectives, np.column_stack([usd, kw]))


def test_space_price_override():
    plain, priced = _space(), _space({"cost": {"usd_per_gpu_hour": 3.6, "power_overhead_factor": 1.0}})
    a, b = plain.score(SAMPLES), priced.score(SAMPLES)
    np.testing.assert_allclose(b["usd_per_million_tokens"], 1e3 / b["tokens_per_s_per_gpu"])
    np.testing.assert_allclose(b["tokens_per_s_per_kw"],
                               b["tokens_per_s_per_gpu"] / (np.where(b["hardware"] == "h200", 700, 1000) / 1e3))
    assert plain.fingerprint() != priced.fingerprint()
    assert priced.constraints_meta()["usd_per_gpu_hour"] == 3.6
    # cost is post-processing: every other column is the same under another price
    others = [c for c in a.columns if c not in COST_COLUMNS]
    pd.testing.assert_frame_equal(a[others], b[others])


@pytest.mark.parametrize("extra, key, words", [
    ({"objectives": {"usd_per_million_token": "minimize"}}, "objectives.usd_per_million_token",
     "did you mean 'usd_per_million_tokens'"),
    ({"objectives": {"usd_per_million_tokens": "lowest"}}, "objectives.usd_per_million_tokens", "allowed: maximize"),
    ({"constraints": {"max_usd_per_million_tokens": 0}}, "constraints.max_usd_per_million_tokens", "must be > 0"),
    ({"constraints": {"min_tokens_per_s_per_kw": "lots"}}, "constraints.min_tokens_per_s_per_kw", "expected a number"),
    ({"cost": {"usd_per_gpu_hour": -2}}, "cost.usd_per_gpu_hour", "must be > 0"),
    ({"cost": {"power_overhead_factor": 0.9}}, "cost.power_overhead_factor", "must be >= 1"),
    ({"cost": {"price": 2}}, "cost.price", "allowed: power_overhead_factor, usd_per_gpu_hour"),
    ({"hardware": ["h200", "gh200"], "objectives": {"usd_per_million_tokens": "minimize"}},
     "objectives.usd_per_million_tokens", "gh200 has no price per GPU-hour"),
    ({"hardware": "h800", "constraints": {"max_usd_per_million_tokens": 2}},
     "constraints.max_usd_per_million_tokens", "set cost.usd_per_gpu_hour"),
])
def test_bad_cost_settings_one_line(extra, key, words):
    with pytest.raises(SpecError) as e:
        _space(extra, "bad.yaml")
    msg = str(e.value)
    assert msg.startswith("bad.yaml: ") and key in msg and words in msg and "\n" not in msg


def test_unpriced_kind_is_fine_with_an_override():
    sp = _space({"hardware": ["h200", "gh200"], "objectives": {"usd_per_million_tokens": "minimize"},
                 "cost": {"usd_per_gpu_hour": 2.0}})
    df = sp.score({"hardware": ["gh200"], "batch": [64], "tp": [1]})
    assert df["usd_per_million_tokens"].iloc[0] == pytest.approx(2.0 / 3600 / df["tokens_per_s_per_gpu"].iloc[0] * 1e6)


def test_sweep_cli_bad_cost_space_exit_2(tmp_path):
    data = dict(BASE, objectives={"usd_per_million_tokens": "cheapest"})
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(data), encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "explorer", "sweep", str(p), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and str(p) in r.stderr and "objectives.usd_per_million_tokens" in r.stderr
    assert "allowed: maximize, minimize" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


# ------------------------------------------------------------------ nothing else moves

def test_cost_does_not_move_results_or_fronts():
    """The simulator's own figures, and the front of the default objectives, are the same whether
    the rows are priced or not: results_frame's columns equal simulate()'s, and the front under any
    price is the front computed from the unpriced simulator output."""
    sp = _space()
    grid_b = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    samples = {"hardware": [h for h in ("h200", "b200") for _ in grid_b for _ in (1, 2)],
               "batch": [b for _ in ("h200", "b200") for b in grid_b for _ in (1, 2)],
               "tp": [t for _ in ("h200", "b200") for _ in grid_b for t in (1, 2)]}
    n, cols = sp.columns(samples)
    values = {k: v for k, v in cols.items() if k not in ("hardware", "precision", "runtime", "model")}
    design, table = build_design(dict(values, hardware=cols["hardware"].astype(str), model=cols["model"].astype(str),
                                      precision=cols["precision"].astype(str), runtime=cols["runtime"].astype(str)),
                                 "test")
    raw = simulate(design, table)
    df = sp.score(samples)
    for k in ("tokens_per_s_per_gpu", "tokens_per_s_per_user", "ttft_s", "tpot_s", "memory_bytes_per_gpu"):
        np.testing.assert_array_equal(df[k].to_numpy(), raw[k])
    obj = np.column_stack([raw["tokens_per_s_per_gpu"], raw["tokens_per_s_per_user"]])
    want = pareto_mask(obj[raw["feasible"]], ["maximize", "maximize"])
    for price in (None, 0.5, 50.0):
        spp = _space({"cost": {"usd_per_gpu_hour": price}} if price else None)
        d = spp.score(samples)
        f = d["feasible"].to_numpy()
        got = pareto_mask(d.loc[f, ["tokens_per_s_per_gpu", "tokens_per_s_per_user"]].to_numpy(),
                          ["maximize", "maximize"])
        np.testing.assert_array_equal(got, want)
    # a results table built straight from the simulator carries the files' default cost figures
    frame = results_frame(design, table, raw)
    np.testing.assert_allclose(frame["usd_per_million_tokens"],
                               np.where(frame["hardware"] == "h200", 4.54, 6.03) / 3600 / frame["tokens_per_s_per_gpu"] * 1e6)


def test_front_table_has_cost_columns():
    df = _space().score(SAMPLES)
    html = front_table_html(df)
    assert "tok/s/kW" in html and "$/M tok" in html
    for c in COST_COLUMNS:  # the front table shows each figure to 4 significant digits
        assert f">{df[c].iloc[0]:.4g}<" in html
