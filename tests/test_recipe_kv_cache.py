"""KV-cache formats of the InferenceX recipes (explorer/curves.py ``INFERENCEX_KV_CACHE``): runs
whose recipe leaves the KV dtype at ``auto`` are scored with a BF16 cache; the rest keep the
precision policy's FP8.  Known answers on the table, the curve cases built from fronts.yaml, and the
engine figures a BF16 cache changes (twice the bytes per cached token)."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.api import evaluate
from explorer.curves import recipe_kv_cache
from explorer.errors import ExplorerError
from explorer.precision import parse_precision, with_kv_cache
from explorer.validate import load_cases


def test_with_kv_cache_keeps_weights_and_activations():
    assert with_kv_cache("fp8", "bf16") == "w:fp8/a:fp8/kv:bf16"
    assert with_kv_cache("fp8", "fp8") == "fp8"  # a policy name where one fits
    p = parse_precision(with_kv_cache("mxfp4-w4a16", "bf16"))
    assert (p.weights, p.activations, p.kv_cache) == ("mxfp4-wo", "bf16", "bf16")
    with pytest.raises(ExplorerError):
        with_kv_cache("fp8", "int3")


def test_recipe_table():
    assert recipe_kv_cache("deepseek-v3", "sglang", "h200") == "bf16"  # dsr1_fp8_h200.sh: no --kv-cache-dtype
    assert recipe_kv_cache("deepseek-v3", "sglang", "mi300x") is None  # --kv-cache-dtype fp8_e4m3
    assert recipe_kv_cache("deepseek-v3", "sglang", "b200") is None
    assert recipe_kv_cache("deepseek-v3", "trtllm", "b200") is None  # kv_cache_config dtype: fp8
    assert recipe_kv_cache("gpt-oss-120b", "trtllm", "h200") == "bf16"  # dtype: auto
    assert recipe_kv_cache("gpt-oss-120b", "trtllm", "b200") is None  # dtype: fp8
    assert recipe_kv_cache("gpt-oss-120b", "vllm", "h100") == "bf16"
    assert recipe_kv_cache("llama-3.1-70b", "vllm", "h200") is None  # kv-cache-dtype: fp8


def test_curve_cases_carry_the_recipes_kv_format():
    cases = [c for c in load_cases("validation/fronts.yaml") if c.supported and c.metric == "tok_s_user"]
    kv = {}
    for c in cases:
        kv.setdefault((c.values["model"], c.runtime, c.hardware), set()).add(parse_precision(c.values["precision"]).kv_cache)
    assert kv[("deepseek-v3", "sglang", "h200")] == {"bf16"}
    assert kv[("deepseek-v3", "sglang", "mi300x")] == {"fp8"}
    assert kv[("gpt-oss-120b", "trtllm", "h200")] == {"bf16"}
    assert kv[("gpt-oss-120b", "trtllm", "b200")] == {"fp8"}
    assert kv[("gpt-oss-120b", "vllm", "h200")] == {"bf16"}
    assert kv[("llama-3.1-70b", "trtllm", "h200")] == {"fp8"}
    # the weights and activations stay the policy's
    oss = next(c for c in cases if c.values["model"] == "gpt-oss-120b" and c.hardware == "h200")
    p = parse_precision(oss.values["precision"])
    assert (p.weights, p.activations) == ("mxfp4-wo", "bf16")


def test_a_bf16_cache_holds_half_the_tokens_and_doubles_their_reads():
    args = dict(model="deepseek-v3", hardware="h200", tp=8, runtime="sglang", isl=7373, osl=922, batch=64)
    fp8 = evaluate(precision="fp8", **args)
    bf16 = evaluate(precision="w:fp8/a:fp8/kv:bf16", **args)
    assert bf16["weights_bytes_per_gpu"] == pytest.approx(fp8["weights_bytes_per_gpu"])
    assert bf16["kv_bytes_per_seq_per_gpu"] == pytest.approx(2.0 * fp8["kv_bytes_per_seq_per_gpu"])
    assert bf16["breakdown"]["attention"] > 1.5 * fp8["breakdown"]["attention"]
    assert bf16["tokens_per_s_per_user"] < fp8["tokens_per_s_per_user"]
    assert np.isfinite(bf16["ttft_s"])
