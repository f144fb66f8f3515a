"""Benchmark the sweep report against plotly's own HTML writer, measured in the same run.

Plain script: ``python benchmarks/bench_report.py [--n 10000] [--repeats 3] [--screenshot PNG]``.

* report: a ``--n``-row results table (random 70B-class dense shapes and deployments on H200,
  scored by the real simulator) -> :func:`explorer.report.write_report` with plotly.js inlined
  (targets: < 5 s and < 10 MB for 10,000 rows);
* baseline: ``plotly.graph_objects.Figure(Scatter(x, y)).write_html`` of the same points with
  plotly.js inlined: one plain chart with no hover data, no other panels.

Prints seconds and MB for both and their ratios; asserts nothing about speed.  With
``--screenshot`` it also renders the report in headless Chromium and saves a PNG of its top
(used for docs/report-screenshot.png).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from explorer.report import write_report  # noqa: E402
from explorer.report.demo import sweep_like_table  # noqa: E402

META = {
    "study": "dense-70b-h200 (synthetic)", "sampler": "random", "seed": 0,
    "space_file": "benchmarks/bench_report.py", "space_text": "synthetic sweep: see explorer/report/demo.py\n",
    "objectives": {"tokens_per_s_per_gpu": "maximize", "tokens_per_s_per_user": "maximize"},
    "constraints": {"capacity": {"total_B": [65, 75]}}, "workload": {"isl": 1024, "osl": 1024},
    "tool_version": "bench", "date": "benchmark run",
}


def best_of(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def screenshot(html: Path, png: Path, width: int = 1300, height: int = 1750) -> None:
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        raise SystemExit("chromium not found: run .ci/chromium.sh")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--disable-background-networking", "--disable-component-update", "--disable-sync",
                        "--no-first-run", f"--user-data-dir={profile}", "--virtual-time-budget=20000",
                        f"--window-size={width},{height}", f"--screenshot={png.resolve()}", html.resolve().as_uri()],
                       check=True, capture_output=True, timeout=180)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10_000, help="rows in the table (default 10000)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--screenshot", type=Path, help="also save a PNG of the report's top here")
    args = ap.parse_args()

    import plotly.graph_objects as go

    t0 = time.perf_counter()
    df = sweep_like_table(args.n, seed=args.seed)
    t_table = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.html"
        cdn = Path(tmp) / "report-cdn.html"
        base = Path(tmp) / "baseline.html"
        meta = dict(META, trials=len(df))
        t_report = best_of(lambda: write_report(out, df, meta), args.repeats)
        t_cdn = best_of(lambda: write_report(cdn, df, meta, plotlyjs="cdn"), args.repeats)

        def baseline() -> None:
            fig = go.Figure(go.Scatter(x=df["tokens_per_s_per_user"], y=df["tokens_per_s_per_gpu"], mode="markers"))
            fig.write_html(base, include_plotlyjs=True)

        t_base = best_of(baseline, args.repeats)
        mb, mb_cdn, mb_base = (p.stat().st_size / 1e6 for p in (out, cdn, base))
        front = int(df["on_front"].sum())
        print(f"table: {len(df):,} rows ({int(df['feasible'].sum()):,} feasible, front {front}), "
              f"simulated in {t_table:.2f} s")
        print(f"{'':32s} {'seconds':>8s} {'MB':>7s}")
        print(f"{'report, plotly.js inlined':32s} {t_report:8.3f} {mb:7.2f}   (targets < 5 s, < 10 MB)")
        print(f"{'report, plotly.js from CDN':32s} {t_cdn:8.3f} {mb_cdn:7.2f}")
        print(f"{'baseline: plotly write_html':32s} {t_base:8.3f} {mb_base:7.2f}   (one bare scatter)")
        print(f"ratio report/baseline: time {t_report / t_base:.2f}x, size {mb / mb_base:.2f}x; "
              f"data beyond plotly.js: report {mb_cdn:.2f} MB vs baseline {mb_base - (mb - mb_cdn):.2f} MB")
        if args.screenshot:
            screenshot(out, args.screenshot)
            print(f"screenshot: {args.screenshot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
