"""Context batching waits: a runtime that holds new prompts for a few iterations to batch them.

TensorRT-LLM's PyTorch executor has two knobs (LLM API ``batch_wait_timeout_iters`` and
``batch_wait_max_tokens_ratio``, both 0 = off by default; ``PyExecutor._waiting_requests``):
while generation requests are running and context requests are pending, the scheduler holds the
context requests -- the iteration runs decode only -- until either it has held them for
``timeout_iters`` iterations (one counter, reset whenever context is scheduled) or the tokens the
iteration would carry (every pending prompt's tokens plus one per running sequence) reach
``tokens_ratio * max_num_tokens``.  With no running generation nothing waits, and a ratio of 0
releases at once (the code compares ``tokens >= ratio * max_num_tokens``).  The InferenceX
Llama-3.3-70B recipes set them to 20 iterations and 0.9 for ISL = OSL = 1024 below TP8
(explorer/curves.py names the scripts).

Model (:func:`mean_wait_steps`), per engine, with ``r`` prompts arriving per decode step:

* the prompt that opens a wait is held ``w = min(timeout, (n* - 1) / r)`` steps, where ``n*``
  prompts release it by tokens, ``n* = ceil((ratio * max_tokens - b) / ISL)`` (no wait when one
  prompt suffices) -- arrivals at their mean rate, not their Poisson spread (assumption);
* the ``r w`` prompts arriving during the wait join the same batch, waiting ``w / 2`` on average;
* so a prompt waits ``(w + r w * w / 2) / (1 + r w)`` steps on average, each a decode step;
* and its prefill step carries the whole batch: with ``m = r w`` joiners on average (Poisson), a
  prompt shares its step with ``m (2 + m) / (1 + m)`` others on average (the size-biased batch),
  each adding its prefill cost (:func:`hold`).

Tested against the discrete-event oracle (explorer/events.py holds prompts the same way):
tests/test_batch_wait.py.  Ignored: the spread of the wait (the percentiles add its mean as a
constant), the batch's prompts spilling into a second chunk when they exceed the token budget.
"""

from __future__ import annotations

import numpy as np


def hold(timeout_iters, tokens_ratio, max_tokens, isl, batch, arrivals_per_step) -> tuple[np.ndarray, np.ndarray]:
    """(mean decode steps a new prompt is held, mean number of other prompts prefilled with it) --
    the module docstring's model, computed once.  ``batch``: sequences decoding (0 or less: nothing
    waits); ``arrivals_per_step``: prompts arriving per decode step.  Arrays broadcast;
    ``timeout_iters <= 0`` is no wait."""
    W = np.asarray(timeout_iters, dtype=np.float64)
    b = np.asarray(batch, dtype=np.float64)
    r = np.maximum(np.asarray(arrivals_per_step, dtype=np.float64), 0.0)
    need = np.asarray(tokens_ratio, dtype=np.float64) * np.asarray(max_tokens, dtype=np.float64) - np.maximum(b, 0.0)
    n_star = np.ceil(need / np.maximum(np.asarray(isl, dtype=np.float64), 1.0))
    by_tokens = np.maximum(n_star - 1.0, 0.0) / np.maximum(r, 1e-300)  # ratio 0: released at once
    w = np.where((W > 0) & (b > 0), np.minimum(W, by_tokens), 0.0)  # the opener's wait
    m = r * w  # joiners during it (Poisson mean)
    return (w + m * w / 2.0) / (1.0 + m), m * (2.0 + m) / (1.0 + m)


def mean_wait_steps(timeout_iters, tokens_ratio, max_tokens, isl, batch, arrivals_per_step) -> np.ndarray:
    """Mean decode steps a new prompt is held (the first figure of :func:`hold`)."""
    return hold(timeout_iters, tokens_ratio, max_tokens, isl, batch, arrivals_per_step)[0]
