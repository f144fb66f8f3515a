"""Serving-runtime profiles (explorer/runtime.py, runtimes/*.yaml) and where they surface:
evaluate --runtime, deployment.runtime in a space, validate from a curve's framework."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import yaml

from explorer.api import evaluate
from explorer.errors import SpecError
from explorer.runtime import RuntimeFit, _load_file, list_runtimes, load_runtime
from explorer.space import load_space


def test_shipped_profiles_load_with_sources():
    names = {r.name for r in list_runtimes()}
    assert {"trtllm", "vllm", "sglang"} <= names
    assert load_runtime("TensorRT-LLM").name == "trtllm"
    assert load_runtime("vLLM").name == "vllm"
    assert load_runtime("SGLang").name == "sglang"
    assert load_runtime("trtllm").mixed_prompts and not load_runtime("sglang").mixed_prompts
    assert load_runtime("trtllm").reserve_full_kv and not load_runtime("vllm").reserve_full_kv
    with pytest.raises(SpecError, match="unknown runtime 'tgi'"):
        load_runtime("tgi")


def test_unfitted_kind_uses_the_median_of_other_fits():
    rt = load_runtime("vllm")
    rt = rt.without_fit("zz1").with_fit("a", RuntimeFit(1e-4, 1e-6, 0.01, 0.9)).with_fit(
        "b", RuntimeFit(3e-4, 3e-6, 0.03, 0.7))
    rt = type(rt)(**{**rt.__dict__, "fitted": {k: v for k, v in rt.fitted.items() if k in ("a", "b")}})
    f = rt.fit_for("zz1")
    assert f.step_s == pytest.approx(2e-4) and f.attention == pytest.approx(0.8)
    assert rt.without_fit("a").fit_for("a").step_s == pytest.approx(3e-4)


def test_bad_profile_is_one_line_naming_the_key(tmp_path):
    text = open(load_runtime("vllm").path).read().replace("prompts: mixed", "prompts: sometimes")
    p = tmp_path / "x.yaml"
    p.write_text(text)
    with pytest.raises(SpecError, match="scheduling.prompts"):
        _load_file(p)


def test_runtimes_differ_by_mechanism_not_a_factor():
    """The same design under the three profiles: different host costs, prompt scheduling and chunk
    budgets give different fronts; SGLang's separate prefill steps stall decoders (prefill share)."""
    kw = dict(batch=32, isl=1024, osl=1024, tp=8, precision="fp8")
    r = {n: evaluate("deepseek-r1", "h200", runtime=n, **kw) for n in ("trtllm", "vllm", "sglang")}
    tpots = {n: v["tpot_s"] for n, v in r.items()}
    assert len({round(v, 9) for v in tpots.values()}) == 3
    assert all(v["runtime"] == n for n, v in r.items())


def test_evaluate_cli_runtime_flag():
    out = subprocess.run([sys.executable, "-m", "explorer", "evaluate", "--model", "llama-3.1-8b", "--runtime", "vllm",
                          "--json"], capture_output=True, text=True, check=True)
    assert '"runtime": "vllm"' in out.stdout
    bad = subprocess.run([sys.executable, "-m", "explorer", "evaluate", "--model", "llama-3.1-8b", "--runtime", "x"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--runtime" in bad.stderr


def test_space_runtime_list_competes_on_one_front(tmp_path):
    spec = yaml.safe_load(open("search_spaces/llama-3.1-70b-deploy.yaml"))
    spec["deployment"]["runtime"] = ["trtllm", "vllm", "sglang"]
    p = tmp_path / "rt.yaml"
    p.write_text(yaml.safe_dump(spec))
    s = load_space(p)
    assert "runtime" in s.searched
    n = 60
    rng = np.random.default_rng(0)
    samples = {k: ([rng.choice(v.choices) for _ in range(n)] if hasattr(v, "choices") else
                   list(rng.integers(int(v.low), int(v.high) + 1, n)))
               for k, v in s.searched.items()}
    df = s.score(samples)
    assert set(df["runtime"]) == {"trtllm", "vllm", "sglang"}
    spec["deployment"]["runtime"] = "tensorrt"
    p.write_text(yaml.safe_dump(spec))
    with pytest.raises(SpecError, match="deployment.runtime"):
        load_space(p)
