"""Hardware specs: one GPU kind and its interconnect, loaded from ``hardware/<name>.yaml``.

Files use human units (TFLOPS, GB, TB/s, GB/s, microseconds); :class:`Hardware` holds SI units
(FLOP/s, bytes, bytes/s, seconds), converted once here.  Every section of a file carries a
``source:``; efficiency factors say whether they are an assumption or a calibration.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import numpy as np

from explorer.errors import SpecError, unknown
from explorer.precision import TENSOR_FORMATS
from explorer.specio import Section, find_named, read_yaml
from explorer.units import GB, GB_PER_S, TB_PER_S, TFLOPS, US

#: Folder of the shipped hardware files (the repository's top-level ``hardware/``).
HARDWARE_DIR = Path(__file__).resolve().parent.parent / "hardware"

EFFICIENCY_KEYS = ("compute", "memory", "network")

#: The ``kernels:`` section of a hardware file (kernel-level cost parameters, explorer/kernel_fit.py):
#: YAML key -> (Hardware attribute, factor from the file's unit to SI, default in the file's unit).
#: The defaults reproduce the cost model as it was before the section existed (no fixed kernel
#: latency, a fully overlapped epilogue, attention at ``eta_compute``, no softmax cost, one
#: bandwidth-only protocol for collectives), so files without the section load and cost as before.
KERNEL_PARAMS: dict[str, tuple[str, float, float]] = {
    "kernel_latency_us": ("kernel_latency_s", US, 0.0),
    "gemm_epilogue_exposed": ("gemm_epilogue_exposed", 1.0, 0.0),
    "attention_eta": ("attention_eta", 1.0, 0.0),
    "attention_tile": ("attention_tile", 1.0, 128.0),
    "attention_tile_overhead": ("attention_tile_overhead", 1.0, 0.0),
    "exp_T_per_s": ("exp_rate", 1e12, 0.0),
    "softmax_exposed": ("softmax_exposed", 1.0, 0.0),
    "legacy_mma_fraction": ("legacy_mma_fraction", 1.0, 1.0),
    "kv_page_overhead_bytes": ("kv_page_overhead_bytes", 1.0, 0.0),
    "collective_latency_us": ("collective_latency_s", US, 0.0),
    "ll_bw_fraction": ("ll_bw_fraction", 1.0, 0.0),
    "ll128_bw_fraction": ("ll128_bw_fraction", 1.0, 0.0),
    "ll_step_us": ("ll_step_s", US, 0.0),
    "ll128_step_us": ("ll128_step_s", US, 0.0),
    "nvls_eta": ("nvls_eta", 1.0, 0.0),
    "nvls_latency_us": ("nvls_latency_s", US, 0.0),
}
KERNEL_FLAGS: dict[str, str] = {"scaleup_mesh": "scaleup_mesh"}
#: Architecture families whose kinds lend each other fitted values (same SM/CU generation, same
#: kernel libraries): the kernel fit's priors (explorer/kernel_fit.py), the served-only factors of a
#: kind without serving curves (explorer/calibrate.py ``family_serving_prior``) and a runtime's
#: fallback on a kind it was never fitted on (explorer/runtime.py ``Runtime.fit_for``).  The PCIe
#: workstation parts -- Ada (sm_89) and Blackwell GB202 (sm_120) -- share mma.sync tensor cores, GDDR
#: and no NVLink; sm_120 runs none of B200's sm_100 (tcgen05/TMEM) kernels, so it is not "blackwell".
FAMILIES = {"hopper": "hopper", "blackwell": "blackwell", "blackwell-ultra": "blackwell", "cdna3": "cdna",
            "cdna4": "cdna", "ampere": "ampere", "ada": "workstation", "blackwell-sm120": "workstation",
            "gaudi2": "gaudi", "gaudi3": "gaudi"}
#: the software stack a family's kernels come from (CUDA libraries or ROCm's): a serving runtime's
#: fitted residuals (its kernels, its host loop) carry over inside a vendor before across vendors
VENDORS = {"hopper": "nvidia", "blackwell": "nvidia", "ampere": "nvidia", "workstation": "nvidia", "cdna": "amd",
           "gaudi": "intel"}


@dataclass(frozen=True)
class Hardware:
    """One GPU kind, SI units.  ``peak_flops`` holds only the tensor formats the GPU supports natively."""

    name: str
    display_name: str
    arch: str
    peak_flops: dict[str, float]  # FLOP/s, dense, per tensor format
    sms: int  # streaming multiprocessors (NVIDIA) or compute units (AMD)
    gemm_tiles: tuple[tuple[int, int], ...]  # (Tm, Tn) output tiles the GEMM library can pick from
    max_split_k: int  # largest split-K factor a skinny GEMM may use to fill the SMs
    hbm_bytes: float
    hbm_bw: float  # bytes/s
    usable_fraction: float  # share of HBM the serving runtime may use
    reserved_bytes: float  # runtime reserve (CUDA context, library workspaces)
    scaleup_bw: float  # bytes/s per GPU per direction inside the NVLink/xGMI domain
    scaleup_domain: int  # GPUs in one NVLink/xGMI domain
    scaleup_latency_s: float  # per-hop latency of a collective step inside the domain
    scaleout_bw: float  # bytes/s per GPU per direction across domains
    scaleout_latency_s: float
    kernel_launch_s: float  # per-kernel fixed cost (launch + tail) under CUDA graphs
    step_overhead_s: float  # per decode step: scheduler, sampling, host sync
    per_sequence_s: float  # per sequence per decode step: host-side bookkeeping of the serving runtime
    eta_compute: float  # achieved / peak FLOP/s on large GEMMs
    eta_memory: float  # achieved / peak HBM bandwidth on streaming kernels
    eta_network: float  # achieved / peak link bandwidth on large collectives
    eta_moe: float  # extra efficiency of grouped expert GEMMs (routing, permutation, uneven groups)
    efficiency_kind: str  # 'assumption' or 'calibration'
    aliases: tuple[str, ...] = ()
    path: str = ""
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    #: compute efficiency of weight-only GEMMs (int8/int4/MXFP4 weights dequantized to the activation
    #: format in the kernel) relative to plain ones of that format; a serving residual fitted by
    #: calibration (``efficiency.dequant``), 1 = no penalty.  Memory-bound GEMMs are unaffected.
    eta_dequant: float = 1.0
    #: fixed seconds per expert group of a grouped (MoE) GEMM: each touched expert's tiles start their
    #: own weight pipeline (prologue, scheduling); fitted by calibration (``efficiency.moe_group_us``)
    moe_group_s: float = 0.0
    #: share of the kernel benchmarks' fixed GEMM latency (``kernels.kernel_latency_us``) that a GEMM
    #: of a served step pays (``efficiency.served_latency``; 1 = all of it, the default).  The
    #: microbenchmarks launch kernels one by one, and on ROCm their fitted fixed cost (18-25 us on
    #: MI300X/MI325X/MI355X against 3.5-6.5 us on NVIDIA kinds) carries HIP's dispatch cost, which a
    #: graph-captured serving step does not pay per GEMM (its per-kernel gap is ``kernel_launch_s``).
    #: A serving residual fitted by calibration on the kind's served rows, bounded by 1.
    served_latency: float = 1.0
    # --- kernel-level cost parameters (``kernels:`` section; see KERNEL_PARAMS for the defaults)
    kernel_latency_s: float = 0.0  # fixed time of one GEMM/attention kernel run back to back (prologue, fill, tail)
    gemm_epilogue_exposed: float = 0.0  # share of a GEMM's output write that does not overlap its main loop
    attention_eta: float = 0.0  # achieved/peak of attention's matmuls (FA3-class kernel); 0 = use eta_compute
    attention_tile: float = 128.0  # query (and key) rows per attention block
    attention_tile_overhead: float = 0.0  # fixed cost of one query tile, in key-block units
    exp_rate: float = 0.0  # exponentials/s of the special-function units; 0 = softmax not costed
    softmax_exposed: float = 0.0  # share of the softmax exponential time not hidden under the matmuls
    legacy_mma_fraction: float = 1.0  # tensor throughput of pre-native kernels (mma.sync on Hopper/Blackwell) / peak
    kv_page_overhead_bytes: float = 0.0  # extra bytes-equivalent per paged-KV page read (per head, K or V)
    collective_latency_s: float = 0.0  # fixed time of one collective call (launch, proxy, synchronisation)
    ll_bw_fraction: float = 0.0  # NCCL LL protocol bandwidth / Simple's; 0 = protocol not modelled
    ll128_bw_fraction: float = 0.0  # NCCL LL128 protocol bandwidth / Simple's; 0 = protocol not modelled
    ll_step_s: float = 0.0  # per ring step latency of LL inside the scale-up domain
    ll128_step_s: float = 0.0  # per ring step latency of LL128 inside the scale-up domain
    nvls_eta: float = 0.0  # achieved/ideal bandwidth of an in-switch (NVLink SHARP) all-reduce; 0 = no NVLS
    nvls_latency_s: float = 0.0  # fixed latency of an NVLS all-reduce
    #: the scale-out fabric's own protocol figures (explorer/fabrics.py; 0 = the scale-up figures, as
    #: on InfiniBand): NCCL LL's per-step latency across domains and its bandwidth / Simple's there
    scaleout_ll_step_s: float = 0.0
    scaleout_ll_fraction: float = 0.0
    fabric: str = ""  # the scale-out fabric when not the file's own (explorer/fabrics.py)
    scaleup_mesh: bool = False  # point-to-point links (xGMI mesh), no switch: n GPUs get (n-1)/(domain-1) of the bw
    #: the scale-up fabric lets a serving runtime's custom all-reduce kernels load and store peer
    #: memory (NVLink, xGMI); PCIe-only kinds say ``interconnect.peer_allreduce: false`` (vLLM turns
    #: its custom all-reduce off without full NVLink P2P): explorer/costs/comm.py custom_allreduce_s
    peer_allreduce: bool = True
    # --- cost (``power:`` and ``price:`` sections; explorer/cost.py); NaN = not given in the file
    board_power_w: float = float("nan")  # W, the board's TDP/TGP (datasheet)
    usd_per_gpu_hour: float = float("nan")  # USD per GPU-hour: a dated market-price assumption, editable

    @property
    def label(self) -> str:
        """The kind's name as results print it: ``NAME@FABRIC`` with a cloud fabric (explorer/fabrics.py)."""
        return f"{self.name}@{self.fabric}" if self.fabric else self.name

    @property
    def family(self) -> str:
        """The architecture family (:data:`FAMILIES`; an unlisted ``arch`` is its own family)."""
        return FAMILIES.get(self.arch, self.arch)

    @property
    def vendor(self) -> str:
        """The family's software stack (:data:`VENDORS`; an unlisted family is its own)."""
        return VENDORS.get(self.family, self.family)

    @property
    def attn_eta(self) -> float:
        """Attention's matmul efficiency: ``attention_eta`` when the file sets it, else ``eta_compute``."""
        return self.attention_eta if self.attention_eta > 0 else self.eta_compute

    def supports(self, tensor_format: str) -> bool:
        return tensor_format in self.peak_flops

    @property
    def served_gemm_latency_s(self) -> float:
        """Fixed seconds a GEMM of a served step pays besides its roofline time (:attr:`served_latency`
        of the kernel benchmarks' ``kernel_latency_s``)."""
        return self.kernel_latency_s * self.served_latency

    def with_efficiency(self, **factors: float) -> Hardware:
        """A copy with other efficiency factors or overheads (used by calibration and tests)."""
        return replace(self, **cast(dict[str, Any], factors))


def _load_file(path: Path) -> Hardware:
    where = str(path)
    data = read_yaml(path)
    top = Section(data, where)
    top.check_keys(
        {"name", "display_name", "aliases", "arch", "compute", "memory", "interconnect", "overheads",
         "kernels", "efficiency", "power", "price", "notes"}
    )
    name = top.string("name")
    aliases = top.names("aliases")

    c = top.section("compute")
    c.check_keys({"peak_TFLOPS", "sms", "gemm_tiles", "max_split_k", "source", "notes"})
    c.string("source")
    peaks_sec = c.section("peak_TFLOPS")
    peaks_sec.check_keys(set(TENSOR_FORMATS) | {"int8"})
    peak_flops = {}
    for fmt in TENSOR_FORMATS:
        v = peaks_sec.number(fmt, None, min_value=0, min_exclusive=True)
        if v is not None:
            peak_flops[fmt] = float(v) * TFLOPS
    if "bf16" not in peak_flops and "fp16" not in peak_flops:
        raise SpecError(where, "compute.peak_TFLOPS", "needs at least bf16 or fp16")
    tiles_raw = c.raw("gemm_tiles")
    if not isinstance(tiles_raw, list) or not tiles_raw:
        raise SpecError(where, "compute.gemm_tiles", f"expected a list of [Tm, Tn] pairs, got {tiles_raw!r}")
    tiles = []
    for i, t in enumerate(tiles_raw):
        if not (isinstance(t, list) and len(t) == 2 and all(isinstance(x, int) and x > 0 for x in t)):
            raise SpecError(where, f"compute.gemm_tiles[{i}]", f"expected [Tm, Tn] positive integers, got {t!r}")
        tiles.append((int(t[0]), int(t[1])))

    m = top.section("memory")
    m.check_keys({"hbm_GB", "hbm_TB_per_s", "usable_fraction", "reserved_GB", "source", "notes"})
    m.string("source")
    n = top.section("interconnect")
    n.check_keys(
        {"scaleup_GB_per_s", "scaleup_domain", "scaleup_latency_us", "scaleout_GB_per_s",
         "scaleout_latency_us", "peer_allreduce", "source", "notes"}
    )
    n.string("source")
    peer_ar = n.boolean("peer_allreduce", True)
    o = top.section("overheads")
    o.check_keys({"kernel_launch_us", "step_us", "per_sequence_us", "source", "notes"})
    o.string("source")
    kern = _kernel_params(top.section("kernels", required=False))
    e = top.section("efficiency")
    e.check_keys(set(EFFICIENCY_KEYS) | {"moe", "dequant", "moe_group_us", "served_latency", "kind", "source", "notes",
                                         "calibration", "transferred"})
    e.string("source")
    kind = e.string("kind", choices={"assumption", "calibration"})

    return Hardware(
        name=name,
        display_name=top.string("display_name", name),
        arch=top.string("arch"),
        peak_flops=peak_flops,
        sms=c.number("sms", integer=True, min_value=1),
        gemm_tiles=tuple(tiles),
        max_split_k=c.number("max_split_k", 16, integer=True, min_value=1),
        hbm_bytes=m.number("hbm_GB", min_value=0, min_exclusive=True) * GB,
        hbm_bw=m.number("hbm_TB_per_s", min_value=0, min_exclusive=True) * TB_PER_S,
        usable_fraction=m.number("usable_fraction", min_value=0, max_value=1, min_exclusive=True),
        reserved_bytes=m.number("reserved_GB", min_value=0) * GB,
        scaleup_bw=n.number("scaleup_GB_per_s", min_value=0, min_exclusive=True) * GB_PER_S,
        scaleup_domain=n.number("scaleup_domain", integer=True, min_value=1),
        scaleup_latency_s=n.number("scaleup_latency_us", min_value=0) * US,
        scaleout_bw=n.number("scaleout_GB_per_s", min_value=0, min_exclusive=True) * GB_PER_S,
        scaleout_latency_s=n.number("scaleout_latency_us", min_value=0) * US,
        kernel_launch_s=o.number("kernel_launch_us", min_value=0) * US,
        step_overhead_s=o.number("step_us", min_value=0) * US,
        per_sequence_s=o.number("per_sequence_us", 0.0, min_value=0) * US,
        eta_compute=e.number("compute", min_value=0, max_value=1, min_exclusive=True),
        eta_memory=e.number("memory", min_value=0, max_value=1, min_exclusive=True),
        eta_network=e.number("network", min_value=0, max_value=1, min_exclusive=True),
        eta_moe=e.number("moe", 1.0, min_value=0, max_value=1, min_exclusive=True),
        eta_dequant=e.number("dequant", 1.0, min_value=0, max_value=1, min_exclusive=True),
        moe_group_s=e.number("moe_group_us", 0.0, min_value=0, max_value=100) * US,
        served_latency=e.number("served_latency", 1.0, min_value=0, max_value=1, min_exclusive=True),
        efficiency_kind=kind,
        aliases=tuple(a.lower() for a in aliases),
        path=where,
        raw=dict(data),
        peer_allreduce=peer_ar,
        **kern,
        **_cost_params(top),
    )


def _cost_params(top: Section) -> dict[str, Any]:
    """Board power (``power: {board_W, source}``) and price (``price: {usd_per_gpu_hour, date, kind,
    source}``), both optional: a file without them loads, and its cost columns are NaN."""
    out: dict[str, Any] = {}
    pw = top.section("power", required=False)
    pw.check_keys({"board_W", "source", "notes"})
    if pw.data:
        pw.string("source")
        out["board_power_w"] = float(pw.number("board_W", min_value=0, min_exclusive=True, max_value=100_000))
    pr = top.section("price", required=False)
    pr.check_keys({"usd_per_gpu_hour", "date", "kind", "source", "notes"})
    if pr.data:
        pr.string("source")
        pr.string("date")
        pr.string("kind", choices={"market_assumption"})
        out["usd_per_gpu_hour"] = float(pr.number("usd_per_gpu_hour", min_value=0, min_exclusive=True,
                                                  max_value=10_000))
    return out


def _kernel_params(k: Section) -> dict[str, Any]:
    """Hardware attributes from the optional ``kernels:`` section (SI units; defaults when absent)."""
    k.check_keys(set(KERNEL_PARAMS) | set(KERNEL_FLAGS) | {"source", "notes", "fit"})
    if k.data:
        k.string("source")
    out: dict[str, Any] = {}
    for key, (attr, scale, default) in KERNEL_PARAMS.items():
        hi = 1.0 if key in ("gemm_epilogue_exposed", "attention_eta", "softmax_exposed", "legacy_mma_fraction",
                            "ll_bw_fraction", "ll128_bw_fraction", "nvls_eta") else None
        out[attr] = float(k.number(key, default, min_value=0, max_value=hi)) * scale
    if out["attention_tile"] < 1:
        raise SpecError(k.where, k.key("attention_tile"), f"must be >= 1, got {out['attention_tile']!r}")
    for key, attr in KERNEL_FLAGS.items():
        out[attr] = k.boolean(key, False)
    return out


_CACHE: dict[str, Hardware] = {}
_BY_STEM: dict[str, Hardware] = {}  # shipped files by file stem (explorer.specio.find_named)


def hardware_files(directory: Path = HARDWARE_DIR) -> list[Path]:
    return sorted(directory.glob("*.yaml"))


def list_hardware(directory: Path = HARDWARE_DIR) -> list[Hardware]:
    """Every shipped hardware file, parsed (a malformed file raises, naming itself)."""
    return [load_hardware(str(p)) for p in hardware_files(directory)]


def load_hardware(name_or_path: str | Hardware) -> Hardware:
    """A hardware kind by name or alias (``h200``, ``b200``) or by path to a YAML file;
    ``NAME@FABRIC`` (``h100@aws-efa``) is the kind with that cloud scale-out fabric between nodes."""
    if isinstance(name_or_path, Hardware):
        return name_or_path
    key = str(name_or_path)
    if key in _CACHE:
        return _CACHE[key]
    p = Path(key)
    try:
        is_file = p.suffix in (".yaml", ".yml") or p.exists()
    except (OSError, ValueError):  # a name too long for the filesystem, or with a NUL: not a path
        is_file = False
    if is_file:
        hw = _load_file(p)
        _CACHE[key] = hw
        return hw
    if "@" in key:  # KIND@FABRIC: the kind with a cloud scale-out fabric between nodes (explorer/fabrics.py)
        from explorer.fabrics import get_fabric, with_fabric

        base, _, fabric = key.rpartition("@")
        hw = with_fabric(load_hardware(base), get_fabric(fabric, "--hardware"))
        _CACHE[key] = hw
        return hw
    found, names = find_named(HARDWARE_DIR, key.lower(), _load_file, _BY_STEM)
    if found is None:
        raise unknown("--hardware", None, "hardware", name_or_path, names)
    _CACHE[key] = found
    return found


@dataclass(frozen=True)
class HardwareTable:
    """Several hardware kinds stacked into arrays, so design points can index them by ``hw_idx``."""

    kinds: tuple[Hardware, ...]

    def column(self, attr: str) -> np.ndarray:
        return np.array([float(getattr(h, attr)) for h in self.kinds])

    def peak_matrix(self) -> np.ndarray:
        """[n_kinds, n_tensor_formats] FLOP/s; NaN where a format is unsupported."""
        return np.array([[h.peak_flops.get(f, np.nan) for f in TENSOR_FORMATS] for h in self.kinds])

    def index(self, name: str) -> int:
        for i, h in enumerate(self.kinds):
            if h.name == name:
                return i
        raise KeyError(name)
