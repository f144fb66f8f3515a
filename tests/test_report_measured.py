"""``--measured FILE``: measured serving curves (and their predictions) on a report's frontier."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from explorer.cli import main
from explorer.report import build_report_html, read_report
from explorer.report.codec import find_block
from explorer.report.demo import sweep_like_table
from explorer.report.measured import load_measured

ROOT = Path(__file__).resolve().parent.parent
FRONTS = ROOT / "validation" / "fronts.yaml"
SPACE = """description: tiny Llama 3.1 70B grid on H200 (measured-overlay tests)
hardware: [h200]
model: llama-3.1-70b
workload: {isl: 1024, osl: 1024}
deployment:
  batch: [1, 8, 64]
  precision: [fp8]
  tp: [2, 8]
  pp: [1]
search: {sampler: grid}
"""


def blocks(path: Path) -> tuple[dict, dict]:
    text = path.read_text()
    return json.loads(find_block(text, "explorer-data")), json.loads(find_block(text, "explorer-figures"))


@pytest.fixture(scope="module")
def study_csv(tmp_path_factory) -> Path:
    """A results CSV of llama-3.1-70b on h200, ISL = OSL = 1024, fp8 (a tiny grid sweep)."""
    d = tmp_path_factory.mktemp("measured")
    space = d / "l70.yaml"
    space.write_text(SPACE)
    assert main(["sweep", str(space), "--out", str(d), "--no-report"]) == 0
    return d / "l70.csv"


@pytest.fixture(scope="module")
def measured():
    return load_measured(FRONTS)


def _report(study_csv: Path, out: Path, *extra: str) -> int:
    return main(["report", str(study_csv), "-o", str(out), "--plotlyjs", "cdn", "--references", "none", *extra])


def test_overlay_for_a_matching_study(study_csv, tmp_path, capsys):
    out = tmp_path / "r.html"
    assert _report(study_csv, out, "--measured", str(FRONTS)) == 0
    data, figs = blocks(out)
    m = data["measured"]
    curves = m["curves"]
    assert curves, m["note"]
    assert {c["model"] for c in curves} == {"llama-3.1-70b"}
    assert {c["hardware"] for c in curves} == {"h200"}
    assert {c["runtime"] for c in curves} >= {"trtllm", "vllm"}
    assert all(c["precision"] == "fp8" for c in curves)
    # InferenceX lengths 1024 are simulated at their mean 0.9 * 1024; the 1k/8k curves are left out
    assert {(c["isl"], c["osl"]) for c in curves} == {(922, 922)}
    assert m["note"]["skipped"].get("other workload", 0) > 0
    for c in curves:
        n = len(c["concurrency"])
        assert n >= 3 and c["concurrency"] == sorted(c["concurrency"])
        for side in ("measured", "predicted"):
            assert len(c[side]["tokens_per_s_per_user"]) == len(c[side]["tokens_per_s_per_gpu"]) == n
        assert 0 <= c["median_abs_error"] < 1.5
    names = [t["name"] for t in figs["figures"][0]["data"]]
    uids = [t["uid"] for t in figs["figures"][0]["data"]]
    assert sum(u.startswith("measured") for u in uids) == len(curves)
    assert sum(u.startswith("mpred") for u in uids) == len(curves)
    assert any("median |err|" in n for n in names)
    measured_trace = next(t for t in figs["figures"][0]["data"] if t["uid"] == "measured0")
    assert measured_trace["line"]["dash"] == "dash" and "concurrency" in measured_trace["text"][0]
    assert figs["expected_measured_points"] == sum(len(c["concurrency"]) for c in curves)
    assert "Measured curves from" in out.read_text()
    # front-level agreement of the drawn points (one chart: llama-3.1-70b on h200)
    fa = m["agreement"]
    assert fa["groups"] == 1 and fa["points"] == figs["expected_measured_points"]
    assert fa["pairs"] > 0 and fa["agree"] + fa["flip"] + fa["tie"] == fa["pairs"]
    assert "Front level" in out.read_text()
    # the report still reads back (schema unchanged), and compare reads old and new reports
    df, _ = read_report(out)
    assert len(df) == len(pd.read_csv(study_csv))
    old = tmp_path / "old.html"
    assert _report(study_csv, old) == 0
    assert "measured" not in blocks(old)[0]
    capsys.readouterr()
    assert main(["compare", str(old), str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["schema"].startswith("explorer-compare/")


def test_no_overlay_for_other_hardware(study_csv, tmp_path, measured):
    df = pd.read_csv(study_csv).assign(hardware="l40s")
    data = json.loads(find_block(build_report_html(df, {"study": "x"}, plotlyjs="cdn", references=[],
                                                   measured=measured), "explorer-data"))
    assert data["measured"]["curves"] == []
    assert data["measured"]["note"]["skipped"].get("other hardware", 0) > 0


def test_other_model_not_drawn_and_shape_search_shows_every_model(measured):
    table = sweep_like_table(60, seed=2)  # model "custom" (a shape search) on h200, ISL/OSL 1024/1024
    data = json.loads(find_block(build_report_html(table, {}, plotlyjs="cdn", references=[], measured=measured),
                                 "explorer-data"))
    models = {c["model"] for c in data["measured"]["curves"]}
    assert {"llama-3.1-70b", "gpt-oss-120b", "deepseek-v3"} <= models
    preset = table.assign(model="gpt-oss-120b")
    data = json.loads(find_block(build_report_html(preset, {}, plotlyjs="cdn", references=[], measured=measured),
                                 "explorer-data"))
    assert {c["model"] for c in data["measured"]["curves"]} == {"gpt-oss-120b"}


@pytest.mark.parametrize("bad", ["missing.yaml", "points", "garbage"])
def test_bad_measured_file_exit_2_one_line_no_output(study_csv, tmp_path, capsys, bad):
    if bad == "points":
        path = ROOT / "validation" / "measurements.yaml"
    elif bad == "garbage":
        path = tmp_path / "garbage.yaml"
        path.write_text("rows: [1,\n")
    else:
        path = tmp_path / bad
    out = tmp_path / "r.html"
    capsys.readouterr()
    assert _report(study_csv, out, "--measured", str(path)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--measured" in err, err
    assert not out.exists()


def test_sweep_measured_validated_before_any_output(tmp_path, capsys):
    space = tmp_path / "l70.yaml"
    space.write_text(SPACE)
    out = tmp_path / "out"
    assert main(["sweep", str(space), "--out", str(out), "--measured", str(tmp_path / "none.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--measured" in err
    assert not out.exists()
