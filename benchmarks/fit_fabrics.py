"""Fit the cloud scale-out fabrics of explorer/data/fabrics.yaml on the collectives that cross them.

Plain script: ``python benchmarks/fit_fabrics.py [--kernels validation/kernels.yaml] [--write]``.

For each fabric: the kernel rows of ``--kernels`` whose group leaves the scale-up domain over it
(explorer/fabrics.py matches the row's text), the hardware kinds as their files stand, and
:func:`explorer.fabrics.fit_fabric` fitting the fabric's per-step latencies and LL bandwidth share.
Prints median / p90 |error| before (the file's values) and after the fit, and leave-one-row-out
(each row predicted by a fit on the fabric's other rows).  ``--write`` stores the fitted values and a
``fit:`` block (date, rows, errors) in explorer/data/fabrics.yaml.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from explorer.fabrics import FIT_PARAMS, fabrics, fit_fabric, fitted  # noqa: E402
from explorer.hardware import load_hardware  # noqa: E402
from explorer.kernel_cases import load_kernel_cases, predict_kernel_cases  # noqa: E402

DATA = ROOT / "explorer" / "data" / "fabrics.yaml"


def stats(e: np.ndarray) -> str:
    a = np.abs(e[np.isfinite(e)])
    return f"median {np.median(a):.1%}, p90 {np.percentile(a, 90):.1%} over {len(a)}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", default=str(ROOT / "validation" / "kernels.yaml"))
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    cases = load_kernel_cases(args.kernels)
    results: dict[str, dict] = {}
    for name, f in fabrics().items():
        mine = [c for c in cases if c.supported and c.values.get("fabric") == name]
        if len(mine) < len(FIT_PARAMS) + 2:
            print(f"{name}: {len(mine)} rows, too few to fit; kept as is")
            continue
        meas = np.array([c.measured for c in mine])
        before = predict_kernel_cases(mine, load_hardware) / meas - 1.0
        values, after = fit_fabric(f, mine, load_hardware)
        loo = np.empty(len(mine))
        for i in range(len(mine)):
            rest = mine[:i] + mine[i + 1:]
            v_i, _ = fit_fabric(f, rest, load_hardware)
            cand = fitted(f, v_i)
            loo[i] = predict_kernel_cases([mine[i]], load_hardware, fabric_of=lambda _n, c=cand: c)[0] / meas[i] - 1.0
        shown = ", ".join(f"{k} {v:.4g}" for k, v in values.items())
        print(f"{name}: {len(mine)} rows; before {stats(before)}; fitted ({shown}) {stats(after)}; "
              f"leave-one-row-out {stats(loo)}")
        results[name] = {"values": values, "rows": len(mine), "after": after, "loo": loo}
    if args.write and results:
        text = DATA.read_text(encoding="utf-8")
        header = "".join(line + "\n" for line in text.splitlines() if line.startswith("#"))
        data = yaml.safe_load(text)
        for entry in data["fabrics"]:
            r = results.get(entry["name"])
            if r is None:
                continue
            for k, v in r["values"].items():
                entry[k] = float(f"{v:.4g}")
            a, lo = np.abs(r["after"]), np.abs(r["loo"])
            entry["fit"] = {"date": dt.date.today().isoformat(), "by": "benchmarks/fit_fabrics.py",
                            "measurements": Path(args.kernels).name, "rows": r["rows"],
                            "median_abs_error": round(float(np.median(a)), 4),
                            "p90_abs_error": round(float(np.percentile(a, 90)), 4),
                            "loo_median_abs_error": round(float(np.median(lo)), 4),
                            "loo_p90_abs_error": round(float(np.percentile(lo, 90)), 4)}
        DATA.write_text(header + yaml.safe_dump(data, sort_keys=False, width=1000, allow_unicode=True),
                        encoding="utf-8")
        print(f"wrote {DATA.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
