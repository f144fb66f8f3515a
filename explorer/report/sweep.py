"""One sweep's report: the results table and the run's provenance as one self-contained HTML page.

Panels (see docs/report.md for how to read them): summary, frontier (with real models as
reference fronts), parameters along the front, time breakdown along the front, GEMM alignment of
the front, hypervolume vs trial, the front as a sortable table, provenance.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from explorer.errors import ExplorerError, SpecError
from explorer.frontier import front_table, hypervolume, hypervolume_history
from explorer.report import figures as F
from explorer.report.codec import dumps, encode_table, jsonable
from explorer.report.page import cards, data_table, esc, fmt_num, kv_table, page

SCHEMA = "explorer-report/1"
OBJECTIVES = {F.Y: "maximize", F.X: "maximize"}
MAX2 = ("maximize", "maximize")
#: Front rows analysed by the alignment panel (the front is sorted by interactivity; beyond this
#: many points, every k-th is kept).
ALIGNMENT_MAX_POINTS = 300
#: Alignment rows shown in the page (all rows are in the data block).
ALIGNMENT_MAX_ROWS = 250

REFERENCE_COLUMNS = ("reference", "reference_label", "model", "hardware", "precision", F.X, F.Y, "ttft_s", "tpot_s",
                     "memory_bytes_per_gpu", "params_active", "batch", "tp", "pp", "ep", "dp")


# ------------------------------------------------------------------------------------------------
# table preparation
# ------------------------------------------------------------------------------------------------


def prepare_table(df: pd.DataFrame, where: str = "report") -> pd.DataFrame:
    """A copy with a clean index, a boolean ``feasible`` (all True when absent) and ``on_front``
    recomputed from the two objectives with :func:`explorer.frontier.front_table`.

    Raises :class:`SpecError` when an objective column is missing or not numeric.
    """
    if not isinstance(df, pd.DataFrame):
        raise SpecError(where, None, f"expected a results table (pandas DataFrame), got {type(df).__name__}")
    for c in (F.X, F.Y):
        if c not in df.columns:
            raise SpecError(where, c, f"results table has no column '{c}'; columns are {list(df.columns)[:12]}...")
        if not pd.api.types.is_numeric_dtype(df[c]):
            raise SpecError(where, c, f"column '{c}' must be numeric, got {df[c].dtype}")
    out = df.reset_index(drop=True).copy()
    if "feasible" not in out.columns:
        out["feasible"] = True
    feas = out["feasible"]
    if not pd.api.types.is_bool_dtype(feas):
        text = feas.astype(str).str.strip().str.lower()
        out["feasible"] = text.isin(["true", "1", "1.0", "yes"])
    out["feasible"] = out["feasible"].astype(bool)
    out["on_front"] = front_table(out, OBJECTIVES, feasible_col="feasible").to_numpy()
    return out


#: error-bar offsets of the front's held-out bands (explorer/uncertainty.py): x = tokens/s/user, y = tokens/s/GPU
BAND_COLUMNS = ("band_x_minus", "band_x_plus", "band_y_minus", "band_y_plus")


def front_bands(front: pd.DataFrame) -> pd.DataFrame:
    """The held-out error band of each front row (in the front's order) as error-bar offsets beside
    its two objectives (:data:`BAND_COLUMNS`): the band of the row's runtime (the simulator's default
    where the table has none) and model family (MoE where ``experts > 0``)."""
    from explorer.runtime import DEFAULT_RUNTIME
    from explorer.uncertainty import bounds_table

    runtime = front["runtime"].astype(str).to_numpy() if "runtime" in front.columns else \
        np.full(len(front), DEFAULT_RUNTIME)
    moe = (pd.to_numeric(front["experts"], errors="coerce").fillna(0).to_numpy() > 0) \
        if "experts" in front.columns else np.zeros(len(front), dtype=bool)
    x, y = front[F.X].to_numpy(dtype=float), front[F.Y].to_numpy(dtype=float)
    b = bounds_table({F.X: x, F.Y: y}, runtime, moe)
    return pd.DataFrame({F.X: x, F.Y: y, "band_x_minus": x - b[f"{F.X}_low"], "band_x_plus": b[f"{F.X}_high"] - x,
                         "band_y_minus": y - b[f"{F.Y}_low"], "band_y_plus": b[f"{F.Y}_high"] - y,
                         "band_group": b["band_group"].astype(str)})


def front_of(df: pd.DataFrame) -> pd.DataFrame:
    """Front rows of a prepared table, sorted by interactivity (the report's front order)."""
    fr = df[df["on_front"] & df["feasible"]]
    return fr.sort_values([F.X, F.Y], ascending=[True, False], kind="stable")


def _positive(front: pd.DataFrame) -> int:
    x = front[F.X].to_numpy(dtype=float)
    y = front[F.Y].to_numpy(dtype=float)
    return int((np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)).sum())


# ------------------------------------------------------------------------------------------------
# derived data
# ------------------------------------------------------------------------------------------------


def hypervolume_curve(df: pd.DataFrame, meta: Mapping[str, Any]) -> tuple[list[float], list[float | None], str]:
    """(trial numbers, hypervolume, source) at every change of the curve plus the last trial."""
    hist = meta.get("hypervolume_history")
    if hist is not None and len(hist):
        hv = np.asarray([np.nan if v is None else v for v in hist], dtype=float)
        trials = np.arange(len(hv), dtype=float)
        ref = meta.get("hypervolume_reference")
        source = "hypervolume after each trial, as recorded by the sweep" + (
            f" (reference point {dumps(jsonable(ref))})" if ref is not None else "")
    else:
        vals = df[[F.X, F.Y]].to_numpy(dtype=float, na_value=np.nan).copy()
        vals[~df["feasible"].to_numpy(dtype=bool)] = np.nan
        order = df["trial"].to_numpy() if "trial" in df.columns else None
        hv = hypervolume_history(vals, MAX2, order=order) if len(vals) else np.empty(0)
        trials = np.sort(df["trial"].to_numpy(dtype=float)) if order is not None else np.arange(len(hv), dtype=float)
        source = ("hypervolume of the feasible points of trials 0..n, recomputed from the table in "
                  + ("trial order" if order is not None else "row order"))
    if len(hv) == 0:
        return [], [], source
    keep = np.ones(len(hv), dtype=bool)
    keep[1:] = hv[1:] != hv[:-1]
    keep[-1] = True
    return trials[keep].tolist(), [float(v) if np.isfinite(v) else None for v in hv[keep]], source


def _workload(df: pd.DataFrame, meta: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(ISL, OSL): the sweep's fixed values, else the table's most common ones (a searched workload
    is recorded as a range description, not a number)."""
    wl = meta.get("workload") or {}

    def pick(key: str) -> int | None:
        v = wl.get(key) if isinstance(wl, Mapping) else None
        if isinstance(v, int | float) and not isinstance(v, bool) and np.isfinite(v) and 1 <= v <= 2**31 - 1:
            return int(v)
        if key in df.columns and len(df):
            col = pd.to_numeric(df[key], errors="coerce")
            col = col[np.isfinite(col) & (col >= 1) & (col <= 2**31 - 1)]
            if len(col):
                return int(col.mode().iloc[0])
        return None

    return pick("isl"), pick("osl")


def default_references(front: pd.DataFrame) -> list[str]:
    """Llama-3.1-70B and -8B, plus the preset whose active parameters are closest to the front's."""
    from explorer.references import DEFAULT_PRESETS, nearest_presets

    names = []
    if "params_active" in front.columns and len(front):
        active = float(np.nanmedian(front["params_active"].to_numpy(dtype=float)))
        moe = "experts" in front.columns and bool((front["experts"] > 0).any())
        names = nearest_presets(active, k=1, dense_only=not moe)
    return list(dict.fromkeys(names + list(DEFAULT_PRESETS)))[:3]


def compute_references(df: pd.DataFrame, front: pd.DataFrame, meta: Mapping[str, Any],
                       presets: Sequence[str] | None) -> tuple[pd.DataFrame | None, dict[str, Any]]:
    """Reference fronts for the report, and a note dict (what was drawn, skipped and why)."""
    note: dict[str, Any] = {"presets": [], "skipped": [], "error": None}
    if presets is None:
        presets = meta.get("references")
    if presets is None:
        presets = default_references(front)
    presets = [str(p) for p in presets]
    if not presets:
        note["error"] = "no reference models requested"
        return None, note
    missing = [c for c in ("hardware", "precision") if c not in df.columns]
    isl, osl = _workload(df, meta)
    if missing or isl is None or osl is None:
        note["error"] = "the table lacks " + ", ".join(missing + [c for c, v in (("isl", isl), ("osl", osl)) if v is None])
        return None, note
    pool = df[df["feasible"]] if df["feasible"].any() else df
    hardware = sorted(pool["hardware"].astype(str).unique().tolist())
    precisions = sorted(pool["precision"].astype(str).unique().tolist())
    from explorer.references import reference_fronts

    # kinds the sweep loaded from a file are loaded from it again (when it is still there)
    given = meta.get("hardware_paths")
    paths: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    load = [str(paths[h]) if h in paths and Path(str(paths[h])).is_file() else h for h in hardware]
    try:
        from explorer.specio import check_name_text

        for h in load:  # names from a table: before they reach the file system
            check_name_text(h, "references", "hardware", "hardware")
        ref = reference_fronts(presets, load, isl, osl, precisions)
    except ExplorerError as e:
        note["error"] = str(e)
        return None, note
    note.update(presets=presets, skipped=ref.attrs.get("skipped", []), hardware=hardware, precisions=precisions,
                isl=isl, osl=osl)
    cols = [c for c in REFERENCE_COLUMNS if c in ref.columns]
    return ref[cols].reset_index(drop=True), note


def compute_alignment(front: pd.DataFrame) -> tuple[pd.DataFrame | None, str | None]:
    from explorer.alignment import alignment_table

    if len(front) == 0:
        return None, "no feasible front"
    sub = front
    if len(sub) > ALIGNMENT_MAX_POINTS:
        sub = sub.iloc[np.linspace(0, len(sub) - 1, ALIGNMENT_MAX_POINTS).round().astype(int)]
    try:
        table = alignment_table(sub.reset_index(drop=True))
    except (ExplorerError, KeyError, ValueError) as e:
        return None, f"alignment unavailable: {e}"
    # point numbers as in the front table (1-based position along the front)
    pos = np.asarray([front.index.get_loc(i) for i in sub.index]) + 1
    table["point"] = pos[table["point"].to_numpy(dtype=int)]
    return table, None


# ------------------------------------------------------------------------------------------------
# HTML sections
# ------------------------------------------------------------------------------------------------


def _ms(v: Any) -> str:
    return fmt_num(float(v) * 1e3, 4) if v is not None and np.isfinite(float(v)) else ""


def _gb(v: Any) -> str:
    return f"{float(v) / 1e9:.1f}" if v is not None and np.isfinite(float(v)) else ""


def _b(v: Any) -> str:
    return f"{float(v) / 1e9:.2f}" if v is not None and np.isfinite(float(v)) else ""


def _num4(v: Any) -> str:
    """Four significant digits; empty for a missing (NaN) figure, e.g. a kind without a price."""
    return fmt_num(float(v), 4) if v is not None and np.isfinite(float(v)) else ""


def _pct(v: Any) -> str:
    return f"{100 * float(v):.0f}%" if v is not None and np.isfinite(float(v)) else ""


FRONT_COLUMNS: tuple[tuple[str, str, Any], ...] = (
    ("#", "#", fmt_num), (F.X, "tokens/s/user", lambda v: fmt_num(v, 4)), (F.Y, "tokens/s/GPU", lambda v: fmt_num(v, 4)),
    ("ttft_s", "TTFT ms", _ms), ("tpot_s", "TPOT ms", _ms),
    ("tokens_per_s_per_kw", "tok/s/kW", _num4), ("usd_per_million_tokens", "$/M tok", _num4),
    ("memory_bytes_per_gpu", "mem GB/GPU", _gb),
    ("params_active", "active B", _b), ("params_total", "total B", _b),
    ("predicted_loss", "pred. loss", lambda v: f"{float(v):.4f}" if v is not None and np.isfinite(float(v)) else ""),
    ("predicted_loss_delta_pct", "loss Δ %", lambda v: f"{float(v):+.2f}" if v is not None and np.isfinite(float(v))
     else ""),
    ("model", "model", str),
    ("hardware", "hardware", str), ("precision", "precision", str), ("hidden", "H", fmt_num), ("ffn", "H'", fmt_num),
    ("layers", "L", fmt_num), ("heads", "heads", fmt_num), ("kv_heads", "kv", fmt_num), ("experts", "E", fmt_num),
    ("experts_per_token", "k", fmt_num), ("expert_ffn", "F_e", fmt_num), ("batch", "batch", fmt_num),
    ("tp", "tp", fmt_num), ("pp", "pp", fmt_num), ("ep", "ep", fmt_num), ("dp", "dp", fmt_num),
    ("gpus", "GPUs", fmt_num), ("trial", "trial", fmt_num),
)


def front_table_html(front: pd.DataFrame) -> str:
    cols = [c for c in FRONT_COLUMNS if c[0] == "#" or c[0] in front.columns]
    if "experts" in front.columns and not (front["experts"] > 0).any():
        cols = [c for c in cols if c[0] not in ("experts", "experts_per_token", "expert_ffn")]
    rows = []
    for k, rec in enumerate(front.to_dict("records"), start=1):
        rec["#"] = k
        rows.append(rec)
    text = {"model", "hardware", "precision"}
    return '<div class="scroll">' + data_table(rows, cols, text_cols=text) + "</div>"


def _us(v: Any) -> str:
    if v is None or not np.isfinite(float(v)):
        return "—"
    return f"{float(v) * 1e6:+.2f}"


def _pct2(v: Any) -> str:
    if v is None or not np.isfinite(float(v)):
        return "—"
    return f"{float(v):+.2f}%"


def _eff(v: Any) -> str:
    return f"{100 * float(v):.0f}%" if v is not None and np.isfinite(float(v)) else ""


ALIGN_COLUMNS = (
    ("gemm", "GEMM", str), ("points", "front points", fmt_num), ("first", "first #", fmt_num),
    ("M_step", "M per step", str), ("N", "N", fmt_num), ("K", "K", fmt_num), ("tile", "tile", str),
    ("tile_eff_step", "tile eff (step)", _eff), ("wave_eff_step", "wave eff (step)", _eff),
    ("tile_eff_prefill", "tile eff (prefill)", _eff), ("wave_eff_prefill", "wave eff (prefill)", _eff),
    ("width_txt", "width", str), ("aligned_txt", "aligned", str),
    ("saved_per_token_s", "saved µs/token", _us), ("saved_tpot_pct", "% TPOT", _pct2),
    ("saved_ttft_s", "saved µs TTFT", _us), ("saved_ttft_pct", "% TTFT", _pct2),
)


def alignment_html(table: pd.DataFrame | None, err: str | None) -> str:
    """The alignment panel: one row per distinct sharded GEMM shape on the front."""
    from explorer.alignment import alignment_summary

    if table is None:
        return f'<p class="note">{esc(err or "alignment unavailable")}</p>'
    t = alignment_summary(table)
    t["width_txt"] = [f"{p} = {fmt_num(w)}" for p, w in zip(t["width_param"], t["width"], strict=True)]
    t["aligned_txt"] = [
        "—" if not np.isfinite(a) else (fmt_num(a) if a != w else "aligned")
        for a, w in zip(t["width_aligned"].to_numpy(float), t["width"].to_numpy(float), strict=True)
    ]
    n_free = int(np.isfinite(t["N_aligned"].to_numpy(float)).sum())
    mis = t["misaligned"].to_numpy(bool)
    summary = (f"{int(mis.sum())} of {n_free} distinct N widths on the front are not multiples of their "
               "tile's N. ")
    if mis.any():
        def most(col: str) -> float:  # NaN when no row has a figure (no warning)
            v = t.loc[mis, col].to_numpy(dtype=float)
            return float(np.nanmax(v)) if np.isfinite(v).any() else float("nan")

        summary += (f"Aligning them would change time per output token by up to "
                    f"{most('saved_tpot_pct'):+.2f}% and TTFT by up to "
                    f"{most('saved_ttft_pct'):+.2f}% (positive = faster).")
    extra = ""
    shown = t
    if len(t) > ALIGNMENT_MAX_ROWS:
        shown = t.head(ALIGNMENT_MAX_ROWS)
        extra = f" Showing {len(shown)} of {len(t)} shapes; every row is in the report's data block."
    body = data_table(shown.to_dict("records"), ALIGN_COLUMNS,
                      text_cols={"gemm", "tile", "width_txt", "aligned_txt", "M_step"},
                      row_class=lambda r: "bad" if r["misaligned"] else "")
    return f'<p>{esc(summary + extra)}</p><div class="scroll">{body}</div>'


def _references_note(note: Mapping[str, Any]) -> str:
    if note.get("error"):
        return f'<p class="note">Reference models not drawn: {esc(note["error"])}.</p>'
    drawn = [p for p in note["presets"] if p not in {s["preset"] for s in note.get("skipped", [])}]
    txt = (f"Reference fronts (dotted): {', '.join(drawn) or 'none'} on {', '.join(note.get('hardware', []))}, "
           f"ISL/OSL {note.get('isl')}/{note.get('osl')}, precisions {', '.join(note.get('precisions', []))}; "
           "each the best of tp, pp (and ep, dp for MoE) in {1, 2, 4, 8} and batch 1..2048.")
    skipped = note.get("skipped") or []
    if skipped:
        txt += " Not drawn, infeasible everywhere on the grid: " + "; ".join(
            f"{s['preset']} on {s['hardware']} ({s['reason']})" for s in skipped) + "."
    return f'<p class="note">{esc(txt)}</p>'


def _measured_note(block: Mapping[str, Any] | None) -> str:
    from explorer.report.measured import measured_note

    text = measured_note(block)
    return f'<p class="note">{esc(text)}</p>' if text else ""


def _reasons_html(df: pd.DataFrame, meta: Mapping[str, Any]) -> str:
    """Why designs were infeasible: the sweep's counts (meta ``reason_counts``) or the table's."""
    rows: list[dict[str, Any]] = []
    given = meta.get("reason_counts")
    if isinstance(given, list) and given and all(isinstance(r, Mapping) for r in given):
        rows = [{"reason": str(r.get("reason", r.get("reason_code", "?"))), "count": r.get("count")} for r in given]
    elif "reason" in df.columns and (~df["feasible"]).any():
        text = df.loc[~df["feasible"], "reason"].astype(str).str.split(":").str[0]
        rows = [{"reason": k, "count": int(v)} for k, v in text.value_counts().items()]
        rows.insert(0, {"reason": "feasible", "count": int(df["feasible"].sum())})
    if not rows:
        return ""
    total = sum(float(r["count"] or 0) for r in rows) or 1.0
    for r in rows:
        r["share"] = float(r["count"] or 0) / total
    table = data_table(rows, [("reason", "outcome", str), ("count", "designs", fmt_num), ("share", "share", _pct)],
                       text_cols={"reason"})
    return f"<details><summary>why designs were infeasible</summary>{table}</details>"


def _objectives_note(meta: Mapping[str, Any]) -> str:
    obj = meta.get("objectives")
    names = list(obj) if isinstance(obj, (Mapping, list, tuple)) else []
    extra = [str(n) for n in names if n not in (F.X, F.Y)]
    if not extra:
        return ""
    return (f'<p class="note">The sweep also optimised {esc(", ".join(extra))}; this report\'s front is the '
            "Pareto front in the two plotted objectives (tokens/s/GPU, tokens/s/user) only.</p>")


def provenance_html(meta: Mapping[str, Any]) -> str:
    def show(v: Any) -> str:
        if isinstance(v, (dict, list)):
            return dumps(jsonable(v))
        return "" if v is None else str(v)

    wl = meta.get("workload")
    items = [
        ("study", show(meta.get("study"))), ("space file", show(meta.get("space_file"))),
        ("sampler", show(meta.get("sampler"))), ("seed", show(meta.get("seed"))),
        ("trials", show(meta.get("trials"))), ("objectives", show(meta.get("objectives"))),
        ("constraints", show(meta.get("constraints"))), ("workload", show(wl)),
        ("tool version", show(meta.get("tool_version"))), ("date", show(meta.get("date"))),
        ("source table", show(meta.get("source_file"))),
    ]
    known = {"study", "space_file", "space_text", "hardware_files", "sampler", "seed", "trials", "objectives",
             "constraints", "workload", "tool_version", "date", "hypervolume_history", "source_file", "references",
             "reason_counts", "decision"}
    items += [(str(k), show(v)) for k, v in meta.items() if k not in known]
    out = [kv_table(items) if any(v for _, v in items) else '<p class="note">No provenance recorded '
           "(the report was made from a bare results table).</p>"]
    if meta.get("space_text"):
        out.append(f"<details open><summary>search space file {esc(meta.get('space_file') or '')}</summary>"
                   f'<pre class="file">{esc(meta["space_text"])}</pre></details>')
    hw = meta.get("hardware_files") or {}
    if isinstance(hw, Mapping):
        for name, text in hw.items():
            out.append(f"<details><summary>hardware file {esc(name)}</summary>"
                       f'<pre class="file">{esc(text)}</pre></details>')
    return "".join(out)


# ------------------------------------------------------------------------------------------------
# assembly
# ------------------------------------------------------------------------------------------------


def _assemble(obj: dict[str, Any], raw: Mapping[str, str]) -> str:
    """``dumps(obj)`` with placeholder strings replaced by pre-serialised JSON fragments."""
    text = dumps(obj)
    for placeholder, fragment in raw.items():
        quoted = dumps(placeholder)
        assert text.count(quoted) == 1, placeholder
        text = text.replace(quoted, fragment, 1)
    return text


def build_report_html(df: pd.DataFrame, meta: Mapping[str, Any] | None = None, plotlyjs: str = "inline",
                      color_by: str | None = None, references: Sequence[str] | None = None,
                      measured: Any = None) -> str:
    """The report page for a results table (see module docstring).

    ``meta`` keys (all optional): ``study space_file space_text hardware_files sampler seed trials
    objectives constraints workload tool_version date hypervolume_history references``.
    ``references``: preset names to draw as reference fronts (None: ``meta["references"]`` or
    :func:`default_references`; ``[]``: none).  ``color_by``: the frontier's initial colouring
    (a column name).  ``measured``: a measured-curves file (path or
    :class:`explorer.report.measured.MeasuredCurves`) overlaid on the frontier
    (:mod:`explorer.report.measured`; data block key ``measured``).  Raises :class:`SpecError` for a table without the objective columns or an
    unknown ``color_by``.
    """
    meta = dict(meta or {})
    if plotlyjs not in ("inline", "cdn"):
        raise SpecError("report", "plotlyjs", f"must be 'inline' or 'cdn', got {plotlyjs!r}")
    df = prepare_table(df)
    if color_by is not None and color_by not in df.columns:
        raise SpecError("report", "--color-by", f"no column '{color_by}' in the table; try precision, tp, batch, "
                        "hidden, layers")
    front = front_of(df)
    n_front = _positive(front)
    values = front[[F.X, F.Y]].to_numpy(dtype=float)
    hv = hypervolume(values, MAX2) if len(values) else 0.0
    hv_trials, hv_values, hv_source = hypervolume_curve(df, meta)
    ref, ref_note = compute_references(df, front, meta, references)
    align, align_err = compute_alignment(front)
    colors = F.color_options(df, color_by)
    measured_block = None
    if measured is not None:
        from explorer.report.measured import MeasuredCurves, load_measured, measured_overlay

        if not isinstance(measured, MeasuredCurves):
            measured = load_measured(measured)
        measured_block = measured_overlay(df, meta, measured)

    study = meta.get("study") or "study"
    show_params = len(front) > 0 and len(F.along_columns(front)) > 0
    show_breakdown = len(front) > 0 and any(c in df.columns for c in F.BREAKDOWN)
    keys = {name: f"@@{name}-{uuid.uuid4().hex}@@" for name in ("table", "references", "alignment", "bands")}
    bands = front_bands(front) if len(front) else None
    figs = [F.frontier_figure(df, colors, ref, bands_table="bands" if bands is not None else None)]
    if measured_block is not None:
        from explorer.report.measured import measured_traces

        figs[0]["data"].extend(measured_traces(measured_block))
    if show_params:
        figs.append(F.parameters_figure(front))
    if show_breakdown:
        figs.append(F.breakdown_figure(df))
    figs.append(F.hypervolume_figure(hv_trials, hv_values, hv_source))
    from explorer.report import quality as Q

    qfig = Q.quality_figure(df, meta)  # None unless the table carries predicted loss (explorer/quality.py)
    if qfig is not None:
        figs.append(qfig)
    figures: dict[str, Any] = {"figures": figs, "expected_front_points": n_front}
    if measured_block is not None:
        figures["expected_measured_points"] = sum(
            sum(v is not None for v in c["measured"][F.X]) for c in measured_block["curves"])

    # data block
    raw = {keys["table"]: encode_table(df, exact=(F.X, F.Y))}
    derived: dict[str, Any] = {
        "front_size": int(len(front)), "front_points_plotted": n_front, "hypervolume": hv,
        "hypervolume_reference": [0.0, 0.0], "objectives": OBJECTIVES,
        "hypervolume_curve": {"trial": hv_trials, "hypervolume": hv_values, "source": hv_source},
        "color_options": colors, "references_note": ref_note,
    }
    if ref is not None:
        derived["references"] = keys["references"]
        raw[keys["references"]] = encode_table(ref, exact=(F.X, F.Y))
    if align is not None:
        derived["alignment"] = keys["alignment"]
        raw[keys["alignment"]] = encode_table(align)
    payload = {"schema": SCHEMA, "table": keys["table"], "meta": jsonable(meta), "derived": derived}
    if bands is not None:  # the front's held-out error bands (explorer/uncertainty.py), a table of their own
        payload["tables"] = {"bands": keys["bands"]}
        raw[keys["bands"]] = encode_table(bands, exact=(F.X, F.Y))
    if measured_block is not None:
        payload["measured"] = jsonable(measured_block)
    data_json = _assemble(payload, raw)

    # page
    n = len(df)
    n_feas = int(df["feasible"].sum())
    hw_names = sorted(df["hardware"].astype(str).unique()) if "hardware" in df.columns else []
    precs = sorted(df["precision"].astype(str).unique()) if "precision" in df.columns else []
    isl, osl = _workload(df, meta)
    sub = [", ".join(hw_names) or "hardware not recorded", f"ISL/OSL {isl}/{osl}"]
    if meta.get("date"):
        sub.append(str(meta["date"]))
    if meta.get("tool_version"):
        sub.append(f"explorer {meta['tool_version']}")
    header = f"<h1>Explorer report: {esc(study)}</h1><div class=\"sub\">{esc(' · '.join(sub))}</div>"
    summary = cards([
        ("trials", fmt_num(meta.get("trials") if meta.get("trials") is not None else n)),
        ("feasible", f"{n_feas:,} ({n_feas / n:.0%})" if n else "0"),
        ("front points", fmt_num(len(front))),
        ("hypervolume (origin)", f"{hv:.4g}"),
        ("max tokens/s/GPU", fmt_num(front[F.Y].max(), 4) if len(front) else "—"),
        ("max tokens/s/user", fmt_num(front[F.X].max(), 4) if len(front) else "—"),
        ("precisions", ", ".join(precs) or "—"),
        ("sampler", f"{meta.get('sampler') or '—'}" + (f" (seed {meta.get('seed')})" if meta.get("seed") is not None
                                                      else "")),
    ])
    reasons = _reasons_html(df, meta)
    other_obj = _objectives_note(meta)
    anchor = meta.get("constraints")
    anchor_html = (f'<p class="note">Constraints / quality anchor: {esc(dumps(jsonable(anchor)))}</p>'
                   if anchor else '<p class="note">No quality anchor recorded: a throughput search left alone '
                                  "prefers the smallest model (DESIGN.md section 3).</p>")
    sections = [
        f'<section id="summary"><h2>Summary</h2>{summary}{anchor_html}{Q.summary_html(df, front, meta)}{other_obj}'
        f'{reasons}</section>' + Q.decision_html(meta.get("decision")),
        '<section id="frontier"><h2>Frontier</h2><p class="how">Each point is one design (model shape + '
        "deployment + hardware). x: tokens per second each user sees (1/TPOT); y: tokens per second per GPU. "
        "Black-outlined points are the Pareto front (no other design is better on both axes); the black "
        "staircase is the best throughput attainable at each required interactivity. Faint points are "
        "dominated; infeasible designs are hidden until you click them in the legend. Use the dropdown to "
        "colour by a parameter; hover for the whole design point and its time breakdown. The legend's "
        "'held-out error band' draws, around each front point, where 80 % of the measured curves of the same "
        "serving runtime and model family fell relative to their prediction when the model had not been fitted "
        "to them (leave-one-configuration-out; explorer/uncertainty.py): the model's track record, not a "
        "confidence interval of that design.</p>"
        '<div class="plot" id="fig-frontier"></div>' + _references_note(ref_note) + _measured_note(measured_block)
        + "</section>",
    ]
    if qfig is not None:
        sections.append(Q.section_html())
    from explorer.report.modes import modes_html

    modes = modes_html(df)  # '' unless the table compares serving modes (explorer/report/modes.py)
    if modes:
        sections.append(modes)
    if show_params:
        sections.append(
            '<section id="along"><h2>Parameters along the front</h2><p class="how">Each panel shows one '
            "parameter of the front's designs against interactivity (left: throughput-oriented, right: "
            "latency-oriented), so you can read how the best design changes as the latency target tightens."
            '</p><div class="plot" id="fig-params"></div></section>')
    if show_breakdown:
        sections.append(
            '<section id="breakdown"><h2>Time breakdown along the front</h2><p class="how">Where the time '
            "per output token goes for each front design, normalised to 100% (buttons switch to seconds). "
            "Whatever grows to dominate as you move along the front is what limits further gains (Amdahl).</p>"
            '<div class="plot" id="fig-breakdown"></div></section>')
    sections += [
        '<section id="alignment"><h2>GEMM alignment of the front</h2><p class="how">The weight GEMMs of the '
        "front's designs after sharding, one row per distinct shape (front points that differ only in batch "
        "share a row; 'first #' is the first such point in the front table), with the worst tile and wave "
        "efficiency at their tokens per step and for a lone prefill (M = ISL). A width that is not a "
        "multiple of the chosen tile's N pays for a whole extra tile column; 'aligned' is the nearest "
        "multiple, and the saved columns give the most time it would save per output token and per TTFT "
        "(negative: rounding up costs time but buys capacity). Red rows are misaligned.</p>" + alignment_html(align, align_err) + "</section>",
        '<section id="hypervolume"><h2>Search progress</h2><p class="how">Hypervolume (area dominated by '
        "the front) after each trial: a curve that has flattened says more "
        'trials would add little.</p><div class="plot" id="fig-hypervolume"></div></section>',
        f'<section id="front"><h2>The front ({len(front)} designs)</h2><p class="how">Click a column header '
        "to sort. # is the position along the front from the most throughput-oriented design.</p>"
        + front_table_html(front) + "</section>",
        f'<section id="provenance"><h2>Provenance</h2>{provenance_html(meta)}</section>',
    ]
    nav = [("summary", "Summary")] + ([("decision", "Decision")] if Q.decision_html(meta.get("decision")) else [])
    nav += [("frontier", "Frontier")] + ([("quality", "Quality")] if qfig is not None else [])
    if show_params:
        nav.append(("along", "Along the front"))
    if show_breakdown:
        nav.append(("breakdown", "Breakdown"))
    nav += [("alignment", "Alignment"), ("hypervolume", "Progress"), ("front", "Front table"),
            ("provenance", "Provenance")]
    return page(f"Explorer report: {study}", header, nav, "\n".join(sections), data_json, figures, plotlyjs)
