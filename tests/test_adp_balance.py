"""Attention-DP balance (explorer/adp_balance.py): TensorRT-LLM holds new prompts until every
attention data-parallel rank has one, for at most ``timeout_iters`` iterations."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from explorer import adp_balance
from explorer.api import evaluate
from explorer.runtime import load_runtime


def test_wait_and_straggler_by_hand():
    # 2 ranks, one prompt per 100 steps on each, 60-step timeout: lam = 0.02/step, N ~ Poisson(1.2)
    # P1 = 1 - e^-1.2 = 0.698806, P2 = 1 - e^-1.2 (1 + 1.2) = 0.337373
    # W = 1 * P2 / (lam (P1 + P2)) = 0.337373 / (0.02 * 1.036179) = 16.28 steps
    # straggler: dp P1 / (P1 + P2) = 2 * 0.698806 / 1.036179 = 1.3488
    assert adp_balance.wait_steps(60, 2, 0.01) == pytest.approx(16.280, abs=2e-3)
    assert adp_balance.straggler_bound(60, 2, 0.01) == pytest.approx(1.3488, abs=2e-4)
    # cycles ended by count (lam T = 240): the k-th of 8 arrivals waits for the 8 - k after it,
    # (dp - 1) / (2 dp r) = 7 * 2 / 16 = 0.875 steps; every rank has its prompt in the release step
    assert adp_balance.wait_steps(60, 8, 0.5) == pytest.approx(0.875, rel=1e-6)
    assert adp_balance.straggler_bound(60, 8, 0.5) == pytest.approx(1.0)
    # rare prompts: the timeout ends every cycle, a prompt waits T/2, and each one stalls all 8 ranks
    assert adp_balance.wait_steps(60, 8, 1e-7) == pytest.approx(30.0, rel=1e-3)
    assert adp_balance.straggler_bound(60, 8, 1e-7) == pytest.approx(8.0, rel=1e-3)
    # no balancing, or a single rank: no hold and no bound
    assert adp_balance.wait_steps(0, 8, 0.01) == 0.0 and adp_balance.wait_steps(60, 1, 0.01) == 0.0
    assert np.isinf(adp_balance.straggler_bound(0, 8, 0.01))


def _scheduler_mean_hold(dp: int, r: float, T: int, steps: int = 30000, seed: int = 0) -> float:
    """TensorRT-LLM's balance loop, step by step: Poisson arrivals handed to the ranks in turn; each
    iteration releases every pending prompt if every rank has one, else counts, releasing at T."""
    rng = np.random.default_rng(seed)
    pending: list[list[int]] = [[] for _ in range(dp)]
    count, turn, held = 0, 0, []
    for t in range(steps):
        for _ in range(rng.poisson(dp * r)):
            pending[turn % dp].append(t)
            turn += 1
        count = 0 if all(pending) else count + 1
        if count == 0 or count >= T:
            for q in pending:
                held += [t - a for a in q]
                q.clear()
            count = 0
    return float(np.mean(held))


@pytest.mark.parametrize("dp, steps_per_prompt", [(8, 8), (8, 64), (8, 200), (2, 100)])
def test_wait_matches_the_scheduler_loop(dp, steps_per_prompt):
    """From count-bound cycles (8 ranks, a prompt per 8 steps each) through the crossover to
    timeout-bound ones (a prompt per 200 steps), the closed form is the simulated loop's mean hold
    within 5 % (the loop's whole-step arrivals wait up to half a step less)."""
    r = 1.0 / steps_per_prompt
    got = float(adp_balance.wait_steps(60, dp, r))
    assert got == pytest.approx(_scheduler_mean_hold(dp, r, 60), rel=0.05, abs=0.3)


@settings(max_examples=60, deadline=None)
@given(T=st.integers(1, 500), dp=st.integers(2, 64), r=st.floats(1e-5, 2.0))
def test_wait_never_exceeds_half_the_timeout_and_bound_within_one_and_dp(T, dp, r):
    w = float(adp_balance.wait_steps(T, dp, r))
    assert 0.0 <= w <= T / 2 + 1e-9
    b = float(adp_balance.straggler_bound(T, dp, r))
    assert 1.0 <= b <= dp
    # more arrivals per step: never a longer hold, never a larger straggler bound
    assert float(adp_balance.wait_steps(T, dp, 2 * r)) <= w * (1 + 1e-9) + 1e-12
    assert float(adp_balance.straggler_bound(T, dp, 2 * r)) <= b * (1 + 1e-9) + 1e-12


def _no_balance():
    rt = load_runtime("trtllm")
    return replace(rt, adp_balance_iters=0)


def test_balancing_runtime_trades_ttft_for_aligned_prompts():
    """DeepSeek-R1 as TensorRT-LLM's DEP8 on B200 at 128 clients (InferenceX's attention-DP config):
    balancing holds each prompt ~half a 60-step cycle (TTFT up by hundreds of ms), and the ranks'
    prompts run in one step, so no rank waits on another's prompt (throughput up); with attention DP
    off (TP8) the profile's balance changes nothing."""
    kw = dict(batch=128, tp=1, dp=8, ep=8, precision="fp4", isl=922, osl=922, runtime="trtllm")
    on = evaluate("deepseek-r1", "b200", **kw)
    off = evaluate("deepseek-r1", "b200", **{**kw, "runtime": _no_balance()})
    assert on["ttft_s"] > off["ttft_s"] + 0.2
    assert on["tokens_per_s_per_gpu"] > off["tokens_per_s_per_gpu"]
    kw8 = {**kw, "tp": 8, "dp": 1}
    a, b = evaluate("deepseek-r1", "b200", **kw8), evaluate("deepseek-r1", "b200", **{**kw8, "runtime": _no_balance()})
    assert (a["ttft_s"], a["tokens_per_s_per_gpu"]) == (b["ttft_s"], b["tokens_per_s_per_gpu"])
