"""``explorer report``: (re)render a sweep's HTML report from its results CSV or an existing report."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("report", help="write a sweep's HTML report from a results CSV or re-render a report",
                       description="Write the self-contained HTML report of a sweep from its results table "
                                   "(CSV) or re-render an existing report (HTML; its data and provenance are "
                                   "read back from the page).")
    p.add_argument("study", metavar="STUDY.csv|STUDY.html", help="results table or existing report")
    p.add_argument("-o", "--output", metavar="OUT.html",
                   help="output file (default: STUDY.html beside a CSV; an HTML input is re-rendered in place)")
    p.add_argument("--plotlyjs", choices=("inline", "cdn"), default="inline",
                   help="inline plotly.js (works offline, ~5 MB) or load it from the CDN (default inline)")
    p.add_argument("--color-by", metavar="PARAM", help="initial colouring of the frontier (e.g. precision, tp, batch)")
    p.add_argument("--references", metavar="PRESETS",
                   help="comma-separated model presets drawn as reference fronts, or 'none' "
                        "(default: Llama-3.1-70B/8B and the preset closest in active parameters)")
    p.add_argument("--measured", metavar="FILE",
                   help="measured serving curves (the shape of validation/fronts.yaml) of the study's model, "
                        "hardware and workload, drawn on the frontier with the simulator's prediction of each")
    p.set_defaults(func=run)


def run(args) -> int:
    from explorer.errors import SpecError
    from explorer.outputs import check_output_file
    from explorer.report import load_results, write_report

    src = Path(args.study)
    refs = None
    if args.references is not None:
        from explorer.model import get_preset

        refs = [] if args.references.strip().lower() == "none" else [
            r.strip() for r in args.references.split(",") if r.strip()]
        for name in refs:
            get_preset(name, "--references")  # an unknown preset is an error, not a silent omission
    if args.output:
        out = Path(args.output)
    elif src.suffix.lower() in (".html", ".htm"):
        out = src
    else:
        try:
            out = src.with_suffix(".html")
        except ValueError:  # '', '.', '..': no file name to put the report beside
            raise SpecError(str(src) or "report", None, "expected a results table (.csv) or a report (.html)") \
                from None
    # the output is checked before any work (an HTML input may be re-rendered in place)
    check_output_file(out, "--output", suffixes=(".html", ".htm"))
    measured = None
    if getattr(args, "measured", None):
        from explorer.report.measured import load_measured

        measured = load_measured(args.measured)  # a bad file is an error before anything is written
    df, meta = load_results(src)
    path = write_report(out, df, meta, plotlyjs=args.plotlyjs, color_by=args.color_by, references=refs,
                        measured=measured)
    size = path.stat().st_size / 1e6
    print(f"report: {path} ({size:.1f} MB, {len(df):,} rows)")
    return 0
