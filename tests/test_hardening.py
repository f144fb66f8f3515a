"""Regression tests of issue 11's defects (hardening): one test (or a few) per defect, named after it.

Items 8 and 15 (measurements) live in tests/test_fuzz_cli.py with the validate rewrite's tests."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import optuna
import pandas as pd
import pytest
import yaml
from optuna.trial import TrialState
from promise import ROOT, assert_one_line_error, chdir, mini_space, run_cli, snapshot

from explorer.journal import FlockLock, prepare_journal, repair_journal


def journal_states(path: Path, study: str = "mini") -> Counter:
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))
    return Counter(t.state.name for t in optuna.load_study(study_name=study, storage=storage).get_trials())


def quiet_sweep(space: Path, out: Path, *args: str):
    return run_cli(["sweep", space, "--out", out, "--no-report", "--no-refine", *args])


# ------------------------------------------------------------------------------------------ 1


def test_1_dangling_lock_symlink_left_by_a_kill_does_not_block_the_resume(tmp_path):
    space = mini_space(tmp_path)
    with chdir(tmp_path):
        assert quiet_sweep(Path("mini.yaml"), Path("out"), "--trials", "5").rc == 0
        os.symlink("out/mini.journal", "out/mini.journal.lock")  # relative target: dangles inside out/
    r = subprocess.run([sys.executable, "-m", "explorer", "sweep", space.name, "--out", "out", "--trials", "5",
                        "--no-report", "--no-refine"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert journal_states(tmp_path / "out" / "mini.journal") == {"COMPLETE": 10}
    assert not os.path.lexists(tmp_path / "out" / "mini.journal.lock")  # released locks leave no file


def test_1_lock_of_a_killed_holder_is_free(tmp_path):
    journal = tmp_path / "x.journal"
    journal.touch()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from explorer.journal import FlockLock; "
                               f"FlockLock({str(journal)!r}).acquire(); print('held', flush=True); time.sleep(60)"],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    holder.kill()
    holder.wait(timeout=30)
    assert (tmp_path / "x.journal.lock").exists()  # the kill left the file; the kernel dropped the lock
    t0 = time.monotonic()
    with FlockLock(str(journal)):
        pass
    assert time.monotonic() - t0 < 30


def test_1_journal_fsyncs_what_a_finished_trial_needs(tmp_path, monkeypatch):
    """A trial's params and attributes are written unsynced; the operation that finishes it is
    fsync'ed (and with it every earlier line), as are the study's own operations."""
    import explorer.journal as jmod

    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(jmod.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    path = tmp_path / "s.journal"
    storage = optuna.storages.JournalStorage(jmod.SafeJournalBackend(str(path)))
    study = optuna.create_study(study_name="s", storage=storage, directions=["maximize", "minimize"])
    after_create = len(synced)
    assert after_create >= 1  # the study's creation (and its system attributes)
    for i in range(3):
        t = study.ask()
        t.suggest_int("x", 0, 10)
        t.suggest_float("y", 0.0, 1.0)
        t.set_user_attr("reason", "ok")
        study.tell(t, [float(i), 1.0 - i])
    # per trial: create, 2 params, 1 user attribute unsynced; its state + values synced once
    assert len(synced) - after_create == 3
    ops = [json.loads(line)["op_code"] for line in path.read_bytes().splitlines()]
    assert ops.count(6) == 3 and ops.count(5) == 6
    assert jmod.needs_fsync([{"op_code": 42}]) and not jmod.needs_fsync([{"op_code": 5}, {"op_code": 8}])
    again = optuna.load_study(study_name="s", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(path))))
    assert [t.state.name for t in again.get_trials()] == ["COMPLETE"] * 3


# ------------------------------------------------------------------------------------------ 2


def test_2_torn_journal_is_cut_to_its_whole_lines_and_resumes(tmp_path):
    space = mini_space(tmp_path)
    out = tmp_path / "out"
    assert quiet_sweep(space, out, "--trials", "5").rc == 0
    journal = out / "mini.journal"
    with open(journal, "r+b") as f:
        f.truncate(journal.stat().st_size - 37)
    for _ in range(2):
        r = quiet_sweep(space, out, "--trials", "5")
        assert r.rc == 0, r.err
    first = quiet_sweep(space, out, "--trials", "0")
    assert first.rc == 0 and first.err == ""  # nothing left to repair
    assert all(json.loads(line) for line in journal.read_bytes().splitlines())
    assert journal.read_bytes().endswith(b"\n")
    assert [p.name for p in out.glob("mini.journal.torn-*")]  # the fragment is kept
    states = journal_states(journal)
    assert states["COMPLETE"] == 14 and states["RUNNING"] <= 1  # the trial whose last line was torn


def test_2_torn_tail_message_is_one_line(tmp_path):
    space = mini_space(tmp_path)
    out = tmp_path / "out"
    assert quiet_sweep(space, out, "--trials", "5").rc == 0
    journal = out / "mini.journal"
    with open(journal, "r+b") as f:
        f.truncate(journal.stat().st_size - 37)
    r = quiet_sweep(space, out, "--trials", "1")
    assert r.rc == 0 and r.err.count("\n") == 1 and "torn" in r.err and str(journal) in r.err, r.err


def test_2_garbage_line_is_dropped_with_a_backup_and_trials_are_kept(tmp_path):
    space = mini_space(tmp_path)
    out = tmp_path / "out"
    assert quiet_sweep(space, out, "--trials", "20").rc == 0
    journal = out / "mini.journal"
    lines = journal.read_bytes().splitlines(keepends=True)
    lines.insert(len(lines) // 2, b"garbage{{ not json\n")
    journal.write_bytes(b"".join(lines))
    r = quiet_sweep(space, out, "--trials", "5")
    assert r.rc == 0, r.err
    assert r.err.count("\n") == 1 and "dropped 1 damaged line" in r.err and "saved as" in r.err, r.err
    assert journal_states(journal)["COMPLETE"] == 25
    backups = list(out.glob("mini.journal.damaged-*"))
    assert len(backups) == 1 and b"garbage" in backups[0].read_bytes()


def test_2_operation_glued_onto_a_torn_line_is_recovered(tmp_path):
    """What Optuna's own backend writes after a kill: the next operation appended onto the fragment."""
    space = mini_space(tmp_path)
    out = tmp_path / "out"
    assert quiet_sweep(space, out, "--trials", "10").rc == 0
    journal = out / "mini.journal"
    lines = journal.read_bytes().splitlines(keepends=True)
    i = len(lines) // 2
    lines[i] = lines[i][:25] + lines[i + 1]  # the torn line i, then line i+1 written onto it
    del lines[i + 1]
    journal.write_bytes(b"".join(lines))
    r = quiet_sweep(space, out, "--trials", "0")
    assert r.rc == 0 and "recovered 1 operation" in r.err, r.err
    states = journal_states(journal)
    assert states["COMPLETE"] + states.get("RUNNING", 0) == 10


def test_2_a_file_that_is_not_a_journal_is_refused_untouched(tmp_path):
    space = mini_space(tmp_path)
    bad = tmp_path / "bad.journal"
    bad.write_text("hello\nworld\n")
    r = quiet_sweep(space, tmp_path / "out", "--storage", bad)
    assert_one_line_error(r, "sweep", ["--storage"])
    assert "not an Optuna journal" in r.err and bad.read_text() == "hello\nworld\n"


def test_2_repair_functions_leave_a_healthy_journal_alone(tmp_path):
    space = mini_space(tmp_path)
    out = tmp_path / "out"
    assert quiet_sweep(space, out, "--trials", "3").rc == 0
    journal = out / "mini.journal"
    before = journal.read_bytes()
    prepare_journal(str(journal))
    assert repair_journal(str(journal)) is False and journal.read_bytes() == before


# ------------------------------------------------------------------------------------------ 3


def test_3_hardware_file_named_in_a_space_is_loaded(tmp_path):
    hw = (ROOT / "hardware" / "h200.yaml").read_text(encoding="utf-8")
    sub = tmp_path / "spaces"
    sub.mkdir()
    (sub / "hw.yaml").write_text(hw.replace("hbm_GB: 141", "hbm_GB: 1"), encoding="utf-8")
    assert "hbm_GB: 141" in hw
    space = mini_space(sub)
    space.write_text(space.read_text().replace("hardware: h200", "hardware: hw.yaml"))
    out = tmp_path / "out"
    with chdir(tmp_path):  # relative to the space file's folder, not the current one
        r = quiet_sweep(space, out, "--trials", "10")
    assert r.rc == 0, r.err
    df = pd.read_csv(out / "mini.csv")
    assert not df["feasible"].any() and (df["memory_capacity_bytes"] < 1e9).all()
    assert set(df["hardware"]) == {"h200"}  # the name inside the file
    ev = run_cli(["evaluate", "--model", "llama-3.1-8b", "--hardware", sub / "hw.yaml", "--json"])
    assert ev.rc == 0 and "out of memory" in json.loads(ev.out)["reason"]


def test_3_missing_hardware_file_in_a_space_names_file_and_key(tmp_path):
    space = mini_space(tmp_path)
    space.write_text(space.read_text().replace("hardware: h200", "hardware: nothere.yaml"))
    r = quiet_sweep(space, tmp_path / "out")
    assert_one_line_error(r, "sweep", [str(space)])
    assert "hardware: hardware file 'nothere.yaml' not found" in r.err


def test_3_two_entries_defining_the_same_kind_are_refused(tmp_path):
    (tmp_path / "hw.yaml").write_text((ROOT / "hardware" / "h200.yaml").read_text(encoding="utf-8"))
    space = mini_space(tmp_path)
    space.write_text(space.read_text().replace("hardware: h200", "hardware: [h200, hw.yaml]"))
    r = quiet_sweep(space, tmp_path / "out")
    assert_one_line_error(r, "sweep", [str(space)])
    assert "both define hardware 'h200'" in r.err


# ------------------------------------------------------------------------------------------ 4


def test_4_sizes_beyond_the_simulators_range_are_refused(tmp_path):
    space = mini_space(tmp_path)
    space.write_text(space.read_text().replace("batch: {low: 1, high: 512, log: true}",
                                               "batch: 100000000000000000000000000"))
    out = tmp_path / "out"
    r = quiet_sweep(space, out)
    assert_one_line_error(r, "sweep", [str(space)])
    assert "deployment.batch: must be <= 2147483647 (allowed: 1 .. 2147483647)" in r.err
    assert not out.exists()
    r = run_cli(["evaluate", "--model", "llama-3.1-8b", "--batch", "100000000000000000000000000"])
    assert_one_line_error(r, "evaluate", ["--batch"])
    r = run_cli(["evaluate", "--model", "llama-3.1-8b", "--tp", str(2**21)])
    assert_one_line_error(r, "evaluate", ["--tp"])


# ------------------------------------------------------------------------------------------ 5


def _not_utf8(tmp_path: Path) -> list[Path]:
    files = {"binary.yaml": bytes(range(256)) * 4, "utf16.yaml": "name: h200\n".encode("utf-16"),
             "packed.yaml.gz": gzip.compress(b"name: h200\n")}
    out = []
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        out.append(tmp_path / name)
    return out


@pytest.mark.parametrize("command", ["evaluate", "sweep", "validate", "calibrate"])
def test_5_files_that_are_not_utf8_are_one_line_errors(tmp_path, command):
    for f in _not_utf8(tmp_path):
        argv = {"evaluate": ["evaluate", "--model", "llama-3.1-8b", "--hardware", f],
                "sweep": ["sweep", f, "--out", tmp_path / "out"],
                "validate": ["validate", "--measurements", f],
                "calibrate": ["calibrate", "--hardware", f]}[command]
        r = run_cli(argv)
        assert_one_line_error(r, command, [str(f)])
        assert "not a UTF-8" in r.err, r.err
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------ 6


def test_6_duplicate_keys_are_refused_naming_both_lines(tmp_path):
    space = mini_space(tmp_path)
    text = space.read_text().replace("  tp: [1, 2, 4, 8]\n", "  tp: [1, 2, 4, 8]\n  tp: 8\n")
    space.write_text(text)
    line = text.splitlines().index("  tp: 8") + 1
    r = quiet_sweep(space, tmp_path / "out")
    assert_one_line_error(r, "sweep", [str(space)])
    assert f"line {line}, column 3: duplicate key 'tp' (first given at line {line - 1})" in r.err, r.err


# ------------------------------------------------------------------------------------------ 7


def _output_cases(tmp_path: Path):
    space = mini_space(tmp_path / "in")
    (tmp_path / "afile").write_text("x")
    (tmp_path / "folder.journal").mkdir()
    have_proc = Path("/proc/self").exists()
    cases = [
        ("out-in-a-file", ["sweep", space, "--out", tmp_path / "afile" / "sub"], "--out"),
        ("storage-folder", ["sweep", space, "--out", tmp_path / "o", "--storage", tmp_path / "folder.journal"],
         "--storage"),
        ("study-300", ["sweep", space, "--out", tmp_path / "o", "--study", "s" * 300], "--study"),
    ]
    if have_proc:
        cases += [("out-proc", ["sweep", space, "--out", "/proc/x"], "--out"),
                  ("storage-proc", ["sweep", space, "--out", tmp_path / "o", "--storage", "/proc/x.journal"],
                   "--storage")]
    return cases


def test_7_unusable_output_paths_are_refused_before_any_work(tmp_path):
    for name, argv, flag in _output_cases(tmp_path):
        before = snapshot(tmp_path)
        r = run_cli([*argv, "--no-report", "--trials", "2"])
        assert_one_line_error(r, "sweep", [flag])
        assert snapshot(tmp_path) == before, name


def test_7_csv_path_that_is_a_folder_is_refused_before_the_first_trial(tmp_path):
    space = mini_space(tmp_path)
    out = tmp_path / "out"
    (out / "mini.csv").mkdir(parents=True)
    r = quiet_sweep(space, out)
    assert_one_line_error(r, "sweep", ["mini.csv"])
    assert sorted(p.name for p in out.iterdir()) == ["mini.csv"]  # no journal: no trial ran


def test_7_report_and_compare_outputs_are_checked_first(tmp_path):
    space = mini_space(tmp_path)
    out = tmp_path / "out"
    assert quiet_sweep(space, out, "--trials", "10").rc == 0
    csv = out / "mini.csv"
    (tmp_path / "dir.html").mkdir()
    cases = [["report", csv, "-o", tmp_path / "dir.html"], ["compare", csv, csv, "-o", tmp_path / "dir.html"],
             ["report", csv, "-o", tmp_path / "nofolder" / "x.html"]]
    if Path("/proc/self").exists():
        cases += [["report", csv, "-o", "/proc/x.html"], ["compare", csv, csv, "-o", "/proc/x.html"]]
    for argv in cases:
        before = snapshot(tmp_path)
        r = run_cli([*argv, "--plotlyjs", "cdn"])
        assert_one_line_error(r, argv[0], ["--output"])
        assert snapshot(tmp_path) == before, argv


# ------------------------------------------------------------------------------------------ 9


def test_9_seeds_beyond_32_bits_are_refused_before_any_file(tmp_path):
    space = mini_space(tmp_path)
    out = tmp_path / "out"
    r = quiet_sweep(space, out, "--seed", "99999999999")
    assert_one_line_error(r, "sweep", ["--seed"])
    space.write_text(space.read_text().replace("seed: 0", "seed: 1099511627776"))
    r = quiet_sweep(space, out)
    assert_one_line_error(r, "sweep", [str(space)])
    assert "search.seed: must be <= 4294967295" in r.err
    assert not out.exists()
    assert quiet_sweep(mini_space(tmp_path, "ok.yaml"), out, "--seed", str(2**32 - 1), "--trials", "2").rc == 0


# ------------------------------------------------------------------------------------------ 10, 11, 14, 15


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("swept")
    space = mini_space(tmp)
    out = tmp / "out"
    r = run_cli(["sweep", space, "--out", out, "--no-refine", "--trials", "10"])
    assert r.rc == 0, r.err
    return out


def test_10_compare_refuses_to_overwrite_one_of_its_inputs(swept):
    before = snapshot(swept)
    for target in (swept / "mini.html", swept / ".." / swept.name / "mini.html"):
        r = run_cli(["compare", swept / "mini.html", swept / "mini.csv", "-o", target])
        assert_one_line_error(r, "compare", ["--output"])
        assert "is one of the inputs" in r.err
    assert snapshot(swept) == before


def test_11_unknown_reference_preset_is_an_error_with_did_you_mean(swept, tmp_path):
    r = run_cli(["report", swept / "mini.csv", "-o", tmp_path / "r.html", "--references", "llama-3.1-7b"])
    assert_one_line_error(r, "report", ["--references"])
    assert "unknown model 'llama-3.1-7b' (did you mean 'llama-3.1-" in r.err
    assert not (tmp_path / "r.html").exists()


def test_14_header_only_csv_is_an_empty_report_and_bad_values_name_the_file(swept, tmp_path):
    header = (swept / "mini.csv").read_text().splitlines()[0]
    csv = tmp_path / "head.csv"
    csv.write_text(header + "\n")  # what a sweep of an empty study writes
    r = run_cli(["report", csv, "-o", tmp_path / "r.html", "--plotlyjs", "cdn"])
    assert r.rc == 0 and r.err == "" and (tmp_path / "r.html").exists(), r.err
    csv.write_text("tokens_per_s_per_user,tokens_per_s_per_gpu\nfast,1\n")
    r = run_cli(["report", csv, "-o", tmp_path / "r2.html"])
    assert_one_line_error(r, "report", [str(csv)])
    assert "tokens_per_s_per_user: row 1: expected a number, got 'fast'" in r.err, r.err
    assert not (tmp_path / "r2.html").exists() and not list(tmp_path.glob(".*tmp*"))


def test_14_transfer_from_unknown_kind_blames_its_own_flag():
    r = run_cli(["calibrate", "--hardware", "h100", "--transfer-from", "zz9"])
    assert_one_line_error(r, "calibrate", ["--transfer-from"])
    assert "--hardware" not in r.err


def test_15_csv_feasible_column_must_be_true_or_false(swept, tmp_path):
    df = pd.read_csv(swept / "mini.csv")
    df["feasible"] = df["feasible"].astype(object)
    df.loc[3, "feasible"] = "maybe"
    csv = tmp_path / "maybe.csv"
    df.to_csv(csv, index=False)
    for argv in (["report", csv, "-o", tmp_path / "m.html"], ["compare", csv, swept / "mini.csv", "--json"]):
        r = run_cli(argv)
        assert_one_line_error(r, argv[0], [str(csv)])
        assert "feasible: row 4: expected true or false, got 'maybe'" in r.err, r.err
    assert not (tmp_path / "m.html").exists()


# ------------------------------------------------------------------------------------------ 12, 13


def test_12_calibrate_all_without_a_supported_case_is_an_error(tmp_path):
    m = tmp_path / "m.yaml"
    m.write_text(yaml.safe_dump({"measurements": [{"id": "x", "gpu": "H100"}]}))
    for extra in ([], ["--json"]):
        r = run_cli(["calibrate", "--hardware", "all", "--measurements", m, *extra])
        assert_one_line_error(r, "calibrate", [str(m)])
        assert "no supported case" in r.err and r.out == ""


def test_12_calibrate_names_a_measurements_file_that_does_not_exist(tmp_path):
    """A file named with --measurements must exist: the defaults are optional and skipped when
    absent, a named one is not (it used to be skipped, and the error blamed the empty case list)."""
    real = Path("validation/measurements.yaml").resolve()
    for missing in (tmp_path / "nope.yaml", tmp_path):  # no file; a directory
        r = run_cli(["calibrate", "--hardware", "h100", "--measurements", real, "--measurements", missing])
        assert_one_line_error(r, "calibrate", [str(missing)])
        assert "file not found" in r.err and r.out == ""


@pytest.mark.parametrize("command", ["sweep", "evaluate", "validate"])
def test_13_deeply_nested_yaml_is_one_line(tmp_path, command):
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 10_000 + "]" * 10_000 + "\n")
    argv = {"sweep": ["sweep", deep, "--out", tmp_path / "o"],
            "evaluate": ["evaluate", "--model", "llama-3.1-8b", "--hardware", deep],
            "validate": ["validate", "--measurements", deep]}[command]
    r = run_cli(argv)
    assert_one_line_error(r, command, [str(deep)])
    assert "nested too deeply" in r.err


def test_13_alias_bombs_and_huge_integers_are_one_line(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, 9)]
    bomb.write_text("\n".join(lines) + "\ndescription: *l8\n")
    big = tmp_path / "big.yaml"
    big.write_text("hardware: h200\nseed: " + "9" * 5000 + "\n")
    for f, words in ((bomb, "expands to more than"), (big, "more than 4,300 digits")):
        r = run_cli(["sweep", f, "--out", tmp_path / "o"])
        assert_one_line_error(r, "sweep", [str(f)])
        assert words in r.err


# ------------------------------------------------------------------------------------------ 16


def test_16_interrupt_during_refinement_says_trials_are_safe_and_how_to_rebuild(tmp_path, monkeypatch):
    import explorer.refine

    space = mini_space(tmp_path)
    out = tmp_path / "out"

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(explorer.refine, "batch_completion", interrupted)
    r = run_cli(["sweep", space, "--out", out, "--no-report", "--trials", "10"])
    assert r.rc == 130
    assert r.err.count("\n") == 1 and "all 10 finished trials are safe" in r.err, r.err
    assert f"'explorer sweep {space} --trials 0 --out {out}' rebuilds the CSV and report" in r.err, r.err
    assert not (out / "mini.csv").exists() and not list(out.glob(".*"))
    monkeypatch.undo()
    assert quiet_sweep(space, out, "--trials", "0").rc == 0
    assert pd.read_csv(out / "mini.csv")["trial"].nunique() == 10  # shape trials: several rows per trial


def _wait_for_trials(journal: Path, n: int, deadline: float) -> None:
    while time.time() < deadline and (not journal.exists() or journal.read_bytes().count(b'"op_code":6') < n):
        time.sleep(0.05)


@pytest.mark.parametrize("workers", [1, 2])
def test_16_sigterm_is_treated_like_ctrl_c(tmp_path, workers):
    space = mini_space(tmp_path)
    space.write_text(space.read_text().replace("sampler: random", "sampler: tpe"))
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "explorer", "sweep", str(space), "--out", str(out), "--no-report",
                             "--no-refine", "--trials", "100000", "--workers", str(workers)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_trials(out / "mini.journal", 30, time.time() + 90)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "INTERRUPTED" in stdout and "Traceback" not in stderr
    states = journal_states(out / "mini.journal")
    assert states["COMPLETE"] >= 30 and "RUNNING" not in states, states
    df = pd.read_csv(out / "mini.csv")
    assert df["trial"].nunique() == states["COMPLETE"]  # shape trials: one or more rows each


def test_16_one_signal_policy_restores_handlers():
    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    assert run_cli(["models"]).rc == 0
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_outputs_of_a_clean_sweep_hold_no_lock_or_temporary_file(tmp_path):
    space = mini_space(tmp_path)
    out = tmp_path / "out"
    assert run_cli(["sweep", space, "--out", out, "--trials", "5", "--no-refine"]).rc == 0
    assert sorted(p.name for p in out.iterdir()) == ["mini.csv", "mini.html", "mini.journal"]
    assert TrialState.COMPLETE.name in journal_states(out / "mini.journal")


def test_16_temporary_files_of_a_killed_run_are_cleared_by_the_next(tmp_path):
    space = mini_space(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    for name in (f".mini.csv.{dead}.tmp", f".mini.{dead}.tmp.html"):
        (out / name).write_text("half")
    (out / f".mini.csv.{os.getppid()}.tmp").write_text("a live writer's")  # its process is alive
    assert run_cli(["sweep", space, "--out", out, "--trials", "3", "--no-refine"]).rc == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [f".mini.csv.{os.getppid()}.tmp", "mini.csv", "mini.html", "mini.journal"])


def test_7_a_disk_that_fills_up_during_the_run_is_one_line_and_keeps_the_trials(tmp_path, monkeypatch):
    import errno

    import explorer.commands.sweep as sweep_cmd

    def full(df, path):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(sweep_cmd, "_atomic_csv", full)
    space = mini_space(tmp_path)
    out = tmp_path / "out"
    r = quiet_sweep(space, out, "--trials", "4")
    assert_one_line_error(r, "sweep", ["mini.csv"])
    assert "No space left on device" in r.err and "all 4 finished trials are safe" in r.err
    monkeypatch.undo()
    assert quiet_sweep(space, out, "--trials", "0").rc == 0 and pd.read_csv(out / "mini.csv")["trial"].nunique() == 4


def test_16_sigterm_while_workers_start_stops_them_all(tmp_path, monkeypatch):
    """A signal that arrives while a worker is being started is held until every started worker can
    be told to stop (before, the sweep exited while its workers ran on, and waited for them)."""
    import multiprocessing.context as mpc

    original = mpc.SpawnProcess.start

    def start_then_terminate(self):
        original(self)
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(mpc.SpawnProcess, "start", start_then_terminate)
    space = mini_space(tmp_path)
    out = tmp_path / "out"
    t0 = time.monotonic()
    r = run_cli(["sweep", space, "--out", out, "--no-report", "--no-refine", "--trials", "100000",
                 "--workers", "2"])
    assert r.rc == 130, r.err
    assert time.monotonic() - t0 < 120
    import multiprocessing

    assert multiprocessing.active_children() == []  # every started worker stopped and was joined
    states = journal_states(out / "mini.journal")
    assert "RUNNING" not in states, states
