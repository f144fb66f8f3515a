"""Discrete-event simulation of one serving engine: the oracle that the analytic open-loop
percentiles (:mod:`explorer.open_loop`) are tested against.

It steps the same engine the simulator costs (step times from
:func:`explorer.simulate.engine_profile`, interpolated over the decode batch) request by request:

* arrivals: a Poisson process at ``rate`` requests/s (seeded), lengths fixed at the design's
  mean ISL/OSL;
* scheduler: prompts wait first-come first-served; a prompt may start only while fewer than
  ``b_cap`` requests are running (KV cache / maximum running requests);
* chunked prefill: **mixed** runtimes (TensorRT-LLM, vLLM) put up to the step's token budget of
  waiting prompt tokens into each decode step, which then costs ``T_dec(b) + x(b, q)`` for ``q``
  prompt tokens; **separate** runtimes (SGLang) run a prefill step of up to the budget
  (``x(b, q)``) whenever prompts wait, and the decoders wait for it.  ``x`` is the profile's chunk
  cost over batch and chunk size (interpolated in both; linear in ``q`` below one prompt's
  tokens), so a small chunk in a memory-bound step costs what the simulator says it costs;
* context batching wait (explorer/batch_wait.py, TensorRT-LLM's ``batch_wait_timeout_iters`` and
  ``batch_wait_max_tokens_ratio``): while requests decode, new prompts are held -- the step runs
  decode only -- until they have been held ``batch_wait_iters`` steps (one counter, reset when
  prompts are scheduled) or the step would carry ``batch_wait_ratio * max_tokens`` tokens (the
  prompts that fit plus one per decoding request); a prompt already part-prefilled is never held
  (assumption: TensorRT-LLM holds every context request, but its recipes never chunk 1k prompts);
* decode: every running request gains one token per step; a request's first token comes when its
  last chunk finishes (plus the runtime's per-request work), and it then decodes ``OSL - 1``
  tokens.

Measured per request: TTFT and TPOT (mean inter-token time, ``(t_last - t_first)/(OSL - 1)``);
the first ``warmup`` share of requests is dropped.  What the analytic model ignores is modelled
here (the batch's actual fluctuation, bursts of prompts, chunks that straddle requests); what both
ignore (length spread, preemption, attention-DP ranks) is ignored here too.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class EventResult:
    """Per-request latencies of one run (seconds) and the run's served figures."""

    ttft_s: np.ndarray
    tpot_s: np.ndarray
    duration_s: float
    requests: int
    mean_decode_batch: float

    def percentile(self, metric: str, p: float) -> float:
        return float(np.percentile(getattr(self, f"{metric}_s"), 100.0 * p))

    @property
    def request_rate(self) -> float:
        return self.requests / self.duration_s


def lognormal_lengths(rng: np.random.Generator, mean: float, cv: float, n: int) -> np.ndarray:
    """``n`` whole lengths >= 1 with the given mean and coefficient of variation (lognormal; all
    equal to the rounded mean when ``cv`` is 0)."""
    if cv <= 0:
        return np.full(n, max(int(round(mean)), 1))
    s2 = np.log1p(cv * cv)
    return np.maximum(np.rint(rng.lognormal(np.log(mean) - s2 / 2.0, np.sqrt(s2), n)), 1).astype(np.int64)


def run_events(profile: Mapping, rate: float, requests: int = 3000, seed: int = 0,
               warmup: float = 0.1, isl_cv: float = 0.0, osl_cv: float = 0.0) -> EventResult:
    """Simulate ``requests`` Poisson arrivals at ``rate``/s on the engine ``profile`` (module
    docstring); ``isl_cv``/``osl_cv`` draw lognormal request lengths around the profile's means
    (0: every request at the mean).  Raises ValueError when the queue grows past ``20 * requests``
    prompts (overload)."""
    if rate <= 0:
        raise ValueError("rate must be > 0")
    b_grid = np.asarray(profile["batch"], dtype=np.float64)
    t_dec = np.asarray(profile["t_decode_s"], dtype=np.float64)
    c_tok = np.asarray(profile["chunk_s_per_token"], dtype=np.float64)
    if "chunk_extra_s" in profile:  # chunk cost over (batch, chunk tokens)
        q_grid = np.asarray(profile["chunk_tokens"], dtype=np.float64)
        x_tab = np.asarray(profile["chunk_extra_s"], dtype=np.float64)
        linear = False
    else:  # a linear cost per prompt token at the full budget
        q_grid = np.array([1.0])
        x_tab = c_tok[:, None].copy()
        linear = True
    budget = np.asarray(profile["budget_tokens"], dtype=np.float64)
    b_cap = max(int(profile["b_cap"]), 1)
    isl, osl = int(round(profile["isl"])), int(round(profile["osl"]))
    req_s = float(profile["request_s"])
    mixed = bool(profile["mixed"])
    wait_iters = float(profile.get("batch_wait_iters", 0.0))
    wait_tokens = float(profile.get("batch_wait_ratio", 0.0)) * float(profile.get("max_tokens", 0.0))
    held = 0  # steps the waiting prompts have been held (explorer/batch_wait.py)

    def at(tab: np.ndarray, b: float) -> float:
        return float(np.interp(max(b, 1.0), b_grid, tab))

    def chunk(b: float, q: int) -> float:
        """Seconds ``q`` prompt tokens add to a step at decode batch ``b``."""
        if q <= 0:
            return 0.0
        row = np.array([np.interp(max(b, 1.0), b_grid, x_tab[:, j]) for j in range(len(q_grid))])
        if linear:  # a per-token table
            return q * float(row[0])
        if q <= q_grid[0] or len(q_grid) == 1:
            return float(row[0]) * q / q_grid[0]
        return float(np.interp(q, q_grid, row))

    rng = np.random.default_rng(seed)
    arrive = np.cumsum(rng.exponential(1.0 / rate, requests))
    isl_of = lognormal_lengths(rng, isl, isl_cv, requests)
    ndec_of = np.maximum(lognormal_lengths(rng, osl, osl_cv, requests) - 1, 0)
    ttft = np.full(requests, np.nan)
    tpot = np.full(requests, np.nan)
    first = np.zeros(requests)
    queue: deque[list[int]] = deque()  # [request, prompt tokens left]
    run_id: list[int] = []
    run_left: list[int] = []
    t, nxt, done, batch_time = 0.0, 0, 0, 0.0
    while done < requests:
        while nxt < requests and arrive[nxt] <= t:
            queue.append([nxt, int(isl_of[nxt])])
            nxt += 1
        if len(queue) > 20 * requests:
            raise ValueError("overloaded: the prompt queue grows without bound")
        b = len(run_id)
        if b == 0 and not queue:
            t = float(arrive[nxt])
            continue
        # prompts whose prefill may proceed: admitted while running + prefilling < b_cap
        q_tokens, finished_prompts = 0, []
        budget_b = int(at(budget, b))
        room = b_cap - b
        if wait_iters > 0 and queue and b > 0 and all(item[1] == int(isl_of[item[0]]) for item in queue):
            pending = min(sum(item[1] for item in queue), budget_b) + b
            if held < wait_iters and pending < wait_tokens:
                held += 1
                room = 0  # this step decodes only
            else:
                held = 0
        if queue and room > 0:
            left = budget_b
            for item in queue:
                if room <= 0 or left <= 0:
                    break
                take = min(item[1], left)
                q_tokens += take
                left -= take
                if take == item[1]:
                    finished_prompts.append(item)
                room -= 1
                if take < item[1]:
                    item[1] -= take
                    break
        if mixed:
            step = (at(t_dec, b) if b > 0 or q_tokens == 0 else at(t_dec, 1.0)) + chunk(b, q_tokens)
            decodes = b > 0
        elif q_tokens > 0:  # separate prefill step: the decoders wait
            step = chunk(b, q_tokens)
            decodes = False
        else:
            step = at(t_dec, b)
            decodes = True
        t += step
        batch_time += b * step if decodes else 0.0
        if decodes and b:
            run_left = [x - 1 for x in run_left]
            keep_id, keep_left = [], []
            for rid, left_tokens in zip(run_id, run_left, strict=True):
                if left_tokens <= 0:
                    tpot[rid] = (t - first[rid]) / max(int(ndec_of[rid]), 1)
                    done += 1
                else:
                    keep_id.append(rid)
                    keep_left.append(left_tokens)
            run_id, run_left = keep_id, keep_left
        for item in finished_prompts:
            queue.popleft() if queue and queue[0] is item else queue.remove(item)
            rid = item[0]
            ttft[rid] = t + req_s - arrive[rid]
            first[rid] = t
            if ndec_of[rid] == 0:
                tpot[rid] = 0.0
                done += 1
            else:
                run_id.append(rid)
                run_left.append(int(ndec_of[rid]))
    keep = slice(int(warmup * requests), None)
    dur = float(t - arrive[int(warmup * requests)])
    return EventResult(ttft_s=ttft[keep], tpot_s=tpot[keep], duration_s=dur,
                       requests=requests - int(warmup * requests), mean_decode_batch=batch_time / max(t, 1e-30))
