"""Tests for sweep reports: the data a report carries (not its pixels), reading it back, escaping,
atomic writes, reference fronts, GEMM alignment and the ``explorer report`` command."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

from explorer.alignment import alignment_table
from explorer.cli import main
from explorer.design import build_design
from explorer.errors import SpecError
from explorer.frontier import hypervolume, hypervolume_history, pareto_mask
from explorer.references import reference_fronts
from explorer.report import SCHEMA, build_report_html, read_report, write_report
from explorer.report.codec import decode_table, encode_table, find_block
from explorer.report.demo import sweep_like_table
from explorer.results import results_frame
from explorer.simulate import simulate

X, Y = "tokens_per_s_per_user", "tokens_per_s_per_gpu"
MAX2 = ["maximize", "maximize"]
HOSTILE = '<script>alert("x")</script></script><!-- & \u2028'


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return sweep_like_table(400, seed=3)


@pytest.fixture(scope="module")
def meta() -> dict:
    return {"study": "dense-70b", "space_file": "search_spaces/dense.yaml", "space_text": "hardware: h200\n",
            "hardware_files": {"h200": "name: h200\n"}, "sampler": "tpe", "seed": 7, "trials": 400,
            "objectives": {Y: "maximize", X: "maximize"}, "constraints": {"params_total": [65e9, 75e9]},
            "workload": {"isl": 1024, "osl": 1024}, "tool_version": "0.1.0", "date": "2025-11-30"}


def data_block(html_text: str) -> dict:
    return json.loads(find_block(html_text, "explorer-data"))


def figures_block(html_text: str) -> dict:
    return json.loads(find_block(html_text, "explorer-figures"))


def expected_front(df: pd.DataFrame) -> np.ndarray:
    feas = df["feasible"].to_numpy(bool)
    mask = np.zeros(len(df), dtype=bool)
    mask[feas] = pareto_mask(df.loc[feas, [X, Y]].to_numpy(float), MAX2)
    return mask


# ------------------------------------------------------------------------------------------------
# what the report carries
# ------------------------------------------------------------------------------------------------


def test_report_front_equals_pareto_mask(table, meta):
    html_text = build_report_html(table, meta, plotlyjs="cdn", references=[])
    data = data_block(html_text)
    assert data["schema"] == SCHEMA
    stored = decode_table(data["table"])
    want = expected_front(table)
    assert want.sum() > 3
    np.testing.assert_array_equal(stored["on_front"].to_numpy(bool), want)
    assert data["derived"]["front_size"] == int(want.sum())
    assert figures_block(html_text)["expected_front_points"] == int(want.sum())
    # the hypervolume reported is that of the front
    hv = hypervolume(table.loc[want, [X, Y]].to_numpy(float), MAX2)
    assert data["derived"]["hypervolume"] == pytest.approx(hv, rel=1e-12)


def test_front_recomputed_not_trusted(table):
    """A stale or wrong on_front column in the input does not leak into the report."""
    bad = table.copy()
    bad["on_front"] = ~bad["on_front"]
    stored = decode_table(data_block(build_report_html(bad, {}, plotlyjs="cdn", references=[]))["table"])
    np.testing.assert_array_equal(stored["on_front"].to_numpy(bool), expected_front(table))


def test_read_report_round_trips(tmp_path, table, meta):
    path = write_report(tmp_path / "r.html", table, meta, plotlyjs="cdn", references=[])
    df, meta2 = read_report(path)
    assert meta2 == meta
    assert list(df.columns) == list(table.columns)
    assert len(df) == len(table)
    for c in table.columns:
        a, b = table[c], df[c]
        if c in (X, Y):
            np.testing.assert_array_equal(a.to_numpy(float), b.to_numpy(float))  # objectives exact
        elif pd.api.types.is_bool_dtype(a):
            assert pd.api.types.is_bool_dtype(b), c
            np.testing.assert_array_equal(a.to_numpy(), b.to_numpy())
        elif pd.api.types.is_integer_dtype(a):
            assert pd.api.types.is_integer_dtype(b), c
            np.testing.assert_array_equal(a.to_numpy(), b.to_numpy())
        elif pd.api.types.is_float_dtype(a):
            np.testing.assert_allclose(b.to_numpy(float), a.to_numpy(float), rtol=1e-4, atol=0, err_msg=c)
        else:
            assert a.astype(str).tolist() == b.astype(str).tolist(), c
    # the front of the read-back table is the same front
    np.testing.assert_array_equal(expected_front(df), expected_front(table))


def test_codec_handles_nan_inf_empty_and_constant_columns():
    df = pd.DataFrame({
        X: [1.0, np.nan, np.inf], Y: [1.0, 2.0, -np.inf], "f": [0.1234567, np.nan, 3.0],
        "c": [5, 5, 5], "s": ["a", "a", "a"], "t": ["x", None, "y"], "b": [True, False, True],
    })
    back = decode_table(json.loads(encode_table(df, exact=(X, Y))))
    assert back[X].tolist()[0] == 1.0 and np.isnan(back[X].tolist()[1]) and np.isnan(back[X].tolist()[2])
    assert back["f"].tolist()[0] == pytest.approx(0.12346, rel=1e-9)
    assert back["c"].tolist() == [5, 5, 5] and back["s"].tolist() == ["a"] * 3
    assert back["t"].tolist() == ["x", "", "y"]
    assert back["b"].tolist() == [True, False, True]
    empty = decode_table(json.loads(encode_table(df.iloc[:0])))
    assert list(empty.columns) == list(df.columns) and len(empty) == 0


def test_user_strings_are_escaped(table):
    hostile_meta = {"study": HOSTILE, "space_text": HOSTILE, "space_file": HOSTILE, "sampler": HOSTILE,
                    "hardware_files": {HOSTILE: HOSTILE}, "extra": HOSTILE}
    t = table.copy()
    t["model"] = HOSTILE
    plain = build_report_html(table, {"study": "plain"}, plotlyjs="cdn", references=[])
    html_text = build_report_html(t, hostile_meta, plotlyjs="cdn", references=[])
    assert '<script>alert("x")' not in html_text
    assert "<!-- &" not in html_text
    assert html_text.count("<script") == plain.count("<script")
    assert html_text.count("</script>") == plain.count("</script>")
    assert "&lt;script&gt;alert(&quot;x&quot;)" in html_text  # shown, escaped, in header/provenance
    data = data_block(html_text)
    assert data["meta"]["study"] == HOSTILE
    assert decode_table(data["table"])["model"].iloc[0] == HOSTILE


def test_report_robust_to_missing_meta_and_columns(table):
    for meta in (None, {}, {"hypervolume_history": [1.0, 2.0]}, {"workload": None, "trials": None}):
        assert "explorer-data" in build_report_html(table, meta, plotlyjs="cdn", references=[])
    bare = table[[X, Y]].copy()  # only the objectives: no feasibility, no parameters
    html_text = build_report_html(bare, {}, plotlyjs="cdn")
    stored = decode_table(data_block(html_text)["table"])
    assert stored["feasible"].all()
    np.testing.assert_array_equal(stored["on_front"].to_numpy(bool),
                                  pareto_mask(bare.to_numpy(float), MAX2))
    assert "Reference models not drawn" in html_text
    empty = build_report_html(table.iloc[:0], {}, plotlyjs="cdn", references=[])
    assert data_block(empty)["derived"]["front_size"] == 0


def test_report_rejects_tables_without_objectives(table):
    with pytest.raises(SpecError, match="tokens_per_s_per_gpu"):
        build_report_html(table.drop(columns=[Y]), {})
    with pytest.raises(SpecError, match="color-by"):
        build_report_html(table, {}, color_by="nonexistent")


def test_hypervolume_curve(table):
    data = data_block(build_report_html(table.sample(frac=1.0, random_state=1), {}, plotlyjs="cdn", references=[]))
    curve = data["derived"]["hypervolume_curve"]
    vals = table[[X, Y]].to_numpy(float).copy()
    vals[~table["feasible"].to_numpy(bool)] = np.nan
    hist = hypervolume_history(vals, MAX2, order=table["trial"].to_numpy())
    assert curve["hypervolume"][-1] == pytest.approx(hist[-1])
    assert curve["hypervolume"][-1] == pytest.approx(data["derived"]["hypervolume"])
    assert curve["trial"][-1] == table["trial"].max()
    assert all(b >= a for a, b in zip(curve["hypervolume"], curve["hypervolume"][1:], strict=False))
    given = data_block(build_report_html(table, {"hypervolume_history": [0.0, 1.0, 1.0, 3.0]}, plotlyjs="cdn",
                                         references=[]))["derived"]["hypervolume_curve"]
    assert given["trial"] == [0, 1, 3] and given["hypervolume"] == [0.0, 1.0, 3.0]


def test_color_options_and_choice(table):
    figs = figures_block(build_report_html(table, {}, plotlyjs="cdn", color_by="tp", references=[]))
    frontier = figs["figures"][0]
    labels = [b["label"] for b in frontier["layout"]["updatemenus"][0]["buttons"]]
    assert labels[0] == "tp" and "precision" in labels and "batch" in labels
    uids = [t.get("uid") for t in frontier["data"]]
    assert uids[:4] == ["dominated", "infeasible", "stepline", "front"]
    assert frontier["data"][1]["visible"] == "legendonly"  # infeasible hidden by default


def test_plotlyjs_inline_and_cdn(table):
    cdn = build_report_html(table, {}, plotlyjs="cdn", references=[])
    inline = build_report_html(table, {}, plotlyjs="inline", references=[])
    assert '<script src="https://cdn.plot.ly/plotly-' in cdn
    assert '<script src="https://cdn.plot.ly' not in inline
    assert len(inline) - len(cdn) > 3_000_000
    with pytest.raises(SpecError):
        build_report_html(table, {}, plotlyjs="nope")


def test_ten_thousand_trials_under_ten_megabytes():
    big = sweep_like_table(10_000, seed=11)
    html_text = build_report_html(big, {"study": "big"}, plotlyjs="inline", references=[])
    assert len(html_text.encode("utf-8")) < 10e6


# ------------------------------------------------------------------------------------------------
# reading and writing
# ------------------------------------------------------------------------------------------------


def test_read_report_rejects_bad_input(tmp_path, table):
    with pytest.raises(SpecError, match="file not found"):
        read_report(tmp_path / "missing.html")
    junk = tmp_path / "junk.html"
    junk.write_text("<html><body>hello</body></html>")
    with pytest.raises(SpecError, match="not an explorer report"):
        read_report(junk)
    good = write_report(tmp_path / "good.html", table, {}, plotlyjs="cdn", references=[])
    text = good.read_text()
    future = tmp_path / "future.html"
    future.write_text(text.replace(f'"schema":"{SCHEMA}"', '"schema":"explorer-report/99"'))
    with pytest.raises(SpecError, match="unknown report schema 'explorer-report/99'"):
        read_report(future)
    corrupt = tmp_path / "corrupt.html"
    corrupt.write_text(text.replace('"schema"', '"schema', 1))
    with pytest.raises(SpecError, match="corrupt"):
        read_report(corrupt)
    binary = tmp_path / "bin.html"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(SpecError):
        read_report(binary)


def test_write_report_is_atomic(tmp_path, table):
    target = tmp_path / "r.html"
    target.write_text("previous report")
    with pytest.raises(SpecError):
        write_report(target, table.drop(columns=[X]), {})
    assert target.read_text() == "previous report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]  # no temporary file left
    write_report(target, table, {}, plotlyjs="cdn", references=[])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]
    assert read_report(target)[0].shape[0] == len(table)
    assert oct(target.stat().st_mode & 0o777) != oct(0o600)


# ------------------------------------------------------------------------------------------------
# reference fronts and alignment
# ------------------------------------------------------------------------------------------------


def test_reference_fronts_are_fronts_and_skip_infeasible():
    ref = reference_fronts(["llama-3.1-8b", "llama-3.1-70b"], ["h200"], 1024, 1024, ["bf16", "fp8"])
    assert set(ref["reference"]) == {"llama-3.1-8b", "llama-3.1-70b"}
    assert ref["feasible"].all()
    for _, g in ref.groupby("reference"):
        v = g[[X, Y]].to_numpy(float)
        assert pareto_mask(v, MAX2).all()
        assert (np.diff(g[X].to_numpy()) >= 0).all()
        assert set(g["tp"]) <= {1, 2, 4, 8} and set(g["batch"]) <= {2 ** k for k in range(12)}
    assert ref.attrs["skipped"] == []
    none = reference_fronts(["llama-3.1-8b"], ["h200"], 1024, 1024, ["fp4"])  # Hopper has no FP4
    assert len(none) == 0
    assert none.attrs["skipped"][0]["preset"] == "llama-3.1-8b"
    assert "format" in none.attrs["skipped"][0]["reason"]
    with pytest.raises(SpecError):
        reference_fronts(["no-such-model"], ["h200"], 1024, 1024, ["bf16"])


def test_report_draws_references_and_says_what_it_skipped(table):
    html_text = build_report_html(table, {}, plotlyjs="cdn", references=["llama-3.1-70b", "llama-3.1-405b"])
    data = data_block(html_text)
    refs = decode_table(data["derived"]["references"])
    assert set(refs["reference"]) == {"llama-3.1-70b", "llama-3.1-405b"}
    names = [t["name"] for t in figures_block(html_text)["figures"][0]["data"]]
    assert "Llama-3.1-70B (reference)" in names
    skipped = build_report_html(table.assign(precision="fp4"), {}, plotlyjs="cdn", references=["llama-3.1-8b"])
    assert "infeasible everywhere" in skipped


def _one_row(**kw) -> pd.DataFrame:
    values = {"model": "llama-3.1-8b", "hardware": "h200", "precision": "bf16", "isl": 1024, "osl": 1024,
              "batch": 64, "tp": 2}
    values.update(kw)
    design, tab = build_design(values)
    return results_frame(design, tab, simulate(design, tab), text={"model": "llama-3.1-8b", "precision": "bf16"})


def test_alignment_dimensions_after_sharding():
    a = alignment_table(_one_row()).set_index("gemm")
    # Llama-3.1-8B: H 4096, F 14336, 32 heads, 8 KV heads, d 128, V 128256; tp = 2
    assert a.loc["qkv", "N"] == (32 + 2 * 8) * 128 / 2
    assert a.loc["o_proj", "K"] == 32 * 128 / 2
    assert a.loc["mlp_up", "N"] == 2 * 14336 / 2
    assert a.loc["mlp_down", "K"] == 14336 / 2
    assert a.loc["lm_head", "N"] == 128256 / 2
    assert a.loc["mlp_up", "width"] == 14336 and a.loc["qkv", "width"] == 32 + 2 * 8
    for g in ("qkv", "mlp_up", "lm_head"):
        tn = int(a.loc[g, "tile"].split("x")[1])
        assert a.loc[g, "N_aligned"] % tn == 0
    assert a.loc["mlp_up", "saved_ttft_s"] == 0.0  # already aligned
    assert np.isnan(a.loc["o_proj", "N_aligned"])  # K widths are not aligned
    assert {"expert_up", "expert_down"}.isdisjoint(a.index)  # dense model


def test_alignment_finds_the_wasted_tile_column():
    """Widths just past a multiple of the tile: rounding down never costs time, and saves it where
    the extra tile column costs a wave (the cost model's sawtooth and staircase)."""
    ffn = np.arange(14336 + 16, 14336 + 1024, 16)
    rows = pd.concat([_one_row(ffn=int(f), tp=1) for f in ffn], ignore_index=True)
    a = alignment_table(rows)
    up = a[a["gemm"] == "mlp_up"].reset_index(drop=True)
    assert len(up) == len(ffn)
    tn = up["tile"].str.split("x").str[1].astype(int)
    assert (up["N_aligned"] % tn == 0).all()
    misaligned = up["N"] % tn != 0
    assert misaligned.any() and (up.loc[misaligned, "tile_eff_prefill"] < 1.0).all()
    down = up["N_aligned"] < up["N"]
    assert down.any()
    assert (up.loc[down, "saved_ttft_s"] >= 0).all()
    assert (up.loc[down, "saved_ttft_s"] > 0).any()
    assert (up.loc[~misaligned, "saved_ttft_s"] == 0).all()


def test_alignment_moe_rows():
    a = alignment_table(_one_row(model="mixtral-8x7b", tp=2, ep=2))
    assert {"expert_up", "expert_down"} <= set(a["gemm"])
    assert "mlp_up" not in set(a["gemm"])  # every Mixtral layer is MoE


# ------------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------------


def test_cli_report_from_csv_and_rerender(tmp_path, table, capsys):
    csv = tmp_path / "study.csv"
    table.to_csv(csv, index=False)
    assert main(["report", str(csv), "--plotlyjs", "cdn", "--references", "none"]) == 0
    out = tmp_path / "study.html"
    df, meta = read_report(out)
    assert meta["study"] == "study" and len(df) == len(table)
    again = tmp_path / "again.html"
    assert main(["report", str(out), "-o", str(again), "--plotlyjs", "cdn", "--color-by", "batch",
                 "--references", "llama-3.1-8b"]) == 0
    df2, meta2 = read_report(again)
    assert meta2 == meta and len(df2) == len(table)
    assert "report:" in capsys.readouterr().out


@pytest.mark.parametrize("content", [None, "", "garbage,\x00\x01 not a csv\n1,2,3,4\n", "a,b\n1,2\n"])
def test_cli_report_bad_input_exit_2_no_output(tmp_path, content, capsys):
    src = tmp_path / "bad.csv"
    if content is not None:
        src.write_text(content)
    out = tmp_path / "out.html"
    assert main(["report", str(src), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error" in err
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ([] if content is None else ["bad.csv"])


def test_cli_report_bad_html_and_options_exit_2(tmp_path, table, capsys):
    junk = tmp_path / "junk.html"
    junk.write_text("<html>not a report</html>")
    assert main(["report", str(junk), "-o", str(tmp_path / "o.html")]) == 2
    csv = tmp_path / "s.csv"
    table.to_csv(csv, index=False)
    assert main(["report", str(csv), "--color-by", "nope", "-o", str(tmp_path / "o.html")]) == 2
    capsys.readouterr()
    assert main(["report", str(csv), "--references", "llama-3.1-7b", "--plotlyjs", "cdn",
                 "-o", str(tmp_path / "o.html")]) == 2  # an unknown preset is an error, with a did-you-mean
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--references: unknown model 'llama-3.1-7b' (did you mean" in err, err
    assert not (tmp_path / "o.html").exists()
    assert main(["report", str(csv), "-o", str(tmp_path / "o.txt")]) == 2
    capsys.readouterr()
    assert not (tmp_path / "o.txt").exists()
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())
    assert os.path.exists(csv)


def test_alignment_summary_groups_points_by_shape():
    rows = pd.concat([_one_row(batch=b, tp=2) for b in (8, 64, 512)], ignore_index=True)
    full = alignment_table(rows)
    from explorer.alignment import alignment_summary

    s = alignment_summary(full)
    # the three points share every width: one row per GEMM
    assert sorted(s["gemm"]) == sorted(set(full["gemm"]))
    assert (s["points"] == 3).all() and (s["first"] == 0).all()
    up = s.set_index("gemm").loc["mlp_up"]
    assert up["tile_eff_step"] == full.loc[full["gemm"] == "mlp_up", "tile_eff_step"].min()
    lm = s.set_index("gemm").loc["lm_head"]
    assert bool(lm["misaligned"]) == (lm["N_aligned"] != lm["N"])
    assert s["misaligned"].tolist() == sorted(s["misaligned"].tolist(), reverse=True)  # misaligned first
