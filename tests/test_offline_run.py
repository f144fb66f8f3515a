"""Finite offline runs (explorer/offline_run.py): R requests queued at once, as trtllm-bench runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from explorer.design import build_design
from explorer.simulate import simulate
from explorer.validate import load_cases

ROOT = Path(__file__).resolve().parent.parent
BASE = dict(hardware="h200", precision="fp8", model="llama-3.1-70b", tp=2, isl=1024, osl=1024, runtime="trtllm-bench")


def _run(batch, num_requests, **kw):
    design, table = build_design({**BASE, **kw, "batch": np.asarray(batch, dtype=float),
                                  "num_requests": np.asarray(num_requests, dtype=float)}, "test")
    return simulate(design, table)


def test_a_finite_run_worked_from_the_steady_state():
    """R requests at concurrency B: R / X(B) of steady state plus one burst of B prompts (ramp and
    drain), X and the prompt time read from the steady-state solution at B."""
    R, B = 3000, 512
    steady = _run([B], [0])
    fin = _run([B], [R])
    t = R / steady["request_rate"][0] + B / 1 * steady["prefill_s_per_request"][0]  # dp = pp = 1: one engine
    assert fin["tokens_per_s_per_gpu"][0] == pytest.approx(R * 1024 / t / 2, rel=1e-9)  # 2 GPUs
    assert fin["request_rate"][0] == pytest.approx(R / t, rel=1e-9)
    assert fin["tokens_per_s_per_user"][0] == steady["tokens_per_s_per_user"][0]  # the waves' own pace


def test_concurrency_never_exceeds_the_requests():
    r = _run([1000, 3000], [1000, 1000])
    assert r["tokens_per_s_per_gpu"][0] == pytest.approx(r["tokens_per_s_per_gpu"][1], rel=1e-12)
    assert r["decode_batch"][0] == pytest.approx(r["decode_batch"][1], rel=1e-12)


def test_long_runs_approach_the_steady_state_and_zero_means_off():
    steady = _run([256], [0])["tokens_per_s_per_gpu"][0]
    rates = _run([256, 256, 256], [1000, 10_000, 10_000_000])["tokens_per_s_per_gpu"]
    assert rates[0] < rates[1] < rates[2] < steady * (1 + 1e-12)
    assert rates[2] == pytest.approx(steady, rel=1e-3)
    mixed = _run([256, 256], [0, 1000])["tokens_per_s_per_gpu"]  # rows without a count stay steady
    assert mixed[0] == steady


def test_overview_rows_get_the_documented_request_counts():
    cases = {c.id: c for c in load_cases(ROOT / "validation" / "measurements.yaml")}
    assert cases["trt_latest_dsr1_h200_dep8_1k1k"].values["num_requests"] == 3000
    assert cases["trt_latest_gptoss120b_b200_dep2_8k1k"].values["num_requests"] == 1500
    assert cases["trt10_llama31_8b_h200_tp1_128_128"].values["num_requests"] == 30000
    assert "num_requests" not in cases["gptfast_llama31_70b_a100_tp2_bf16"].values


def test_evaluate_cli_num_requests():
    out = subprocess.run([sys.executable, "-m", "explorer", "evaluate", "--model", "llama-3.1-8b", "--batch", "64",
                          "--num-requests", "200", "--json"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    bad = subprocess.run([sys.executable, "-m", "explorer", "evaluate", "--model", "llama-3.1-8b",
                          "--num-requests", "lots"], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and "--num-requests" in bad.stderr and "Traceback" not in bad.stderr
