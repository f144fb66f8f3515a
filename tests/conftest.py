"""Shared fixtures: a hand-made hardware kind with round numbers, for known-answer tests."""

from __future__ import annotations

import subprocess

import pytest

from explorer.hardware import Hardware
from explorer.runtime import Runtime, RuntimeFit

#: A serving runtime with no host work, no CUDA-graph padding, prompts mixed into decode steps with
#: an unlimited token budget: the simulator's engine as DESIGN.md section 4 writes it.
TOY_RUNTIME = Runtime(name="toy-runtime", display_name="toy", aliases=(), mixed_prompts=True,
                      max_tokens_per_step=10**9, max_batch=10**6, reserve_full_kv=True, graph_padding=False,
                      graph_step=1, graph_max_batch=1, prior=RuntimeFit(0.0, 0.0, 0.0, 1.0))

#: Round figures: 100 TFLOPS bf16, 1 TB/s, one SM, one 16x128 tile, no split-K, efficiencies 1,
#: no launch or step overhead, 100 GB of memory.  Tests override what they need.
TOY_DEFAULTS = dict(
    name="toy",
    display_name="Toy GPU",
    arch="toy",
    peak_flops={"bf16": 100e12},
    sms=1,
    gemm_tiles=((16, 128),),
    max_split_k=1,
    hbm_bytes=100e9,
    hbm_bw=1e12,
    usable_fraction=1.0,
    reserved_bytes=0.0,
    scaleup_bw=100e9,
    scaleup_domain=8,
    scaleup_latency_s=1e-6,
    scaleout_bw=10e9,
    scaleout_latency_s=5e-6,
    kernel_launch_s=0.0,
    step_overhead_s=0.0,
    per_sequence_s=0.0,
    eta_compute=1.0,
    eta_memory=1.0,
    eta_network=1.0,
    eta_moe=1.0,
    efficiency_kind="assumption",
)


def make_toy_hardware(**overrides) -> Hardware:
    return Hardware(**{**TOY_DEFAULTS, **overrides})


@pytest.fixture(scope="session")
def toy_hardware():
    """Factory: ``toy_hardware(sms=4, ...)`` -> a :class:`Hardware` built from :data:`TOY_DEFAULTS`."""
    return make_toy_hardware


@pytest.fixture(scope="session")
def toy_runtime():
    return TOY_RUNTIME


def stop_process(proc: subprocess.Popen, timeout_s: float = 20.0) -> None:
    """Terminate a service a test started (kill it when it does not exit in ``timeout_s``)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(params=["numpy", "numba"])
def gemm_path(request, monkeypatch):
    """Both GEMM code paths: numpy's :func:`explorer.costs.gemm.gemm_cost` (the reference) and the
    compiled kernel (skipped where numba is not installed)."""
    from explorer.costs.gemm import fast_path_available

    if request.param == "numpy":
        monkeypatch.setenv("EXPLORER_NUMBA", "0")
    else:
        monkeypatch.delenv("EXPLORER_NUMBA", raising=False)
        if not fast_path_available():
            pytest.skip("numba not installed: the compiled GEMM path is off")
    return request.param
