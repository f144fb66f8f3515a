"""MLPerf Server/Interactive latency cases (explorer/mlperf_latency.py): built from a run's log
statistics, predicted open loop at the run's rate on the deployment its throughput row chose, fitted
(Interactive means) or validated only (p99s, Server), and held out together with their row."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.calibrate import fixed_system_cases, holdout_groups
from explorer.design import build_design
from explorer.hardware import load_hardware
from explorer.mlperf_latency import latency_cases, load_latency, predict_latency, split_of
from explorer.runtime import load_runtime
from explorer.simulate import simulate
from explorer.validate import load_cases, parse_case, predict

ROW = {
    "id": "t_llama2_70b_interactive_h200x8", "model": "Llama-2-70B-chat", "gpu": "H200", "num_gpus": 8,
    "tp": 1, "precision": "FP8", "isl": 222, "osl": 294, "concurrency_or_batch": "Interactive",
    "metric": "output_tokens_per_s_system", "value": 23079.95, "unit": "tok/s (whole system)",
    "ttft_limit_ms": 450, "tpot_limit_ms": 40, "source": "test", "trust": "high",
}
ENTRY = {"id": ROW["id"], "completed_samples_per_s": 79.1636, "completed_tokens_per_s": 23079.9,
         "ttft_ms": {"mean": 137.93, "p99": 431.52}, "tpot_ms": {"mean": 37.05, "p99": 39.64}}


def _cases(entry=ENTRY):
    parent = parse_case(dict(ROW), 0)
    return parent, latency_cases([parent], {ROW["id"]: entry})


def test_four_cases_per_matching_run():
    parent, lat = _cases()
    assert [c.id.rsplit(":", 1)[1] for c in lat] == ["tpot_mean", "ttft_mean", "tpot_p99", "ttft_p99"]
    assert [c.measured for c in lat] == [37.05, 137.93, 39.64, 431.52]
    assert all(c.parent == parent.id and c.kind == "system_latency" and c.rate_per_system == 79.1636 for c in lat)
    assert lat[0].regime == "mlperf_interactive_tpot_mean" and lat[0].metric == "inter_token_latency"
    # an entry of another run (its tokens/s differ) or a missing statistic gives no case
    assert _cases(dict(ENTRY, completed_tokens_per_s=20000.0))[1] == []
    assert len(_cases(dict(ENTRY, ttft_ms={}))[1]) == 2


def test_predicted_open_loop_at_the_runs_rate_per_replica():
    parent, lat = _cases()
    hw, rt = load_hardware("h200"), load_runtime("mlperf")
    parent.note, parent.chosen_batch = "tp=1 ep=1 dp=1 x 8 replicas", 64
    got = predict_latency(lat, {parent.id: parent}, {"h200": hw}, {"mlperf": rt})
    # by hand: 79.1636 requests/s over 8 TP1 replicas, the runtime's running-request cap as the batch
    v = dict(model="llama-2-70b", hardware="h200", precision=parent.values["precision"], isl=222, osl=294, tp=1,
             runtime="mlperf", batch=rt.max_batch, request_rate=79.1636 / 8,
             isl_cv=parent.values.get("isl_cv", 0.0), osl_cv=parent.values.get("osl_cv", 0.0))
    d, t = build_design(v, "test")
    r = simulate(d, t)
    assert got[0] == pytest.approx(float(r["tpot_s"][0]) * 1e3, rel=1e-9)
    assert got[1] == pytest.approx(float(r["ttft_s"][0]) * 1e3, rel=1e-9)
    assert got[2] == pytest.approx(float(r["tpot_p99_s"][0]) * 1e3, rel=1e-9)
    assert got[3] == pytest.approx(float(r["ttft_p99_s"][0]) * 1e3, rel=1e-9)
    assert got[2] >= got[0] and got[3] >= got[1]
    # a parent without a prediction leaves its latency cases unsupported, with the reason
    parent.note = ""
    _, lat2 = _cases()
    assert np.isnan(predict_latency(lat2, {parent.id: parent}, {"h200": hw}, {"mlperf": rt})).all()
    assert not lat2[0].supported and "deployment" in lat2[0].reason


def test_split_note_round_trip():
    assert split_of("precision x; tp=2 ep=1 dp=1 x 4 replicas") == (2, 1, 1, 4)
    assert split_of("no split here") is None


def test_calibration_fits_interactive_means_only_and_holds_runs_out_together():
    parent, lat = _cases()
    server = parse_case(dict(ROW, id="t_server", concurrency_or_batch="Server", ttft_limit_ms=2000,
                             tpot_limit_ms=200), 1)
    lat_s = latency_cases([server], {"t_server": dict(ENTRY, id="t_server")})
    cases = fixed_system_cases([parent, *lat, server, *lat_s])
    kinds = {c.id: c.kind for c in cases}
    assert kinds[f"{parent.id}:tpot_mean"] == kinds[f"{parent.id}:ttft_mean"] == "inference"
    assert kinds[f"{parent.id}:tpot_p99"] == "system_latency"  # p99s: validated only
    assert all(kinds[c.id] == "system_latency" for c in lat_s)  # Server runs: validated only
    fitted = next(c for c in cases if c.id == f"{parent.id}:tpot_mean")
    assert fitted.values["request_rate"] == pytest.approx(79.1636 / 8)  # TP1 x 8 replicas
    groups = holdout_groups(cases)
    # the run leaves as one: its throughput row, the fitted means and the p99s
    assert sorted(cases[i].id for i in groups[f"point:{parent.id}"]) == sorted([parent.id, *(c.id for c in lat)])
    # and the fitted cases score in the one vectorized call like any other point
    pred = predict([fitted])
    assert np.isfinite(pred[0]) and pred[0] > 0


def test_shipped_latency_file_matches_its_rows():
    entries = load_latency()
    assert not any(c.kind == "system_latency" for c in load_cases("validation/mlperf.yaml"))  # rows only
    cases = load_cases("validation/mlperf_latency.yaml")
    lat = [c for c in cases if c.kind == "system_latency"]
    bad = [c for c in cases if not c.supported and c.id.endswith(":latency")]
    # the six AMD runs have no stored log; every other row is scored (the L40S runs' unstated
    # precision is their harness's FP8: validate._harness_format; Gaudi 2 has its file since 2026-12-02)
    assert sum(c.reason.startswith("no statistics") for c in bad) == len(bad) == 6
    rows = {c.parent for c in lat}
    assert len(rows) >= 25 and rows <= set(entries)
    for c in lat:  # each case's figure is its entry's
        stat = c.id.rsplit(":", 1)[1]
        key, p = {"tpot_mean": ("tpot_ms", "mean"), "ttft_mean": ("ttft_ms", "mean"),
                  "tpot_p99": ("tpot_ms", "p99"), "ttft_p99": ("ttft_ms", "p99")}[stat]
        assert c.measured == entries[c.parent][key][p]


def test_latency_file_errors_are_one_line(tmp_path):
    """A latency file whose rows file is missing, or is itself a latency file, is one clear error
    (exit 2), never a traceback or a recursion."""
    import subprocess
    import sys

    lat = tmp_path / "lat.yaml"
    for rows_file, why in (("nope.yaml", "does not exist"), ("lat.yaml", "not a file of MLPerf system rows")):
        lat.write_text(f"meta: {{rows_file: {rows_file}}}\nrows: [{{id: x}}]\n")
        p = subprocess.run([sys.executable, "-m", "explorer", "validate", "--measurements", str(lat)],
                           capture_output=True, text=True)
        assert p.returncode == 2, p.stderr
        assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
        assert "meta.rows_file" in p.stderr and why in p.stderr
