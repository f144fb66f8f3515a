"""A finite offline benchmark run: ``num_requests`` requests queued at once and served to the end.

Offline throughput benchmarks (``trtllm-bench throughput``, TensorRT-LLM's performance overview)
queue a fixed number of requests R and report the output tokens over the whole run's wall time --
not the steady state the simulator solves.  Two effects follow, worth tens of percent where the best
concurrency is of the order of R (the overview runs 3,000 requests at 1k/1k and 1,500 at 8k/1k,
where an attention-data-parallel MoE deployment would like several thousand in flight):

* the engine never runs more than R requests at once: the concurrency is ``B = min(batch, R)``;
* the run has a ramp and a drain: the first B prompts go through the engines back to back before
  the batch is full (the decode batch grows about linearly over that burst, so half of its decode
  capacity is lost), and at the end the batch empties the same way (the other half).  One burst
  lasts ``B / engines * prompt_s`` (``prefill_s_per_request``: engine seconds per prompt run back
  to back; ``engines`` = attention data-parallel groups x pipeline stages).

So the run lasts ``R / X(B) + B / engines * prompt_s``, where ``X(B)`` is the steady-state request
rate at B concurrent requests, and the output rate is ``R * OSL`` over that.  Ignored: the last
wave's quantisation (R not a multiple of B with fixed lengths), warm-up, the tokenizer.  Measured on
the 38 overview rows of validation/measurements.yaml before any refit, the spread of their signed
errors around its median: p90 36 % without the ramp term, 27 % with it (26-27 % for a ramp weight
anywhere in 0.25-1; 1 is the linear ramp and drain above, not a fitted value).  Off unless a row asks
for it (``num_requests > 0``); :mod:`explorer.validate` sets it for the overview's rows from the
request counts the overview documents.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from explorer.hardware import HardwareTable


def finite_run(c: Mapping[str, np.ndarray], table: HardwareTable, detail: bool,
               simulate: Callable[..., dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Score rows with ``num_requests`` R > 0 as finite runs (module docstring); other rows as
    :func:`explorer.simulate.simulate` does.  ``simulate`` is that function (passed in, no cycle)."""
    n = len(np.asarray(c["batch"]))
    R = np.broadcast_to(np.asarray(c["num_requests"], dtype=np.float64), (n,))
    finite = R > 0
    batch = np.broadcast_to(np.asarray(c["batch"], dtype=np.float64), (n,))
    B = np.where(finite, np.minimum(batch, np.maximum(R, 1.0)), batch)
    steady = {k: (np.zeros(n) if k == "num_requests" else v) for k, v in c.items()}
    res = simulate({**steady, "batch": B}, table, detail)
    if not finite.any():
        return res
    # the ramp and the drain: the first B prompts go through the engines back to back before the
    # batch is full, and the last ones leave it emptying; together about one burst of B prompts
    engines = np.broadcast_to(np.asarray(c.get("dp", 1.0), dtype=np.float64), (n,)) * \
        np.broadcast_to(np.asarray(c.get("pp", 1.0), dtype=np.float64), (n,))
    burst_s = B / np.maximum(engines, 1.0) * res["prefill_s_per_request"]
    t_total = R / np.maximum(res["request_rate"], 1e-300) + burst_s
    osl = np.broadcast_to(np.asarray(c["osl"], dtype=np.float64), (n,))
    rate = np.where(finite, R / np.maximum(t_total, 1e-300), res["request_rate"])
    out = dict(res)
    out["request_rate"] = rate
    out["tokens_per_s_per_gpu"] = np.where(finite, rate * osl / res["gpus"], res["tokens_per_s_per_gpu"])
    return out
