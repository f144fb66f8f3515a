"""The all-reduce + RMSNorm fusion of a deployment (design column ``allreduce_fusion``,
explorer/design.py): 1 = the fused one-/two-shot peer-to-peer kernel with the residual add and norm
in it, -1 = NCCL's all-reduce and separate norms, 0 = the runtime profile's.  Known answers on the
runtime columns and kernel counts, the vLLM release rule and recipe table of the curve validation
(explorer/curves.py), the CLI and the launch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from explorer.api import evaluate
from explorer.curves import VLLM_ALLREDUCE_FUSION_SINCE, recipe_allreduce_fusion
from explorer.design import build_design
from explorer.engine.shape_columns import ShapeColumns
from explorer.launch import launch_recipe
from explorer.runtime import load_runtime
from explorer.validate import load_cases

ROOT = Path(__file__).resolve().parents[1]


def _design(runtime: str, fusion: list[int], tp: int = 8):
    return build_design({"model": "llama-3.1-70b", "hardware": "h200", "precision": "fp8", "tp": tp, "batch": 16,
                         "runtime": runtime, "allreduce_fusion": fusion, "isl": 1024, "osl": 1024}, "test")[0]


def test_the_column_overrides_both_runtime_flags():
    assert load_runtime("sglang").fuse_allreduce_norm is False and load_runtime("sglang").custom_allreduce is True
    d = _design("sglang", [0, 1, -1])
    assert list(d["rt_ar_norm"]) == [0.0, 1.0, 0.0]
    assert list(d["rt_custom_ar"]) == [1.0, 1.0, 0.0]
    # the current vLLM profile has both on (>= 0.17); -1 is the older releases' NCCL and separate norms
    v = _design("vllm", [0, -1])
    assert list(v["rt_ar_norm"]) == [1.0, 0.0] and list(v["rt_custom_ar"]) == [1.0, 0.0]


def test_known_answer_two_norm_kernels_fewer_per_layer_at_tp_above_one():
    on, off = (ShapeColumns(_design("sglang", [f])) for f in (1, -1))
    assert float(off.kernels_per_layer[0] - on.kernels_per_layer[0]) == 2.0
    single = [ShapeColumns(_design("sglang", [f], tp=1)).kernels_per_layer[0] for f in (1, -1)]
    assert single[0] == single[1]  # no all-reduce, nothing to fuse


def test_fused_peer_to_peer_all_reduces_are_cheaper_at_decode_sizes():
    kw = dict(model="gpt-oss-120b", hardware="h200", tp=8, precision="w:mxfp4-wo/a:bf16/kv:bf16", runtime="vllm",
              isl=922, osl=922, batch=16)
    on, off = evaluate(allreduce_fusion=1, **kw), evaluate(allreduce_fusion=-1, **kw)
    assert on["breakdown"]["comm"] < off["breakdown"]["comm"]
    assert on["tokens_per_s_per_user"] > off["tokens_per_s_per_user"]
    assert evaluate(**kw)["tokens_per_s_per_user"] == on["tokens_per_s_per_user"]  # vLLM's default today
    assert on["deployment"]["allreduce_fusion"] == "on" and "allreduce_fusion" not in evaluate(**kw)["deployment"]
    t1 = [evaluate(**{**kw, "tp": 1}, allreduce_fusion=f)["tokens_per_s_per_user"] for f in (1, -1)]
    assert t1[0] == t1[1]


def test_vllm_release_rule_and_recipe_table():
    assert VLLM_ALLREDUCE_FUSION_SINCE == (0, 17)
    assert recipe_allreduce_fusion("llama-3.1-70b", "vllm", "h200", "fp8", "0.10.2") == -1
    assert recipe_allreduce_fusion("llama-3.1-70b", "vllm", "h200", "fp8", "0.17.0") == 0
    assert recipe_allreduce_fusion("gpt-oss-120b", "vllm", "h100", "fp4", "v0.18.0") == 0
    assert recipe_allreduce_fusion("llama-3.1-70b", "vllm", "h200", "fp8", None) == 0  # unstated: the profile's
    # the B200 Llama recipe asks for FlashInfer's fusion on 0.10.2; the B200 FP4 DeepSeek-R1 SGLang one too
    assert recipe_allreduce_fusion("llama-3.1-70b", "vllm", "b200", "fp8", "0.10.2") == 1
    assert recipe_allreduce_fusion("llama-3.1-70b", "vllm", "b200", "fp8", "0.10.2", recipes=False) == -1
    assert recipe_allreduce_fusion("deepseek-v3", "sglang", "b200", "fp4", "0.5.9") == 1
    assert recipe_allreduce_fusion("deepseek-v3", "sglang", "h200", "fp8", "0.5.9") == 0
    assert recipe_allreduce_fusion("llama-3.1-70b", "trtllm", "h200", "fp8", "1.1.0rc2.post2") == 0


def test_curve_cases_carry_it():
    cases = [c for c in load_cases("validation/fronts.yaml") if c.supported and c.metric == "tok_s_gpu"]
    got = {(c.values["model"], c.runtime, c.hardware): set() for c in cases}
    for c in cases:
        got[(c.values["model"], c.runtime, c.hardware)].add(c.values.get("allreduce_fusion", 0))
    assert got[("llama-3.1-70b", "vllm", "h200")] == {-1}  # vLLM 0.10.2
    assert got[("llama-3.1-70b", "vllm", "b200")] == {1}  # its recipe
    assert got[("gpt-oss-120b", "vllm", "h200")] == {0}  # vLLM 0.18: the profile's (on)
    assert got[("llama-3.1-70b", "trtllm", "h200")] == {0}


def test_launch_asks_for_what_was_scored():
    r = evaluate("deepseek-v3", "b200", batch=32, tp=4, ep=4, precision="fp4", runtime="sglang", allreduce_fusion=1)
    assert "--enable-flashinfer-allreduce-fusion" in launch_recipe(r).argv
    plain = evaluate("deepseek-v3", "b200", batch=32, tp=4, ep=4, precision="fp4", runtime="sglang")
    assert "--enable-flashinfer-allreduce-fusion" not in launch_recipe(plain).argv
    v = launch_recipe(evaluate("llama-3.1-70b", "h200", batch=16, tp=4, precision="fp8", runtime="vllm",
                               allreduce_fusion=-1)).argv
    assert v[list(v).index("--compilation-config") + 1] == '{"pass_config": {"fuse_allreduce_rms": false}}'
    t = launch_recipe(evaluate("llama-3.1-70b", "h200", batch=16, tp=4, precision="fp8", runtime="trtllm",
                               allreduce_fusion=-1))
    assert any("fuses its tensor-parallel all-reduces" in n for n in t.notes)


@pytest.mark.parametrize("value", ["maybe", "1"])
def test_cli_refuses_a_bad_value(value):
    p = subprocess.run([sys.executable, "-m", "explorer", "evaluate", "--model", "llama-3.1-8b", "--allreduce-fusion",
                        value], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 2 and "--allreduce-fusion" in p.stderr and "Traceback" not in p.stderr


def test_api_refuses_a_bad_value():
    from explorer.errors import ExplorerError

    with pytest.raises(ExplorerError):
        evaluate("llama-3.1-8b", "h200", allreduce_fusion=2)
    assert np.isfinite(evaluate("llama-3.1-8b", "h200", allreduce_fusion=-1)["tokens_per_s_per_user"])
