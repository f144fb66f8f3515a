"""Kernel-level calibration: fit, per hardware kind, the kernel cost parameters to that kind's rows of
``validation/kernels.yaml`` (explorer/kernel_cases.py), and score the fit held out.

For one hardware kind the free parameters (:data:`PARAMS`: ``eta_compute``, ``eta_memory``,
``eta_network`` and the ``kernels:`` section's latencies, overlap shares and protocol fractions, each
bounded to its physical range) minimise, by bounded least squares (scipy's trust-region reflective,
a Cauchy loss so that the few rows the model cannot represent -- a 1440-GPU ring, a pre-tuning
FP4 kernel -- do not steer it), the sum over every
supported row on that kind of ``log(predicted/measured)^2`` -- the whole set at once, never row by
row -- plus a weak prior (weight :data:`PRIOR_WEIGHT`) pulling each parameter toward its prior:
``log(theta/theta_0)`` for efficiencies and fractions, ``(theta - theta_0)/scale`` for latencies and
overheads (whose prior may be 0).  A parameter fewer than :data:`MIN_ROWS` rows on the kind respond to
is left at its prior (never a constant fitted to one case).

Held-out figures: :func:`cross_validate` refits without each *source* (every row of one
publication or log held out at once: how the model does on a benchmark it has never seen) or
without each row (leave-one-out).

``python -m explorer.kernel_fit [--write]`` prints both and, with ``--write``, records the fit in the
hardware files: a ``kernels:`` section (placed before ``efficiency:``, which stays last) and the
efficiency block's ``compute``/``memory``/``network`` numbers (a line edit; nothing else there).
The priors are kept in ``kernels.fit.prior`` so that fitting again starts from the same place.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from explorer.calibrate import _replace_checked, _set_lines
from explorer.hardware import KERNEL_FLAGS, KERNEL_PARAMS, Hardware, _load_file, list_hardware, load_hardware
from explorer.kernel_cases import (
    DEFAULT_KERNELS,
    TARGETS,
    load_kernel_cases,
    on_own_fabric,
    predict_kernel_cases,
)
from explorer.validate import Case

PRIOR_WEIGHT = 0.3
#: A parameter is fitted on a kind only when at least this many of its rows respond to it (fewer, and
#: it would be a constant fitted to a case or two): otherwise it stays at its (family) prior.
MIN_ROWS = 3
#: Robust-loss scale on log error (rows further off than ~25% count ever less than quadratically).
LOSS_SCALE = 0.25
#: YAML key -> (Hardware attribute, lower, upper (SI), YAML unit per SI unit, prior scale or None for log prior).
PARAMS: dict[str, tuple[str, float, float, float, float | None]] = {
    "compute": ("eta_compute", 0.2, 1.0, 1.0, None),
    "memory": ("eta_memory", 0.2, 1.0, 1.0, None),
    "network": ("eta_network", 0.2, 1.0, 1.0, None),
    "kernel_latency_us": ("kernel_latency_s", 0.0, 30e-6, 1e6, 3e-6),
    "gemm_epilogue_exposed": ("gemm_epilogue_exposed", 0.0, 1.0, 1.0, 0.5),
    "attention_eta": ("attention_eta", 0.2, 1.0, 1.0, None),
    "attention_tile_overhead": ("attention_tile_overhead", 0.0, 4.0, 1.0, 1.0),
    "softmax_exposed": ("softmax_exposed", 0.0, 1.0, 1.0, 0.5),
    "legacy_mma_fraction": ("legacy_mma_fraction", 0.1, 1.0, 1.0, None),
    "kv_page_overhead_bytes": ("kv_page_overhead_bytes", 0.0, 16384.0, 1.0, 2048.0),
    "collective_latency_us": ("collective_latency_s", 0.0, 300e-6, 1e6, 30e-6),
    "ll_bw_fraction": ("ll_bw_fraction", 0.02, 1.0, 1.0, None),
    "ll128_bw_fraction": ("ll128_bw_fraction", 0.1, 1.0, 1.0, None),
    "ll_step_us": ("ll_step_s", 0.0, 20e-6, 1e6, 1e-6),
    "ll128_step_us": ("ll128_step_s", 0.0, 20e-6, 1e6, 2e-6),
    "nvls_eta": ("nvls_eta", 0.2, 1.0, 1.0, None),
    "nvls_latency_us": ("nvls_latency_s", 0.0, 300e-6, 1e6, 30e-6),
}
EFFICIENCY_PARAMS = ("compute", "memory", "network")
#: Kernel kinds grouped as the targets are (docs/kernels.md).
KIND_GROUPS = {k: name for name, (kinds, _) in TARGETS.items() for k in kinds}


def _with(hw: Hardware, names: list[str], theta: np.ndarray) -> Hardware:
    return hw.with_efficiency(**{PARAMS[k][0]: float(v) for k, v in zip(names, theta, strict=True)})


def prior_values(hw: Hardware) -> dict[str, float]:
    """Prior of every parameter (SI): ``kernels.fit.prior`` when an earlier fit recorded it (so a refit
    is idempotent), else the efficiency calibration's sourced kernel-level priors for the three
    efficiencies (cuBLASLt / STREAM / NCCL figures) and the file's current values for the rest."""
    out = {k: float(getattr(hw, a)) for k, (a, *_r) in PARAMS.items()}
    eff_prior = ((hw.raw.get("efficiency") or {}).get("calibration") or {}).get("prior") or {}
    for k in EFFICIENCY_PARAMS:
        if isinstance(eff_prior.get(k), int | float):
            out[k] = float(eff_prior[k])
    fit_prior = ((hw.raw.get("kernels") or {}).get("fit") or {}).get("prior") or {}
    for k, v in fit_prior.items():
        if k in PARAMS and isinstance(v, int | float):
            out[k] = float(v) / PARAMS[k][3]
    return out


def kernel_residuals(cases: list[Case], hw: Hardware) -> np.ndarray:
    """``log(predicted/measured)`` of every supported case on ``hw`` (its name), in case order; a
    prediction that is not finite and positive counts as 1e-9 of the measurement."""
    mine = [c for c in cases if c.supported and c.hardware == hw.name and on_own_fabric(c)]
    if not mine:
        return np.zeros(0)
    pred = predict_kernel_cases(mine, lambda _n: hw)
    meas = np.array([c.measured for c in mine])
    ok = np.isfinite(pred) & (pred > 0)
    return np.log(np.where(ok, pred, 1e-9 * meas) / meas)


@dataclass
class KernelFit:
    hardware: Hardware
    before: Hardware
    cases: list[Case]
    errors_before: np.ndarray
    errors_after: np.ndarray
    values: dict[str, float]  # fitted, in the YAML's units
    prior: dict[str, float]  # the prior the fit used (file prior, family prior over it), YAML units
    active: list[str]
    base_prior: dict[str, float] | None = None  # the file prior alone (recorded, so refits are idempotent)

    def summary(self) -> dict[str, Any]:
        return {"hardware": self.hardware.name, "cases": len(self.cases), "active": self.active,
                "fitted": self.values, "prior": self.prior,
                "before": by_kind(self.cases, self.errors_before), "after": by_kind(self.cases, self.errors_after)}


def _stat(e: np.ndarray) -> dict[str, Any]:
    e = e[np.isfinite(e)]
    if not len(e):
        return {"n": 0}
    a = np.abs(e)
    return {"n": int(len(e)), "median": float(np.median(a)), "p90": float(np.percentile(a, 90)),
            "signed": float(np.median(e))}


def by_kind(cases: list[Case], err: np.ndarray) -> dict[str, Any]:
    """Median / p90 |error| (``predicted/measured - 1``) per kernel kind, per target group and overall."""
    kinds = np.array([c.kind for c in cases])
    groups = np.array([KIND_GROUPS.get(c.kind, c.kind) for c in cases])
    out: dict[str, Any] = {"all": _stat(err)}
    for g in sorted(set(groups)):
        out[g] = _stat(err[groups == g])
    for k in sorted(set(kinds)):
        out["kind:" + k] = _stat(err[kinds == k])
    return out


def fit_kind(hardware: str | Hardware, cases: list[Case], prior_weight: float = PRIOR_WEIGHT,
             loss: str = "cauchy", prior: dict[str, float] | None = None) -> KernelFit:
    """Fit one hardware kind's kernel parameters to its supported cases (module docstring).
    ``prior`` (SI, by YAML key) overrides :func:`prior_values` for the keys it has."""
    from scipy.optimize import least_squares

    hw0 = load_hardware(hardware) if not isinstance(hardware, Hardware) else hardware
    mine = [c for c in cases if c.supported and c.hardware == hw0.name and on_own_fabric(c)]
    if not mine:
        raise ValueError(f"no supported kernel case on hardware '{hw0.name}'")
    base = prior_values(hw0)
    prior = {**base, **(prior or {})}
    names = list(PARAMS)
    lo = np.array([PARAMS[k][1] for k in names])
    hi = np.array([PARAMS[k][2] for k in names])
    if hw0.nvls_eta <= 0:  # no in-switch reduction on this fabric: nothing to fit
        for k in ("nvls_eta", "nvls_latency_us"):
            lo[names.index(k)] = hi[names.index(k)] = prior[k] = 0.0
    theta0 = np.clip(np.array([prior[k] for k in names]), lo, hi)
    start = _with(hw0, names, theta0)
    # which parameters any row responds to (a finite-difference probe at the prior)
    r0 = kernel_residuals(mine, start)
    active = []
    for j, k in enumerate(names):
        if lo[j] == hi[j]:
            continue
        # informed: at least MIN_ROWS rows move by > 2% when the parameter moves by a plausible step
        # (x/÷1.25 or ±1 prior scale) -- or, for a parameter that only matters past a switch (NVLS vs
        # ring), when it goes to one of its bounds
        scale = PARAMS[k][4]
        steps = [theta0[j] * 1.25, theta0[j] / 1.25] if scale is None else [theta0[j] + scale, theta0[j] - scale]
        moved = np.zeros(len(r0), dtype=bool)
        for v in [*steps, lo[j], hi[j]]:
            probe = theta0.copy()
            probe[j] = min(max(v, lo[j]), hi[j])
            moved |= np.abs(kernel_residuals(mine, _with(hw0, names, probe)) - r0) > 0.02
            if moved.sum() >= MIN_ROWS and v in steps:
                break
        if moved.sum() >= MIN_ROWS:
            active.append(k)
    ia = [names.index(k) for k in active]
    log_prior = np.array([PARAMS[k][4] is None for k in active])
    scales = np.array([PARAMS[k][4] or 1.0 for k in active])
    a0 = theta0[ia]
    lo_a, hi_a = lo[ia], hi[ia]
    x0 = np.clip(a0, lo_a + 1e-12 * (hi_a - lo_a), hi_a - 1e-12 * (hi_a - lo_a))

    def residuals(x: np.ndarray) -> np.ndarray:
        r = kernel_residuals(mine, _with(start, active, x))
        p = prior_weight * np.where(log_prior, np.log(np.maximum(x, 1e-12) / np.maximum(a0, 1e-12)), (x - a0) / scales)
        return np.concatenate([r, p])

    if active:
        sol = least_squares(residuals, x0, bounds=(lo_a, hi_a), x_scale=np.where(log_prior, 0.3, scales),
                            diff_step=1e-4, loss=loss, f_scale=LOSS_SCALE, max_nfev=400)
        fitted = _with(start, active, sol.x)
    else:
        fitted = start
    before = np.exp(kernel_residuals(mine, hw0)) - 1.0
    after = np.exp(kernel_residuals(mine, fitted)) - 1.0
    unit = {k: PARAMS[k][3] for k in names}
    return KernelFit(hardware=fitted, before=hw0, cases=mine, errors_before=before, errors_after=after,
                     values={k: float(getattr(fitted, PARAMS[k][0])) * unit[k] for k in names},
                     prior={k: float(theta0[j]) * unit[k] for j, k in enumerate(names)}, active=active,
                     base_prior={k: float(base[k]) * unit[k] for k in names})


#: Fabric-specific parameters that siblings do not share (an NVL72 rack's switch trays are not an HGX
#: board's): they keep their own file prior.
NOT_FROM_FAMILY = ("nvls_eta", "nvls_latency_us")


def family_prior(name: str, fits: dict[str, KernelFit]) -> dict[str, float]:
    """Prior (SI) for kind ``name`` from the other kinds of its family: per parameter, the geometric
    (efficiencies, fractions) or arithmetic (latencies, overheads) mean of their fitted values where
    their rows constrained it.  Empty where no other member fitted it (the file prior stays)."""
    fam = load_hardware(name).family
    others = [f for n, f in fits.items() if n != name and f.hardware.family == fam]
    out: dict[str, float] = {}
    for k, (attr, _lo, _hi, _u, scale) in PARAMS.items():
        if k in NOT_FROM_FAMILY:
            continue
        vals = [float(getattr(f.hardware, attr)) for f in others if k in f.active]
        if vals:
            out[k] = float(np.exp(np.mean(np.log(np.maximum(vals, 1e-12))))) if scale is None else float(np.mean(vals))
    return out


def fit_all(cases: list[Case], hardware: list[str] | None = None, **kw: Any) -> dict[str, KernelFit]:
    """Fit every kind (or those named): first each on its own rows from its file prior, then again
    with the prior its architecture family's first-stage fits give (:func:`family_prior`), so that a
    kind with few rows of some kernel leans on its siblings rather than on an assumption."""
    everyone = sorted({c.hardware for c in cases if c.supported})
    names = [n for n in (hardware or everyone) if n in everyone]
    fams = {load_hardware(n).family for n in names}
    stage1 = {n: fit_kind(n, cases, **kw) for n in everyone if load_hardware(n).family in fams}
    return {n: fit_kind(n, cases, prior=family_prior(n, stage1), **kw) for n in names}


def family_hardware(name: str, cases: list[Case]) -> Hardware:
    """A kind without rows of its own: its file with the priors its family's fits give (the kind's
    file priors where the family has none)."""
    hw = load_hardware(name)
    fam = hw.family
    stage1 = {n: fit_kind(n, cases) for n in sorted({c.hardware for c in cases if c.supported})
              if load_hardware(n).family == fam}
    prior = {**prior_values(hw), **family_prior(name, stage1)}
    if hw.nvls_eta <= 0:
        prior["nvls_eta"] = prior["nvls_latency_us"] = 0.0
    keys = [k for k in PARAMS if k in prior]
    return _with(hw, keys, np.array([prior[k] for k in keys]))


def cross_validate(cases: list[Case], by: str = "source", hardware: list[str] | None = None,
                   progress: Callable[[str], None] | None = None) -> np.ndarray:
    """Held-out ``predicted/measured - 1`` for every supported case, NaN for unsupported ones.

    ``by="source"``: each source (publication, log) is removed from the whole set -- from every kind,
    so neither its kind's fit nor its family's priors have seen it -- and its rows are predicted by
    :func:`fit_all` on the rest.  ``by="row"`` (leave-one-out): each row is predicted by its kind's
    second-stage fit without it (the family priors come from the other kinds, which never contain it).
    """
    out = np.full(len(cases), np.nan)
    everyone = sorted({c.hardware for c in cases if c.supported})
    names = [n for n in (hardware or everyone) if n in everyone]
    mine = [i for i, c in enumerate(cases) if c.supported and c.hardware in names and on_own_fabric(c)]

    def score(idx: list[int], hw: dict[str, Hardware]) -> None:
        pred = predict_kernel_cases([cases[i] for i in idx], lambda n: hw[n])
        out[idx] = pred / np.array([cases[i].measured for i in idx]) - 1.0

    if by == "source":
        for key in sorted({cases[i].values.get("group", "?") for i in mine}):
            held = [i for i in mine if cases[i].values.get("group", "?") == key]
            rest = [c for c in cases if c.values.get("group", "?") != key]
            kinds = sorted({cases[i].hardware for i in held})
            if progress:
                progress(f"holding out {key} ({len(held)} rows on {', '.join(kinds)})")
            remaining = {c.hardware for c in rest if c.supported}
            fits = fit_all(rest, [k for k in kinds if k in remaining])
            score(held, {k: fits[k].hardware if k in fits else family_hardware(k, rest) for k in kinds})
        return out
    stage1 = {n: fit_kind(n, cases) for n in everyone}
    for name in names:
        prior = family_prior(name, stage1)
        idx = [i for i in mine if cases[i].hardware == name]
        for i in idx:
            rest = [c for j, c in enumerate(cases) if j != i and c.hardware == name]
            if progress:
                progress(f"{name}: holding out {cases[i].id}")
            hw = fit_kind(name, rest, prior=prior).hardware if any(c.supported for c in rest) else load_hardware(name)
            score([i], {name: hw})
    return out


# ------------------------------------------------------------------------------------------ writing


def _fmt(v: float) -> str:
    return "0" if abs(v) < 1e-9 else f"{v:.4g}"


def write_kernel_fit(fit: KernelFit, kernels_path: str | Path = DEFAULT_KERNELS) -> Path:
    """Record a fit in the hardware YAML: the ``kernels:`` section (replaced, or inserted before
    ``efficiency:``) and the efficiency block's compute/memory/network numbers.  Atomic."""
    path = Path(fit.before.path)
    text = path.read_text(encoding="utf-8")
    raw = _load_file(path).raw
    old = raw.get("kernels") or {}
    date = _dt.date.today().isoformat()
    src = old.get("source") or ("kernel_latency/epilogue/attention/protocol parameters: priors as documented in "
                                "docs/kernels.md, fitted by explorer.kernel_fit")
    after, before = by_kind(fit.cases, fit.errors_after), by_kind(fit.cases, fit.errors_before)
    lines = ["kernels:"]
    for key, (attr, _scale, _default) in KERNEL_PARAMS.items():
        if key in PARAMS:
            lines.append(f"  {key}: {_fmt(fit.values[key])}" + ("  # fitted" if key in fit.active else "  # prior"))
        else:
            v = getattr(fit.hardware, attr) / KERNEL_PARAMS[key][1]
            lines.append(f"  {key}: {_fmt(v)}")
    for key, attr in KERNEL_FLAGS.items():
        lines.append(f"  {key}: {'true' if getattr(fit.hardware, attr) else 'false'}")
    lines.append("  source: " + _yaml_str(src))
    if old.get("notes"):
        lines.append("  notes: " + _yaml_str(old["notes"]))
    lines += ["  fit:", f"    date: '{date}'", f"    measurements: {Path(kernels_path).name}"]
    if fit.cases:
        lines += [
            f"    cases: {len(fit.cases)}",
            f"    fitted: [{', '.join(fit.active)}]",
            f"    median_abs_error_before: {before['all']['median']:.4f}",
            f"    median_abs_error_after: {after['all']['median']:.4f}",
            f"    p90_abs_error_after: {after['all']['p90']:.4f}",
        ]
    else:
        lines.append(f"    transferred: \"no kernel row on this kind: the {fit.hardware.family} family's fitted "
                     "values (explorer.kernel_fit.family_prior; assumption)\"")
    base = fit.base_prior or fit.prior
    lines.append("    prior: {" + ", ".join(f"{k}: {_fmt(v)}" for k, v in base.items()) + "}")
    fam = {k: v for k, v in fit.prior.items() if abs(v - base.get(k, v)) > 1e-12 * max(1.0, abs(v))}
    if fam:
        lines.append(f"    family_prior: {{{', '.join(f'{k}: {_fmt(v)}' for k, v in fam.items())}}}")
    lines.append("")
    block = "\n".join(lines)
    m = re.search(r"^kernels:\s*\n", text, re.M)
    if m:
        end = re.search(r"^\S", text[m.end():], re.M)
        stop = m.end() + (end.start() if end else len(text) - m.end())
        text = text[: m.start()] + block + text[stop:]
    else:
        e = re.search(r"^efficiency:\s*$", text, re.M)
        if not e:
            raise ValueError(f"{path}: no 'efficiency:' section to place 'kernels:' before")
        text = text[: e.start()] + block + text[e.start():]
    text = _set_lines(text, "efficiency", {k: fit.values[k] for k in EFFICIENCY_PARAMS},
                      f"kernel fit on {Path(kernels_path).name}, {date} (explorer.kernel_fit)")
    return _replace_checked(path, text)


def _yaml_str(s: Any) -> str:
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"') + '"'


# -------------------------------------------------------------------------------------------- CLI


def _table(title: str, rows: dict[str, dict[str, Any]]) -> list[str]:
    out = [title, f"  {'group':28s} {'n':>4s} {'median|err|':>11s} {'p90|err|':>9s} {'median err':>10s}"]
    for k, s in rows.items():
        if s.get("n"):
            out.append(f"  {k:28s} {s['n']:4d} {s['median']:11.1%} {s['p90']:9.1%} {s['signed']:+10.1%}")
    return out


def report(cases: list[Case], fits: dict[str, KernelFit], held: dict[str, np.ndarray]) -> str:
    lines: list[str] = []
    for name, f in fits.items():
        lines.append(f"== {name}: {len(f.cases)} rows; fitted {', '.join(f.active) or 'nothing'}")
        for k in f.active:
            lines.append(f"   {k:26s} {f.prior[k]:10.4g} -> {f.values[k]:10.4g}")
    sup = [c for c in cases if c.supported and c.hardware in fits and on_own_fabric(c)]
    idx = [i for i, c in enumerate(cases) if c.supported and c.hardware in fits and on_own_fabric(c)]
    after = np.full(len(cases), np.nan)
    for f in fits.values():
        ids = {c.id: e for c, e in zip(f.cases, f.errors_after, strict=True)}
        for i in idx:
            if cases[i].id in ids:
                after[i] = ids[cases[i].id]
    lines += _table("in-sample, all kinds", by_kind(sup, after[idx]))
    for how, err in held.items():
        lines += _table(f"held out ({how})", by_kind(sup, err[idx]))
    hw_rows = {}
    for name in fits:
        sel = np.array([cases[i].hardware == name for i in idx])
        hw_rows[name] = _stat(after[idx][sel])
        for how, err in held.items():
            hw_rows[f"{name} [{how}]"] = _stat(err[idx][sel])
    lines += _table("by hardware", hw_rows)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m explorer.kernel_fit", description=__doc__.split("\n")[0])
    ap.add_argument("--kernels", default=str(DEFAULT_KERNELS), help="kernels YAML (default: validation/kernels.yaml)")
    ap.add_argument("--hardware", action="append", help="fit only this kind (repeatable)")
    ap.add_argument("--loo", action="store_true", help="also leave-one-out (slower)")
    ap.add_argument("--no-heldout", action="store_true", help="skip the held-out fits")
    ap.add_argument("--write", action="store_true", help="record the fits in the hardware YAMLs")
    a = ap.parse_args(argv)
    cases = load_kernel_cases(a.kernels)
    fits = fit_all(cases, a.hardware)
    held: dict[str, np.ndarray] = {}
    if not a.no_heldout:
        held["leave-one-source-out"] = cross_validate(cases, "source", list(fits))
        if a.loo:
            held["leave-one-out"] = cross_validate(cases, "row", list(fits))
    print(report(cases, fits, held))
    if a.write:
        for f in fits.values():
            print(f"wrote {write_kernel_fit(f, a.kernels)}")
        if not a.hardware:  # kinds without rows: their family's values, where the family has a fit
            fams = {f.hardware.family for f in fits.values()}
            for hw in list_hardware():
                if hw.name not in fits and hw.family in fams:
                    moved = family_hardware(hw.name, cases)
                    none = np.zeros(0)
                    f = KernelFit(moved, hw, [], none, none,
                                  {k: float(getattr(moved, PARAMS[k][0])) * PARAMS[k][3] for k in PARAMS},
                                  {k: v * PARAMS[k][3] for k, v in prior_values(hw).items()}, [])
                    print(f"wrote {write_kernel_fit(f, a.kernels)} (family values, no rows)")
    bad = [c.id for c in cases if not c.supported]
    print(f"unsupported rows: {len(bad)} of {len(cases)}")
    return 0 if all(math.isfinite(f.errors_after.sum()) for f in fits.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
