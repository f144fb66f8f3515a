"""Attention-DP balance: a runtime that holds new prompts until every attention data-parallel rank
has one, so that the ranks run their context steps together.

TensorRT-LLM's PyTorch executor (``attention_dp_config: enable_balance: true``;
``PyExecutor._balance_adp_requests``, described in NVIDIA's tech blog 10 "ADP Balance Strategy"):
each iteration, if every rank has a pending context request (and a free slot) they are all
scheduled and a counter resets; otherwise no rank schedules context and the counter counts one
iteration, releasing whatever is pending once it reaches ``timeout_iters``.  A rank with no
generation request releases at once (nothing to keep in step with).  The InferenceX DeepSeek-R1
TensorRT-LLM recipes set ``timeout_iters: 60, batching_wait_iters: 0`` with
``enable_attention_dp`` (benchmarks/dsr1_fp*_b200_trt*.sh; runtimes/trtllm.yaml names them).

Model, per attention-DP rank (the engine of explorer/engine/engine_step.py), with ``r`` prompts
arriving per decode step on each of ``dp`` ranks as a Poisson stream, handed to the ranks in turn
(the request queue gives a new request to the rank with a free slot, and a closed loop frees them
in turn), so ``dp`` consecutive arrivals cover every rank:

* a cycle starts at a release (the counter resets, nothing is pending) and ends at
  ``tau = min(T, S_dp)``, ``S_dp`` the time of the cycle's ``dp``-th arrival (rate
  ``lam = dp r``);
* with ``N ~ Poisson(lam T)`` and ``P_j = P(N >= j)``: ``E[tau] = sum_{j=1..dp} P_j / lam``, the
  prompts a cycle releases ``E[N(tau)] = lam E[tau]`` (Wald), and the prompt-steps they wait
  ``E[int_0^tau N(t) dt] = sum_{k=1..dp-1} k P_{k+1} / lam`` (the time the count spends at each
  ``k < dp``), so a prompt waits on average (:func:`wait_steps`)

      W = sum_{k=1..dp-1} k P_{k+1} / (lam sum_{j=1..dp} P_j)   decode steps

  -- ``(dp-1)/(2 dp r)`` when cycles end by count (``lam T`` large), ``T/2`` when they end by
  timeout (``lam T`` small);
* the release step carries every rank's prompts at once, so a rank's steps stall for another
  rank's prompt once per cycle that releases any: per prompt of its own a rank pays
  ``P_1 / (E[N(tau)] / dp) = dp P_1 / sum_j P_j`` prefill steps' worth, 1 when cycles end by count
  and ``dp`` when prompts are rare -- the bound :func:`straggler_bound` puts on the independent-rank
  straggler factor (:func:`explorer.engine.engine_step.dp_straggler_factor`).

Tested against a step-by-step simulation of the scheduler loop above (tests/test_adp_balance.py:
within 5 % of its mean hold from count-bound to timeout-bound cycles).  Checked against the three
InferenceX DeepSeek-R1 TP8/EP8 attention-DP curve rows on B200 (fronts_inferencex.yaml): 1k/1k at
128 clients measured a median TTFT of 717 ms, where ``lam T ~ 8`` and the hold is ~25 decode steps
of 20.5 ms plus the prefill.  Ignored: the spread of the hold (percentiles add its mean as a
constant), ``batching_wait_iters`` (0 in the recipes), a rank that falls idle mid-cycle (it
releases at once; modelled only as "no hold while nothing else decodes"), a release step being as
slow as the rank with the most prompts.
"""

from __future__ import annotations

import numpy as np


def _tails(timeout_iters, dp, arrivals_per_step, fixed: tuple | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(lam, P_1, sum_{j=1..dp} P_j, sum_{k=1..dp-1} k P_{k+1}) of the module docstring, with
    ``P_j = P(Poisson(lam T) >= j)``: ``P_1 = 1 - e^-mu`` (expm1, exact for small ``mu``), then
    ``P_{j+1} = P_j - e^-mu mu^j / j!`` -- a few multiply-adds per rank, not an incomplete gamma.
    ``fixed``: :func:`_tail_terms` of ``timeout_iters`` and ``dp`` where the caller has them."""
    T, d, zero_d, ranks = _tail_terms(timeout_iters, dp) if fixed is None else fixed
    lam = d * np.maximum(np.asarray(arrivals_per_step, dtype=np.float64), 0.0)
    mu = lam * T
    p1 = -np.expm1(-mu)  # P_1 (returned as it is: the loop below rebinds pj, it never writes into it)
    pj = p1
    pmf = mu * np.exp(-mu)  # P(N = 1)
    den, num = pj + zero_d, 0.0 * pj * d
    for j, on in ranks:  # P_j for j = 2 .. max dp
        pj = np.maximum(pj - pmf, 0.0)
        pmf = pmf * mu / j
        if on is None:  # every row has j <= dp: np.where(on, x, 0.0) is x as it is
            den, num = den + pj, num + (j - 1) * pj
        else:
            den, num = den + np.where(on, pj, 0.0), num + np.where(on, (j - 1) * pj, 0.0)
    return lam, p1, den, num


def _tail_terms(timeout_iters, dp) -> tuple:
    """:func:`_tails`' figures of the timeout and ``dp`` alone: ``max(T, 0)``, ``max(round(dp), 1)``,
    ``0.0 * dp`` and, per rank ``j = 2 .. max dp``, the mask ``j <= dp`` (None where every row has it)."""
    T = np.maximum(np.asarray(timeout_iters, dtype=np.float64), 0.0)
    d = np.maximum(np.round(np.asarray(dp, dtype=np.float64)), 1.0)
    ranks = []
    for j in range(2, int(np.max(d)) + 1 if np.size(d) else 2):
        on = j <= d
        ranks.append((j, None if np.shape(on) == np.shape(d) and on.all() else on))
    return T, d, 0.0 * d, ranks


def balancing_rows(timeout_iters, dp) -> tuple:
    """:func:`hold`'s figures of ``timeout_iters`` and ``dp`` alone, for a caller that holds many
    arrival rates over the same rows (the closed-loop passes take them once): the broadcast shape,
    the flat positions of the rows that balance (``timeout_iters > 0`` and ``dp > 1``; None where
    none does), their timeouts, ``max(dp, 1)``, the timeouts' half and :func:`_tail_terms` of them.
    Positions, not the boolean mask: ``np.take(x, at)`` is ``x[on]`` (the same elements, in the same
    order) and ``y.ravel()[at] = v`` is ``y[on] = v``, at a fifth of a mask's cost."""
    T, d = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (timeout_iters, dp)))
    on = (T > 0) & (d > 1)
    if not on.any():
        return T.shape, None, None, None, None, None
    at = np.flatnonzero(on)
    t, dd = np.take(T, at), np.maximum(np.take(d, at), 1.0)
    return T.shape, at, t, dd, 0.5 * t, _tail_terms(t, dd)


def hold(timeout_iters, dp, arrivals_per_step, rows: tuple | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(mean decode steps a new prompt is held, bound on the straggler factor) -- the module
    docstring's ``W`` and ``dp P_1 / sum_j P_j``, computed once, on the rows that balance
    (``timeout_iters > 0`` and ``dp > 1``) only: elsewhere ``(0, inf)`` (no hold, independent
    ranks).  ``arrivals_per_step``: prompts per decode step on one rank.  Arrays broadcast.
    ``rows``: :func:`balancing_rows` of ``timeout_iters`` and ``dp`` where the caller has them (used
    where the arrivals have their shape: the same figures, the same operations on them)."""
    if rows is not None and np.shape(arrivals_per_step) == rows[0]:
        r = np.asarray(arrivals_per_step, dtype=np.float64)
    else:
        T, d, r = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (timeout_iters, dp, arrivals_per_step)))
        rows = balancing_rows(T, d)
    shape, at, t, dd, half_t, fixed = rows
    wait, bound = np.zeros(shape), np.full(shape, np.inf)
    if at is not None:
        lam, p1, den, num = _tails(t, dd, np.take(r, at), fixed)
        some = den > 0  # (one mask for both figures: the same comparison)
        wait.ravel()[at] = np.where(some, num / np.maximum(lam * den, 1e-300), half_t)  # no arrivals: the T/2 limit
        bound.ravel()[at] = np.clip(np.where(some, dd * p1 / np.maximum(den, 1e-300), dd), 1.0, dd)
    return wait, bound


def wait_steps(timeout_iters, dp, arrivals_per_step) -> np.ndarray:
    """Mean decode steps a new prompt is held (the first figure of :func:`hold`)."""
    return hold(timeout_iters, dp, arrivals_per_step)[0]


def straggler_bound(timeout_iters, dp, arrivals_per_step) -> np.ndarray:
    """The most a prompt's engine time is multiplied by because the ranks step together, where the
    runtime balances (the second figure of :func:`hold`): between 1 and ``dp``; ``inf`` (no bound:
    independent ranks) where the runtime does not balance or ``dp <= 1``."""
    return hold(timeout_iters, dp, arrivals_per_step)[1]
