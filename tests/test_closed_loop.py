"""The closed-loop load model (explorer/closed_loop.py) and the serving helpers of the simulator,
with answers worked by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from explorer.closed_loop import closed_loop, start_burst_ttft_s
from explorer.simulate import expected_max_load_factor, graph_padded


def test_four_clients_by_hand():
    """C = 4, OSL = 101 (100 decode steps), T_dec = 10 ms, tau = 50 ms per prompt, TTFT = 100 ms.

    Quadratic tau*Ts*X^2 - (Ts + 100*T_dec + C*tau)*X + C = 0: a = 0.005, B = 0.1 + 1.0 + 0.2 = 1.3,
    disc = sqrt(1.69 - 0.08) = sqrt(1.61) = 1.2688578, X = 2C/(B + disc) = 8/2.5688578 = 3.114224/s;
    TPOT = 0.01/(1 - 0.155711) = 11.84430 ms; decode batch = X*100*TPOT = 3.688593; a decoding
    request sees 1 + 3*D/cycle = 1 + 3*1.184430/1.284430 = 3.766355; tokens/s = 101*X = 314.5366.
    """
    op = closed_loop(4.0, 1e9, 101.0, 0.010, 0.050, 0.100)
    x = 8 / (1.3 + math.sqrt(1.61))
    assert x == pytest.approx(3.114224, rel=1e-6)
    assert op["request_rate"] == pytest.approx(x, rel=1e-12)
    tpot = 0.010 / (1 - x * 0.050)
    assert op["tpot_s"] == pytest.approx(tpot, rel=1e-12)
    assert op["decode_batch"] == pytest.approx(x * 100 * tpot, rel=1e-12)
    assert op["step_batch"] == pytest.approx(1 + 3 * 100 * tpot / (0.1 + 100 * tpot), rel=1e-12)
    assert op["ttft_s"] == pytest.approx(0.100, rel=1e-12)  # nobody queues
    assert op["output_tokens_per_s"] == pytest.approx(101 * x, rel=1e-12)
    # Little's law over the cycle holds exactly
    assert 4.0 == pytest.approx(op["request_rate"] * (op["ttft_s"] + 100 * op["tpot_s"]), rel=1e-12)


def test_capped_batch_queues_the_rest_by_hand():
    """Same engine, 64 clients, but only 10 running slots: TPOT = T_dec + 10*tau/100 = 15 ms,
    X = 10/(100*0.015) = 6.6667/s, cycle = 64/X = 9.6 s, TTFT = 9.6 - 1.5 = 8.1 s, and
    64 - 10 - X*0.1 = 53.333 clients wait for a slot."""
    op = closed_loop(64.0, 10.0, 101.0, 0.010, 0.050, 0.100)
    assert op["decode_batch"] == pytest.approx(10.0)
    assert op["tpot_s"] == pytest.approx(0.015, rel=1e-12)
    assert op["request_rate"] == pytest.approx(10 / 1.5, rel=1e-12)
    assert op["ttft_s"] == pytest.approx(9.6 - 1.5, rel=1e-12)
    assert op["queued"] == pytest.approx(64 - 10 - 0.1 * 10 / 1.5, rel=1e-12)


def test_prefill_bound_rate_stays_below_one_over_tau():
    """With heavy prompts the request rate approaches, never exceeds, the prefill-bound 1/tau."""
    op = closed_loop(np.array([1.0, 10.0, 1000.0]), 1e9, 11.0, 0.001, 0.1, 0.1)
    assert np.all(op["request_rate"] < 10.0)
    assert op["request_rate"][2] == pytest.approx(10.0, rel=0.01)
    assert np.all(np.diff(op["request_rate"]) > 0)


def test_mixed_step_rate_cap():
    """Mixed steps carry one chunk each: the rate caps at rate_max and TPOT is the mixed step."""
    op = closed_loop(1000.0, 1e9, 11.0, 0.001, 0.01, 0.1, rate_max=20.0, tpot_full_s=0.02)
    assert op["request_rate"] == pytest.approx(20.0)
    assert op["tpot_s"] == pytest.approx(0.02)


def test_one_output_token_has_no_decode():
    op = closed_loop(3.0, 1e9, 1.0, 0.004, 0.01, 0.05)
    assert op["decode_batch"] == 0.0
    assert op["tpot_s"] == pytest.approx(0.004)


@settings(max_examples=200, deadline=None)
@given(st.floats(1, 4096), st.floats(1, 1e4), st.integers(1, 8192), st.floats(1e-5, 0.5), st.floats(0, 2.0),
       st.floats(1e-4, 10.0))
def test_littles_law_and_bounds(clients, cap, osl, t_dec, tau, ts):
    op = closed_loop(clients, cap, float(osl), t_dec, tau, ts)
    x, tpot, b = float(op["request_rate"]), float(op["tpot_s"]), float(op["decode_batch"])
    assert x > 0 and tpot >= t_dec * (1 - 1e-9)
    assert b <= min(clients, cap) * (1 + 1e-9)
    assert float(op["ttft_s"]) >= ts * (1 - 1e-9)
    if osl > 1:
        assert clients == pytest.approx(x * (float(op["ttft_s"]) + (osl - 1) * tpot), rel=1e-6)
    if tau > 0:
        assert x * tau < 1.0 + 1e-9  # never beyond the prefill-bound rate


def test_start_burst_by_hand():
    """64 clients, 30 ms per back-to-back prompt: (64 - 1)/2 * 30 ms / 10 = 94.5 ms."""
    assert start_burst_ttft_s(64.0, 0.030) == pytest.approx(0.0945)
    assert start_burst_ttft_s(1.0, 0.030) == 0.0


def test_graph_padding_by_hand():
    """Captured sizes 1, 2, 4, 8, 16, ...: 3 -> 4, 9 -> 16, 8.25 -> 0.75*8 + 0.25*16 = 10; above the
    largest captured batch (64) nothing is padded; step 0 = no CUDA graphs."""
    b = np.array([1.0, 3.0, 9.0, 8.25, 100.0])
    got = graph_padded(b, np.full(5, 8.0), np.full(5, 64.0))
    np.testing.assert_allclose(got, [1.0, 4.0, 16.0, 10.0, 100.0])
    np.testing.assert_allclose(graph_padded(b, np.zeros(5), np.zeros(5)), b)


def test_expected_max_expert_load_by_hand():
    """e = 8 GPUs, 64 routed slots: mean 8 per GPU, sd sqrt(64*(1/8)*(7/8)) = 2.6458, Blom's
    z_8 = Phi^-1(7.625/8.25) = 1.4329; factor = 1 + 1.4329*2.6458/8 = 1.4739.  One GPU: 1."""
    f = expected_max_load_factor(np.array([8.0, 1.0]), np.array([64.0, 64.0]))
    assert f[0] == pytest.approx(1 + 1.4329 * math.sqrt(7.0) / 8.0, rel=1e-3)
    assert f[1] == 1.0
    # more tokens, smaller relative imbalance
    g = expected_max_load_factor(np.full(3, 8.0), np.array([8.0, 80.0, 8000.0]))
    assert np.all(np.diff(g) < 0) and g[-1] < 1.05


@settings(max_examples=40, deadline=None)
@given(clients=st.integers(1, 4096), cv=st.floats(0.0, 0.3), per=st.integers(1, 20))
def test_finite_run_drain_is_a_bounded_loss(clients, cv, per):
    """A finite run never measures more than the steady state, and never loses more than its slots
    idling for one longest request each (the drain's bound)."""
    from explorer.closed_loop import finite_run_loss, finite_run_throughput_factor

    loss = finite_run_loss(clients, cv, per)
    h = np.sqrt(3.0) * cv
    assert 0.0 <= loss <= (1.0 + h) / (per * (1.0 - h)) + 1e-12
    f = finite_run_throughput_factor(clients, cv, per)
    assert 0.0 < float(f) <= 1.0


def test_a_prompt_only_request_raises_no_overflow_warning():
    """OSL = 1: nothing decodes, so the capped branch (rate = cap / decode time) is not taken; its
    guard must not overflow either (a 1e9-sequence cap, as an unbounded runtime's, once warned)."""
    import warnings

    from explorer.closed_loop import closed_loop

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        op = closed_loop(np.array([4.0]), np.array([1e9]), np.array([1.0]), np.array([0.01]), np.array([0.02]),
                         np.array([0.05]))
    # by hand: B = Ts + C tau = 0.05 + 4 * 0.02 = 0.13, a = tau Ts = 0.001, disc = sqrt(B^2 - 4 a C) =
    # sqrt(0.0169 - 0.016) = 0.03, X = 2 C / (B + disc) = 8 / 0.16 = 50 requests/s
    assert op["request_rate"][0] == pytest.approx(50.0)
