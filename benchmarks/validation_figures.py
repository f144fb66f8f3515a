"""Predicted-vs-measured figures and the curve-by-curve table of docs/validation.md.

    python benchmarks/validation_figures.py [--cv /path/cv.json]   (needs matplotlib: pip install matplotlib)

Draws, for each model family of validation/fronts.yaml (one PNG per model), every measured curve
(tokens/s/user on x, tokens/s/GPU on y; squares, dashed) beside the simulator's prediction of the
same deployment at the same concurrencies (circles, solid), and prints the markdown table of each
curve's median signed error on both axes (in-sample; held-out too when --cv gives the output of
benchmarks/cross_validate.py --json).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from explorer.validate import load_cases, predict

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ap = argparse.ArgumentParser()
    ap.add_argument("--cv")
    args = ap.parse_args()
    cv = json.loads(Path(args.cv).read_text())["curves"] if args.cv else {}
    cases = [c for c in load_cases(ROOT / "validation" / "fronts.yaml") if c.supported]
    pred = predict(cases)
    rows: dict[str, dict] = {}
    for c, p in zip(cases, pred, strict=True):
        rid = c.id.rsplit(":", 1)[0]
        r = rows.setdefault(rid, {"case": c})
        r[c.metric] = (c.measured, float(p))
    by_model: dict[str, dict[str, list]] = {}
    for r in rows.values():
        c = r["case"]
        if "tok_s_gpu" in r and "tok_s_user" in r:
            by_model.setdefault(c.values["model"], {}).setdefault(c.curve, []).append(r)
    lines = ["| curve | runtime | tok/s/GPU median error | tok/s/user median error | held out: GPU / user |",
             "|---|---|---|---|---|"]
    for model, curves in sorted(by_model.items()):
        fig, ax = plt.subplots(figsize=(8, 6))
        for i, (cid, rs) in enumerate(sorted(curves.items())):
            rs = sorted(rs, key=lambda r: r["case"].values["batch"])
            col = plt.cm.tab20(i % 20)
            mx = [r["tok_s_user"][0] for r in rs]
            my = [r["tok_s_gpu"][0] for r in rs]
            px = [r["tok_s_user"][1] for r in rs]
            py = [r["tok_s_gpu"][1] for r in rs]
            ax.plot(mx, my, "s--", color=col, ms=4, lw=1, label=cid.replace("aicix_", "").replace("ix_", "")[:48])
            ax.plot(px, py, "o-", color=col, ms=3, lw=1, mfc="none")
            eg = np.median([r["tok_s_gpu"][1] / r["tok_s_gpu"][0] - 1 for r in rs])
            eu = np.median([r["tok_s_user"][1] / r["tok_s_user"][0] - 1 for r in rs])
            held = cv.get(cid, {})
            ho = (f"{held['tok_s_gpu']:+.1%} / {held['tok_s_user']:+.1%}" if held else "")
            lines.append(f"| {cid} | {rs[0]['case'].runtime} | {eg:+.1%} | {eu:+.1%} | {ho} |")
        ax.set_xlabel("tokens/s/user")
        ax.set_ylabel("tokens/s/GPU")
        ax.set_title(f"{model}: measured (squares, dashed) vs predicted (circles, solid)")
        ax.legend(fontsize=6, ncol=2)
        ax.grid(alpha=0.3)
        out = ROOT / "docs" / f"validation-{model}.png"
        fig.tight_layout()
        fig.savefig(out, dpi=110)
        plt.close(fig)
        print(f"wrote {out}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
