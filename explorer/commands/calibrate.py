"""``explorer calibrate``: fit a hardware file's efficiency factors to the measurements on it."""

from __future__ import annotations

import json


def register(sub) -> None:
    p = sub.add_parser("calibrate", help="fit efficiency factors and overheads of a hardware file",
                       description="Bounded least squares on log error over every supported measurement on "
                                   "the hardware; --write records the fit in the hardware YAML.")
    p.add_argument("--hardware", required=True, help="hardware name, or 'all' for every kind with cases")
    p.add_argument("--measurements", action="append", default=None, metavar="FILE",
                   help="validation file (points, curves or kernels); repeat for several; default: "
                        "validation/measurements.yaml, fronts.yaml and kernels.yaml together")
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
    from explorer.calibrate import DEFAULT_FILES, calibrate, format_fit, load_all_cases, write_fit

    files = list(args.measurements) if args.measurements else list(DEFAULT_FILES)
    path = ", ".join(str(f) for f in files)
    from pathlib import Path

    from explorer.errors import SpecError
    from explorer.specio import check_name_text

    for f in args.measurements or ():  # a file named on the command line must exist (the defaults are optional)
        if not Path(f).is_file():
            raise SpecError(str(f), None, "file not found")

    check_name_text(args.hardware, "--hardware", None, "hardware")
    if args.transfer_from:
        check_name_text(args.transfer_from, "--transfer-from", None, "hardware")
    if args.transfer_from:
        from explorer.calibrate import transfer
        from explorer.hardware import load_hardware

        try:  # an unknown source kind is blamed on its own flag
            load_hardware(args.transfer_from)
        except SpecError as e:
            if e.where == "--hardware":
                raise SpecError("--transfer-from", e.key, e.message) from None
            raise
        print(f"wrote {transfer(args.hardware, args.transfer_from, args.all_factors)}")
        return 0
    cases = load_all_cases(files)
    if args.hardware == "all":
        from explorer.calibrate import MIN_CASES_ALL

        counts: dict[str, int] = {}
        for c in cases:
            if c.supported and c.hardware and c.kind not in ("system", "system_latency"):
                counts[c.hardware] = counts.get(c.hardware, 0) + 1
        # kinds with serving curves first: a kind without them starts its served-only factors from
        # its family's freshly written fits (explorer/calibrate.py family_serving_prior)
        curved = {c.hardware for c in cases if c.supported and c.kind == "curve"}
        names = sorted((h for h, k in counts.items() if k >= MIN_CASES_ALL), key=lambda h: (h not in curved, h))
        skipped = sorted(h for h, k in counts.items() if k < MIN_CASES_ALL)
        if skipped and not args.json:
            print(f"skipped (fewer than {MIN_CASES_ALL} cases; name a kind to fit it anyway): {', '.join(skipped)}")
        if not names:
            raise SpecError(str(path), None, "no supported case on any hardware kind: nothing to calibrate "
                                             "(explorer validate lists each case's reason)" if not counts else
                            f"no hardware kind has {MIN_CASES_ALL} supported cases (have: "
                            + ", ".join(f"{h} {k}" for h, k in sorted(counts.items()))
                            + "): name one with --hardware to fit it anyway")
    else:
        names = [args.hardware]
    out = []
    for name in names:
        fit = calibrate(name, files, cases=cases)
        if args.write:
            written = write_fit(fit, files)
            if not args.json:
                print(f"wrote {written}")
        summary = fit.summary()
        if args.cross_validate:
            from explorer.calibrate import cross_validate

            loo = cross_validate(name, files, cases=cases)
            summary["leave_one_out_error"] = loo
            if loo and not args.json:
                import numpy as np

                errs = np.abs(np.array(list(loo.values())))
                print(f"held out (whole curves, single points) on {name}: median |error| {np.median(errs):.1%}, "
                      f"p90 {np.percentile(errs, 90):.1%}")
        out.append(summary)
        if not args.json:
            print(format_fit(fit))
    if args.json:
        print(json.dumps(out if len(out) > 1 else out[0], indent=1))
    return 0
