"""Write explorer/data/error_bands.yaml (the held-out error bands of explorer/uncertainty.py) from a
cross-validation by configuration and the shipped curves.

    python benchmarks/cross_validate.py --hold-out config --json docs/cross_validation_config.json
    python benchmarks/error_bands.py --cv docs/cross_validation_config.json        # writes the YAML
    python benchmarks/error_bands.py --cv docs/cross_validation_config.json --check  # exit 1 if stale

Each held-out curve case (``<row>:tok_s_gpu``, ``:tok_s_user``, ``:ttft``) joins the groups
``runtime/family``, ``*/family`` and ``*/*``; a group keeps its case count and the 10th, 50th and
90th percentiles of the signed errors (numpy's default linear interpolation), rounded to 4 digits.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from explorer.calibrate import CURVE_FILES  # noqa: E402
from explorer.uncertainty import ANY, AXES, BANDS_FILE  # noqa: E402
from explorer.validate import load_cases  # noqa: E402

#: groups with fewer held-out cases fall back to their family (explorer/uncertainty.py): about eight
#: curves of six concurrencies; the gpt-oss vLLM group (25 cases, five curves of one model on two
#: kinds) is below it
MIN_CASES = 40


def bands_text(cv_path: Path, fronts: tuple[Path, ...] = CURVE_FILES) -> str:
    errors = json.loads(cv_path.read_text())["errors"]
    cases = {c.id: c for f in fronts if f.exists() for c in load_cases(f)}
    groups: dict[str, dict[str, list[float]]] = {}
    for cid, e in errors.items():
        c = cases.get(cid)
        if c is None or e is None or c.kind != "curve" or not c.supported:
            continue
        axis = cid.rsplit(":", 1)[1]
        if axis not in AXES:
            continue
        for name in (f"{c.runtime}/{c.family}", f"{ANY}/{c.family}", f"{ANY}/{ANY}"):
            groups.setdefault(name, {a: [] for a in AXES})[axis].append(float(e))
    lines = [
        "# Held-out error bands of the serving figures (explorer/uncertainty.py): signed errors",
        "# predicted/measured - 1 of measured curves left out by configuration, refit without them.",
        "# Written by benchmarks/error_bands.py; do not edit by hand.",
        f"source: \"benchmarks/cross_validate.py --hold-out config ({cv_path.name}) on validation/fronts.yaml and fronts_inferencex.yaml, "
        "grouped by benchmarks/error_bands.py\"",
        "quantiles: [0.1, 0.5, 0.9]",
        f"min_cases: {MIN_CASES}",
        "groups:",
    ]
    order = sorted(groups, key=lambda g: (g.startswith(ANY), g))
    for name in order:
        parts = []
        for axis in AXES:
            v = np.asarray(groups[name][axis])
            if not len(v):
                continue
            q = np.percentile(v, [10, 50, 90])
            parts.append(f"{axis}: {{cases: {len(v)}, e: [{q[0]:.4f}, {q[1]:.4f}, {q[2]:.4f}]}}")
        if len(parts) == len(AXES):
            lines.append(f"  \"{name}\": {{{', '.join(parts)}}}")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cv", required=True, help="output of benchmarks/cross_validate.py --hold-out config --json")
    ap.add_argument("--out", default=str(BANDS_FILE))
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing; exit 1 if different")
    args = ap.parse_args()
    text = bands_text(Path(args.cv))
    if args.check:
        same = Path(args.out).exists() and Path(args.out).read_text() == text
        print("error bands up to date" if same else f"{args.out} is stale: rerun without --check")
        sys.exit(0 if same else 1)
    Path(args.out).write_text(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
