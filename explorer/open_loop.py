"""The open-loop load model: requests arrive as a Poisson process at ``rate`` per second (MLPerf
Server and Interactive, vLLM ``--request-rate R``), whatever the server's state.

One engine (an attention group of a replica) serves the arrivals.  Its time is shared as in the
closed loop (:mod:`explorer.closed_loop`): ``N`` decode steps per second of ``T_dec`` each and
``tau`` engine seconds per prompt, so with the arrival rate ``X`` fixed by the load

    TPOT = T_dec / (1 - X tau),     b = X (OSL - 1) TPOT   (Little's law on the decode phase)

and the engine is *stable* only while ``X tau < 1``, ``X`` is below the mixed-step prompt bound
(at most one chunk per step) and ``b`` fits the running-request cap ``b_cap``.  An unstable point
is overloaded: its queue grows without bound (a result with ``feasible=False``, reason 8).

Latency percentiles (p50, p90, p99), analytic, tested against the discrete-event simulation of
the same engine in :mod:`explorer.events`:

* **TTFT** = wait for the prompts ahead + the step in flight + the prompt's own chunk steps + the
  runtime's per-request work.  Prompt work queues as an M/D/1 queue whose service is one prompt's
  chunk time ``S = prompt_s`` (``ISL`` tokens at ``Q`` tokens per prefill-carrying step), load
  ``rho = X S``.  The waiting time's tail is the Cramer-Lundberg exponential
  ``P(W > t) ~ C exp(-theta t)`` with ``rho (e^{theta S} - 1) = theta S`` and
  ``C = (1 - rho) / (rho e^{theta S} - 1)`` (exact decay rate of M/D/1; C capped at ``P(W>0)=rho``);
  its mean is Pollaczek-Khinchine's ``rho S / (2 (1 - rho))``.  The step in flight is a uniform
  residual, length-biased between pure decode steps and the longer steps that carry a chunk
  (:func:`residual_quantile`); the wait and the residual combine as ``max(q_p(W) + E[R], q_p(R))``.
  The prompt's own step also carries the prompts that arrived during the step before it,
  Poisson(``X T``): their p-quantile beyond the mean adds ``(q_p - X T) tau``.
* **TPOT** of one request is the mean over its ``OSL - 1`` steps.  Its batch and the prompts that
  share its steps both come from the Poisson arrivals around its lifetime ``D``: the batch
  averaged over a window of length ``D`` of an M/D/inf system has variance ``2 b / 3``, the number
  of prompts prefilled during the window is Poisson(``b``), and the two covary by ``b / 2``.  With
  ``T'`` the slope of ``T_dec`` in the batch and ``u = tau / (OSL - 1)`` a prompt's share of one
  decode step, ``Var(TPOT) = b (2/3 T'^2 + u^2 + T' u)``; the percentiles take the normal quantile.
  The prompts are a busy-period (branching) count: a request that meets more of them lives longer
  and meets more still, so ``u`` enters as ``u / (1 - X tau)`` (the Borel variance of a count whose
  every unit brings Poisson(``X tau``) more; measured against the events with SGLang's separate
  prefill steps at 10/30/50 % load the TPOT spread is 1.07/1.43/1.71x the plain Poisson one,
  against 1/(1 - X tau) = 1.09/1.34/1.73).

Ignored: the spread of request lengths (means are used), preemption and KV swapping (a point whose
running requests would exceed ``b_cap`` is overloaded rather than queued for slots), prompts
batched beyond one chunk per mixed step, and the skew of the Poisson batch at small ``b`` (the
normal quantile understates p99 there; the events oracle measures how much).
"""

from __future__ import annotations

import numpy as np

#: standard normal quantiles of the reported percentiles
PERCENTILES: dict[str, float] = {"p50": 0.5, "p90": 0.9, "p99": 0.99}
_Z = {"p50": 0.0, "p90": 1.2815515655446004, "p99": 2.3263478740408408}


def md1_tail(rho, service_s) -> tuple[np.ndarray, np.ndarray]:
    """Cramer-Lundberg tail of the M/D/1 waiting time, ``P(W > t) ~ C exp(-theta t)``: returns
    ``(theta, C)`` (``theta`` in 1/s).  ``rho`` in [0, 1); ``theta = inf`` where ``rho = 0``."""
    rho = np.clip(np.asarray(rho, dtype=np.float64), 0.0, 1.0 - 1e-12)
    S = np.maximum(np.asarray(service_s, dtype=np.float64), 1e-30)
    pos = rho > 1e-12
    r = np.where(pos, rho, 0.5)
    # g(x) = r (e^x - 1) - x is convex with g(0) = 0, g'(0) = r - 1 < 0; Newton from the right of
    # its positive root decreases monotonically onto it
    x = 3.0 * np.log(1.0 / r) + 1e-9
    for _ in range(60):
        ex = np.exp(np.minimum(x, 700.0))
        g = r * (ex - 1.0) - x
        x = np.maximum(x - g / np.maximum(r * ex - 1.0, 1e-300), 1e-300)
    C = np.minimum((1.0 - r) / np.maximum(r * np.exp(np.minimum(x, 700.0)) - 1.0, 1e-300), r)
    theta = np.where(pos, x / S, np.inf)
    return theta, np.where(pos, C, 0.0)


def tail_quantile(theta, C, p) -> np.ndarray:
    """p-quantile of a waiting time with an atom at 0 and tail ``C exp(-theta t)``."""
    theta = np.asarray(theta, dtype=np.float64)
    C = np.asarray(C, dtype=np.float64)
    q = np.log(np.maximum(C, 1e-300) / (1.0 - p)) / np.where(np.isfinite(theta), np.maximum(theta, 1e-300), 1.0)
    return np.where((C > 1.0 - p) & np.isfinite(theta), np.maximum(q, 0.0), 0.0)


def open_loop(rate, b_cap, osl, t_dec_s, tau_s, ttft_service_s, prompt_s, rate_max=np.inf,
              tpot_full_s=None) -> dict[str, np.ndarray]:
    """Mean operating point of Poisson arrivals at ``rate`` requests/s on one engine (module
    docstring).  Inputs as :func:`explorer.closed_loop.closed_loop`, plus ``prompt_s`` (wall time
    of one prompt's chunks at the full chunk size).  Returns the closed loop's keys (``tpot_s``,
    ``decode_batch``, ``step_batch``, ``request_rate``, ``ttft_s`` (mean), ``queued``,
    ``output_tokens_per_s``) and ``overloaded`` (bool), ``prompt_load`` (``rho``)."""
    X = np.asarray(rate, dtype=np.float64)
    n_dec = np.maximum(np.asarray(osl, dtype=np.float64) - 1.0, 0.0)
    T, tau, Ts, S = (np.asarray(x, dtype=np.float64) for x in (t_dec_s, tau_s, ttft_service_s, prompt_s))
    util = X * tau
    over = (util >= 1.0) | (X >= rate_max)
    tpot = np.where(over, T if tpot_full_s is None else np.maximum(tpot_full_s, T), T / np.maximum(1.0 - util, 1e-12))
    tpot = np.where(n_dec > 0, tpot, T)
    b = X * n_dec * tpot
    over = over | (b > b_cap)
    rho = np.clip(X * S, 0.0, 1.0 - 1e-9)
    wait = rho * S / (2.0 * (1.0 - rho))  # Pollaczek-Khinchine, deterministic service
    ttft = Ts + wait
    # an arrival sees the time-averaged batch (PASTA) and decodes alongside it
    seen = np.minimum(b + 1.0, np.maximum(b_cap, 1.0))
    return {"tpot_s": tpot, "decode_batch": np.minimum(b, np.maximum(b_cap, 0.0)), "step_batch": seen,
            "request_rate": X, "ttft_s": ttft, "queued": X * wait,
            "output_tokens_per_s": X * np.asarray(osl, dtype=np.float64), "overloaded": over,
            "prompt_load": rho}


def residual_quantile(p, share_long, t_short_s, t_long_s) -> np.ndarray:
    """p-quantile of the time left in the step in flight when a request arrives, steps being
    ``t_long_s`` (they carry a prompt chunk: ``share_long`` of the time) or ``t_short_s``; an arrival
    lands in a step in proportion to its length, and uniformly inside it."""
    w = np.clip(np.asarray(share_long, dtype=np.float64), 0.0, 1.0)
    Ts = np.maximum(np.asarray(t_short_s, dtype=np.float64), 1e-30)
    Tl = np.maximum(np.asarray(t_long_s, dtype=np.float64), Ts)
    upper = w * (1.0 - Ts / Tl) >= 1.0 - p  # the quantile lies inside the long steps only
    r_up = Tl * (1.0 - (1.0 - p) / np.maximum(w, 1e-300))
    r_lo = p / (w / Tl + (1.0 - w) / Ts)
    return np.where(upper, r_up, r_lo)


def poisson_ppf(p: float, mu: np.ndarray) -> np.ndarray:
    """The ``p``-quantile (``0 < p < 1``) of Poisson(``mu``), element-wise: the smallest ``k`` with
    ``P(N <= k) >= p``; NaN where ``mu`` is negative, NaN or infinite.  The computation of
    ``scipy.stats.poisson.ppf`` (scipy 1.17 ``_discrete_distns.poisson_gen._ppf``: the inverse of the
    regularized incomplete gamma, rounded up, then one step back where the CDF already reaches
    ``p``), with the same results (tests/test_open_loop.py), on ``scipy.special`` only: importing
    scipy.stats costs ~0.5-2 s, more than the validation files take to score."""
    from scipy.special import pdtr, pdtrik  # imported here: a plain closed-loop evaluation never needs them

    mu = np.asarray(mu, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        k = np.ceil(pdtrik(p, mu))
        below = np.maximum(k - 1.0, 0.0)
        out = np.where(pdtr(below, mu) >= p, below, k)
    return np.where(mu >= 0, out, np.nan)


def percentiles(op: dict[str, np.ndarray], osl, t_dec_s, t_dec_slope_s, tau_s, ttft_service_s, prompt_s,
                busy, t_chunk_step_s=None, chunk_step_share=None, step_tokens=1.0,
                mixed=True, isl_cv=0.0, osl_cv=0.0, isl_per_budget=0.0) -> dict[str, np.ndarray]:
    """TTFT and TPOT at p50/p90/p99 (seconds) of an open-loop operating point (module docstring).

    ``t_dec_slope_s`` is dT_dec/db (seconds per extra sequence) near the operating batch; ``busy``
    is 1 where a step of other requests is usually in flight at an arrival (0 for a lone request).
    ``t_chunk_step_s`` is the length of a step that carries a prompt chunk and
    ``chunk_step_share`` the share of steps that do (default: every step is ``t_dec_s``).
    ``step_tokens``: output tokens per sequence per step (speculative decoding: the step times given
    are per output token, the residual of a step in flight is a whole step).  ``mixed``: prompts
    ride in decode steps (the prompts co-scheduled in a prompt's own step add to its TTFT); with
    separate prefill steps those prompts are the queue the M/D/1 wait already counts.
    ``isl_cv``/``osl_cv``: coefficients of variation of the request lengths (0: every request at the
    mean, as the rest of the simulator assumes).  A prompt's own prefill scales with its length
    (lognormal quantile of ISL, its excess combined root-sum-square with the others'); the prompt
    work sharing a request's steps has variance ``b u^2 (1 + cv_isl^2)(1 + cv_osl^2)`` -- the
    second factor is ``E[OSL]/OSL`` averaged over requests: short requests average fewer steps.
    ``isl_per_budget``: the mean prompt over the prompt-token budget of a mixed step (``ISL / (Q_max
    - b)``, 0 for separate prefill): a prompt longer than the budget takes one step per budget's
    worth of tokens, so a p-quantile prompt of ``q ISL`` tokens also waits
    ``(max(1, q r) - max(1, r))`` more decode steps besides its extra compute ``(q - 1) tau``.
    Returns ``ttft_p50_s`` ... ``tpot_p99_s``.
    """
    n_dec = np.maximum(np.asarray(osl, dtype=np.float64) - 1.0, 1.0)
    T = np.asarray(t_dec_s, dtype=np.float64)
    slope = np.maximum(np.asarray(t_dec_slope_s, dtype=np.float64), 0.0)
    b = np.maximum(op["decode_batch"], 0.0)
    # a prompt's share of one decode step, amplified by the busy-period feedback: a request that
    # meets more prompts lives longer and so meets more still -- the count of prompts over its
    # lifetime is a branching (Borel) sum whose variance is the Poisson one / (1 - X tau)^2
    rho_pf = np.clip(np.asarray(op["request_rate"], dtype=np.float64) * np.asarray(tau_s, dtype=np.float64), 0.0, 0.95)
    u = np.asarray(tau_s, dtype=np.float64) / n_dec / (1.0 - rho_pf)
    cv_i2 = np.square(np.asarray(isl_cv, dtype=np.float64))
    cv_o2 = np.square(np.asarray(osl_cv, dtype=np.float64))
    sd_tpot = np.sqrt(b * (2.0 / 3.0 * slope * slope + u * u * (1.0 + cv_i2) * (1.0 + cv_o2) + slope * u))
    theta, C = md1_tail(op["prompt_load"], prompt_s)
    Tc = T if t_chunk_step_s is None else np.maximum(np.asarray(t_chunk_step_s, dtype=np.float64), T)
    E = np.asarray(step_tokens, dtype=np.float64)
    T, Tc = T * E, Tc * E  # whole steps for the residual and the TTFT terms
    f = np.zeros_like(T) if chunk_step_share is None else np.clip(np.asarray(chunk_step_share, dtype=np.float64), 0.0, 1.0)
    w = f * Tc / np.maximum(f * Tc + (1.0 - f) * T, 1e-30)  # share of time in chunk steps
    mean_resid = (f * Tc * Tc + (1.0 - f) * T * T) / np.maximum(2.0 * (f * Tc + (1.0 - f) * T), 1e-30)
    base = np.asarray(ttft_service_s, dtype=np.float64) - 0.5 * busy * T  # chunk steps + per-request work
    # the prompt's own step also carries the prompts that arrived during the step before it:
    # Poisson(X T_step) of them, each adding ~tau to that step
    tau = np.asarray(tau_s, dtype=np.float64)
    r_budget = np.maximum(np.asarray(isl_per_budget, dtype=np.float64), 0.0)
    # mixed: the prompts that arrived during the step before its own ride in that step; separate:
    # a prefill step takes every waiting prompt, so the ones that arrive while it waits for the step
    # in flight to end join its batch and delay its first token
    mu_own = np.maximum(op["request_rate"] * T, 0.0)
    out: dict[str, np.ndarray] = {}
    for name, p in PERCENTILES.items():
        resid = busy * np.maximum(tail_quantile(theta, C, p) + mean_resid, residual_quantile(p, w, T, Tc))
        # the co-scheduled prompts are Poisson(X T): their p-quantile beyond the mean, each ~tau
        # (mixed: their p-quantile beyond the mean, the mean is in the step time; separate: those
        # arriving during the wait, their mean given the wait at its p-quantile, X * resid)
        extra = np.where(mixed, np.maximum(poisson_ppf(p, mu_own) - mu_own, 0.0) * tau,
                         op["request_rate"] * resid * tau)
        # the prompt's own length: lognormal quantile ratio of ISL (mean 1), each token ~tau/ISL
        s2 = np.log1p(cv_i2)
        q_len = np.exp(_Z[name] * np.sqrt(s2) - s2 / 2.0)
        own = np.maximum(q_len - 1.0, 0.0) * tau + T * np.maximum(np.maximum(q_len * r_budget, 1.0)
                                                                  - np.maximum(r_budget, 1.0), 0.0)
        spread = resid + extra
        out[f"ttft_{name}_s"] = base + np.sqrt(np.square(spread) + np.square(own))
        # Cornish-Fisher skew term: the counts behind the spread are Poisson(b), skewness 1/sqrt(b)
        z = _Z[name] + (_Z[name] ** 2 - 1.0) / 6.0 / np.sqrt(np.maximum(b, 1.0)) * (_Z[name] > 0)
        out[f"tpot_{name}_s"] = op["tpot_s"] + z * sd_tpot  # (sd_tpot uses the per-token slope)
    return out
