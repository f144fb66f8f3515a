"""Open-loop (Poisson) serving: the analytic model worked by hand, its percentiles against the
discrete-event oracle of the same engine, the latency-limited rate, and the CLI surface."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from explorer.api import evaluate
from explorer.design import build_design
from explorer.events import run_events
from explorer.open_loop import md1_tail, open_loop, residual_quantile, tail_quantile
from explorer.simulate import engine_profile, simulate


def test_open_loop_worked_by_hand():
    # T_dec 10 ms, tau 5 ms per prompt, 20 requests/s, OSL 101: the engine spends 20*5 ms = 10 % of
    # its time on prompts, so TPOT = 10 / 0.9 = 11.11 ms and b = 20 * 100 * 11.11 ms = 22.2
    op = open_loop(20.0, 1000.0, 101.0, 0.010, 0.005, 0.050, 0.006)
    assert op["tpot_s"] == pytest.approx(0.010 / 0.9)
    assert op["decode_batch"] == pytest.approx(20 * 100 * 0.010 / 0.9)
    assert not op["overloaded"]
    # prompt server load 20 * 6 ms = 0.12; M/D/1 mean wait rho S / (2 (1 - rho))
    assert op["ttft_s"] == pytest.approx(0.050 + 0.12 * 0.006 / (2 * 0.88))
    assert op["output_tokens_per_s"] == pytest.approx(20 * 101)
    # overload: prompts alone need more than the engine (X tau >= 1), or the batch passes its cap
    assert open_loop(250.0, 1000.0, 101.0, 0.010, 0.005, 0.050, 0.006)["overloaded"]
    assert open_loop(20.0, 10.0, 101.0, 0.010, 0.005, 0.050, 0.006)["overloaded"]


def test_md1_tail_solves_lundberg_equation():
    rho = np.array([0.1, 0.5, 0.9, 0.99])
    theta, C = md1_tail(rho, 2.0)
    x = theta * 2.0
    assert np.allclose(rho * (np.exp(x) - 1.0), x, rtol=1e-9)
    assert np.all((C > 0) & (C <= rho))
    # heavy traffic: theta -> 2 (1 - rho) / (rho S^2 / S) ... i.e. x -> 2 (1 - rho) / rho
    assert x[-1] == pytest.approx(2 * 0.01 / 0.99, rel=0.02)
    # the tail's mean C/theta is close to Pollaczek-Khinchine's rho S / (2 (1 - rho)) in heavy traffic
    assert C[-1] / theta[-1] == pytest.approx(0.99 * 2.0 / (2 * 0.01), rel=0.02)
    # quantiles: zero below the atom, growing with p
    q = [float(tail_quantile(theta[1], C[1], p)) for p in (0.3, 0.9, 0.99)]
    assert q[0] == 0.0 and 0 < q[1] < q[2]


def test_residual_quantile_by_hand():
    # only short steps: uniform residual
    assert residual_quantile(0.99, 0.0, 0.010, 0.030) == pytest.approx(0.0099)
    # half the time in 30 ms steps: P(R > r) = 0.5 (1 - r/0.03) above 10 ms -> p99 at 0.03 (1 - 0.02)
    assert residual_quantile(0.99, 0.5, 0.010, 0.030) == pytest.approx(0.03 * 0.98)
    # below 10 ms: 1 - p = 0.5 (1 - r/0.03) + 0.5 (1 - r/0.01) -> r = p / (0.5/0.03 + 0.5/0.01)
    assert residual_quantile(0.5, 0.5, 0.010, 0.030) == pytest.approx(0.5 / (0.5 / 0.03 + 0.5 / 0.01))


def _design(rate, runtime="trtllm", tp=2, isl=222, osl=294):
    return build_design(dict(model="llama-3.1-70b", hardware="h200", precision="fp8", tp=tp, isl=isl, osl=osl,
                             batch=2048, request_rate=rate, runtime=runtime))


@pytest.mark.parametrize("load", [0.1, 0.3, 0.5])
@pytest.mark.parametrize("runtime,tp,isl,osl", [
    ("trtllm", 2, 222, 294), ("sglang", 4, 2048, 256), ("vllm", 1, 1024, 512),
])
def test_analytic_p99_matches_discrete_events(runtime, tp, isl, osl, load):
    """The grid: three runtimes (mixed and separate prefill) at 10, 30 and 50 % of the engine's
    saturated request rate.  Nearer saturation the batch fixed point is steep and the events show
    slow, large swings of the batch (p99 TPOT +10..30 % above the analytic, seed-dependent)."""
    sat = evaluate("llama-3.1-70b", "h200", batch="max", isl=isl, osl=osl, tp=tp, precision="fp8",
                   runtime=runtime)["request_rate"]
    rate = load * sat
    d, t = _design(rate, runtime, tp, isl, osl)
    r = simulate(d, t)
    assert r["feasible"][0]
    grid = np.unique(np.r_[1:64, np.geomspace(64, 4096, 40).round()])
    ev = run_events(engine_profile(d, t, grid), rate, requests=4000)
    for m in ("ttft", "tpot"):
        assert r[f"{m}_p99_s"][0] == pytest.approx(ev.percentile(m, 0.99), rel=0.10), m
        assert r[f"{m}_p50_s"][0] <= r[f"{m}_p90_s"][0] <= r[f"{m}_p99_s"][0]


def test_closed_loop_rows_unchanged_by_the_open_loop_column():
    vals = dict(model=np.array(["llama-3.1-70b", "qwen3-235b-a22b", "llama-3.1-8b"]), hardware="h200",
                precision="fp8", tp=np.array([2, 4, 1]), ep=np.array([1, 4, 1]), isl=1024, osl=512,
                batch=np.array([4, 64, 256]))
    d, t = build_design(vals)
    no_col = {k: v for k, v in d.items() if k != "request_rate"}
    a, b = simulate(no_col, t), simulate(d, t)
    for k in a:
        assert np.array_equal(a[k], b[k], equal_nan=True), k
    assert np.all(np.isnan(a["ttft_p99_s"]))  # closed loop: no percentiles


def test_open_loop_load_raises_latency_monotonically():
    rates = np.array([1.0, 4.0, 8.0, 12.0, 16.0])
    d, t = _design(rates)
    r = simulate(d, t)
    assert np.all(np.diff(r["tpot_p99_s"]) > 0) and np.all(np.diff(r["ttft_p99_s"]) > 0)
    assert np.allclose(r["tokens_per_s_per_gpu"], rates * 294 / 2)


def test_latency_limited_rate_is_the_highest_that_meets_the_limits():
    off = evaluate("llama-3.1-70b", "h200", batch="max", isl=222, osl=294, tp=2, precision="fp8")
    srv = evaluate("llama-3.1-70b", "h200", batch="max", isl=222, osl=294, tp=2, precision="fp8",
                   ttft_limit_ms=450, tpot_limit_ms=40)
    assert srv["meets_limits"] and srv["tpot_p99_s"] <= 0.040 and srv["ttft_p99_s"] <= 0.450
    assert srv["tokens_per_s_per_gpu"] < off["tokens_per_s_per_gpu"]
    above = evaluate("llama-3.1-70b", "h200", isl=222, osl=294, tp=2, precision="fp8",
                     request_rate=srv["request_rate"] * 1.04, ttft_limit_ms=450, tpot_limit_ms=40)
    assert not above["meets_limits"]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "explorer", "evaluate", *args], capture_output=True, text=True)


def test_cli_check_events_and_bad_flags():
    p = _cli("--model", "llama-3.1-70b", "--tp", "2", "--precision", "fp8", "--isl", "222", "--osl", "294",
             "--request-rate", "8", "--check-events", "--json")
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["load"] == "open-loop Poisson" and r["events"]["ttft_p99_s"] > 0
    for bad in (["--request-rate", "0"], ["--tpot-limit-ms", "40"], ["--check-events"],
                ["--request-rate", "3", "--batch", "max"]):
        p = _cli("--model", "llama-3.1-70b", *bad)
        assert p.returncode == 2, (bad, p.stdout, p.stderr)
        assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


@pytest.mark.parametrize("runtime,tp,isl,osl,cv", [("trtllm", 2, 222, 294, 1.0), ("sglang", 4, 2048, 256, 0.5)])
def test_length_spread_widens_the_tails_as_the_events_do(runtime, tp, isl, osl, cv):
    """Request lengths spread (lognormal, coefficient of variation ``cv``): the analytic p99s grow
    and stay within 25 % of the events at 30 % load (measured: TTFT -22..+6 %, TPOT -15..0 % over
    three runtimes and 10-50 % load -- the spread model is a first-order one, docs/simulator.md)."""
    sat = evaluate("llama-3.1-70b", "h200", batch="max", isl=isl, osl=osl, tp=tp, precision="fp8",
                   runtime=runtime)["request_rate"]
    rate = 0.3 * sat
    base = dict(model="llama-3.1-70b", hardware="h200", precision="fp8", tp=tp, isl=isl, osl=osl, batch=2048,
                request_rate=rate, runtime=runtime)
    d0, t0 = build_design(base)
    d, t = build_design(dict(base, isl_cv=cv, osl_cv=cv))
    r0, r = simulate(d0, t0), simulate(d, t)
    assert r["tpot_p99_s"][0] > r0["tpot_p99_s"][0] and r["ttft_p99_s"][0] > r0["ttft_p99_s"][0]
    assert r["tpot_s"][0] == r0["tpot_s"][0]  # means are untouched: only the spread model sees lengths
    grid = np.unique(np.r_[1:64, np.geomspace(64, 4096, 40).round()])
    ev = run_events(engine_profile(d, t, grid), rate, requests=4000, isl_cv=cv, osl_cv=cv)
    for m in ("ttft", "tpot"):
        assert r[f"{m}_p99_s"][0] == pytest.approx(ev.percentile(m, 0.99), rel=0.25), m


def _small_budget(tokens=512):
    import dataclasses

    from explorer.runtime import load_runtime

    return dataclasses.replace(load_runtime("trtllm"), max_tokens_per_step=tokens)


def test_a_prompt_longer_than_the_budget_pays_full_chunks_and_one_partial():
    """Worked by hand: one request alone, ISL 1.5x the step budget (mixed steps): its prompt takes
    two steps, a full chunk and a half one.  Each is a decode step plus its chunk's prompt work, so
    TTFT = 2 T_dec + ISL * (extra seconds per prompt token) + the request's own work -- not two full
    chunk steps (the events oracle runs the same chunks)."""
    rt = _small_budget(1025)  # one decode token in the step leaves 1024 prompt tokens
    d, t = build_design(dict(model="llama-3.1-70b", hardware="h200", precision="fp8", tp=2, isl=1536, osl=64,
                             batch=1, runtime=np.array([rt], dtype=object)))
    r = simulate(d, t)
    prof = engine_profile(d, t, [1.0])
    assert prof["budget_tokens"][0] == pytest.approx(1024)
    want = 2 * prof["t_decode_s"][0] + 1536 * prof["chunk_s_per_token"][0] + prof["request_s"]
    assert r["ttft_s"][0] == pytest.approx(want, rel=1e-9)
    full_chunks = 2 * (prof["t_decode_s"][0] + 1024 * prof["chunk_s_per_token"][0]) + prof["request_s"]
    assert r["ttft_s"][0] < full_chunks


@pytest.mark.parametrize("cv", [0.0, 0.8])
def test_prompts_spanning_several_steps_match_the_events(cv):
    """Prompts of 1024 tokens against a 512-token step budget (each spans two or more steps; with
    spread lengths the long ones span many): the analytic TTFT percentiles follow the events, the
    long prompts' extra steps included (``isl_per_budget`` in explorer/open_loop.py)."""
    rt = _small_budget(512)
    base = dict(model="llama-3.1-70b", hardware="h200", precision="fp8", tp=2, isl=1024, osl=256, batch=2048,
                runtime=np.array([rt], dtype=object), isl_cv=cv, osl_cv=cv)
    d, t = build_design(dict(base, batch=np.array([256]), request_rate=np.array([0.0])))
    sat = float(simulate(d, t)["request_rate"][0])
    rate = 0.2 * sat
    d, t = build_design(dict(base, request_rate=rate))
    r = simulate(d, t)
    assert r["feasible"][0]
    grid = np.unique(np.r_[1:64, np.geomspace(64, 4096, 40).round()])
    ev = run_events(engine_profile(d, t, grid), rate, requests=4000, isl_cv=cv, osl_cv=cv)
    if cv == 0.0:  # with spread lengths the median prompt is shorter than the mean: the analytic
        # p50 keeps the mean prompt's steps (measured +17 % at cv 0.8; the tail is what limits bind)
        assert r["ttft_p50_s"][0] == pytest.approx(ev.percentile("ttft", 0.5), rel=0.15)
    assert r["ttft_p99_s"][0] == pytest.approx(ev.percentile("ttft", 0.99), rel=0.25)


def test_poisson_ppf_matches_scipy_stats():
    """open_loop.poisson_ppf reproduces scipy.stats.poisson.ppf exactly (it exists to avoid importing
    scipy.stats): at 0, tiny, small, large means, and NaN/inf/negative ones."""
    from scipy.stats import poisson

    from explorer.open_loop import poisson_ppf

    rng = np.random.default_rng(3)
    mu = np.concatenate([[0.0, 1e-300, 1e-9, 0.1, 0.5, 1.0, 2.0, 3.0, 10.0, 100.0, 1e4, 1e6, np.nan, np.inf, -1.0],
                         rng.exponential(5.0, 20_000), rng.random(2_000) * 1e-3])
    for p in (0.5, 0.9, 0.99):
        with np.errstate(invalid="ignore"):
            want = poisson.ppf(p, mu)
        got = poisson_ppf(p, mu)
        assert np.array_equal(got, want, equal_nan=True), p
    # known answers by hand: P(N <= 0) = e^-1 = 0.368 < 0.5 <= P(N <= 1) = 0.736 for mu = 1
    assert poisson_ppf(0.5, np.array([1.0]))[0] == 1.0
    assert poisson_ppf(0.3, np.array([1.0]))[0] == 0.0
