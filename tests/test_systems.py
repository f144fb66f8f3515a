"""Whole systems (explorer/systems.py): the batched split search gives what one system at a time gives."""

from __future__ import annotations

import numpy as np

from explorer.hardware import load_hardware
from explorer.runtime import load_runtime
from explorer.sla import _meets
from explorer.systems import SystemRequest, best_system, best_systems, candidates


def test_candidates_by_hand():
    # dense: tp 1, 2, 4, 8 on one 8-GPU node; 6 GPUs allow only tp 1 and 2
    assert candidates(8, 0, 8) == [(1, 1, 1), (2, 1, 1), (4, 1, 1), (8, 1, 1)]
    assert candidates(6, 0, 8) == [(1, 1, 1), (2, 1, 1)]
    # MoE with 8 experts adds ep = tp and attention DP (tp 1, dp = ep) for every size > 1
    assert candidates(4, 8, 8) == [(1, 1, 1), (2, 1, 1), (4, 1, 1), (2, 2, 1), (4, 4, 1), (1, 2, 2), (1, 4, 4)]


def test_meets_reads_nan_as_no_limit():
    r = {"feasible": np.array([True, True, True, False]), "ttft_p99_s": np.array([1.0, 3.0, np.nan, 0.1]),
         "tpot_p99_s": np.array([0.01, 0.01, 0.5, 0.01])}
    assert _meets(r, 2.0, None).tolist() == [True, False, False, False]
    assert _meets(r, np.array([2.0, 5.0, np.nan, 5.0]), None).tolist() == [True, True, True, False]
    assert _meets(r, None, np.array([np.nan, 0.005, 0.6, 1.0])).tolist() == [True, False, True, False]


def test_batched_search_equals_one_system_at_a_time():
    h200, b200 = load_hardware("h200"), load_hardware("b200")
    trt, vllm = load_runtime("trtllm"), load_runtime("vllm")
    llama = {"model": "llama-3.1-70b", "precision": "fp8", "isl": 1024, "osl": 512, "pp": 1}
    reqs = [
        SystemRequest(llama, h200, trt, 8),  # saturated, tp open
        SystemRequest(dict(llama, isl=2048), b200, vllm, 8, ttft_limit_s=2.0, tpot_limit_s=0.05),  # limited
        SystemRequest(llama, h200, trt, 8, tpot_limit_s=0.04, deployments=[(4, 1, 1)], request_s=0.0),
        SystemRequest(dict(llama, precision="bf16"), h200, trt, 1),  # 140 GB of weights on one GPU: none
        SystemRequest({"model": "qwen3-235b-a22b", "precision": "fp8", "isl": 1024, "osl": 1024, "pp": 1}, h200, trt,
                      8, experts=128, ttft_limit_s=3.0),
    ]
    one = [best_system(q.values, q.hw, q.rt, q.gpus, experts=q.experts, ttft_limit_s=q.ttft_limit_s,
                       tpot_limit_s=q.tpot_limit_s, deployments=q.deployments, request_s=q.request_s) for q in reqs]
    many = best_systems(reqs)
    assert many == one
    assert one[3] is None and all(x is not None for i, x in enumerate(one) if i != 3)
    # the limited systems serve less than saturation and report the rate they serve at
    assert one[1] is not None and one[1].request_rate_per_replica > 0
    assert one[2] is not None and (one[2].tp, one[2].ep, one[2].dp) == (4, 1, 1)
    assert one[0] is not None and one[0].request_rate_per_replica == 0.0
