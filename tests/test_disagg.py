"""Disaggregated prefill/decode (explorer/disagg.py): worked cases and invariants."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.design import build_design
from explorer.disagg import sakasegawa_wait
from explorer.errors import SpecError
from explorer.hardware import load_hardware
from explorer.simulate import simulate
from explorer.space import space_from_text


def _run(**kw):
    vals = dict(model="llama-3.1-70b", hardware="h200", precision="fp8", tp=2, isl=4096, osl=512,
                batch=np.array([8, 64, 256]), runtime="trtllm", prefill_tp=4)
    vals.update(kw)
    d, t = build_design(vals)
    return d, simulate(d, t)


def test_sakasegawa_one_server_is_pollaczek_khinchine():
    # c = 1: rho^(sqrt(4) - 1) / (1 - rho) * S / 2 = M/D/1's rho S / (2 (1 - rho))
    assert sakasegawa_wait(0.6, 1, 2.0) == pytest.approx(0.6 * 2.0 / (2 * 0.4))
    # more servers at the same load wait less; overload waits forever
    assert sakasegawa_wait(0.6, 4, 2.0) < sakasegawa_wait(0.6, 1, 2.0)
    assert np.isinf(sakasegawa_wait(1.0, 2, 1.0))


def test_decode_pool_carries_no_prompts_and_counts_every_gpu():
    _, agg = _run(disagg=0)
    d, dis = _run(disagg=1)
    assert np.all(dis["feasible"])
    # decode steps carry no prompt chunks: no prefill share in TPOT, and TPOT no worse than mixed
    assert np.allclose(dis["t_prefill_s"], 0.0, atol=1e-12)
    assert np.all(dis["tpot_s"] <= agg["tpot_s"] * (1 + 1e-9))
    # tokens/s/GPU over both pools: n_D decode replicas' output over n_D*g_D + n_P*g_P GPUs
    g_d = 2.0
    total = dis["decode_replicas"] * g_d + dis["prefill_replicas"] * dis["prefill_gpus_per_replica"]
    assert np.allclose(dis["tokens_per_s_per_gpu"] * total, dis["decode_replicas"] * dis["request_rate"] * 512)
    assert np.all(dis["prefill_load"] <= 0.8 + 1e-9)
    assert np.isnan(agg["prefill_replicas"]).all()


def test_kv_transfer_worked_by_hand():
    d, dis = _run(disagg=1, batch=16)
    h = load_hardware("h200")
    # 2 + 4 GPUs fit one 8-GPU NVLink domain: ISL/(ISL+OSL) of a sequence's KV shard per GPU over NVLink
    inside = 2 + 4 <= h.scaleup_domain
    assert inside
    kv = dis["kv_bytes_per_seq_per_gpu"][0] * 4096 / (4096 + 512)
    want = kv / (h.scaleup_bw * h.eta_network) + h.scaleup_latency_s
    assert dis["kv_transfer_s"][0] == pytest.approx(want, rel=1e-9)


def test_fixed_pool_ratio_overloads_a_small_prefill_pool():
    _, dis = _run(disagg=1, batch=np.array([4, 512]), pool_prefill=1, pool_decode=8)
    assert dis["feasible"][0] and not dis["feasible"][1]
    assert dis["reason_code"][1] == 8
    assert dis["prefill_replicas"][1] == 1 and dis["decode_replicas"][1] == 8


def test_aggregated_rows_unchanged_next_to_disaggregated_ones():
    _, only = _run(disagg=0)
    _, mixed = _run(disagg=np.array([0, 1, 0]))
    for k in ("tokens_per_s_per_gpu", "tpot_s", "ttft_s"):
        assert mixed[k][0] == only[k][0] and mixed[k][2] == only[k][2]


SPACE = """
description: test
model: llama-3.1-70b
hardware: h200
workload: {isl: 4096, osl: 512}
deployment:
  batch: [16, 128]
  precision: fp8
  tp: [2, 4]
  serving: [aggregated, disaggregated]
  prefill_tp: [4]
constraints:
  max_tpot_p99_s: 0.05
search: {sampler: grid}
"""


def test_space_serving_modes_compete_under_a_p99_limit():
    sp = space_from_text(SPACE, "t.yaml")
    df = sp.score({"batch": [16, 128, 16, 128], "tp": [2, 2, 4, 4],
                   "serving": ["aggregated", "disaggregated", "disaggregated", "aggregated"]})
    assert set(df["serving"]) == {"aggregated", "disaggregated"}
    assert np.isfinite(df["tpot_p99_s"]).all()  # closed-loop rows get percentiles when a p99 limit asks
    bad = df["tpot_p99_s"] > 0.05
    assert (df.loc[bad, "reason"].str.contains("p99 TPOT")).all()
    with pytest.raises(SpecError, match="serving"):
        space_from_text(SPACE.replace("[aggregated, disaggregated]", "[split]"), "t.yaml")
    with pytest.raises(SpecError, match="deployment.serving"):
        space_from_text(SPACE.replace("  serving: [aggregated, disaggregated]\n", ""), "t.yaml")


def test_modes_table_worked_by_hand():
    import pandas as pd

    from explorer.report.modes import modes_html, modes_table

    df = pd.DataFrame({
        "serving_mode": ["aggregated", "aggregated", "disaggregated", "disaggregated", "disaggregated"],
        "tokens_per_s_per_user": [15.0, 60.0, 25.0, 55.0, 120.0],
        "tokens_per_s_per_gpu": [900.0, 300.0, 800.0, 600.0, 100.0],
        "feasible": [True, True, True, True, False],
    })
    t = modes_table(df, targets=(10.0, 50.0, 100.0)).set_index("tokens_per_s_per_user")
    # >= 10: aggregated 900 vs disaggregated 800; >= 50: 300 vs 600; >= 100: the only row is infeasible
    assert t.loc[10.0, "winner"] == "aggregated" and t.loc[10.0, "margin"] == pytest.approx(900 / 800)
    assert t.loc[50.0, "winner"] == "disaggregated" and t.loc[50.0, "margin"] == pytest.approx(2.0)
    assert t.loc[100.0, "winner"] == "" and np.isnan(t.loc[100.0, "aggregated"])
    assert 'id="modes-table"' in modes_html(df)
    assert modes_table(df[df["serving_mode"] == "aggregated"]) is None  # one mode: nothing to compare


def test_shipped_serving_space_compares_four_modes():
    from pathlib import Path

    from explorer.space import load_space

    sp = load_space(Path(__file__).resolve().parent.parent / "search_spaces" / "dsr1-gb200-serving.yaml")
    assert sp.grid_size() == 3888 and sp.max_tpot_p99_s == 0.05
    df = sp.score({"hardware": ["gb200"] * 4, "batch": [256] * 4, "tp": [1] * 4, "ep": [8] * 4, "dp": [8] * 4,
                   "serving": ["aggregated", "disaggregated"] * 2, "prefill_tp": [4] * 4,
                   "draft_tokens": [0, 0, 3, 3]})
    assert list(df["serving_mode"]) == ["aggregated", "disaggregated", "aggregated + speculative",
                                        "disaggregated + speculative"]
    # at this batch MTP serves more tokens per user, and disaggregation lifts TPOT off the prompts
    assert df["tokens_per_s_per_user"][2] > df["tokens_per_s_per_user"][0]
    assert df["tokens_per_s_per_user"][1] > df["tokens_per_s_per_user"][0]


def test_report_shows_where_each_mode_wins(tmp_path):
    """A sweep of the serving space (a small grid) writes the modes section and offers the
    serving_mode colouring; the CLI summary prints the same table."""
    import subprocess
    import sys

    text = SPACE.replace("  prefill_tp: [4]\n", "  prefill_tp: [4]\n  draft_tokens: [0, 2]\n  acceptance: 0.7\n"
                                             "  draft_model: llama-3.1-8b\n")
    space = tmp_path / "serve.yaml"
    space.write_text(text)
    p = subprocess.run([sys.executable, "-m", "explorer", "sweep", str(space), "--out", str(tmp_path / "out")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "modes        best tok/s/GPU" in p.stdout and "disaggregated + speculative" in p.stdout
    html_text = (tmp_path / "out" / "serve.html").read_text()
    assert 'id="modes-table"' in html_text and "serving_mode" in html_text
