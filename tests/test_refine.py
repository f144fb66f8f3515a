"""Batch completion (explorer/refine.py): every batch of the front's designs, scored in one call."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from test_space import space_from

from explorer import shapes as shape_trials
from explorer.cli import main
from explorer.errors import SpecError
from explorer.frontier import front_table
from explorer.refine import batch_completion, batch_values
from explorer.space import load_space


@pytest.fixture
def space(tmp_path):
    return load_space(space_from(tmp_path, {"deployment.batch": {"low": 1, "high": 64, "log": True}}))


def scored(space, n=40, seed=0):
    rng = np.random.default_rng(seed)
    samples = {name: [vals[i] for i in rng.integers(0, len(vals), n)] for name, vals in space.grid_axes()}
    df = space.score(samples, n)
    df.insert(0, "trial", np.arange(n))
    return df


def test_completion_scores_every_deployment_and_keeps_the_front(space, monkeypatch):
    import explorer.refine as refine

    df = scored(space)
    scored_frames = []
    real = refine.complete_shapes

    def spy(sp, shapes):
        out = real(sp, shapes)
        scored_frames.append(out)
        return out

    monkeypatch.setattr(refine, "complete_shapes", spy)
    extra = batch_completion(space, df, polish=False)
    shape_keys, deploy = shape_trials.split(space)
    front = df[front_table(df, space.objectives, "feasible").to_numpy()]
    n_shapes = len(front[shape_keys].drop_duplicates())
    axes = dict(space.grid_axes())
    n_dep = int(np.prod([len(axes[k]) for k in deploy])) * len(batch_values(space))
    assert len(batch_values(space)) == 64
    # every deployment (batch x tp x ... ) of every front shape was scored
    assert len(scored_frames) == 1 and len(scored_frames[0]) == n_shapes * n_dep
    assert extra.attrs["scored"] <= n_shapes * n_dep
    # kept: exactly the new points on the combined front, none already in the table
    keys = list(space.searched)
    both = pd.concat([df, extra], ignore_index=True)
    on = front_table(both, space.objectives, "feasible").to_numpy()
    assert on[len(df):].all()
    assert extra.merge(df[keys], on=keys, how="inner").empty
    assert extra["trial"].tolist() == list(range(len(df), len(df) + len(extra)))
    assert set(extra["source"]) <= {"batch-sweep", "polish"}


def test_completion_never_shrinks_the_front(space):
    df = scored(space, seed=3)
    objs = list(space.objectives)
    from explorer.frontier import hypervolume

    before = hypervolume(df[df.feasible][objs].to_numpy(), space.directions, space.hypervolume_reference())
    both = pd.concat([df, batch_completion(space, df)], ignore_index=True)
    after = hypervolume(both[both.feasible][objs].to_numpy(), space.directions, space.hypervolume_reference())
    assert after >= before


def test_fixed_batch_still_completes_the_other_deployment_knobs(tmp_path):
    import explorer.refine as refine

    fixed = load_space(space_from(tmp_path, {"deployment.batch": 8}, name="f.yaml"))
    df = scored(fixed, 30)
    shape_keys, deploy = shape_trials.split(fixed)
    assert deploy, "the test space searches deployment knobs"
    front = df[front_table(df, fixed.objectives, "feasible").to_numpy()]
    shapes = front[shape_keys].drop_duplicates()
    out = refine.complete_shapes(fixed, shapes)
    n_dep = int(np.prod([len(dict(fixed.grid_axes())[k]) for k in deploy]))
    assert len(out) == len(shapes) * n_dep and set(out["batch"]) == {8}
    assert len(out[deploy].drop_duplicates()) == n_dep


def test_polish_steps_one_parameter_one_notch():
    import explorer.refine as refine

    sp = load_space("search_spaces/quick.yaml")
    shape_keys, _ = shape_trials.split(sp)
    base = pd.DataFrame([{k: dict(sp.grid_axes())[k][1] for k in shape_keys}])
    nb = refine._neighbours(sp, base)
    diff = (nb[shape_keys].to_numpy() != base[shape_keys].to_numpy()).sum(axis=1)
    assert (diff == 1).all() and len(nb) == 2 * len(shape_keys) - sum(
        1 for k in shape_keys if len(dict(sp.grid_axes())[k]) == 2)


def test_nothing_to_complete_when_nothing_is_feasible(tmp_path):
    sp = load_space(space_from(tmp_path, {"deployment.batch": {"low": 1, "high": 8}}, name="g.yaml"))
    df = scored(sp, 10)
    df["feasible"] = False
    assert len(batch_completion(sp, df)) == 0


def test_sweep_marks_search_and_completion_rows(tmp_path):
    path = space_from(tmp_path, {"deployment.batch": {"low": 1, "high": 64, "log": True},
                                 "search.refine_batch": True})
    assert main(["sweep", str(path), "--out", str(tmp_path / "o"), "--no-report", "--trials", "25"]) == 0
    df = pd.read_csv(tmp_path / "o" / "s.csv")
    assert (df["source"] == "search").sum() == 25
    # refinement rows that reach the final front, each marked by the step that found it (which step
    # gets there first depends on the calibration: shape polish or the completion's batch ladder)
    assert df["source"].isin(["batch-sweep", "polish", "batch-window"]).sum() > 0
    assert set(df["source"]) <= {"search", "batch-sweep", "polish", "batch-window"}
    assert df["trial"].is_unique
    assert main(["sweep", str(path), "--out", str(tmp_path / "p"), "--no-report", "--trials", "25",
                 "--no-refine"]) == 0
    assert len(pd.read_csv(tmp_path / "p" / "s.csv")) == 25


def test_refine_batch_must_be_a_flag(tmp_path):
    with pytest.raises(SpecError, match="refine_batch"):
        load_space(space_from(tmp_path, {"search.refine_batch": "yes"}))
