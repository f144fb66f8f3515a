"""Held-out accuracy: refit every hardware kind without each whole measured curve (and without each
single measurement point) and predict what was left out (explorer.calibrate.cross_validate).

    python benchmarks/cross_validate.py [--json OUT.json] [--hold-out curve|config] [--hardware KIND[,KIND]]

Prints median and p90 |error| of the held-out predictions by group (curve throughput, curve
interactivity, curve TTFT, points) and the median error of every curve.  Two processes (one per
core), each taking a few hold-out groups at a time; about 85 min on the 2-core machine
(2026-12-05 fit with the releases' per-step cost; ``--hold-out config``, curves only: about 10 min; ``--hardware b200,gb200``: those kinds only,
about 12 min, for an experiment that touches a few kinds).
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from explorer.calibrate import HOLDOUT_UNITS, cross_validate, holdout_groups, load_all_cases

_CASES: list = []  # each worker process loads the cases once


def _one(task: tuple[str, str, list[str]]) -> dict[str, float]:
    kind, by, groups = task
    if not _CASES:
        _CASES.extend(load_all_cases())
    return cross_validate(kind, cases=_CASES, by=by, only=groups)


def _tasks(cases: list, kinds: list[str], by: str, per_task: int = 4) -> list[tuple[str, str, list[str]]]:
    """(kind, unit, hold-out groups) tasks of a few groups each, largest kinds first, so that the
    kind with most curves (H200: half the refits) no longer runs alone on one core at the end."""
    out = []
    for k in kinds:
        names = list(holdout_groups([c for c in cases if c.supported and c.hardware == k], by))
        out += [(k, by, names[i:i + per_task]) for i in range(0, len(names), per_task)]
    return sorted(out, key=lambda t: -sum(1 for c in cases if c.hardware == t[0]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--hold-out", choices=HOLDOUT_UNITS, default="curve",
                    help="curve: leave one measured curve out; config: every curve of one model and runtime on "
                         "the kind (curves only)")
    ap.add_argument("--hardware", help="comma-separated kinds to hold out on (default: every kind with served cases)")
    args = ap.parse_args()
    cases = load_all_cases()
    by_id = {c.id: c for c in cases}
    kinds = sorted({c.hardware for c in cases if c.supported and c.kind in ("inference", "curve")})
    if args.hardware:
        wanted = set(args.hardware.split(","))
        kinds = [k for k in kinds if k in wanted]
    errs: dict[str, float] = {}
    with ProcessPoolExecutor(2) as ex:
        for part in ex.map(_one, _tasks(cases, kinds, args.hold_out)):
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
