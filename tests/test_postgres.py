"""Distributed sweeps on PostgreSQL (Optuna RDBStorage with heartbeats).

Needs a server: ``eval "$(bash .ci/postgres.sh)"`` exports ``EXPLORER_TEST_PG_URL``.  Without it
the tests skip locally and fail under CI (``CI`` set), so CI cannot silently lose them.
"""

from __future__ import annotations

import os
import uuid

import optuna
import pandas as pd
import pytest
from optuna.trial import TrialState
from test_space import space_from

from explorer.cli import main
from explorer.storage import open_storage, storage_spec


@pytest.fixture
def pg_url() -> str:
    url = os.environ.get("EXPLORER_TEST_PG_URL")
    if not url:
        msg = 'EXPLORER_TEST_PG_URL is not set; start a server with: eval "$(bash .ci/postgres.sh)"'
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return url


def test_four_workers_on_one_postgres_study_run_exactly_the_requested_trials(pg_url, tmp_path):
    space = space_from(tmp_path, {"deployment.batch": {"low": 1, "high": 2048, "log": True}})
    study = f"pg-{uuid.uuid4().hex[:10]}"
    out = tmp_path / "out"
    args = ["sweep", str(space), "--storage", pg_url, "--study", study, "--out", str(out), "--no-report"]
    assert main([*args, "--trials", "40", "--workers", "4"]) == 0
    assert main([*args, "--trials", "6"]) == 0  # resume from another process adds trials
    storage = open_storage(storage_spec(pg_url, out, study, 1))
    trials = optuna.load_study(study_name=study, storage=storage).get_trials(deepcopy=False)
    assert len(trials) == 46 and all(t.state == TrialState.COMPLETE for t in trials)
    assert sorted(t.number for t in trials) == list(range(46))
    df = pd.read_csv(out / f"{study}.csv")
    assert len(df) == 46 and df["trial"].is_unique
    assert not list(out.glob("*.journal"))  # the database holds the study
    optuna.delete_study(study_name=study, storage=storage)


def test_unreachable_database_is_a_one_line_error(pg_url, tmp_path, capsys):
    space = space_from(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    rc = main(["sweep", str(space), "--storage", "postgresql://nobody@127.0.0.1:1/none", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "cannot open postgresql://nobody@127.0.0.1:1/none" in err
    assert list(out.iterdir()) == []
