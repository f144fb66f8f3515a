"""Calibration: fit a hardware file's efficiency factors and overheads to published measurements.

For one hardware kind, the free parameters ``eta_compute, eta_memory, eta_network, eta_moe``
(bounded to [0.2, 1]: physical efficiencies never exceed 1) and the overheads ``kernel_launch``,
``step`` and ``per_sequence`` (bounded, microseconds) minimise, by bounded least squares
(scipy's trust-region reflective), the sum over every supported case on that hardware of
``log(predicted/measured)^2`` -- the whole set at once, never case by case -- plus a weak prior
pulling each parameter toward the file's current value (weight :data:`PRIOR_WEIGHT` on
``log(theta/theta_0)``; it keeps factors that no case constrains where the file had them).

``--write`` records the fitted values in the YAML with the date, the case ids and the error before
and after.  Writing replaces the ``efficiency:`` block (which must be the file's last section, as
in every shipped file) and the numbers in ``overheads:``; the rest of the file is kept verbatim.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from explorer.errors import SpecError
from explorer.hardware import Hardware, _load_file, load_hardware
from explorer.validate import DEFAULT_MEASUREMENTS, Case, load_cases, predict

PRIOR_WEIGHT = 0.3
#: name -> (Hardware attribute, lower bound, upper bound, scale to the YAML's unit, prior scale).
#: Efficiencies get a prior on log(theta/theta_0); overheads, whose prior may be ~0, one on
#: (theta - theta_0)/prior_scale (seconds).
PARAMS: dict[str, tuple[str, float, float, float, float | None]] = {
    "compute": ("eta_compute", 0.2, 1.0, 1.0, None),
    "memory": ("eta_memory", 0.2, 1.0, 1.0, None),
    "network": ("eta_network", 0.2, 1.0, 1.0, None),
    "moe": ("eta_moe", 0.2, 1.0, 1.0, None),
    "kernel_launch_us": ("kernel_launch_s", 0.0, 30e-6, 1e6, 5e-6),
    "step_us": ("step_overhead_s", 0.0, 10e-3, 1e6, 1e-3),
    "per_sequence_us": ("per_sequence_s", 0.0, 200e-6, 1e6, 50e-6),
}


@dataclass
class Fit:
    hardware: Hardware
    before: Hardware
    case_ids: list[str]
    errors_before: np.ndarray
    errors_after: np.ndarray
    values: dict[str, float]
    prior: dict[str, float]

    def summary(self) -> dict[str, Any]:
        def med(e: np.ndarray) -> float:
            return float(np.median(np.abs(e))) if len(e) else float("nan")
        return {
            "hardware": self.hardware.name,
            "cases": len(self.case_ids),
            "case_ids": self.case_ids,
            "fitted": self.values,
            "prior": self.prior,
            "median_abs_error_before": med(self.errors_before),
            "median_abs_error_after": med(self.errors_after),
            "p90_abs_error_after": float(np.percentile(np.abs(self.errors_after), 90)) if len(self.case_ids) else None,
        }


def prior_hardware(hw: Hardware) -> Hardware:
    """The hardware with the values a previous calibration started from (``calibration.prior``),
    so that calibrating again is idempotent rather than drifting from its own output."""
    prior = (hw.raw.get("efficiency", {}).get("calibration") or {}).get("prior")
    if not isinstance(prior, dict):
        return hw
    return hw.with_efficiency(**{PARAMS[k][0]: float(v) / PARAMS[k][3] for k, v in prior.items() if k in PARAMS})


def _with(hw: Hardware, theta: np.ndarray) -> Hardware:
    return hw.with_efficiency(**{PARAMS[k][0]: float(v) for k, v in zip(PARAMS, theta, strict=True)})


def calibrate(hardware: str | Hardware, measurements: str | Path = DEFAULT_MEASUREMENTS,
              cases: list[Case] | None = None, prior_weight: float = PRIOR_WEIGHT) -> Fit:
    """Fit one hardware kind's factors to the measurements on it (see module docstring)."""
    from scipy.optimize import least_squares

    hw0 = prior_hardware(load_hardware(hardware) if not isinstance(hardware, Hardware) else hardware)
    all_cases = cases if cases is not None else load_cases(measurements)
    mine = [c for c in all_cases if c.supported and c.hardware == hw0.name]
    if not mine:
        raise SpecError(str(measurements), None, f"no supported case on hardware '{hw0.name}' to calibrate on")
    measured = np.array([c.measured for c in mine])
    theta0 = np.array([getattr(hw0, a) for a, *_ in PARAMS.values()])
    lo = np.array([b[1] for b in PARAMS.values()])
    hi = np.array([b[2] for b in PARAMS.values()])
    theta0 = np.clip(theta0, lo, hi)
    log_prior = np.array([b[4] is None for b in PARAMS.values()])
    scales = np.array([b[4] or 1.0 for b in PARAMS.values()])

    def residuals(theta: np.ndarray) -> np.ndarray:
        pred = predict(mine, {hw0.name: _with(hw0, theta)})
        r = np.log(np.where(np.isfinite(pred) & (pred > 0), pred, 1e-9) / measured)
        prior = prior_weight * np.where(log_prior, np.log(np.maximum(theta, 1e-12) / np.maximum(theta0, 1e-12)),
                                        (theta - theta0) / scales)
        return np.concatenate([r, prior])

    before = predict(mine, {hw0.name: hw0}) / measured - 1.0
    sol = least_squares(residuals, theta0, bounds=(lo, hi), x_scale=np.where(log_prior, 0.5, scales), diff_step=1e-3,
                        max_nfev=200)
    fitted = _with(hw0, sol.x)
    after = predict(mine, {hw0.name: fitted}) / measured - 1.0
    names = list(PARAMS)
    return Fit(
        hardware=fitted, before=hw0, case_ids=[c.id for c in mine],
        errors_before=before, errors_after=after,
        values={n: float(v * PARAMS[n][3]) for n, v in zip(names, sol.x, strict=True)},
        prior={n: float(v * PARAMS[n][3]) for n, v in zip(names, theta0, strict=True)},
    )


def _fmt(v: float) -> str:
    return "0" if abs(v) < 1e-6 else f"{v:.4g}"  # overheads below 1e-6 us are zero within the fit


def write_fit(fit: Fit, measurements: str | Path) -> Path:
    """Record a fit in the hardware YAML (atomic replace)."""
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
        "  kind: calibration",
        f"  source: \"explorer calibrate --hardware {fit.hardware.name} on {Path(measurements).name}, {date}: "
        f"bounded least squares on log error over {s['cases']} cases (whole set), weak prior toward the previous values\"",
        "  calibration:",
        f"    date: '{date}'",
        f"    measurements: {Path(measurements).name}",
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
    return _replace_checked(path, new)


OVERHEAD_KEYS = ("kernel_launch_us", "step_us", "per_sequence_us")
EFFICIENCY_KEYS = ("compute", "memory", "network", "moe")


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


def _replace_checked(path: Path, new: str) -> Path:
    """Write ``new`` over ``path`` atomically, after checking that it loads."""
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(new, encoding="utf-8")
    try:
        _load_file(tmp)
    except Exception:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(path)
    return path


def transfer(dst: str | Hardware, src: str | Hardware, kernel_factors: bool) -> Path:
    """Copy a calibrated kind's serving factors (MoE efficiency and the overheads) -- and, with
    ``kernel_factors``, its compute/memory/network efficiencies -- to a kind with no measurements.
    Recorded in the destination file as ``efficiency.transferred`` (an assumption, dated)."""
    d = load_hardware(dst) if not isinstance(dst, Hardware) else dst
    s_ = load_hardware(src) if not isinstance(src, Hardware) else src
    path = Path(d.path)
    text = path.read_text(encoding="utf-8")
    note = f"transferred from {s_.name}'s calibration"
    text = _set_lines(text, "overheads", {k: getattr(s_, PARAMS[k][0]) * PARAMS[k][3] for k in OVERHEAD_KEYS}, note)
    keys = EFFICIENCY_KEYS if kernel_factors else ("moe",)
    text = _set_lines(text, "efficiency", {k: getattr(s_, PARAMS[k][0]) for k in keys}, note)
    what = "all factors" if kernel_factors else "MoE factor and serving overheads"
    line = (f"  transferred: \"no measurement on this kind; {what} copied from {s_.name}.yaml's calibration "
            f"of {_dt.date.today().isoformat()} (assumption)\"")
    pat = re.compile(r"^  transferred:.*$", re.M)
    text = pat.sub(line, text, count=1) if pat.search(text) else text.rstrip("\n") + "\n" + line + "\n"
    return _replace_checked(path, text)


def _yaml_str(s: str) -> str:
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"') + '"'


def format_fit(fit: Fit) -> str:
    s = fit.summary()
    lines = [f"calibration of {s['hardware']} on {s['cases']} cases"]
    for k in PARAMS:
        lines.append(f"  {k:18s} {fit.prior[k]:10.4g} -> {fit.values[k]:10.4g}")
    lines.append(f"  median |error| {s['median_abs_error_before']:.1%} -> {s['median_abs_error_after']:.1%}; "
                 f"p90 after {s['p90_abs_error_after']:.1%}")
    for cid, b, a in zip(fit.case_ids, fit.errors_before, fit.errors_after, strict=True):
        lines.append(f"    {cid:44s} {b:+8.1%} -> {a:+8.1%}")
    if not all(math.isfinite(x) for x in fit.errors_after):
        lines.append("  warning: some predictions are not finite")
    return "\n".join(lines)


def cross_validate(hardware: str | Hardware, measurements: str | Path = DEFAULT_MEASUREMENTS) -> dict[str, float]:
    """Leave-one-out error: for each case on the hardware, fit on the others and predict it.

    The honest out-of-sample figure to set beside the in-sample error of :func:`calibrate`.
    Starts every fit from the file's *prior* values when the file is already calibrated.
    """
    hw = load_hardware(hardware) if not isinstance(hardware, Hardware) else hardware
    cases = [c for c in load_cases(measurements) if c.supported and c.hardware == hw.name]
    out: dict[str, float] = {}
    for i, c in enumerate(cases):
        rest = cases[:i] + cases[i + 1:]
        if not rest:
            continue
        fit = calibrate(hw, measurements, cases=rest)
        [p] = predict([c], {hw.name: fit.hardware})
        out[c.id] = float(p / c.measured - 1.0)
    return out
