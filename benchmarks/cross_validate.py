"""Held-out accuracy: refit every hardware kind without each whole measured curve (and without each
single measurement point) and predict what was left out (explorer.calibrate.cross_validate).

    python benchmarks/cross_validate.py [--json OUT.json]

Prints median and p90 |error| of the held-out predictions by group (curve throughput, curve
interactivity, curve TTFT, points) and the median error of every curve.  Two processes (one per
core); a few minutes on the 2-core machine.
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from explorer.calibrate import cross_validate, load_all_cases


def _one(kind: str) -> dict[str, float]:
    return cross_validate(kind, cases=load_all_cases())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    cases = load_all_cases()
    by_id = {c.id: c for c in cases}
    kinds = sorted({c.hardware for c in cases if c.supported and c.kind in ("inference", "curve")})
    errs: dict[str, float] = {}
    with ProcessPoolExecutor(2) as ex:
        for part in ex.map(_one, kinds):
            errs.update(part)
    groups: dict[str, list[float]] = {}
    curves: dict[str, dict[str, list[float]]] = {}
    for cid, e in errs.items():
        c = by_id[cid]
        g = f"curve {c.metric}" if c.kind == "curve" else (c.regime if c.regime.startswith("mlperf") else "point")
        groups.setdefault(g, []).append(e)
        if c.kind == "curve":
            groups.setdefault(f"curve {c.metric} {c.family}", []).append(e)
            curves.setdefault(c.curve, {}).setdefault(c.metric, []).append(e)
    for g, v in sorted(groups.items()):
        a = np.abs(v)
        print(f"{g:32s} n={len(a):4d} median |err| {np.median(a):6.1%}  p90 {np.percentile(a, 90):6.1%}")
    for cv, m in sorted(curves.items()):
        print(f"  {cv:64s} " + "  ".join(f"{k} {np.median(v):+.1%}" for k, v in sorted(m.items())))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"errors": errs, "curves": {k: {a: float(np.median(b)) for a, b in v.items()}
                                                  for k, v in curves.items()}}, f, indent=1)


if __name__ == "__main__":
    main()
