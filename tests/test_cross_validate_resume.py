"""benchmarks/cross_validate.py resumes an interrupted run: finished tasks are kept under a
fingerprint of the inputs, a cut last line or a changed input is handled (no refit runs here)."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _module():
    spec = importlib.util.spec_from_file_location("cross_validate_script", ROOT / "benchmarks" / "cross_validate.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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
