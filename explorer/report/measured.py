"""Measured serving curves drawn on a report's frontier chart (``--measured FILE``).

FILE has the shape of ``validation/fronts.yaml`` (``meta``, ``curves``, ``rows``) and is read with
the validation loader (:func:`explorer.validate.load_cases`).  A measured curve is drawn when it
matches the study:

* **hardware**: the curve's hardware name is one of the study's (feasible) hardware names;
* **workload**: the study's ISL/OSL equals the row's ISL/OSL as written in the file (InferenceX
  rows state ``L`` and are simulated at their mean ``0.9 L``), or is within
  :data:`WORKLOAD_TOLERANCE` of the lengths the simulator uses for the row;
* **model**: a study of real presets matches those presets (canonical names); a shape-search study
  (model ``custom``, or no model column) shows every measured curve on its hardware and workload,
  each labelled with its model.

Each drawn curve also carries the simulator's prediction of the same deployment at the same
concurrencies (:func:`explorer.validate.predict`) and its median ``|predicted / measured - 1|``.

The report's data block gets a top-level ``measured`` key (schema unchanged: readers ignore it)::

    {"source": FILE, "note": {...}, "curves": [{"curve", "label", "model", "hardware", "runtime",
      "precision", "tp", "ep", "dp", "pp", "isl", "osl", "color", "median_abs_error",
      "median_abs_error_gpu", "median_abs_error_user", "concurrency": [...],
      "measured": {"tokens_per_s_per_user": [...], "tokens_per_s_per_gpu": [...]},
      "predicted": {"tokens_per_s_per_user": [...], "tokens_per_s_per_gpu": [...]}}]}
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from explorer.errors import ExplorerError, SpecError

#: Relative tolerance between the study's ISL/OSL and a curve's simulated mean lengths.
WORKLOAD_TOLERANCE = 0.15
#: Flag named in errors about the file.
FLAG = "--measured"
PALETTE = ("#e6550d", "#31a354", "#756bb1", "#3182bd", "#e7ba52", "#636363", "#8c6d31", "#d6616b",
           "#17becf", "#843c39", "#7b4173", "#637939")
_AXES = {"tok_s_user": "tokens_per_s_per_user", "tok_s_gpu": "tokens_per_s_per_gpu"}


@dataclass
class MeasuredCurves:
    """A loaded measured-curves file: its cases and each row's ISL/OSL as written."""

    source: str
    cases: list = field(default_factory=list)
    raw_lengths: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)

    @property
    def unsupported(self) -> list:
        return [c for c in self.cases if not c.supported]


def _raw_lengths(data: Mapping[str, Any]) -> dict[str, tuple[float | None, float | None]]:
    """Row id (numbered as :func:`explorer.curves.curve_cases` numbers them) -> (isl, osl) as written."""
    out: dict[str, tuple[float | None, float | None]] = {}
    seen: set[str] = set()
    for i, raw in enumerate(data.get("rows") or []):
        rid = str(raw.get("id")) if isinstance(raw, dict) and raw.get("id") is not None else f"#{i}"
        if rid in seen:
            rid = f"{rid}#{i}"
        seen.add(rid)
        if isinstance(raw, dict):
            out[rid] = (_number(raw.get("isl")), _number(raw.get("osl")))
    return out


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def load_measured(path: str | os.PathLike) -> MeasuredCurves:
    """Read a measured-curves file; a missing, unreadable or non-curves file raises SpecError
    naming the flag and the file."""
    from explorer.curves import is_curves_file
    from explorer.specio import read_yaml
    from explorer.validate import load_cases

    path = Path(path)
    try:
        data = read_yaml(path)
    except ExplorerError as e:  # the message names the file
        raise SpecError(FLAG, None, str(e)) from None
    if not is_curves_file(data):
        raise SpecError(FLAG, str(path), "not a measured-curves file: expected top-level 'curves:' and 'rows:' lists "
                                     "(the shape of validation/fronts.yaml)")
    try:
        cases = [c for c in load_cases(path) if c.kind == "curve" and c.metric in _AXES]
    except ExplorerError as e:
        raise SpecError(FLAG, None, str(e)) from None
    if not cases:
        raise SpecError(FLAG, str(path), "no measured rows")
    return MeasuredCurves(str(path), cases, _raw_lengths(data))


def _close(study: int, raw: float | None, simulated: Any) -> bool:
    if raw is not None and float(study) == raw:
        return True
    try:
        sim = float(simulated)
    except (TypeError, ValueError):
        return False
    return sim > 0 and abs(float(study) - sim) <= WORKLOAD_TOLERANCE * sim


def study_models(df: pd.DataFrame) -> set[str] | None:
    """Canonical preset names the study evaluates, or None for a shape search (match every model)."""
    from explorer.model import get_preset

    if "model" not in df.columns:
        return None
    names: set[str] = set()
    for m in df["model"].astype(str).unique():
        if m.strip().lower() in ("", "custom", "nan"):
            return None
        try:
            names.add(get_preset(m).shape.name)
        except ExplorerError:
            return None  # not a preset: a searched shape
    return names


def measured_overlay(df: pd.DataFrame, meta: Mapping[str, Any], measured: MeasuredCurves) -> dict[str, Any]:
    """The ``measured`` block of a prepared report table (see module docstring)."""
    from explorer.report.sweep import _workload
    from explorer.validate import predict

    note: dict[str, Any] = {"source": measured.source, "drawn": 0, "unsupported_rows": 0, "skipped": {}}
    block: dict[str, Any] = {"source": measured.source, "note": note, "curves": []}
    pool = df[df["feasible"]] if "feasible" in df.columns and df["feasible"].any() else df
    hardware = ({str(h).lower() for h in pool["hardware"].astype(str).unique()} if "hardware" in pool.columns
                else set())
    isl, osl = _workload(df, meta)
    models = study_models(pool)
    note.update(hardware=sorted(hardware), isl=isl, osl=osl,
                models="every model (shape search)" if models is None else sorted(models))
    unsupported_rows = {c.id.rsplit(":", 1)[0] for c in measured.unsupported}
    note["unsupported_rows"] = len(unsupported_rows)
    if not hardware or isl is None or osl is None:
        note["error"] = "the table lacks " + ", ".join(
            [c for c, v in (("hardware", hardware), ("isl", isl), ("osl", osl)) if not v])
        return block

    def skip(why: str) -> None:
        note["skipped"][why] = note["skipped"].get(why, 0) + 1

    chosen: dict[str, list] = {}
    for curve, cases in _by_curve([c for c in measured.cases if c.supported]).items():
        c0 = cases[0]
        rid = c0.id.rsplit(":", 1)[0]
        raw_isl, raw_osl = measured.raw_lengths.get(rid, (None, None))
        if c0.hardware.lower() not in hardware:
            skip("other hardware")
        elif not (_close(isl, raw_isl, c0.values.get("isl")) and _close(osl, raw_osl, c0.values.get("osl"))):
            skip("other workload")
        elif models is not None and c0.values.get("model") not in models:
            skip("other model")
        else:
            chosen[curve] = cases
    if not chosen:
        return block
    flat = [c for cases in chosen.values() for c in cases]
    pred = predict(flat)
    pred_of = {id(c): float(p) for c, p in zip(flat, pred, strict=True)}
    for k, (curve, cases) in enumerate(chosen.items()):
        block["curves"].append(_curve_entry(curve, cases, pred_of, PALETTE[k % len(PALETTE)]))
    note["drawn"] = len(block["curves"])
    block["agreement"] = curves_agreement(block["curves"])
    return block


def curves_agreement(curves: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Front-level agreement (explorer/front_agreement.py) of the drawn curves' points, one chart per
    model and hardware (the workload is the study's)."""
    from explorer.front_agreement import summarize

    X, Y = "tokens_per_s_per_user", "tokens_per_s_per_gpu"
    pts = []
    for c in curves:
        for mx, my, px, py in zip(c["measured"][X], c["measured"][Y], c["predicted"][X], c["predicted"][Y],
                                  strict=True):
            if None not in (mx, my, px, py):
                pts.append({"group": f"{c['model']} on {c['hardware']}", "measured": (mx, my), "predicted": (px, py)})
    return summarize(pts)


def _by_curve(cases: list) -> dict[str, list]:
    out: dict[str, list] = {}
    for c in cases:
        out.setdefault(c.curve, []).append(c)
    return out


def _finite(v: float) -> float | None:
    return float(v) if np.isfinite(v) else None


def _curve_entry(curve: str, cases: list, pred_of: dict[int, float], color: str) -> dict[str, Any]:
    rows: dict[str, dict[str, Any]] = {}
    for c in cases:
        rows.setdefault(c.id.rsplit(":", 1)[0], {})[c.metric] = c
    pairs = sorted((r for r in rows.values() if all(a in r for a in _AXES)),
                   key=lambda r: int(r["tok_s_gpu"].values.get("batch", 0)))
    v = cases[0].values
    errs: dict[str, list[float]] = {a: [] for a in _AXES}
    conc: list[int] = []
    meas: dict[str, list[float | None]] = {f: [] for f in _AXES.values()}
    predicted: dict[str, list[float | None]] = {f: [] for f in _AXES.values()}
    for r in pairs:
        conc.append(int(r["tok_s_gpu"].values.get("batch", 0)))
        for axis, name in _AXES.items():
            c = r[axis]
            p = pred_of.get(id(c), float("nan"))
            meas[name].append(_finite(c.measured))
            predicted[name].append(_finite(p))
            if np.isfinite(p) and np.isfinite(c.measured) and c.measured > 0:
                errs[axis].append(abs(p / c.measured - 1.0))

    def med(values: list[float]) -> float | None:
        return float(np.median(values)) if values else None

    everything = errs["tok_s_gpu"] + errs["tok_s_user"]
    runtime = cases[0].runtime or str(v.get("runtime", ""))
    deploy = f"tp{v.get('tp')}/ep{v.get('ep')}" + (f"/dp{v.get('dp')}" if int(v.get("dp", 1) or 1) > 1 else "")
    label = f"{v.get('model')} {runtime} {deploy} {v.get('precision')}"
    return {
        "curve": curve, "label": label, "model": v.get("model"), "hardware": cases[0].hardware, "runtime": runtime,
        "precision": v.get("precision"), "tp": v.get("tp"), "ep": v.get("ep"), "dp": v.get("dp"),
        "pp": v.get("pp"), "isl": v.get("isl"), "osl": v.get("osl"), "color": color,
        "median_abs_error": med(everything), "median_abs_error_gpu": med(errs["tok_s_gpu"]),
        "median_abs_error_user": med(errs["tok_s_user"]), "concurrency": conc, "measured": meas,
        "predicted": predicted,
    }


def measured_traces(block: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Plotly traces for the frontier chart: per curve, measured (markers + dashed line) and
    predicted (open circles + solid line) in the same colour."""
    if not block:
        return []
    X, Y = "tokens_per_s_per_user", "tokens_per_s_per_gpu"
    out: list[dict[str, Any]] = []
    for k, c in enumerate(block.get("curves") or []):
        err = c.get("median_abs_error")
        err_txt = f"{100 * err:.0f}%" if err is not None else "n/a"
        head = (f"<b>{c['curve']}</b><br>{c['model']} · {c['hardware']} · {c['runtime']} · tp={c['tp']} "
                f"ep={c['ep']} dp={c['dp']} · {c['precision']} · ISL/OSL {c['isl']}/{c['osl']} (simulated)")
        mx, my = c["measured"][X], c["measured"][Y]
        px, py = c["predicted"][X], c["predicted"][Y]
        mtext, ptext = [], []
        for i, n in enumerate(c["concurrency"]):
            mtext.append(f"{head}<br>measured at concurrency {n}<br>tokens/s/user {_g(mx[i])} · tokens/s/GPU "
                         f"{_g(my[i])}<br>predicted {_g(px[i])} · {_g(py[i])}")
            ptext.append(f"{head}<br>predicted at concurrency {n}<br>tokens/s/user {_g(px[i])} · tokens/s/GPU "
                         f"{_g(py[i])}<br>measured {_g(mx[i])} · {_g(my[i])}")
        color = c.get("color") or PALETTE[k % len(PALETTE)]
        out.append({
            "type": "scatter", "mode": "lines+markers", "name": f"{c['label']} (measured)", "uid": f"measured{k}",
            "legendgroup": f"measured{k}", "x": mx, "y": my, "text": mtext,
            "hovertemplate": "%{text}<extra>measured</extra>",
            "line": {"dash": "dash", "color": color, "width": 2},
            "marker": {"size": 9, "symbol": "square", "color": color, "line": {"width": 1, "color": "#222"}},
        })
        out.append({
            "type": "scatter", "mode": "lines+markers", "name": f"{c['label']} (predicted, median |err| {err_txt})",
            "uid": f"mpred{k}", "legendgroup": f"measured{k}", "x": px, "y": py, "text": ptext,
            "hovertemplate": "%{text}<extra>predicted</extra>",
            "line": {"dash": "solid", "color": color, "width": 1.5},
            "marker": {"size": 7, "symbol": "circle-open", "color": color, "line": {"width": 2, "color": color}},
        })
    return out


def _g(v: float | None) -> str:
    return "—" if v is None else f"{v:.4g}"


def measured_note(block: Mapping[str, Any] | None) -> str:
    """One line under the frontier chart saying what was drawn from the file and what was not."""
    if not block:
        return ""
    n = block.get("note") or {}
    if n.get("error"):
        return f"Measured curves from {block.get('source')} not drawn: {n['error']}."
    skipped = "; ".join(f"{v} {k}" for k, v in (n.get("skipped") or {}).items())
    models = n.get("models")
    txt = (f"Measured curves from {block.get('source')} (squares, dashed; open circles, solid: the simulator's "
           f"prediction of the same deployment at the same concurrencies): {n.get('drawn', 0)} drawn, matching "
           f"hardware {', '.join(n.get('hardware', []))}, ISL/OSL {n.get('isl')}/{n.get('osl')}, model "
           f"{models if isinstance(models, str) else ', '.join(models or [])}.")
    if skipped:
        txt += f" Curves not drawn: {skipped}."
    if n.get("unsupported_rows"):
        txt += f" {n['unsupported_rows']} row(s) the simulator cannot represent were left out."
    fa = block.get("agreement") or {}
    if fa.get("pairs"):
        r = fa["ratio_error"]["tok_s_gpu"]
        txt += (f" Front level (explorer/front_agreement.py): of the {fa['pairs']} pairs of drawn points where one "
                f"measured point beats the other on both axes, the predictions agree on {fa['agree']} and reverse "
                f"{fa['flip']}; the ratio of two points' tokens/s/GPU is off by {r['median']:.0%} median.")
    return txt
