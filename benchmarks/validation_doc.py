"""Regenerate docs/validation.md from the shipped validation files and the calibrated hardware and
runtime files.

    python benchmarks/cross_validate.py --json /tmp/cv.json     # held-out figures (a few minutes)
    python benchmarks/validation_doc.py --cv /tmp/cv.json       # writes docs/validation.md + PNGs

In-sample figures come from ``explorer.validate.validate`` on each file; held-out ones from the
cross-validation JSON (whole curves and single points left out, refit, predicted).  The figures are
drawn by benchmarks/validation_figures.py (matplotlib).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from explorer.calibrate import CURVE_FILES
from explorer.runtime import list_runtimes
from explorer.validate import load_cases, validate

ROOT = Path(__file__).resolve().parent.parent
VAL = ROOT / "validation"
sys.path.insert(0, str(ROOT / "benchmarks"))
from cross_validate import stale_note  # noqa: E402


def pct(x: float | None) -> str:
    return "" if x is None or not np.isfinite(x) else f"{x:.1%}"


def stats(errs) -> tuple[int, float, float, float]:
    a = np.asarray(list(errs), dtype=float)
    if not len(a):
        return 0, float("nan"), float("nan"), float("nan")
    return len(a), float(np.median(np.abs(a))), float(np.percentile(np.abs(a), 90)), float(np.median(a))


def in_sample_row(name: str, st: dict) -> str:
    """A summary table's in-sample row from ``validate``'s per-axis summary."""
    return (f"| {name}, in-sample | {st['n']} | {pct(st['median_abs_error'])} | {pct(st['p90_abs_error'])} | "
            f"{st['median_signed_error']:+.1%} |")


def held_row(label: str, errs) -> str | None:
    """A summary table's row of held-out signed errors, None where there are none."""
    n, med, p90, sgn = stats(errs)
    return f"| {label} | {n} | {pct(med)} | {pct(p90)} | {sgn:+.1%} |" if n else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cv", help="output of benchmarks/cross_validate.py --json")
    ap.add_argument("--cv-config", help="output of benchmarks/cross_validate.py --hold-out config --json")
    args = ap.parse_args()
    cv = json.loads(Path(args.cv).read_text()) if args.cv else {"errors": {}, "curves": {}}
    held = cv["errors"]
    held_cfg = json.loads(Path(args.cv_config).read_text())["errors"] if args.cv_config else {}
    fronts = validate(VAL / "fronts.yaml")
    points = validate(VAL / "measurements.yaml")
    kernels = validate(VAL / "kernels.yaml") if (VAL / "kernels.yaml").exists() else None
    fig = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "validation_figures.py")]
                         + (["--cv", args.cv] if args.cv else []), capture_output=True, text=True, check=True)
    table = "\n".join(line for line in fig.stdout.splitlines() if line.startswith("|"))
    pngs = sorted(p.name for p in (ROOT / "docs").glob("validation-*.png"))

    cases = {c.id: c for c in load_cases(VAL / "fronts.yaml")}
    more_file = CURVE_FILES[1]  # the curves beyond fronts.yaml (calibrate.CURVE_FILES)
    more = validate(more_file) if more_file.exists() else None
    more_cases = {c.id: c for c in load_cases(more_file)} if more is not None else {}
    # the cross-validation JSONs hold every curve file's cases: each section takes its own
    held_more = {k: v for k, v in held.items() if k in more_cases}
    held_cfg_more = {k: v for k, v in held_cfg.items() if k in more_cases}
    held = {k: v for k, v in held.items() if k not in more_cases}
    held_cfg = {k: v for k, v in held_cfg.items() if k not in more_cases}
    L: list[str] = []
    w = L.append
    # the file's curves and rows, and those kept unscored (a curve labelled speculative decoding)
    curve_ids = {c.curve for c in cases.values()}
    row_ids = {k.rsplit(":", 1)[0] for k in cases}
    scored = {c.curve for c in cases.values() if c.supported}
    unscored = sorted(curve_ids - scored)
    kept_out = (f"; {len(unscored)} curve{'s' if len(unscored) > 1 else ''} "
                f"({', '.join(f'`{u}`' for u in unscored)}) kept unscored, why in *Where it is wrong, and why*"
                if unscored else "")
    w("# Validation: how wrong the simulator is, case by case")
    w("")
    w(f"Regenerated {dt.date.today().isoformat()} by `python benchmarks/validation_doc.py` (after "
      "`explorer calibrate --hardware all --write` and `python benchmarks/cross_validate.py`).  Data, each "
      f"row with its source: `validation/fronts.yaml` ({len(curve_ids)} measured serving curves, {len(row_ids)} "
      f"rows{kept_out}: InferenceX / "
      "InferenceMAX runs of DeepSeek-R1, Llama-3.3-70B, gpt-oss-120b, Qwen3-235B on H100, H200, B200, MI300X, "
      "MI325X under SGLang, TensorRT-LLM and vLLM), `validation/measurements.yaml` (86 published points) and "
      "`validation/kernels.yaml` (663 kernel microbenchmarks).  One calibration per hardware kind fits them "
      "all at once (docs/simulator.md, explorer/calibrate.py).")
    w("")
    stale = [n for n in (stale_note(Path(args.cv), "curve") if args.cv else None,
                         stale_note(Path(args.cv_config), "config") if args.cv_config else None) if n]
    if stale:  # held-out figures from another fit than the in-sample ones: say so where they are read
        w("**Held-out figures from an earlier fit.** " + "  ".join(stale))
        w("")
    w("## Serving curves (fronts.yaml)")
    w("")
    w("Each row is a closed-loop run at one client concurrency; the simulator is asked for the same model, "
      "GPU, runtime (`framework`), tp/ep, precision and mean lengths (0.9 L for InferenceX's uniform "
      "[0.8 L, L]) at batch = concurrency.  A measured InferenceX throughput is a finite run's (10 C requests): "
      "it is scored against the steady state less the run's drain (explorer/closed_loop.py "
      "`finite_run_throughput_factor`, 0.95-0.98); a derived one (Little's law on the measured means) against "
      "the steady state as it is.  **Held out** = the curve's kind refitted without any row of that curve, "
      "then the curve predicted: the figure to expect on curves we do not have.  **Held out by "
      "configuration** = every curve of the same model and runtime on the kind left out together (its other "
      "splits, lengths and dates too; `benchmarks/cross_validate.py --hold-out config`): the figure to "
      "expect for a model and runtime never measured on that GPU.")
    w("")
    w("| | rows | median \\|error\\| | p90 \\|error\\| | median signed |")
    w("|---|---:|---:|---:|---:|")
    s = fronts["summary"]["curves"]
    for axis, name in (("tok_s_gpu", "tokens/s/GPU"), ("tok_s_user", "tokens/s/user"), ("ttft", "TTFT (median where the row gives one, else mean)")):
        w(in_sample_row(name, s[axis]["all"]))
        rows = [held_row(f"{name}, **held out (leave one curve out)**",
                         (v for k, v in held.items() if k.endswith(":" + axis)))]
        rows += [held_row(f"&nbsp;&nbsp;{fam}, held out", (v for k, v in held.items() if k.endswith(":" + axis)
                                                           and k in cases and cases[k].family == fam))
                 for fam in ("dense", "moe")]
        rows.append(held_row(f"{name}, held out by configuration",
                             (v for k, v in held_cfg.items() if k.endswith(":" + axis))))
        for r in rows:
            if r:
                w(r)
    w("")
    w("By runtime (in-sample, tokens/s/GPU): " + "; ".join(
        f"{k} {pct(v['median_abs_error'])} median, {pct(v['p90_abs_error'])} p90 ({v['n']} rows)"
        for k, v in s["tok_s_gpu"]["by_runtime"].items()) + ".")
    w("")
    from explorer.uncertainty import AXES, load_bands

    bands = load_bands()
    w("Held-out error bands (explorer/uncertainty.py, `explorer/data/error_bands.yaml`, written by "
      "benchmarks/error_bands.py from the by-configuration cross-validation): the 10th / 50th / 90th "
      "percentile of predicted/measured - 1 per serving runtime and model family; `explorer evaluate` "
      "and the reports turn a prediction P into the band [P/(1+p90), P/(1+p10)].  Groups under "
      f"{bands['min_cases']} held-out cases fall back to their family, then to all curves.")
    w("")
    w("| group | cases | " + " | ".join(f"{a} p10 / p50 / p90" for a in AXES) + " |")
    w("|---|---:|" + "---|" * len(AXES))
    for name, g in bands["groups"].items():
        w(f"| {name} | {g['tok_s_gpu']['cases']} | "
          + " | ".join(" / ".join(f"{x:+.1%}" for x in g[a]["e"]) for a in AXES) + " |")
    w("")
    from explorer.front_agreement import curve_points
    from explorer.front_agreement import summarize as fronts_agreement

    def held_pred(errs: dict) -> dict:
        return {r["id"]: r["measured"] * (1.0 + errs[r["id"]]) for r in fronts["cases"]
                if r["id"] in errs and r.get("measured") is not None}

    fa_rows = [("in sample", fronts["summary"]["fronts"])]
    for label, errs in (("each curve held out", held), ("held out by configuration", held_cfg)):
        if errs:
            fa_rows.append((label, fronts_agreement(curve_points(fronts["cases"], held_pred(errs)))))
    fa0 = fa_rows[0][1]
    w(f"Front-level agreement (explorer/front_agreement.py): the {fa0['points']} measured points fall on "
      f"{fa0['groups']} charts (one model, GPU and ISL/OSL: every runtime, precision and split measured there).  "
      f"Of the pairs where one measured point dominates the other (both axes at least as high, one higher by "
      f"more than {fa0['tolerance']:.0%}), the share the predictions agree on and flip; of the measured front's "
      "points, the share on the predicted front (recall), and the converse (precision):")
    w("")
    w("| predictions | pairs | agree | flip | tie | front recall | front precision | ratio error, tok/s/user "
      "(median / p90) | ratio error, tok/s/GPU |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, fa in fa_rows:
        re_ = fa["ratio_error"]
        w(f"| {label} | {fa['pairs']} | {pct(fa['agree_share'])} | {pct(fa['flip_share'])} | "
          f"{pct(fa['tie'] / fa['pairs'] if fa['pairs'] else None)} | {pct(fa['front_recall'])} | "
          f"{pct(fa['front_precision'])} | {pct(re_['tok_s_user']['median'])} / {pct(re_['tok_s_user']['p90'])} | "
          f"{pct(re_['tok_s_gpu']['median'])} / {pct(re_['tok_s_gpu']['p90'])} |")
    w("")
    w("A tie is a pair the measurements separate and the predictions do not (two software versions of one "
      "deployment, DeepSeek-R1 on MI300X under SGLang 0.5.9 and 0.5.12, are the same design to the model).  "
      "The ratio error is |(p_i/p_j)/(m_i/m_j) - 1| over every pair of points on a chart: how wrong the "
      "predicted comparison of two designs is (the point errors above are per design).")
    w("")
    w("Curve by curve (median signed error over the curve's rows; in-sample, then held out):")
    w("")
    w(table)
    w("")
    w("Predicted (circles, solid) against measured (squares, dashed), one picture per model family, drawn "
      "by benchmarks/validation_figures.py:")
    w("")
    for p in pngs:
        w(f"![{p}]({p})")
    w("")
    if more is not None:
        w("## More serving curves (fronts_inferencex.yaml)")
        w("")
        w(f"{len(more_cases) // 3} rows on {len({c.curve for c in more_cases.values()})} curves of the InferenceX "
          "dashboard's public fixture that fronts.yaml does not hold (validation/sources/README.md: DeepSeek-R1 "
          "FP8/FP4 under SGLang and TensorRT-LLM on B200, B300, H200, MI325X, MI355X, 2025-10 to 2026-06; most "
          "curves have one to three concurrencies).  Same conventions and scoring as fronts.yaml; fitted "
          "with it.  Cases the model finds out of memory (DeepSeek-R1 FP8 on 4xB200: it ran) are scored "
          "here but left out of the fit (explorer/calibrate.py `out_of_memory_cases`).")
        w("")
        w("| | rows | median \\|error\\| | p90 \\|error\\| | median signed |")
        w("|---|---:|---:|---:|---:|")
        sm = more["summary"]["curves"]
        for axis, name in (("tok_s_gpu", "tokens/s/GPU"), ("tok_s_user", "tokens/s/user"), ("ttft", "TTFT")):
            w(in_sample_row(name, sm[axis]["all"]))
            for label, errs in (("**held out (leave one curve out)**", held_more),
                                ("held out by configuration", held_cfg_more)):
                r = held_row(f"{name}, {label}", (v for k, v in errs.items() if k.endswith(":" + axis)))
                if r:
                    w(r)
        w("")
        by: dict[tuple, list] = {}
        for r in more["cases"]:
            if r["supported"] and r["metric"] in ("tok_s_gpu", "tok_s_user") and r.get("error") is not None:
                by.setdefault((r["hardware"], r["runtime"]), []).append(r["error"])
        w("By GPU and runtime (in-sample, both throughput axes): " + "; ".join(
            f"{h} {rt} {pct(float(np.median(np.abs(v))))} median ({len(v) // 2} rows)" for (h, rt), v in sorted(by.items()))
          + ".")
        w("")
    rel_rows = [(rt.name, hw, r) for rt in list_runtimes() for hw, table in sorted(rt.releases.items()) for r in table]
    if rel_rows:
        w("## Software releases")
        w("")
        w("The fitted served-kernel speed of each runtime release measured on a kind, per model family, relative "
          "to the newest release measured there (1; explorer/runtime.py `Release`, docs/simulator.md).  Read from "
          "each curve row's `framework_version`, else the month of its date.  A design that names no release is the "
          "newest; `--runtime NAME@RELEASE` asks for another.")
        w("")
        w("| runtime | GPU | family | release | first run | speed |")
        w("|---|---|---|---|---|---:|")
        for name, hw, r in rel_rows:
            w(f"| {name} | {hw} | {r.family} | {r.label} | {r.date} | {r.speed:.2f} |")
        w("")
    w("## Points (measurements.yaml)")
    w("")
    ps = points["summary"]
    n, med, p90, sgn = stats(v for k, v in held.items() if ":" not in k)
    w("| | cases | median \\|error\\| | p90 \\|error\\| |")
    w("|---|---:|---:|---:|")
    w(f"| served cases, in-sample | {ps['inference']['n']} | {pct(ps['inference']['median_abs_error'])} | "
      f"{pct(ps['inference']['p90_abs_error'])} |")
    if n:
        w(f"| served cases, **leave one out** | {n} | {pct(med)} | {pct(p90)} |")
    for k, st in ps["by_regime"].items():
        w(f"| {k}, in-sample | {st['n']} | {pct(st['median_abs_error'])} | {pct(st['p90_abs_error'])} |")
    w("")
    w(f"Supported {ps['supported']} of {ps['cases']}; unsupported with the reason `validate` prints: "
      + "; ".join(f"`{u['id']}` ({u['reason']})" for u in ps["unsupported"]) + ".")
    w("")
    worst = sorted(((k, v) for k, v in held.items() if ":" not in k), key=lambda kv: -abs(kv[1]))[:10]
    if worst:
        w("Worst held-out points: " + "; ".join(f"`{k}` {v:+.0%}" for k, v in worst) + ".")
        w("")
    if kernels is not None:
        ks = kernels["summary"]
        w("## Kernels (kernels.yaml)")
        w("")
        w("In-sample, by kind (held-out figures and the models: docs/kernels.md):")
        w("")
        w("| kind | rows | median \\|error\\| | p90 \\|error\\| |")
        w("|---|---:|---:|---:|")
        for k, st in ks.get("by_kind", {}).items():
            w(f"| {k} | {st['n']} | {pct(st['median_abs_error'])} | {pct(st['p90_abs_error'])} |")
        w("")
    above = fronts["summary"]["above_roofline"] + points["summary"]["above_roofline"]
    w(f"Predictions above the physical roofline (every efficiency 1, no host work): {len(above)}.")
    w("")
    w(Path(ROOT / "docs" / "validation_notes.md").read_text() if (ROOT / "docs" / "validation_notes.md").exists()
      else "")
    (ROOT / "docs" / "validation.md").write_text("\n".join(L) + "\n")
    print("wrote docs/validation.md")


if __name__ == "__main__":
    main()
