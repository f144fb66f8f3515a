"""Request polling (explorer/engine/engine_step.py ``poll``): a scheduler that takes in new requests
every N decode steps (SGLang ``--scheduler-recv-interval`` / ``--num-continuous-decode-steps``)
makes a new request wait N/2 steps on average instead of half the step in flight.  Known answers
on the engine's own figures, the InferenceX recipe table of the curve validation, the CLI and the
launch it writes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from explorer.api import evaluate
from explorer.curves import recipe_poll_interval
from explorer.design import build_design
from explorer.engine.engine_step import engine_steps
from explorer.hardware import load_hardware
from explorer.launch import launch_recipe
from explorer.simulate import _prepare
from explorer.validate import load_cases

ROOT = Path(__file__).resolve().parents[1]


def _engine(poll: float, batch: float):
    design, table = build_design({"model": "deepseek-v3", "hardware": "b200", "precision": "fp4", "tp": 4, "ep": 4,
                                  "batch": batch, "runtime": "sglang", "poll_interval": poll, "isl": 1024,
                                  "osl": 1024}, "test")
    env = _prepare(design, table)
    b = np.array([min(batch, 64.0)])
    return engine_steps(env["s"], env["hw"], b, np.array([1.0]), env["link_pp"], None, site=None)


def test_known_answer_the_wait_for_the_next_poll():
    """With a step of others in flight (busy = 1 at 8+ sequences) the mean wait goes from T/2 to N T/2:
    the TTFT without queueing grows by (N - 1) T / 2 and nothing else moves; a lone request (busy = 0)
    finds an idle scheduler polling every step: no wait either way."""
    one, thirty = _engine(1, 32), _engine(30, 32)
    T = float(one["T_dec"][0])
    assert float(thirty["T_dec"][0]) == T and float(thirty["tau"][0]) == float(one["tau"][0])
    assert float(thirty["ttft_service"][0] - one["ttft_service"][0]) == pytest.approx(29 * T / 2, rel=1e-12)
    lone1, lone30 = _engine(1, 1), _engine(30, 1)
    assert float(lone30["ttft_service"][0]) == float(lone1["ttft_service"][0])


def test_the_longer_wait_slows_the_closed_loop_a_little():
    """Closed loop: C = X (TTFT + (OSL-1) TPOT), so a longer TTFT lowers the request rate -- the
    throughput drops by at most the wait's share of a request's cycle."""
    a = evaluate("deepseek-v3", "b200", batch=64, tp=4, ep=4, precision="fp4", runtime="sglang")
    b = evaluate("deepseek-v3", "b200", batch=64, tp=4, ep=4, precision="fp4", runtime="sglang", poll_interval=30)
    assert b["ttft_s"] > a["ttft_s"] + 0.1
    assert b["tokens_per_s_per_gpu"] < a["tokens_per_s_per_gpu"]
    cycle = a["ttft_s"] + 1023 * a["tpot_s"]
    assert a["tokens_per_s_per_gpu"] / b["tokens_per_s_per_gpu"] - 1 <= (b["ttft_s"] - a["ttft_s"]) / cycle + 1e-6
    assert b["deployment"]["poll_interval"] == 30 and "poll_interval" not in a["deployment"]


def test_inferencex_recipe_table():
    assert recipe_poll_interval("deepseek-v3", "b200", "fp4", 4, 8) == 10
    assert recipe_poll_interval("deepseek-v3", "b200", "fp4", 4, 16) == 30
    assert recipe_poll_interval("deepseek-v3", "b200", "fp8", 4, 64) == 10  # the FP8 TP4 recipe keeps 10
    assert recipe_poll_interval("deepseek-v3", "mi300x", "fp8", 8, 4) == 4
    assert recipe_poll_interval("deepseek-v3", "mi355x", "fp4", 8, 64) == 4
    assert recipe_poll_interval("deepseek-v3", "h200", "fp8", 8, 64) == 1
    assert recipe_poll_interval("llama-3.1-70b", "b200", "fp8", 8, 64) == 1


def test_curve_cases_carry_the_recipes_polling(monkeypatch):
    cases = [c for c in load_cases("validation/fronts.yaml") if c.supported and c.runtime == "sglang"]
    got = {(c.hardware, int(c.values["batch"]), int(c.values.get("poll_interval", 1))) for c in cases}
    assert ("b200", 8, 10) in got and ("b200", 32, 30) in got and ("mi325x", 4, 4) in got
    assert all(p == 1 for hw, _, p in got if hw == "h200")
    monkeypatch.setenv("EXPLORER_RECIPE_WAITS", "0")
    off = [c for c in load_cases("validation/fronts.yaml") if c.supported and c.runtime == "sglang"]
    assert all(c.values.get("poll_interval", 1) == 1 for c in off)


def test_launch_passes_the_interval_to_sglang_only():
    r = evaluate("deepseek-v3", "b200", batch=32, tp=4, ep=4, precision="fp4", runtime="sglang", poll_interval=30)
    argv = launch_recipe(r).argv
    assert argv[argv.index("--scheduler-recv-interval") + 1] == "30"
    t = launch_recipe(evaluate("deepseek-v3", "b200", batch=32, tp=8, precision="fp8", runtime="trtllm",
                               poll_interval=4))
    assert "--scheduler-recv-interval" not in t.argv and any("SGLang" in n for n in t.notes)


@pytest.mark.parametrize("value", ["0", "x", "20000"])
def test_cli_refuses_a_bad_interval(value):
    p = subprocess.run([sys.executable, "-m", "explorer", "evaluate", "--model", "llama-3.1-8b", "--poll-interval", value],
                       cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 2 and "--poll-interval" in p.stderr and "Traceback" not in p.stderr


def test_hardware_lineage_unchanged_by_the_column():
    # the column is a deployment value: a design without it scores as every step polling
    assert load_hardware("b200").name == "b200"
    a = evaluate("llama-3.1-70b", "h200", batch=16, tp=2, precision="fp8", runtime="sglang")
    b = evaluate("llama-3.1-70b", "h200", batch=16, tp=2, precision="fp8", runtime="sglang", poll_interval=1)
    assert a["ttft_s"] == b["ttft_s"] and a["tpot_s"] == b["tpot_s"]


def test_recipe_token_budgets_and_the_dsr1_b200_batching_wait():
    """The TensorRT-LLM recipes' --max_num_tokens: DeepSeek-R1 on B200 (CONC + ISL + 64) rounded up to 64,
    at least 8,192 (1,024 + 64 + 64 = 1,152 -> 8,192; 8,192 + 64 + 256 = 8,512 -> 8,512); gpt-oss 20,000;
    others the profile's (0)."""
    from explorer.curves import recipe_max_num_tokens

    assert recipe_max_num_tokens("deepseek-v3", "b200", 1024, 64) == 8192
    assert recipe_max_num_tokens("deepseek-v3", "b200", 8192, 256) == 8512
    assert recipe_max_num_tokens("gpt-oss-120b", "h200", 1024, 4) == 20000
    assert recipe_max_num_tokens("llama-3.1-70b", "b200", 1024, 64) == 0
    # fronts.yaml's DeepSeek-R1 B200 TensorRT-LLM curve is a speculative-decoding run (unscored): the
    # fixture curves' plain-decoding one at 1k/1k, 4 clients, carries the same budget
    cases = [c for c in load_cases("validation/fronts_inferencex.yaml")
             if c.supported and "dsr1_b200_trtllm_fp8_tp8ep1_1k1k" in c.id]
    assert cases and {c.values["max_num_tokens"] for c in cases} == {8192}
    assert {c.values.get("batch_wait_iters", 0) for c in cases} == {0}  # its DELAY_BATCHING: not applied


def test_a_deployment_token_budget_replaces_the_profiles():
    """Known answer: SGLang's prefill chunk is the step budget; 922-token prompts of 8k-token ISL run in
    ceil(8192/2048) = 4 chunks with a 2,048-token budget, 1 with 16,384: TTFT grows, the design column
    says which budget the simulator used."""
    small = evaluate("llama-3.1-8b", "h200", batch=1, isl=8192, osl=128, runtime="sglang", max_num_tokens=2048)
    big = evaluate("llama-3.1-8b", "h200", batch=1, isl=8192, osl=128, runtime="sglang", max_num_tokens=16384)
    assert small["ttft_s"] > big["ttft_s"] and small["deployment"]["max_num_tokens"] == 2048
    d, _ = build_design({"model": "llama-3.1-8b", "hardware": "h200", "isl": 1024, "osl": 128, "batch": 1,
                         "runtime": "vllm", "max_num_tokens": [0, 4096]}, "test")
    assert list(d["rt_max_tokens"]) == [8192.0, 4096.0]  # vLLM's profile: 8,192
    assert _flag_after(launch_recipe(small).argv, "--chunked-prefill-size") == "2048"


def _flag_after(argv, name):
    return argv[list(argv).index(name) + 1]
