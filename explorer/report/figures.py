"""Plotly figures of a sweep report, written as plain plotly JSON dicts (no optuna plotting).

Large per-point arrays are not copied into the figures: a trace field may hold a *column
reference* that the page's script resolves against the report's data block before plotting, so a
10,000-point table is stored once however many traces and colourings use it:

* ``{"$col": NAME, "$rows": SEL}``: the column's values on the selected rows (``"mul"`` scales);
* ``{"$rank": NAME, "$rows": SEL, "levels": [...]}``: each value's position in ``levels``
  (colour by a parameter with few distinct values);
* ``{"$cols": [NAME, ...], "$rows": SEL}``: one list per row (plotly ``customdata`` for hovers).

``SEL`` is ``"front"`` (feasible rows on the front, sorted by interactivity), ``"dominated"``
(feasible, not on the front), ``"infeasible"`` or ``"all"``; rows are those of the data block's
table, whose ``on_front`` and ``feasible`` columns define the selections.  Small derived series
(reference fronts, the hypervolume curve) are written inline.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

X = "tokens_per_s_per_user"
Y = "tokens_per_s_per_gpu"
BREAKDOWN = ("t_gemm_s", "t_attention_s", "t_moe_s", "t_comm_s", "t_prefill_s", "t_overhead_s")
BREAKDOWN_COLORS = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#b279a2", "#9d9d9d")

LABELS = {
    X: "tokens/s/user (interactivity)",
    Y: "tokens/s/GPU (throughput)",
    "model": "model", "hardware": "hardware", "precision": "precision",
    "hidden": "H (hidden)", "ffn": "H' (MLP width)", "layers": "L (layers)", "heads": "query heads",
    "kv_heads": "KV heads", "head_dim": "head dim", "vocab": "vocabulary",
    "experts": "experts", "experts_per_token": "experts/token", "expert_ffn": "expert width",
    "isl": "ISL", "osl": "OSL", "batch": "batch", "tp": "tp", "pp": "pp", "ep": "ep", "dp": "dp",
    "gpus": "GPUs/replica", "params_active": "active params", "params_total": "total params",
    "ttft_s": "TTFT", "tpot_s": "TPOT", "memory_bytes_per_gpu": "memory/GPU",
    "t_gemm_s": "weight GEMMs", "t_attention_s": "attention", "t_moe_s": "MoE experts",
    "t_comm_s": "communication", "t_prefill_s": "prefill share", "t_overhead_s": "overheads",
}

#: Parameters offered in the frontier's colour dropdown, in this order, when present.
COLOR_CANDIDATES = ("serving_mode", "precision", "runtime", "hardware", "model", "tp", "pp", "ep", "dp", "batch", "hidden", "ffn",
                    "layers", "heads", "kv_heads", "experts", "experts_per_token", "expert_ffn", "gpus",
                    "params_active")
#: Parameters drawn along the front (always, when present); others only when they vary there.
ALONG_ALWAYS = ("hidden", "ffn", "layers", "batch", "tp", "pp", "ep", "precision", "params_active")
ALONG_IF_VARIES = ("dp", "heads", "kv_heads", "experts", "experts_per_token", "expert_ffn", "hardware", "model")
_LOG_Y = {"batch", "params_active", "params_total", "gpus"}
_TEXT = {"model", "hardware", "precision", "runtime", "serving_mode"}
_MAX_LEVELS = 16

_FONT = {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 12}


def col(name: str, rows: str, mul: float | None = None) -> dict[str, Any]:
    ref: dict[str, Any] = {"$col": name, "$rows": rows}
    if mul is not None:
        ref["mul"] = mul
    return ref


def _label(c: str) -> str:
    return LABELS.get(c, c)


# ------------------------------------------------------------------------------------------------
# hover
# ------------------------------------------------------------------------------------------------


def hover_columns(df: pd.DataFrame) -> list[str]:
    """Columns shown in the frontier's hover (those present), in display order."""
    want = ["model", "hardware", "precision", "runtime", "serving_mode", "hidden", "ffn", "layers", "heads", "kv_heads", "head_dim", "vocab",
            "experts", "experts_per_token", "expert_ffn", "batch", "tp", "pp", "ep", "dp", "gpus", "ttft_s",
            "tpot_s", "memory_bytes_per_gpu", "memory_capacity_bytes", "params_total", "params_active",
            "predicted_loss", "predicted_loss_delta_pct", *BREAKDOWN, "trial", "reason"]
    cols = [c for c in want if c in df.columns]
    if "experts" in df.columns and not (pd.to_numeric(df["experts"], errors="coerce").fillna(0) > 0).any():
        cols = [c for c in cols if c not in ("experts", "experts_per_token", "expert_ffn")]
    # breakdown components that are zero everywhere (MoE time of a dense sweep) say nothing
    cols = [c for c in cols if c not in BREAKDOWN or (pd.to_numeric(df[c], errors="coerce").fillna(0) != 0).any()]
    return cols


def hover_template(cols: Sequence[str], with_reason: bool) -> str:
    i = {c: k for k, c in enumerate(cols)}

    def f(c: str, fmt: str = "") -> str:
        return f"%{{customdata[{i[c]}]{fmt}}}" if c in i else "?"

    lines = []
    head = [f(c) for c in ("model", "hardware", "precision", "runtime") if c in i]
    if head:
        lines.append("<b>" + " · ".join(head) + "</b>")
    lines.append("tokens/s/user %{x:.4~g} · tokens/s/GPU %{y:.4~g}")
    shape = [f"{lab}={f(c, ':,')}" for c, lab in (("hidden", "H"), ("ffn", "H'"), ("layers", "L"), ("heads", "heads"),
                                                  ("kv_heads", "kv"), ("head_dim", "d"), ("vocab", "V")) if c in i]
    if shape:
        lines.append(" ".join(shape))
    moe = [f"{lab}={f(c, ':,')}" for c, lab in (("experts", "E"), ("experts_per_token", "k"), ("expert_ffn", "F_e"))
           if c in i]
    if moe:
        lines.append("MoE " + " ".join(moe))
    dep = [f"{c}={f(c)}" for c in ("batch", "tp", "pp", "ep", "dp") if c in i]
    if "gpus" in i:
        dep.append(f"({f('gpus')} GPUs)")
    if dep:
        lines.append(" ".join(dep))
    figs = []
    if "ttft_s" in i:
        figs.append(f"TTFT {f('ttft_s', ':.3~s')}s")
    if "tpot_s" in i:
        figs.append(f"TPOT {f('tpot_s', ':.3~s')}s")
    if figs:
        lines.append(" · ".join(figs))
    if "memory_bytes_per_gpu" in i:
        cap = f" of {f('memory_capacity_bytes', ':.3~s')}B" if "memory_capacity_bytes" in i else ""
        lines.append(f"memory {f('memory_bytes_per_gpu', ':.3~s')}B/GPU{cap}")
    if "params_active" in i:
        tot = f" ({f('params_total', ':.3~s')} total)" if "params_total" in i else ""
        lines.append(f"params {f('params_active', ':.3~s')} active{tot}")
    if "predicted_loss" in i:
        delta = f" ({f('predicted_loss_delta_pct', ':+.2f')} % vs the reference)" if "predicted_loss_delta_pct" in i else ""
        lines.append(f"predicted loss {f('predicted_loss', ':.4f')}{delta}")
    bd = [f"{_label(c)} {f(c, ':.3~s')}s" for c in BREAKDOWN if c in i]
    for k in range(0, len(bd), 3):
        lines.append(("time/token: " if k == 0 else "") + " · ".join(bd[k:k + 3]))
    if "trial" in i:
        lines.append(f"trial {f('trial')}")
    if with_reason and "reason" in i:
        lines.append(f"<i>{f('reason')}</i>")
    return "<br>".join(lines) + "<extra></extra>"


# ------------------------------------------------------------------------------------------------
# colour options
# ------------------------------------------------------------------------------------------------


def color_options(df: pd.DataFrame, chosen: str | None) -> list[dict[str, Any]]:
    """Colour-by options: parameters that vary among feasible rows (plus ``chosen``).

    Each is ``{"column", "label", "levels"}`` (``levels`` None for a continuous colouring).
    """
    feas = df[df["feasible"]] if len(df) and "feasible" in df.columns and df["feasible"].any() else df
    out = []
    names = list(COLOR_CANDIDATES)
    if chosen and chosen not in names:
        names.insert(0, chosen)
    for c in names:
        if c not in df.columns:
            continue
        vals = feas[c]
        uniq = pd.unique(vals.dropna())
        if len(uniq) < 2 and c != chosen:
            continue
        if c in _TEXT or not pd.api.types.is_numeric_dtype(vals):
            levels: list | None = sorted(str(v) for v in uniq)
        elif len(uniq) <= _MAX_LEVELS:
            levels = sorted(float(v) if not float(v).is_integer() else int(v) for v in uniq)
        else:
            levels = None
        out.append({"column": c, "label": _label(c), "levels": levels})
    if chosen:
        out.sort(key=lambda o: o["column"] != chosen)
    return out


def _color_ref(opt: dict[str, Any], rows: str) -> dict[str, Any]:
    if opt["levels"] is None:
        return col(opt["column"], rows)
    return {"$rank": opt["column"], "$rows": rows, "levels": opt["levels"]}


def discrete_colorscale(n: int) -> list[list[Any]]:
    """A stepped colorscale of ``n`` bands: text levels get a qualitative palette, ordered ones
    Viridis samples, so that each level is one flat colour."""
    from plotly.colors import sample_colorscale

    cols = list(sample_colorscale("Viridis", [k / max(n - 1, 1) for k in range(n)])) if n > 1 else ["#3b528b"]
    scale: list[list[Any]] = []
    for k, c in enumerate(cols):
        scale += [[k / n, c], [(k + 1) / n, c]]
    return scale


def _qualitative(n: int) -> list[list[Any]]:
    palette = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
               "#bcbd22", "#17becf")
    if n > len(palette):
        return discrete_colorscale(n)
    scale: list[list[Any]] = []
    for k in range(n):
        scale += [[k / n, palette[k]], [(k + 1) / n, palette[k]]]
    return scale


def _colorbar(opt: dict[str, Any]) -> dict[str, Any]:
    """Marker attributes (plotly restyle paths) that colour a trace by ``opt``.

    Each coloured trace carries its own colorscale and range (a shared ``coloraxis`` makes
    plotly.js warn about invalid colours while drawing legend symbols)."""
    lv = opt["levels"]
    if lv is None:
        return {"marker.cmin": None, "marker.cmax": None, "marker.colorbar.tickvals": None,
                "marker.colorbar.ticktext": None, "marker.colorbar.title.text": opt["label"],
                "marker.colorscale": "Viridis"}
    shown = list(range(len(lv)))
    if len(lv) > 10:
        shown = shown[:: int(np.ceil(len(lv) / 10))]
    text = opt["column"] in _TEXT or (len(lv) and isinstance(lv[0], str))
    return {"marker.cmin": -0.5, "marker.cmax": len(lv) - 0.5,
            "marker.colorbar.tickvals": shown,
            "marker.colorbar.ticktext": [_fmt_level(lv[k]) for k in shown],
            "marker.colorbar.title.text": opt["label"],
            "marker.colorscale": _qualitative(len(lv)) if text else discrete_colorscale(len(lv))}


def _fmt_level(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, int) and abs(v) >= 10_000:
        return f"{v:,}"
    return str(v)


# ------------------------------------------------------------------------------------------------
# figures
# ------------------------------------------------------------------------------------------------


def _axis(title: str, log: bool = True, **kw: Any) -> dict[str, Any]:
    ax = {"title": {"text": title}, "type": "log" if log else "linear", "gridcolor": "#e5e5e5",
          "zeroline": False, "showline": True, "linecolor": "#999", "mirror": True}
    ax.update(kw)
    return ax


def frontier_figure(df: pd.DataFrame, colors: list[dict[str, Any]], references: pd.DataFrame | None,
                    bands_table: str | None = None) -> dict:
    """Frontier chart: dominated (faint), infeasible (hidden until clicked), front and its staircase,
    the front's held-out error bands (``bands_table``: the data block's table of
    :func:`explorer.report.sweep.front_bands`; hidden until clicked), reference fronts of real
    models; colour dropdown over ``colors``."""
    hcols = hover_columns(df)
    tmpl = hover_template(hcols, with_reason=False)
    tmpl_bad = hover_template(hcols, with_reason=True)
    first = colors[0] if colors else None
    data: list[dict[str, Any]] = []
    dominated: dict[str, Any] = {
        "type": "scatter", "mode": "markers", "name": "dominated", "uid": "dominated",
        "x": col(X, "dominated"), "y": col(Y, "dominated"),
        "customdata": {"$cols": hcols, "$rows": "dominated"}, "hovertemplate": tmpl,
        "marker": {"size": 5, "opacity": 0.3, "line": {"width": 0}, "showscale": False},
    }
    infeasible: dict[str, Any] = {
        "type": "scatter", "mode": "markers", "name": "infeasible (click to show)", "uid": "infeasible",
        "visible": "legendonly", "x": col(X, "infeasible"), "y": col(Y, "infeasible"),
        "customdata": {"$cols": hcols, "$rows": "infeasible"}, "hovertemplate": tmpl_bad,
        "marker": {"size": 5, "symbol": "x-thin", "color": "#b0b0b0", "line": {"width": 1, "color": "#b0b0b0"}},
    }
    front: dict[str, Any] = {
        "type": "scatter", "mode": "markers", "name": "front", "uid": "front",
        "x": col(X, "front"), "y": col(Y, "front"),
        "customdata": {"$cols": hcols, "$rows": "front"}, "hovertemplate": tmpl,
        "marker": {"size": 10, "line": {"width": 1.2, "color": "#222"}},
    }
    step: dict[str, Any] = {
        "type": "scatter", "mode": "lines", "name": "front (attainable)", "uid": "stepline",
        "x": col(X, "front"), "y": col(Y, "front"), "line": {"shape": "vh", "color": "#222", "width": 1.5},
        "hoverinfo": "skip",
    }
    if first is not None:
        dominated["marker"]["color"] = _color_ref(first, "dominated")
        front["marker"]["color"] = _color_ref(first, "front")
        front["marker"]["showscale"] = True
        front["marker"]["colorbar"] = {"len": 0.8}
        for trace in (dominated, front):
            for path, v in _colorbar(first).items():
                _set_path(trace, path, v)
    else:
        dominated["marker"]["color"] = "#4c78a8"
        front["marker"]["color"] = "#4c78a8"
    data += [dominated, infeasible, step, front]
    if bands_table is not None:  # the front's held-out error bands (explorer/uncertainty.py)
        def b(name: str) -> dict[str, Any]:
            return {"$col": name, "$rows": "all", "$table": bands_table}

        bars = {"type": "data", "symmetric": False, "thickness": 1, "width": 0, "color": "rgba(60,60,60,0.5)"}
        data.append({
            "type": "scatter", "mode": "markers", "name": "held-out error band (80 %, click to show)", "uid": "band",
            "visible": "legendonly", "x": b(X), "y": b(Y), "hoverinfo": "skip",
            "marker": {"size": 2, "color": "rgba(60,60,60,0.5)"},
            "error_x": {**bars, "array": b("band_x_plus"), "arrayminus": b("band_x_minus")},
            "error_y": {**bars, "array": b("band_y_plus"), "arrayminus": b("band_y_minus")},
        })
    palette = ("#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#ff7f0e")
    if references is not None and len(references):
        for k, (label, g) in enumerate(references.groupby("reference_label", sort=False)):
            g = g.sort_values(X)
            text = [
                f"<b>{label}</b> · {r.hardware} · {r.precision}<br>batch={r.batch} tp={r.tp} pp={r.pp} ep={r.ep}"
                f" dp={r.dp}<br>tokens/s/user {r.tokens_per_s_per_user:.4g} · tokens/s/GPU "
                f"{r.tokens_per_s_per_gpu:.4g}<br>TTFT {r.ttft_s * 1e3:.3g} ms"
                for r in g.itertuples()
            ]
            data.append({
                "type": "scatter", "mode": "lines+markers", "name": f"{label} (reference)", "uid": f"ref{k}",
                "x": g[X].tolist(), "y": g[Y].tolist(), "text": text, "hovertemplate": "%{text}<extra></extra>",
                "line": {"shape": "vh", "dash": "dot", "color": palette[k % len(palette)], "width": 1.5},
                "marker": {"size": 5, "symbol": "diamond", "color": palette[k % len(palette)]},
            })
    layout: dict[str, Any] = {
        "font": _FONT, "height": 620, "margin": {"l": 70, "r": 20, "t": 60, "b": 60},
        "xaxis": _axis(_label(X)), "yaxis": _axis(_label(Y)), "hovermode": "closest",
        "hoverlabel": {"align": "left"},
        "legend": {"orientation": "h", "y": -0.14, "x": 0}, "plot_bgcolor": "white",
        "title": {"text": "Throughput vs interactivity (up and right is better)", "x": 0.01, "y": 0.97,
                  "font": {"size": 15}},
    }
    if first is not None:
        buttons = []
        for opt in colors:
            restyle = {"marker.color": [_color_ref(opt, "dominated"), _color_ref(opt, "front")]}
            restyle.update({k: [v, v] for k, v in _colorbar(opt).items()})
            buttons.append({"label": opt["label"], "method": "restyle", "args": [restyle, [0, 3]]})
        layout["updatemenus"] = [{"type": "dropdown", "buttons": buttons, "x": 0.80, "xanchor": "right",
                                  "y": 1.02, "yanchor": "bottom", "showactive": True}]
        layout["annotations"] = [{"text": "colour by", "xref": "paper", "yref": "paper", "x": 0.655,
                                  "xanchor": "right", "y": 1.035, "yanchor": "bottom", "showarrow": False}]
    return {"id": "fig-frontier", "data": data, "layout": layout}


def _set_path(d: dict, dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    for k in keys[:-1]:
        d = d.setdefault(k, {})
    if value is None:
        d.pop(keys[-1], None)
    else:
        d[keys[-1]] = value


def along_columns(front: pd.DataFrame) -> list[str]:
    cols = [c for c in ALONG_ALWAYS if c in front.columns]
    if "ep" in cols and "experts" in front.columns and not (front["experts"] > 0).any() and (front["ep"] == 1).all():
        cols.remove("ep")
    for c in ALONG_IF_VARIES:
        if c in front.columns and front[c].nunique(dropna=True) > 1:
            cols.append(c)
    return cols


def parameters_figure(front: pd.DataFrame) -> dict:
    """Small multiples: each parameter of the front against interactivity."""
    cols = along_columns(front)
    ncols = 3
    nrows = max(1, int(np.ceil(len(cols) / ncols)))
    gap_x, gap_y = 0.07, 0.12 / max(nrows, 1) + 0.04
    w = (1.0 - gap_x * (ncols - 1)) / ncols
    h = (1.0 - gap_y * (nrows - 1)) / nrows
    data, annotations = [], []
    layout: dict[str, Any] = {"font": _FONT, "height": 230 * nrows + 60, "showlegend": False,
                              "margin": {"l": 60, "r": 20, "t": 30, "b": 50}, "plot_bgcolor": "white"}
    for k, c in enumerate(cols):
        r, cc = divmod(k, ncols)
        x0 = cc * (w + gap_x)
        y1 = 1.0 - r * (h + gap_y)
        sfx = "" if k == 0 else str(k + 1)
        text = c in _TEXT or not pd.api.types.is_numeric_dtype(front[c])
        data.append({
            "type": "scatter", "mode": "lines+markers", "name": _label(c), "xaxis": f"x{sfx}", "yaxis": f"y{sfx}",
            "x": col(X, "front"), "y": col(c, "front"),
            "line": {"shape": "hv", "width": 1, "color": "#999"}, "marker": {"size": 6, "color": "#4c78a8"},
            "hovertemplate": f"{_label(c)} %{{y}}<br>tokens/s/user %{{x:.4~g}}<extra></extra>",
        })
        ylog = c in _LOG_Y and not text
        yax = _axis("", log=ylog, domain=[max(y1 - h, 0.0), y1], anchor=f"x{sfx}")
        if text:
            yax["type"] = "category"
        elif not ylog:
            yax["rangemode"] = "tozero"
            uniq = np.unique(front[c].dropna().to_numpy(dtype=float))
            if len(uniq) and len(uniq) <= 6 and (uniq == np.round(uniq)).all() and np.nanmax(np.abs(uniq)) < 1000:
                yax["tickvals"] = [0] + [int(v) for v in uniq if v != 0]  # few whole values: label exactly
            elif len(uniq) and np.nanmax(np.abs(uniq)) >= 1000:
                yax["tickformat"] = "~s"
        xax = _axis(_label(X) if r == nrows - 1 else "", log=True, domain=[x0, x0 + w], anchor=f"y{sfx}")
        layout[f"xaxis{sfx}"] = xax
        layout[f"yaxis{sfx}"] = yax
        annotations.append({"text": f"<b>{_label(c)}</b>", "xref": "paper", "yref": "paper", "x": x0,
                            "y": y1, "xanchor": "left", "yanchor": "bottom", "showarrow": False})
    layout["annotations"] = annotations
    return {"id": "fig-params", "data": data, "layout": layout}


def breakdown_figure(df: pd.DataFrame) -> dict:
    """Where each front point's time per output token goes, as a share (switchable to seconds)."""
    comps = [c for c in BREAKDOWN if c in df.columns]
    data = []
    for c, color in zip(BREAKDOWN, BREAKDOWN_COLORS, strict=True):
        if c not in comps:
            continue
        data.append({
            "type": "scatter", "mode": "lines", "name": _label(c), "stackgroup": "time", "groupnorm": "percent",
            "x": col(X, "front"), "y": col(c, "front"), "customdata": col(c, "front", mul=1e3),
            "line": {"shape": "hv", "width": 0.5, "color": color}, "fillcolor": color,
            "hovertemplate": f"{_label(c)}: %{{customdata:.3~g}} ms<extra></extra>",
        })
    layout = {
        "font": _FONT, "height": 420, "margin": {"l": 70, "r": 20, "t": 50, "b": 60}, "plot_bgcolor": "white",
        "xaxis": _axis(_label(X)), "yaxis": _axis("share of time per output token (%)", log=False, range=[0, 100]),
        "hovermode": "x unified", "legend": {"orientation": "h", "y": -0.2},
        "updatemenus": [{"type": "buttons", "direction": "right", "x": 1.0, "xanchor": "right", "y": 1.12,
                         "yanchor": "bottom", "buttons": [
                             {"label": "share (%)", "method": "update",
                              "args": [{"groupnorm": "percent"},
                                       {"yaxis.title.text": "share of time per output token (%)",
                                        "yaxis.range": [0, 100], "yaxis.autorange": False}]},
                             {"label": "seconds", "method": "update",
                              "args": [{"groupnorm": ""},
                                       {"yaxis.title.text": "time per output token (s)", "yaxis.autorange": True}]},
                         ]}],
    }
    return {"id": "fig-breakdown", "data": data, "layout": layout}


def hypervolume_figure(trials: Sequence[float], hv: Sequence[float | None], source: str) -> dict:
    data = [{"type": "scatter", "mode": "lines", "name": "hypervolume", "x": list(trials), "y": list(hv),
             "line": {"shape": "hv", "color": "#4c78a8"},
             "hovertemplate": "trial %{x}<br>hypervolume %{y:.4~g}<extra></extra>"}]
    layout = {"font": _FONT, "height": 320, "margin": {"l": 80, "r": 20, "t": 40, "b": 50}, "plot_bgcolor": "white",
              "xaxis": _axis("trial", log=False), "yaxis": _axis("hypervolume", log=False),
              "title": {"text": source, "x": 0.01, "font": {"size": 12}}, "showlegend": False}
    return {"id": "fig-hypervolume", "data": data, "layout": layout}


def quality_figure(df: pd.DataFrame, targets: Sequence[float], reference: dict[str, Any] | None,
                   loss_limit: float | None) -> dict:
    """Throughput against predicted loss at each interactivity target: for target t, the designs
    reaching t tokens/s/user reduced to their (lowest loss, highest tokens/s/GPU) front; the
    reference model's best deployment at t (from the decision summary) as a star; the quality limit
    as a dashed line.  Left and up is better."""
    from explorer.frontier import pareto_mask

    palette = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")
    feas = df[df["feasible"]] if "feasible" in df.columns else df
    data: list[dict[str, Any]] = []
    for k, t in enumerate(targets):
        color = palette[k % len(palette)]
        sub = feas[feas[X] >= t]
        sub = sub[np.isfinite(sub["predicted_loss"].to_numpy(dtype=float))]
        if len(sub):
            vals = sub[["predicted_loss", Y]].to_numpy(dtype=float)
            sub = sub[pareto_mask(vals, ("minimize", "maximize"))].sort_values("predicted_loss")
        text = []
        for r in sub.to_dict("records"):
            shape = (str(r.get("model")) if str(r.get("model", "custom")) != "custom" else
                     f"H={r.get('hidden')} F={r.get('ffn')} L={r.get('layers')} kv={r.get('kv_heads')}"
                     + (f" E={r.get('experts')} k={r.get('experts_per_token')}" if r.get("experts") else ""))
            band = (f"<br>band {r['predicted_loss_low']:.4f} .. {r['predicted_loss_high']:.4f}"
                    if "predicted_loss_low" in r and r["predicted_loss_high"] - r["predicted_loss_low"] > 1e-12 else "")
            text.append(f"<b>{shape}</b> · {r.get('precision')} · tp={r.get('tp')} ep={r.get('ep')} "
                        f"batch={r.get('batch')}<br>predicted loss {r['predicted_loss']:.4f}{band}<br>"
                        f"tokens/s/GPU {r[Y]:.4g} at {r[X]:.4g} tokens/s/user")
        data.append({"type": "scatter", "mode": "lines+markers", "name": f">= {t:g} tokens/s/user",
                     "uid": f"quality{k}", "x": sub["predicted_loss"].tolist(), "y": sub[Y].tolist(),
                     "text": text, "hovertemplate": "%{text}<extra></extra>",
                     "line": {"shape": "hv", "color": color, "width": 1.5},
                     "marker": {"size": 7, "color": color, "line": {"width": 0.8, "color": "#222"}},
                     "error_x": {"type": "data", "symmetric": False, "visible": True, "color": color,
                                 "thickness": 0.6, "width": 2,
                                 "array": (sub["predicted_loss_high"] - sub["predicted_loss"]).tolist(),
                                 "arrayminus": (sub["predicted_loss"] - sub["predicted_loss_low"]).tolist()}
                     if "predicted_loss_low" in sub.columns and len(sub) else {"visible": False}})
        row = None
        if reference:
            row = next((r for r in reference.get("rows", []) if r.get("target_tokens_per_s_per_user") == t), None)
        if reference and row is not None and row.get("reference_throughput"):
            data.append({"type": "scatter", "mode": "markers", "name": f"{reference['reference']} at >= {t:g}",
                         "x": [reference["reference_loss"]], "y": [row["reference_throughput"]],
                         "hovertemplate": f"<b>{reference['reference']}</b> ({row.get('reference_deployment', '')})"
                                          "<br>predicted loss %{x:.4f} (as released)<br>tokens/s/GPU %{y:.4g}"
                                          "<extra></extra>",
                         "marker": {"size": 14, "symbol": "star", "color": color, "line": {"width": 1, "color": "#222"}}})
    shapes = []
    if loss_limit is not None:
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": loss_limit, "x1": loss_limit, "y0": 0,
                       "y1": 1, "line": {"color": "#888", "dash": "dash", "width": 1}})
    layout = {"font": _FONT, "height": 480, "margin": {"l": 70, "r": 20, "t": 50, "b": 60}, "plot_bgcolor": "white",
              "xaxis": _axis("predicted pre-training loss (nats/token, lower is better)", log=False),
              "yaxis": _axis(_label(Y)), "hovermode": "closest", "hoverlabel": {"align": "left"},
              "legend": {"orientation": "h", "y": -0.2}, "shapes": shapes,
              "title": {"text": "Throughput vs predicted loss at each interactivity target (up and left is better)",
                        "x": 0.01, "font": {"size": 14}}}
    return {"id": "fig-quality", "data": data, "layout": layout}
