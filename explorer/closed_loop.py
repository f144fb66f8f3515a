"""The closed-loop load model: C clients, each sending its next request when the last one finishes.

This is how InferenceX / InferenceMAX (``--max-concurrency C --request-rate inf``), NVIDIA NIM
benchmarks and AIPerf load a server, so it is how their measured curves must be read.

One engine (an attention group of a replica) serves the clients.  A request spends ``TTFT``
waiting for and running its prefill, then ``OSL - 1`` decode steps (the first output token comes
from the prefill).  The engine's time is shared: ``N`` decode steps per second of ``T_dec`` each,
and ``tau`` seconds of engine time per prompt (its prefill chunks: their own steps, or their extra
cost inside mixed steps), so with ``X`` requests per second

    N * T_dec + X * tau = 1          ->  TPOT = 1/N = T_dec / (1 - X tau)
    C = X * (TTFT + (OSL - 1) TPOT)  (Little's law over the whole cycle, no think time)

which, with ``TTFT`` the unqueued time to first token, is a quadratic in ``X`` whose smaller root
is the operating point (it stays below the prefill-bound rate ``1/tau``):

    tau T_s X^2 - (T_s + (OSL-1) T_dec + C tau) X + C = 0.

Little's law on the decode phase gives the time-averaged decode batch ``b = X (OSL-1) TPOT``.  A
decoding request sees ``1 + (C - 1) D / (TTFT + D)`` requests decoding, itself included (the arrival
theorem of closed queueing networks), the batch its steps are costed at.  When ``b`` exceeds the
engine's cap ``b_cap`` (KV-cache capacity or the runtime's maximum running requests) the surplus
clients queue: ``b = b_cap``, ``TPOT = T_dec + b_cap tau / (OSL-1)``, ``X = b_cap / ((OSL-1) TPOT)``
and a request waits ``C/X - (OSL-1) TPOT - T_s`` before its prefill.

Output tokens per second of the engine are ``X * OSL``; tokens per second per user ``1 / TPOT``.

Ignored here: the spread of request lengths (we use the mean ISL/OSL: InferenceX draws both uniform
in [0.8 L, L]) and queueing of one prompt behind another beyond the engine-time balance above.  A
*finite* benchmark (``num_prompts = 10 C``) differs from this steady state in two named places
below, which score measured runs, not designs: its opening burst adds to the mean TTFT
(:func:`start_burst_ttft_s`) and its drain takes from the measured throughput
(:func:`finite_run_throughput_factor`).
"""

from __future__ import annotations

import functools
import math

import numpy as np

#: InferenceX / InferenceMAX send ``num_prompts = 10 * concurrency`` requests per point
#: (fronts.yaml meta.inferencex_conventions): one request in ten is in the opening burst.
BENCHMARK_PROMPTS_PER_CLIENT = 10


def start_burst_ttft_s(clients, prompt_s, prompts_per_client=BENCHMARK_PROMPTS_PER_CLIENT):
    """Extra *mean* TTFT of a finite closed-loop benchmark that opens with every client sending at
    once: the opening ``C`` prompts are prefilled back to back (``prompt_s`` engine seconds each),
    waiting ``(C - 1)/2`` prompts on average, and they are ``1/prompts_per_client`` of all requests.
    Steady state (what :func:`closed_loop` gives) ignores it; the measured mean includes it."""
    c = np.asarray(clients, dtype=np.float64)
    return np.maximum(c - 1.0, 0.0) / 2.0 * np.asarray(prompt_s, dtype=np.float64) / prompts_per_client


#: Monte Carlo draws of :func:`finite_run_loss`: about ``FINITE_RUN_DRAWS`` job durations in all
#: (repetitions = draws / (prompts per client * clients), at least 8): the loss's standard error is
#: under 0.1 percentage point at every concurrency (checked 1..1024 clients)
FINITE_RUN_DRAWS = 80_000
#: beyond this many clients the drain's loss has stopped growing (5.2 % at 256, 5.4 % at 512 for
#: InferenceX's lengths): larger pools take its value instead of a longer simulation
FINITE_RUN_MAX_CLIENTS = 1024


@functools.lru_cache(maxsize=1024)
def finite_run_loss(clients: int, length_cv: float, prompts_per_client: int = BENCHMARK_PROMPTS_PER_CLIENT) -> float:
    """Relative shortfall of a finite closed-loop run's measured throughput (total output tokens over
    the run's wall time) below the steady-state rate (Little's law on the mean latency), as
    ``steady / measured - 1``.

    The run: ``prompts_per_client * clients`` requests through ``clients`` slots
    (``--max-concurrency C``, all requests queued at once), each slot taking the next request when
    its last one finishes.  All slots start together; request durations are proportional to their
    output lengths, uniform with coefficient of variation ``length_cv`` (InferenceX: lengths in
    [0.8 L, L], 0.064).  Once the queue is empty the slots go idle one by one while the last
    requests finish, and the run's wall time includes that drain: about half a request of every
    slot over ten requests at large C (-> ~5 %), less at small C, where the slots have not drifted
    apart (0 at one client).  Computed by Monte Carlo of that job pool (seeded: the same figure on
    every call and machine).

    Checked against the data (fronts.yaml ``meta.derived_throughput``: 232 InferenceX rows with both
    measured throughput and mean TTFT/TPOT, derived / measured - 1 = 0.0..+4.4 %, median +2.3 %;
    the 148 such rows in validation/fronts*.yaml: 0.0 % at 1 client, +1.4..+4.0 % at 4, +2.0..+6.3 % at
    16-64, against 0, 2.1, 3.5-4.6 % here).  Ignored: the spread of TTFT and of per-request TPOT (which
    add to it) and the faster steps of the drain's smaller batches (which take from it: a run whose
    step time grows with the batch loses less; the 1k/8k rows at 64-128 clients show ~2 %, not 4.6-5 %).
    """
    c = min(int(clients), FINITE_RUN_MAX_CLIENTS)
    k = int(prompts_per_client)
    if c <= 1 or k < 1 or not length_cv > 0.0:
        return 0.0  # one slot runs its requests back to back; equal requests finish together
    n = k * c
    half = math.sqrt(3.0) * float(length_cv)  # uniform on [1 - h, 1 + h] has cv h / sqrt(3)
    reps = max(8, FINITE_RUN_DRAWS // n)
    rng = np.random.default_rng(20261206 + c)
    d = rng.uniform(1.0 - half, 1.0 + half, (reps, n))
    free = d[:, :c].copy()  # when each slot is next free
    rows = np.arange(reps)
    for j in range(c, n):  # the queue's next request goes to the slot that frees first
        i = free.argmin(axis=1)
        free[rows, i] += d[:, j]
    return float(np.mean(c * free.max(axis=1) / d.sum(axis=1)) - 1.0)


def finite_run_throughput_factor(clients, length_cv, prompts_per_client=BENCHMARK_PROMPTS_PER_CLIENT) -> np.ndarray:
    """Measured / steady-state throughput of a finite closed-loop benchmark run,
    ``1 / (1 + finite_run_loss)`` element-wise over ``clients`` (and ``length_cv``)."""
    c, cv = np.broadcast_arrays(np.asarray(clients, dtype=np.float64), np.asarray(length_cv, dtype=np.float64))
    out = np.ones(c.shape)
    for (ci, vi) in {(int(round(a)), float(b)) for a, b in zip(c.ravel(), cv.ravel(), strict=True)}:
        out[(np.round(c) == ci) & (cv == vi)] = 1.0 / (1.0 + finite_run_loss(ci, vi, int(prompts_per_client)))
    return out


def closed_loop(clients, b_cap, osl, t_dec_s, tau_s, ttft_service_s, rate_max=np.inf,
                tpot_full_s=None) -> dict[str, np.ndarray]:
    """Operating point of ``clients`` closed-loop clients on one engine (see the module docstring).

    ``t_dec_s`` is the pure decode step, ``tau_s`` the engine time one prompt costs and
    ``ttft_service_s`` the time to first token without queueing, all evaluated at the batches this
    returns (the caller iterates on those).  Returns ``tpot_s``, ``decode_batch`` (time-averaged),
    ``step_batch`` (seen by a decoding request), ``request_rate`` (requests/s), ``ttft_s`` (service
    + queue wait), ``queued`` (clients waiting for a running slot) and ``output_tokens_per_s``.

    ``rate_max`` bounds the request rate where prompts ride in mixed steps: at most one chunk per
    step, so once every step carries one (``tpot_full_s``, the mixed step), prompts queue instead.
    """
    C = np.asarray(clients, dtype=np.float64)
    n_dec = np.maximum(np.asarray(osl, dtype=np.float64) - 1.0, 0.0)
    T, tau, Ts = (np.asarray(x, dtype=np.float64) for x in (t_dec_s, tau_s, ttft_service_s))
    Bq = Ts + n_dec * T + C * tau
    a = tau * Ts
    disc = np.sqrt(np.maximum(Bq * Bq - 4.0 * a * C, 0.0))
    # smaller root, written to stay exact when a -> 0 (X = C / Bq)
    rate_free = 2.0 * C / np.maximum(Bq + disc, 1e-300)
    full = rate_free > rate_max  # every step carries a prompt chunk: the prompt rate is capped
    rate_free = np.where(full, rate_max, rate_free)
    tpot_free = np.where(full, T if tpot_full_s is None else tpot_full_s,
                         T / np.maximum(1.0 - rate_free * tau, 1e-12))
    b_free = rate_free * n_dec * tpot_free
    capped = (b_free > b_cap) & (n_dec > 0)
    tpot_cap = T + b_cap * tau / np.maximum(n_dec, 1.0)
    if tpot_full_s is not None:  # mixed steps: never slower than every step carrying a chunk
        tpot_cap = np.where(np.isfinite(rate_max), np.minimum(tpot_cap, tpot_full_s), tpot_cap)
    # with OSL = 1 nothing decodes: report the bare step time as TPOT
    tpot = np.where(n_dec > 0, np.where(capped, tpot_cap, tpot_free), T)
    decode_s = n_dec * tpot
    # (the floor only guards the branch np.where does not take: capped rows decode, decode_s >= a step;
    # 1e-30 s, not 1e-300, so that b_cap / floor stays finite where OSL = 1 and nothing decodes)
    rate = np.where(capped, b_cap / np.maximum(decode_s, 1e-30), rate_free)
    b = np.where(capped, b_cap, b_free)
    cycle = C / np.maximum(rate, 1e-300)
    ttft = np.maximum(cycle - decode_s, Ts)
    share = decode_s / np.maximum(cycle, 1e-300)
    seen = np.where(capped, b_cap, np.minimum(1.0 + np.maximum(C - 1.0, 0.0) * share, np.maximum(b_cap, 1.0)))
    queued = np.where(capped, C - b - rate * Ts, 0.0)
    return {"tpot_s": tpot, "decode_batch": b, "step_batch": seen, "request_rate": rate, "ttft_s": ttft,
            "queued": np.maximum(queued, 0.0), "output_tokens_per_s": rate * np.asarray(osl, dtype=np.float64)}
