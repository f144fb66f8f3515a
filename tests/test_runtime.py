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


@pytest.mark.parametrize("name, old, new, key", [
    ("vllm", "prompts: mixed", "prompts: sometimes", "scheduling.prompts"),
    ("trtllm", "host_overlap: true", "host_overlap: maybe", "scheduling.host_overlap"),
    ("trtllm", "allreduce_norm: true", "allreduce_norm: 1", "fusion.allreduce_norm"),
])
def test_bad_profile_is_one_line_naming_the_key(tmp_path, name, old, new, key):
    text = open(load_runtime(name).path).read()
    assert old in text
    p = tmp_path / "x.yaml"
    p.write_text(text.replace(old, new))
    with pytest.raises(SpecError, match=key):
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


def test_front_end_beside_the_engine_shows_only_where_it_is_longer():
    """Known answer (explorer/simulate.py _engine): the engine's step is device + its own host work
    (step_s + per_seq_s * b); the serving front end's work (serve_step_s + serve_seq_s * b) adds to
    it, or with host_overlap (trtllm-serve) the step lasts max(engine step, front end).  Device time
    from a step without front end minus its host figure."""
    from explorer.api import _shape_values
    from explorer.design import build_design
    from explorer.simulate import engine_profile

    vals = dict(_shape_values("llama-3.1-8b", None), hardware=np.array(["h200"], dtype=object),
                precision="fp8", isl=1024, osl=1024, tp=1, batch=16, runtime="trtllm")
    design, table = build_design(vals, "test")
    batches = np.array([4.0, 16.0])

    def step(overlap: float, serve: tuple[float, float], step_s: float = 100e-6, per_seq_s: float = 2e-6):
        d = dict(design, rt_overlap=np.array([overlap]), rt_step_s=np.array([step_s]),
                 rt_per_seq_s=np.array([per_seq_s]), rt_serve_step_s=np.array([serve[0]]),
                 rt_serve_seq_s=np.array([serve[1]]), front_end=np.array([1.0]))
        return engine_profile(d, table, batches)["t_decode_s"]

    host = 100e-6 + 2e-6 * batches
    engine = step(0.0, (0.0, 0.0))
    device = engine - host
    assert np.all(device > 1e-3)  # an 8B model's decode step on one H200: milliseconds
    assert step(1.0, (0.0, 0.0)) == pytest.approx(engine, rel=1e-12)  # nothing beside the engine
    assert step(1.0, (100e-6, 1e-6)) == pytest.approx(engine, rel=1e-12)  # a front end that keeps up hides
    assert step(1.0, (50e-3, 1e-3)) == pytest.approx(50e-3 + 1e-3 * batches, rel=1e-9)  # the engine waits
    assert step(0.0, (1e-3, 10e-6)) == pytest.approx(engine + 1e-3 + 10e-6 * batches, rel=1e-9)  # in the loop
    got = step(1.0, (4e-3, 100e-6))  # never faster than either side, never slower than their sum
    front = 4e-3 + 100e-6 * batches
    assert np.all(got >= np.maximum(engine, front) - 1e-12) and np.all(got <= engine + front + 1e-12)
    assert load_runtime("trtllm").host_overlap and not load_runtime("vllm").host_overlap


def test_front_end_is_off_unless_asked():
    """The serving front end is a mechanism asked for (``front_end``/``--front-end``): off, an 8B
    model at 256 clients is engine-bound; on, trtllm's fitted front end (~4 ms + ~0.1 ms per running
    sequence per step on H200) sets the step."""
    kw = dict(batch=256, isl=1024, osl=1024, tp=1, precision="fp8", runtime="trtllm")
    off = evaluate("llama-3.1-8b", "h200", **kw)
    on = evaluate("llama-3.1-8b", "h200", front_end=True, **kw)
    fit = load_runtime("trtllm").fit_for("h200")
    front = fit.serve_step_s + fit.serve_per_sequence_s * on["decode_batch"]
    assert on["tpot_s"] > 1.5 * off["tpot_s"]
    assert on["tpot_s"] >= front * (1 - 1e-9)  # never faster than the front end it waits for
    out = subprocess.run([sys.executable, "-m", "explorer", "evaluate", "--model", "llama-3.1-8b", "--tp", "1",
                          "--precision", "fp8", "--batch", "256", "--front-end", "--json"],
                         capture_output=True, text=True, check=True)
    import json as _json

    assert _json.loads(out.stdout)["tpot_s"] == pytest.approx(on["tpot_s"], rel=1e-9)


@pytest.mark.parametrize("tp, dp, fused_kernels", [(4, 1, 2.0), (1, 1, 0.0), (1, 4, 0.0)])
def test_allreduce_norm_fusion_saves_two_launches_per_layer(tp, dp, fused_kernels):
    """Known answer (explorer/simulate.py _step): a runtime that fuses residual add + RMSNorm into
    its tensor-parallel all-reduces (TensorRT-LLM) launches two kernels fewer per layer where there
    are all-reduces (tp > 1) and no attention data parallelism; nothing else in the step moves.  A
    32-layer model on one stage: the decode step is 32 * 2 * kernel_launch_s shorter at tp 4, the
    same at tp 1 and under attention DP."""
    from explorer.api import _shape_values
    from explorer.design import build_design
    from explorer.simulate import engine_profile

    vals = dict(_shape_values("llama-3.1-8b", None), hardware=np.array(["h200"], dtype=object),
                precision="fp8", isl=1024, osl=1024, tp=tp, dp=dp, batch=16, runtime="trtllm")
    design, table = build_design(vals, "test")
    assert float(design["rt_ar_norm"][0]) == 1.0 and float(design["layers"][0]) == 32
    batches = np.array([4.0, 16.0])
    step = {f: engine_profile(dict(design, rt_ar_norm=np.array([f])), table, batches)["t_decode_s"]
            for f in (0.0, 1.0)}
    launch_s = table.kinds[int(design["hw_idx"][0])].kernel_launch_s
    assert step[0.0] - step[1.0] == pytest.approx(np.full(2, 32 * fused_kernels * launch_s), rel=1e-9, abs=1e-15)
    assert load_runtime("trtllm").fuse_allreduce_norm
    assert not load_runtime("vllm").fuse_allreduce_norm and not load_runtime("sglang").fuse_allreduce_norm


def test_offline_benchmark_profile_is_the_engine_without_a_front_end():
    """runtimes/trtllm-bench.yaml (TensorRT-LLM's offline engine benchmark, the runtime validate gives
    every TensorRT-LLM row of measurements.yaml) shares trtllm's engine mechanisms and has no serving
    front end: its fitted residuals are its own."""
    from explorer.validate import BENCH_RUNTIME, DEFAULT_MEASUREMENTS, load_cases

    bench, served = load_runtime(BENCH_RUNTIME), load_runtime("trtllm")
    same = ("mixed_prompts", "max_tokens_per_step", "max_batch", "reserve_full_kv", "graph_padding", "graph_step",
            "graph_max_batch", "fuse_allreduce_norm")
    assert {k: getattr(bench, k) for k in same} == {k: getattr(served, k) for k in same}
    assert not bench.host_overlap and bench.prior.serve_step_s == 0 and bench.prior.serve_per_sequence_s == 0
    assert all(f.serve_step_s == 0 and f.serve_per_sequence_s == 0 for f in bench.fitted.values())
    runtimes = {c.values.get("runtime") for c in load_cases(DEFAULT_MEASUREMENTS)
                if c.supported and c.kind == "inference" and c.id.startswith("trt_latest_")}
    assert runtimes == {BENCH_RUNTIME}
