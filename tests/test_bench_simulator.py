"""benchmarks/bench_simulator.py's interleaved A/B report (``--baseline REF --rounds K``): best and
median of each side and their ratios, worked by hand; and its one-line refusal of a bad ``--rounds``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_simulator as B  # noqa: E402


def test_interleaved_report_gives_best_and_median_of_each_side():
    got = {"ref": [{"mix/True": 100.0}, {"mix/True": 120.0}, {"mix/True": 110.0}],
           "here": [{"mix/True": 150.0}, {"mix/True": 130.0}, {"mix/True": 140.0}]}
    lines = B.interleaved_report("abc123", got)
    assert lines[0].startswith("interleaved A/B, 3 rounds each")
    row = lines[1]
    # best 150 / 120 = 1.25; median 140 / 110 = 1.27
    assert "abc123 best 120 median 110" in row and "this checkout best 150 median 140" in row
    assert "1.25x best, 1.27x median" in row and "(range 130-150 vs 100-120)" in row


def test_rounds_below_one_is_refused_with_exit_2():
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_simulator.py"), "--rounds", "0"],
                         capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == ["bench_simulator.py: --rounds: must be at least 1, got 0"]


def test_floor_verdict_worked_by_hand():
    # 913,469 points/s -> 1.0947 us a point of GEMMs, over the 1 us budget of 10^6 points/s
    over = B.floor_verdict(913_469.0)
    assert over.startswith("the GEMMs alone take 1.09 us of the 1.00 us") and "no engine around this kernel" in over
    # 1.25 M points/s -> 0.80 us of GEMMs, 0.20 us left for the rest
    under = B.floor_verdict(1_250_000.0)
    assert "0.80 us of the 1.00 us" in under and "leaving 0.20 us for the rest of the engine" in under
    # a target of 500k points/s: 2 us a point, 1.2 us left
    assert "leaving 1.20 us" in B.floor_verdict(1_250_000.0, 500_000.0)
