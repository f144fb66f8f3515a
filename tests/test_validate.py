"""Validation and calibration: unit conversions by hand, per-case error handling, and a calibration
that recovers known factors from synthetic measurements."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import yaml

from explorer.api import evaluate
from explorer.calibrate import calibrate, write_fit
from explorer.errors import SpecError
from explorer.hardware import _load_file, load_hardware
from explorer.runtime import RuntimeFit, load_runtime
from explorer.validate import DEFAULT_MEASUREMENTS, load_cases, parse_case, predict, validate


def _offline_trtllm(hw: str):
    """TensorRT-LLM as measurements.yaml's offline benchmarks run it (the trtllm-bench profile, its
    own fit): no per-request server work."""
    rt = load_runtime("trtllm-bench")
    f = rt.fit_for(hw)
    return rt.with_fit(hw, RuntimeFit(f.step_s, f.per_sequence_s, 0.0, f.attention, f.compute))


def _case(**kw):
    base = {"id": "c", "model": "Llama-3.1-8B", "gpu": "H200", "num_gpus": 1, "tp": 1, "pp": 1, "ep": None,
            "precision": "FP8", "isl": 1024, "osl": 1024, "concurrency_or_batch": 8,
            "metric": "output_throughput_per_gpu", "value": 1000.0, "unit": "tok/s/GPU"}
    base.update(kw)
    return base


def test_per_group_throughput_is_divided_by_gpus():
    """output_throughput_total is per TP group: predicted = per-GPU figure x num_gpus."""
    c = parse_case(_case(model="Llama-3.1-70B", num_gpus=4, tp=4, metric="output_throughput_total", unit="tok/s",
                         concurrency_or_batch=64), 0)
    assert c.supported, c.reason
    [p] = predict([c])
    r = evaluate("llama-3.1-70b", "h200", batch=64, tp=4, precision="fp8", isl=1024, osl=1024,
                 runtime=_offline_trtllm("h200"))
    assert p == pytest.approx(r["tokens_per_s_per_gpu"] * 4, rel=1e-12)


def test_ttft_in_milliseconds_and_decode_per_user():
    c1 = parse_case(_case(metric="first_token_latency", unit="ms", concurrency_or_batch=1, osl=1), 0)
    c2 = parse_case(_case(metric="decode_tokens_per_s_per_user", unit="tok/s/user", concurrency_or_batch=1,
                          osl=None, isl=5), 1)
    p1, p2 = predict([c1, c2])
    r1 = evaluate("llama-3.1-8b", "h200", batch=1, isl=1024, osl=1, precision="fp8", runtime=_offline_trtllm("h200"))
    r2 = evaluate("llama-3.1-8b", "h200", batch=1, isl=5, osl=200, precision="fp8",  # gpt-fast default 200
                  runtime=_offline_trtllm("h200"))
    assert p1 == pytest.approx(r1["ttft_s"] * 1000.0, rel=1e-12)
    assert p2 == pytest.approx(r2["tokens_per_s_per_user"], rel=1e-12)
    assert c1.regime == "ttft" and c2.regime == "decode_latency"


def test_dep_mapping_is_attention_dp_with_expert_parallel():
    c = parse_case(_case(model="DeepSeek-R1-0528", gpu="B200", num_gpus=4, tp=None, ep=4, precision="NVFP4",
                         concurrency_or_batch="max (saturated)"), 0)
    assert c.supported, c.reason
    assert (c.values["tp"], c.values["dp"], c.values["ep"]) == (1, 4, 4)
    assert c.values["precision"] == "fp4" and c.saturated


def test_kernel_conversions_by_hand():
    h = load_hardware("h100")
    hbm = parse_case(_case(id="hbm", model="STREAM triad", gpu="H100", metric="hbm_achieved_bandwidth",
                           unit="TB/s", value=3.0, concurrency_or_batch=None, precision=None), 0)
    ar = parse_case(_case(id="ar", model="NCCL AllReduce", gpu="H100", num_gpus=8, metric="nccl_allreduce_busbw",
                          unit="GB/s", value=400.0, concurrency_or_batch="8G", precision=None), 1)
    gm = parse_case(_case(id="g", model="GEMM", gpu="H100", metric="gemm_achieved_tflops", unit="TFLOPS",
                          value=1000.0, concurrency_or_batch="16384x16384x16384", precision="FP8"), 2)
    p_hbm, p_ar, p_g = predict([hbm, ar, gm])
    assert p_hbm == pytest.approx(h.hbm_bw * h.eta_memory / 1e12)
    # 8 GB over 8 GPUs (scored by explorer.kernel_cases, the kernels.yaml cost path): latencies are
    # < 0.1 %; the faster of the Simple ring, 2*7/8*S/(bw*eta_n), and NVLS, S/(bw*nvls_eta), plus the
    # stand-alone call's fixed cost
    size, n = 8e9, 8
    ring = 2 * (n - 1) / n * size / (h.scaleup_bw * h.eta_network)
    nvls = size / (h.scaleup_bw * h.nvls_eta) + h.nvls_latency_s if h.nvls_eta > 0 else np.inf
    t = min(ring, nvls) + h.collective_latency_s
    assert p_ar == pytest.approx(size * 2 * (n - 1) / n / t / 1e9, rel=0.01)
    # 16384^3 FP8: 128x256 tiles -> 128*64 = 8192 tiles, 63 waves of 132 SMs (8192/132 = 62.06 -> 63);
    # a share gemm_epilogue_exposed of the bf16 output write is not hidden; one kernel latency
    waves = np.ceil(8192 / 132)
    compute_s = waves * 132 * 2 * 128 * 256 * 16384 / (h.peak_flops["fp8"] * h.eta_compute)
    out_s = 16384**2 * 2.0 / (h.hbm_bw * h.eta_memory)
    mem_s = 2 * 16384**2 * 1.0 / (h.hbm_bw * h.eta_memory) + out_s  # A, B fp8; C bf16
    t_g = max(compute_s + h.gemm_epilogue_exposed * out_s, mem_s) + h.kernel_latency_s
    expected = 2 * 16384**3 / t_g / 1e12
    assert p_g == pytest.approx(expected, rel=0.02)  # another tile shape may be marginally better


@pytest.mark.parametrize("bad, why", [
    ({"model": "NoSuchModel-9B"}, "unknown model"),
    ({"gpu": "TPU-v9"}, "unknown hardware"),
    ({"value": None}, "value must be"),
    ({"acceptance_lenght": 3}, "did you mean 'acceptance_length'"),
    ({"metric": "joules"}, "unknown metric"),
    ({"unit": "tok/s/user"}, "does not fit"),
    ({"concurrency_or_batch": "lots"}, "neither a batch"),
    ({"tp": 2}, "does not match num_gpus"),
])
def test_bad_cases_are_reported_not_dropped(tmp_path, bad, why):
    good = _case(id="good")
    broken = _case(id="broken", **bad)
    f = tmp_path / "m.yaml"
    f.write_text(yaml.safe_dump({"measurements": [good, broken]}))
    res = validate(f)
    ids = [c["id"] for c in res["cases"]]
    assert ids == ["good", "broken"]
    assert res["cases"][0]["supported"] and res["cases"][0]["predicted"] > 0
    assert not res["cases"][1]["supported"] and why in res["cases"][1]["reason"]
    assert res["summary"]["unsupported"][0]["id"] == "broken"


def test_cli_exit_codes(tmp_path):
    f = tmp_path / "m.yaml"
    f.write_text(yaml.safe_dump({"measurements": [_case(id="a"), _case(id="b", model="nope")]}))
    ok = subprocess.run([sys.executable, "-m", "explorer", "validate", "--measurements", str(f), "--json"],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    data = json.loads(ok.stdout)
    assert {"cases", "summary"} <= set(data)
    row = data["cases"][0]
    assert {"id", "metric", "unit", "measured", "predicted", "error", "supported", "reason"} <= set(row)
    assert row["error"] == pytest.approx(row["predicted"] / row["measured"] - 1)
    for content in ("measurements: [unclosed", "just text"):
        g = tmp_path / "bad.yaml"
        g.write_text(content)
        bad = subprocess.run([sys.executable, "-m", "explorer", "validate", "--measurements", str(g)],
                             capture_output=True, text=True)
        assert bad.returncode == 2 and "Traceback" not in bad.stderr and str(g) in bad.stderr
    missing = subprocess.run([sys.executable, "-m", "explorer", "validate", "--measurements", str(tmp_path / "x.yaml")],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "file not found" in missing.stderr


def test_shipped_measurements_meet_the_bar():
    """Issue 5's bar on the shipped set: >= 90% supported, inference median |err| <= 25%, p90 <= 60%,
    and no prediction above the physical roofline."""
    res = validate(DEFAULT_MEASUREMENTS)
    s = res["summary"]
    assert s["supported_share"] >= 0.90
    assert s["inference"]["median_abs_error"] <= 0.25
    assert s["inference"]["p90_abs_error"] <= 0.60
    assert s["above_roofline"] == []
    assert all(r["reason"] for r in res["cases"] if not r["supported"])


def test_calibration_recovers_known_factors(tmp_path):
    """Measurements generated from known factors; a fit starting elsewhere recovers them."""
    truth = load_hardware("h100").with_efficiency(
        eta_compute=0.62, eta_memory=0.81, eta_network=0.72, eta_moe=0.55, kernel_launch_s=3e-6)
    rt = load_runtime("trtllm-bench")  # the points' runtime (validate.BENCH_RUNTIME)
    rt_truth = {"trtllm-bench": rt.with_fit("h100", RuntimeFit(400e-6, 6e-6, 0.0, 0.9))}
    raw = []
    specs = [
        ("Llama-3.1-8B", 1, 1, None, "FP8", 1024, 1024, 1, "decode_tokens_per_s_per_user", "tok/s/user"),
        ("Llama-3.1-8B", 1, 1, None, "FP8", 128, 128, 256, "output_throughput_per_gpu", "tok/s/GPU"),
        ("Llama-3.1-8B", 1, 1, None, "FP8", 2048, 1, 1, "first_token_latency", "ms"),
        ("Llama-3.1-70B", 4, 4, None, "FP8", 1024, 1024, 1, "decode_tokens_per_s_per_user", "tok/s/user"),
        ("Llama-3.1-70B", 4, 4, None, "FP8", 1024, 1024, 512, "output_throughput_per_gpu", "tok/s/GPU"),
        ("Mixtral-8x7B", 2, 2, None, "FP8", 1024, 1024, 256, "output_throughput_per_gpu", "tok/s/GPU"),
        ("Qwen3-30B-A3B", 1, 1, None, "FP8", 1024, 1024, 512, "output_throughput_per_gpu", "tok/s/GPU"),
        ("Llama-2-7B", 1, 1, None, "FP8", 2048, 128, 64, "output_throughput_per_gpu", "tok/s/GPU"),
        ("gpt-oss-20b", 1, 1, None, "FP8", 1024, 1024, 1, "decode_tokens_per_s_per_user", "tok/s/user"),
    ]
    for i, (m, n, tp, ep, prec, isl, osl, b, metric, unit) in enumerate(specs):
        raw.append(_case(id=f"s{i}", model=m, gpu="H100", num_gpus=n, tp=tp, ep=ep, precision=prec, isl=isl, osl=osl,
                         concurrency_or_batch=b, metric=metric, unit=unit, value=1.0))
    raw.append(_case(id="g", model="GEMM", gpu="H100", metric="gemm_achieved_tflops", unit="TFLOPS", value=1.0,
                     concurrency_or_batch="8192x8192x8192", precision="FP8"))
    raw.append(_case(id="hbm", model="STREAM", gpu="H100", metric="hbm_achieved_bandwidth", unit="TB/s", value=1.0,
                     concurrency_or_batch=None, precision=None))
    raw.append(_case(id="ar", model="NCCL", gpu="H100", num_gpus=8, metric="nccl_allreduce_busbw", unit="GB/s",
                     value=1.0, concurrency_or_batch="64M", precision=None))
    cases = [parse_case(r, i) for i, r in enumerate(raw)]
    assert all(c.supported for c in cases), [c.reason for c in cases if not c.supported]
    values = predict(cases, {"h100": truth}, rt_truth)
    for r, v in zip(raw, values, strict=True):
        r["value"] = float(v)
    f = tmp_path / "synthetic.yaml"
    f.write_text(yaml.safe_dump({"measurements": raw}))
    start = load_hardware("h100").with_efficiency(eta_compute=0.8, eta_memory=0.9, eta_network=0.9, eta_moe=1.0,
                                                   kernel_launch_s=1e-6)
    fit = calibrate(start, f, prior_weight=0.0, max_nfev=400)
    assert np.max(np.abs(fit.errors_after)) < 0.01
    assert fit.values["compute"] == pytest.approx(0.62, rel=0.05)
    assert fit.values["memory"] == pytest.approx(0.81, rel=0.05)
    assert fit.values["network"] == pytest.approx(0.72, rel=0.1)
    assert fit.values["moe"] == pytest.approx(0.55, rel=0.1)
    assert fit.values["kernel_launch_us"] == pytest.approx(3.0, rel=0.15)
    assert fit.runtime_values["trtllm-bench"]["step_us"] == pytest.approx(400.0, rel=0.15)


def test_write_fit_records_values_and_keeps_file_loadable(tmp_path):
    src = load_hardware("h100")
    path = tmp_path / "h100.yaml"
    path.write_text(open(src.path).read())
    hw = _load_file(path)
    fit = calibrate(hw, DEFAULT_MEASUREMENTS, cases=load_cases(DEFAULT_MEASUREMENTS))
    write_fit(fit, DEFAULT_MEASUREMENTS, runtime_dir=tmp_path)  # never the shipped runtimes/*.yaml
    assert (tmp_path / "trtllm-bench.yaml").exists()  # the points' runtime (validate.BENCH_RUNTIME)
    again = _load_file(path)
    assert again.efficiency_kind == "calibration"
    assert again.eta_compute == pytest.approx(fit.values["compute"], rel=1e-3)
    assert again.raw["efficiency"]["calibration"]["cases"] == fit.case_ids
    assert "prior_source" in again.raw["efficiency"]["calibration"]
    text = path.read_text()
    assert textwrap.dedent("NVLink").strip() in text  # the rest of the file is kept


def test_transfer_copies_serving_factors_to_an_unmeasured_kind(tmp_path):
    from explorer.calibrate import transfer

    src = load_hardware("h200")
    path = tmp_path / "mi300x.yaml"
    path.write_text(open(load_hardware("mi300x").path).read())
    before = _load_file(path)
    transfer(str(path), src, kernel_factors=False)
    after = _load_file(path)
    assert after.eta_moe == pytest.approx(src.eta_moe, rel=1e-3)
    assert after.per_sequence_s == pytest.approx(src.per_sequence_s, rel=1e-3)
    assert after.step_overhead_s == pytest.approx(src.step_overhead_s, rel=1e-3)
    assert after.eta_compute == before.eta_compute  # kernel factors kept without --all-factors
    assert "h200" in after.raw["efficiency"]["transferred"]
    transfer(str(path), src, kernel_factors=True)
    assert _load_file(path).eta_compute == pytest.approx(src.eta_compute, rel=1e-3)


def test_inter_token_latency_node_and_attention_rows(tmp_path):
    """The metrics issue 9 names: inter_token_latency (ms at a concurrency = TPOT),
    output_tokens_per_s_per_node (per GPU x GPUs per node; a disaggregated decode node carries no
    prompts) and attention_achieved_tflops (a FlashAttention-style kernel, keys or 'BxSxHxD')."""
    import yaml as _yaml

    from explorer.api import evaluate

    rows = [
        {"id": "itl", "model": "Llama-3.1-70B", "gpu": "H200", "num_gpus": 4, "tp": 4, "pp": 1, "ep": None,
         "precision": "FP8", "isl": 1024, "osl": 1024, "concurrency_or_batch": 16, "metric": "inter_token_latency",
         "value": 12.0, "unit": "ms", "source": "t", "trust": "low"},
        {"id": "node", "model": "Llama-3.1-70B", "gpu": "H200", "num_gpus": 4, "tp": 4, "pp": 1, "ep": None,
         "precision": "FP8", "isl": 1024, "osl": 1024, "concurrency_or_batch": 64, "gpus_per_node": 8,
         "metric": "output_tokens_per_s_per_node", "value": 9000, "unit": "tok/s/node", "source": "t",
         "notes": "disaggregated decode", "trust": "low"},
        {"id": "attn", "gpu": "H100", "num_gpus": 1, "precision": "BF16", "concurrency_or_batch": "32x512x32x64",
         "metric": "attention_achieved_tflops", "value": 333, "unit": "TFLOPS", "source": "t", "trust": "low"},
    ]
    f = tmp_path / "m.yaml"
    f.write_text(_yaml.safe_dump({"measurements": rows}))
    res = {r["id"]: r for r in validate(f)["cases"]}
    assert all(r["supported"] for r in res.values()), res
    itl = evaluate("llama-3.1-70b", "h200", batch=16, isl=1024, osl=1024, tp=4, precision="fp8",
                   runtime="trtllm-bench")
    # the same TPOT; validate drops the per-request serving work of offline benchmark rows, which moves
    # the closed loop's batch a little (shorter TTFT: more of the 16 clients decode at once)
    assert res["itl"]["predicted"] == pytest.approx(itl["tpot_s"] * 1e3, rel=2e-3)
    agg = evaluate("llama-3.1-70b", "h200", batch=64, isl=1024, osl=1024, tp=4, precision="fp8")
    # decode node: no prompt chunks in its steps, so faster than the aggregated replica per GPU
    assert res["node"]["predicted"] > agg["tokens_per_s_per_gpu"] * 8
    assert 100 < res["attn"]["predicted"] < 990  # below the H100's dense bf16 peak


def test_serving_front_end_costs_only_served_rows():
    """A runtime's serve_* host figures (trtllm-serve's front end) move a served curve row and leave
    the same row scored as an offline engine benchmark (serverless: trtllm-bench) where it was."""
    from dataclasses import replace as _replace

    from explorer.runtime import load_runtime
    from explorer.validate import DEFAULT_MEASUREMENTS, load_cases, predict

    row = next(c for c in load_cases(DEFAULT_MEASUREMENTS.parent / "fronts.yaml")
               if c.supported and c.values.get("runtime") == "trtllm" and c.id.endswith(":tok_s_user")
               and c.hardware == "h200")
    offline = _replace(row, id=row.id + "-offline", values=dict(row.values, serverless=True))
    rt = load_runtime("trtllm")
    fit = rt.fit_for("h200")
    slow = {"trtllm": rt.with_fit("h200", _replace(fit, serve_step_s=0.05, serve_per_sequence_s=1e-3))}
    fast = {"trtllm": rt.with_fit("h200", _replace(fit, serve_step_s=0.0, serve_per_sequence_s=0.0))}
    a, b = predict([row, offline], runtimes=slow), predict([row, offline], runtimes=fast)
    assert a[0] < 0.5 * b[0]  # a 50 ms + 1 ms/sequence front end dominates the served step
    assert a[1] == pytest.approx(b[1], rel=1e-12)  # the engine benchmark never pays it


def test_family_serving_prior_for_a_kind_without_curves():
    """A kind calibrated without serving curves starts the factors only served rows identify
    (per-kernel cost under graphs, grouped-GEMM factors) from its nearest curve-fitted kinds (its
    architecture generation's, else its family's): the arithmetic mean of the launch cost, the geometric mean of efficiencies.  A kind whose family has
    no curve-fitted member keeps its file's values."""
    from explorer.calibrate import SERVED_ONLY, _served_curves, family_serving_prior

    fam = [load_hardware("b200"), load_hardware("b300")]  # blackwell kinds fitted on curves
    assert all(_served_curves(h) for h in fam) and not _served_curves(load_hardware("gb200"))
    got = family_serving_prior(load_hardware("gb200"))  # sm_100 (arch blackwell): B200's alone
    assert got["kernel_launch_s"] == pytest.approx(fam[0].kernel_launch_s)
    assert got["eta_moe"] == pytest.approx(fam[0].eta_moe)
    from dataclasses import replace
    ultra = replace(load_hardware("gb200"), name="zz-ultra", arch="blackwell-ultra")  # B300's generation
    got = family_serving_prior(ultra)
    assert got["kernel_launch_s"] == pytest.approx(fam[1].kernel_launch_s)
    lone = replace(load_hardware("gb200"), name="zz-next", arch="blackwell-next")  # unlisted arch: its own family
    assert family_serving_prior(lone) == {}
    assert set(got) == {"kernel_launch_s", "eta_moe", "moe_group_s", "eta_dequant", "served_latency"}
    assert len(SERVED_ONLY) == 5
    assert family_serving_prior(load_hardware("a100-80gb")) == {}  # ampere: no curve-fitted sibling
    assert family_serving_prior(load_hardware("rtx-pro-6000")) == {}  # sm_120 is not B200's family


def test_holdout_by_config_leaves_every_curve_of_a_model_and_runtime_out_together():
    from explorer.calibrate import holdout_groups

    cases = [c for c in load_cases("validation/fronts.yaml") if c.hardware == "h200" and c.supported]
    by_curve, by_config = holdout_groups(cases), holdout_groups(cases, "config")
    assert len(by_config) < len(by_curve)
    key = next(k for k in by_config if k.endswith("|trtllm") and "llama" in k)
    llama_trt = {c.curve for c in cases if c.runtime == "trtllm" and "llama70b" in c.curve}
    assert len(llama_trt) == 8 and {cases[i].curve for i in by_config[key]} == llama_trt  # TP1-8 x 1k1k, 1k8k
    assert sorted(i for g in by_config.values() for i in g) == sorted(i for g in by_curve.values() for i in g)
    with pytest.raises(ValueError, match="config"):
        holdout_groups(cases, "row")


@pytest.mark.parametrize("label, kind", [
    ("H200", "h200"), ("GB300 NVL72", "gb300"), ("NVIDIA H100 80GB HBM3", "h100"), ("A100 SXM4 80GB", "a100-80gb"),
    ("AMD Instinct MI300X", "mi300x"), ("RTX PRO 6000 Blackwell", "rtx-pro-6000"), ("H200 NVL", "h200-nvl"),
    ("B200 (AWS p6-b200)", "b200"), ("L40S 48GB", "l40s"), ("H200-SXM-141GB", "h200"), ("A100-SXM4-80GB", "a100-80gb"),
    ("H20", "h20"), ("Gaudi2", "gaudi2"), ("HLS-Gaudi2-PT", "gaudi2"), ("Intel Gaudi 2", "gaudi2"),
])
def test_gpu_labels_as_runs_write_them(label, kind):
    from explorer.validate import gpu_hardware

    assert gpu_hardware(label).name == kind


@pytest.mark.parametrize("label", ["H100 PCIe", "A100 40GB", "Gaudi3", "H20-3e 141GB", "A100-SXM4-40GB", "H100-PCIe-80GB"])
def test_gpu_labels_of_parts_without_a_file_stay_unknown(label):
    """Another part (PCIe board, 40 GB A100, the next Gaudi) is not mapped to a file of a different one."""
    from explorer.validate import gpu_hardware

    with pytest.raises(SpecError):
        gpu_hardware(label)


@pytest.mark.parametrize("label, gpu, policy", [
    ("W4A16", "h100", "w4a16"), ("INT8 W8A8", "h100", "fp8"), ("w8a8-fp8", "h200", "fp8"),
    ("int8", "h100", "w8a16"), ("INT4 AWQ", "a100-80gb", "w4a16"),
    # dtype names as PyTorch / vLLM flags and ModelOpt write them, and bare quantization methods
    ("bfloat16", "h200", "bf16"), ("float16", "a100-80gb", "fp16"), ("float8_e4m3fn", "h200", "fp8"),
    ("e4m3", "b200", "fp8"), ("AWQ", "h100", "w4a16"), ("GPTQ", "a100-80gb", "w4a16"), ("GPTQ-Int8", "h100", "w8a16"),
])
def test_weight_activation_labels(label, gpu, policy):
    from explorer.hardware import load_hardware
    from explorer.validate import precision_policy

    assert precision_policy(label, load_hardware(gpu), "llama-3.1-70b") == policy


def test_w8a8_without_fp8_tensor_cores_is_refused_with_the_label():
    from explorer.hardware import load_hardware
    from explorer.validate import precision_policy

    with pytest.raises(ValueError, match="'W8A8'"):
        precision_policy("W8A8", load_hardware("a100-80gb"), "llama-3.1-70b")


def test_an_unstated_mlperf_precision_takes_the_harness_narrowest_format_the_gpu_supports():
    from explorer.validate import _fill_unstated_precision

    def row(gpu, prec, framework):
        return {"id": f"{gpu}-{framework}", "model": "Llama-2-70B-chat", "gpu": gpu, "precision": prec,
                "metric": "output_tokens_per_s_system", "notes": f"framework: {framework} 10.2, CUDA 12.4"}

    rows = [row("H100", "FP8", "TensorRT"), row("B200", "FP4 weights, FP8 KV cache", "TensorRT"),
            row("L40S", "not stated", "TensorRT"), row("A100", "not stated", "TensorRT"),
            row("MI300X", "not stated", "LLMBoost")]
    out, filled = _fill_unstated_precision(rows)
    # L40S (Ada): FP8 tensor cores, no FP4 -> the harness's FP8; A100: neither -> left unstated
    assert out[2]["precision"] == "FP8" and "harness (tensorrt)" in filled[2]
    assert 3 not in filled and out[3]["precision"] == "not stated"
    assert 4 not in filled  # no other row of that harness
    assert rows[2]["precision"] == "not stated"  # the input rows are not modified


def test_an_unknown_informational_key_is_ignored_and_named(tmp_path):
    f = tmp_path / "m.yaml"
    f.write_text(yaml.safe_dump({"measurements": [_case(id="a", run_url="https://example.org/run/1")]}))
    c = validate(f)["cases"][0]
    assert c["supported"] and c["predicted"] > 0 and "ignored unknown key(s) ['run_url']" in c["note"]


@pytest.mark.parametrize("raw, outcome", [
    ({"concurency": 4}, "did you mean 'concurrency'"),
    ({"tok_s_gpu_derivd": 1, "tok_s_gpu": 2}, "did you mean 'tok_s_gpu_derived'"),
    ({"tok_s_gpu_derived": 1, "tok_s_gpu_p50": 2}, "ignored unknown key(s) ['tok_s_gpu_p50']"),  # another field
    ({"ttft_ms": 1, "ttft_ms_p99": 3}, "ignored unknown key(s) ['ttft_ms_p99']"),
    ({"concurrency": 4}, ""),
])
def test_extra_keys_typo_or_another_field(raw, outcome):
    from explorer.validate import extra_keys_note

    allowed = {"tok_s_gpu", "tok_s_gpu_derived", "concurrency", "ttft_ms", "tpot_ms"}
    if "did you mean" in outcome:
        with pytest.raises(ValueError, match=outcome.replace("(", r"\(")):
            extra_keys_note(raw, allowed)
    else:
        assert extra_keys_note(raw, allowed) == outcome


def test_predict_keeps_a_case_lists_rows_only_while_its_cases_are_unchanged():
    """predict builds the design rows of a case list once (validate._served_plan: calibration scores
    the same list hundreds of times with only the profiles changed) and reuses them while the same
    case objects come back in the same state.  A second call, a hardware override, and calls after
    a case's values are replaced, edited in place or its support withdrawn all give, bit for bit,
    what a fresh predict gives on copies."""
    import copy
    from dataclasses import replace as _replace

    from explorer import validate as V

    curves = [c for c in load_cases("validation/fronts.yaml") if c.hardware == "h200" and c.supported][:45]
    points = [c for c in load_cases(DEFAULT_MEASUREMENTS) if c.hardware == "h200" and c.supported
              and c.kind == "inference"][:4]
    assert all(c.saturated for c in points) and not any(c.saturated for c in curves)  # both row layouts
    cases = curves + points

    def fresh(cs, **kw):
        V._PLANS.clear()
        return predict(copy.deepcopy(cs), **kw)

    want = fresh(cases)
    assert np.isfinite(want).all()
    np.testing.assert_array_equal(predict(cases), want)
    plan = V._served_plan(cases)
    np.testing.assert_array_equal(predict(cases), want)
    assert V._served_plan(cases) is plan  # kept: same objects, same state

    hw = load_hardware("h200")
    slower = {"h200": _replace(hw, eta_memory=hw.eta_memory * 0.8)}
    got = predict(cases, hardware=slower)
    assert V._served_plan(cases) is plan  # a profile is no part of the plan
    assert (got[:len(curves)] != want[:len(curves)]).any()
    np.testing.assert_array_equal(got, fresh(cases, hardware=slower))

    cases[3].values = dict(cases[3].values, batch=2 * cases[3].values["batch"])  # replaced
    np.testing.assert_array_equal(predict(cases), fresh(cases))
    assert V._served_plan(cases) is not plan
    plan = V._served_plan(cases)
    cases[-1].values["isl"] = 2 * cases[-1].values["isl"]  # edited in place
    np.testing.assert_array_equal(predict(cases), fresh(cases))
    assert V._served_plan(cases) is not plan
    cases[0].supported = False  # withdrawn
    got = predict(cases)
    assert np.isnan(got[0])
    np.testing.assert_array_equal(got, fresh(cases))
