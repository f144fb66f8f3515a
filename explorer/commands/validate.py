"""``explorer validate``: predicted vs measured on every case of a measurements file."""

from __future__ import annotations

import json


def register(sub) -> None:
    p = sub.add_parser("validate", help="compare predictions with published measurements",
                       description="Predict every case of a measurements YAML and print the signed errors and "
                                   "summary figures. Unsupported cases are listed with the reason.")
    p.add_argument("--measurements", default=None, help="YAML file (default: validation/measurements.yaml)")
    p.add_argument("--json", action="store_true", help="print one JSON object {cases, summary}")
    p.set_defaults(func=run)


def run(args) -> int:
    from explorer.validate import DEFAULT_MEASUREMENTS, format_table, validate

    result = validate(args.measurements or DEFAULT_MEASUREMENTS)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(format_table(result))
    return 0
