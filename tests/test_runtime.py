"""Serving-runtime profiles (explorer/runtime.py, runtimes/*.yaml) and where they surface:
evaluate --runtime, deployment.runtime in a space, validate from a curve's framework."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

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


def test_unfitted_kind_takes_its_family_then_its_vendor_never_a_copy():
    """A runtime's fits lend themselves to a kind it was never fitted on by lineage: the median of
    its own fits on the kind's architecture generation, else its family, else on its vendor's
    kinds, else on every kind.
    A transferred copy (``calibrate --transfer-from``) lends nothing, and leaving a kind out of the
    fit leaves out the copies taken from it (they hold what it was fitted on)."""
    rt = load_runtime("sglang")
    fits = {"mi300x": RuntimeFit(4e-4, 3e-6, 0.09, 0.56, 0.48), "mi325x": RuntimeFit(5e-4, 5e-6, 0.05, 0.70, 0.60),
            "h200": RuntimeFit(2e-4, 2e-6, 0.08, 1.0, 0.96), "b200": RuntimeFit(3e-4, 4e-6, 0.16, 0.9, 0.98),
            "gh200": RuntimeFit(9e-4, 9e-6, 0.9, 0.3, 0.3)}  # a stale copy of h200's: must never be used
    rt = replace(rt, fitted=fits, transferred_from={"gh200": "h200"})
    amd = rt.fit_for("mi355x")  # cdna4, no fit of its generation: its family's (the cdna3 kinds') median
    assert (amd.step_s, amd.compute, amd.attention) == pytest.approx((4.5e-4, 0.54, 0.63))
    cdna4 = replace(rt, fitted={**fits, "mi355x": RuntimeFit(1e-4, 3e-6, 0.05, 0.95, 0.93)})
    from explorer.runtime import nearest_kinds
    assert nearest_kinds(["h200", "mi325x", "b300"], "gb200") == ["b300"]  # no sm_100 fit: its family's
    assert nearest_kinds(["h200", "mi325x"], "gb200", widest="family") == []  # Hopper is not Blackwell
    assert nearest_kinds(["h200", "mi325x"], "gb200", widest="vendor") == ["h200"]
    assert nearest_kinds(["mi325x"], "zz-unknown") == ["mi325x"]  # no lineage: every kind
    held = cdna4.without_fit("mi300x")
    assert held.fit_for("mi300x") == fits["mi325x"]  # its generation (cdna3) before its family (cdna)
    assert held.without_fit("mi325x").fit_for("mi300x").step_s == pytest.approx(1e-4)  # then the family
    assert rt.fit_for("gb200") == fits["b200"]  # blackwell
    assert rt.fit_for("h100") == fits["h200"]  # hopper: h200's own fit, not the median with gh200's copy
    ampere = rt.fit_for("a100-80gb")  # no ampere fit: NVIDIA's own fits (h200, b200)
    assert (ampere.step_s, ampere.compute) == pytest.approx((2.5e-4, 0.97))
    assert rt.fit_for("gh200") == fits["gh200"]  # a kind's own entry, copied or not, is what it runs with
    held = rt.without_fit("h200")
    assert "gh200" not in held.fitted and held.fit_for("h100") == fits["b200"]
    assert rt.fit_for("no-such-kind").step_s == pytest.approx(3.5e-4)  # unknown kind: every own fit
    assert load_runtime("vllm").transferred_from.get("h200-nvl") == "h200"  # read from the shipped file


@pytest.mark.parametrize("name, old, new, key", [
    ("vllm", "prompts: mixed", "prompts: sometimes", "scheduling.prompts"),
    ("trtllm", "host_overlap: true", "host_overlap: maybe", "scheduling.host_overlap"),
    ("trtllm", "allreduce_norm: true", "allreduce_norm: 1", "fusion.allreduce_norm"),
    ("trtllm", "balance_timeout_iters: 60", "balance_timeout_iters: -5", "attention_dp.balance_timeout_iters"),
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
    """Known answer (explorer/engine/engine_step.py engine_steps): the engine's step is device + its own host work
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
    """Known answer (explorer/engine/layer_step.py step_times): a runtime that fuses residual add + RMSNorm into
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
    assert load_runtime("trtllm").fuse_allreduce_norm and load_runtime("vllm").fuse_allreduce_norm  # vLLM >= 0.17
    assert not load_runtime("sglang").fuse_allreduce_norm


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


def test_custom_allreduce_by_hand():
    """explorer/costs/comm.py custom_allreduce_s: the faster of one-shot, latency + (n-1)*m/(bw*eta),
    and two-shot, 2*latency + 2*(n-1)/n*m/(bw*eta).  bw 450 GB/s, eta 0.8 (360 GB/s), latency 5 us:
    64 kB on 8 GPUs: one-shot 5 + 7*64e3/360e9 = 6.2444 us (two-shot 10.311 us); 8 MB on 8 GPUs:
    one-shot 160.56 us, two-shot 10 + 2*7/8*8e6/360e9 = 48.889 us; one GPU: nothing."""
    from explorer.costs.comm import CUSTOM_ALLREDUCE_LATENCY_S, custom_allreduce_s

    assert CUSTOM_ALLREDUCE_LATENCY_S == 5e-6
    got = custom_allreduce_s(np.array([64e3, 8e6, 64e3]), np.array([8, 8, 1]), up_bw=450e9, eta_n=0.8)
    np.testing.assert_allclose(got, [5e-6 + 7 * 64e3 / 360e9, 10e-6 + 2 * 7 / 8 * 8e6 / 360e9, 0.0], rtol=1e-12)


@pytest.mark.parametrize("hardware, tp, custom", [("h200", 8, True), ("h200", 2, True), ("l40s", 4, False)])
def test_custom_allreduce_in_the_served_step(hardware, tp, custom):
    """Known answer (explorer/engine/layer_step.py step_times): a runtime with its own peer-to-peer all-reduce
    (``collectives.custom_allreduce``) pays, for each of a layer's two tensor-parallel all-reduces
    of m = M*H*2 bytes, the faster of NCCL's algorithms and the custom kernel; nothing else in the
    step moves.  Llama-3.1-8B (32 layers, H = 4096) at decode batches 4 and 16 (captured graph sizes,
    no padding): the step is 32 * 2 * (NCCL - min(NCCL, custom)) shorter at tp > 1 inside the NVLink
    domain; the same on a PCIe-only kind (``interconnect.peer_allreduce: false``); tp 1 has none."""
    from explorer.api import _shape_values
    from explorer.costs.comm import collective_s, custom_allreduce_s, protocols_of
    from explorer.design import build_design
    from explorer.simulate import engine_profile

    vals = dict(_shape_values("llama-3.1-8b", None), hardware=np.array([hardware], dtype=object),
                precision="fp8", isl=1024, osl=1024, tp=tp, batch=16, runtime="sglang")
    design, table = build_design(vals, "test")
    assert float(design["rt_custom_ar"][0]) == 1.0
    batches = np.array([4.0, 16.0])
    step = {f: engine_profile(dict(design, rt_custom_ar=np.array([f])), table, batches)["t_decode_s"]
            for f in (0.0, 1.0)}
    k = table.kinds[0]
    m = batches * 4096 * 2.0
    nccl = collective_s(m, tp, domain=float(k.scaleup_domain), up_bw=k.scaleup_bw, up_step_s=k.scaleup_latency_s,
                        out_bw=k.scaleout_bw, out_step_s=k.scaleout_latency_s, eta_n=k.eta_network,
                        protocols=protocols_of(k), nvls_eta=k.nvls_eta, nvls_latency_s=k.nvls_latency_s,
                        mesh=k.scaleup_mesh)
    saved = 32 * 2 * (nccl - np.minimum(nccl, custom_allreduce_s(m, tp, up_bw=k.scaleup_bw, eta_n=k.eta_network)))
    assert step[0.0] - step[1.0] == pytest.approx(saved if custom else np.zeros(2), rel=1e-9, abs=1e-15)
    assert (saved > 0).all()  # at decode sizes the peer-to-peer kernel is the faster (l40s: the fabric forbids it)
    assert all(load_runtime(n).custom_allreduce for n in ("trtllm", "trtllm-bench", "sglang", "mlperf", "vllm"))
    assert not load_runtime("gpt-fast").custom_allreduce



@pytest.mark.parametrize("label, name", [
    ("TensorRT LLM", "trtllm"), ("trtllm-serve", "trtllm"), ("TRT-LLM 1.2.0rc2", "trtllm"),
    ("vLLM (ROCm)", "vllm"), ("vllm-rocm", "vllm"), ("SGLang v0.5.9", "sglang"), ("sglang 0.5.12", "sglang"),
    ("dynamo-trt", "trtllm"), ("Dynamo-SGLang", "sglang"),
])
def test_framework_labels_as_runs_write_them(label, name):
    assert load_runtime(label).name == name


def test_an_unknown_framework_is_still_an_error():
    with pytest.raises(SpecError, match="unknown runtime 'Dynamo'"):
        load_runtime("Dynamo")
