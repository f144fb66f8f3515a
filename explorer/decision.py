"""The decision summary of a sweep: at a few interactivity targets, the best design against a named
reference model deployed on the same hardware.

For each target (tokens/s/user, default 20, 50, 100; a space's ``decision.tokens_per_s_per_user``):

* the **best design**: the feasible row with the highest tokens/s/GPU among those reaching the target;
* its **throughput ratio** against the reference model's best deployment reaching the same target on
  the same hardware kind (:func:`explorer.references.reference_fronts`: the reference over tp, pp
  (ep, dp for MoE) in {1, 2, 4, 8}, batch 1..2048 and the sweep's number formats);
* its **predicted loss delta** against the reference (as released: bf16, published training
  tokens; explorer/quality.py) with the MoE band, when the table carries predicted loss;
* the **time component that shrank most**: each component's cost in GPU-seconds per output token
  (its share of the time per output token divided by tokens/s/GPU, so the components add up to
  1/throughput exactly), design against reference; the largest saving names the choice that made
  the win (fewer weight bytes: ``gemm``; fewer KV bytes: ``attention``; fewer layers: ``comm`` and
  ``overhead``, ...);
* the training compute ratio 6·N_active·D against the reference's (what the inference win costs
  in training).

Ignored: designs between grid points of the reference's deployment grid (a reference front is a
fair, not an optimal, placement), and everything the simulator and the loss law ignore.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from explorer.quality import TRAINING_FLOP_PER_PARAM_TOKEN, preset_loss

X = "tokens_per_s_per_user"
Y = "tokens_per_s_per_gpu"
#: Time components of a results row (seconds per output token), in display order.
COMPONENTS = ("gemm", "attention", "moe", "comm", "prefill", "overhead")


def _costs(row: Mapping[str, Any]) -> dict[str, float]:
    """GPU-seconds per output token of each component (they sum to 1/tokens_per_s_per_gpu)."""
    t = {c: float(row.get(f"t_{c}_s", np.nan)) for c in COMPONENTS}
    total = sum(v for v in t.values() if np.isfinite(v))
    thr = float(row[Y])
    if not (total > 0 and thr > 0):
        return {c: float("nan") for c in COMPONENTS}
    return {c: (v / total) / thr if np.isfinite(v) else float("nan") for c, v in t.items()}


def _design_text(r: Mapping[str, Any]) -> str:
    if str(r.get("model", "custom")) not in ("custom", "nan"):
        shape = str(r["model"])
    else:
        shape = f"H={int(r['hidden'])} F={int(r['ffn'])} L={int(r['layers'])} kv={int(r['kv_heads'])}"
        if r.get("experts", 0):
            shape = (f"H={int(r['hidden'])} L={int(r['layers'])} kv={int(r['kv_heads'])} E={int(r['experts'])} "
                     f"k={int(r['experts_per_token'])} Fe={int(r['expert_ffn'])}")
    moe = f", {float(r['params_active']) / 1e9:.1f}B active" if r.get("experts", 0) else ""
    return (f"{shape} ({float(r['params_total']) / 1e9:.1f}B{moe}) {r['precision']} tp={int(r['tp'])} "
            f"pp={int(r['pp'])} ep={int(r['ep'])} dp={int(r['dp'])} batch={int(r['batch'])}")


def decision_summary(df: pd.DataFrame, reference: str, targets: Sequence[float], isl: int, osl: int,
                     references: pd.DataFrame | None = None, loss_limit: float | None = None) -> dict[str, Any]:
    """The summary (JSON-ready) of a results table against ``reference`` (a preset name).

    ``references``: the reference's fronts when already computed (columns of
    :func:`explorer.references.reference_fronts`), else computed here on the table's feasible
    hardware kinds and number formats.  ``loss_limit`` (nats/token, the sweep's quality limit): the
    reference is deployed only in the formats whose served loss stays within it, so both sides of
    the ratio hold the same quality (the formats left out are listed).  Returns ``{"reference", "reference_loss", "targets": [...],
    "rows": [...]}``, one row per target; a row has ``design`` None when no feasible design reaches
    the target, and ``reference_throughput`` None when the reference does not reach it there.
    """
    from explorer.references import reference_fronts

    feas = df[df["feasible"].astype(bool)] if "feasible" in df.columns else df
    ref_q = preset_loss(reference)
    has_loss = "predicted_loss" in df.columns
    excluded: dict[str, float] = {}
    precs = sorted(feas["precision"].astype(str).unique().tolist()) if len(feas) else []
    if loss_limit is not None:
        served = {p: float(preset_loss(reference, None, *_formats(p))["predicted_loss"]) for p in precs}
        kept = [p for p in precs if served[p] <= loss_limit]
        if kept:
            excluded = {p: (served[p] / float(ref_q["predicted_loss"]) - 1) * 100 for p in precs if p not in kept}
            precs = kept
    if references is None and len(feas):
        hw = sorted(feas["hardware"].astype(str).unique().tolist())
        references = reference_fronts([reference], hw, isl, osl, precs)
    ref_active = float(ref_q["training_flop"]) / (TRAINING_FLOP_PER_PARAM_TOKEN * float(ref_q["training_tokens"]))
    rows = []
    for t in targets:
        row: dict[str, Any] = {"target_tokens_per_s_per_user": float(t), "design": None}
        cand = feas[feas[X] >= t]
        if not len(cand):
            rows.append(row)
            continue
        best = cand.loc[cand[Y].idxmax()]
        row.update(design=_design_text(best), hardware=str(best["hardware"]), throughput=float(best[Y]),
                   interactivity=float(best[X]), experts=int(best.get("experts", 0) or 0))
        if "trial" in best:
            row["trial"] = int(best["trial"])
        if has_loss:
            for k in ("predicted_loss", "predicted_loss_low", "predicted_loss_high"):
                row[k] = float(best[k])
            ref_loss = float(ref_q["predicted_loss"])
            row["loss_delta_pct"] = (row["predicted_loss"] / ref_loss - 1) * 100
            row["loss_delta_band_pct"] = [(row["predicted_loss_low"] / ref_loss - 1) * 100,
                                          (row["predicted_loss_high"] / ref_loss - 1) * 100]
            row["quality_extrapolated"] = bool(best.get("quality_extrapolated", False))
            if "loss_base" in best and "format_factor" in best:  # the same delta with the shape terms off
                ref_plain = float(ref_q["loss_base"]) * float(ref_q["format_factor"])
                row["loss_delta_without_shape_terms_pct"] = (float(best["loss_base"]) * float(best["format_factor"])
                                                             / ref_plain - 1) * 100
        if "training_flop" in best:
            row["training_flop"] = float(best["training_flop"])
            row["training_flop_ratio"] = float(best["training_flop"]) / float(ref_q["training_flop"])
        ref_rows = references[(references["hardware"].astype(str) == row["hardware"]) & (references[X] >= t)] \
            if references is not None and len(references) else pd.DataFrame()
        row["reference_throughput"] = None
        if len(ref_rows):
            rb = ref_rows.loc[ref_rows[Y].idxmax()]
            row.update(reference_throughput=float(rb[Y]), reference_interactivity=float(rb[X]),
                       reference_deployment=(f"{rb['precision']} tp={int(rb['tp'])} pp={int(rb['pp'])} "
                                             f"ep={int(rb['ep'])} dp={int(rb['dp'])} batch={int(rb['batch'])}"),
                       throughput_ratio=float(best[Y]) / float(rb[Y]))
            if has_loss:
                served = preset_loss(reference, None, *_formats(str(rb["precision"])))
                row["reference_served_loss_delta_pct"] = (float(served["predicted_loss"])
                                                          / float(ref_q["predicted_loss"]) - 1) * 100
            cd, cr = _costs(best), _costs(rb)
            saving = {c: cr[c] - cd[c] for c in COMPONENTS if np.isfinite(cr[c]) and np.isfinite(cd[c])}
            if saving:
                top = max(saving, key=lambda c: saving[c])
                row.update(component=top, component_saving_gpu_s_per_token=saving[top],
                           component_saving_share=saving[top] / sum(cr[c] for c in saving),
                           component_costs_gpu_s_per_token={"design": cd, "reference": cr})
        if "experts" in df.columns and (df["experts"] > 0).any() and (df["experts"] == 0).any():
            fam = {}
            for name, part in (("dense", cand[cand["experts"] == 0]), ("moe", cand[cand["experts"] > 0])):
                if not len(part):  # say how hard the search looked
                    fam[name] = {"design": None, "points": int(((df["experts"] > 0) == (name == "moe")).sum())}
                    continue
                b = part.loc[part[Y].idxmax()]
                f: dict[str, Any] = {"design": _design_text(b), "throughput": float(b[Y])}
                if row.get("reference_throughput"):
                    f["throughput_ratio"] = float(b[Y]) / row["reference_throughput"]
                if has_loss:
                    f["loss_delta_pct"] = (float(b["predicted_loss"]) / float(ref_q["predicted_loss"]) - 1) * 100
                fam[name] = f
            row["by_family"] = fam
        rows.append(row)
    return {
        "reference": reference,
        "reference_loss": float(ref_q["predicted_loss"]),
        "reference_training_tokens": float(ref_q["training_tokens"]),
        "reference_active_params": ref_active,
        "targets": [float(t) for t in targets],
        "reference_precisions": precs,
        "reference_precisions_excluded": excluded,  # format -> the reference's served loss delta, %
        "rows": rows,
    }


def _formats(precision: str) -> tuple[str, str]:
    from explorer.precision import parse_precision

    p = parse_precision(precision)
    return p.weights, p.activations


def format_decision(summary: Mapping[str, Any]) -> list[str]:
    """One line per target (printed by ``explorer sweep`` and shown in the report)."""
    ref = summary["reference"]
    out = [f"decision     best design at each interactivity target vs {ref} on the same hardware"
           + (f" (predicted loss {summary['reference_loss']:.4f} nats at "
              f"{summary['reference_training_tokens']:.3g} tokens)" if summary.get("reference_loss") else "")]
    excl = summary.get("reference_precisions_excluded") or {}
    if excl:
        out.append(f"  ({ref} deployed in {', '.join(summary['reference_precisions'])} only: "
                   + ", ".join(f"{p} would cost it {d:+.2f} % loss" for p, d in excl.items())
                   + ", beyond the quality limit)")
    for r in summary["rows"]:
        t = r["target_tokens_per_s_per_user"]
        if r.get("design") is None:
            out.append(f"  >= {t:g} tok/s/user: no feasible design reaches it")
            continue
        parts = [f"  >= {t:g} tok/s/user: {r['throughput']:,.0f} tok/s/GPU on {r['hardware']}"]
        if r.get("reference_throughput"):
            parts.append(f"{r['throughput_ratio']:.2f}x {ref} ({r['reference_throughput']:,.0f}, "
                         f"{r['reference_deployment']})")
        else:
            parts.append(f"{ref} does not reach it on {r['hardware']}")
        if "loss_delta_pct" in r:
            lo, hi = r["loss_delta_band_pct"]
            band = f" (band {lo:+.2f} .. {hi:+.2f} %)" if abs(hi - lo) > 1e-9 else ""
            plain = (f", {r['loss_delta_without_shape_terms_pct']:+.2f} % without the shape terms"
                     if "loss_delta_without_shape_terms_pct" in r else "")
            parts.append(f"loss {r['loss_delta_pct']:+.2f} %{band}{plain}"
                         + (" [extrapolated]" if r.get("quality_extrapolated") else ""))
        if "component" in r:
            parts.append(f"most saved: {r['component']} ({r['component_saving_gpu_s_per_token'] * 1e6:,.1f} "
                         f"µs·GPU/token, {r['component_saving_share']:.0%} of the reference's cost)")
        if "training_flop_ratio" in r:
            parts.append(f"training compute {r['training_flop_ratio']:.2f}x")
        out.append("; ".join(parts))
        out.append(f"      {r['design']}")
        for name, f in (r.get("by_family") or {}).items():
            if f.get("design") is None:
                out.append(f"      best {name}: none feasible reaches it ({f['points']:,} {name} points scored)")
                continue
            ratio = f" ({f['throughput_ratio']:.2f}x)" if "throughput_ratio" in f else ""
            loss = f", loss {f['loss_delta_pct']:+.2f} %" if "loss_delta_pct" in f else ""
            out.append(f"      best {name}: {f['throughput']:,.0f} tok/s/GPU{ratio}{loss}: {f['design']}")
    return out


def space_decision(space: Any, df: pd.DataFrame) -> dict[str, Any] | None:
    """The decision summary of a sweep of ``space`` (an :class:`explorer.space.SearchSpace`), or None
    when the space names no reference (``decision.reference`` or ``constraints.quality.reference``)
    or no design is feasible.  ISL/OSL: the feasible rows' most common values."""
    from explorer.constraints import DEFAULT_TARGETS_TOKENS_PER_S_PER_USER

    ref = space.decision.reference if space.decision is not None else (
        space.quality.reference if space.quality is not None else None)
    if ref is None or not len(df) or not df["feasible"].any():
        return None
    targets = space.decision.targets if space.decision is not None else DEFAULT_TARGETS_TOKENS_PER_S_PER_USER
    feas = df[df["feasible"].astype(bool)]
    isl, osl = int(feas["isl"].mode().iloc[0]), int(feas["osl"].mode().iloc[0])
    limit = space.quality.limit if space.quality is not None and space.quality.reference == ref else None
    out = decision_summary(df, ref, targets, isl, osl, loss_limit=limit)
    out.update(isl=isl, osl=osl)
    return out
