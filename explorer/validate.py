"""Validation against published measurements (DESIGN.md section 8).

Every case of a measurements YAML (the shape of ``validation/measurements.yaml``) is mapped to a
design point or a kernel, predicted with the same simulator, converted to the case's own unit and
compared: ``error = predicted / measured - 1``.  Cases the model cannot represent are listed with
the reason and counted; none is dropped silently.

Mapping rules (each one a documented assumption):

* ``tp: null`` with ``ep: n`` is TensorRT-LLM's "DEPn": attention data-parallel ``n`` and expert
  parallel ``n`` (``t=1, dp=n, e=n``).  A dense model with ``tp`` given uses ``t=tp``.
* ``max (saturated)`` is the highest-throughput feasible concurrency over a geometric grid
  (ratio 2^(1/4)); the runtime caps the running batch (KV cache, maximum running requests) and
  queues the rest.
* Rows are served by a runtime profile (explorer/runtime.py): gpt-fast rows by ``gpt-fast``, every
  other row by ``trtllm``; they are offline engine benchmarks, so no per-request server overhead.
* ``output_throughput_total`` / ``output_throughput`` are per TP group: divided by ``num_gpus``.
* ``osl: null`` (gpt-fast) means its default of 200 generated tokens.
* Precision labels map to policies: NVFP4 -> fp4 (FP8 KV), FP8 -> fp8, "FP4 (MXFP4 MoE weights)"
  -> fp4 on Blackwell, INT8/INT4 weight-only -> w8a16/w4a16, BF16/FP16 as is.  gpt-oss (an MXFP4-only
  checkpoint) on GPUs without FP4 tensor cores -> ``mxfp4-w4a16`` (weights dequantized to bf16),
  whatever the run's label.  Mixed recipes
  (NVFP4 MoE with BF16 attention) use fp4 for all weights: optimistic for attention weights.
* GEMM and NCCL all-reduce rows are rewritten as kernels.yaml rows and scored by
  :mod:`explorer.kernel_cases` (the same cost functions the serving simulator calls: GEMM with
  latency and exposed epilogue, NCCL algorithms x protocols); STREAM triad is the achievable
  bandwidth ``hbm_bw * eta_memory``.  Message sizes use decimal units (1M = 1e6 bytes).
* Speculative decoding (MTP) rows carry ``draft_tokens`` and the published acceptance, as
  ``acceptance`` (per position) or ``acceptance_length`` (mean tokens per step, accepted drafts +
  1), with ``acceptance_source``; the draft is the model's own MTP module (explorer/speculative.py).
  A row naming MTP without them is unsupported.
* Files of the two other shapes: serving curves (:mod:`explorer.curves`) and kernel
  microbenchmarks (:mod:`explorer.kernel_cases`).
"""

from __future__ import annotations

import difflib
import functools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from explorer import speculative
from explorer.closed_loop import finite_run_throughput_factor, start_burst_ttft_s
from explorer.costs.gemm import fast_path_available
from explorer.design import build_design
from explorer.errors import ExplorerError, SpecError
from explorer.hardware import Hardware, load_hardware
from explorer.model import get_preset
from explorer.precision import TENSOR_FORMATS, tensor_format_in
from explorer.runtime import DEFAULT_RUNTIME, Runtime, RuntimeFit, load_runtime
from explorer.simulate import MAX_BATCH_GRID, simulate
from explorer.specio import read_yaml

if TYPE_CHECKING:
    from explorer.systems import SystemRequest

DEFAULT_MEASUREMENTS = Path(__file__).resolve().parent.parent / "validation" / "measurements.yaml"
#: MLPerf dataset length statistics (validation/mlperf_datasets.yaml, sourced there): the mean
#: input/output tokens of a benchmark's dataset stand in when a system row leaves isl/osl unstated
MLPERF_DATASETS = DEFAULT_MEASUREMENTS.parent / "mlperf_datasets.yaml"
#: model preset -> MLPerf dataset key of that file
MLPERF_DATASET_OF = {"mixtral-8x7b": "mixtral-8x7b", "llama-3.1-8b": "llama3.1-8b", "llama-2-70b": "llama2-70b",
                     "llama-3.1-405b": "llama3.1-405b"}


def _mlperf_datasets() -> dict[str, Any]:
    """The datasets of validation/mlperf_datasets.yaml (read once per file version: a validation
    file asks for every row)."""
    if not MLPERF_DATASETS.exists():
        return {}
    st = MLPERF_DATASETS.stat()
    return _read_datasets(str(MLPERF_DATASETS), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=4)
def _read_datasets(path: str, mtime_ns: int, size: int) -> dict[str, Any]:
    return dict(read_yaml(path).get("datasets") or {})


def mlperf_dataset_cv(model: str) -> tuple[float, float] | None:
    """Coefficients of variation (input, output) of the preset's MLPerf dataset lengths, if known."""
    key = MLPERF_DATASET_OF.get(model)
    if key is None:
        return None
    ds = _mlperf_datasets().get(key) or {}
    if "cv_input" not in ds or "cv_output" not in ds:
        return None
    return float(ds["cv_input"]), float(ds["cv_output"])


def mlperf_dataset_lengths(model: str) -> tuple[float, float] | None:
    """(mean input, mean output) tokens of the MLPerf dataset the preset ``model`` is benchmarked on."""
    key = MLPERF_DATASET_OF.get(model)
    if key is None:
        return None
    ds = _mlperf_datasets().get(key)
    if not ds:
        return None
    return float(ds["mean_input_tokens"]), float(ds["mean_output_tokens"])
CASE_KEYS = {"id", "model", "gpu", "num_gpus", "tp", "pp", "ep", "precision", "isl", "osl",
             "concurrency_or_batch", "metric", "value", "unit", "source", "notes", "trust",
             "ttft_limit_ms", "tpot_limit_ms",
             # speculative decoding (explorer/speculative.py): K, and the per-position acceptance
             # (a number or one per position) or the published acceptance length, with its source
             "draft_tokens", "acceptance", "acceptance_length", "acceptance_source",
             # attention_achieved_tflops rows (a FlashAttention-style kernel) and node figures
             "batch", "seqlen", "heads", "kv_heads", "head_dim", "causal", "library", "gpus_per_node"}
#: GPUs per node for ``output_tokens_per_s_per_node`` when a row does not say (HGX/DGX: 8)
DEFAULT_GPUS_PER_NODE = 8
#: Case values of speculative decoding; rows without them are scored with ``draft_tokens = 0``.
SPEC_VALUES = {"draft_tokens": 0, "acceptance": 0.0}
#: Other optional design values, with the value rows without them take (``disagg`` 2 = the decode
#: pool of a disaggregated deployment)
OPTIONAL_VALUES = {"disagg": 0.0, "isl_cv": 0.0, "osl_cv": 0.0, "request_rate": 0.0, "batch_wait_iters": 0.0,
                   "batch_wait_ratio": 0.0, "latency_percentiles": 0.0, "num_requests": 0.0, "poll_interval": 1.0,
                   "max_num_tokens": 0.0, "allreduce_fusion": 0.0}
#: MLPerf scenarios (mlperf.yaml): Offline = saturated; Server/Interactive = Poisson arrivals at the
#: highest rate whose p99 TTFT/TPOT meet the row's limits (explorer/sla.py)
MLPERF_SCENARIOS = ("offline", "server", "interactive")
MLPERF_RUNTIME = "mlperf"
#: The runtime profile of the offline TensorRT-LLM engine benchmarks in measurements.yaml
#: (trtllm-bench throughput / gptManagerBenchmark: no HTTP server, no serving front end).
BENCH_RUNTIME = "trtllm-bench"

GPTFAST_DEFAULT_OSL = 200  # gpt-fast generate.py --max_new_tokens default
#: Requests per run of TensorRT-LLM's performance overview (trtllm-bench throughput on a synthetic
#: dataset of fixed lengths, every request queued at once: a finite run, explorer/offline_run.py),
#: by the overview's document path and (ISL, OSL), as each version's "$num_requests" table lists
#: them: NVIDIA/TensorRT-LLM@00f37686aa854010d68bcbd0f4ab000221541ca6:docs/source/performance/perf-overview.md
#: and @03e27c7d5ff0c6e89f8328838c0a8e64f1b34f9d:docs/source/developer-guide/perf-overview.md (its
#: 1000/1000 rows: the 1024/1024 count, the only one of that length class it lists).
PERF_OVERVIEW_REQUESTS: dict[str, dict[tuple[int, int], int]] = {
    "docs/source/performance/perf-overview.md": {
        (128, 128): 30000, (128, 2048): 3000, (128, 4096): 1500, (1000, 2000): 1500, (2048, 128): 3000,
        (2048, 2048): 1500, (5000, 500): 1500, (1000, 1000): 3000, (500, 2000): 3000, (20000, 2000): 1000},
    "docs/source/developer-guide/perf-overview.md": {
        (1024, 1024): 3000, (1000, 1000): 3000, (8192, 1024): 1500, (1024, 8192): 1500, (32768, 1024): 1000,
        (1024, 32768): 1000},
}


def perf_overview_requests(raw: dict[str, Any], isl: int, osl: int) -> int:
    """Requests of the overview run a measurement row cites (0: not an overview row, or lengths
    its table does not list)."""
    src = str(raw.get("source") or "") + " " + str(raw.get("notes") or "")
    for doc, table in PERF_OVERVIEW_REQUESTS.items():
        if doc in src:
            return table.get((isl, osl), 0)
    return 0

INFERENCE_METRICS = {
    "output_throughput_per_gpu": ("tokens_per_s_per_gpu", {"tok/s/gpu"}),
    "output_tokens_per_s_per_gpu": ("tokens_per_s_per_gpu", {"tok/s/gpu"}),
    "output_throughput_total": ("tokens_per_s_total", {"tok/s"}),
    "output_throughput": ("tokens_per_s_total", {"tok/s"}),
    "decode_tokens_per_s_per_user": ("tokens_per_s_per_user", {"tok/s/user"}),
    "first_token_latency": ("ttft_ms", {"ms"}),
    "output_tokens_per_s_system": ("tokens_per_s_total", {"tok/s (whole system)", "tok/s"}),
    "output_tokens_per_s_per_node": ("tokens_per_s_per_node", {"tok/s/node", "tok/s per node", "tok/s"}),
    "inter_token_latency": ("tpot_ms", {"ms"}),
}
KERNEL_METRICS = {
    "gemm_achieved_tflops": {"tflops"},
    "attention_achieved_tflops": {"tflops"},
    "hbm_achieved_bandwidth": {"tb/s"},
    "nccl_allreduce_busbw": {"gb/s"},
}


@dataclass
class Case:
    id: str
    metric: str
    unit: str
    measured: float
    kind: str = "inference"  # inference | gemm | hbm | allreduce
    regime: str = ""
    supported: bool = True
    reason: str = ""
    hardware: str = ""
    values: dict[str, Any] = field(default_factory=dict)  # design values (inference) or kernel args
    saturated: bool = False
    num_gpus: int = 1
    trust: str = ""
    chosen_batch: int | None = None  # set by predict() for 'max' cases
    model_reason: int = 0  # set by predict(): the simulator's reason code where it finds the design infeasible
    note: str = ""
    curve: str = ""  # the measured curve a case belongs to (cross-validation leaves whole curves out)
    family: str = ""  # dense | moe
    runtime: str = ""  # serving-runtime profile (explorer/runtime.py)
    parent: str = ""  # a latency case's throughput row (explorer/mlperf_latency.py)
    rate_per_system: float = 0.0  # a latency case's measured requests/s over the whole system
    column: str = ""  # a latency case's simulator column (seconds), reported in ms


def precision_policy(label: Any, hw: Hardware, model: str = "") -> str:
    """Precision policy for a measured run's precision label (mapping rules in the module docstring)."""
    s = str(label).lower()
    if model.startswith("gpt-oss") and not hw.supports("fp4"):
        # gpt-oss ships only as an MXFP4 checkpoint; without FP4 tensor cores (Hopper) its MoE
        # weights are dequantized in the GEMM, whatever the run's label ("FP8 (as labeled)")
        return "mxfp4-w4a16"
    m = re.search(r"\bw(4|8)a(4|8|16)\b", s)  # weight/activation bit widths (vLLM / llm-compressor labels)
    if m:
        wa = m.group(0)
        if wa in ("w4a16", "w8a16", "w4a8"):
            return wa
        if wa == "w8a8" and hw.supports("fp8"):
            # INT8 or FP8 W8A8: one byte per weight and activation, and on every GPU with FP8
            # tensor cores the dense INT8 and FP8 peaks are equal (H100/H200 1,979 TOPS = TFLOPS;
            # hardware_specs.yaml), so both run as fp8 here (assumption: the INT8 kernels reach the
            # FP8 kernels' efficiency)
            return "fp8"
        if wa == "w4a4":
            return "fp4"
        raise ValueError(f"precision '{label}': {wa} needs tensor cores this GPU's file does not list")
    if "int4" in s or re.search(r"\b(awq|gptq)\b", s) and "int8" not in s and "8bit" not in s and "8-bit" not in s:
        # AWQ and GPTQ checkpoints are 4-bit weight-only unless they say otherwise (AutoAWQ is 4-bit
        # only; GPTQ's 8-bit variants are labelled Int8 / 8bit)
        return "w4a16"
    if "int8" in s:
        return "w8a16"
    fmt = tensor_format_in(s)  # NVFP4, MXFP4, "FP4 (MXFP4 MoE weights)" -> fp4; FP8 -> fp8; ...
    if fmt is None:
        raise ValueError(f"unrecognised precision '{label}'")
    return fmt


#: Words of a GPU label that do not change which part it is (memory size, form factor, rack and
#: system names, vendor words): dropped when the label as written names no hardware file.  Words
#: that do name another part -- PCIe, NVL (the H100 / H200 NVL boards) -- are kept, so such a label
#: stays unknown unless a file (or an alias) has it.
_GPU_LABEL_NOISE = re.compile(r"^(\d+gi?b|sxm\d?|hbm\d?e?|nvl\d+|hgx|dgx|server|edition|gpu|nvidia|amd|instinct|"
                              r"tensor|core|blackwell|hopper|ampere)$")


def gpu_hardware(label: Any) -> Hardware:
    """Hardware kind of a measured run's GPU label: parenthesised remarks dropped, then the label as
    written, with its words joined by hyphens (``GB200 NVL72`` -> the alias ``gb200-nvl72``), and
    without the words of :data:`_GPU_LABEL_NOISE` (``NVIDIA H100 80GB HBM3`` -> ``h100``).  An
    unknown part raises the SpecError of the label as written."""
    name = re.sub(r"\(.*?\)", "", str(label)).strip(" -_").lower()
    try:
        return load_hardware(name)
    except SpecError as e:
        first = e
    words = re.split(r"[\s_-]+", name)
    kept = [w for w in words if not _GPU_LABEL_NOISE.match(w)]
    sizes = [float(m.group(1)) for w in words if (m := re.fullmatch(r"(\d+)gi?b", w))]
    for candidate in ("-".join(words), "-".join(kept)):
        if candidate and candidate != name:
            try:
                hw = load_hardware(candidate)
            except SpecError:
                continue
            # a stated memory size must be the kind's (an A100 40GB is not the 80 GB file)
            if all(abs(sz * 1e9 / hw.hbm_bytes - 1.0) < 0.15 or abs(sz * 2**30 / hw.hbm_bytes - 1.0) < 0.15
                   for sz in sizes):
                return hw
    raise first


def _size_bytes(text: object) -> float:
    m = re.fullmatch(r"\s*([\d.]+)\s*([KMGT]?)\s*B?\s*", str(text), re.I)
    if not m:
        raise ValueError(f"cannot read message size '{text}'")
    return float(m.group(1)) * {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[m.group(2).upper()]


def positive_number(raw: dict, key: str, required: bool = True) -> float | None:
    """A positive finite number from a row, or ValueError naming the key and the value."""
    v = raw.get(key)
    if v is None:
        if required:
            raise ValueError(f"'{key}' is missing")
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
        raise ValueError(f"'{key}' must be a positive finite number, got {v!r}")
    return float(v)


def whole_number(raw: dict, key: str, default: int | None = None, minimum: int = 1) -> int:
    """A whole number >= ``minimum`` from a row (``default`` when absent), or ValueError."""
    v = raw.get(key, default)
    if v is None:
        if default is None:
            raise ValueError(f"'{key}' is missing")
        v = default
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v != int(v) or v < minimum:
        raise ValueError(f"'{key}' must be a whole number >= {minimum}, got {v!r}")
    if abs(v) > 2 ** 53:
        raise ValueError(f"'{key}' is too large to represent, got {v!r}")
    return int(v)


def _kernel_row(raw: dict, metric: str, conc: Any, cid: str) -> dict | None:
    """A measurements.yaml GEMM or all-reduce row in the shape of a kernels.yaml row (so it is
    scored by explorer.kernel_cases' cost functions, like every kernel row)."""
    gpu_class = gpu_hardware(raw.get("gpu")).name.split("-")[0].upper()  # a100-80gb -> A100, h200 -> H200
    base = {"id": cid, "gpu": raw.get("gpu"), "gpu_class": gpu_class,
            "num_gpus": raw.get("num_gpus") or 1, "value": raw.get("value"), "source": raw.get("source", ""),
            "trust": raw.get("trust", "high"), "library": "cuBLASLt" if metric == "gemm_achieved_tflops" else "NCCL"}
    if metric == "gemm_achieved_tflops":
        parts = str(conc).lower().split("x")
        if len(parts) != 3 or not all(x.strip().isdigit() and int(x) > 0 for x in parts):
            raise ValueError(f"GEMM shape must be MxNxK with positive whole sizes, got '{conc}'")
        m, n, k = (int(x) for x in parts)
        return {**base, "kind": "gemm", "dtype": str(raw.get("precision") or "bf16").lower(), "m": m, "n": n, "k": k,
                "metric": "achieved_tflops"}
    if metric == "nccl_allreduce_busbw":
        size = _size_bytes(conc)
        if not math.isfinite(size) or size <= 0:
            raise ValueError(f"message size must be positive, got '{conc}'")
        return {**base, "kind": "allreduce", "dtype": "bf16", "message_bytes": int(size),
                "num_gpus": whole_number(raw, "num_gpus", 8, minimum=2), "metric": "busbw_GB_s"}
    if metric == "attention_achieved_tflops":
        # FlashAttention-style forward: batch, seqlen, heads, head_dim (, kv_heads, causal) as keys,
        # or concurrency_or_batch 'BxSxHxD'; scored by explorer.kernel_cases like kernels.yaml rows
        dims = {k: raw.get(k) for k in ("batch", "seqlen", "heads", "head_dim")}
        if any(v is None for v in dims.values()):
            parts = str(conc).lower().split("x")
            if len(parts) != 4 or not all(x.strip().isdigit() and int(x) > 0 for x in parts):
                raise ValueError("attention rows need batch, seqlen, heads, head_dim (keys, or concurrency_or_batch "
                                 f"'BxSxHxD'), got '{conc}'")
            dims = dict(zip(("batch", "seqlen", "heads", "head_dim"), (int(x) for x in parts), strict=True))
        causal = raw.get("causal")
        if causal is None:
            notes = str(raw.get("notes", "")).lower()
            causal = "causal" in notes and "non-causal" not in notes and "without causal" not in notes
        row = {**base, "kind": "attention_fwd", "dtype": str(raw.get("precision") or "bf16"), **dims,
               "causal": causal, "metric": "achieved_tflops", "library": raw.get("library") or ""}
        if raw.get("kv_heads") is not None:
            row["kv_heads"] = raw["kv_heads"]
        return row
    return None


def _runtime_of(cid: str, raw: dict) -> str:
    """Serving runtime of a measurements.yaml row: gpt-fast rows by id or source, vLLM / SGLang by
    id, and otherwise TensorRT-LLM's offline engine benchmark (``trtllm-bench``: every other
    inference row in the file comes from trtllm-bench or gptManagerBenchmark runs).  The benchmark
    has its own profile (runtimes/trtllm-bench.yaml: the same engine mechanisms as ``trtllm``, its
    own fitted residuals), so the served curves' fit (trtllm-serve) and the offline points' fit stop
    pulling one set of residuals two ways (measured: docs/validation_notes.md)."""
    text = f"{cid} {raw.get('source', '')}".lower()
    if "gptfast" in text or "gpt-fast" in text:
        return "gpt-fast"
    if "vllm" in cid.lower():
        return "vllm"
    if "sglang" in cid.lower():
        return "sglang"
    return BENCH_RUNTIME


def extra_keys_note(raw: dict, allowed: set[str]) -> str:
    """A row's keys beyond ``allowed``: one that looks like a misspelt known key the row lacks
    ('concurency') raises ValueError naming both -- a typo must not silently drop a figure; the
    others (a field the file's authors added: a run URL, a p99) are ignored and named in the
    returned note ('' when there are none)."""
    extra = sorted(str(k) for k in set(raw) - allowed)
    for k in extra:
        # a typo: nearly the same letters and length ('concurency'); a longer name that merely starts
        # like a known one ('tok_s_gpu_p50') is another field
        close = [c for c in difflib.get_close_matches(k.lower(), sorted(allowed), n=3, cutoff=0.8)
                 if abs(len(c) - len(k)) <= 2]
        if close and close[0] not in raw:
            raise ValueError(f"unknown key '{k}' (did you mean '{close[0]}'?)")
    return f"ignored unknown key(s) {extra}" if extra else ""


def _with_note(case: Case, note: str) -> Case:
    if note and case.supported:
        case.note = f"{case.note}; {note}" if case.note else note
    return case


def parse_case(raw: Any, index: int) -> Case:
    """One measurements-file row as a :class:`Case` (unsupported, with the reason, when it cannot
    be read); keys the file's schema does not know are handled by :func:`extra_keys_note`."""
    if not isinstance(raw, dict):
        return _parse_case(raw, index)
    try:
        note = extra_keys_note(raw, CASE_KEYS)
    except ValueError as e:
        cid = str(raw.get("id") or f"#{index}")
        return Case(cid, str(raw.get("metric")), str(raw.get("unit")), float("nan"), trust=str(raw.get("trust", "")),
                    supported=False, reason=str(e))
    return _with_note(_parse_case({k: v for k, v in raw.items() if k in CASE_KEYS}, index), note)


def _parse_case(raw: Any, index: int) -> Case:
    """Map one raw entry to a :class:`Case`; problems become ``supported=False`` with a reason."""
    if not isinstance(raw, dict):
        return Case(f"#{index}", "?", "?", float("nan"), supported=False, reason=f"entry is not a mapping: {raw!r}")
    cid = str(raw.get("id") or f"#{index}")
    metric = str(raw.get("metric"))
    unit = str(raw.get("unit"))
    case = Case(cid, metric, unit, float("nan"), trust=str(raw.get("trust", "")))
    try:
        value = raw.get("value")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"value must be a positive number, got {value!r}")
        case.measured = float(value)
        hw = gpu_hardware(raw.get("gpu"))
        case.hardware = hw.name
        conc = raw.get("concurrency_or_batch")
        if metric in KERNEL_METRICS:
            if unit.lower() not in KERNEL_METRICS[metric]:
                raise ValueError(f"unit '{unit}' does not fit metric {metric}")
            as_kernel = _kernel_row(raw, metric, conc, cid)
            if as_kernel is not None:  # GEMM and all-reduce rows: the kernels.yaml cost path (one formula)
                from explorer import kernel_cases

                k = kernel_cases.parse_kernel_rows([as_kernel], "measurements")[0]
                k.regime = {"gemm_achieved_tflops": "kernel_gemm", "attention_achieved_tflops": "kernel_attention_fwd"
                            }.get(metric, "kernel_allreduce")
                k.trust = case.trust
                return k
            case.kind, case.regime = "hbm", "kernel_hbm"  # the one kernel metric left: STREAM triad
            return case
        if metric not in INFERENCE_METRICS:
            raise ValueError(f"unknown metric '{metric}'; known: {sorted(INFERENCE_METRICS) + sorted(KERNEL_METRICS)}")
        if unit.lower() not in INFERENCE_METRICS[metric][1]:
            raise ValueError(f"unit '{unit}' does not fit metric {metric}")
        preset = get_preset(str(raw.get("model")), cid, "model")
        prec = precision_policy(raw.get("precision"), hw, preset.shape.name)
        notes = str(raw.get("notes", "")).lower()
        mtp_named = bool(re.search(r"(?<!no)mtp", cid.lower()) or ("mtp" in notes and "without mtp" not in notes))
        spec = _speculation(raw, mtp_named)
        system_row = metric == "output_tokens_per_s_system"
        if system_row and raw.get("isl") is None:
            lengths = mlperf_dataset_lengths(preset.shape.name)
            if lengths is not None:  # the benchmark dataset's mean lengths (validation/mlperf_datasets.yaml)
                raw = dict(raw, isl=int(round(lengths[0])), osl=raw.get("osl") or int(round(lengths[1])))
                case.note = f"isl not stated: the MLPerf dataset's mean input {lengths[0]:g} tokens"
        if raw.get("isl") is None:
            raise ValueError("workload not stated (isl missing)")
        isl = whole_number(raw, "isl")
        if raw.get("osl") is None and metric != "decode_tokens_per_s_per_user":
            raise ValueError("workload not stated (osl missing)")
        osl = whole_number(raw, "osl", GPTFAST_DEFAULT_OSL)
        n_gpus = whole_number(raw, "num_gpus", 1)
        ep = whole_number(raw, "ep") if raw.get("ep") is not None else None
        pp = whole_number(raw, "pp", 1)
        experts = preset.shape.experts
        if raw.get("tp") is None and ep:
            t, dp, e = 1, ep, ep
        else:
            t = whole_number(raw, "tp", 1)
            dp = 1
            e = ep if (ep and experts) else 1
        case.num_gpus = n_gpus
        if t * dp * pp != n_gpus and not system_row:
            raise ValueError(f"tp*dp*pp = {t * dp * pp} does not match num_gpus = {n_gpus}")
        if system_row and n_gpus % (t * dp * pp) != 0:
            raise ValueError(f"tp*dp*pp = {t * dp * pp} does not divide num_gpus = {n_gpus}")
        case.runtime = _runtime_of(cid, raw)
        case.family = "moe" if experts else "dense"
        # every inference row of measurements.yaml is an offline engine benchmark (trtllm-bench,
        # gptManagerBenchmark, gpt-fast): no HTTP server, so no per-request serving overhead
        case.values = {"model": preset.shape.name, "precision": prec, "isl": isl, "osl": osl,
                       "tp": t, "pp": pp, "ep": e, "dp": dp, "runtime": case.runtime, "serverless": True}
        case.values.update(spec)
        n_req = perf_overview_requests(raw, isl, osl)
        if n_req:  # a finite offline run of the overview (explorer/offline_run.py)
            case.values["num_requests"] = n_req
        if metric == "output_tokens_per_s_per_node":
            case.values["gpus_per_node"] = whole_number(raw, "gpus_per_node", DEFAULT_GPUS_PER_NODE)
            if "disaggregat" in str(raw.get("notes", "")).lower() or "disaggregat" in cid.lower():
                # a disaggregated deployment's decode nodes: their steps carry no prompts (explorer/disagg.py)
                case.values["disagg"] = 2.0
                case.note = "decode pool of a disaggregated deployment: no prompt work in its steps"
        scenario = conc.strip().lower() if isinstance(conc, str) else ""
        if scenario in MLPERF_SCENARIOS:
            case.kind, case.regime = "system", f"mlperf_{scenario}"
            # MLPerf submissions run their own tuned harness: its own runtime profile (runtimes/mlperf.yaml)
            case.runtime = case.values["runtime"] = MLPERF_RUNTIME
            cv = mlperf_dataset_cv(preset.shape.name)  # the dataset's length spread, for the p99s
            if cv is not None:
                case.values["isl_cv"], case.values["osl_cv"] = cv
            # LoadGen calls the harness in-process (no HTTP), but a token still travels from the
            # engine through the harness's response path before LoadGen stamps it: the mlperf
            # profile's per-request time, fitted on the runs' mean TTFT (explorer/mlperf_latency.py)
            case.values["serverless"] = False
            if scenario == "offline":
                case.saturated = True
            else:
                lim = {k: positive_number(raw, k) for k in ("ttft_limit_ms", "tpot_limit_ms")}
                case.values.update(lim)
            if raw.get("tp") is None and not ep:
                case.values["tp_open"] = True  # the best deployment the GPUs allow (explorer/systems.py)
            return case
        if isinstance(conc, str) and conc.strip().lower().startswith("max"):
            case.saturated = True
            case.regime = "saturated_throughput"
        elif isinstance(conc, int) and not isinstance(conc, bool) and 0 < conc <= 2 ** 53:
            case.values["batch"] = conc
            if metric == "first_token_latency":
                case.regime = "ttft"
            elif conc == 1:
                case.regime = "decode_latency"
            else:
                case.regime = "fixed_batch_throughput"
        else:
            raise ValueError(f"concurrency_or_batch '{conc}' is neither a batch nor 'max'")
        if metric == "first_token_latency":
            case.regime = "ttft"
        elif metric == "inter_token_latency":
            case.regime = "inter_token_latency"
        elif metric == "output_tokens_per_s_per_node":
            case.regime = "node_throughput"
        return case
    except (ValueError, TypeError, ExplorerError) as e:
        case.supported = False
        case.reason = str(e)
        return case


def _speculation(raw: dict, mtp_named: bool) -> dict[str, Any]:
    """Speculative-decoding values of a row (``draft_tokens`` with ``acceptance`` -- one number or
    one per position -- or ``acceptance_length``, the published mean tokens per step): the draft
    is the model's MTP module.  A per-position list or a length becomes the one per-position
    probability with the same expected tokens per step (all the simulator uses).  A row that names
    MTP without these fields cannot be scored."""
    if raw.get("draft_tokens") is None:
        if mtp_named:
            raise ValueError("needs speculative decoding (MTP): give the row's draft_tokens and acceptance "
                             "(per position) or acceptance_length (mean tokens per step), with acceptance_source")
        return {}
    k = whole_number(raw, "draft_tokens", minimum=0)
    acc, length = raw.get("acceptance"), raw.get("acceptance_length")
    if (acc is None) == (length is None):
        raise ValueError("give one of 'acceptance' (per position) and 'acceptance_length' with draft_tokens")
    if not str(raw.get("acceptance_source") or "").strip():
        raise ValueError("'acceptance_source' is missing: where the acceptance figure comes from")
    if length is not None:
        a = speculative.uniform_acceptance(float(positive_number(raw, "acceptance_length") or 0.0), k)
    else:
        probs = speculative.check_acceptance(acc, k, "acceptance", None, "draft_tokens")
        e = float(speculative.expected_tokens_per_step(np.asarray([probs]), k)[0])
        a = speculative.uniform_acceptance(e, k) if k else 0.0
    return {"draft_tokens": k, "acceptance": a}


def load_cases(path: str | Path = DEFAULT_MEASUREMENTS) -> list[Case]:
    """Read a validation file of any shipped shape: points (``measurements.yaml``: a
    ``measurements:`` list of metric rows), curves (``fronts.yaml``: ``curves:`` + ``rows:``),
    kernels (``kernels.yaml``: ``measurements:`` rows with a ``kind``) or MLPerf run latencies
    (``mlperf_latency.yaml``: ``meta:`` + ``rows:``, read with the system rows they refer to).  An unreadable file raises
    SpecError naming it; bad cases are kept, unsupported, with their reason."""
    from explorer.curves import curve_cases, is_curves_file

    data = read_yaml(path)
    if is_curves_file(data):
        cases = curve_cases(data, str(path))
    elif isinstance(data, dict) and isinstance(data.get("measurements"), list) and _kernel_rows(data):
        from explorer import kernel_cases

        cases = kernel_cases.parse_kernel_rows(data["measurements"], str(path))
    elif isinstance(data, dict) and isinstance(data.get("measurements"), list):
        rows, filled = _fill_unstated_precision(data["measurements"])
        cases = [parse_case(raw, i) for i, raw in enumerate(rows)]
        for i, note in filled.items():
            if cases[i].supported:
                cases[i].note = note
    elif isinstance(data, dict) and isinstance(data.get("rows"), list) and "meta" in data:
        # MLPerf runs' measured latencies (validation/mlperf_latency.yaml): their rows' cases + four each
        from explorer.mlperf_latency import latency_file_cases

        cases = latency_file_cases(data, Path(path))
    else:
        raise SpecError(str(path), "measurements", "expected a top-level 'measurements:' list (points or kernels), "
                                                   "'curves:' and 'rows:' lists (serving curves) or 'meta:' and "
                                                   "'rows:' (MLPerf run latencies)")
    return mark_duplicate_ids(cases)


def _fill_unstated_precision(rows: list[Any]) -> tuple[list[Any], dict[int, str]]:
    """MLPerf system rows whose precision is 'not stated' take the precision that every other row
    of the same model and GPU in the file states, when there is exactly one (an assumption: a
    submitter's harness keeps the format across rounds; such cases say so in their note).
    Else the narrowest format the same harness ran the same model in that the GPU supports
    (:func:`_harness_format`).  Returns the rows (copies where filled) and, per filled index, the
    note its case carries."""
    system = [isinstance(raw, dict) and raw.get("metric") == "output_tokens_per_s_system" for raw in rows]
    keys = [_model_gpu(raw) if sys_row else ("", "") for raw, sys_row in zip(rows, system, strict=True)]
    stated: dict[tuple[str, str], set[str]] = {}
    for raw, sys_row, key in zip(rows, system, keys, strict=True):
        if sys_row:
            prec = str(raw.get("precision", "")).strip()
            if prec and prec.lower() != "not stated":
                stated.setdefault(key, set()).add(prec.split(" ")[0].upper())
    out: list[Any] = list(rows)
    filled: dict[int, str] = {}
    for i, raw in enumerate(rows):
        if system[i] and str(raw.get("precision", "")).strip().lower() == "not stated":
            known = stated.get(keys[i], set())
            if len(known) == 1:
                out[i] = dict(raw, precision=next(iter(known)))
                filled[i] = (f"precision not stated: '{out[i]['precision']}' from the file's other rows of the same "
                             "model and GPU")
                continue
            fmt = _harness_format(i, rows, system, keys)
            if fmt:
                out[i] = dict(raw, precision=fmt.upper())
                filled[i] = (f"precision not stated: '{fmt.upper()}', the narrowest format the same harness "
                             f"({_harness(raw)}) ran this model in on other GPUs that this GPU supports")
    return out, filled


def _model_gpu(raw: dict) -> tuple[str, str]:
    """(model, GPU) of a row as the preset and hardware kind they name (the labels as written where
    they name none), so that rows spelling one part two ways count as the same."""
    try:
        model = get_preset(str(raw.get("model"))).shape.name
    except ExplorerError:
        model = str(raw.get("model"))
    try:
        gpu = gpu_hardware(raw.get("gpu")).name
    except ExplorerError:
        gpu = str(raw.get("gpu"))
    return model, gpu


def _harness(raw: dict) -> str:
    """The benchmark harness of an MLPerf row: the first word after 'framework:' in its notes."""
    m = re.search(r"framework:\s*([A-Za-z][\w-]*)", str(raw.get("notes", "")))
    return m.group(1).lower() if m else ""


def _harness_format(i: int, rows: list[Any], system: list[bool], keys: list[tuple[str, str]]) -> str:
    """For MLPerf row ``i``, whose precision is not stated and whose model and GPU no other row has:
    the narrowest tensor format that the same harness ran the same model in on other GPUs *and* this
    GPU's tensor cores support (NVIDIA's TensorRT harness ran Llama-2-70B in FP8 on Hopper and FP4
    on Blackwell: a harness quantizes as far as the GPU allows -- an assumption), or ''.  ``system``
    and ``keys``: per row, whether it is a system row and its (model, GPU) of :func:`_model_gpu`."""
    raw = rows[i]
    harness = _harness(raw)
    if not harness:
        return ""
    used: set[str] = set()
    for j, other in enumerate(rows):
        if j != i and system[j] and keys[j][0] == keys[i][0] and _harness(other) == harness:
            fmt = tensor_format_in(str(other.get("precision", "")))
            if fmt:
                used.add(fmt)
    try:
        hw = gpu_hardware(raw.get("gpu"))
    except ExplorerError:
        return ""
    for fmt in ("fp4", "fp8", "bf16", "fp16"):  # narrowest first
        if fmt in used and hw.supports(fmt):
            return fmt
    return ""


def mark_duplicate_ids(cases: list[Case]) -> list[Case]:
    """A case whose id was already seen is kept, unsupported, with the reason."""
    seen: set[str] = set()
    for c in cases:
        if c.id in seen and c.supported:
            c.supported, c.reason = False, f"duplicate id '{c.id}'"
        seen.add(c.id)
    return cases


def _kernel_rows(data: dict) -> bool:
    rows = data.get("measurements") or []
    return bool(rows) and all(isinstance(r, dict) and "kind" in r for r in rows[:5]) and "metric" in rows[0] \
        and rows[0].get("kind") not in (None, "")


# --------------------------------------------------------------------------------------- predict


CURVE_METRICS = {"tok_s_gpu": "tokens_per_s_per_gpu", "tok_s_user": "tokens_per_s_per_user", "ttft": "ttft_ms"}


def _convert(case: Case, res: dict[str, np.ndarray], i: int) -> float:
    if case.column:  # an MLPerf run's latency statistic (explorer/mlperf_latency.py)
        return float(res[case.column][i]) * 1e3
    field_ = CURVE_METRICS[case.metric] if case.kind == "curve" else INFERENCE_METRICS[case.metric][0]
    if field_ == "tokens_per_s_total":
        return float(res["tokens_per_s_per_gpu"][i]) * case.num_gpus
    if field_ == "tokens_per_s_per_node":
        return float(res["tokens_per_s_per_gpu"][i]) * float(case.values.get("gpus_per_node", DEFAULT_GPUS_PER_NODE))
    if field_ == "tpot_ms":
        return float(res["tpot_s"][i]) * 1e3
    if field_ == "tokens_per_s_per_gpu" and "finite_run_cv" in case.values:
        # a measured finite run: steady state less its drain (explorer/closed_loop.py)
        factor = finite_run_throughput_factor(case.values["batch"], case.values["finite_run_cv"])
        return float(res[field_][i] * factor)
    if field_ == "ttft_ms":
        ttft = float(res["ttft_s"][i])
        if case.kind == "curve" and case.values.get("benchmark") == "inferencex":
            # a measured mean over 10*C requests includes the opening burst (explorer/closed_loop.py)
            ttft += float(start_burst_ttft_s(res["clients_per_engine"][i], res["prefill_s_per_request"][i]))
        return ttft * 1e3
    return float(res[field_][i])


SERVED_KINDS = ("inference", "curve")
#: a served case's software release (curve rows: ``framework_version`` and ``date``), read into its
#: runtime profile (:meth:`explorer.runtime.Runtime.at_release`), not into a design column
RELEASE_VALUES = ("release", "release_date")
#: a served case's values that are not design columns as they stand (the batch comes from the case's
#: batch ladder, the runtime and release become a profile object, the optional and speculation
#: columns are filled for every row once one case has them; the rest are scoring notes)
NON_DESIGN_VALUES = frozenset(("batch", "runtime", "serverless", "benchmark", "finite_run_cv", "gpus_per_node",
                               *SPEC_VALUES, *OPTIONAL_VALUES, *RELEASE_VALUES))


#: Cases from which :func:`predict` loads the compiled GEMM kernel (explorer/costs/gemm.py) before
#: scoring, whatever its tables' sizes: its tables are hundreds of rows, below the simulator's own
#: loading threshold, but calibration calls it ~800 times per fit.  Measured 2026-12-06 (2-core
#: machine, VM slow, same predictions bit for bit): one predict of the H200 cases 0.373 -> 0.254 s,
#: B200 0.305 -> 0.207 s, H100 0.207 -> 0.148 s; loading costs ~0.3 s once (1.6 s the first time, compiling).
PRELOAD_KERNEL_CASES = 50


@dataclass
class _ServedPlan:
    """The design rows :func:`predict` scores for a list of cases, less the hardware and runtime
    profiles a call passes: they depend on the cases alone, and calibration predicts the same list
    hundreds of times with only the profiles changed.  ``columns`` are the design columns with
    ``hardware`` and ``runtime`` as placeholders, filled per call from ``hw_names`` / ``rt_keys``
    (``(runtime, release, release date)``) through ``hw_idx`` / ``rt_idx``; ``groups`` are each
    first case of a design point with its rows, in case order; ``same`` maps a case to the first
    case of its design point."""

    cases: list[Case]  # the objects the plan was built from, held so that their ids stay theirs
    state: list[tuple]  # per case, what building read: see _case_state
    columns: dict[str, Any]
    hw_names: list[str]
    hw_idx: np.ndarray
    rt_keys: list[tuple[str, str, str]]
    rt_idx: np.ndarray
    serverless: np.ndarray
    groups: list[tuple[int, np.ndarray]]
    same: dict[int, int]


def _case_state(c: Case) -> tuple:
    """What building a plan reads of a case; the values dict by identity *and* by content (a copy),
    so that a replaced or an edited dict both rebuild it."""
    return (c.supported, c.kind, c.saturated, c.hardware, c.values, dict(c.values))


def _state_holds(c: Case, state: tuple) -> bool:
    try:
        return (c.supported is state[0] and c.kind == state[1] and c.saturated is state[2]
                and c.hardware == state[3] and c.values is state[4] and c.values == state[5])
    except (TypeError, ValueError):  # a value that does not compare to a bool (an array): rebuild
        return False


#: the plans of the last few case lists :func:`predict` saw (calibration alternates a few lists)
_PLANS: list[_ServedPlan] = []
_PLANS_KEPT = 4


def _served_plan(cases: list[Case]) -> _ServedPlan:
    """The plan of ``cases``: a kept one if it was built from these very objects, in this order, in
    the same state, else a new one (kept in place of the oldest).  Results are the same either way;
    only the time differs (calibrating H200, 1,739 predictions: about half of the fit's time was
    rebuilding these rows)."""
    for plan in _PLANS:
        if len(plan.cases) == len(cases) and all(a is b for a, b in zip(plan.cases, cases, strict=True)) \
                and all(_state_holds(c, st) for c, st in zip(cases, plan.state, strict=True)):
            return plan
    plan = _build_served_plan(cases)
    _PLANS.insert(0, plan)
    del _PLANS[_PLANS_KEPT:]
    return plan


def _build_served_plan(cases: list[Case]) -> _ServedPlan:
    state = [_case_state(c) for c in cases]
    rows: dict[str, list[Any]] = {}
    owner: list[int] = []
    hw_names: dict[str, int] = {}
    rt_keys: dict[tuple[str, str, str], int] = {}
    served = [c for c in cases if c.supported and c.kind in SERVED_KINDS]
    any_spec = any(c.values.get("draft_tokens") for c in served)
    given = {k for c in served for k in c.values}
    any_opt = {k: k in given for k in OPTIONAL_VALUES}
    first: dict[tuple, int] = {}  # cases that share a design point (a curve row's axes) share its rows
    same: dict[int, int] = {}
    for ci, c in enumerate(cases):
        if not c.supported or c.kind not in SERVED_KINDS:
            continue
        key = (c.hardware, c.saturated, tuple(sorted((k, str(v)) for k, v in c.values.items())))
        if key in first:
            same[ci] = first[key]
            continue
        first[key] = ci
        batches = MAX_BATCH_GRID if c.saturated else np.array([c.values["batch"]])
        nb = len(batches)
        # the case's cells, the same in each of its rows but the batch (in the columns' order)
        cells = {k: v for k, v in c.values.items() if k not in NON_DESIGN_VALUES}
        for k, default in OPTIONAL_VALUES.items():  # present in every row once one case has it
            if any_opt[k]:
                cells[k] = c.values.get(k, default)
        if any_spec:  # every row carries the speculation columns once one case speculates
            for k, default in SPEC_VALUES.items():
                cells[k] = c.values.get(k, default)
        cells["batch"] = None  # its column's place; filled from ``batches`` below
        # the profiles' places: indices into hw_names / rt_keys, made objects per call
        cells["hardware"] = hw_names.setdefault(c.hardware, len(hw_names))
        rkey = (c.values.get("runtime") or DEFAULT_RUNTIME, str(c.values.get("release", "")),
                str(c.values.get("release_date", "")))
        cells["runtime"] = rt_keys.setdefault(rkey, len(rt_keys))
        cells["serverless"] = bool(c.values.get("serverless", False))
        for k, v in cells.items():
            col = rows.setdefault(k, [])
            if k == "batch":
                col.extend(int(b) for b in batches)
            else:
                col.extend([v] * nb)
        owner.extend([ci] * nb)
    groups: list[tuple[int, np.ndarray]] = []
    columns: dict[str, Any] = {}
    serverless = np.zeros(0, dtype=bool)
    hw_idx = rt_idx = np.zeros(0, dtype=np.int64)
    if owner:
        serverless = np.array(rows.pop("serverless"))
        hw_idx = np.array(rows["hardware"], dtype=np.int64)
        rt_idx = np.array(rows["runtime"], dtype=np.int64)
        columns = {k: (None if k in ("hardware", "runtime") else np.array(v, dtype=object) if k in ("model", "precision")
                       else np.array(v)) for k, v in rows.items()}
        owner_a = np.array(owner)
        order = np.argsort(owner_a, kind="stable")
        cuts = np.flatnonzero(np.diff(owner_a[order])) + 1
        groups = [(int(owner_a[idx[0]]), idx) for idx in np.split(order, cuts)]
    return _ServedPlan(list(cases), state, columns, list(hw_names), hw_idx, list(rt_keys), rt_idx, serverless,
                       groups, same)


def predict(cases: list[Case], hardware: dict[str, Hardware] | None = None,
            runtimes: dict[str, Runtime] | None = None, systems: bool = True) -> np.ndarray:
    """Predicted value (in each case's unit) for every case; NaN for unsupported ones.

    ``hardware`` overrides kinds by name and ``runtimes`` runtime profiles by name (calibration
    passes candidate factors this way).  ``systems=False`` leaves the MLPerf system rows (a split and
    rate search each) unpredicted, NaN; their latency cases then use the split already in the row's
    note.  All served cases (points and curves) are scored in one
    vectorized simulator call.
    """
    hw_of = dict(hardware or {})
    rt_of = dict(runtimes or {})
    if len(cases) >= PRELOAD_KERNEL_CASES:  # a validation or calibration run: the compiled GEMM kernel
        fast_path_available()  # (once per process; the same figures as numpy's, 1.4-1.5x faster predictions)

    def hw(name: str) -> Hardware:
        if name not in hw_of:
            hw_of[name] = load_hardware(name)
        return hw_of[name]

    def rt(name: str) -> Runtime:
        if name not in rt_of:
            rt_of[name] = load_runtime(name)
        return rt_of[name]

    released: dict[tuple[str, str, str], Runtime] = {}

    def rt_release(name: str, label: str, date: str) -> Runtime:
        """The profile as the case's release ran (one object per release: build_design groups by identity)."""
        if not (label or date):
            return rt(name)
        key = (name, label, date)
        if key not in released:
            released[key] = rt(name).at_release(label, date)
        return released[key]

    out = np.full(len(cases), np.nan)
    plan = _served_plan(cases)
    if plan.groups:
        hw_objs = np.empty(len(plan.hw_names), dtype=object)
        hw_objs[:] = [hw(name) for name in plan.hw_names]
        rt_objs = np.empty(len(plan.rt_keys), dtype=object)
        rt_objs[:] = [rt_release(*key) for key in plan.rt_keys]
        vals = {k: (hw_objs[plan.hw_idx] if k == "hardware" else rt_objs[plan.rt_idx] if k == "runtime" else v)
                for k, v in plan.columns.items()}
        design, table = build_design(vals, "validate")
        design["rt_request_s"] = np.where(plan.serverless, 0.0, design["rt_request_s"])
        # served rows (HTTP servers: the curves) carry the runtime's serving front end; offline engine
        # benchmarks (serverless rows: trtllm-bench, gptManagerBenchmark) have none
        design["front_end"] = np.where(plan.serverless, 0.0, 1.0)
        res = simulate(design, table)
        row_of: dict[int, int] = {}
        for ci, idx in plan.groups:
            c = cases[ci]
            if c.saturated:
                ok = idx[res["feasible"][idx]]
                if len(ok) == 0:
                    c.supported, c.reason = False, "no feasible batch (out of memory at batch 1?)"
                    continue
                thr = res["tokens_per_s_per_gpu"][ok]
                row_of[ci] = int(ok[np.flatnonzero(thr >= thr.max() * (1.0 - 1e-9))[0]])
                c.chosen_batch = int(design["batch"][row_of[ci]])
            else:
                row_of[ci] = int(idx[0])
                if not res["feasible"][idx[0]]:
                    c.model_reason = int(res["reason_code"][idx[0]])
                    c.note = f"the design point is infeasible in the model (reason code {c.model_reason})"
        for ci, src in list(plan.same.items()) + [(k, k) for k in row_of]:
            if src not in row_of:
                cases[ci].supported, cases[ci].reason = cases[src].supported, cases[src].reason
                continue
            if ci != src:
                cases[ci].chosen_batch = cases[src].chosen_batch
                if cases[src].model_reason:  # the shared design point's verdict (loader notes stay per case)
                    cases[ci].model_reason, cases[ci].note = cases[src].model_reason, cases[src].note
            out[ci] = _convert(cases[ci], res, row_of[src])
    system = [ci for ci, c in enumerate(cases) if c.supported and c.kind == "system" and systems]
    if system:
        out[np.array(system)] = _predict_systems(
            [cases[ci] for ci in system], [hw(cases[ci].hardware) for ci in system],
            [rt(cases[ci].values.get("runtime") or DEFAULT_RUNTIME) for ci in system])
    latency = [ci for ci, c in enumerate(cases) if c.supported and c.kind == "system_latency"]
    if latency:  # at the run's measured rate, on the deployment its throughput row chose
        from explorer.mlperf_latency import predict_latency

        by_id = {c.id: c for c in cases if c.kind == "system"}
        out[np.array(latency)] = predict_latency([cases[ci] for ci in latency], by_id, hw_of, rt_of)
    # kernel rows (kernels.yaml, and the GEMM/all-reduce rows of measurements.yaml, which parse into
    # the same shape) are scored by explorer.kernel_cases' cost functions
    kernel_like = [ci for ci, c in enumerate(cases)
                   if c.supported and c.kind not in (*SERVED_KINDS, "system", "system_latency", "hbm")]
    if kernel_like:
        from explorer import kernel_cases

        sub = [cases[ci] for ci in kernel_like]
        out[np.array(kernel_like)] = kernel_cases.predict_kernel_cases(sub, hw)
    for ci, c in enumerate(cases):
        if not c.supported or c.kind != "hbm":
            continue
        h = hw(c.hardware)  # STREAM triad: the achievable bandwidth
        out[ci] = h.hbm_bw * h.eta_memory / 1e12
    return out


#: the split a system row's prediction leaves in its note (read back by calibration and the latency cases)
SPLIT_NOTE = re.compile(r"tp=(\d+) ep=(\d+) dp=(\d+) x (\d+) replicas")


def split_of(note: str) -> tuple[int, int, int, int] | None:
    """(tp, ep, dp, replicas) of the split :func:`_predict_systems` left in a note, or None."""
    m = SPLIT_NOTE.search(note)
    return None if m is None else (int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)))


def system_request(case: Case, hw: Hardware, rt: Runtime) -> SystemRequest:
    """The split search an MLPerf system row asks for (:class:`explorer.systems.SystemRequest`): its
    deployment, or with ``tp: null`` every one its GPUs allow; its p99 limits (Server, Interactive);
    no per-request host time for in-process harnesses (``serverless``)."""
    from explorer.systems import SystemRequest, candidates

    v = case.values
    base = {k: x for k, x in v.items() if k in ("model", "precision", "isl", "osl", "pp", "isl_cv", "osl_cv")}
    experts = int(get_preset(str(v["model"])).shape.experts or 0)
    deps = (candidates(case.num_gpus, experts, int(hw.scaleup_domain), int(v["pp"])) if v.get("tp_open")
            else [(int(v["tp"]), int(v["ep"]), int(v["dp"]))])
    lim = {k: (v[k] / 1e3 if v.get(k) else None) for k in ("ttft_limit_ms", "tpot_limit_ms")}
    return SystemRequest(base, hw, rt, case.num_gpus, experts, lim["ttft_limit_ms"], lim["tpot_limit_ms"], deps,
                         0.0 if v.get("serverless") else None)


def _predict_systems(cases: list[Case], hws: list[Hardware], rts: list[Runtime]) -> np.ndarray:
    """Whole-system output tokens/s of MLPerf rows (:func:`explorer.systems.best_systems`, all in one
    search): each row's deployment, or with ``tp: null`` the best one the GPUs allow, at its saturated
    point (Offline) or at the highest Poisson rate meeting the row's p99 limits (Server,
    Interactive).  Leaves the chosen split in each case's note (:func:`split_of` reads it back)."""
    from explorer.systems import best_systems

    reqs = [system_request(case, hw, rt) for case, hw, rt in zip(cases, hws, rts, strict=True)]
    out = np.full(len(cases), np.nan)
    for i, (case, got) in enumerate(zip(cases, best_systems(reqs, "validate"), strict=True)):
        if got is None:
            case.supported, case.reason = False, "no feasible deployment (out of memory, or no rate meets the limits)"
            continue
        case.chosen_batch = got.batch
        split = f"tp={got.tp} ep={got.ep} dp={got.dp} x {got.replicas} replicas"
        rest = re.sub(r"(; )?" + SPLIT_NOTE.pattern, "", case.note)  # this call's split replaces any earlier
        case.note = (rest + "; " if rest else "") + split
        out[i] = got.tokens_per_s_system
    return out


def ideal(hw: Hardware) -> Hardware:
    """The physical roofline of a GPU: every efficiency 1, no launch or step overheads."""
    return hw.with_efficiency(eta_compute=1.0, eta_memory=1.0, eta_network=1.0, eta_moe=1.0, kernel_launch_s=0.0,
                              step_overhead_s=0.0, per_sequence_s=0.0)


# --------------------------------------------------------------------------------------- report

LOWER_IS_BETTER = {"first_token_latency", "ttft", "inter_token_latency"}


def ideal_runtime(rt: Runtime, hardware: list[str]) -> Runtime:
    """A runtime with no host work, roofline attention and every release at full speed on the given
    hardware kinds."""
    rt = rt.without_releases()
    for h in hardware:
        rt = rt.with_fit(h, RuntimeFit(0.0, 0.0, 0.0, 1.0))
    return rt


def validate(path: str | Path = DEFAULT_MEASUREMENTS, hardware: dict[str, Hardware] | None = None,
             runtimes: dict[str, Runtime] | None = None, cases: list[Case] | None = None) -> dict[str, Any]:
    """Predict every case and summarise the errors (JSON-ready)."""
    cases = load_cases(path) if cases is None else cases
    pred = predict(cases, hardware, runtimes)
    names = sorted({c.hardware for c in cases if c.supported and c.hardware})
    rt_names = sorted({c.values.get("runtime") or DEFAULT_RUNTIME for c in cases
                       if c.supported and c.kind in SERVED_KINDS})
    # the roofline of every served case (system rows have none: their latency cases are bounded at
    # the split and rate their own prediction chose, so their rate searches are not run again)
    roof = predict(cases, {n: ideal((hardware or {}).get(n) or load_hardware(n)) for n in names},
                   {r: ideal_runtime((runtimes or {}).get(r) or load_runtime(r), names) for r in rt_names},
                   systems=False)
    rows = []
    for c, p, r in zip(cases, pred, roof, strict=True):
        ok = c.supported and math.isfinite(p)
        row = {
            "id": c.id, "metric": c.metric, "unit": c.unit,
            "measured": c.measured if math.isfinite(c.measured) else None,  # strict JSON: no NaN
            "predicted": float(p) if ok else None,
            "error": float(p / c.measured - 1.0) if ok else None,
            "supported": bool(ok), "reason": c.reason, "regime": c.regime, "hardware": c.hardware,
            "kind": c.kind, "trust": c.trust,
        }
        if c.kind in SERVED_KINDS:
            row.update(curve=c.curve, family=c.family, runtime=c.runtime or c.values.get("runtime", ""))
            if c.kind == "curve":  # the chart a user would draw it on (explorer/front_agreement.py)
                row["front"] = (f"{c.values.get('model')} on {c.hardware}, ISL/OSL {c.values.get('isl')}/"
                                f"{c.values.get('osl')}")
        if ok and c.note:
            row["note"] = c.note
        if ok and c.kind in (*SERVED_KINDS, "system_latency"):
            row["roofline"] = float(r)
            better = (p < r * (1 - 1e-9)) if c.metric in LOWER_IS_BETTER else (p > r * (1 + 1e-9))
            row["above_roofline"] = bool(better)
            if c.chosen_batch is not None:
                row["batch"] = c.chosen_batch
        rows.append(row)
    return {"cases": rows, "summary": summarize(rows)}


def _stats(errors: list[float]) -> dict[str, Any]:
    if not errors:
        return {"n": 0}
    a = np.abs(np.array(errors))
    lg = np.abs(np.log(np.maximum(1.0 + np.array(errors), 1e-300)))  # finite even for a prediction ~0
    return {
        "n": len(errors),
        "median_abs_error": float(np.median(a)),
        "p90_abs_error": float(np.percentile(a, 90)),
        "median_signed_error": float(np.median(errors)),
        "median_abs_log_error": float(np.median(lg)),
        "p90_abs_log_error": float(np.percentile(lg, 90)),
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    sup = [r for r in rows if r["supported"]]
    inf = [r for r in sup if r["kind"] in SERVED_KINDS]
    out: dict[str, Any] = {
        "cases": len(rows),
        "supported": len(sup),
        "supported_share": len(sup) / len(rows) if rows else 0.0,
        "unsupported": [{"id": r["id"], "reason": r["reason"]} for r in rows if not r["supported"]],
        "inference": _stats([r["error"] for r in inf]),
        "all": _stats([r["error"] for r in sup]),
        "above_roofline": [r["id"] for r in inf if r.get("above_roofline")],
        "by_regime": {}, "by_metric": {}, "by_hardware": {},
    }
    for key, col in (("by_regime", "regime"), ("by_metric", "metric"), ("by_hardware", "hardware"),
                     ("by_kind", "kind")):
        for v in sorted({r[col] for r in sup}):
            out.setdefault(key, {})[v] = _stats([r["error"] for r in sup if r[col] == v])
    curves = [r for r in sup if r["kind"] == "curve"]
    if curves:
        # serving curves: per axis, and per curve / family / runtime for each axis
        for axis in ("tok_s_gpu", "tok_s_user", "ttft"):
            on = [r for r in curves if r["metric"] == axis]
            if not on:
                continue
            out.setdefault("curves", {})[axis] = {
                "all": _stats([r["error"] for r in on]),
                "by_curve": {v: _stats([r["error"] for r in on if r["curve"] == v]) for v in sorted({r["curve"] for r in on})},
                "by_family": {v: _stats([r["error"] for r in on if r["family"] == v])
                              for v in sorted({r["family"] for r in on})},
                "by_runtime": {v: _stats([r["error"] for r in on if r["runtime"] == v])
                               for v in sorted({r["runtime"] for r in on})},
            }
        from explorer.front_agreement import curve_points
        from explorer.front_agreement import summarize as fronts_agreement

        out["fronts"] = fronts_agreement(curve_points(curves))
    return out


def format_table(result: dict[str, Any]) -> str:
    lines = [f"{'case':44s} {'metric':30s} {'measured':>10s} {'predicted':>10s} {'error':>8s}  regime"]
    for r in result["cases"]:
        if r["supported"]:
            flag = "  ABOVE ROOFLINE" if r.get("above_roofline") else ""
            lines.append(f"{r['id'][:44]:44s} {r['metric'][:30]:30s} {r['measured']:10.4g} {r['predicted']:10.4g} "
                         f"{r['error']:+8.1%}  {r['regime']}{flag}")
    s = result["summary"]
    lines.append("")
    lines.append(f"supported {s['supported']}/{s['cases']} ({s['supported_share']:.0%}); unsupported:")
    for u in s["unsupported"]:
        lines.append(f"  {u['id']}: {u['reason']}")
    lines.append("")
    lines.append(f"{'group':60s} {'n':>3s} {'median|err|':>11s} {'p90|err|':>9s} {'median err':>10s}")

    def line(name: str, st: dict[str, Any]) -> None:
        if st.get("n"):
            lines.append(f"{name:60s} {st['n']:3d} {st['median_abs_error']:11.1%} {st['p90_abs_error']:9.1%} "
                         f"{st['median_signed_error']:+10.1%}")

    line("served (points + curves)", s["inference"])
    line("all supported", s["all"])
    for key in ("by_kind", "by_regime", "by_metric", "by_hardware"):
        for k, st in s.get(key, {}).items():
            line(f"{key[3:]}: {k}", st)
    for axis, groups in s.get("curves", {}).items():
        line(f"curves {axis}", groups["all"])
        for key in ("by_family", "by_runtime", "by_curve"):
            for k, st in groups[key].items():
                line(f"  {axis} {key[3:]}: {k}"[:60], st)
    fa = s.get("fronts")
    if fa and fa["pairs"]:
        lines.append(f"fronts ({fa['groups']} model/GPU/workload charts, {fa['points']} measured points): of "
                     f"{fa['pairs']} pairs where one measured point dominates the other, the predictions agree on "
                     f"{fa['agree_share']:.1%} and flip {fa['flip_share']:.1%}; the predicted fronts keep "
                     f"{fa['front_recall']:.0%} of the measured fronts' points (precision {fa['front_precision']:.0%}); "
                     "the ratio of two points' figures on one chart is off by "
                     + ", ".join(f"{v['median']:.1%} median / {v['p90']:.1%} p90 ({k})"
                                 for k, v in fa["ratio_error"].items() if v["pairs"]))
    lines.append(f"predictions above the physical roofline: {len(s['above_roofline'])}")
    return "\n".join(lines)


__all__ = ["validate", "predict", "load_cases", "parse_case", "Case", "format_table", "TENSOR_FORMATS"]
