"""Shape trials (explorer/shapes.py): Optuna samples shapes, each scored under every deployment at once."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from test_space import space_from
from test_sweep_cli import journal_trials, sweep

from explorer.errors import SpecError
from explorer.frontier import front_table, hypervolume
from explorer.search import distributions, open_study, optimize, study_frame, trial_unit, with_unit
from explorer.shapes import Scanner, split, thin
from explorer.space import load_space
from explorer.storage import StorageSpec, storage_spec

MEMORY = StorageSpec("memory", ":memory:")
TINY = {"shape.hidden": {"low": 2048, "high": 5120, "step": 512},
        "shape.ffn": {"low": 8192, "high": 16384, "step": 2048},
        "shape.layers": {"low": 16, "high": 32, "step": 4},
        "deployment.batch": {"low": 1, "high": 256, "log": True},
        "search.trial_unit": "shape", "search.scan_batches": 8}


@pytest.fixture
def space(tmp_path):
    return load_space(space_from(tmp_path, TINY))


def _hv(space, df):
    f = df[df["feasible"].to_numpy(dtype=bool)]
    return hypervolume(f[list(space.objectives)].to_numpy(), space.directions, space.hypervolume_reference())


def _everything(space, shapes: list[dict], batches: int = 8) -> pd.DataFrame:
    """Every deployment of every shape, scored point by point (the reference)."""
    sc = Scanner(space, batches=batches)
    rows = [np.arange(sc.n_dep)] * len(shapes)
    return space.score(sc.samples(shapes, rows), len(shapes) * sc.n_dep)


def test_trials_sample_only_the_shape(space):
    assert trial_unit(space) == "shape"
    assert set(distributions(space)) == {"hidden", "ffn", "layers"}
    assert split(space) == (["hidden", "ffn", "layers"], ["precision", "tp"])
    assert trial_unit(with_unit(space, "point")) == "point"
    assert "batch" in distributions(with_unit(space, "point"))


@pytest.mark.parametrize("sampler", ["tpe", "nsga2", "random"])
def test_each_trial_is_told_its_shapes_front_and_the_table_holds_every_front_row(space, sampler):
    run = optimize(space, MEMORY, "s", trials=30, sampler=sampler, seed=2)
    trials = run.study.get_trials(deepcopy=False)
    assert len(trials) == 30 and all(math.isfinite(v) for t in trials for v in t.values)
    assert all(set(t.constraints) == set(space.constraint_keys()) for t in trials)
    df, states = study_frame(space, run.study)
    assert states == {"COMPLETE": 30}
    objs = list(space.objectives)
    shapes = []
    for t in trials:
        rows = df[df["trial"] == t.number]
        ok = all(v <= 0 for v in t.constraints.values())
        assert ok == bool(rows["feasible"].all()) and (ok or len(rows) == 1)
        if ok:  # told the extremes of its own front, which the table holds in full
            assert np.allclose(t.values, rows[objs].max().to_numpy(), rtol=1e-12)
            assert front_table(rows, space.objectives, "feasible").all()
        shapes.append(t.params)
    # the table's front is the front of every scored point of the sampled shapes
    ref = _everything(space, shapes)
    assert _hv(space, df) == pytest.approx(_hv(space, ref), rel=1e-12)
    assert (~df["feasible"]).any(), "the space should have shapes outside the capacity band"


def test_scans_do_not_depend_on_grouping(space):
    shapes = [{"hidden": h, "ffn": f, "layers": 24.0} for h in (2048.0, 3072.0, 4096.0) for f in (8192.0, 12288.0)]
    together = Scanner(space).frame(shapes, list(range(len(shapes))))
    apart = pd.concat([Scanner(space).frame([s], [i]) for i, s in enumerate(shapes)], ignore_index=True)
    pd.testing.assert_frame_equal(together, apart)


def test_shape_trials_beat_a_fixed_budget_of_random_points(space):
    """20 shape trials (no refinement) against 20 times as many random point trials."""
    shapes = optimize(space, MEMORY, "a", trials=20, sampler="tpe", seed=0)
    points = optimize(with_unit(space, "point"), MEMORY, "b", trials=400, sampler="random", seed=0)
    hv_shapes = _hv(space, study_frame(space, shapes.study)[0])
    hv_points = _hv(space, study_frame(with_unit(space, "point"), points.study)[0])
    assert hv_shapes >= hv_points


def test_sweep_is_reproducible_across_runs_and_rebuilds_the_same_table(tmp_path):
    p = space_from(tmp_path, {**TINY, "search.refine_batch": True})
    for d in ("a", "b"):
        assert sweep(p, tmp_path / d, "--trials", "15", "--seed", "4") == 0
    a, b = (tmp_path / d / "s.csv" for d in ("a", "b"))
    assert a.read_bytes() == b.read_bytes()
    assert sweep(p, tmp_path / "a", "--trials", "0") == 0  # rebuilt from the study: same table
    assert (tmp_path / "a" / "s.csv").read_bytes() == b.read_bytes()


def test_workers_run_exactly_the_requested_shape_trials(tmp_path):
    p = space_from(tmp_path, TINY)
    out = tmp_path / "o"
    assert sweep(p, out, "--trials", "13", "--workers", "2", "--study", "w") == 0
    trials = journal_trials(out / "w.journal", "w")
    assert sorted(t.number for t in trials) == list(range(13))
    df = pd.read_csv(out / "w.csv")
    assert set(df["trial"]) == set(range(13))
    # the table is the scan of the trials' shapes, whoever ran them
    ref = Scanner(load_space(p)).frame([t.params for t in sorted(trials, key=lambda t: t.number)], list(range(13)))
    assert np.allclose(df[["tokens_per_s_per_gpu", "tokens_per_s_per_user"]].to_numpy(),
                       ref[["tokens_per_s_per_gpu", "tokens_per_s_per_user"]].to_numpy())


def test_a_study_of_the_other_unit_is_refused(space, tmp_path):
    spec = storage_spec(None, tmp_path, "u", 1)
    optimize(with_unit(space, "point"), spec, "u", trials=3, sampler="random", seed=0)
    with pytest.raises(SpecError, match="point trials"):
        open_study(space, spec, "u")
    assert sweep(space_from(tmp_path, TINY), tmp_path / "x", "--trials", "3", "--study", "v",
                 "--trial-unit", "point") == 0


def test_trial_unit_is_validated(tmp_path):
    with pytest.raises(SpecError, match="trial_unit"):
        load_space(space_from(tmp_path, {"search.trial_unit": "design"}))


def test_polish_after_shape_trials_moves_two_parameters_and_fills_batch_windows(space):
    import explorer.refine as refine

    base = pd.DataFrame([{"hidden": 3072.0, "ffn": 12288.0, "layers": 24.0}])
    one = refine._neighbours(space, base)
    both = refine._neighbours(space, base, pairs=True)
    moved = (both[["hidden", "ffn", "layers"]].to_numpy() != base.to_numpy()).sum(axis=1)
    assert len(one) == 6 and set(moved) == {1, 2} and not (moved == 0).any()
    df = study_frame(space, optimize(space, MEMORY, "w", trials=8, sampler="random", seed=0).study)[0]
    front = df[front_table(df, space.objectives, "feasible").to_numpy()].head(3)
    win = refine.batch_windows(space, front)
    full = refine.batch_values(space)
    ratio = max(np.diff(np.log(thin(full, space.search.scan_batches)))) + 1e-9
    for _, r in win.iterrows():
        near = front[(front[["hidden", "ffn", "layers", "precision", "tp"]] == r[
            ["hidden", "ffn", "layers", "precision", "tp"]]).all(axis=1)]
        assert (np.abs(np.log(near["batch"].to_numpy(dtype=float) / r["batch"])) <= ratio).any()
    assert set(win["source"]) == {"batch-window"}
    extra = refine.batch_completion(space, df.assign(source="search"))
    assert set(extra["source"]) <= {"batch-sweep", "polish", "batch-window"}
    assert _hv(space, pd.concat([df, extra])) >= _hv(space, df)
