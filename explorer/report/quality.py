"""The quality parts of a sweep report (explorer/quality.py predictions in the table): the summary's
quality note (anchor, front against the reference: loss delta and band, how many points leave the
laws' fitted ranges), the decision summary (explorer/decision.py) and the panel of throughput
against predicted loss at the interactivity targets.  A table without ``predicted_loss`` gets none
of them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from explorer.report import figures as F
from explorer.report.page import data_table, esc, fmt_num

#: Interactivity targets of the panel when the sweep recorded none (tokens/s/user).
DEFAULT_TARGETS = (20.0, 50.0, 100.0)


def _quality_meta(meta: Mapping[str, Any]) -> Mapping[str, Any]:
    cons = meta.get("constraints")
    q = cons.get("quality") if isinstance(cons, Mapping) else None
    return q if isinstance(q, Mapping) else {}


def _range_counts(rows: pd.DataFrame) -> list[tuple[str, int]]:
    if "quality_ranges_left" not in rows.columns:
        return []
    names = rows["quality_ranges_left"].fillna("").astype(str).str.split(";").explode()
    names = names[names != ""]
    return [(str(k), int(v)) for k, v in names.value_counts().items()]


def summary_html(df: pd.DataFrame, front: pd.DataFrame, meta: Mapping[str, Any]) -> str:
    """The quality note of the summary ('' when the table has no predicted loss)."""
    if "predicted_loss" not in df.columns:
        return ""
    q = _quality_meta(meta)
    parts = []
    ref, ref_loss = q.get("reference"), q.get("reference_loss")
    if ref and ref_loss:
        parts.append(f"Quality anchor: {ref} (predicted loss {float(ref_loss):.4f} nats/token"
                     + (f", limit {float(q['loss_limit']):.4f}" if q.get("loss_limit") else "") + ").")
        if len(front):
            d = (front["predicted_loss"].to_numpy(dtype=float) / float(ref_loss) - 1) * 100
            lo = (front["predicted_loss_low"].to_numpy(dtype=float) / float(ref_loss) - 1) * 100
            hi = (front["predicted_loss_high"].to_numpy(dtype=float) / float(ref_loss) - 1) * 100
            parts.append(f"The front's predicted loss is {np.min(d):+.2f} % to {np.max(d):+.2f} % (median "
                         f"{np.median(d):+.2f} %) against {ref}; with the MoE band {np.min(lo):+.2f} % to "
                         f"{np.max(hi):+.2f} %.")
    elif len(front):
        v = front["predicted_loss"].to_numpy(dtype=float)
        parts.append(f"Predicted loss on the front: {np.min(v):.4f} to {np.max(v):.4f} nats/token (no reference model).")
    if "quality_extrapolated" in df.columns:
        ext = df["quality_extrapolated"].astype(str).str.lower().isin(["true", "1"])
        fext = front["quality_extrapolated"].astype(str).str.lower().isin(["true", "1"]) if len(front) else ext[:0]
        counts = _range_counts(front if len(front) else df)
        parts.append(f"{int(ext.sum()):,} of {len(df):,} points ({int(fext.sum())} of {len(front)} front points) lie "
                     "outside the quality laws' fitted ranges: their predicted loss is an extrapolation"
                     + (" (" + ", ".join(f"{k} {n}" for k, n in counts[:8]) + " on the front)" if counts else "")
                     + ". docs/quality.md explains each range.")
    cls = "banner" if "quality_extrapolated" in df.columns and df["quality_extrapolated"].astype(str).str.lower().isin(
        ["true", "1"]).any() else "note"
    return f'<p class="{cls}">{esc(" ".join(parts))}</p>'


def _pct(v: Any) -> str:
    return f"{float(v):+.2f} %" if v is not None and np.isfinite(float(v)) else "—"


def decision_html(decision: Mapping[str, Any] | None) -> str:
    """The decision summary as a table ('' without one)."""
    if not decision or not decision.get("rows"):
        return ""
    ref = str(decision.get("reference"))
    rows = []
    for r in decision["rows"]:
        t = r["target_tokens_per_s_per_user"]
        if r.get("design") is None:
            rows.append({"target": f">= {t:g}", "design": "no feasible design reaches it"})
            continue
        band = r.get("loss_delta_band_pct")
        rows.append({
            "target": f">= {t:g}", "design": r["design"], "throughput": r["throughput"],
            "ratio": (f"{r['throughput_ratio']:.2f}x ({fmt_num(r['reference_throughput'])}, "
                      f"{r.get('reference_deployment', '')})") if r.get("reference_throughput") else "not reached",
            "loss": _pct(r.get("loss_delta_pct")) + (f" ({band[0]:+.2f} .. {band[1]:+.2f})" if band and
                                                    abs(band[1] - band[0]) > 1e-9 else ""),
            "plain": _pct(r.get("loss_delta_without_shape_terms_pct")),
            "component": (f"{r['component']}: {r['component_saving_gpu_s_per_token'] * 1e6:,.1f} µs·GPU/token "
                          f"({r['component_saving_share']:.0%})") if "component" in r else "—",
            "training": f"{r['training_flop_ratio']:.2f}x" if "training_flop_ratio" in r else "—",
            "flag": "extrapolated" if r.get("quality_extrapolated") else "",
        })
        for name, f in (r.get("by_family") or {}).items():
            if f.get("design") is None:
                rows.append({"target": f"  best {name}", "design": f"none feasible ({f['points']:,} {name} points scored)"})
                continue
            rows.append({"target": f"  best {name}", "design": f["design"], "throughput": f["throughput"],
                         "ratio": f"{f['throughput_ratio']:.2f}x" if "throughput_ratio" in f else "",
                         "loss": _pct(f.get("loss_delta_pct"))})
    cols: list[tuple[str, str, Any]] = [("target", "tokens/s/user", str), ("design", "best design", str), ("throughput", "tokens/s/GPU", fmt_num),
            ("ratio", f"vs {ref} on the same hardware", str), ("loss", "loss Δ (MoE band)", str),
            ("plain", "loss Δ without shape terms", str), ("component", "cost that shrank most", str),
            ("training", "training compute", str), ("flag", "", str)]
    excl = decision.get("reference_precisions_excluded") or {}
    note = ""
    if excl:
        note = (f" {ref} is deployed in {', '.join(decision.get('reference_precisions') or [])} only: "
                + ", ".join(f"{p} would cost it {d:+.2f} % loss" for p, d in excl.items()) + ", beyond the limit.")
    how = (f"At each interactivity target, the feasible design with the highest tokens/s/GPU, against {ref} "
           "deployed on the same hardware (its best of tp, pp (ep, dp) in {1, 2, 4, 8}, batch 1..2048). Loss Δ is "
           f"the predicted pre-training loss against {ref} as released (bf16, its published training tokens); "
           "the bracket is the MoE effective-parameter band; the next column is the same delta with the shape "
           "terms off (they are extrapolated at this scale). The cost that shrank most is the time component "
           "whose GPU-seconds per output token fell most against the reference: the choice that made the win."
           + note)
    rows = [{c[0]: r.get(c[0], "") for c in cols} for r in rows]  # blank, not "None", where a row has no figure
    body = data_table(rows, cols, text_cols={c[0] for c in cols} - {"throughput"})
    return (f'<section id="decision"><h2>Decision summary</h2><p class="how">{esc(how)}</p>'
            f'<div class="scroll">{body}</div></section>')


def quality_figure(df: pd.DataFrame, meta: Mapping[str, Any]) -> dict | None:
    """The throughput-vs-predicted-loss panel (None without predicted loss)."""
    if "predicted_loss" not in df.columns or not df["feasible"].any():
        return None
    decision = meta.get("decision") if isinstance(meta.get("decision"), Mapping) else None
    targets = (decision or {}).get("targets") or DEFAULT_TARGETS
    limit = _quality_meta(meta).get("loss_limit")
    return F.quality_figure(df, [float(t) for t in targets], decision, None if limit is None else float(limit))


def section_html() -> str:
    return ('<section id="quality"><h2>Throughput vs predicted loss</h2><p class="how">For each interactivity '
            "target, the designs that reach it reduced to their front in (predicted loss, tokens/s/GPU): how much "
            "throughput each step of predicted quality costs. Horizontal bars are the MoE effective-parameter band; "
            "stars are the reference model at the same target; the dashed line is the quality limit. Predicted "
            "loss comes from published scaling laws (docs/quality.md), extrapolated at this scale: read "
            'differences, not absolute values.</p><div class="plot" id="fig-quality"></div></section>')
