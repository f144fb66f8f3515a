"""Calibration: one fit per hardware kind over every validation file at once.

For one hardware kind, the free parameters are

* the kind's kernel-level factors (hardware file, ``efficiency:`` and ``overheads:``):
  ``eta_compute, eta_memory, eta_network, eta_moe`` (bounded to [0.2, 1]: physical efficiencies
  never exceed 1; ``eta_moe`` slows grouped expert-GEMM compute only) and ``kernel_launch``;
* for every serving runtime measured on the kind, its host costs (per step, per running sequence
  per step, per request) and its attention-kernel residual (runtime file, ``fitted.<kind>``);
* for every runtime and model family with curves of two or more software releases on the kind, the
  served-kernel speed of each release but the newest and its fixed per-step cost (``latency``:
  launches, host step, front end) relative to the newest's (runtime file, ``releases.<kind>``;
  bounded to :data:`explorer.runtime.RELEASE_SPEED_BOUNDS` and ``RELEASE_LATENCY_BOUNDS``, weak log
  prior toward 1 -- no difference between releases; :func:`measured_releases`).

They minimise, by bounded least squares (scipy's trust-region reflective), the weighted sum over
every supported case on that kind -- measurement points, serving-curve rows (both axes and TTFT)
and kernel microbenchmarks -- of ``log(predicted/measured)^2``, plus a weak prior pulling each
parameter toward its prior value (weight :data:`PRIOR_WEIGHT`; it keeps parameters no case
constrains where they were).  Each case counts ``1/sqrt(n)`` of its group (kernels, points,
curve throughput, curve interactivity, TTFT), so that 150 kernel rows do not drown 20 serving
points; TTFT rows (any file) count half (:data:`TTFT_WEIGHT`): they are the noisiest figure and no
acceptance target.

``--write`` records the fitted values in the hardware YAML (``efficiency:`` block, with the date,
the case ids and the errors before and after) and in each runtime YAML (``fitted.<kind>``).

Cross-validation (:func:`cross_validate`) leaves out whole curves (every row of one measured
curve) and single measurement points, refits on the rest, and predicts what was left out: the
honest out-of-sample figure.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from explorer.errors import SpecError
from explorer.hardware import Hardware, _load_file, load_hardware
from explorer.runtime import (
    DEFAULT_RUNTIME,
    FITTED_KEYS,
    RELEASE_LATENCY_BOUNDS,
    RELEASE_SPEED_BOUNDS,
    Release,
    Runtime,
    RuntimeFit,
    load_runtime,
    nearest_kinds,
)
from explorer.validate import DEFAULT_MEASUREMENTS, SERVED_KINDS, Case, load_cases, predict

VALIDATION_DIR = Path(__file__).resolve().parent.parent / "validation"
#: The files one calibration fits on (shipped copies of shared/validation, each row with its source;
#: fronts_inferencex.yaml: the InferenceX curves of the public dashboard fixture that fronts.yaml does
#: not hold, built by benchmarks/fixture_curves.py -- validation/sources/README.md).
CURVE_FILES = (VALIDATION_DIR / "fronts.yaml", VALIDATION_DIR / "fronts_inferencex.yaml")
DEFAULT_FILES = (VALIDATION_DIR / "measurements.yaml", *CURVE_FILES, VALIDATION_DIR / "kernels.yaml",
                 VALIDATION_DIR / "mlperf.yaml")

#: ``calibrate --hardware all`` fits only kinds with at least this many cases: fewer cannot
#: identify the kind's seven factors and its runtimes' five (H200 NVL, GH200 and RTX PRO 6000 have
#: 1-2 MLPerf rows each and keep the calibration they took from a sibling kind)
MIN_CASES_ALL = 5
PRIOR_WEIGHT = 0.1  # weak: 0.1*ln(2) = 0.07 per factor of two.  Held out (benchmarks/cross_validate.py): 0.1 vs 0.3 gave curves 10.0 % vs 9.9 % median, points p90 44 % vs 51 %
TTFT_WEIGHT = 0.5
#: levels of the serving front end's host costs (``serve_*``, as a share of the runtime profile's
#: start values) the fit is also started from.  Its objective is not smooth in them: a front end
#: shows only where it outlasts the engine's step (``max(engine, front end)``), so from one start the
#: local solver stalls where the next case to bind is far away.  Measured on the B200 TensorRT-LLM
#: fit (2026-12-04, in sample): from the profile's 4 ms / 100 us start it stopped at 3.6 ms / 86 us
#: (objective 0.239; gpt-oss-120b's curve -25 %), from 1.5 ms / 30 us it reached 0.217 (-16 %),
#: from 2.5 ms / 60 us 0.219, from 0 0.225.  The lowest objective wins; ties keep the profile's start.
#: Cost: up to five more solves per fit where a front end binds on some case (TensorRT-LLM kinds; where
#: none binds the levels are skipped: they could change no residual).  With the grouped Jacobian
#: (:func:`grouped_jacobian`: 18 evaluations per Jacobian instead of 47 on H200) a fit with levels takes ~1 min.
SERVE_START_LEVELS = (1.0, 0.625, 0.375, 0.2, 0.0)
#: extra weight of a group (on top of 1/sqrt(n) per case).  Measured held out (benchmarks/cross_validate.py):
#: doubling the measurement points' weight worsened both the curves (10.1 -> 11.3 % median) and the
#: points themselves (p90 44 -> 50 %), so every group counts the same.
GROUP_WEIGHT: dict[str, float] = {}
#: hardware parameters: name -> (Hardware attribute, lower bound, upper bound, scale to the YAML's unit,
#: prior scale).  Efficiencies get a prior on log(theta/theta_0); overheads one on (theta - theta_0)/scale.
PARAMS: dict[str, tuple[str, float, float, float, float | None]] = {
    "compute": ("eta_compute", 0.2, 1.0, 1.0, None),
    "memory": ("eta_memory", 0.2, 1.0, 1.0, None),
    "network": ("eta_network", 0.2, 1.0, 1.0, None),
    "moe": ("eta_moe", 0.2, 1.0, 1.0, None),
    "dequant": ("eta_dequant", 0.2, 1.0, 1.0, None),
    "kernel_launch_us": ("kernel_launch_s", 0.0, 30e-6, 1e6, 5e-6),
    "moe_group_us": ("moe_group_s", 0.0, 20e-6, 1e6, 2e-6),
    "served_latency": ("served_latency", 0.05, 1.0, 1.0, None),
}
#: runtime parameters (per runtime on the kind): name -> (RuntimeFit field, prior scale or None for log prior)
RT_PARAMS: dict[str, tuple[str, float | None]] = {
    "step_us": ("step_s", 1e-3),
    "per_sequence_us": ("per_sequence_s", 20e-6),
    "per_request_us": ("per_request_s", 200e-3),
    "attention": ("attention", None),
    "compute": ("compute", None),
    "memory": ("memory", None),
    "memory_moe": ("memory_moe", None),
    # the front end's profile values are deliberately high starts (runtimes/trtllm.yaml), so their
    # prior is as wide as the start itself; measured in sample (2026-12-04) with SERVE_START_LEVELS:
    # 1 ms / 20 us held B200's TensorRT-LLM front end at 3.6 ms / 86 us against its data (objective
    # 0.239 vs 0.217 free); with no prior H100's one Qwen3 curve took it to the 300 us bound per sequence
    "serve_step_us": ("serve_step_s", 4e-3),
    "serve_per_sequence_us": ("serve_per_sequence_s", 100e-6),
}
EFFICIENCY_KEYS = ("compute", "memory", "network", "moe", "dequant")
OVERHEAD_KEYS = ("kernel_launch_us",)
#: fitted figures written into the efficiency block besides the efficiencies
EFFICIENCY_EXTRA = ("moe_group_us", "served_latency")


def load_all_cases(files: Sequence[str | Path] = DEFAULT_FILES) -> list[Case]:
    """Every case of every file (missing optional files are skipped)."""
    from explorer.mlperf_latency import latency_cases

    out: list[Case] = []
    for f in files:
        if Path(f).exists() or str(f) == str(DEFAULT_MEASUREMENTS):
            out.extend(load_cases(f))
    # the MLPerf runs' measured latencies (validation/mlperf_latency.yaml) of the system rows loaded
    out.extend(latency_cases([c for c in out if c.kind == "system"]))
    return fixed_system_cases(out)


def fixed_system_cases(cases: list[Case]) -> list[Case]:
    """MLPerf rows as calibration cases, each at one design point the fit can score in the one
    vectorized call (a split search per candidate factor set would cost ~100x):

    * Offline rows: the deployment fixed at the split the current hardware and runtime files choose
      (explorer/systems.py), scored as a saturated point like the others;
    * the mean TPOT / TTFT of Server and Interactive runs (explorer/mlperf_latency.py): open loop at
      the run's measured rate, on the split the row's own (latency-limited) prediction chooses.

    The Server/Interactive throughput rows themselves (a rate search per evaluation) and the p99
    latency cases stay out of the fit and are validated only -- held out by construction."""
    from explorer.mlperf_latency import FITTED_SCENARIOS, FITTED_STATS, operating_values
    from explorer.validate import _predict_systems, split_of

    by_id = {c.id: c for c in cases if c.kind == "system"}
    offline = [c for c in cases if c.supported and c.kind == "system" and c.saturated]
    got = _predict_systems(offline, [load_hardware(c.hardware) for c in offline],
                           [load_runtime(c.values.get("runtime") or "trtllm") for c in offline])
    for c, g in zip(offline, got, strict=True):
        if not c.supported or not np.isfinite(g):
            continue
        split = split_of(c.note)
        if split is None:
            raise ValueError(f"no split in note {c.note!r}")
        t, e, dp, _ = split
        c.values = {k: v for k, v in c.values.items() if k not in ("tp_open", "ttft_limit_ms", "tpot_limit_ms")}
        c.values.update(tp=t, ep=e, dp=dp)
        c.kind = "inference"
    fitted = [c for c in cases if c.supported and c.kind == "system_latency"
              and c.id.rsplit(":", 1)[1] in FITTED_STATS and c.regime.startswith(FITTED_SCENARIOS)
              and by_id.get(c.parent) is not None]
    # each parent's split, from its own (latency-limited) prediction: one rate search for all of them,
    # each parent on the runtime of its first latency case (as one case at a time did)
    parents: dict[str, tuple[Case, Runtime]] = {}
    for c in fitted:
        parents.setdefault(c.parent, (by_id[c.parent], load_runtime(c.values.get("runtime") or "mlperf")))
    todo = list(parents.values())
    _predict_systems([p for p, _ in todo], [load_hardware(p.hardware) for p, _ in todo], [r for _, r in todo])
    for c in fitted:
        parent = by_id[c.parent]
        v = operating_values(c, parent, load_runtime(c.values.get("runtime") or "mlperf"))
        if v is None:
            continue
        c.values, c.kind = v, "inference"
    return cases


def _group(c: Case) -> str:
    if c.kind == "curve":
        return f"curve:{c.metric}"
    if c.regime.startswith("mlperf"):  # Offline throughput, and the Server/Interactive latency means
        return "mlperf_latency" if c.id.rsplit(":", 1)[-1] in ("tpot_mean", "ttft_mean") else "mlperf"
    if c.kind in SERVED_KINDS:
        return "point"
    return "kernel"


#: the simulator's reason code of a design that does not fit in memory (explorer/simulate.py REASONS)
OUT_OF_MEMORY = 6


def out_of_memory_cases(cases: list[Case], hw: Hardware) -> list[Case]:
    """The served cases whose measured deployment the model finds out of memory (reason 6): it ran,
    so the memory budget (usable share, runtime reserve, workspace) is wrong there, and its speed is
    not evidence about the kind's speed factors -- the model scores such a point as if one sequence
    fit, so a fit would chase it (DeepSeek-R1 FP8 on 4xB200 in fronts_inferencex.yaml: 168 GB of
    weights per GPU against 165.6 GB usable, measured up to 4x slower than that).  Memory does not
    depend on any fitted factor, so the set is the same at every step of a fit.  ``validate`` still
    scores them, with the reason in the case's note."""
    served = [c for c in cases if c.kind in SERVED_KINDS and not c.saturated]
    if not served:
        return []
    predict(served, {hw.name: hw})
    return [c for c in served if c.model_reason == OUT_OF_MEMORY]


def case_weights(cases: list[Case]) -> np.ndarray:
    groups = [_group(c) for c in cases]
    counts = {g: groups.count(g) for g in set(groups)}
    w = np.array([GROUP_WEIGHT.get(g, 1.0) / math.sqrt(counts[g]) for g in groups])
    ttft = np.array([c.metric in ("ttft", "first_token_latency") for c in cases])
    return w * np.where(ttft, TTFT_WEIGHT, 1.0)


@dataclass
class Fit:
    hardware: Hardware
    before: Hardware
    case_ids: list[str]
    errors_before: np.ndarray
    errors_after: np.ndarray
    values: dict[str, float]
    prior: dict[str, float]
    runtimes: dict[str, Runtime] = field(default_factory=dict)  # fitted runtime profiles (this kind's entry)
    runtime_values: dict[str, dict[str, float]] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    #: the least-squares objective at the fit (0.5 * sum of squared weighted log errors and prior
    #: residuals): what the starts of :data:`SERVE_START_LEVELS` compete on
    objective: float = float("nan")

    def summary(self) -> dict[str, Any]:
        def med(e: np.ndarray) -> float:
            return float(np.median(np.abs(e))) if len(e) else float("nan")
        return {
            "hardware": self.hardware.name,
            "cases": len(self.case_ids),
            "case_ids": self.case_ids,
            "fitted": self.values,
            "prior": self.prior,
            "runtimes": self.runtime_values,
            "releases": {r: [{"release": x.label, "family": x.family, "date": x.date, "speed": x.speed,
                                 "latency": x.latency}
                             for x in rt.releases.get(self.hardware.name, ())]
                         for r, rt in self.runtimes.items() if rt.releases.get(self.hardware.name)},
            "median_abs_error_before": med(self.errors_before),
            "median_abs_error_after": med(self.errors_after),
            "p90_abs_error_after": float(np.percentile(np.abs(self.errors_after), 90)) if len(self.case_ids) else None,
            "objective": self.objective,
        }


def prior_hardware(hw: Hardware) -> Hardware:
    """The hardware with the values a previous calibration started from (``calibration.prior``),
    so that calibrating again is idempotent rather than drifting from its own output."""
    prior = (hw.raw.get("efficiency", {}).get("calibration") or {}).get("prior")
    if not isinstance(prior, dict):
        return hw
    return hw.with_efficiency(**{PARAMS[k][0]: float(v) / PARAMS[k][3] for k, v in prior.items() if k in PARAMS})


#: kind factors that only served measurements identify (no kernel row depends on them): a kind with
#: no serving curve of its own starts them from its family's (:func:`family_serving_prior`)
SERVED_ONLY = ("kernel_launch_us", "moe", "moe_group_us", "dequant", "served_latency")


def _served_curves(hw: Hardware) -> bool:
    """Whether a kind's file was calibrated on serving curves of its own (its case list names curve rows)."""
    cal = (hw.raw.get("efficiency", {}) or {}).get("calibration") or {}
    cases = cal.get("cases") if isinstance(cal, dict) else None
    return isinstance(cases, list) and any(str(c).endswith((":tok_s_gpu", ":tok_s_user")) for c in cases)


def family_serving_prior(hw: Hardware) -> dict[str, float]:
    """For a kind calibrated without serving curves: the served-only factors (:data:`SERVED_ONLY`)
    as the mean (geometric for efficiencies) of the fitted values of the nearest other kinds that
    were fitted on curves (:func:`explorer.runtime.nearest_kinds`: its architecture generation's,
    else its family's) -- the per-kernel cost under CUDA/HIP graphs and
    the grouped-GEMM factors are the software stack's, which siblings share.  SI units; empty where
    no sibling has curves."""
    from explorer.hardware import hardware_files

    # the shipped kinds, read afresh rather than from load_hardware's cache: `calibrate --hardware all
    # --write` fits the kinds with curves first, and the others start from what was just written
    fitted = {h.name: h for h in (_load_file(p) for p in hardware_files()) if h.name != hw.name and _served_curves(h)}
    # the nearest of them (runtime.nearest_kinds): its generation's, else its family's; no other family's
    sibs = [fitted[n] for n in nearest_kinds(list(fitted), hw, widest="family")]
    if not sibs:
        return {}
    out: dict[str, float] = {}
    for k in SERVED_ONLY:
        attr, *_bounds, prior_scale = PARAMS[k]  # no prior scale: an efficiency (log prior)
        vals = [float(getattr(h, attr)) for h in sibs]
        out[attr] = (float(np.exp(np.mean(np.log(np.maximum(vals, 1e-12))))) if prior_scale is None
                     else float(np.mean(vals)))
    return out


def _with(hw: Hardware, theta: np.ndarray) -> Hardware:
    return hw.with_efficiency(**{PARAMS[k][0]: float(v) for k, v in zip(PARAMS, theta, strict=False)})


def _rt_fit(theta: np.ndarray) -> RuntimeFit:
    return RuntimeFit(**{RT_PARAMS[k][0]: float(v) for k, v in zip(RT_PARAMS, theta, strict=True)})


def _bounds_rt() -> tuple[np.ndarray, np.ndarray]:
    lo = np.array([FITTED_KEYS[k][1] for k in RT_PARAMS])
    hi = np.array([FITTED_KEYS[k][2] for k in RT_PARAMS])
    return lo, hi


def calibrate(hardware: str | Hardware, measurements: str | Path | Sequence[str | Path] = DEFAULT_FILES,
              cases: list[Case] | None = None, prior_weight: float = PRIOR_WEIGHT,
              fit_runtimes: bool = True, max_nfev: int = 60, fit_releases: bool = True) -> Fit:
    """Fit one hardware kind's factors (and its runtimes' host costs, and the speed of each software
    release measured on it: :func:`measured_releases`; ``fit_releases=False``: none) to every case on it."""
    from scipy.optimize import least_squares

    files = [measurements] if isinstance(measurements, str | Path) else list(measurements)
    hw0 = prior_hardware(load_hardware(hardware) if not isinstance(hardware, Hardware) else hardware)
    all_cases = cases if cases is not None else load_all_cases(files)
    mine = [c for c in all_cases
            if c.supported and c.hardware == hw0.name and c.kind not in ("system", "system_latency")
            and not c.values.get("fabric")]  # a cloud fabric's rows fit that fabric (explorer/fabrics.py)
    if not any(c.kind == "curve" for c in mine):
        hw0 = hw0.with_efficiency(**family_serving_prior(hw0))
    oom = {id(c) for c in out_of_memory_cases(mine, hw0)}
    mine = [c for c in mine if id(c) not in oom]
    if not mine:
        raise SpecError(", ".join(str(f) for f in files), None,
                        f"no supported case on hardware '{hw0.name}' to calibrate on")
    measured = np.array([c.measured for c in mine])
    weights = case_weights(mine)
    rt_names = sorted({str(c.values["runtime"]) for c in mine if c.kind in SERVED_KINDS and c.values.get("runtime")})
    rts0 = {r: load_runtime(r) for r in rt_names} if fit_runtimes else {}
    n_hw = len(PARAMS)
    theta_hw = np.array([getattr(hw0, a) for a, *_ in PARAMS.values()])
    lo_hw = np.array([b[1] for b in PARAMS.values()])
    hi_hw = np.array([b[2] for b in PARAMS.values()])
    theta_hw = np.clip(theta_hw, lo_hw, hi_hw)
    lo_rt, hi_rt = _bounds_rt()
    theta_rt = [np.clip(np.array([getattr(rts0[r].prior, RT_PARAMS[k][0]) for k in RT_PARAMS]), lo_rt, hi_rt)
                for r in rts0]
    # the software releases measured per runtime: one speed each but the newest's (the anchor, 1.0)
    rels = {r: measured_releases(mine, r) if fit_releases else {} for r in rts0}
    curve_rts = {str(c.values.get("runtime")) for c in mine if c.kind == "curve"} if fit_releases else set()
    free_rel = [(r, lab) for r in rts0 for lab, (_date, anchor) in rels[r].items() if not anchor]
    n_rel = len(free_rel)
    # each free release has two parameters: its served kernels' speed, then its fixed per-step cost
    # (Release.latency); both 1 at the start, both pulled toward 1 by the weak log prior
    theta0 = np.concatenate([theta_hw] + theta_rt + [np.ones(2 * n_rel)])
    lo = np.concatenate([lo_hw] + [lo_rt] * len(rts0) + [np.full(n_rel, RELEASE_SPEED_BOUNDS[0]),
                                                         np.full(n_rel, RELEASE_LATENCY_BOUNDS[0])])
    # a runtime without a serving front end (its profile's serve_* priors are 0: the MLPerf harness,
    # gpt-fast) keeps them at 0 -- they would only split its step cost with step_us arbitrarily
    serve = np.array([k.startswith("serve_") for k in RT_PARAMS])
    hi = np.concatenate([hi_hw] + [np.where(serve & (t <= 0.0), 1e-12, hi_rt) for t in theta_rt]
                        + [np.full(n_rel, RELEASE_SPEED_BOUNDS[1]), np.full(n_rel, RELEASE_LATENCY_BOUNDS[1])])
    log_prior = np.concatenate([np.array([b[4] is None for b in PARAMS.values()])]
                               + [np.array([v[1] is None for v in RT_PARAMS.values()])] * len(rts0)
                               + [np.ones(2 * n_rel, dtype=bool)])
    scales = np.concatenate([np.array([b[4] or 1.0 for b in PARAMS.values()])]
                            + [np.array([v[1] or 1.0 for v in RT_PARAMS.values()])] * len(rts0)
                            + [np.ones(2 * n_rel)])

    def unpack(theta: np.ndarray) -> tuple[Hardware, dict[str, Runtime]]:
        hw = _with(hw0, theta[:n_hw])
        rts: dict[str, Runtime] = {}
        rel_part = theta[len(theta) - 2 * n_rel:]
        speed = dict(zip(free_rel, rel_part[:n_rel], strict=True))
        latency = dict(zip(free_rel, rel_part[n_rel:], strict=True))
        for j, r in enumerate(rts0):
            part = theta[n_hw + j * len(RT_PARAMS): n_hw + (j + 1) * len(RT_PARAMS)]
            table = tuple(Release(lab, date, float(speed.get((r, (fam, lab)), 1.0)), fam,
                                  float(latency.get((r, (fam, lab)), 1.0)))
                          for (fam, lab), (date, _a) in rels[r].items())
            rts[r] = rts0[r].with_fit(hw0.name, _rt_fit(part))
            # a kind measured on served curves of the runtime keeps its own table (empty where it saw
            # one release); a kind without takes its siblings' (Runtime.release_table)
            rts[r] = rts[r].with_releases(hw0.name, table) if r in curve_rts else rts[r].without_releases_on(hw0.name)
        return hw, rts

    def errors(theta: np.ndarray) -> np.ndarray:
        hw, rts = unpack(theta)
        pred = predict(mine, {hw0.name: hw}, rts)
        return np.where(np.isfinite(pred) & (pred > 0), pred, 1e-9) / measured - 1.0

    free_serve = np.concatenate([np.zeros(n_hw, dtype=bool)] + [serve & (t > 0.0) for t in theta_rt]
                                + [np.zeros(2 * n_rel, dtype=bool)])  # front-end costs this fit may move

    def residuals(theta: np.ndarray) -> np.ndarray:
        r = weights * np.log1p(errors(theta))
        prior = prior_weight * np.where(log_prior, np.log(np.maximum(theta, 1e-12) / np.maximum(theta0, 1e-12)),
                                        (theta - theta0) / scales)
        return np.concatenate([r, prior])

    # which residual rows each parameter can move (the Jacobian's structure): a hardware factor every
    # case, a runtime's figures (and its releases' speeds) only that runtime's served cases; each
    # parameter its own prior row.  Parameters that share no row are differenced together.
    served_rt = [str(c.values.get("runtime") or DEFAULT_RUNTIME) if c.kind in SERVED_KINDS else "" for c in mine]
    n_case, n_par = len(mine), len(theta0)
    rows_of: list[np.ndarray] = [np.arange(n_case)] * n_hw
    for r in rts0:
        rows_of += [np.flatnonzero([s == r for s in served_rt])] * len(RT_PARAMS)
    rows_of += [np.flatnonzero([s == r for s in served_rt]) for r, _lab in free_rel] * 2  # speed, latency
    rows_of = [np.append(rows, n_case + j) for j, rows in enumerate(rows_of)]
    jac_groups = _disjoint_groups(rows_of, n_case + n_par)
    last: dict[str, np.ndarray] = {}

    def residuals_memo(theta: np.ndarray) -> np.ndarray:
        last["x"], last["f"] = theta.copy(), residuals(theta)
        return last["f"]

    def jacobian(theta: np.ndarray) -> np.ndarray:
        f0 = last["f"] if "x" in last and np.array_equal(last["x"], theta) else residuals(theta)
        return grouped_jacobian(residuals, theta, f0, rows_of, jac_groups, lo, hi, FD_REL_STEP)

    def solve(start: np.ndarray):
        return least_squares(residuals_memo, start, jac=jacobian, bounds=(lo, hi),
                             x_scale=np.where(log_prior, 0.3, scales), max_nfev=max_nfev)

    before = errors(theta0)
    sol = solve(theta0)
    # other front-end levels (SERVE_START_LEVELS): the lowest objective wins.  Only where the first fit
    # leaves a front end binding on some case: where none binds, lower levels change no residual
    binding = free_serve.any() and not np.array_equal(errors(np.where(free_serve, 0.0, sol.x)), errors(sol.x))
    if binding:
        # each level is tried warm (the other parameters where the first fit left them: a few
        # iterations); the best level is then fitted afresh from the profile's other starts
        first, best_level = sol.x, None
        for level in SERVE_START_LEVELS[1:]:
            other = solve(np.where(free_serve, np.clip(theta0 * level, lo, hi), first))
            if other.cost < sol.cost * (1.0 - 1e-6):
                sol, best_level = other, level
        if best_level is not None:
            other = solve(np.where(free_serve, np.clip(theta0 * best_level, lo, hi), theta0))
            if other.cost < sol.cost:
                sol = other
    fitted_hw, fitted_rts = unpack(sol.x)
    after = errors(sol.x)
    names = list(PARAMS)
    rt_values = {r: fitted_rts[r].fit_for(hw0.name).as_yaml_units() for r in fitted_rts}
    return Fit(
        hardware=fitted_hw, before=hw0, case_ids=[c.id for c in mine],
        errors_before=before, errors_after=after,
        values={n: float(v * PARAMS[n][3]) for n, v in zip(names, sol.x[:n_hw], strict=True)},
        prior={n: float(v * PARAMS[n][3]) for n, v in zip(names, theta0[:n_hw], strict=True)},
        runtimes=fitted_rts, runtime_values=rt_values, files=[str(f) for f in files],
        objective=float(sol.cost),
    )


#: relative finite-difference step of the fit's Jacobian (was least_squares' ``diff_step``; the
#: steps and their bound handling are scipy's 2-point ones: :func:`grouped_jacobian`)
FD_REL_STEP = 1e-3


def _disjoint_groups(rows_of: Sequence[np.ndarray], n_rows: int) -> list[list[int]]:
    """Greedy colouring of the parameters: each group's parameters move no residual row in common."""
    groups: list[list[int]] = []
    used: list[np.ndarray] = []
    for j, rows in enumerate(rows_of):
        for g, u in zip(groups, used, strict=True):
            if not u[rows].any():
                g.append(j)
                u[rows] = True
                break
        else:
            groups.append([j])
            u = np.zeros(n_rows, dtype=bool)
            u[rows] = True
            used.append(u)
    return groups


def grouped_jacobian(fun, x: np.ndarray, f0: np.ndarray, rows_of: Sequence[np.ndarray],
                     groups: Sequence[Sequence[int]], lo: np.ndarray, hi: np.ndarray,
                     rel_step: float) -> np.ndarray:
    """Forward-difference Jacobian of ``fun`` at ``x`` with one evaluation per *group* of parameters
    (Curtis-Powell-Reid): parameters of a group move disjoint rows (``rows_of[j]``: the rows
    parameter ``j`` can move), so one step of all of them yields every column.  Same steps as scipy's
    ``least_squares(diff_step=rel_step)`` (relative, flipped or shortened at a bound), hence the same
    matrix wherever the structure is right, at a fraction of the evaluations: a kind with five
    runtimes has ~50 parameters but ~20 groups."""
    sign = np.where(x >= 0, 1.0, -1.0)
    h = rel_step * sign * np.abs(x)
    h = np.where((x + h) - x == 0, np.sqrt(np.finfo(float).eps) * sign * np.maximum(1.0, np.abs(x)), h)
    down, up = x - lo, hi - x
    violated = (x + h < lo) | (x + h > hi)
    fitting = np.abs(h) <= np.maximum(down, up)
    h = np.where(violated & fitting, -h, h)
    h = np.where(~fitting, np.where(up >= down, up, -down), h)
    jac = np.zeros((len(f0), len(x)))
    for group in groups:
        xs = x.copy()
        xs[group] += h[group]
        df = fun(xs) - f0
        for j in group:
            jac[rows_of[j], j] = df[rows_of[j]] / (xs[j] - x[j])
    return jac


def measured_releases(cases: list[Case], runtime: str) -> dict[tuple[str, str], tuple[str, bool]]:
    """The software releases of one runtime among served curve cases, per model family:
    (family, label) -> (date of its first run, whether it is the family's anchor).  The label is the
    run's version, else the month of its date (runs that name no version in one month are read as
    one build).  The anchor is the release with the latest first run: its speed is 1 by definition
    (a design names no release and is read as the newest); a family with one release has none
    (nothing to tell apart)."""
    first: dict[tuple[str, str], str] = {}
    for c in cases:
        if c.kind != "curve" or str(c.values.get("runtime")) != runtime:
            continue
        date = str(c.values.get("release_date") or "")
        label = str(c.values.get("release") or date[:7])
        if not label:
            continue
        key = (c.family or "moe", label)
        if key not in first or (date and (not first[key] or date < first[key])):
            first[key] = date
    out: dict[tuple[str, str], tuple[str, bool]] = {}
    for fam in sorted({f for f, _ in first}):
        mine = {k: d for k, d in first.items() if k[0] == fam}
        if len(mine) < 2:
            continue
        newest = max(mine, key=lambda k: (mine[k], k[1]))
        out.update({k: (mine[k], k == newest) for k in sorted(mine, key=lambda k: (mine[k], k[1]))})
    return out


def _fmt(v: float) -> str:
    return "0" if abs(v) < 1e-6 else f"{v:.4g}"  # overheads below 1e-6 us are zero within the fit


def write_fit(fit: Fit, measurements: str | Path | Sequence[str | Path] | None = None,
              runtime_dir: str | Path | None = None) -> Path:
    """Record a fit in the hardware YAML (atomic replace) and in each fitted runtime's YAML (the
    shipped ``runtimes/*.yaml``, or copies of them in ``runtime_dir``)."""
    files = fit.files or ([str(measurements)] if measurements else [])
    names = ", ".join(Path(f).name for f in files)
    path = Path(fit.before.path)
    text = path.read_text(encoding="utf-8")
    m = re.search(r"^efficiency:\s*$", text, re.M)
    if not m:
        raise SpecError(str(path), "efficiency", "no 'efficiency:' block at the start of a line to replace")
    rest = text[m.end():]
    if re.search(r"^\S", rest, re.M):
        raise SpecError(str(path), "efficiency", "the efficiency block must be the last section to be rewritten")
    raw = _load_file(path).raw if path.exists() else fit.before.raw
    old_source = raw.get("efficiency", {}).get("source", "")
    old_cal = raw.get("efficiency", {}).get("calibration") or {}
    prior_source = old_cal.get("prior_source", old_source) if isinstance(old_cal, dict) else old_source
    s = fit.summary()
    v = fit.values
    date = _dt.date.today().isoformat()
    block = [
        "efficiency:",
        f"  compute: {_fmt(v['compute'])}",
        f"  memory: {_fmt(v['memory'])}",
        f"  network: {_fmt(v['network'])}",
        f"  moe: {_fmt(v['moe'])}",
        f"  dequant: {_fmt(v['dequant'])}",
        f"  moe_group_us: {_fmt(v['moe_group_us'])}",
        f"  served_latency: {_fmt(v['served_latency'])}",
        "  kind: calibration",
        f"  source: \"explorer calibrate --hardware {fit.hardware.name} on {names}, {date}: "
        f"bounded least squares on log error over {s['cases']} cases (points, curves, kernels jointly), "
        "weak prior toward the previous values\"",
        "  calibration:",
        f"    date: '{date}'",
        f"    measurements: {names}",
        f"    cases: [{', '.join(fit.case_ids)}]",
        f"    median_abs_error_before: {s['median_abs_error_before']:.4f}",
        f"    median_abs_error_after: {s['median_abs_error_after']:.4f}",
        f"    p90_abs_error_after: {s['p90_abs_error_after']:.4f}",
        "    prior: {" + ", ".join(f"{k}: {_fmt(x)}" for k, x in fit.prior.items()) + "}",
        "    prior_source: " + _yaml_str(prior_source),
        "",
    ]
    new = text[: m.start()] + "\n".join(block)
    new = _set_lines(new, "overheads", {k: v[k] for k in OVERHEAD_KEYS}, "calibrated")
    _replace_checked(path, new, _load_file)
    for rt in fit.runtimes.values():
        target = None
        if runtime_dir is not None:
            target = Path(runtime_dir) / Path(rt.path).name
            if not target.exists():
                target.write_text(Path(rt.path).read_text(encoding="utf-8"), encoding="utf-8")
        write_runtime_fit(rt, fit.hardware.name, f"explorer calibrate --hardware {fit.hardware.name} on {names}, {date}",
                          path=target)
    return path


def write_runtime_fit(rt: Runtime, hardware: str, source: str, path: Path | None = None) -> Path:
    """Set ``fitted.<hardware>`` and ``releases.<hardware>`` in a runtime YAML (the ``fitted:`` and
    ``releases:`` sections, in that order, must be its last);
    ``path`` defaults to the profile's own file."""
    from explorer.runtime import _load_file as load_rt

    path = Path(rt.path) if path is None else Path(path)
    text = path.read_text(encoding="utf-8")
    m = re.search(r"^fitted:.*$", text, re.M)
    if not m:
        raise SpecError(str(path), "fitted", "no 'fitted:' section at the start of a line")
    if re.search(r"^\S", text[m.end():].lstrip("\n"), re.M) and not text[m.end():].startswith("\n  "):
        pass
    current = load_rt(path)
    fits = dict(current.fitted)
    fits[hardware] = rt.fit_for(hardware)
    lines = ["fitted:"]
    for h in sorted(fits):
        vals = fits[h].as_yaml_units()
        src = source if h == hardware else (current_source(path, h) or "explorer calibrate")
        lines.append(f"  {h}: {{" + ", ".join(f"{k}: {_fmt(vals[k])}" for k in FITTED_KEYS)
                     + f", source: {_yaml_str(src)}}}")
    releases = {k: v for k, v in current.releases.items() if k != hardware}
    if hardware in rt.releases:
        releases[hardware] = rt.releases[hardware]
    if releases:
        lines.append("releases:  # served-kernel speed and fixed per-step cost (latency) of each measured release vs the kind's newest (explorer calibrate)")
        for h in sorted(releases):
            lines.append(f"  {h}:" + ("" if releases[h] else " []  # one release per model family measured"))
            lines.extend(f"    - {{release: {_yaml_str(r.label)}, family: {r.family}, date: {_yaml_str(r.date)}, "
                         f"speed: {_fmt(r.speed)}"
                         + (f", latency: {_fmt(r.latency)}" if r.latency != 1.0 else "") + "}"
                         for r in releases[h])
    new = text[: m.start()] + "\n".join(lines) + "\n"
    return _replace_checked(path, new, load_rt)


def current_source(path: Path, hardware: str) -> str:
    from explorer.specio import read_yaml

    data = read_yaml(path)
    entry = ((data or {}).get("fitted") or {}).get(hardware) or {}
    return str(entry.get("source", "")) if isinstance(entry, dict) else ""


def _set_lines(text: str, section: str, values: dict[str, float], comment: str) -> str:
    """Set ``  key: value  # comment`` lines inside a top-level YAML section (added when missing)."""
    m = re.search(rf"^{section}:\s*\n", text, re.M)
    if not m:
        raise ValueError(f"no '{section}:' section")
    end = re.search(r"^\S", text[m.end():], re.M)
    stop = m.end() + (end.start() if end else len(text) - m.end())
    body = text[m.end():stop]
    for key, value in values.items():
        line = f"  {key}: {_fmt(value)}  # {comment}"
        pat = re.compile(rf"^  {key}:.*$", re.M)
        body = pat.sub(line, body, count=1) if pat.search(body) else line + "\n" + body
    return text[:m.end()] + body + text[stop:]


def _replace_checked(path: Path, new: str, loader=_load_file) -> Path:
    """Write ``new`` over ``path`` atomically, after checking that it loads."""
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(new, encoding="utf-8")
    try:
        loader(tmp)
    except Exception:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(path)
    return path


def transfer(dst: str | Hardware, src: str | Hardware, kernel_factors: bool) -> Path:
    """Copy a calibrated kind's serving factors (MoE efficiency, kernel launch, and every runtime's
    fitted host costs) -- and, with ``kernel_factors``, its compute/memory/network efficiencies --
    to a kind with no measurements.  Recorded in the destination file as ``efficiency.transferred``
    (an assumption, dated) and in each runtime's ``fitted.<dst>`` (with the source named)."""
    from explorer.runtime import list_runtimes

    d = load_hardware(dst) if not isinstance(dst, Hardware) else dst
    s_ = load_hardware(src) if not isinstance(src, Hardware) else src
    path = Path(d.path)
    text = path.read_text(encoding="utf-8")
    note = f"transferred from {s_.name}'s calibration"
    text = _set_lines(text, "overheads", {k: getattr(s_, PARAMS[k][0]) * PARAMS[k][3] for k in OVERHEAD_KEYS}, note)
    keys = EFFICIENCY_KEYS if kernel_factors else ("moe",)
    text = _set_lines(text, "efficiency", {k: getattr(s_, PARAMS[k][0]) for k in keys}, note)
    what = "all factors" if kernel_factors else "MoE factor, kernel launch and runtime host costs"
    line = (f"  transferred: \"no measurement on this kind; {what} copied from {s_.name}.yaml's calibration "
            f"of {_dt.date.today().isoformat()} (assumption)\"")
    pat = re.compile(r"^  transferred:.*$", re.M)
    text = pat.sub(line, text, count=1) if pat.search(text) else text.rstrip("\n") + "\n" + line + "\n"
    out = _replace_checked(path, text)
    if path.resolve().parent == Path(load_hardware(s_.name).path).resolve().parent:
        for rt in list_runtimes():
            # a kind's own fit is kept; a transferred one is replaced (it follows its source's refits)
            mine = re.search(rf"^  {re.escape(d.name)}: .*source: \"(?!transferred from)", Path(rt.path).read_text(encoding="utf-8"),
                             re.M) if d.name in rt.fitted else None
            if s_.name in rt.fitted and mine is None:
                write_runtime_fit(rt.with_fit(d.name, rt.fitted[s_.name]), d.name,
                                  f"transferred from {s_.name} (no measurement on {d.name}; assumption)")
    return out


def _yaml_str(s: str) -> str:
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"') + '"'


def format_fit(fit: Fit) -> str:
    s = fit.summary()
    lines = [f"calibration of {s['hardware']} on {s['cases']} cases"]
    for k in PARAMS:
        lines.append(f"  {k:18s} {fit.prior[k]:10.4g} -> {fit.values[k]:10.4g}")
    for r, vals in fit.runtime_values.items():
        lines.append(f"  runtime {r}: " + ", ".join(f"{k} {_fmt(v)}" for k, v in vals.items()))
        rels = fit.runtimes[r].releases.get(fit.hardware.name, ()) if r in fit.runtimes else ()
        if rels:
            lines.append(f"  runtime {r} releases (speed, per-step latency vs newest): "
                         + ", ".join(f"{x.family} {x.label} ({x.date}) {x.speed:.3g}, {x.latency:.3g}" for x in rels))
    lines.append(f"  median |error| {s['median_abs_error_before']:.1%} -> {s['median_abs_error_after']:.1%}; "
                 f"p90 after {s['p90_abs_error_after']:.1%}")
    for cid, b, a in zip(fit.case_ids, fit.errors_before, fit.errors_after, strict=True):
        lines.append(f"    {cid:60s} {b:+8.1%} -> {a:+8.1%}")
    if not all(math.isfinite(x) for x in fit.errors_after):
        lines.append("  warning: some predictions are not finite")
    return "\n".join(lines)


#: what :func:`holdout_groups` leaves out together: ``curve`` one measured curve; ``config`` every
#: curve of one (model, runtime) on the kind -- a configuration the fit has never seen served (other
#: tp/ep splits, lengths and dates of it included), the harder question a new curve can ask
HOLDOUT_UNITS = ("curve", "config")


def holdout_groups(cases: list[Case], by: str = "curve") -> dict[str, list[int]]:
    """Units left out together: every case of one curve (``by="config"``: of every curve of the
    same model and runtime); one measurement point (an MLPerf run: its throughput row with the
    latency means calibration fits); kernels are not held out here (their own leave-one-out is in
    explorer.kernel_fit)."""
    if by not in HOLDOUT_UNITS:
        raise ValueError(f"hold-out unit {by!r}: expected one of {', '.join(HOLDOUT_UNITS)}")
    groups: dict[str, list[int]] = {}
    fitted_parents = {c.parent for c in cases if c.supported and c.parent and c.kind in SERVED_KINDS}
    for i, c in enumerate(cases):
        if not c.supported:
            continue
        if c.kind == "system" and c.id in fitted_parents:
            # an MLPerf Server/Interactive row whose latency means are fitted: the row and its means
            # leave together, so its throughput is predicted from a fit that never saw its run
            groups.setdefault(f"point:{c.id}", []).append(i)
        elif c.kind == "curve":
            unit = c.curve if by == "curve" else f"{c.values.get('model')}|{c.runtime}"
            groups.setdefault(f"curve:{unit}", []).append(i)
        elif c.parent in fitted_parents:  # the rest of that run (explorer/mlperf_latency.py)
            groups.setdefault(f"point:{c.parent}", []).append(i)
        elif c.kind in SERVED_KINDS:
            groups.setdefault(f"point:{c.id}", []).append(i)
    return groups


def cross_validate(hardware: str | Hardware, measurements: str | Path | Sequence[str | Path] = DEFAULT_FILES,
                   cases: list[Case] | None = None, max_nfev: int = 60, by: str = "curve",
                   only: Sequence[str] | None = None) -> dict[str, float]:
    """Held-out error of every served case on the kind: for each whole curve (``by="config"``: each
    model and runtime's curves together; :func:`holdout_groups`) and each single measurement point,
    fit on everything else on the kind and predict what was left out.  ``only`` restricts it to
    those hold-out groups (names as :func:`holdout_groups` gives them: a caller can spread one
    kind's groups over processes).

    Starts every fit from the file's *prior* values when the file is already calibrated.
    """
    files = [measurements] if isinstance(measurements, str | Path) else list(measurements)
    hw = load_hardware(hardware) if not isinstance(hardware, Hardware) else hardware
    all_cases = cases if cases is not None else load_all_cases(files)
    mine = [c for c in all_cases if c.supported and c.hardware == hw.name]
    out: dict[str, float] = {}
    for name, idx in holdout_groups(mine, by).items():
        if by != "curve" and not name.startswith("curve:"):
            continue  # the points' leave-one-out is the same under either unit: run it once, by="curve"
        if only is not None and name not in only:
            continue
        keep = set(idx)
        rest = [c for i, c in enumerate(mine) if i not in keep]
        if not any(c.kind in SERVED_KINDS for c in rest):
            continue
        fit = calibrate(hw, files, cases=rest, max_nfev=max_nfev)
        held = [mine[i] for i in idx]
        # a runtime with no other case on this kind is predicted as for an unseen kind (its fits elsewhere)
        rts = {r: fit.runtimes.get(r) or load_runtime(r).without_fit(hw.name)
               for r in {c.values.get("runtime") for c in held} if r}
        pred = predict(held, {hw.name: fit.hardware}, rts)
        for c, p in zip(held, pred, strict=True):
            out[c.id] = float(p / c.measured - 1.0)
    return out
