"""Kernels one decoder layer launches (explorer/engine/shape_columns.py ``kernels_per_layer``): each
costs the kind's fitted launch gap, so the count decides the fixed part of a small-batch decode
step.  Known answers worked by hand from the layer structure (explorer/engine/constants.py)."""

from __future__ import annotations

import pytest

from explorer.api import evaluate
from explorer.design import build_design
from explorer.engine.constants import MLA_EXTRA_KERNELS
from explorer.engine.shape_columns import ShapeColumns
from explorer.hardware import load_hardware


def _kernels(model: str, tp: int) -> float:
    d = build_design({"model": model, "hardware": "b200", "precision": "fp8", "tp": tp, "batch": 4,
                      "runtime": "trtllm", "isl": 1024, "osl": 1024}, "test")[0]
    return float(ShapeColumns(d).kernels_per_layer[0])


def test_known_answer_dense_gqa_layer():
    # qkv, o GEMMs; attention; 2 norms + rotary + activation; 2 all-reduces (the norms fused into
    # them under TensorRT-LLM at tp > 1); gate/up and down GEMMs: 2 + 1 + 4 - 2 + 2 + 2 = 9
    assert _kernels("llama-3.1-70b", 8) == 9.0
    # tp = 1: no all-reduce, nothing to fuse: 2 + 1 + 4 + 2 = 9 as well
    assert _kernels("llama-3.1-70b", 1) == 9.0


def test_known_answer_mla_moe_layer():
    # DeepSeek-R1: 61 layers, 3 dense, 58 MoE with one shared expert; tp 8, ep 1, no attention DP.
    # common part 2 + 1 + 4 - 2 + 2 = 7, MLA's extra critical-path kernels 3 (q_a norm, q_b GEMM, the
    # second absorbed BMM), dense layers' MLP 2, MoE layers' router + 2 grouped GEMMs + 3 routing
    # kernels + 2 shared-expert GEMMs = 8, averaged over the layers
    expected = 7.0 + 3.0 + (3.0 / 61.0) * 2.0 + (58.0 / 61.0) * 8.0
    assert _kernels("deepseek-r1", 8) == pytest.approx(expected, rel=1e-12)
    assert MLA_EXTRA_KERNELS == 3.0


def test_mla_launches_cost_the_launch_gap_each():
    kw = dict(model="deepseek-r1", hardware="b200", precision="fp8", tp=8, batch=4, runtime="trtllm",
              isl=1024, osl=1024)
    r = evaluate(**kw)
    # the overhead component is the per-layer kernels (MLA's 3 extra included) x layers x the kind's
    # launch gap, plus the LM head's launch and the runtime's host work per step and sequence
    launch_s = load_hardware("b200").kernel_launch_s
    launches_s = (61 * _kernels("deepseek-r1", 8) + 1) * launch_s
    assert launches_s <= r["breakdown"]["overhead"] <= launches_s + 1e-3  # host work: well under 1 ms
