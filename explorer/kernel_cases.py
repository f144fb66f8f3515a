"""Published kernel microbenchmarks (``validation/kernels.yaml``) as validation cases, scored by the
simulator's own kernel cost functions (the same ones the serving simulator calls).

Each row of the file's ``measurements:`` list becomes one :class:`explorer.validate.Case` with
``kind`` = the row's kind, ``regime`` = ``kernel_<kind>`` (all-gather and reduce-scatter share
``kernel_allreduce``, dispatch and combine ``kernel_alltoall``), ``hardware`` = the hardware file
and ``values`` = the kernel's arguments.  A row that cannot be mapped is kept, ``supported=False``,
with a one-line reason naming the field; parsing never raises.

Predictions (:func:`predict_kernel_cases`) go through one formula per effect:

* ``gemm`` / ``grouped_gemm``: :func:`explorer.costs.gemm.gemm_cost` (tiles, waves, split-K, the
  exposed epilogue and the fixed kernel latency); grouped GEMMs are ``groups = experts`` GEMMs of
  ``tokens_per_expert`` rows (contiguous layouts pad each expert to the tile, as the tile count
  does); k-grouped (weight-gradient, training) GEMMs are not scored.  ``eta_moe`` (a serving factor: routing, permutation, uneven experts) is not applied;
* ``attention_fwd``: :func:`explorer.costs.attention.prefill_attention_time`; the TFLOPS metric
  uses the benchmarks' FLOP count (:func:`~explorer.costs.attention.prefill_attention_flops`:
  ``4*b*h*S^2*d``, halved when causal).  FlashAttention-2 on Hopper/Blackwell runs Ampere-style
  ``mma.sync`` rather than wgmma/tcgen05: its matmuls get ``legacy_mma_fraction``;
* ``decode_attention``: :func:`explorer.costs.attention.decode_attention_time` (MLA when
  ``head_dim`` is 576, DeepSeek's 512 latent + 64 rope; sparse top-k rows attend to ``topk`` tokens);
* ``allreduce`` / ``allgather`` / ``reducescatter``: :func:`explorer.costs.comm.collective_s`;
  ``busbw = factor*(n-1)/n * bytes / time`` as nccl-tests defines it (factor 2 for all-reduce);
* ``alltoall_dispatch`` / ``alltoall_combine``: :func:`explorer.costs.comm.ep_alltoall_s`; DeepEP's
  V1 normal kernels report the *bottleneck* link's bytes per second, its low-latency and V2 kernels
  the *logical* bytes (every copy, local ones included).

Microbenchmarks time kernels launched back to back, so the serving runtime's per-kernel gap
(``kernel_launch_s``) is not added; the kernel's own fixed latency (``kernel_latency_s``) is.

Mapping assumptions (each stated once): GPU classes without their own file map per
:data:`GPU_CLASSES`; a 16-bit dtype that is not stated is bf16 (same peak as fp16); attention rows
without ``heads`` use the flash-attention benchmark default of 2048 total head dims (TFLOPS does not
depend on it once the GPU is full); ``causal`` not stated is non-causal (tritonbench and the
flash-attention benchmark default); an all-reduce whose bus bandwidth is printed as 0.00 is scored
on the latency the same row reports; an ``algo`` naming Ring restricts NCCL to rings, others leave
the choice to the model (NCCL's tuner).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from explorer.costs.attention import decode_attention_time, prefill_attention_flops, prefill_attention_time
from explorer.costs.comm import collective_s, ep_alltoall_s, protocols_of
from explorer.costs.gemm import gemm_cost
from explorer.errors import ExplorerError, SpecError
from explorer.fabrics import Fabric, fabric_in, fabrics, with_fabric
from explorer.hardware import Hardware, load_hardware
from explorer.precision import tensor_format_in
from explorer.specio import read_yaml
from explorer.validate import Case

DEFAULT_KERNELS = Path(__file__).resolve().parent.parent / "validation" / "kernels.yaml"

#: gpu_class -> (hardware file or None, why).  A reason is given only where the class is not the file.
GPU_CLASSES: dict[str, tuple[str | None, str]] = {
    "A100": ("a100-80gb", ""),
    "H100": ("h100", ""),
    "H200": ("h200", ""),
    "H800": ("h800", ""),
    "B200": ("b200", ""),
    "GB200": ("gb200", ""),
    "B300": ("b300", ""),
    "MI300X": ("mi300x", ""),
    "MI325X": ("mi325x", ""),
    "MI355X": ("mi355x", ""),
    "GH200": ("h100", "GH200's GPU is the H100 SXM compute die (132 SMs, 989 dense bf16 TFLOPS); its rows are "
                      "compute-bound GEMMs, where its faster HBM3e does not enter"),
    "Hopper (unspecified)": ("h100", "unspecified SM90 part: H100 SXM assumed (same die as H800/H200; these rows' "
                                     "scale-out is the 400 Gb/s CX7 NIC every DGX/HGX Hopper has)"),
    "B200-class (SM100)": ("b200", "SM100 part not named: B200 assumed"),
    "H20": ("h20", ""),
}

KIND_REGIME = {
    "gemm": "kernel_gemm", "grouped_gemm": "kernel_grouped_gemm", "attention_fwd": "kernel_attention_fwd",
    "decode_attention": "kernel_decode_attention", "allreduce": "kernel_allreduce",
    "allgather": "kernel_allreduce", "reducescatter": "kernel_allreduce",
    "alltoall_dispatch": "kernel_alltoall", "alltoall_combine": "kernel_alltoall",
}
#: metric -> unit; kinds accept the metrics listed in KIND_METRICS.
METRIC_UNITS = {"achieved_tflops": "TFLOPS", "achieved_GB_s": "GB/s", "busbw_GB_s": "GB/s", "latency_us": "us"}
KIND_METRICS = {
    "gemm": {"achieved_tflops", "achieved_GB_s"}, "grouped_gemm": {"achieved_tflops"},
    "attention_fwd": {"achieved_tflops"}, "decode_attention": {"achieved_tflops", "achieved_GB_s", "latency_us"},
    "allreduce": {"busbw_GB_s", "latency_us"}, "allgather": {"busbw_GB_s", "latency_us"},
    "reducescatter": {"busbw_GB_s", "latency_us"},
    "alltoall_dispatch": {"achieved_GB_s", "latency_us"}, "alltoall_combine": {"achieved_GB_s", "latency_us"},
}
LOWER_IS_BETTER = {"latency_us"}
#: Flash-attention benchmark default: total head dims per token (``dim = 2048``; heads = 2048/head_dim).
FA_BENCH_DIM = 2048
#: DeepEP's FP8 dispatch carries one fp32 scale per 128 channels (``hidden/128*4`` bytes per token).
FP8_SCALE_BLOCK = 128
#: Libraries whose attention kernels use Ampere-style mma.sync (not wgmma / tcgen05) on Hopper/Blackwell.
LEGACY_ATTENTION = re.compile(r"flashattention[- ]?2|flash_attn 2|flashattention 2\.|\bfa2\b", re.I)
LEGACY_ARCHS = {"hopper", "blackwell", "blackwell-ultra"}


class RowError(ValueError):
    """A row that cannot be mapped (the message names the field)."""


# ------------------------------------------------------------------------------------------ parsing


def is_kernels_file(data: Any) -> bool:
    """True for a dict whose ``measurements`` rows carry ``kind`` (the shape of kernels.yaml)."""
    if not isinstance(data, dict):
        return False
    rows = data.get("measurements")
    return isinstance(rows, list) and bool(rows) and all(isinstance(r, dict) and "kind" in r for r in rows)


def _num(row: dict, key: str, *, integer: bool = False, positive: bool = True, default: Any = ...) -> float:
    v = row.get(key)
    if v is None:
        if default is ...:
            raise RowError(f"{key} missing")
        return default
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise RowError(f"{key} must be a number, got {v!r}")
    if not math.isfinite(v):
        raise RowError(f"{key} must be finite, got {v!r}")
    if positive and v <= 0:
        raise RowError(f"{key} must be > 0, got {v!r}")
    if integer and float(v) != int(v):
        raise RowError(f"{key} must be a whole number, got {v!r}")
    return float(v)


def _fmt(dtype: Any, default: str | None = None) -> str:
    """Tensor format of a dtype label: fp4, fp8, fp16 or bf16."""
    fmt = tensor_format_in(dtype)
    if fmt is not None:
        return fmt
    if default is not None:
        return default
    raise RowError(f"dtype '{dtype}' is not a tensor format")


def _bytes_of(fmt: str, dtype: Any) -> float:
    if fmt == "fp4":  # NVFP4 (4 bits + an FP8 scale per 16 = 4.5 bits) unless labelled MX (E8M0 per 32)
        return 0.53125 if "mx" in str(dtype).lower() else 0.5625
    return {"fp8": 1.0, "fp16": 2.0, "bf16": 2.0}[fmt]


def _hardware(row: dict) -> tuple[Hardware, str]:
    cls = row.get("gpu_class")
    if cls not in GPU_CLASSES:  # a class the table does not list: the label read as any run's GPU label
        from explorer.validate import gpu_hardware

        try:
            return gpu_hardware(cls), ""
        except SpecError:
            raise RowError(f"gpu_class '{cls}' has no hardware mapping; known: {sorted(GPU_CLASSES)} "
                           "and the hardware files' names") from None
    name, why = GPU_CLASSES[str(cls)]
    if name is None:
        raise RowError(f"gpu_class {cls}: {why}")
    return load_hardware(name), why


def _group(row: dict) -> str:
    """Source group for held-out scoring: the source document, without its table/section detail."""
    src = str(row.get("source") or row.get("library") or "?")
    return re.split(r"\s\(|\s'|;", src, maxsplit=1)[0].strip()


def parse_kernel_rows(rows: list, where: str) -> list[Case]:
    """Every row as a :class:`Case` (bad rows kept, unsupported, with the reason)."""
    from explorer.validate import mark_duplicate_ids

    return mark_duplicate_ids([_parse_row(r, i, where) for i, r in enumerate(rows if isinstance(rows, list) else [])])


def load_kernel_cases(path: str | Path = DEFAULT_KERNELS) -> list[Case]:
    data = read_yaml(path)
    if not is_kernels_file(data):
        raise SpecError(str(path), "measurements", "expected a top-level 'measurements:' list of rows with 'kind'")
    return parse_kernel_rows(data["measurements"], str(path))


def _parse_row(raw: Any, index: int, where: str) -> Case:
    if not isinstance(raw, dict):
        return Case(f"#{index}", "?", "?", float("nan"), kind="?", supported=False,
                    reason=f"row {index} of {where} is not a mapping: {raw!r}"[:200])
    cid = str(raw.get("id") or f"#{index}")
    kind = str(raw.get("kind"))
    metric = str(raw.get("metric"))
    case = Case(cid, metric, METRIC_UNITS.get(metric, "?"), float("nan"), kind=kind,
                regime=KIND_REGIME.get(kind, f"kernel_{kind}"), trust=str(raw.get("trust", "")))
    try:
        if kind not in KIND_REGIME:
            raise RowError(f"kind '{kind}' is not a kernel kind; known: {sorted(KIND_REGIME)}")
        if metric not in KIND_METRICS[kind]:
            raise RowError(f"metric '{metric}' is not scored for kind {kind}; allowed: {sorted(KIND_METRICS[kind])}")
        value = raw.get("value")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise RowError(f"value must be a finite number, got {value!r}")
        if value <= 0:
            lat = (raw.get("also_reported") or {}).get("latency_us") if isinstance(raw.get("also_reported"), dict) else None
            if metric == "busbw_GB_s" and isinstance(lat, int | float) and math.isfinite(lat) and lat > 0:
                metric, value = "latency_us", float(lat)  # bus bandwidth printed as 0.00: score its latency
                case.metric, case.unit = metric, METRIC_UNITS[metric]
                case.note = "busbw printed as 0.00; scored on the reported latency"
            else:
                raise RowError(f"value must be > 0, got {value!r}")
        case.measured = float(value)
        hw, why = _hardware(raw)
        case.hardware = hw.name
        if why:
            case.note = (case.note + "; " if case.note else "") + f"mapped to {hw.name}: {why}"
        case.num_gpus = int(_num(raw, "num_gpus", integer=True, default=1.0))
        v: dict[str, Any] = {"group": _group(raw), "library": str(raw.get("library") or "")}
        if kind in ("gemm", "grouped_gemm"):
            v.update(_gemm_values(raw, kind, hw))
        elif kind == "attention_fwd":
            v.update(_attention_values(raw, hw))
        elif kind == "decode_attention":
            v.update(_decode_values(raw, hw))
        elif kind in ("allreduce", "allgather", "reducescatter"):
            v.update(_collective_values(raw, kind))
            if v.pop("noted_size"):
                case.note = (case.note + "; " if case.note else "") + \
                    f"message size {v['bytes'] / 2**30:g} GiB from the row's notes (a plateau read off a slide)"
            fabric = _network(raw, v["n"], hw)
            if fabric:
                v["fabric"] = fabric
                case.note = (case.note + "; " if case.note else "") + f"scale-out over {fabric}"
        else:
            v.update(_alltoall_values(raw, kind))
        case.values = v
        return case
    except (RowError, ExplorerError, TypeError, KeyError) as e:
        case.supported = False
        case.reason = str(e)
        return case


def _gemm_values(row: dict, kind: str, hw: Hardware) -> dict[str, Any]:
    fmt = _fmt(row.get("dtype"))
    if fmt not in hw.peak_flops:
        raise RowError(f"dtype {fmt}: {hw.name} has no {fmt} tensor cores")
    b = _bytes_of(fmt, row.get("dtype"))
    layout = str(row.get("layout") or "")
    if kind == "gemm":
        m, k, groups = _num(row, "m", integer=True), _num(row, "k", integer=True), 1.0
    else:
        groups = _num(row, "experts", integer=True)
        if "k-grouped" in layout:
            raise RowError(f"layout '{layout}': a training (weight-gradient) kernel, accumulating fp32 gradients; "
                           "the simulator models inference (forward) GEMMs only")
        m, k = _num(row, "tokens_per_expert"), _num(row, "k", integer=True)
    n = _num(row, "n", integer=True)
    b_out = 2.0
    bytes_metric = "weights" if row.get("metric") == "achieved_GB_s" else ""
    return {"m": m, "n": n, "k": k, "groups": groups, "fmt": fmt, "b_in": b, "b_out": b_out,
            "bytes_metric": bytes_metric, "w_bits": 4.0 if fmt == "fp4" else 8.0 * b}


def _attention_values(row: dict, hw: Hardware) -> dict[str, Any]:
    batch, S = _num(row, "batch", integer=True), _num(row, "seqlen", integer=True)
    d = _num(row, "head_dim", integer=True)
    heads = _num(row, "heads", integer=True, default=None)
    if heads is None:
        heads = max(1.0, FA_BENCH_DIM / d)
    causal = row.get("causal")
    if causal is not None and not isinstance(causal, bool):
        raise RowError(f"causal must be true or false, got {causal!r}")
    fmt = _fmt(row.get("dtype"), default="bf16")
    if fmt not in ("bf16", "fp16"):
        raise RowError(f"dtype {fmt}: only 16-bit attention is modelled")
    if fmt not in hw.peak_flops:
        fmt = "bf16" if "bf16" in hw.peak_flops else "fp16"
    legacy = bool(LEGACY_ATTENTION.search(str(row.get("library") or ""))) and hw.arch in LEGACY_ARCHS
    return {"batch": batch, "seqlen": S, "heads": heads, "kv_heads": _num(row, "kv_heads", default=heads),
            "head_dim": d, "causal": bool(causal), "fmt": fmt, "legacy": legacy}


def _decode_values(row: dict, hw: Hardware) -> dict[str, Any]:
    batch = _num(row, "batch", integer=True)
    topk = _num(row, "topk", integer=True, default=None)
    S = _num(row, "seqlen", integer=True, default=None) if topk is None else topk
    if S is None:
        raise RowError("seqlen missing")
    heads, d = _num(row, "heads", integer=True), _num(row, "head_dim", integer=True)
    dtype = str(row.get("dtype") or "").lower()
    mla = d == 576  # DeepSeek MLA: 512 latent + 64 rope, K and V share the latent
    b_kv = 1.0 if "fp8 kv" in dtype else 2.0
    fmt = "bf16" if "bf16" in hw.peak_flops else "fp16"
    kv_heads = 1.0 if mla else _num(row, "kv_heads", integer=True, default=heads)
    page = _num(row, "page_size", integer=True, default=None)
    if page is None:  # some rows state the page only in the dtype label ("paged KV, page_size 8", "block 64")
        m = re.search(r"paged kv[^)]*?(?:page_size|page|block)\s*(\d+)", dtype)
        page = float(m.group(1)) if m else 0.0
    return {"batch": batch, "seqlen": S, "s_q": _num(row, "s_q", integer=True, default=1.0), "heads": heads,
            "kv_heads": kv_heads, "head_dim": d, "mla": mla, "b_kv": b_kv, "fmt": fmt,
            "page_size": page}


#: A message size stated only in a row's notes ("matched 480/370 at ~8GiB"): the plateau rows of
#: slides, read at the size their notes name.
_NOTED_SIZE = re.compile(r"\bat\s*~?\s*(\d+(?:\.\d+)?)\s*(GiB|GB|MiB|MB)\b", re.I)
_SIZE_UNIT = {"gib": 2.0**30, "gb": 1e9, "mib": 2.0**20, "mb": 1e6}


def _collective_values(row: dict, kind: str) -> dict[str, Any]:
    noted = _NOTED_SIZE.search(str(row.get("notes") or "")) if row.get("message_bytes") is None else None
    S = float(noted.group(1)) * _SIZE_UNIT[noted.group(2).lower()] if noted else _num(row, "message_bytes")
    n = _num(row, "num_gpus", integer=True)
    if n < 2:
        raise RowError(f"num_gpus must be >= 2 for a collective, got {n:g}")
    algo = str(row.get("algo") or "").lower()
    # NVLS (in-switch reduction) turned off in the run: 'non-SHARP' in the GPU label or the algorithm
    no_nvls = "non-sharp" in f"{algo} {str(row.get('gpu') or '').lower()}"
    ring_only = ("ring" in algo and "caption says nvls" not in algo) or no_nvls
    return {"bytes": S, "n": n, "collective": kind, "ring_only": ring_only, "noted_size": bool(noted)}


def _network(row: dict, n: float, hw: Hardware) -> str:
    """The scale-out fabric a collective of ``n`` GPUs crosses when it is not the hardware file's own
    (explorer/fabrics.py, matched on the row's text), else ''."""
    if n <= hw.scaleup_domain:
        return ""
    text = " ".join(str(row.get(k) or "") for k in ("source", "notes", "library", "gpu"))
    f = fabric_in(text)
    return f.name if f is not None else ""


def on_own_fabric(c: Case) -> bool:
    """A case that runs on its hardware file's own fabrics (what a hardware kind's fit may use);
    a cloud fabric's rows fit that fabric (explorer/fabrics.py) instead."""
    return not (c.values or {}).get("fabric")


def _alltoall_values(row: dict, kind: str) -> dict[str, Any]:
    tokens, hidden, topk = _num(row, "tokens", integer=True), _num(row, "hidden", integer=True), \
        _num(row, "topk", integer=True)
    n = _num(row, "ep", integer=True, default=None) or _num(row, "num_gpus", integer=True)
    if n < 2:
        raise RowError(f"ep must be >= 2, got {n:g}")
    dtype = str(row.get("dtype") or "").lower()
    if kind == "alltoall_dispatch":
        fp8 = dtype.startswith("fp8")
    else:
        fp8 = "fp8" in dtype and "bf16 combine" not in dtype and not dtype.startswith("bf16")
    if not any(x in dtype for x in ("fp8", "bf16")):
        raise RowError(f"dtype '{row.get('dtype')}' not stated: token bytes unknown")
    token_bytes = hidden * (1.0 + 4.0 / FP8_SCALE_BLOCK) if fp8 else hidden * 2.0
    lib = str(row.get("library") or "")
    notes = str(row.get("notes") or "").lower()
    return {"tokens": tokens, "topk": topk, "hidden": hidden, "token_bytes": token_bytes, "n": n,
            "rdma_only": "pure rdma" in lib.lower() and "initial" in lib.lower(),
            "bytes_metric": "bottleneck" if "bottleneck" in notes else "logical"}


# --------------------------------------------------------------------------------------- predicting


def kernel_ideal(hw: Hardware) -> Hardware:
    """The physical roofline for kernels: every efficiency 1, every latency and overhead 0, the
    epilogue and softmax fully hidden, every protocol at full bandwidth (NVLS kept where it exists)."""
    return replace(hw, eta_compute=1.0, eta_memory=1.0, eta_network=1.0, eta_moe=1.0, kernel_launch_s=0.0,
                   step_overhead_s=0.0, per_sequence_s=0.0, kernel_latency_s=0.0, gemm_epilogue_exposed=0.0,
                   attention_eta=1.0, attention_tile_overhead=0.0, softmax_exposed=0.0, legacy_mma_fraction=1.0,
                   kv_page_overhead_bytes=0.0, collective_latency_s=0.0, ll_bw_fraction=0.0, ll128_bw_fraction=0.0,
                   ll_step_s=0.0, ll128_step_s=0.0, scaleup_latency_s=0.0, scaleout_latency_s=0.0,
                   scaleout_ll_step_s=0.0, scaleout_ll_fraction=0.0,
                   nvls_eta=1.0 if hw.nvls_eta > 0 else 0.0, nvls_latency_s=0.0)


def _arr(cases: list[Case], key: str) -> np.ndarray:
    return np.array([float(c.values[key]) for c in cases])


def _predict_gemm(cs: list[Case], h: Hardware) -> np.ndarray:
    M, N, K, G = _arr(cs, "m"), _arr(cs, "n"), _arr(cs, "k"), _arr(cs, "groups")
    b_in, b_out = _arr(cs, "b_in"), _arr(cs, "b_out")
    peak = np.array([h.peak_flops[c.values["fmt"]] for c in cs])
    tiles = np.array(h.gemm_tiles, dtype=float)
    n = len(cs)
    def col(x: float) -> np.ndarray:
        return np.full(n, float(x))

    g = gemm_cost(M, N, K, b_in, b_in, b_out, peak_flops=peak, hbm_bw=col(h.hbm_bw), sms=col(h.sms),
                  tiles_m=np.tile(tiles[:, 0], (n, 1)), tiles_n=np.tile(tiles[:, 1], (n, 1)),
                  max_split_k=col(h.max_split_k), eta_c=col(h.eta_compute), eta_m=col(h.eta_memory), launch_s=0.0,
                  groups=G, latency_s=h.kernel_latency_s, epilogue_exposed=h.gemm_epilogue_exposed)
    t = g.time_s
    w_bytes = G * K * N * _arr(cs, "w_bits") / 8.0
    weights = np.array([c.values["bytes_metric"] == "weights" for c in cs])
    return np.where(weights, w_bytes / t / 1e9, g.flops / t / 1e12)


def _predict_attention(cs: list[Case], h: Hardware) -> np.ndarray:
    b, S, nh, nkv, d = (_arr(cs, k) for k in ("batch", "seqlen", "heads", "kv_heads", "head_dim"))
    causal = np.array([bool(c.values["causal"]) for c in cs])
    legacy = np.where([bool(c.values["legacy"]) for c in cs], h.legacy_mma_fraction, 1.0)
    peak = np.array([h.peak_flops[c.values["fmt"]] for c in cs])
    t = prefill_attention_time(b, S, nh, nkv, d, d, causal, b_act=2.0, peak_flops=peak, eta=h.attn_eta,
                               hbm_bw=h.hbm_bw, eta_m=h.eta_memory, sms=float(h.sms), tile=h.attention_tile,
                               tile_overhead=h.attention_tile_overhead, exp_rate=h.exp_rate,
                               softmax_exposed=h.softmax_exposed, legacy=legacy,
                               epilogue_exposed=h.gemm_epilogue_exposed, latency_s=h.kernel_latency_s)
    flops = b * prefill_attention_flops(S, 0.0, nh, d, False, 0.0, causal=causal)
    return flops / t / 1e12


def _predict_decode(cs: list[Case], h: Hardware) -> np.ndarray:
    b, S, sq, nh, nkv, d, bkv, page = (_arr(cs, k) for k in
                                       ("batch", "seqlen", "s_q", "heads", "kv_heads", "head_dim", "b_kv", "page_size"))
    mla = np.array([bool(c.values["mla"]) for c in cs])
    kv_loc = np.where(mla, d, 2.0 * d * nkv)
    peak = np.array([h.peak_flops[c.values["fmt"]] for c in cs])
    t, flops, nbytes = decode_attention_time(b, S, sq, nh, nkv, d, kv_loc, bkv, mla, 512.0, 64.0, peak_flops=peak,
                                             eta=h.attn_eta, hbm_bw=h.hbm_bw, eta_m=h.eta_memory, sms=float(h.sms),
                                             page_size=page, page_overhead_bytes=h.kv_page_overhead_bytes,
                                             exp_rate=h.exp_rate, softmax_exposed=h.softmax_exposed,
                                             latency_s=h.kernel_latency_s)
    metric = np.array([c.metric for c in cs])
    return np.select([metric == "achieved_GB_s", metric == "latency_us"], [nbytes / t / 1e9, t * 1e6], flops / t / 1e12)


def _protocols(h: Hardware) -> list[tuple]:
    return protocols_of(h)


def _predict_collective(cs: list[Case], h: Hardware) -> np.ndarray:
    out = np.empty(len(cs))
    for kind in ("allreduce", "allgather", "reducescatter"):
        idx = [i for i, c in enumerate(cs) if c.values["collective"] == kind]
        if not idx:
            continue
        sub = [cs[i] for i in idx]
        S, n = _arr(sub, "bytes"), _arr(sub, "n")
        ring = np.array([bool(c.values["ring_only"]) for c in sub])
        t = np.empty(len(sub))
        for flag in (False, True):
            sel = ring == flag
            if np.any(sel):
                t[sel] = collective_s(S[sel], n[sel], domain=float(h.scaleup_domain), up_bw=h.scaleup_bw,
                                      up_step_s=h.scaleup_latency_s, out_bw=h.scaleout_bw,
                                      out_step_s=h.scaleout_latency_s, eta_n=h.eta_network, kind=kind,
                                      protocols=_protocols(h), call_s=h.collective_latency_s, nvls_eta=h.nvls_eta,
                                      nvls_latency_s=h.nvls_latency_s, mesh=h.scaleup_mesh, ring_only=flag)
        factor = 2.0 if kind == "allreduce" else 1.0
        busbw = factor * (n - 1.0) / n * S / t / 1e9
        lat = np.array([c.metric == "latency_us" for c in sub])
        out[idx] = np.where(lat, t * 1e6, busbw)
    return out


def _predict_alltoall(cs: list[Case], h: Hardware) -> np.ndarray:
    tok, k, tb, n = _arr(cs, "tokens"), _arr(cs, "topk"), _arr(cs, "token_bytes"), _arr(cs, "n")
    rdma_only = np.array([bool(c.values["rdma_only"]) for c in cs])
    t, logical, nvl, rdma = ep_alltoall_s(tok, k, tb, n, domain=float(h.scaleup_domain), up_bw=h.scaleup_bw,
                                          out_bw=h.scaleout_bw, eta_n=h.eta_network, up_step_s=h.scaleup_latency_s,
                                          out_step_s=h.scaleout_latency_s, call_s=h.collective_latency_s,
                                          rdma_only=rdma_only)
    bottleneck = np.where(rdma > 0, rdma, nvl)
    mode = np.array([c.values["bytes_metric"] for c in cs])
    metric = np.array([c.metric for c in cs])
    gbs = np.where(mode == "bottleneck", bottleneck, logical) / t / 1e9
    return np.where(metric == "latency_us", t * 1e6, gbs)


_PREDICTORS: dict[str, Callable[[list[Case], Hardware], np.ndarray]] = {
    "gemm": _predict_gemm, "grouped_gemm": _predict_gemm, "attention_fwd": _predict_attention,
    "decode_attention": _predict_decode, "allreduce": _predict_collective, "allgather": _predict_collective,
    "reducescatter": _predict_collective, "alltoall_dispatch": _predict_alltoall, "alltoall_combine": _predict_alltoall,
}
_FAMILY = {"grouped_gemm": "gemm", "allgather": "allreduce", "reducescatter": "allreduce",
           "alltoall_combine": "alltoall_dispatch"}


def predict_kernel_cases(cases: list[Case], hw_of: Callable[[str], Hardware] | None = None,
                         fabric_of: Callable[[str], Fabric] | None = None, ideal: bool = False) -> np.ndarray:
    """Predicted value of every case in its own metric and unit; NaN for unsupported cases.
    ``hw_of(name)`` gives the hardware to use (calibration passes candidates); default: the files.
    A case over a cloud fabric runs on that hardware with the fabric's scale-out hop
    (``fabric_of(name)``, default explorer/data/fabrics.yaml).  ``ideal``: on :func:`kernel_ideal`
    of that hardware."""
    get = hw_of or load_hardware
    get_fabric = fabric_of or (lambda n: fabrics()[n])
    out = np.full(len(cases), np.nan)
    groups: dict[tuple[str, str, str], list[int]] = {}
    for i, c in enumerate(cases):
        if c.supported and c.kind in _PREDICTORS:
            groups.setdefault((_FAMILY.get(c.kind, c.kind), c.hardware, str(c.values.get("fabric") or "")),
                              []).append(i)
    for (fam, name, fabric), idx in groups.items():
        h = with_fabric(get(name), get_fabric(fabric) if fabric else None)
        if ideal:
            h = kernel_ideal(h)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[idx] = _PREDICTORS[fam]([cases[i] for i in idx], h)
    return out


def roofline_kernel_cases(cases: list[Case], hw_of: Callable[[str], Hardware] | None = None) -> np.ndarray:
    """The same cases on :func:`kernel_ideal` hardware: the best any kernel could do (for latency
    metrics, the least time)."""
    return predict_kernel_cases(cases, hw_of, ideal=True)


def errors(cases: list[Case], pred: np.ndarray) -> np.ndarray:
    """``predicted/measured - 1`` per case (NaN where unsupported)."""
    meas = np.array([c.measured for c in cases])
    return pred / meas - 1.0


def summarize_kernels(cases: list[Case], pred: np.ndarray) -> dict[str, Any]:
    """Median / p90 |error| by kernel kind, by regime and by hardware (JSON-ready)."""
    err = errors(cases, pred)
    ok = np.array([c.supported for c in cases]) & np.isfinite(err)

    def stats(mask: np.ndarray) -> dict[str, Any]:
        e = err[mask & ok]
        if not len(e):
            return {"n": 0}
        a = np.abs(e)
        return {"n": int(len(e)), "median_abs_error": float(np.median(a)), "p90_abs_error": float(np.percentile(a, 90)),
                "median_signed_error": float(np.median(e))}

    kinds = np.array([c.kind for c in cases])
    regimes = np.array([c.regime for c in cases])
    hws = np.array([c.hardware for c in cases])
    return {
        "cases": len(cases), "supported": int(ok.sum()),
        "all": stats(np.ones(len(cases), bool)),
        "by_kind": {k: stats(kinds == k) for k in sorted(set(kinds[ok]))},
        "by_regime": {k: stats(regimes == k) for k in sorted(set(regimes[ok]))},
        "by_hardware": {k: stats(hws == k) for k in sorted(set(hws[ok]))},
        "unsupported": [{"id": c.id, "reason": c.reason} for c, o in zip(cases, ok, strict=True) if not o],
    }


#: Target groups of the kernel bar: median |error| per group.
TARGETS = {
    "gemm": (("gemm", "grouped_gemm"), 0.15),
    "attention": (("attention_fwd", "decode_attention"), 0.20),
    "collective": (("allreduce", "allgather", "reducescatter", "alltoall_dispatch", "alltoall_combine"), 0.20),
}


def target_medians(cases: list[Case], pred: np.ndarray) -> dict[str, tuple[float, int, float]]:
    """{group: (median |error|, n, target)} for :data:`TARGETS`."""
    err = np.abs(errors(cases, pred))
    out = {}
    for name, (kinds, target) in TARGETS.items():
        sel = np.array([c.supported and c.kind in kinds for c in cases]) & np.isfinite(err)
        out[name] = (float(np.median(err[sel])) if sel.any() else float("nan"), int(sel.sum()), target)
    return out


__all__ = ["is_kernels_file", "parse_kernel_rows", "load_kernel_cases", "predict_kernel_cases",
           "roofline_kernel_cases", "kernel_ideal", "summarize_kernels", "target_medians", "DEFAULT_KERNELS"]
