"""A sweep's journal, as a real ``optuna-dashboard`` process serves it: named objectives and each
trial's feasibility, reason and headline figures (read from the dashboard's HTTP API, the JSON its
web page draws).  Skips only when optuna-dashboard is not installed (it is in the ``test`` extra).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pandas as pd
import pytest
from conftest import stop_process
from test_space import space_from

from explorer.cli import main
from explorer.dashboard_attrs import DASHBOARD_FIGURES
from explorer.space import load_space

pytest.importorskip("optuna_dashboard")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


@pytest.fixture
def dashboard(tmp_path):
    """(base URL, space path, results CSV) of a 40-trial random sweep served by optuna-dashboard."""
    path = space_from(tmp_path, {"shape.kv_heads": [4, 8, 16]})
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--sampler", "random", "--trials", "40", "--study", "dash", "--no-report",
                 "--no-refine", "--out", str(out)]) == 0
    port = _free_port()
    exe = shutil.which("optuna-dashboard")
    cmd = [exe] if exe else [sys.executable, "-c", "from optuna_dashboard._cli import main; main()"]
    log = open(tmp_path / "dashboard.log", "wb")
    proc = subprocess.Popen([*cmd, str(out / "dash.journal"), "--host", "127.0.0.1", "--port", str(port),
                             "--server", "wsgiref"], stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                _get(f"{base}/api/studies")
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"optuna-dashboard did not start: {(tmp_path / 'dashboard.log').read_text()[-2000:]}")
                time.sleep(0.3)
        yield base, path, out / "dash.csv"
    finally:
        stop_process(proc, 10.0)
        log.close()


def test_dashboard_shows_objective_names_feasibility_reasons_and_figures(dashboard):
    base, path, csv = dashboard
    space = load_space(path)
    studies = _get(f"{base}/api/studies")["study_summaries"]
    assert [s["study_name"] for s in studies] == ["dash"]
    detail = _get(f"{base}/api/studies/{studies[0]['study_id']}")
    assert detail["objective_names"] == list(space.objectives)  # not "Objective 0", "Objective 1"

    table = pd.read_csv(csv, keep_default_na=False).set_index("trial")
    figures = {k: col for k, (col, _) in DASHBOARD_FIGURES.items() if col not in space.objectives}
    trials = [t for t in detail["trials"] if t["state"] == "Complete"]
    assert len(trials) == len(table) == 40
    seen = set()
    for t in trials:
        attrs = {a["key"]: a["value"] for a in t["user_attrs"]}
        assert list(attrs) == ["feasible", "reason", *figures]  # in this order, nothing else
        row = table.loc[t["number"]]
        assert attrs["feasible"] == str(bool(row["feasible"]))
        assert attrs["reason"] == ("feasible" if row["feasible"] else row["reason"])
        for k, col in figures.items():
            scale = DASHBOARD_FIGURES[k][1]
            assert float(attrs[k]) == pytest.approx(float(row[col]) * scale, rel=1e-3), k
        assert [float(v) for v in t["values"]] == pytest.approx([float(row[o]) for o in space.objectives])
        seen.add(attrs["feasible"])
    assert seen == {"True", "False"}  # the sample shows both kinds
    # the trial table offers every figure as a sortable (numeric) column
    sortable = {a["key"]: a["sortable"] for a in detail["union_user_attrs"]}
    assert all(sortable[k] for k in figures) and not sortable["reason"]
