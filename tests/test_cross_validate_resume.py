"""benchmarks/cross_validate.py resumes an interrupted run: finished tasks are kept under a
fingerprint of the inputs, a cut last line or a changed input is handled (no refit runs here)."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _fresh_module():
    spec = importlib.util.spec_from_file_location("cross_validate_script", ROOT / "benchmarks" / "cross_validate.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_SHARED: list = []


def _module():
    """The script as a module, loaded once for the file (its model digest, ~4 s, is then computed once)."""
    if not _SHARED:
        _SHARED.append(_fresh_module())
    return _SHARED[0]


def test_partial_file_round_trip(tmp_path):
    cv = _module()
    args = argparse.Namespace(hold_out="curve", hardware=None)
    stamp = cv.fingerprint(args)
    assert stamp == cv.fingerprint(args)  # deterministic
    assert stamp != cv.fingerprint(argparse.Namespace(hold_out="config", hardware=None))  # the unit matters
    t1 = ("h200", "curve", ["curve:b", "curve:a"])
    t2 = ("b200", "curve", ["point:x"])
    assert cv._task_key(t1) == cv._task_key(("h200", "curve", ["curve:a", "curve:b"]))  # group order does not
    part = tmp_path / "cv.json.partial.jsonl"
    part.write_text(json.dumps({"fingerprint": stamp}) + "\n"
                    + json.dumps({"task": cv._task_key(t1), "errors": {"row1": 0.1, "row2": -0.2}}) + "\n"
                    + json.dumps({"task": cv._task_key(t2), "errors": {"row3": 0.3}})[:-7] + "\n")  # cut line
    done = cv.load_partial(part, stamp)
    assert done == {cv._task_key(t1): {"row1": 0.1, "row2": -0.2}}  # the cut task runs again
    assert cv.load_partial(part, "another fingerprint") == {}  # inputs changed: start over
    assert cv.load_partial(tmp_path / "missing.jsonl", stamp) == {}


def test_stale_note_says_when_held_out_figures_are_from_other_inputs(tmp_path):
    cv = _module()
    now = cv.fingerprint(argparse.Namespace(hold_out="config", hardware=None))
    fresh = tmp_path / "cv_config.json"
    fresh.write_text(json.dumps({"fingerprint": now, "errors": {}, "curves": {}}))
    assert cv.stale_note(fresh, "config") is None
    # the same file read as a one-curve run: the hold-out unit is part of the fingerprint
    assert "other inputs" in cv.stale_note(fresh, "curve")
    old = tmp_path / "cv_old.json"
    old.write_text(json.dumps({"fingerprint": "0" * 64, "errors": {}, "curves": {}}))
    note = cv.stale_note(old, "config")
    assert "other inputs" in note and "000000000000" in note and f"--hold-out config --json {old}" in note
    legacy = tmp_path / "cv_legacy.json"
    legacy.write_text(json.dumps({"errors": {}, "curves": {}}))
    note = cv.stale_note(legacy, "curve")
    assert "records no fingerprint" in note and "--hold-out" not in note
    # a file inside the checkout is named by its path from the checkout's root (a checkout in tmp_path)
    (tmp_path / "docs").mkdir()
    inside = tmp_path / "docs" / "cv.json"
    inside.write_text(json.dumps({"errors": {}, "curves": {}}))
    cv.ROOT = tmp_path.resolve()
    assert "`docs/cv.json`" in cv.stale_note(inside, "curve") and "--json docs/cv.json`" in cv.stale_note(inside, "curve")


def test_fingerprint_follows_the_predictions_not_the_simulators_source(monkeypatch):
    """A code change that moves no prediction (a speed-up) keeps the fingerprint, so finished
    cross-validation tasks stay valid; one that moves any prediction by one ulp changes it."""
    import numpy as np

    import explorer.validate as V

    args = argparse.Namespace(hold_out="curve", hardware=None)
    cv = _module()
    stamp = cv.fingerprint(args)
    assert not any(d.startswith("explorer") for d in cv.FINGERPRINT_DIRS)  # the sources are not hashed...
    assert "explorer/data/error_bands.yaml" not in cv.FIT_CODE  # ... nor the bands a run's errors give
    real = V.predict
    monkeypatch.setattr(V, "predict", lambda cases, *a, **k: np.nextafter(np.asarray(real(cases, *a, **k),
                                                                                    dtype=np.float64), np.inf))
    moved = _fresh_module()  # a fresh module: its model digest is computed again
    assert moved.fingerprint(args) != stamp


def test_restamp_rewrites_the_fingerprint_of_a_run_and_its_partial_file(tmp_path):
    cv = _module()
    out = tmp_path / "cv.json"
    out.write_text(json.dumps({"fingerprint": "old", "errors": {"a": 0.1}, "curves": {}}))
    part = tmp_path / "cv.json.partial.jsonl"
    task = json.dumps({"task": "t", "errors": {"b": 0.2}}) + "\n"
    part.write_text(json.dumps({"fingerprint": "old"}) + "\n" + task)
    msg = cv.restamp(out, "new" * 4)
    assert "cv.json" in msg and "partial" in msg
    assert json.loads(out.read_text()) == {"fingerprint": "new" * 4, "errors": {"a": 0.1}, "curves": {}}
    assert cv.load_partial(part, "new" * 4) == {"t": {"b": 0.2}}
    assert cv.restamp(tmp_path / "none.json", "x").startswith("nothing at")


def test_restamp_of_a_file_that_is_no_run_is_a_one_line_error(tmp_path):
    import subprocess
    import sys

    bad = tmp_path / "cv.json"
    bad.write_text('{"a": 1}')
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cross_validate.py"), "--restamp", str(bad)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "no 'errors'" in r.stderr
    assert bad.read_text() == '{"a": 1}'  # untouched
