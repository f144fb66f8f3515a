"""The joint fit's starts at several front-end levels (explorer/calibrate.py SERVE_START_LEVELS).

A served runtime's front end (``serve_*``) only shows where it outlasts the engine's step
(``max(engine, front end)``), so the least-squares objective has kinks in it and one start can stop
at one.  Known answer: a synthetic TensorRT-LLM curve generated with a front end of 1.5 ms per step
and 30 us per sequence.  Measured when written: from the profile's 4 ms / 100 us start alone the fit
stops at 3.0 ms / 17 us with a worst error of 0.23 %; with the other levels it finds 1.45 ms / 31 us
and reproduces every row to 1e-5."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import explorer.calibrate as cal
from explorer.curves import curve_cases
from explorer.hardware import load_hardware
from explorer.runtime import load_runtime
from explorer.validate import predict


def _synthetic_curve(hw_name: str, serve_step_us: float, serve_per_sequence_us: float) -> list:
    cid = "syn_llama8b_trt"
    curve = {"curve": cid, "model": "Llama-3.1-8B", "gpu": hw_name.upper(), "num_gpus": 1,
             "framework": "TensorRT-LLM", "precision": "FP8", "tp": 1, "ep": 1, "isl": 1024, "osl": 1024,
             "source": "synthetic (tests/test_calibrate_levels.py)"}
    rows = [{k: v for k, v in curve.items() if k != "source"} | {"id": f"{cid}_c{c}", "concurrency": c,
                                                                   "tok_s_gpu": 1.0, "tok_s_user": 1.0}
            for c in (4, 8, 16, 32, 64, 128, 256)]
    doc = {"meta": {}, "curves": [curve], "rows": rows}
    hw, rt = load_hardware(hw_name), load_runtime("trtllm")
    truth = dataclasses.replace(rt.fit_for(hw.name), serve_step_s=serve_step_us * 1e-6,
                                serve_per_sequence_s=serve_per_sequence_us * 1e-6)
    cases = curve_cases(doc, "synthetic.yaml")
    values = dict(zip([c.id for c in cases], predict(cases, {hw.name: hw}, {"trtllm": rt.with_fit(hw.name, truth)}),
                      strict=True))
    for r in rows:
        r["tok_s_gpu"], r["tok_s_user"] = (float(values[f"{r['id']}:{k}"]) for k in ("tok_s_gpu", "tok_s_user"))
    return curve_cases(doc, "synthetic.yaml")


def test_levels_start_with_the_profile():
    assert cal.SERVE_START_LEVELS[0] == 1.0
    assert all(0.0 <= lv < 1.0 for lv in cal.SERVE_START_LEVELS[1:])


def test_other_front_end_levels_find_the_known_answer(monkeypatch):
    cases = _synthetic_curve("b200", 1500.0, 30.0)
    assert all(c.supported for c in cases)
    hw = load_hardware("b200")
    kw = dict(cases=cases, prior_weight=0.0, fit_releases=False)
    monkeypatch.setattr(cal, "SERVE_START_LEVELS", (1.0,))
    one = cal.calibrate(hw, "synthetic.yaml", **kw)
    monkeypatch.undo()
    many = cal.calibrate(hw, "synthetic.yaml", **kw)
    assert many.objective <= one.objective
    # the known answer, every row: 0.03 % on the 2026-12-05 B200 fit (0.02 % on the one before: how
    # close the solver stops depends on where the kind's other factors sit), against >0.1 % from one start
    assert np.max(np.abs(many.errors_after)) < 5e-4
    assert np.max(np.abs(one.errors_after)) > 1e-3   # the profile's start alone stops short of it
    fe = many.runtime_values["trtllm"]
    # the step's front end binds at small batches only, where it trades with its per-sequence cost
    # (1.73 ms / 28 us fits as well as 1.5 ms / 30 us when written): near its true 1.5 ms, far from 4 ms
    assert fe["serve_step_us"] == pytest.approx(1500.0, rel=0.25)
