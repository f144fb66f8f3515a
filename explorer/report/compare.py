"""Comparing sweeps: overlaid fronts, iso-interactivity and iso-throughput ratios, hypervolumes,
where each front dominates, and which parameters differ on the fronts.

Inputs are (name, table, meta) triples, from reports or results CSVs
(:func:`explorer.report.load_results`).  Runs on different hardware or workloads compare fine;
the result lists what differs (hardware, ISL/OSL, objectives, precisions) so the page can say so.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from explorer.frontier import compare_fronts, to_jsonable
from explorer.report import figures as F
from explorer.report.codec import dumps, encode_table, jsonable
from explorer.report.page import data_table, esc, fmt_num, page
from explorer.report.sweep import _workload, front_of, prepare_table

COMPARE_SCHEMA = "explorer-compare/1"
#: Parameters summarised on each front (those present in both tables).
PARAMETERS = ("model", "hardware", "precision", "runtime", "hidden", "ffn", "layers", "heads", "kv_heads", "head_dim", "vocab",
              "experts", "experts_per_token", "expert_ffn", "batch", "tp", "pp", "ep", "dp", "gpus", "params_active")
_TEXT = {"model", "hardware", "precision", "runtime"}
#: Columns kept for each input's front on the comparison page.
FRONT_COLUMNS = tuple(dict.fromkeys((F.X, F.Y, "feasible", "on_front", "ttft_s", "tpot_s", "memory_bytes_per_gpu",
                                     "memory_capacity_bytes", "params_total", *PARAMETERS, "predicted_loss",
                                     "predicted_loss_low", "predicted_loss_high")))
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")


def _unique_names(names: Sequence[str]) -> list[str]:
    out: list[str] = []
    for n in names:
        base, k = n, 2
        while n in out:
            n = f"{base} ({k})"
            k += 1
        out.append(n)
    return out


def _summary(df: pd.DataFrame, meta: Mapping[str, Any]) -> dict[str, Any]:
    isl, osl = _workload(df, meta)
    pool = df[df["feasible"]] if df["feasible"].any() else df
    objectives = meta.get("objectives")
    if objectives is None:
        objectives = [F.Y, F.X]
    return {
        "hardware": sorted(pool["hardware"].astype(str).unique().tolist()) if "hardware" in df.columns else [],
        "workload": {"isl": isl, "osl": osl},
        "objectives": jsonable(objectives),
        "precisions": sorted(pool["precision"].astype(str).unique().tolist()) if "precision" in df.columns else [],
    }


def parameter_summary(front: pd.DataFrame, c: str) -> dict[str, Any]:
    """What values a parameter takes on a front: counts of each value (text or few distinct values)
    and min/median/max for numbers."""
    s = front[c].dropna()
    out: dict[str, Any] = {}
    if len(s) == 0:
        return {"n": 0}
    counts = s.astype(str).value_counts()
    out["n"] = int(len(s))
    out["mode"] = str(counts.index[0])
    if c in _TEXT or not pd.api.types.is_numeric_dtype(s) or s.nunique() <= 12:
        out["values"] = {str(k): int(v) for k, v in counts.items()}
    if pd.api.types.is_numeric_dtype(s) and c not in _TEXT:
        v = s.to_numpy(dtype=float)
        out.update(min=float(v.min()), median=float(np.median(v)), max=float(v.max()))
    return out


def _differs(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    if a.get("n", 0) == 0 or b.get("n", 0) == 0:
        return a.get("n", 0) != b.get("n", 0)
    if "values" in a and "values" in b:
        return set(a["values"]) != set(b["values"])
    return any(a.get(k) != b.get(k) for k in ("min", "max"))


def dominance_segments(eq_x: Mapping[str, Any], names: tuple[str, str], tol: float = 1e-9) -> list[dict[str, Any]]:
    """Runs of the iso-interactivity grid where A's or B's attainable throughput is higher."""
    grid = np.asarray(eq_x.get("x_grid", []), dtype=float)
    ratio = np.asarray(eq_x.get("ratio", []), dtype=float)
    if len(grid) == 0:
        return []
    lab = np.where(ratio > 1 + tol, names[0], np.where(ratio < 1 - tol, names[1], "equal"))
    segs = []
    start = 0
    for k in range(1, len(grid) + 1):
        if k == len(grid) or lab[k] != lab[start]:
            r = ratio[start:k]
            segs.append({"better": str(lab[start]), "x_from": float(grid[start]), "x_to": float(grid[k - 1]),
                         "ratio_min": float(r.min()), "ratio_max": float(r.max())})
            start = k
    return segs


def _coverage(fa: np.ndarray, fb: np.ndarray, names: tuple[str, str]) -> list[str]:
    """Interactivity reached by only one front (the ratio is undefined there)."""
    out = []
    if len(fa) and len(fb):
        xa, xb = fa[:, 0].max(), fb[:, 0].max()
        if xa > xb:
            out.append(f"only {names[0]} reaches interactivity above {xb:.4g} tokens/s/user (up to {xa:.4g})")
        elif xb > xa:
            out.append(f"only {names[1]} reaches interactivity above {xa:.4g} tokens/s/user (up to {xb:.4g})")
        ya, yb = fa[:, 1].max(), fb[:, 1].max()
        if ya > yb:
            out.append(f"only {names[0]} reaches throughput above {yb:.4g} tokens/s/GPU (up to {ya:.4g})")
        elif yb > ya:
            out.append(f"only {names[1]} reaches throughput above {ya:.4g} tokens/s/GPU (up to {yb:.4g})")
    return out


def _xy(front: pd.DataFrame) -> np.ndarray:
    v = front[[F.X, F.Y]].to_numpy(dtype=float)
    return v[np.isfinite(v).all(axis=1) & (v > 0).all(axis=1)]


def _loss_summary(front: pd.DataFrame) -> dict[str, Any] | None:
    """Predicted loss on a front (explorer/quality.py): min, median, max and the band's ends; None
    when the table carries no predicted loss."""
    if "predicted_loss" not in front.columns or not len(front):
        return None
    v = front["predicted_loss"].to_numpy(dtype=float)
    out = {"min": float(np.nanmin(v)), "median": float(np.nanmedian(v)), "max": float(np.nanmax(v))}
    if "predicted_loss_low" in front.columns and "predicted_loss_high" in front.columns:
        out.update(band_min=float(np.nanmin(front["predicted_loss_low"].to_numpy(dtype=float))),
                   band_max=float(np.nanmax(front["predicted_loss_high"].to_numpy(dtype=float))))
    return out


def _loss_delta(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Predicted-loss difference of front A against front B, in percent of B (positive: A worse)."""
    if not a or not b:
        return None
    out = {k: (a[k] / b[k] - 1) * 100 for k in ("min", "median", "max")}
    out["description"] = "predicted loss on A's front / on B's front - 1, percent (min, median, max)"
    return out


def compare_results(inputs: Sequence[tuple[str, pd.DataFrame, Mapping[str, Any]]], n: int = 200) -> dict[str, Any]:
    """Figures comparing every pair of inputs (JSON-ready: plain types only).

    Returns ``{"schema", "inputs": [...], "differences": {...}, "pairs": [...]}``.  Each pair has
    ``a``, ``b``, ``comparison`` (:func:`explorer.frontier.compare_fronts` as JSON: ``equal_x`` is
    the throughput ratio A/B at equal interactivity over the range both cover, with min, median,
    max and where; ``equal_y`` the interactivity ratio at equal throughput; hypervolumes of each and
    of the union; dominance shares), ``segments`` (where each is better at equal interactivity),
    ``coverage`` (ranges only one reaches) and ``parameters`` (each parameter's values on both
    fronts and whether they differ).  ``differences`` lists the meta that differs between inputs
    (hardware, workload, objectives, precisions), each as one value per input.
    """
    names = _unique_names([str(n_) for n_, _, _ in inputs])
    prepared = []
    for name, df, meta in zip(names, (d for _, d, _ in inputs), (m for _, _, m in inputs), strict=True):
        t = prepare_table(df, where=name)
        prepared.append((name, t, front_of(t), dict(meta or {})))
    summaries = []
    for name, t, fr, meta in prepared:
        s = _summary(t, meta)
        xy = _xy(fr)
        summaries.append({
            "name": name, "file": meta.get("source_file") or meta.get("report_file"), "study": meta.get("study"),
            "rows": int(len(t)), "feasible": int(t["feasible"].sum()), "front_size": int(len(fr)),
            "max_throughput": float(xy[:, 1].max()) if len(xy) else None,
            "max_interactivity": float(xy[:, 0].max()) if len(xy) else None, **s,
            "predicted_loss": _loss_summary(fr),
        })
    differences = {}
    for key in ("hardware", "workload", "objectives", "precisions"):
        vals = [s[key] for s in summaries]
        if any(v != vals[0] for v in vals[1:]):
            differences[key] = {s["name"]: s[key] for s in summaries}
    pairs = []
    for i in range(len(prepared)):
        for j in range(i + 1, len(prepared)):
            na, _, fa, _ = prepared[i]
            nb, _, fb, _ = prepared[j]
            xa, xb = _xy(fa), _xy(fb)
            cmp = to_jsonable(compare_fronts(xa.reshape(-1, 2), xb.reshape(-1, 2), n=n))
            params = {}
            for c in PARAMETERS:
                if c in fa.columns and c in fb.columns:
                    sa, sb = parameter_summary(fa, c), parameter_summary(fb, c)
                    params[c] = {"a": sa, "b": sb, "differs": _differs(sa, sb)}
            pairs.append({
                "a": na, "b": nb, "comparison": cmp,
                "loss": _loss_delta(summaries[i]["predicted_loss"], summaries[j]["predicted_loss"]),
                "segments": dominance_segments(cmp["equal_x"], (na, nb)),
                "coverage": _coverage(xa, xb, (na, nb)),
                "parameters": params,
            })
    return {"schema": COMPARE_SCHEMA, "inputs": summaries, "differences": differences, "pairs": pairs}


# ------------------------------------------------------------------------------------------------
# page
# ------------------------------------------------------------------------------------------------


def _fronts_figure(names: Sequence[str], keys: Sequence[str], columns: Sequence[Sequence[str]]) -> dict[str, Any]:
    data = []
    for k, (name, key, have) in enumerate(zip(names, keys, columns, strict=True)):
        color = PALETTE[k % len(PALETTE)]
        data.append({"type": "scatter", "mode": "lines", "name": f"{name} (attainable)", "uid": f"step{k}",
                     "x": {"$col": F.X, "$rows": "front", "$table": key},
                     "y": {"$col": F.Y, "$rows": "front", "$table": key},
                     "line": {"shape": "vh", "color": color, "width": 1.5}, "hoverinfo": "skip", "showlegend": False})
        hcols = list(have)
        data.append({"type": "scatter", "mode": "markers", "name": name, "uid": f"front{k}",
                     "x": {"$col": F.X, "$rows": "front", "$table": key},
                     "y": {"$col": F.Y, "$rows": "front", "$table": key},
                     "customdata": {"$cols": hcols, "$rows": "front", "$table": key},
                     "hovertemplate": f"<b>{esc(name)}</b><br>" + F.hover_template(hcols, False),
                     "marker": {"size": 8, "color": color, "line": {"width": 1, "color": "#222"}}})
    layout = {"font": F._FONT, "height": 600, "margin": {"l": 70, "r": 20, "t": 50, "b": 60}, "plot_bgcolor": "white",
              "xaxis": F._axis(F._label(F.X)), "yaxis": F._axis(F._label(F.Y)), "hovermode": "closest",
              "hoverlabel": {"align": "left"}, "legend": {"orientation": "h", "y": -0.14},
              "title": {"text": "Fronts (up and right is better)", "x": 0.01, "font": {"size": 15}}}
    return {"id": "fig-compare", "data": data, "layout": layout}


def _ratio_figure(pairs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    data = []
    for k, p in enumerate(pairs):
        ex = p["comparison"]["equal_x"]
        if not ex.get("overlap"):
            continue
        data.append({"type": "scatter", "mode": "lines", "name": f"{p['a']} / {p['b']}",
                     "x": ex["x_grid"], "y": ex["ratio"], "line": {"shape": "hv", "color": PALETTE[k % len(PALETTE)]},
                     "hovertemplate": "tokens/s/user %{x:.4~g}<br>throughput ratio %{y:.3f}<extra>%{fullData.name}"
                                      "</extra>"})
    layout = {"font": F._FONT, "height": 380, "margin": {"l": 70, "r": 20, "t": 40, "b": 60}, "plot_bgcolor": "white",
              "xaxis": F._axis(F._label(F.X)), "yaxis": F._axis("throughput ratio at equal interactivity", log=True),
              "shapes": [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": 1, "y1": 1,
                          "line": {"color": "#888", "dash": "dash", "width": 1}}],
              "legend": {"orientation": "h", "y": -0.2}}
    return {"id": "fig-ratio", "data": data, "layout": layout}


def _fmt_param(s: Mapping[str, Any]) -> str:
    if s.get("n", 0) == 0:
        return "—"
    vals = s.get("values")
    if vals is not None and (len(vals) <= 6 or "min" not in s):
        items = list(vals.items())

        def key(k: str) -> str:
            try:
                return fmt_num(float(k))
            except ValueError:
                return k

        txt = ", ".join(f"{key(k)}×{v}" for k, v in items[:6])
        return txt + (f", … ({len(items)} values)" if len(items) > 6 else "")
    return f"{fmt_num(s['min'])} – {fmt_num(s['max'])} (median {fmt_num(s['median'])})"


def _ratio_text(d: Mapping[str, Any], axis: str, what: str) -> str:
    if not d.get("overlap"):
        return "the fronts share no range"
    return (f"min {d['min']:.3g} (at {fmt_num(d[f'{axis}_at_min'])}), median {d['median']:.3g}, "
            f"max {d['max']:.3g} (at {fmt_num(d[f'{axis}_at_max'])}) over {what} "
            f"{fmt_num(d[f'{axis}_grid'][0])}–{fmt_num(d[f'{axis}_grid'][-1])}")


def _pair_html(p: Mapping[str, Any]) -> str:
    c = p["comparison"]
    a, b = p["a"], p["b"]
    dom = c["dominance"]

    def share(v: Any) -> str:
        return "—" if v is None else f"{100 * v:.0f}%"

    rows = [
        (f"tokens/s/GPU {a} ÷ {b} at equal tokens/s/user", _ratio_text(c["equal_x"], "x", "tokens/s/user")),
        (f"tokens/s/user {a} ÷ {b} at equal tokens/s/GPU", _ratio_text(c["equal_y"], "y", "tokens/s/GPU")),
        ("hypervolume", f"{a}: {c['hypervolume_a']:.4g} · {b}: {c['hypervolume_b']:.4g} · union: "
                        f"{c['hypervolume_union']:.4g}"),
        ("front points dominated by the other front", f"{a}: {share(dom['a_dominated_by_b'])} · "
                                                      f"{b}: {share(dom['b_dominated_by_a'])}"),
        ("front sizes", f"{a}: {c['n_front_a']} · {b}: {c['n_front_b']}"),
    ]
    if p.get("loss"):
        lo = p["loss"]
        rows.append((f"predicted loss {a} vs {b} (front)", f"median {lo['median']:+.2f} %, best {lo['min']:+.2f} %, "
                                                           f"worst {lo['max']:+.2f} % (docs/quality.md)"))
    segs = "; ".join(
        (f"{s['better']} higher from {fmt_num(s['x_from'])} to {fmt_num(s['x_to'])} tokens/s/user "
         f"(×{s['ratio_min']:.3g}–{s['ratio_max']:.3g})") if s["better"] != "equal" else
        f"equal from {fmt_num(s['x_from'])} to {fmt_num(s['x_to'])}" for s in p["segments"])
    rows.append(("who is higher where (equal interactivity)", segs or "no common range"))
    for cov in p["coverage"]:
        rows.append(("coverage", cov))
    kv = "".join(f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in rows)
    prow = [{"parameter": k, "a": _fmt_param(v["a"]), "b": _fmt_param(v["b"]), "differs": "yes" if v["differs"] else ""}
            for k, v in p["parameters"].items()]
    prow.sort(key=lambda r: r["differs"] != "yes")
    ptable = data_table(prow, [("parameter", "parameter", str), ("a", f"on {a}'s front", str),
                               ("b", f"on {b}'s front", str), ("differs", "differs", str)],
                        text_cols={"parameter", "a", "b", "differs"},
                        row_class=lambda r: "bad" if r["differs"] else "")
    return (f"<h3>{esc(a)} vs {esc(b)}</h3><table class=\"kv\">{kv}</table>"
            f"<details open><summary>parameters on the two fronts</summary><div class=\"scroll\">{ptable}</div>"
            "</details>")


def build_compare_html(inputs: Sequence[tuple[str, pd.DataFrame, Mapping[str, Any]]], plotlyjs: str = "inline",
                       result: Mapping[str, Any] | None = None) -> str:
    """A comparison page for two or more (name, table, meta) inputs."""
    res = dict(result) if result is not None else compare_results(inputs)
    names = [s["name"] for s in res["inputs"]]
    keys = [f"in{k}" for k in range(len(names))]
    raw: dict[str, str] = {}
    tables: dict[str, str] = {}
    total_front = 0
    stored: list[list[str]] = []
    for key, (_, df, _) in zip(keys, inputs, strict=True):
        t = prepare_table(df)
        fr = front_of(t)
        total_front += int(len(_xy(fr)))
        cols = [c for c in FRONT_COLUMNS if c in fr.columns]
        stored.append([c for c in F.hover_columns(fr) if c in cols])
        ph = f"@@{key}-{uuid.uuid4().hex}@@"
        tables[key] = ph
        raw[ph] = encode_table(fr[cols].reset_index(drop=True), exact=(F.X, F.Y))
    payload = {"schema": COMPARE_SCHEMA, "tables": tables, "comparison": jsonable(res)}
    text = dumps(payload)
    for ph, frag in raw.items():
        text = text.replace(dumps(ph), frag, 1)
    figures = {"figures": [_fronts_figure(names, keys, stored), _ratio_figure(res["pairs"])],
               "expected_front_points": total_front}

    banner = ""
    if res["differences"]:
        parts = []
        for key, per in res["differences"].items():
            label = {"workload": "workload (ISL/OSL)"}.get(key, key)
            vals = "; ".join(f"{n}: {dumps(v) if not isinstance(v, str) else v}" for n, v in per.items())
            parts.append(f"<li><b>{esc(label)}</b>: {esc(vals)}</li>")
        banner = ('<div class="banner"><b>These runs differ in more than the design space</b> — the ratios below '
                  f"compare different conditions:<ul>{''.join(parts)}</ul></div>")
    inrows = []
    for s in res["inputs"]:
        wl = s["workload"]
        inrows.append({"name": s["name"], "file": s.get("file") or "", "rows": s["rows"], "feasible": s["feasible"],
                       "front": s["front_size"], "hardware": ", ".join(s["hardware"]),
                       "workload": f"{wl.get('isl')}/{wl.get('osl')}", "precisions": ", ".join(s["precisions"]),
                       "maxy": s["max_throughput"], "maxx": s["max_interactivity"]})
    intable = data_table(inrows, [("name", "run", str), ("file", "file", str), ("rows", "trials", fmt_num),
                                  ("feasible", "feasible", fmt_num), ("front", "front", fmt_num),
                                  ("hardware", "hardware", str), ("workload", "ISL/OSL", str),
                                  ("precisions", "precisions", str), ("maxy", "max tokens/s/GPU", fmt_num),
                                  ("maxx", "max tokens/s/user", fmt_num)],
                         text_cols={"name", "file", "hardware", "workload", "precisions"})
    title = " vs ".join(names)
    header = (f"<h1>Explorer comparison: {esc(title)}</h1><div class=\"sub\">{len(names)} runs, "
              f"{len(res['pairs'])} pair(s)</div>")
    body = [
        f'<section id="inputs"><h2>Runs</h2>{banner}<div class="scroll">{intable}</div></section>',
        '<section id="fronts"><h2>Fronts</h2><p class="how">Each run\'s Pareto front (markers) and the best '
        "throughput attainable at each interactivity (staircase). Hover a point for its design.</p>"
        '<div class="plot" id="fig-compare"></div></section>',
        '<section id="ratios"><h2>Throughput ratio at equal interactivity</h2><p class="how">For each pair A / B, '
        "the best throughput of A divided by the best of B at the same tokens/s/user, over the range both "
        "fronts reach. Above 1: A serves more tokens per GPU at that latency target.</p>"
        '<div class="plot" id="fig-ratio"></div></section>',
        '<section id="pairs"><h2>Pairs</h2>' + "".join(_pair_html(p) for p in res["pairs"]) + "</section>",
    ]
    nav = [("inputs", "Runs"), ("fronts", "Fronts"), ("ratios", "Ratios"), ("pairs", "Pairs")]
    return page(f"Explorer comparison: {title}", header, nav, "\n".join(body), text, figures, plotlyjs)
