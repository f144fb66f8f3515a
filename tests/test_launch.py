"""Launch recipes (explorer/launch.py): the serving command a scored point deploys with, per runtime.
Known answers written from the InferenceX recipes' flag names and the point's own figures; the
refusals; and the CLI writing the files (never half of them)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from explorer.api import evaluate
from explorer.errors import SpecError
from explorer.launch import TRTLLM_OPTIONS_FILE, launch_recipe, preset_checkpoint, write_launch
from explorer.runtime import load_runtime

ROOT = Path(__file__).resolve().parents[1]


def _flag(argv, name):
    """The value after ``name`` in argv (None when the flag is absent)."""
    argv = list(argv)
    return argv[argv.index(name) + 1] if name in argv else None


def test_trtllm_dense_point_known_answer(tmp_path):
    """Llama-3.1-70B, H200, TP2, FP8, 64 clients: trtllm-serve with tp 2, a 64-request batch, the
    profile's 16,384-token step budget (runtimes/trtllm.yaml), ISL+OSL = 2,048; CUDA graphs padded
    and captured to 64, an FP8 KV cache; the published checkpoint holds BF16 weights, so a note says
    an FP8 one is needed."""
    r = evaluate("llama-3.1-70b", "h200", batch=64, tp=2, precision="fp8", runtime="trtllm")
    la = launch_recipe(r)
    assert la.argv[:2] == ("trtllm-serve", "meta-llama/Llama-3.1-70B")
    assert _flag(la.argv, "--tp_size") == "2" and _flag(la.argv, "--ep_size") == "1"
    assert _flag(la.argv, "--max_batch_size") == "64"
    assert _flag(la.argv, "--max_num_tokens") == str(load_runtime("trtllm").max_tokens_per_step) == "16384"
    assert _flag(la.argv, "--max_seq_len") == "2048"
    assert _flag(la.argv, "--extra_llm_api_options") == TRTLLM_OPTIONS_FILE
    opts = yaml.safe_load(la.files[TRTLLM_OPTIONS_FILE])
    assert opts == {"cuda_graph_config": {"enable_padding": True, "max_batch_size": 64},
                    "kv_cache_config": {"dtype": "fp8", "enable_block_reuse": False}, "enable_attention_dp": False}
    assert any("fp8" in n and "bf16" in n for n in la.notes)
    paths = write_launch(la, tmp_path / "out")
    assert sorted(p.name for p in paths) == ["extra-llm-api-config.yml", "launch.sh"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["extra-llm-api-config.yml", "launch.sh"]  # no temp files
    subprocess.run(["bash", "-n", str(tmp_path / "out" / "launch.sh")], check=True)


def test_trtllm_attention_dp_runs_one_batch_per_rank():
    """DeepSeek-R1 on 8 B200 as TensorRT-LLM's DEP (attention DP 8, experts over 8): tp_size counts all
    8 GPUs, the batch is per rank (256 clients / 8 = 32, as the MTP recipe divides CONC by TP), attention
    DP on; the published checkpoint is FP8, so an FP8 point needs no note."""
    r = evaluate("deepseek-r1", "b200", batch=256, tp=1, dp=8, ep=8, precision="fp8", runtime="trtllm")
    la = launch_recipe(r)
    assert _flag(la.argv, "--tp_size") == "8" and _flag(la.argv, "--ep_size") == "8"
    assert _flag(la.argv, "--max_batch_size") == "32"
    opts = yaml.safe_load(la.files[TRTLLM_OPTIONS_FILE])
    assert opts["enable_attention_dp"] is True and opts["cuda_graph_config"]["max_batch_size"] == 32
    # scored with the profile's attention-DP balance (runtimes/trtllm.yaml attention_dp): launched with it
    assert opts["attention_dp_config"] == {"enable_balance": True, "batching_wait_iters": 0, "timeout_iters": 60}
    assert la.argv[1] == "deepseek-ai/DeepSeek-V3" and not la.notes
    tp8 = yaml.safe_load(launch_recipe(evaluate("deepseek-r1", "b200", batch=256, tp=8, ep=8, precision="fp8",
                                                runtime="trtllm")).files[TRTLLM_OPTIONS_FILE])
    assert "attention_dp_config" not in tp8  # no attention DP, nothing to balance


def test_trtllm_mtp_and_batching_wait_go_into_the_options():
    r = evaluate("deepseek-r1", "b200", batch=16, tp=8, precision="fp8", runtime="trtllm", draft_tokens=3,
                 acceptance=0.8)
    opts = yaml.safe_load(launch_recipe(r, batch_wait_iters=20, batch_wait_ratio=0.9).files[TRTLLM_OPTIONS_FILE])
    assert opts["speculative_config"] == {"decoding_type": "MTP", "num_nextn_predict_layers": 3}
    assert opts["batch_wait_timeout_iters"] == 20 and opts["batch_wait_max_tokens_ratio"] == 0.9


def test_vllm_quantizes_a_bf16_checkpoint_on_load_but_not_a_given_one():
    r = evaluate("llama-3.1-70b", "h200", batch=64, tp=4, precision="fp8", runtime="vllm")
    la = launch_recipe(r)
    assert la.argv[:3] == ("vllm", "serve", "meta-llama/Llama-3.1-70B")
    assert _flag(la.argv, "--tensor-parallel-size") == "4" and _flag(la.argv, "--max-num-seqs") == "64"
    assert _flag(la.argv, "--max-num-batched-tokens") == str(load_runtime("vllm").max_tokens_per_step)
    assert _flag(la.argv, "--kv-cache-dtype") == "fp8" and _flag(la.argv, "--quantization") == "fp8"
    given = launch_recipe(r, "nvidia/Llama-3.3-70B-Instruct-FP8")
    assert given.argv[2] == "nvidia/Llama-3.3-70B-Instruct-FP8" and "--quantization" not in given.argv
    assert not given.notes
    mtp = launch_recipe(evaluate("deepseek-r1", "h200", batch=8, tp=8, precision="fp8", runtime="vllm", draft_tokens=2,
                                 acceptance=0.8))
    assert json.loads(_flag(mtp.argv, "--speculative-config")) == {"method": "mtp", "num_speculative_tokens": 2}


def test_sglang_mtp_as_eagle_with_one_candidate():
    """SGLang runs MTP as EAGLE: K draft steps, top-k 1, K+1 draft tokens (dsr1_fp8_b200_mtp.sh: 2 steps,
    3 draft tokens); attention DP as --enable-dp-attention with the stage's GPUs as its tp size."""
    r = evaluate("deepseek-r1", "b200", batch=32, tp=8, precision="fp8", runtime="sglang", draft_tokens=3,
                 acceptance=0.8)
    la = launch_recipe(r)
    assert la.argv[:3] == ("python3", "-m", "sglang.launch_server")
    assert _flag(la.argv, "--speculative-algorithm") == "EAGLE" and _flag(la.argv, "--speculative-num-steps") == "3"
    assert _flag(la.argv, "--speculative-eagle-topk") == "1" and _flag(la.argv, "--speculative-num-draft-tokens") == "4"
    assert _flag(la.argv, "--kv-cache-dtype") == "fp8_e4m3" and _flag(la.argv, "--cuda-graph-max-bs") == "32"
    dep = launch_recipe(evaluate("deepseek-r1", "b200", batch=64, tp=1, dp=8, ep=8, precision="fp8", runtime="sglang"))
    assert _flag(dep.argv, "--tensor-parallel-size") == "8" and _flag(dep.argv, "--data-parallel-size") == "8"
    assert "--enable-dp-attention" in dep.argv and _flag(dep.argv, "--ep-size") == "8"


def test_presets_name_their_checkpoints():
    assert preset_checkpoint("llama-3.1-8b") == "meta-llama/Llama-3.1-8B"
    assert preset_checkpoint("gpt-oss-120b") == "openai/gpt-oss-120b"
    assert preset_checkpoint("nemotron-4-340b") == "nvidia/Nemotron-4-340B-Instruct"
    assert preset_checkpoint("no-such-model") is None


@pytest.mark.parametrize("kw, match", [
    (dict(runtime="gpt-fast"), "no launch recipe for runtime 'gpt-fast'; allowed: trtllm, vllm, sglang"),
    (dict(tp=3), "not feasible"),
    (dict(draft_tokens=2, acceptance=0.7, draft_model="llama-3.1-8b"), "only the model's own MTP"),
    (dict(serving="disaggregated", prefill_tp=2), "disaggregated"),
])
def test_refusals_name_what_is_allowed(kw, match):
    r = evaluate("llama-3.1-70b", "h200", batch=16, **{"tp": 2, "precision": "fp8", **kw})
    with pytest.raises(SpecError, match=match):
        launch_recipe(r)


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "explorer", "evaluate", *args], cwd=cwd, capture_output=True,
                          text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_cli_writes_the_launch_and_refuses_cleanly(tmp_path):
    p = _cli("--model", "llama-3.1-8b", "--hardware", "h100", "--batch", "32", "--runtime", "vllm",
             "--emit-launch", "L", "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["launch"]["runtime"] == "vllm" and (tmp_path / "L" / "launch.sh").exists()
    assert out["launch"]["argv"][:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B"]
    bad = _cli("--model", "llama-3.1-8b", "--runtime", "gpt-fast", "--emit-launch", "M", cwd=tmp_path)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().count("\n") == 0 and "--emit-launch" in bad.stderr and not (tmp_path / "M").exists()
