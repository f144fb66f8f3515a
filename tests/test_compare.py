"""Tests for comparing sweeps: ratios on synthetic fronts with known answers, the comparison page's
data, what differs between runs, and the ``explorer compare`` command."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from explorer.cli import main
from explorer.errors import SpecError
from explorer.report import COMPARE_SCHEMA, build_compare_html, compare_results, load_results, write_report
from explorer.report.codec import decode_table, find_block
from explorer.report.demo import sweep_like_table

X, Y = "tokens_per_s_per_user", "tokens_per_s_per_gpu"


def synthetic(scale_y: float = 1.0, scale_x: float = 1.0, tp=(1, 2, 4, 8), hardware: str = "h200",
              isl: int = 1024) -> pd.DataFrame:
    """A front of 8 points (x up, y down) plus dominated and infeasible points."""
    x = np.geomspace(10, 1000, 8)
    y = 1e4 / np.sqrt(x)
    front = pd.DataFrame({X: x * scale_x, Y: y * scale_y, "feasible": True})
    dominated = pd.DataFrame({X: x * scale_x * 0.9, Y: y * scale_y * 0.5, "feasible": True})
    infeasible = pd.DataFrame({X: x * scale_x * 5, Y: y * scale_y * 5, "feasible": False})
    df = pd.concat([front, dominated, infeasible], ignore_index=True)
    df["tp"] = np.resize(np.asarray(tp), len(df))
    df["hardware"] = hardware
    df["precision"] = "fp8"
    df["isl"] = isl
    df["osl"] = 1024
    return df


def test_iso_interactivity_ratio_is_two_when_throughput_halved():
    a, b = synthetic(), synthetic(scale_y=0.5)
    res = compare_results([("A", a, {}), ("B", b, {})])
    pair = res["pairs"][0]
    eq_x = pair["comparison"]["equal_x"]
    assert eq_x["overlap"]
    assert eq_x["min"] == pytest.approx(2.0) and eq_x["median"] == pytest.approx(2.0)
    assert eq_x["max"] == pytest.approx(2.0)
    assert eq_x["x_grid"][0] == pytest.approx(10) and eq_x["x_grid"][-1] == pytest.approx(1000)
    assert pair["comparison"]["n_front_a"] == 8 and pair["comparison"]["n_front_b"] == 8
    # A dominates everywhere: every B front point is dominated, no A point is
    assert pair["comparison"]["dominance"] == {"a_dominated_by_b": 0.0, "b_dominated_by_a": 1.0}
    assert [s["better"] for s in pair["segments"]] == ["A"]
    hv = pair["comparison"]
    assert hv["hypervolume_a"] == pytest.approx(2 * hv["hypervolume_b"])
    assert hv["hypervolume_union"] == pytest.approx(hv["hypervolume_a"])
    # the reverse pair gives 1/2
    rev = compare_results([("B", b, {}), ("A", a, {})])["pairs"][0]["comparison"]["equal_x"]
    assert rev["median"] == pytest.approx(0.5)


def test_iso_throughput_ratio_when_interactivity_scaled():
    a, b = synthetic(), synthetic(scale_x=1 / 3)
    eq_y = compare_results([("A", a, {}), ("B", b, {})])["pairs"][0]["comparison"]["equal_y"]
    assert eq_y["overlap"]
    assert eq_y["min"] == pytest.approx(3.0) and eq_y["max"] == pytest.approx(3.0)


def test_crossing_fronts_and_coverage():
    a = synthetic()
    b = synthetic()
    b[Y] = np.where(b[X] > 100, b[Y] * 1.5, b[Y] * 0.8)  # B better at high interactivity only
    pair = compare_results([("A", a, {}), ("B", b, {})])["pairs"][0]
    better = [s["better"] for s in pair["segments"]]
    assert better[0] == "A" and better[-1] == "B"
    assert pair["comparison"]["equal_x"]["min"] == pytest.approx(1 / 1.5)
    assert pair["comparison"]["equal_x"]["max"] == pytest.approx(1 / 0.8)
    c = synthetic(scale_x=2.0)
    cov = compare_results([("A", a, {}), ("C", c, {})])["pairs"][0]["coverage"]
    assert any("only C reaches interactivity" in t for t in cov)


def test_parameters_that_differ_and_meta_differences():
    a = synthetic(tp=(1, 2))
    b = synthetic(tp=(4, 8), hardware="b200", isl=8192)
    res = compare_results([("A", a, {"objectives": ["y", "x"]}), ("B", b, {"objectives": ["y", "x"]})])
    params = res["pairs"][0]["parameters"]
    assert params["tp"]["differs"] and not params["precision"]["differs"]
    assert set(params["tp"]["a"]["values"]) == {"1", "2"} and set(params["tp"]["b"]["values"]) == {"4", "8"}
    assert set(res["differences"]) == {"hardware", "workload"}
    assert res["differences"]["hardware"] == {"A": ["h200"], "B": ["b200"]}
    same = compare_results([("A", a, {}), ("B", synthetic(), {})])
    assert same["differences"] == {}
    html_text = build_compare_html([("A", a, {}), ("B", b, {})], plotlyjs="cdn")
    assert "These runs differ" in html_text and "b200" in html_text
    assert "These runs differ" not in build_compare_html([("A", a, {}), ("B", synthetic(), {})], plotlyjs="cdn")


def test_compare_page_data_and_names():
    a, b, c = synthetic(), synthetic(scale_y=0.5), synthetic(scale_y=0.25)
    html_text = build_compare_html([("run", a, {}), ("run", b, {}), ("<b>x</b>", c, {})], plotlyjs="cdn")
    data = json.loads(find_block(html_text, "explorer-data"))
    assert data["schema"] == COMPARE_SCHEMA
    names = [s["name"] for s in data["comparison"]["inputs"]]
    assert names == ["run", "run (2)", "<b>x</b>"]
    assert len(data["comparison"]["pairs"]) == 3
    fronts = [decode_table(t) for t in data["tables"].values()]
    assert [len(f) for f in fronts] == [8, 8, 8]
    figs = json.loads(find_block(html_text, "explorer-figures"))
    assert figs["expected_front_points"] == 24
    assert "<b>x</b>" not in html_text.split("<main>")[1].split("explorer-data")[0]


def test_compare_results_from_real_reports(tmp_path):
    a = sweep_like_table(300, seed=1)
    b = sweep_like_table(300, seed=2, precisions=("bf16",))
    pa = write_report(tmp_path / "a.html", a, {"study": "fp8-and-bf16"}, plotlyjs="cdn", references=[])
    da, ma = load_results(pa)
    res = compare_results([("a", da, ma), ("b", b, {})])
    assert res["inputs"][0]["front_size"] == int(a["on_front"].sum())
    assert res["differences"]["precisions"] == {"a": ["bf16", "fp8"], "b": ["bf16"]}


# ------------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------------


def test_cli_compare_json_and_page(tmp_path, capsys):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    synthetic().to_csv(a, index=False)
    synthetic(scale_y=0.5).to_csv(b, index=False)
    out = tmp_path / "cmp.html"
    assert main(["compare", str(a), str(b), "-o", str(out), "--json", "--plotlyjs", "cdn"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["pairs"][0]["comparison"]["equal_x"]["median"] == pytest.approx(2.0)
    assert [i["name"] for i in res["inputs"]] == ["a", "b"]
    assert out.exists() and "explorer-compare/1" in out.read_text()
    # a comparison page is not an input
    assert main(["compare", str(out), str(a), "--json"]) == 2
    assert "comparison page" in capsys.readouterr().err


def test_cli_compare_from_reports(tmp_path, capsys):
    t = sweep_like_table(200, seed=4)
    ra = write_report(tmp_path / "a.html", t, {"study": "A"}, plotlyjs="cdn", references=[])
    rb = write_report(tmp_path / "b.html", t.assign(**{Y: t[Y] / 2}), {"study": "B"}, plotlyjs="cdn", references=[])
    assert main(["compare", str(ra), str(rb), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["pairs"][0]["comparison"]["equal_x"]["median"] == pytest.approx(2.0)
    assert [i["name"] for i in res["inputs"]] == ["A", "B"]


@pytest.mark.parametrize("bad", ["missing", "garbage", "notreport", "one"])
def test_cli_compare_bad_inputs_exit_2_no_output(tmp_path, bad, capsys):
    good = tmp_path / "good.csv"
    synthetic().to_csv(good, index=False)
    out = tmp_path / "out.html"
    if bad == "missing":
        args = [str(good), str(tmp_path / "nope.csv")]
    elif bad == "garbage":
        g = tmp_path / "g.csv"
        g.write_bytes(b"\x00\x01\x02 not,a\ntable")
        args = [str(good), str(g)]
    elif bad == "notreport":
        h = tmp_path / "h.html"
        h.write_text("<html><body>hello</body></html>")
        args = [str(good), str(h)]
    else:
        args = [str(good)]
    assert main(["compare", *args, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert not out.exists()
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())


def test_cli_compare_needs_an_output(tmp_path, capsys):
    a = tmp_path / "a.csv"
    synthetic().to_csv(a, index=False)
    assert main(["compare", str(a), str(a)]) == 2
    assert "-o" in capsys.readouterr().err


def test_load_results_rejects_tables_without_objectives(tmp_path):
    p = tmp_path / "t.csv"
    pd.DataFrame({"a": [1, 2]}).to_csv(p, index=False)
    with pytest.raises(SpecError, match="not a results table"):
        load_results(p)
