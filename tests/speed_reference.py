"""Tables and columns of the frozen simulator reference (tests/data/speed_reference.npz), shared by
tests/test_speed_equivalence.py and its generator (``python3 tests/speed_reference.py`` rewrites the
file: only do that on purpose, when a formula changes; hardware and runtime figures come from the
frozen copies in tests/data/reference_specs, so recalibrating the shipped files does not move it).  The reference was computed before the
speed-ups of issue 12 item 1, so every later code path must reproduce it.  Regenerated on purpose
(numpy path, ``EXPLORER_NUMBA=0 EXPLORER_REUSE=0``) when formulas changed: 2026-12-01, a prompt
longer than the step budget pays its partial last chunk, not a full one, and its long-prompt chunk
steps enter the TTFT percentiles (explorer/engine/engine_step.py ``own_steps``, explorer/open_loop.py
``isl_per_budget``, the busy-period factor of the TPOT spread); the speed-ups of that day (GEMM reuse between passes) were checked against the
previous reference first.  Regenerated on purpose 2026-12-02: a runtime on a kind without its own fit
takes its fits on the kind's family, else vendor (explorer/runtime.py ``Runtime.fit_for``; before,
every kind's) -- checked first that only rows of (runtime, kind) pairs without a fit in the frozen
files moved (7,810 of 20,000 random rows, 1,260 of 3,000 runtime rows, 581 of 1,500 speculative,
none elsewhere); and the frozen runtime copies gained their ``collectives`` section (the runtimes'
own all-reduce kernels, explorer/costs/comm.py ``custom_allreduce_s``) and the PCIe kinds'
``peer_allreduce: false``, so the reference covers that path too.  Regenerated on purpose 2026-12-02
(later): a design whose memory holds no sequence is scored as if one fit (explorer/simulate.py
``b_cap``; before, a zero cap gave TTFTs of 1e14 ms and $1e10 per million tokens) -- checked first
that only infeasible rows moved (475 of 20,000 random, 81 of 3,000 runtime, 30 of 1,500 open-loop,
40 of 1,500 speculative, 315 of 600 MTP rows; no feasible row).  Regenerated on purpose 2026-12-06: an MLA layer launches 3 more
kernels (explorer/engine/constants.py ``MLA_EXTRA_KERNELS``), which moves every row with MLA shapes.  Regenerated on purpose 2026-12-07 (sixth session): a prefill-only row (OSL <= 1) counts the prompts
arriving per step over its prompt step ``T_full``, not the idle decode step its closed loop reports
as TPOT (explorer/simulate.py ``n_pf``; before, the mixed steps' prompt-rate cap shrank every pass and
2x HBM bandwidth read 3 % lower throughput) -- checked first that only rows with OSL <= 1 moved (3 of
20,000 random rows, +3 % to +38 % tokens/s/GPU; 2 of 1,500 open-loop rows, TTFT 1e-4 on the feasible
one; none of the runtime, speculative or MTP rows beyond the MTP row's known 3.8e-9 percentile
difference), and that ``benchmarks/cross_validate.py``'s ``model_digest`` is unchanged (the validation
cases with OSL <= 1 predict the same figures)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from explorer.design import build_design  # noqa: E402
from explorer.simulate import COMPONENTS, PERCENTILE_COLUMNS, simulate  # noqa: E402

REFERENCE = Path(__file__).resolve().parent / "data" / "speed_reference.npz"
COLUMNS = ("tokens_per_s_per_gpu", "tokens_per_s_per_user", "ttft_s", "tpot_s", "memory_bytes_per_gpu", "feasible",
           "reason_code", "decode_batch") + tuple(f"t_{k}_s" for k in COMPONENTS) + PERCENTILE_COLUMNS
RUNTIMES = ("trtllm", "vllm", "sglang", "gpt-fast", "mlperf")


def tables() -> dict[str, dict]:
    """Named build_design value tables: the invariant sweep's distribution (closed loop, default
    runtime), the same with every runtime, open-loop rows and speculative decoding."""
    from test_invariants import random_designs as _random

    from explorer.hardware import hardware_files

    # the kinds of the frozen copies (in list_hardware's order), so that a new hardware file does not
    # change the reference's random draw
    frozen = tuple(p.stem for p in hardware_files(SPECS / "hardware"))

    def random_designs(rng, n):
        return _random(rng, n, hw_names=frozen)

    out = {"random": random_designs(np.random.default_rng(20240601), 20_000)}
    rng = np.random.default_rng(7)
    v = random_designs(rng, 3_000)
    v["runtime"] = rng.choice(RUNTIMES, 3_000)
    out["runtimes"] = v
    v = random_designs(rng, 1_500)
    v["runtime"] = rng.choice(RUNTIMES, 1_500)
    v["request_rate"] = rng.uniform(0.05, 20.0, 1_500)
    out["open"] = v
    v = random_designs(rng, 1_500)
    v["draft_tokens"] = rng.integers(0, 5, 1_500)
    v["acceptance"] = rng.uniform(0.3, 0.9, 1_500)
    v["draft_model"] = "llama-3.1-8b"
    out["spec"] = v
    n = 600  # MTP drafting on a preset with an MTP module
    out["mtp"] = dict(model="deepseek-v3", hardware=rng.choice(["h200", "b200"], n), precision="fp8",
                      batch=rng.integers(1, 1025, n), isl=rng.integers(1, 8193, n), osl=rng.integers(1, 4097, n),
                      tp=rng.choice([1, 2, 4, 8], n), dp=rng.choice([1, 2], n), ep=rng.choice([1, 2, 4, 8], n),
                      pp=rng.choice([1, 2], n), draft_tokens=rng.integers(0, 4, n),
                      acceptance=rng.uniform(0.3, 0.9, n), latency_percentiles=1)
    return {k: _frozen_specs(v) for k, v in out.items()}


#: Copies of hardware/*.yaml and runtimes/*.yaml as they were when the reference was computed: the
#: reference tests the code, so a later `explorer calibrate --write` must not move it.
SPECS = Path(__file__).resolve().parent / "data" / "reference_specs"


def _frozen_specs(values: dict) -> dict:
    """``values`` with hardware and runtime names replaced by the frozen copies' objects."""
    from explorer.hardware import _load_file as load_hw
    from explorer.runtime import _load_file as load_rt

    n = max(np.size(x) for x in values.values())
    hw = np.broadcast_to(np.asarray(values["hardware"], dtype=object), (n,))
    kinds = {h: load_hw(SPECS / "hardware" / f"{h}.yaml") for h in set(hw.tolist())}
    rt = np.broadcast_to(np.asarray(values.get("runtime", "trtllm"), dtype=object), (n,))
    rts = {r: load_rt(SPECS / "runtimes" / f"{r}.yaml") for r in set(rt.tolist())}
    return dict(values, hardware=np.array([kinds[h] for h in hw], dtype=object),
                runtime=np.array([rts[r] for r in rt], dtype=object))


def compute(detail: bool = True) -> dict[str, np.ndarray]:
    res = {}
    for name, values in tables().items():
        design, table = build_design(values, "reference")
        r = simulate(design, table, detail=detail)
        for k in COLUMNS:
            res[f"{name}/{k}"] = np.asarray(r[k])
    return res


if __name__ == "__main__":
    REFERENCE.parent.mkdir(exist_ok=True)
    np.savez_compressed(REFERENCE, **compute())
    print(REFERENCE, REFERENCE.stat().st_size)
