"""Scale-out fabrics other than the hardware file's own (explorer/data/fabrics.yaml).

A hardware file describes one scale-out network: the DGX/HGX InfiniBand of one 400 Gb/s NIC per GPU,
whose per-step latency is a few microseconds and whose NCCL protocols behave as on NVLink.  Cloud
GPU nodes often sit on another fabric -- AWS EFA (libfabric SRD through the aws-ofi-nccl plugin),
GCP A3 Mega's GPUDirect-TCPXO -- with the same NVLink inside the node but a different hop between
nodes: its line rate per GPU (sourced), and its per-step latency and LL bandwidth share (fitted on
the published collectives run over it, :func:`fit_fabric`).  A fabric replaces only those figures
of the hardware kind (:func:`with_fabric`); the collective model is
:func:`explorer.costs.comm.collective_s` as everywhere.

Which fabric a measured row ran on is read off its text (``match``: a regular expression searched
in the row's source, notes, library and GPU label).  Rows whose group fits one scale-up domain never
touch the fabric.

Ignored: congestion and the fabric's behaviour past two tiers of switches (the fitted rows span 2
to 4 nodes); the fabric's all-to-all (expert-parallel rows are not remapped).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
import yaml

from explorer.errors import SpecError, unknown
from explorer.hardware import Hardware
from explorer.specio import Section
from explorer.units import GB_PER_S, US

FABRICS_FILE = "explorer/data/fabrics.yaml"
#: What :func:`fit_fabric` fits, with (prior, lower, upper) bounds: microseconds and a fraction.
FIT_PARAMS: dict[str, tuple[float, float, float]] = {
    "simple_step_us": (20.0, 0.5, 2000.0),
    "ll_step_us": (20.0, 0.5, 2000.0),
    "ll_bw_fraction": (0.25, 0.01, 1.0),
}


@dataclass(frozen=True)
class Fabric:
    name: str
    display_name: str
    match: re.Pattern
    scaleout_bw: float  # bytes/s per GPU per direction (line rate)
    simple_step_s: float  # NCCL Simple's per-step latency on the hop across nodes
    ll_step_s: float  # NCCL LL's per-step latency on that hop
    ll_bw_fraction: float  # LL's bandwidth / Simple's on that hop
    source: str
    raw: dict[str, Any]


def _fabric(entry: Any, i: int) -> Fabric:
    """One entry of the fabrics file, read with the project's spec reader (unknown or missing keys,
    numbers out of range: one-line errors naming the key)."""
    sec = Section(entry, FABRICS_FILE, f"fabrics[{i}]")
    sec.check_keys({"name", "display_name", "match", "scaleout_GB_per_s", "simple_step_us", "ll_step_us",
                    "ll_bw_fraction", "source", "fit"})
    match = sec.string("match")
    try:
        pat = re.compile(match, re.I)
    except re.error as e:
        raise SpecError(FABRICS_FILE, sec.key("match"), f"not a regular expression: {e}") from None

    def num(k: str, max_value: float | None = None) -> float:
        return float(sec.number(k, min_value=0, min_exclusive=True, max_value=max_value))

    name = sec.string("name")
    return Fabric(name=name, display_name=sec.string("display_name", name), match=pat,
                  scaleout_bw=num("scaleout_GB_per_s") * GB_PER_S, simple_step_s=num("simple_step_us") * US,
                  ll_step_s=num("ll_step_us") * US, ll_bw_fraction=num("ll_bw_fraction", 1.0),
                  source=sec.string("source"), raw=dict(entry))


@cache
def fabrics() -> dict[str, Fabric]:
    """Every fabric of explorer/data/fabrics.yaml by name."""
    text = resources.files("explorer").joinpath("data/fabrics.yaml").read_text(encoding="utf-8")
    entries = (yaml.safe_load(text) or {}).get("fabrics") or []
    return {f.name: f for f in (_fabric(e, i) for i, e in enumerate(entries))}


def get_fabric(name: str, where: str = "--fabric", key: str | None = None) -> Fabric:
    """A fabric by name (case-insensitive); an unknown name is a one-line error naming the choices."""
    table = fabrics()
    f = table.get(str(name).strip().lower())
    if f is None:
        raise unknown(where, key, "fabric", name, table)
    return f


def fabric_in(text: str) -> Fabric | None:
    """The fabric a row's text names (first match in file order), or None (the hardware's own)."""
    for f in fabrics().values():
        if f.match.search(text):
            return f
    return None


def with_fabric(hw: Hardware, fabric: Fabric | str | None) -> Hardware:
    """``hw`` with its scale-out hop replaced by ``fabric``'s (unchanged for None)."""
    if fabric is None:
        return hw
    f = fabrics()[fabric] if isinstance(fabric, str) else fabric
    return replace(hw, scaleout_bw=f.scaleout_bw, scaleout_latency_s=f.simple_step_s,
                   scaleout_ll_step_s=f.ll_step_s, scaleout_ll_fraction=f.ll_bw_fraction, fabric=f.name)


def fitted(f: Fabric, values: dict[str, float]) -> Fabric:
    """``f`` with the :data:`FIT_PARAMS` figures of ``values`` (microseconds / fraction)."""
    return replace(f, simple_step_s=values["simple_step_us"] * US, ll_step_s=values["ll_step_us"] * US,
                   ll_bw_fraction=min(values["ll_bw_fraction"], 1.0))


def fit_fabric(f: Fabric, cases: list, hw_of) -> tuple[dict[str, float], np.ndarray]:
    """Fit :data:`FIT_PARAMS` of fabric ``f`` on its kernel ``cases`` (collectives that leave the
    scale-up domain over it): robust least squares (Cauchy loss, scale 0.2: two EFA rows at 32-64 KiB run 7-16x slower than their neighbours and must not set the fit) on ``log(predicted /
    measured)``, with the hardware kinds as the files give them (``hw_of``).  Returns the fitted
    values and the cases' errors after the fit.  A weak prior keeps unidentified figures near their
    prior (a fabric whose rows never pick LL leaves LL's figures there)."""
    from scipy.optimize import least_squares

    from explorer.kernel_cases import predict_kernel_cases

    names = list(FIT_PARAMS)
    prior = np.log([FIT_PARAMS[k][0] for k in names])
    lo = np.log([FIT_PARAMS[k][1] for k in names])
    hi = np.log([FIT_PARAMS[k][2] for k in names])
    meas = np.array([c.measured for c in cases])

    def errors(theta: np.ndarray) -> np.ndarray:
        cand = fitted(f, dict(zip(names, np.exp(theta), strict=True)))
        return predict_kernel_cases(cases, hw_of, fabric_of=lambda _n: cand) / meas - 1.0

    def residuals(theta: np.ndarray) -> np.ndarray:
        e = errors(theta)
        return np.concatenate([np.log1p(np.clip(e, -0.999999, None)), 0.05 * (theta - prior)])

    x0 = np.clip(np.log([f.simple_step_s / US, f.ll_step_s / US, f.ll_bw_fraction]), lo + 1e-9, hi - 1e-9)
    sol = least_squares(residuals, x0, bounds=(lo, hi), loss="cauchy", f_scale=0.2)
    return dict(zip(names, (float(v) for v in np.exp(sol.x)), strict=True)), errors(sol.x)
