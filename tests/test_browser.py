"""Open reports and comparison pages in real headless Chromium (DESIGN.md section 7).

The page's own script writes ``<pre id="explorer-status">`` once plotly has drawn every figure
(see :mod:`explorer.report.page`); we read it with ``--dump-dom`` and check that the frontier shows
exactly the table's front points, that every dropdown and button works (``#explorer-selftest``),
and that nothing reached ``window.onerror``/``console.error``; Chromium's own console log is checked
too.  Without Chromium the tests skip locally and fail in CI (``CI`` set): install it with
``.ci/chromium.sh``.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from explorer.report import build_compare_html, write_report, write_text_atomic
from explorer.report.demo import sweep_like_table


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None


CHROMIUM = _chromium()


@pytest.fixture(scope="module")
def chromium() -> str:
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("Chromium is required in CI for the browser tests: run .ci/chromium.sh")
        pytest.skip("Chromium not installed (run .ci/chromium.sh)")
    return CHROMIUM


def open_page(chromium: str, path: Path, selftest: bool = True) -> tuple[dict, list[str]]:
    """(status written by the page, console lines Chromium logged)."""
    url = path.resolve().as_uri() + ("#explorer-selftest" if selftest else "")
    with tempfile.TemporaryDirectory() as profile:
        cmd = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
               f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=20000",
               "--dump-dom", url]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    m = re.search(r'<pre id="explorer-status"[^>]*>(.*?)</pre>', proc.stdout, flags=re.DOTALL)
    assert m, f"no status element in the DOM (chromium rc={proc.returncode}): {proc.stderr[-2000:]}"
    text = html.unescape(m.group(1))
    assert text != "pending", "the page's script never finished"
    console = [ln for ln in proc.stderr.splitlines() if "CONSOLE" in ln]
    return json.loads(text), console


@pytest.fixture(scope="module")
def sweep():
    return sweep_like_table(600, seed=5)


def test_report_draws_front_without_errors(chromium, sweep, tmp_path):
    meta = {"study": 'a <script>alert("x")</script> study', "sampler": "tpe", "seed": 1,
            "space_text": "</script><script>window.__pwned = 1</script>", "workload": {"isl": 1024, "osl": 1024}}
    path = write_report(tmp_path / "report.html", sweep, meta)
    status, console = open_page(chromium, path)
    n_front = int(sweep["on_front"].sum())
    assert n_front > 3
    assert status["errors"] == []
    assert console == []
    assert status["plots"] == 4  # frontier, parameters along the front, breakdown, hypervolume
    assert status["front_points"] == n_front == status["expected_front_points"]
    st = status["selftest"]
    assert st["buttons"] >= 4  # colour options and the breakdown's share/seconds buttons
    assert st["infeasible_points"] == int((~sweep["feasible"]).sum())
    assert st["front_points_after"] == n_front
    assert st["band_bars"] == n_front  # every front point draws its held-out error band once shown


def test_rerendered_report_and_bare_table(chromium, sweep, tmp_path):
    bare = sweep[["tokens_per_s_per_user", "tokens_per_s_per_gpu"]].copy()
    path = write_report(tmp_path / "bare.html", bare, {})
    status, console = open_page(chromium, path)
    assert status["errors"] == [] and console == []
    feasible_front = int(sweep["on_front"].sum())
    assert status["front_points"] >= feasible_front  # infeasible points may join a bare table's front


def test_compare_page_draws_every_front(chromium, sweep, tmp_path):
    other = sweep_like_table(600, seed=6, precisions=("bf16",))
    other = other.assign(tokens_per_s_per_gpu=other["tokens_per_s_per_gpu"] * np.float64(0.7))
    inputs = [("fp8+bf16", sweep, {}), ("bf16 only", other, {"workload": {"isl": 1024, "osl": 2048}})]
    path = write_text_atomic(tmp_path / "compare.html", build_compare_html(inputs))
    status, console = open_page(chromium, path)
    assert status["errors"] == [] and console == []
    assert status["plots"] == 2
    want = int(sweep["on_front"].sum()) + int(other["on_front"].sum())
    assert status["front_points"] == want == status["expected_front_points"]


def test_status_catches_errors(chromium, tmp_path):
    """The status element really reports failures (a page whose figure data is broken)."""
    path = write_report(tmp_path / "r.html", sweep_like_table(50, seed=1), {}, references=[])
    text = path.read_text()
    broken = text.replace('"$col":"tokens_per_s_per_user"', '"$col":"no_such_column"', 1)
    assert broken != text
    path.write_text(broken)
    status, _ = open_page(chromium, path, selftest=False)
    assert any("no_such_column" in e for e in status["errors"])


def test_report_draws_measured_curves(chromium, sweep, tmp_path):
    """--measured: the measured curves (and their predictions) are drawn, without errors."""
    fronts = Path(__file__).resolve().parent.parent / "validation" / "fronts.yaml"
    path = write_report(tmp_path / "measured.html", sweep, {"workload": {"isl": 1024, "osl": 1024}},
                        references=[], measured=fronts)
    status, console = open_page(chromium, path)
    assert status["errors"] == [] and console == []
    assert status["expected_measured_points"] > 0
    assert status["measured_points"] == status["expected_measured_points"]
    assert status["front_points"] == status["expected_front_points"]
