"""``explorer sweep``: reproducible CSVs, resumable studies, exact trial counts with workers,
clean all-infeasible runs, one-line errors that leave nothing behind, report hand-off."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import optuna
import pandas as pd
import pytest
from optuna.trial import TrialState
from test_space import space_from

from explorer.cli import main
from explorer.frontier import front_table

ROOT = Path(__file__).resolve().parents[1]


def sweep(space: Path, out: Path, *args: str) -> int:
    return main(["sweep", str(space), "--out", str(out), "--no-report", *args])


def journal_trials(path: Path, study: str):
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))
    return optuna.load_study(study_name=study, storage=storage).get_trials(deepcopy=False)


@pytest.fixture
def space(tmp_path):
    return space_from(tmp_path, {"deployment.batch": {"low": 1, "high": 2048, "log": True}})


@pytest.mark.parametrize("sampler,trials", [("tpe", "30"), ("random", "70"), ("nsga2", "45"), ("grid", "0")])
def test_same_space_seed_sampler_same_csv(space, tmp_path, sampler, trials, capsys):
    grid_space = space_from(tmp_path, name="g.yaml")  # batch as choices: a small grid
    s = grid_space if sampler == "grid" else space
    for d in ("a", "b"):
        assert sweep(s, tmp_path / d, "--sampler", sampler, "--trials", trials, "--seed", "5") == 0
    a = (tmp_path / "a" / f"{s.stem}.csv").read_bytes()
    assert a == (tmp_path / "b" / f"{s.stem}.csv").read_bytes()
    df = pd.read_csv(tmp_path / "a" / f"{s.stem}.csv")
    assert len(df) == (432 if sampler == "grid" else int(trials))
    for col in ("trial", "hardware", "precision", "hidden", "ffn", "layers", "heads", "kv_heads", "batch", "tp", "pp",
                "tokens_per_s_per_gpu", "tokens_per_s_per_user", "ttft_s", "memory_bytes_per_gpu", "feasible",
                "reason", "on_front"):
        assert col in df.columns, col
    assert df["on_front"].tolist() == front_table(df, {"tokens_per_s_per_gpu": "maximize",
                                                      "tokens_per_s_per_user": "maximize"}).tolist()
    out = capsys.readouterr().out
    assert "feasible" in out and "front" in out and "hypervolume" in out and "wrote" in out


def test_resume_adds_trials_and_rebuilds_the_csv(space, tmp_path):
    out = tmp_path / "out"
    assert sweep(space, out, "--trials", "30", "--study", "res") == 0
    first = pd.read_csv(out / "res.csv")
    assert sweep(space, out, "--trials", "20", "--study", "res") == 0
    df = pd.read_csv(out / "res.csv")
    assert len(df) == 50 and df["trial"].is_unique and sorted(df["trial"]) == list(range(50))
    pd.testing.assert_frame_equal(df.iloc[:30].drop(columns="on_front"), first.drop(columns="on_front"))
    assert sweep(space, out, "--trials", "0", "--study", "res") == 0  # rebuild only
    assert len(pd.read_csv(out / "res.csv")) == 50
    assert sweep(space, out, "--trials", "0", "--study", "empty") == 0  # a new, empty study
    empty = pd.read_csv(out / "empty.csv")
    assert len(empty) == 0 and list(empty.columns) == list(df.columns)


def test_four_workers_run_exactly_the_requested_trials(space, tmp_path):
    out = tmp_path / "out"
    assert sweep(space, out, "--trials", "10", "--study", "w") == 0
    assert sweep(space, out, "--trials", "42", "--workers", "4", "--study", "w", "--sampler", "tpe") == 0
    trials = journal_trials(out / "w.journal", "w")
    assert len(trials) == 52 and all(t.state == TrialState.COMPLETE for t in trials)
    assert sorted(t.number for t in trials) == list(range(52))
    df = pd.read_csv(out / "w.csv")
    assert len(df) == 52 and df["trial"].is_unique


def test_ctrl_c_keeps_every_finished_trial(space, tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "explorer", "sweep", str(space), "--out", str(out), "--no-report",
           "--trials", "100000", "--study", "int", "--sampler", "tpe"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    journal = out / "int.journal"
    deadline = time.time() + 60
    while time.time() < deadline and (not journal.exists() or journal.read_bytes().count(b'"op_code":6') < 40):
        time.sleep(0.1)  # op_code 6: a trial's state/values were set
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "INTERRUPTED" in stdout
    before = journal_trials(journal, "int")
    done = [t.number for t in before if t.state == TrialState.COMPLETE]
    assert len(done) >= 15 and all(t.state != TrialState.RUNNING for t in before)
    assert sorted(pd.read_csv(out / "int.csv")["trial"]) == sorted(done)
    assert sweep(space, out, "--trials", "10", "--study", "int") == 0
    df = pd.read_csv(out / "int.csv")
    assert df["trial"].is_unique and set(done) <= set(df["trial"]) and len(df) == len(done) + 10


def test_all_infeasible_space_finishes_cleanly_and_says_why(tmp_path, capsys):
    p = space_from(tmp_path, {"hardware": "h100", "shape.hidden": 16384, "shape.ffn": 53248, "shape.layers": 126,
                              "deployment.tp": 1, "constraints.capacity": {"total_B": [300, 500]},
                              "shape.heads": 128, "shape.kv_heads": {"choices": [8, 16]}})
    assert sweep(p, tmp_path / "o", "--trials", "12", "--sampler", "random") == 0
    out = capsys.readouterr().out
    assert "feasible     0 of 12 (0.0%)" in out
    assert "front        0 points" in out
    assert "out of memory" in out and "needs" in out
    df = pd.read_csv(tmp_path / "o" / "s.csv")
    assert len(df) == 12 and not df["feasible"].any() and not df["on_front"].any()
    assert main(["sweep", str(p), "--out", str(tmp_path / "g"), "--no-report", "--sampler", "grid"]) == 0


BAD_INPUTS = [
    ("yaml", lambda tp: (tp / "b.yaml").write_text("shape: {hidden: [1, 2\n") and [str(tp / "b.yaml")],
     "malformed YAML"),
    ("hardware", lambda tp: [str(space_from(tp, {"hardware": "h300"}))], "hardware: unknown hardware 'h300'"),
    ("range", lambda tp: [str(space_from(tp, {"shape.layers": {"low": 40, "high": 20}}))], "empty range"),
    ("missing", lambda tp: [str(tp / "nope.yaml")], "file not found"),
    ("grid-float", lambda tp: [str(space_from(tp, {"deployment.moe_imbalance": {"low": 1.0, "high": 1.2}})),
                               "--sampler", "grid"], "cannot be gridded"),
    ("grid-storage", lambda tp: [str(space_from(tp)), "--sampler", "grid", "--storage", "x.journal"], "--storage"),
    ("storage", lambda tp: [str(space_from(tp)), "--storage", "mongodb://x"], "unsupported URL scheme"),
    ("study", lambda tp: [str(space_from(tp)), "--study", "a/b"], "not a usable study name"),
    ("band", lambda tp: [str(space_from(tp, drop=("constraints",)))], "smallest model"),
]


@pytest.mark.parametrize("case,argv,words", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys, case, argv, words):
    out = tmp_path / "out"
    out.mkdir()
    rc = main(["sweep", *argv(tmp_path), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith("explorer sweep: error:"), err
    assert words in err, err
    assert list(out.iterdir()) == []


def test_argparse_errors_exit_2(space, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["sweep", str(space), "--workers", "0", "--out", str(tmp_path / "o")])
    assert e.value.code == 2 and "must be >= 1" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_report_gets_the_table_and_provenance(space, tmp_path, monkeypatch):
    seen = {}

    def write_report(path, df, meta):
        seen.update(path=Path(path), rows=len(df), meta=meta, on_front=int(df["on_front"].sum()))
        Path(path).write_text("<html></html>")

    monkeypatch.setitem(sys.modules, "explorer.report", types.SimpleNamespace(write_report=write_report))
    out = tmp_path / "out"
    assert main(["sweep", str(space), "--out", str(out), "--trials", "15", "--sampler", "random"]) == 0
    assert (out / "s.html").read_text() == "<html></html>"
    assert sorted(p.name for p in out.iterdir()) == ["s.csv", "s.html", "s.journal"]  # temp files renamed
    meta = seen["meta"]
    for key in ("study", "space_file", "space_text", "hardware_files", "sampler", "seed", "trials", "objectives",
                "constraints", "workload", "tool_version", "date", "hypervolume_history"):
        assert key in meta, key
    assert meta["study"] == "s" and meta["sampler"] == "random" and meta["trials"] == 15 == seen["rows"]
    assert "h200" in meta["hardware_files"] and "peak_TFLOPS" in meta["hardware_files"]["h200"]
    assert meta["space_text"] == space.read_text()
    assert meta["constraints"]["capacity"] == {"total_B": [1.0, 10.0]}
    assert len(meta["hypervolume_history"]) == 15
    assert meta["hypervolume_history"] == sorted(meta["hypervolume_history"])
    assert meta["workload"] == {"isl": 1024, "osl": 1024}


def test_failed_report_leaves_no_partial_html(space, tmp_path, monkeypatch):
    def write_report(path, df, meta):
        Path(path).write_text("<html>half")
        raise RuntimeError("boom")

    monkeypatch.setitem(sys.modules, "explorer.report", types.SimpleNamespace(write_report=write_report))
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="boom"):
        main(["sweep", str(space), "--out", str(out), "--trials", "5"])
    assert not any(p.suffix == ".html" or p.name.startswith(".") for p in out.iterdir())


def test_help_lists_the_flags(capsys):
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    text = capsys.readouterr().out
    for flag in ("--trials", "--sampler", "--seed", "--storage", "--study", "--workers", "--out", "--no-report"):
        assert flag in text


def test_quick_space_runs(tmp_path):
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-m", "explorer", "sweep", "search_spaces/quick.yaml", "--trials", "60",
                        "--out", str(tmp_path), "--no-report"], cwd=ROOT, capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert "sweep quick: 60 new trials" in r.stdout
