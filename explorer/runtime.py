"""Serving-runtime profiles: how TensorRT-LLM, vLLM and SGLang turn model steps into a served front.

One profile per file in the repository's ``runtimes/`` folder (``trtllm.yaml``, ``vllm.yaml``,
``sglang.yaml``, ``gpt-fast.yaml``).  A profile describes mechanisms, not a fudge number:

* **scheduling of prompts**: ``mixed`` (prompt chunks share the decode step: TensorRT-LLM inflight
  batching, vLLM V1) or ``separate`` (prefill batches run as their own steps: SGLang's default);
* **tokens per step** (the prefill chunk budget) and the largest running batch;
* **KV admission**: ``reserve_full`` (a request reserves ISL+OSL of KV: TensorRT-LLM's
  GUARANTEED_NO_EVICT) or ``on_demand`` (blocks as tokens are produced: vLLM, SGLang; a running
  sequence holds ISL + OSL/2 tokens on average);
* **CUDA-graph batch padding**: decode batches padded to the captured sizes 1, 2, 4, then multiples
  of ``step`` up to ``max_batch``;
* **host work**: per step, per running sequence per step, and per request (TTFT only);
* **attention kernels**: named, with one efficiency residual;
* **kernel fusions**: ``fusion.allreduce_norm`` -- the tensor-parallel all-reduce kernels also do
  the residual add and RMSNorm that follow them (TensorRT-LLM's ``AllReduceFusionOp.RESIDUAL_RMS_NORM``),
  so a layer launches two kernels fewer at ``tp > 1``.

Host costs and the attention residual are fitted by ``explorer calibrate`` per hardware kind and
recorded in the profile's ``fitted:`` section; the ``overheads:``/``attention:`` values are the
priors and the fallback for hardware without a fit.  :func:`runtime_columns` turns (runtime,
hardware) pairs into the numeric design columns the simulator reads (``rt_*``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from explorer.errors import SpecError, unknown
from explorer.hardware import Hardware, load_hardware
from explorer.specio import Section, find_named, read_yaml
from explorer.units import US

#: Folder of the shipped runtime profiles (the repository's top-level ``runtimes/``).
RUNTIME_DIR = Path(__file__).resolve().parent.parent / "runtimes"
#: The runtime a design point uses when none is named (TensorRT-LLM, as the serving limits were before).
DEFAULT_RUNTIME = "trtllm"
#: Fitted per (runtime, hardware): name -> (unit scale from the YAML's unit to SI, lower, upper bound in SI).
FITTED_KEYS: dict[str, tuple[float, float, float]] = {
    "step_us": (US, 0.0, 5e-3),
    "per_sequence_us": (US, 0.0, 100e-6),
    "per_request_us": (US, 0.0, 2.0),
    "attention": (1.0, 0.2, 1.0),
    "compute": (1.0, 0.2, 1.0),
    "memory": (1.0, 0.2, 1.0),
    "memory_moe": (1.0, 0.2, 1.0),
    # the serving front end's host work (OpenAI server, detokenisation, streaming): served runs only
    "serve_step_us": (US, 0.0, 20e-3),
    "serve_per_sequence_us": (US, 0.0, 300e-6),
}
#: fitted keys that are efficiency residuals (bounded to (0, 1]: a runtime never beats the kind's roofline)
RESIDUAL_KEYS = ("attention", "compute", "memory", "memory_moe")
SCHEDULING = ("mixed", "separate")
#: a release's served-kernel speed relative to its kind's newest fitted release: bounds of the fit
#: (explorer/calibrate.py; > 1 where an older build measured faster, e.g. a regression)
RELEASE_SPEED_BOUNDS = (0.3, 1.5)
#: a release's fixed per-step cost (kernel launches, the engine's host step, the front end) relative
#: to its kind's newest fitted release: bounds of the fit (explorer/calibrate.py).  SGLang 0.5.9's
#: ROCm build ran every DeepSeek-R1 step ~9.5 ms slower than 0.5.12 at 4 to 64 clients on MI300X and
#: MI325X (fronts_inferencex.yaml): a constant per step, which a kernel speed cannot express
RELEASE_LATENCY_BOUNDS = (0.25, 4.0)
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
#: the source line ``calibrate --transfer-from`` writes for a copied fit (explorer/calibrate.py ``transfer``)
TRANSFERRED = re.compile(r"transferred from ([\w.-]+) ")
ADMISSION = ("reserve_full", "on_demand")


@dataclass(frozen=True)
class RuntimeFit:
    """Host costs (SI) and the attention residual of one runtime on one hardware kind."""

    step_s: float
    per_sequence_s: float
    per_request_s: float
    attention: float
    #: the runtime's GEMMs reach this share of the hardware's microbenchmark compute efficiency
    #: (kernel choice, fusions and shapes of a served step; fitted residual, 1 = as the benchmarks)
    compute: float = 1.0
    #: host seconds per step and per running sequence per step of the serving front end (HTTP /
    #: OpenAI server, detokenisation, per-token streaming): paid by served runs (trtllm-serve,
    #: vllm serve, sglang launch_server), absent from offline engine benchmarks (trtllm-bench,
    #: gptManagerBenchmark: ``serverless`` validation rows)
    serve_step_s: float = 0.0
    serve_per_sequence_s: float = 0.0
    #: the runtime's memory-bound kernels (decode GEMMs, KV and expert-weight streaming, decode
    #: attention) reach this share of the kind's fitted memory efficiency, for dense models and for
    #: MoE models apart (fitted residuals, 1 = as the kind; added 2026-12-07: a residual per runtime
    #: alone lost held out on H200, 12.3 -> 12.5 %, the split by family won, 12.3 -> 7.9 %:
    #: docs/validation_notes.md)
    memory: float = 1.0
    memory_moe: float = 1.0

    def as_yaml_units(self) -> dict[str, float]:
        return {"step_us": self.step_s / US, "per_sequence_us": self.per_sequence_s / US,
                "per_request_us": self.per_request_s / US, "attention": self.attention, "compute": self.compute,
                "serve_step_us": self.serve_step_s / US, "serve_per_sequence_us": self.serve_per_sequence_s / US,
                "memory": self.memory, "memory_moe": self.memory_moe}


@dataclass(frozen=True)
class Release:
    """One software release of a runtime measured on one hardware kind for one model family: its
    label (the version, ``0.5.9``, or the month of the run, ``2025-11``, where the run names no
    version), the date of its first measured run, and the speed of its served kernels relative to
    the newest release measured on the kind for the family (1.0)."""

    label: str
    date: str
    speed: float
    #: the model family its speed was measured on: ``moe`` or ``dense`` (a release's expert and MLA
    #: kernels change apart from its dense ones: the 2025-26 builds' gains are MoE kernels)
    family: str = "moe"
    #: its fixed per-step costs -- kernel launches, the engine's host step and the serving front end --
    #: relative to the newest release's (1.0; fitted, :data:`RELEASE_LATENCY_BOUNDS`).  A build that
    #: fuses kernels, captures more of the step in a graph or moves detokenising off the loop changes
    #: these, not its kernels' bandwidth: one named residual, not resolved part by part
    latency: float = 1.0


def version_key(label: str) -> tuple[int, ...] | None:
    """A release label as a tuple to order versions by (``1.2.0rc6.post3`` -> (1, 2, 0, 6, 3)),
    None for a label that is no version (a date, ``gpt-oss-dev``).  Pre-release tags sort as plain
    numbers: ``1.2.0rc6`` after ``1.2.0`` (assumption: the data holds release candidates of a
    version, not the version and its candidates side by side)."""
    if not re.match(r"^v?\d+\.\d+", label) or _DATE.match(label):
        return None
    return tuple(int(x) for x in re.findall(r"\d+", label))


def pick_release(releases: tuple[Release, ...], label: str, date: str) -> Release | None:
    """The measured release a run of ``label`` (version, may be empty) on ``date`` (ISO, may be
    empty) is read as: the same label; else, by date, the newest release measured on or before the
    run's date (the oldest where the run predates them all); else, by version, the newest measured
    version at or below it (the oldest where it predates them all); else None (the newest release's
    speed, 1.0).  Software moves one way in this reading: a run is as fast as the last build
    measured before it (assumption)."""
    if not releases or not (label or date):
        return None
    for r in releases:
        if r.label == (label or date[:7]):  # the same release (a run that names no version: its month)
            return r
    if date and _DATE.match(date):
        dated = sorted((r for r in releases if r.date), key=lambda r: r.date)
        if dated:
            before = [r for r in dated if r.date <= date]
            return before[-1] if before else dated[0]
    key = version_key(label) if label else None
    if key is not None:
        versions = sorted((r for r in releases if version_key(r.label) is not None),
                          key=lambda r: version_key(r.label) or ())
        if versions:
            below = [r for r in versions if (version_key(r.label) or ()) <= key]
            return below[-1] if below else versions[0]
    return None


@dataclass(frozen=True)
class Runtime:
    name: str
    display_name: str
    aliases: tuple[str, ...]
    mixed_prompts: bool  # True: prompt chunks share decode steps; False: prefill runs as its own steps
    max_tokens_per_step: int
    max_batch: int
    reserve_full_kv: bool
    graph_padding: bool
    graph_step: int
    graph_max_batch: int
    prior: RuntimeFit
    #: the serving front end (HTTP server, detokenisation, streaming) runs beside the engine loop, so
    #: its per-step work (``serve_*``) shows only where it outlasts the engine's step: a step lasts
    #: max(engine step, front end) instead of their sum (trtllm-serve; the engine's own host work
    #: ``step_s``/``per_sequence_s`` stays in the step either way)
    host_overlap: bool = False
    #: the two tensor-parallel all-reduces of a layer also do the residual add + RMSNorm after them
    #: (one fused kernel each instead of all-reduce + norm): two kernels fewer per layer where
    #: ``tp > 1`` and no attention data parallelism (explorer/engine/layer_step.py ``step_times``)
    fuse_allreduce_norm: bool = False
    #: tensor-parallel all-reduces inside one scale-up domain run the runtime's own peer-to-peer
    #: kernels (one-shot / two-shot) where they beat NCCL's algorithms (explorer/costs/comm.py
    #: ``custom_allreduce_s``; kinds whose fabric allows it: ``Hardware.peer_allreduce``)
    custom_allreduce: bool = False
    #: with attention data parallelism, new prompts are held until every rank has one, for at most
    #: this many iterations (TensorRT-LLM ``attention_dp_config: enable_balance, timeout_iters``;
    #: 0: no balancing, ranks take prompts as they come; explorer/adp_balance.py)
    adp_balance_iters: int = 0
    fitted: dict[str, RuntimeFit] = field(default_factory=dict)
    path: str = ""
    #: kinds whose ``fitted`` entry was copied from another kind's (``calibrate --transfer-from``),
    #: not fitted on measurements of their own -> that kind: they lend nothing to a third kind's fallback
    transferred_from: dict[str, str] = field(default_factory=dict)
    #: per hardware kind, the releases measured on it (``releases:`` in the profile; fitted by
    #: ``explorer calibrate``): a served run of an older build runs its kernels at ``speed`` of the
    #: newest's (explorer/simulate.py ``_prepare``)
    releases: dict[str, tuple[Release, ...]] = field(default_factory=dict)
    #: the release this profile stands for (``sglang@0.5.9``; validation rows: the run's
    #: ``framework_version`` and ``date``); empty: the newest release measured on each kind
    release: str = ""
    release_date: str = ""

    def at_release(self, label: str = "", date: str = "") -> Runtime:
        """This profile as a given release (version label and/or run date) runs."""
        return replace(self, release=str(label or ""), release_date=str(date or ""))

    def release_speed(self, hardware: str | Hardware, family: str = "moe") -> float:
        """Served-kernel speed of this profile's release on a kind, for a model family (``moe`` or
        ``dense``), relative to the newest release measured there (:func:`pick_release` over
        :meth:`release_table`); 1.0 without a release or a table."""
        r = self.release_for(hardware, family)
        return r.speed if r is not None else 1.0

    def release_latency(self, hardware: str | Hardware, family: str = "moe") -> float:
        """Fixed per-step cost of this profile's release on a kind, for a model family, relative to the
        newest release measured there (:attr:`Release.latency`); 1.0 without a release or a table."""
        r = self.release_for(hardware, family)
        return r.latency if r is not None else 1.0

    def release_for(self, hardware: str | Hardware, family: str = "moe") -> Release | None:
        """The measured release this profile's release (label and/or date) is read as on a kind
        (:func:`pick_release` over :meth:`release_table`); None without a release or a table."""
        if not (self.release or self.release_date):
            return None
        return pick_release(self.release_table(hardware, family), self.release, self.release_date)

    def release_table(self, hardware: str | Hardware, family: str = "moe") -> tuple[Release, ...]:
        """The releases measured for a model family on a kind.  A kind fitted on served curves of this
        runtime has its own table (empty where it saw one release); a kind without one takes its
        nearest kinds' (:func:`nearest_kinds`, as :meth:`fit_for`, never across architecture families) -- each
        release at the median of their speeds: a release is one software build, and its ROCm or CUDA
        kernels are slow or fast on sibling GPUs alike (SGLang 0.5.9's ROCm image measured 0.60-0.63
        of 0.5.12 on both MI300X and MI325X)."""
        name = hardware if isinstance(hardware, str) else hardware.name
        if name in self.releases:
            return tuple(r for r in self.releases[name] if r.family == family)
        own = {k: v for k, v in self.releases.items() if k not in self.transferred_from and v}
        if not own:
            return ()
        # a build's kernels are tuned per architecture: its speed never crosses families (SGLang 0.5.9 ran
        # 1.12x its 0.5.12 on H200 and 1.09x on B200, whose 2025 builds ran 0.78x: runtimes/sglang.yaml)
        scope = nearest_kinds(list(own), hardware, widest="family")
        speeds: dict[str, list[float]] = {}
        latencies: dict[str, list[float]] = {}
        dates: dict[str, str] = {}
        for k in scope:
            for r in own[k]:
                if r.family == family:
                    speeds.setdefault(r.label, []).append(r.speed)
                    latencies.setdefault(r.label, []).append(r.latency)
                    known = [d for d in (dates.get(r.label, ""), r.date) if d]
                    dates[r.label] = min(known) if known else ""
        return tuple(sorted((Release(lab, dates[lab], float(np.median(v)), family, float(np.median(latencies[lab])))
                             for lab, v in speeds.items()), key=lambda r: (r.date, r.label)))

    def with_releases(self, hardware: str, releases: tuple[Release, ...]) -> Runtime:
        """A copy with another release table on one kind (calibration uses this)."""
        return replace(self, releases={**self.releases, hardware: tuple(releases)})

    def without_releases_on(self, hardware: str) -> Runtime:
        """A copy without this kind's own release table (it then takes its siblings')."""
        return replace(self, releases={k: v for k, v in self.releases.items() if k != hardware})

    def without_releases(self) -> Runtime:
        """A copy whose every release runs at the newest's speed (the roofline's runtime)."""
        return replace(self, releases={})

    def fit_for(self, hardware: str | Hardware) -> RuntimeFit:
        """The fitted values on this hardware kind.  For a kind without a fit, the element-wise
        median of this runtime's own fits (transferred copies left out) on the nearest kinds
        (:func:`nearest_kinds`: the same generation, family, vendor, else every kind) -- the residuals
        are the runtime's kernels and host loop on a software stack (ROCm builds of SGLang run their
        GEMMs at half the efficiency its CUDA builds do: runtimes/sglang.yaml).  With no fit at
        all, the priors."""
        name = hardware if isinstance(hardware, str) else hardware.name
        if name in self.fitted:
            return self.fitted[name]
        own = {k: f for k, f in self.fitted.items() if k not in self.transferred_from}
        if not own:
            return self.prior
        scope = nearest_kinds(list(own), hardware)
        vals = np.array([[getattr(own[k], f) for f in RuntimeFit.__dataclass_fields__] for k in scope])
        return RuntimeFit(*(float(v) for v in np.median(vals, axis=0)))

    def with_fit(self, hardware: str, fit: RuntimeFit) -> Runtime:
        """A copy with other fitted values on one hardware kind (calibration uses this)."""
        return replace(self, fitted={**self.fitted, hardware: fit})

    def without_fit(self, hardware: str) -> Runtime:
        """A copy that has never been fitted on this kind (held-out predictions use this); copies
        transferred from this kind go too (they hold what it was fitted on)."""
        return replace(self, fitted={k: v for k, v in self.fitted.items()
                                     if k != hardware and self.transferred_from.get(k) != hardware},
                       releases={k: v for k, v in self.releases.items() if k != hardware})


#: how far :func:`nearest_kinds` may reach, nearest first
LINEAGE_SCOPES = ("arch", "family", "vendor", "all")


def nearest_kinds(names: list[str], hardware: str | Hardware, widest: str = "all") -> list[str]:
    """Of ``names`` (kinds with a fit), those nearest ``hardware``: the same architecture generation
    (``arch``: cdna3 for MI300X and MI325X, cdna4 for MI355X, hopper, blackwell-ultra, ...), else the
    same architecture family (:data:`explorer.hardware.FAMILIES`: B300 with B200, MI355X with the
    CDNA3 kinds), else the same vendor, else all of them -- reaching no further than ``widest``
    (one of :data:`LINEAGE_SCOPES`; empty where nothing is that near).  The generation comes first
    because a software stack's kernels are tuned per ISA: SGLang's ROCm build ran DeepSeek-R1 at
    0.45-0.55 of its modelled GEMM speed on both CDNA3 kinds and 0.95 on CDNA4
    (runtimes/sglang.yaml ``fitted``), so a CDNA3 kind borrowing the median of one CDNA3 and one
    CDNA4 fit was predicted +50 % held out by configuration (docs/validation.md)."""
    mine = _lineage(hardware)
    for level, scope in enumerate(LINEAGE_SCOPES[:LINEAGE_SCOPES.index(widest) + 1]):
        near = names if scope == "all" else [k for k in names if mine[level] and _lineage(k)[level] == mine[level]]
        if near:
            return near
    return []


def _lineage(hardware: str | Hardware) -> tuple[str, str, str]:
    """(arch, family, vendor) of a kind, ("", "", "") for a name no shipped hardware file has."""
    if isinstance(hardware, Hardware):
        return hardware.arch, hardware.family, hardware.vendor
    try:
        hw = load_hardware(hardware)
    except SpecError:
        return "", "", ""
    return hw.arch, hw.family, hw.vendor


def _fit_section(sec: Section, prior: RuntimeFit | None) -> RuntimeFit:
    sec.check_keys(set(FITTED_KEYS) | {"source", "cases", "date", "notes"})
    base = prior.as_yaml_units() if prior else {}
    vals = {}
    for k, (scale, lo, hi) in FITTED_KEYS.items():
        default = base.get(k, None) if prior else ...
        if k in ("compute", "memory", "memory_moe") and default is ...:
            default = 1.0
        if k.startswith("serve_") and default is ...:
            default = 0.0
        v = sec.number(k, default, min_value=lo / scale,
                       max_value=hi / scale if k in RESIDUAL_KEYS else None)
        vals[k] = float(v) * scale
    return RuntimeFit(vals["step_us"], vals["per_sequence_us"], vals["per_request_us"], vals["attention"],
                      vals["compute"], vals["serve_step_us"], vals["serve_per_sequence_us"], vals["memory"],
                      vals["memory_moe"])


def _load_file(path: Path) -> Runtime:
    where = str(path)
    top = Section(read_yaml(path), where)
    top.check_keys({"name", "display_name", "aliases", "scheduling", "cuda_graphs", "attention", "attention_dp",
                    "fusion", "collectives", "overheads", "fitted", "releases", "notes"})
    name = top.string("name")
    aliases = top.names("aliases")
    s = top.section("scheduling")
    s.check_keys({"prompts", "max_tokens_per_step", "max_batch", "kv_admission", "host_overlap",
                  "source", "notes"})
    overlap = s.boolean("host_overlap", False)
    s.string("source")
    g = top.section("cuda_graphs")
    g.check_keys({"padding", "step", "max_batch", "source", "notes"})
    padding = g.boolean("padding", True)
    fu = top.section("fusion", required=False)  # optional: no fusion section, no fusions
    fu.check_keys({"allreduce_norm", "source", "notes"})
    fuse_ar_norm = fu.boolean("allreduce_norm", False)
    if fu.has("allreduce_norm"):
        fu.string("source")
    co = top.section("collectives", required=False)  # optional: no section, NCCL's algorithms only
    co.check_keys({"custom_allreduce", "source", "notes"})
    custom_ar = co.boolean("custom_allreduce", False)
    if co.has("custom_allreduce"):
        co.string("source")
    ad = top.section("attention_dp", required=False)  # optional: no section, no balancing
    ad.check_keys({"balance_timeout_iters", "source", "notes"})
    adp_iters = ad.number("balance_timeout_iters", 0, integer=True, min_value=0, max_value=100000)
    if ad.has("balance_timeout_iters"):
        ad.string("source")
    a = top.section("attention")
    a.check_keys({"decode_kernel", "prefill_kernel", "efficiency", "source", "notes"})
    o = top.section("overheads")
    o.check_keys({"step_us", "per_sequence_us", "per_request_us", "serve_step_us", "serve_per_sequence_us",
                  "source", "notes"})
    o.string("source")
    prior = RuntimeFit(
        step_s=o.number("step_us", min_value=0) * US,
        per_sequence_s=o.number("per_sequence_us", min_value=0) * US,
        per_request_s=o.number("per_request_us", min_value=0) * US,
        attention=a.number("efficiency", 1.0, min_value=0, max_value=1, min_exclusive=True),
        serve_step_s=o.number("serve_step_us", 0.0, min_value=0) * US,
        serve_per_sequence_s=o.number("serve_per_sequence_us", 0.0, min_value=0) * US,
    )
    fitted: dict[str, RuntimeFit] = {}
    transferred: dict[str, str] = {}
    raw_fitted = top.raw("fitted", {}) or {}
    if not isinstance(raw_fitted, dict):
        raise SpecError(where, "fitted", f"expected a mapping hardware -> values, got {raw_fitted!r}")
    for hw_name in raw_fitted:
        fitted[str(hw_name)] = _fit_section(Section(raw_fitted[hw_name], where, f"fitted.{hw_name}"), prior)
        m = TRANSFERRED.match(str((raw_fitted[hw_name] or {}).get("source", "")))
        if m:
            transferred[str(hw_name)] = m.group(1)
    releases: dict[str, tuple[Release, ...]] = {}
    raw_rel = top.raw("releases", {}) or {}
    if not isinstance(raw_rel, dict):
        raise SpecError(where, "releases", f"expected a mapping hardware -> list of releases, got {raw_rel!r}")
    for hw_name, items in raw_rel.items():
        if not isinstance(items, list):
            raise SpecError(where, f"releases.{hw_name}", f"expected a list of releases, got {items!r}")
        got = []
        for i, item in enumerate(items):
            r = Section(item, where, f"releases.{hw_name}[{i}]")
            r.check_keys({"release", "family", "date", "speed", "latency", "cases"})
            got.append(Release(str(r.raw("release", "") or ""), str(r.raw("date", "") or ""),
                               float(r.number("speed", min_value=RELEASE_SPEED_BOUNDS[0],
                                              max_value=RELEASE_SPEED_BOUNDS[1])),
                               r.string("family", "moe", choices={"moe", "dense"}),
                               float(r.number("latency", 1.0, min_value=RELEASE_LATENCY_BOUNDS[0],
                                              max_value=RELEASE_LATENCY_BOUNDS[1]))))
        releases[str(hw_name)] = tuple(got)
    return Runtime(
        name=name,
        display_name=top.string("display_name", name),
        aliases=tuple(x.lower() for x in aliases),
        mixed_prompts=s.string("prompts", choices=set(SCHEDULING)) == "mixed",
        max_tokens_per_step=s.number("max_tokens_per_step", integer=True, min_value=1),
        max_batch=s.number("max_batch", integer=True, min_value=1),
        reserve_full_kv=s.string("kv_admission", choices=set(ADMISSION)) == "reserve_full",
        graph_padding=padding,
        graph_step=g.number("step", 8, integer=True, min_value=1),
        graph_max_batch=g.number("max_batch", integer=True, min_value=1),
        prior=prior,
        host_overlap=overlap,
        fuse_allreduce_norm=fuse_ar_norm,
        custom_allreduce=custom_ar,
        adp_balance_iters=int(adp_iters),
        fitted=fitted,
        path=where,
        transferred_from=transferred,
        releases=releases,
    )


_CACHE: dict[str, Runtime] = {}
_BY_STEM: dict[str, Runtime] = {}  # shipped files by file stem (explorer.specio.find_named)


def runtime_files(directory: Path = RUNTIME_DIR) -> list[Path]:
    return sorted(directory.glob("*.yaml"))


def list_runtimes() -> list[Runtime]:
    return [load_runtime(p.stem) for p in runtime_files()]


#: Words of a framework label that name the build or front end, not another engine: the vendor's
#: platform (``vLLM (ROCm)``, ``sglang-rocm``), the server command (``trtllm-serve``) and version
#: tags (``SGLang v0.5.9``), and NVIDIA Dynamo, a front end whose engine is the backend named after
#: it (``dynamo-trt``, ``dynamo-sglang``; "Dynamo" alone names no engine); TensorRT-LLM renamed itself
#: "TensorRT LLM" in late 2025.
_RUNTIME_NOISE = re.compile(r"\(.*?\)|\b(?:rocm|cuda|serve|server|openai|dynamo|v?\d+(?:\.\d+)+\w*)\b")


def runtime_key(label: str) -> str:
    """A framework label reduced to a runtime name or alias: lower case, the words of
    :data:`_RUNTIME_NOISE` dropped, spaces and underscores joined by hyphens."""
    words = _RUNTIME_NOISE.sub(" ", str(label).lower())
    return "-".join(w for w in re.split(r"[\s_/-]+", words) if w)


def load_runtime(name: str | Runtime, where: str = "--runtime", key: str | None = None) -> Runtime:
    """A runtime profile by name or alias (``trtllm``, ``vllm``, ``sglang``, ``TensorRT-LLM``);
    ``NAME@RELEASE`` (``sglang@0.5.9``, ``trtllm@2025-11-02``) is that profile as the release (a
    version, or an ISO date of a build) ran: its kernels at the release's fitted speed
    (:meth:`Runtime.release_speed`)."""
    if isinstance(name, Runtime):
        return name
    lname = str(name).strip().lower()
    if "@" in lname:
        base, _, rel = lname.partition("@")
        if not rel.strip() or not base.strip():
            raise SpecError(where, key, f"expected NAME@RELEASE (sglang@0.5.9, trtllm@2025-11-02), got {name!r}")
        rel = rel.strip()
        found_rel = load_runtime(base, where, key)
        is_date = bool(_DATE.match(rel))
        return found_rel.at_release("" if is_date else rel, rel if is_date else "")
    if lname in _CACHE:
        return _CACHE[lname]
    found, names = find_named(RUNTIME_DIR, lname, _load_file, _BY_STEM)
    if found is None and runtime_key(lname) != lname:
        found, names = find_named(RUNTIME_DIR, runtime_key(lname), _load_file, _BY_STEM)
    if found is None:
        raise unknown(where, key, "runtime", name, names)
    _CACHE[lname] = found
    return found


def clear_cache() -> None:
    _CACHE.clear()
    _BY_STEM.clear()


#: Design columns a runtime contributes (all numeric, per design point).
RUNTIME_COLUMNS = ("rt_mixed", "rt_overlap", "rt_ar_norm", "rt_custom_ar", "rt_max_tokens", "rt_max_batch", "rt_reserve_full", "rt_graph_step",
                   "rt_graph_max", "rt_step_s", "rt_per_seq_s", "rt_request_s", "rt_attention", "rt_compute",
                   "rt_memory", "rt_memory_moe",
                   "rt_serve_step_s", "rt_serve_seq_s", "rt_release_moe", "rt_release_dense",
                   "rt_latency_moe", "rt_latency_dense", "rt_adp_iters")


def runtime_columns(runtimes: list[Runtime], hardware: list[str | Hardware], inverse: np.ndarray) -> dict[str, np.ndarray]:
    """Numeric ``rt_*`` columns for design rows whose (runtime, hardware) pair is
    ``(runtimes[i], hardware[i])`` with ``i = inverse[row]``."""
    rows: dict[str, list[float]] = {k: [] for k in RUNTIME_COLUMNS}
    for rt, hw in zip(runtimes, hardware, strict=True):
        f = rt.fit_for(hw)
        rel = {fam: rt.release_for(hw, fam) for fam in ("moe", "dense")}  # looked up once per family
        for k, v in (("rt_mixed", rt.mixed_prompts), ("rt_overlap", rt.host_overlap),
                     ("rt_ar_norm", rt.fuse_allreduce_norm), ("rt_custom_ar", rt.custom_allreduce),
                     ("rt_max_tokens", rt.max_tokens_per_step),
                     ("rt_max_batch", rt.max_batch), ("rt_reserve_full", rt.reserve_full_kv),
                     ("rt_graph_step", rt.graph_step if rt.graph_padding else 0),
                     ("rt_graph_max", rt.graph_max_batch if rt.graph_padding else 0),
                     ("rt_step_s", f.step_s), ("rt_per_seq_s", f.per_sequence_s),
                     ("rt_request_s", f.per_request_s), ("rt_attention", f.attention), ("rt_compute", f.compute),
                     ("rt_memory", f.memory), ("rt_memory_moe", f.memory_moe),
                     ("rt_serve_step_s", f.serve_step_s), ("rt_serve_seq_s", f.serve_per_sequence_s),
                     ("rt_release_moe", rel["moe"].speed if rel["moe"] else 1.0),
                     ("rt_release_dense", rel["dense"].speed if rel["dense"] else 1.0),
                     ("rt_latency_moe", rel["moe"].latency if rel["moe"] else 1.0),
                     ("rt_latency_dense", rel["dense"].latency if rel["dense"] else 1.0),
                     ("rt_adp_iters", rt.adp_balance_iters)):
            rows[k].append(float(v))
    return {k: np.asarray(v, dtype=np.float64)[inverse] for k, v in rows.items()}


def describe(rt: Runtime) -> dict[str, Any]:
    """A JSON-ready summary (for `explorer runtimes` and reports)."""
    return {"name": rt.name, "display_name": rt.display_name,
            "prompts": "mixed" if rt.mixed_prompts else "separate",
            "max_tokens_per_step": rt.max_tokens_per_step, "max_batch": rt.max_batch,
            "kv_admission": "reserve_full" if rt.reserve_full_kv else "on_demand",
            "cuda_graph_padding": rt.graph_padding, "allreduce_norm_fusion": rt.fuse_allreduce_norm,
            "custom_allreduce": rt.custom_allreduce, "attention_dp_balance_iters": rt.adp_balance_iters,
            "fitted_on": sorted(rt.fitted),
            "releases": {hw: [{"release": r.label, "family": r.family, "first_run": r.date, "speed": r.speed}
                              for r in table] for hw, table in sorted(rt.releases.items()) if table}}
