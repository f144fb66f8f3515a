"""validation/fronts_inferencex.yaml: the InferenceX dashboard fixture's curves beyond fronts.yaml.

The YAML is generated from a hand transcription (validation/sources/inferencex_app_benchmarks_44c8e03.csv);
these tests hold the transcription to the fixture's own arithmetic, to the rows fronts.yaml already
copied from the same source, and the YAML to what the script makes of the CSV."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "validation" / "sources" / "inferencex_app_benchmarks_44c8e03.csv"
OUT = ROOT / "validation" / "fronts_inferencex.yaml"


def _rows() -> list[dict[str, str]]:
    with CSV.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _f(r: dict, k: str) -> float | None:
    return float(r[k]) if r.get(k) not in (None, "") else None


def test_generated_file_is_what_the_transcription_gives():
    got = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fixture_curves.py"), "--check"],
                         capture_output=True, text=True)
    assert got.returncode == 0, got.stdout + got.stderr


def test_transcription_obeys_the_fixture_arithmetic():
    rows = _rows()
    assert len(rows) == 435
    for r in rows:
        where = f"{r['hardware']} {r['framework']} {r['precision']} tp{r['decode_tp']} c{r['conc']} {r['date']}"
        parts = (_f(r, "input_tput_per_gpu"), _f(r, "output_tput_per_gpu"), _f(r, "tput_per_gpu"))
        aggregated = r["disagg"] == "false"
        if aggregated and None not in parts:  # total = input + output per GPU (one pool of GPUs)
            assert parts[0] + parts[1] == pytest.approx(parts[2], rel=1e-6), where
        if _f(r, "median_intvty") and _f(r, "median_tpot"):  # interactivity is 1/TPOT per request
            assert _f(r, "median_intvty") * _f(r, "median_tpot") == pytest.approx(1.0, abs=0.03), where
        if aggregated and r["spec_method"] == "none" and _f(r, "output_tput_per_gpu") and _f(r, "mean_tpot"):
            # closed loop: output tokens/s/GPU = C * mean OSL / mean latency / GPUs (within the +-5 %
            # fronts.yaml meta.derived_throughput measured between the two)
            osl = 0.9 * float(r["osl"])
            derived = (float(r["conc"]) * osl / (_f(r, "mean_ttft") + (osl - 1) * _f(r, "mean_tpot"))
                       / float(r["decode_tp"]))
            if r["framework"] != "atom":  # one ATOM row's figures disagree with each other in the source
                assert derived / _f(r, "output_tput_per_gpu") == pytest.approx(1.0, abs=0.12), where


def test_rows_shared_with_fronts_yaml_agree():
    shared = yaml.safe_load((ROOT / "validation" / "fronts.yaml").read_text(encoding="utf-8"))["rows"]
    index = {(r["gpu"].lower(), r["tp"], r["isl"], r["osl"], r["concurrency"], str(r.get("date"))): r
             for r in shared if str(r["curve"]).startswith("ix_")}
    matched = 0
    for r in _rows():
        key = (r["hardware"], int(r["decode_tp"]), int(r["isl"]), int(r["osl"]), int(r["conc"]), r["date"])
        if r["framework"] == "sglang" and r["spec_method"] == "none" and key in index:
            s = index[key]
            matched += 1
            assert float(r["median_intvty"]) == pytest.approx(s["tok_s_user"], rel=1e-3)
            assert float(r["output_tput_per_gpu"]) == pytest.approx(s["tok_s_gpu"], rel=1e-3)
            assert float(r["median_ttft"]) * 1e3 == pytest.approx(s["ttft_ms"], rel=1e-3)
    assert matched == 25


def test_every_curve_row_is_scored_with_its_source():
    from explorer.validate import load_cases

    data = yaml.safe_load(OUT.read_text(encoding="utf-8"))
    assert all("InferenceX-app@44c8e03" in r["source"] and r["run_url"] for r in data["rows"])
    cases = load_cases(OUT)
    assert cases and all(c.supported for c in cases), [c.reason for c in cases if not c.supported][:3]
    assert {c.metric for c in cases} == {"tok_s_gpu", "tok_s_user", "ttft"}
