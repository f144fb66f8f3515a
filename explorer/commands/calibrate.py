"""``explorer calibrate``: fit a hardware file's efficiency factors to the measurements on it."""

from __future__ import annotations

import json


def register(sub) -> None:
    p = sub.add_parser("calibrate", help="fit efficiency factors and overheads of a hardware file",
                       description="Bounded least squares on log error over every supported measurement on "
                                   "the hardware; --write records the fit in the hardware YAML.")
    p.add_argument("--hardware", required=True, help="hardware name, or 'all' for every kind with cases")
    p.add_argument("--measurements", default=None, help="YAML file (default: validation/measurements.yaml)")
    p.add_argument("--write", action="store_true", help="record the fitted values in the hardware YAML")
    p.add_argument("--json", action="store_true", help="print the fit as JSON")
    p.add_argument("--transfer-from", metavar="KIND",
                   help="for a kind without measurements: copy KIND's calibrated MoE factor and overheads "
                        "(with --all-factors also compute/memory/network) into its file")
    p.add_argument("--all-factors", action="store_true", help="with --transfer-from: copy every factor")
    p.add_argument("--cross-validate", action="store_true",
                   help="also print the leave-one-out error of each case (fit on the others, predict it)")
    p.set_defaults(func=run)


def run(args) -> int:
    from explorer.calibrate import calibrate, format_fit, write_fit
    from explorer.validate import DEFAULT_MEASUREMENTS, load_cases

    path = args.measurements or DEFAULT_MEASUREMENTS
    if args.transfer_from:
        from explorer.calibrate import transfer

        print(f"wrote {transfer(args.hardware, args.transfer_from, args.all_factors)}")
        return 0
    cases = load_cases(path)
    if args.hardware == "all":
        names = sorted({c.hardware for c in cases if c.supported and c.hardware})
    else:
        names = [args.hardware]
    out = []
    for name in names:
        fit = calibrate(name, path, cases=load_cases(path))
        if args.write:
            written = write_fit(fit, path)
            if not args.json:
                print(f"wrote {written}")
        summary = fit.summary()
        if args.cross_validate:
            from explorer.calibrate import cross_validate

            loo = cross_validate(name, path)
            summary["leave_one_out_error"] = loo
            if loo and not args.json:
                import numpy as np

                errs = np.abs(np.array(list(loo.values())))
                print(f"leave-one-out on {name}: median |error| {np.median(errs):.1%}, p90 {np.percentile(errs, 90):.1%}")
        out.append(summary)
        if not args.json:
            print(format_fit(fit))
    if args.json:
        print(json.dumps(out if len(out) > 1 else out[0], indent=1))
    return 0
