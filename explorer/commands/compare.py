"""``explorer compare``: compare the fronts of two or more sweeps (reports or results CSVs)."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("compare", help="compare sweeps' fronts (reports or results CSVs)",
                       description="Overlay the fronts of two or more sweeps and measure them against each "
                                   "other: throughput ratio at equal interactivity, interactivity ratio at equal "
                                   "throughput, hypervolumes, who dominates where, which parameters differ.")
    p.add_argument("inputs", nargs="+", metavar="A.html|A.csv", help="reports or results tables (two or more)")
    p.add_argument("-o", "--output", metavar="OUT.html", help="write the comparison page here")
    p.add_argument("--json", action="store_true", help="print the comparison figures as one JSON object")
    p.add_argument("--plotlyjs", choices=("inline", "cdn"), default="inline",
                   help="inline plotly.js (works offline) or load it from the CDN (default inline)")
    p.set_defaults(func=run)


def run(args) -> int:
    import json

    from explorer.errors import SpecError
    from explorer.report import build_compare_html, compare_results, load_results, write_text_atomic

    if len(args.inputs) < 2:
        raise SpecError("compare", None, f"needs two or more inputs, got {len(args.inputs)}")
    if not args.output and not args.json:
        raise SpecError("compare", None, "give -o OUT.html for a comparison page, --json for figures, or both")
    if args.output:
        from explorer.outputs import check_output_file

        check_output_file(args.output, "--output", inputs=args.inputs, suffixes=(".html", ".htm"))
    inputs = []
    for path in args.inputs:
        df, meta = load_results(path)
        meta = dict(meta)
        meta.setdefault("source_file", str(path))
        meta["source_file"] = str(path)
        name = str(meta.get("study") or Path(path).stem)
        inputs.append((name, df, meta))
    result = compare_results(inputs)
    if args.output:
        text = build_compare_html(inputs, plotlyjs=args.plotlyjs, result=result)
        write_text_atomic(args.output, text)
    if args.json:
        print(json.dumps(result, indent=1, allow_nan=False))
    else:
        print(f"compare: {args.output}")
    return 0
