"""Number formats: bytes per element and which tensor-core peak a GEMM runs at.

A design point has three formats: weights, activations and KV cache.  Tensor formats are those the
GPU multiplies natively (a hardware file lists a peak for each it supports); weight-only formats
(int8, int4) are stored compactly and dequantized to the activation format inside the GEMM, so they
need no tensor-core support but run at the activation format's peak.

A format the hardware lacks is never emulated: the design point is infeasible with a reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from explorer.errors import SpecError, unknown

#: Tensor-core formats, in the column order of ``Hardware.peak_flops`` arrays.
TENSOR_FORMATS: tuple[str, ...] = ("bf16", "fp16", "fp8", "fp4")


@dataclass(frozen=True)
class Format:
    name: str
    bytes_per_element: float
    tensor: str | None  # tensor-core format it multiplies in; None = weight-only (dequantized)
    note: str


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("bf16", 2.0, "bf16", "IEEE-style bfloat16"),
        Format("fp16", 2.0, "fp16", "IEEE half"),
        Format("fp8", 1.0, "fp8", "E4M3 with per-tensor scales (scale bytes negligible)"),
        Format(
            "fp4",
            0.5625,
            "fp4",
            "NVFP4: 4-bit E2M1 + one FP8 (E4M3) scale per 16 elements = 4.5 bits "
            "(NVIDIA, 'Introducing NVFP4', developer blog 2025)",
        ),
        Format(
            "mxfp4",
            0.53125,
            "fp4",
            "OCP MXFP4: 4-bit E2M1 + one E8M0 scale per 32 elements = 4.25 bits (OCP MX spec v1.0)",
        ),
        Format(
            "mxfp4-wo",
            0.53125,
            None,
            "MXFP4 weights dequantized in the GEMM (weight-only) on GPUs without FP4 tensor cores, as "
            "gpt-oss runs on Hopper (Triton MoE kernels)",
        ),
        Format(
            "int8",
            1.0,
            None,
            "weight-only int8, per-channel scales (negligible); dequantized to the activation format",
        ),
        Format(
            "int4",
            0.625,
            None,
            "weight-only int4, group 32 with a bf16 scale and zero per group = 5 bits (gpt-fast int4 g32)",
        ),
    )
}

#: Shorthands for a whole precision policy: name -> (weights, activations, kv_cache).
POLICIES: dict[str, tuple[str, str, str]] = {
    "bf16": ("bf16", "bf16", "bf16"),
    "fp16": ("fp16", "fp16", "fp16"),
    "fp8": ("fp8", "fp8", "fp8"),
    # NVFP4 serving keeps an FP8 KV cache (TensorRT-LLM's NVFP4 recipes).
    "fp4": ("fp4", "fp4", "fp8"),
    "nvfp4": ("fp4", "fp4", "fp8"),
    "w4a8": ("fp4", "fp8", "fp8"),
    "mxfp4": ("mxfp4", "fp8", "fp8"),
    "w8a16": ("int8", "bf16", "bf16"),
    # MXFP4 checkpoints (gpt-oss) on GPUs without FP4 tensor cores: weights dequantized to bf16
    "mxfp4-w4a16": ("mxfp4-wo", "bf16", "fp8"),
    "w4a16": ("int4", "bf16", "bf16"),
}


@dataclass(frozen=True)
class Precision:
    weights: str
    activations: str
    kv_cache: str

    @property
    def label(self) -> str:
        for name, triple in POLICIES.items():
            if triple == (self.weights, self.activations, self.kv_cache):
                return name
        return f"w:{self.weights}/a:{self.activations}/kv:{self.kv_cache}"

    @property
    def compute(self) -> str:
        return compute_format(self.weights, self.activations)


#: Spellings of the tensor formats in run labels besides the short names (dtype names as PyTorch,
#: vLLM ``--dtype`` / ``--kv-cache-dtype`` and ModelOpt write them; the FP8 / FP4 element encodings)
_FORMAT_SPELLINGS = (("fp4", ("fp4", "float4", "e2m1")), ("fp8", ("fp8", "float8", "e4m3", "e5m2")),
                     ("bf16", ("bf16", "bfloat16")), ("fp16", ("fp16", "float16")))


def tensor_format_in(label: object) -> str | None:
    """The tensor-core format a free-text precision label names (``"FP8 (fp8_block ...)"`` -> fp8,
    ``"NVFP4"`` / ``"MXFP4"`` -> fp4, ``"bfloat16"`` -> bf16, ``"float8_e4m3fn"`` -> fp8), or None.
    FP4 before FP8 before BF16 before FP16."""
    s = str(label or "").lower()
    for fmt, spellings in _FORMAT_SPELLINGS:
        if any(w in s for w in spellings):
            return fmt
    return None


def get_format(name: str, where: str = "precision", key: str | None = None) -> Format:
    f = FORMATS.get(str(name).lower())
    if f is None:
        raise unknown(where, key, "number format", name, FORMATS)
    return f


def parse_precision(value: object, where: str = "precision", key: str | None = None) -> Precision:
    """Accept a policy name ('fp8'), 'w:fp4/a:fp8/kv:fp8', or a mapping with weights/activations/kv_cache."""
    if isinstance(value, Precision):
        return value
    if isinstance(value, dict):
        allowed = {"weights", "activations", "kv_cache"}
        extra = set(value) - allowed
        if extra:
            raise SpecError(where, key, f"unknown precision key(s) {sorted(extra)}; allowed: {sorted(allowed)}")
        base = POLICIES["bf16"]
        w = str(value.get("weights", base[0])).lower()
        a = str(value.get("activations", w if FORMATS.get(w) and FORMATS[w].tensor else "bf16")).lower()
        kv = str(value.get("kv_cache", a)).lower()
        triple = (w, a, kv)
    elif isinstance(value, str) and "/" in value:
        parts = dict(p.split(":", 1) for p in value.lower().split("/") if ":" in p)
        names = {"w": "weights", "a": "activations", "kv": "kv_cache"}
        if set(parts) - set(names):
            raise SpecError(where, key, f"cannot parse precision '{value}'; write e.g. 'w:fp4/a:fp8/kv:fp8'")
        return parse_precision({names[k]: v for k, v in parts.items()}, where, key)
    else:
        name = str(value).lower()
        if name not in POLICIES:
            raise unknown(where, key, "precision", value, POLICIES)
        triple = POLICIES[name]
    fw, fa, fkv = (get_format(n, where, key) for n in triple)
    if fa.tensor is None:
        raise SpecError(where, key, f"activations cannot be weight-only format '{fa.name}'; use bf16, fp16, fp8 or fp4")
    if fkv.tensor is None:
        raise SpecError(where, key, f"kv_cache cannot be weight-only format '{fkv.name}'; use bf16, fp16, fp8 or fp4")
    return Precision(fw.name, fa.name, fkv.name)


def with_kv_cache(value: object, kv_cache: str) -> str:
    """The label of precision ``value`` with its KV cache in format ``kv_cache`` (a policy name where
    one fits: ``with_kv_cache("fp8", "bf16")`` -> ``"w:fp8/a:fp8/kv:bf16"``)."""
    p = parse_precision(value)
    return Precision(p.weights, p.activations, get_format(kv_cache, "precision", "kv_cache").name).label


def compute_format(weights: str, activations: str) -> str:
    """Tensor format the GEMM runs in: the wider of the two tensor formats (weight-only -> activations)."""
    fw, fa = FORMATS[weights], FORMATS[activations]
    if fw.tensor is None:
        return str(fa.tensor)
    # The wider (more bytes) format sets the math: W4A8 runs FP8 MMA, W8A16 runs BF16 MMA.
    return str(fw.tensor if fw.bytes_per_element >= fa.bytes_per_element else fa.tensor)


def tensor_formats_needed(p: Precision) -> set[str]:
    """Tensor formats the hardware must support natively for this precision policy."""
    need = {compute_format(p.weights, p.activations), str(FORMATS[p.activations].tensor)}
    for n in (p.weights, p.kv_cache):
        t = FORMATS[n].tensor
        if t is not None:
            need.add(t)
    return need


def compute_index(p: Precision) -> int:
    return TENSOR_FORMATS.index(p.compute)


def bytes_arrays(precisions: list[Precision]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(b_w, b_a, b_kv, compute_format_index) arrays for a list of policies."""
    bw = np.array([FORMATS[p.weights].bytes_per_element for p in precisions])
    ba = np.array([FORMATS[p.activations].bytes_per_element for p in precisions])
    bkv = np.array([FORMATS[p.kv_cache].bytes_per_element for p in precisions])
    ci = np.array([compute_index(p) for p in precisions], dtype=np.int64)
    return bw, ba, bkv, ci
