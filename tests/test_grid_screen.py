"""The grid's points decided without simulating (explorer/grid.py, ``SearchSpace.classify``) and its
checkpoint (explorer/grid_checkpoint.py): the same reason codes, counts, front and CSV as simulating
every point (the previous path, kept here as the reference), whatever the chunking, the worker
count or how often the grid was interrupted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from test_space import SHIPPED, random_samples

import explorer.grid as grid
from explorer.cli import main
from explorer.design import build_design
from explorer.errors import SpecError
from explorer.frontier import pareto_mask
from explorer.grid_checkpoint import GridCheckpoint, checkpoint_path
from explorer.simulate import simulate
from explorer.space import _simulator_structure, load_space

ROOT = Path(__file__).resolve().parents[1]

#: A small grid (110,592 points) with points of every reason the grid can give: shape rules
#: 101-105, capacity band 110/111, simulator 1-7, SLOs 120/121, and 72 feasible points.
FAIL = {
    "hardware": ["h100", "b200"],  # fp4 on H100: 1
    "shape": {"hidden": [2048, 2112],  # 2112 is no multiple of head_dim 128: 101
              "ffn": [5632, 6100],  # 6100 does not split over tp=8: 5
              "layers": [2, 16], "kv_heads": [4, 3],  # 3 does not divide 16 heads: 102
              "experts": [0, 8], "experts_per_token": [2, 10],  # 10 > 8: 103
              "expert_ffn": 1024, "dense_layers": [0, 16],  # 16 >= layers: 104
              "sliding_window": 1024, "sliding_layers": [0, 12]},  # 12 > 2 layers: 105
    "workload": {"isl": [2048, 4000000], "osl": 512},  # 4M-token prompts do not fit: 6
    "deployment": {"batch": [1, 4096], "precision": ["bf16", "fp4"], "tp": [1, 3, 8],  # tp=3: 2
                   "pp": [1, 2, 32], "ep": [1, 2, 3]},  # pp=32 > 16 layers: 3; ep: 4; batch 1 < pp: 7
    "constraints": {"capacity": {"total_B": [0.7, 6], "active_B": [1.0, 4]},  # 2 layers: 110; MoE: 111
                    "min_tokens_per_s_per_user": 40, "max_ttft_s": 2.0},  # 120, 121
}
EVERY_REASON = {0, 1, 2, 3, 4, 5, 6, 7, 101, 102, 103, 104, 105, 110, 111, 120, 121}
#: Codes ``classify`` decides (evaluate gives them before any later rule).
DECIDED = (1, 2, 3, 4, 5, 101, 102, 103, 104, 105, 110, 111, 112)


def _write(tmp_path: Path, data: dict, name: str = "fail.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def _patched(patch: dict) -> dict:
    data = yaml.safe_load(yaml.safe_dump(FAIL))
    for path, value in patch.items():
        node = data
        keys = path.split(".")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value
    return data


@pytest.fixture(scope="module")
def fail_space(tmp_path_factory):
    return load_space(_write(tmp_path_factory.mktemp("screen"), FAIL))


def _quality_space(tmp_path: Path):
    """FAIL with a quality limit (112; precision joins the block axes)."""
    data = _patched({"training.tokens": 1.0e12, "constraints.quality": {"max_loss": 2.28}})
    return load_space(_write(tmp_path, data, "quality.yaml"))


# ------------------------------------------------------------------ the previous path: simulate everything


def _old_chunk(space, start, stop):
    """explorer.grid._score_chunk as it was: every point simulated."""
    flat = np.arange(start, stop, dtype=np.int64)
    ev = space.evaluate(grid.decode(space, flat), len(flat), detail=False)
    codes, counts = np.unique(ev.code, return_counts=True)
    feas = ev.feasible
    idx, obj = flat[feas], ev.objectives[feas]
    m = pareto_mask(obj, space.directions) if len(idx) else np.zeros(0, dtype=bool)
    return grid._Chunk({int(c): int(k) for c, k in zip(codes, counts, strict=True)}, int(feas.sum()), idx[m], obj[m],
                       len(flat))


@pytest.fixture
def old_path(monkeypatch):
    """Within the test: the grid simulates every point of every chunk (one process only)."""
    def use_old():
        monkeypatch.setattr(grid, "_score_chunk", _old_chunk)
        monkeypatch.setattr(grid, "_plan", lambda space, bounds: (list(range(len(bounds))), {}))
    return use_old


def _same(a: grid.GridResult, b: grid.GridResult) -> None:
    pd.testing.assert_frame_equal(a.frame, b.frame)
    assert (a.total, a.feasible, a.reason_counts, a.kept_all) == (b.total, b.feasible, b.reason_counts, b.kept_all)


def _all_points(space):
    n = space.grid_size()
    cols = grid.decode(space, np.arange(n, dtype=np.int64))
    return cols, n


# ------------------------------------------------------------------ classification


def test_classify_gives_exactly_the_codes_evaluate_decides_first(fail_space, tmp_path):
    for space in (fail_space, _quality_space(tmp_path)):
        cols, n = _all_points(space)
        ev = space.evaluate(cols, n, detail=False)
        got = space.classify(cols, n)
        assert np.array_equal(got, np.where(np.isin(ev.code, DECIDED), ev.code, 0))
        if space is fail_space:
            assert set(np.unique(ev.code).tolist()) == EVERY_REASON  # the grid exercises every reason
        else:
            assert 112 in set(ev.code.tolist()) and 0 in set(ev.code.tolist())
        # without the structural checks the code depends only on screen_params
        rng = np.random.default_rng(1)
        names, values, _ = space.grid
        shuffled = {k: (v if k in space.screen_params else values[names.index(k)][rng.integers(0, len(values[names.index(k)]), n)])
                    for k, v in cols.items()}
        assert np.array_equal(space.classify(cols, n, structure=False), space.classify(shuffled, n, structure=False))


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_classify_agrees_with_evaluate_on_the_shipped_spaces(path):
    space = load_space(path)
    for seed in (0, 1):
        samples = random_samples(space, 1500, seed)
        ev = space.evaluate(samples, 1500, detail=False)
        # disaggregated rows' simulator reasons are left to the simulator (explorer/disagg.py scores their pools)
        disagg = np.asarray(ev.cols["serving"]) == "disaggregated" if "serving" in ev.cols else np.zeros(1500, bool)
        decided = np.isin(ev.code, DECIDED) & ~(disagg & np.isin(ev.code, (1, 2, 3, 4, 5)))
        assert np.array_equal(space.classify(samples, 1500), np.where(decided, ev.code, 0))


def test_structural_prediction_matches_the_simulator_on_random_designs():
    rng = np.random.default_rng(7)
    n = 4000

    def pick(*v):
        return np.asarray(v)[rng.integers(0, len(v), n)]

    experts = pick(0, 0, 8, 16, 60)
    values = {
        "hardware": pick("h100", "b200", "mi300x", "l40s", "a100"), "precision": pick("bf16", "fp8", "fp4", "w4a16"),
        "isl": 1024, "osl": 256, "batch": pick(1, 2, 16, 256), "tp": pick(1, 2, 3, 4, 8), "pp": pick(1, 2, 3, 40),
        "ep": pick(1, 2, 4, 3, 8), "dp": pick(1, 2, 3), "hidden": pick(2048, 4096), "heads": pick(16, 24, 32),
        "kv_heads": pick(1, 2, 8), "head_dim": 128, "ffn": pick(5632, 6000, 14336), "layers": pick(4, 32),
        "vocab": 32000, "experts": experts, "experts_per_token": np.where(experts > 0, 2, 0),
        "expert_ffn": np.where(experts > 0, 1024, 0),
    }
    design, table = build_design(values)
    sim = simulate(design, table, detail=False)["reason_code"]
    pred = _simulator_structure(design, table)
    assert np.array_equal(pred, np.where(np.isin(sim, (1, 2, 3, 4, 5)), sim, 0))
    assert set(np.unique(pred).tolist()) == {0, 1, 2, 3, 4, 5}


# ------------------------------------------------------------------ the grid: same results as simulating every point


@pytest.mark.parametrize("chunk", [37, 500, 4096, 50_000])
def test_grid_equals_the_full_path(fail_space, old_path, monkeypatch, chunk):
    new = grid.run_grid(fail_space, chunk=chunk)  # 110,592 points: the front + sample path
    assert not new.kept_all and new.simulated < new.total // 50
    assert new.chunks_skipped > 0 or chunk == 50_000
    old_path()
    _same(new, grid.run_grid(fail_space, chunk=chunk))


def test_grid_equals_the_full_path_with_every_row_and_quality(tmp_path, old_path, monkeypatch):
    space = _quality_space(tmp_path)
    monkeypatch.setattr(grid, "KEEP_ALL_MAX", 200_000)
    new = grid.run_grid(space, chunk=3000)
    assert new.kept_all and 112 in new.reason_counts and new.chunks_skipped > 0
    assert (new.frame["reason_code"].value_counts().sort_index().to_dict() == new.reason_counts)
    old_path()
    _same(new, grid.run_grid(space, chunk=3000))


def test_whole_blocks_are_counted_without_scoring(fail_space, monkeypatch):
    calls: list[tuple[int, int]] = []
    real = grid._score_chunk

    def spy(space, a, b):
        calls.append((a, b))
        return real(space, a, b)

    monkeypatch.setattr(grid, "_score_chunk", spy)
    g = grid.run_grid(fail_space, chunk=216)  # one chunk per block: blocks failing a shape rule are never scored
    assert len(calls) == g.chunks_run < g.total // 216 and g.chunks_skipped == g.total // 216 - len(calls)
    assert sum(g.reason_counts.values()) == g.total


def test_cli_csvs_are_byte_identical_across_workers_and_the_full_path(tmp_path, old_path):
    path = _write(tmp_path, FAIL)
    base = ["sweep", str(path), "--sampler", "grid", "--no-report", "--study", "g"]
    assert main([*base, "--workers", "2", "--out", str(tmp_path / "w2")]) == 0
    assert main([*base, "--out", str(tmp_path / "w1")]) == 0
    old_path()
    assert main([*base, "--out", str(tmp_path / "old")]) == 0
    for name in ("g.csv", "g.reasons.csv"):
        want = (tmp_path / "old" / name).read_bytes()
        assert (tmp_path / "w1" / name).read_bytes() == want == (tmp_path / "w2" / name).read_bytes()
    assert not (tmp_path / "w1" / "g.grid-checkpoint").exists()  # removed once the outputs are written


# ------------------------------------------------------------------ resuming


def test_an_interrupted_grid_resumes_with_nothing_lost(fail_space, tmp_path, monkeypatch):
    want = grid.run_grid(fail_space, chunk=500)
    ckpt = tmp_path / "g.grid-checkpoint"
    real = grid._score_chunk
    calls: list[int] = []

    def stop_after_five(space, a, b):
        if len(calls) == 5:
            raise KeyboardInterrupt
        calls.append(a)
        return real(space, a, b)

    monkeypatch.setattr(grid, "_score_chunk", stop_after_five)
    with pytest.raises(KeyboardInterrupt):
        grid.run_grid(fail_space, chunk=500, checkpoint=ckpt)
    assert len(ckpt.read_text().splitlines()) == 1 + 5  # header + every finished chunk
    monkeypatch.setattr(grid, "_score_chunk", real)
    with open(ckpt, "ab") as f:  # a writer killed mid-line
        f.write(b'{"i": 12, "a": 6000, "b": 65')
    got = grid.run_grid(fail_space, chunk=500, checkpoint=ckpt)
    assert got.chunks_resumed == 5 and got.chunks_run == want.chunks_run - 5
    _same(want, got)
    again = grid.run_grid(fail_space, chunk=500, checkpoint=ckpt)  # the finished file: nothing to score
    assert again.chunks_run == 0
    _same(want, again)
    # another chunk size, or another space, never reuses the file
    other = grid.run_grid(fail_space, chunk=400, checkpoint=ckpt)
    assert other.chunks_resumed == 0
    _same(grid.run_grid(fail_space, chunk=400), other)
    changed = load_space(_write(tmp_path, _patched({"constraints.max_ttft_s": 1.0}), "fail.yaml"))
    assert grid.run_grid(changed, chunk=400, checkpoint=ckpt).chunks_resumed == 0


def test_a_checkpoint_is_written_by_one_run_at_a_time(fail_space, tmp_path):
    bounds = [(0, 10)]
    first = GridCheckpoint(tmp_path / "c", fail_space, 10, 10)
    first.open({0}, bounds)
    try:
        with pytest.raises(SpecError, match="another run of this grid is writing"):
            GridCheckpoint(tmp_path / "c", fail_space, 10, 10).open({0}, bounds)
    finally:
        first.close()


_RUNNER = """
import sys
import explorer.grid as grid
grid.GRID_CHUNK = 400
from explorer.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _sweep(args: list[str]) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    return subprocess.Popen([sys.executable, "-c", _RUNNER, *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def _wait_for_chunks(ckpt: Path, proc: subprocess.Popen, k: int) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if len(ckpt.read_bytes().splitlines()) > k:
                return
        except OSError:
            pass
        time.sleep(0.02)
    pytest.fail(f"the sweep did not write {k} chunks (rc {proc.poll()})")


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_killed_cli_grid_resumes_to_the_uninterrupted_csv(tmp_path, how):
    path = _write(tmp_path, FAIL)
    base = ["sweep", str(path), "--sampler", "grid", "--no-report", "--study", "g"]
    ref = _sweep([*base, "--out", str(tmp_path / "ref")])
    assert ref.wait(300) == 0, ref.stderr.read() if ref.stderr else ""
    out = tmp_path / "cut"
    ckpt = checkpoint_path(out, "g")
    proc = _sweep([*base, "--out", str(out)])
    _wait_for_chunks(ckpt, proc, 3)
    proc.send_signal(getattr(signal, how))
    rc = proc.wait(60)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if how == "SIGTERM":
        assert rc == 130 and "run the same command again to resume" in err, err
    else:
        assert rc == -signal.SIGKILL
    assert ckpt.exists() and not (out / "g.csv").exists()
    header, *records = ckpt.read_text().splitlines()
    assert json.loads(header)["format"] == "explorer-grid-checkpoint" and len(records) >= 3
    again = _sweep([*base, "--out", str(out)])
    assert again.wait(300) == 0
    err = again.stderr.read().decode() if again.stderr else ""
    assert "resuming the grid" in err, err
    for name in ("g.csv", "g.reasons.csv"):
        assert (out / name).read_bytes() == (tmp_path / "ref" / name).read_bytes()
    assert not ckpt.exists()
