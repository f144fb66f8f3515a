"""A served step's GEMMs pay ``served_latency`` of the kernel benchmarks' fixed GEMM latency
(explorer/hardware.py ``Hardware.served_latency``); the kernel microbenchmarks keep paying all of it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from explorer.engine.hardware_columns import HardwareColumns
from explorer.hardware import HardwareTable, load_hardware
from explorer.precision import TENSOR_FORMATS


def _one_gemm(hw, m: float = 1.0, n: float = 7168.0, k: float = 2048.0) -> float:
    """Time of one memory-bound bf16 GEMM (m x n x k) through the serving simulator's GEMM runner."""
    table = HardwareTable((hw,))
    idx = np.zeros(1, dtype=np.int64)
    bf16 = np.full(1, TENSOR_FORMATS.index("bf16"))
    cols = HardwareColumns(table, idx, bf16, bf16)
    [g] = cols.run_gemms([(np.array([m]), np.array([n]), np.array([k]), 2.0, 2.0, 2.0, 1.0, None, False)])
    return float(g.time_s[0])


def test_served_gemm_pays_its_share_of_the_kernel_latency():
    base = replace(load_hardware("mi355x"), kernel_latency_s=20e-6, gemm_epilogue_exposed=0.0)
    full = _one_gemm(replace(base, served_latency=1.0))
    half = _one_gemm(replace(base, served_latency=0.5))
    # by hand: a 1 x 7168 x 2048 bf16 GEMM is memory-bound, its weights (29.4 MB) at hbm_bw * eta_memory,
    # plus the fixed latency: 20 us in full, 10 us at served_latency 0.5
    mem_s = (2.0 * 1 * 2048 + 2.0 * 2048 * 7168 + 2.0 * 1 * 7168) / (base.hbm_bw * base.eta_memory)
    assert full == pytest.approx(mem_s + 20e-6, rel=1e-6)
    assert half == pytest.approx(mem_s + 10e-6, rel=1e-6)
    assert base.served_gemm_latency_s == pytest.approx(20e-6 * base.served_latency)


def test_kernel_benchmarks_keep_the_whole_latency():
    from explorer.validate import parse_case, predict

    row = dict(id="g", source="test", model="GEMM", gpu="MI355X", metric="gemm_achieved_tflops", unit="TFLOPS",
               value=100.0, concurrency_or_batch="256x256x256", precision="BF16", num_gpus=1)
    case = parse_case(row, 0)
    hw = load_hardware("mi355x")
    [a] = predict([case], hardware={"mi355x": replace(hw, served_latency=1.0)})
    [b] = predict([case], hardware={"mi355x": replace(hw, served_latency=0.1)})
    assert case.supported, case.reason
    assert np.isfinite(a) and a == pytest.approx(b, rel=1e-12)


def test_file_bounds_are_checked(tmp_path):
    from explorer.errors import SpecError
    from explorer.hardware import _load_file

    text = load_hardware("mi355x").path
    src = open(text, encoding="utf-8").read()
    bad = src.replace("efficiency:\n", "efficiency:\n  served_latency: 1.5\n", 1)
    p = tmp_path / "mi355x.yaml"
    p.write_text(bad, encoding="utf-8")
    with pytest.raises(SpecError, match="served_latency"):
        _load_file(p)


def test_a_served_case_the_model_finds_out_of_memory_is_left_out_of_the_fit():
    """Llama-3.1-70B FP8 on one H100 does not fit (tests/test_simulator.py); on two it does: only the
    first is set aside by calibrate.out_of_memory_cases, with the simulator's reason code on the case."""
    from explorer.calibrate import OUT_OF_MEMORY, out_of_memory_cases
    from explorer.validate import Case

    def case(tp: int) -> Case:
        values = dict(model="llama-3.1-70b", precision="fp8", isl=1024, osl=1024, tp=tp, pp=1, ep=1, dp=1, batch=4,
                      runtime="vllm")
        return Case(f"tp{tp}:tok_s_gpu", "tok_s_gpu", "tok/s/gpu", 100.0, kind="curve", regime="curve",
                    hardware="h100", values=values, num_gpus=tp, curve=f"tp{tp}")

    one, two = case(1), case(2)
    assert out_of_memory_cases([one, two], load_hardware("h100")) == [one]
    assert one.model_reason == OUT_OF_MEMORY and two.model_reason == 0
