"""Batch completion (explorer/refine.py): every batch of the front's designs, scored in one call."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from test_space import space_from

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


def test_every_batch_of_every_front_configuration(space):
    df = scored(space)
    extra = batch_completion(space, df)
    keys = [k for k in space.searched if k != "batch"]
    front = df[front_table(df, space.objectives, "feasible").to_numpy()]
    configs = front[keys].drop_duplicates()
    assert len(batch_values(space)) == 64
    # each front configuration now has all 64 batch values between the search's rows and the new ones
    both = pd.concat([df, extra], ignore_index=True)
    for _, c in configs.iterrows():
        m = np.ones(len(both), dtype=bool)
        for k in keys:
            m &= (both[k] == c[k]).to_numpy()
        assert set(both.loc[m, "batch"]) >= set(range(1, 65))
    # nothing the search already scored is repeated; numbering continues after the trials
    assert not extra.duplicated(keys + ["batch"]).any()
    merged = extra.merge(df[keys + ["batch"]], on=keys + ["batch"], how="inner")
    assert merged.empty
    assert extra["trial"].tolist() == list(range(len(df), len(df) + len(extra)))
    assert set(extra["source"]) == {"batch-sweep"}


def test_completion_never_shrinks_the_front(space):
    df = scored(space, seed=3)
    objs = list(space.objectives)
    from explorer.frontier import hypervolume

    before = hypervolume(df[df.feasible][objs].to_numpy(), space.directions, space.hypervolume_reference())
    both = pd.concat([df, batch_completion(space, df)], ignore_index=True)
    after = hypervolume(both[both.feasible][objs].to_numpy(), space.directions, space.hypervolume_reference())
    assert after >= before


def test_fixed_batch_still_completes_the_other_deployment_knobs(tmp_path):
    fixed = load_space(space_from(tmp_path, {"deployment.batch": 8}, name="f.yaml"))
    df = scored(fixed, 30)
    extra = batch_completion(fixed, df)
    assert set(extra["batch"]) <= {8}
    deploy = [k for k in fixed.searched if k in ("tp", "pp", "ep", "dp", "precision", "hardware")]
    assert deploy, "the test space searches deployment knobs"
    both = pd.concat([df, extra], ignore_index=True)
    front = df[front_table(df, fixed.objectives, "feasible").to_numpy()]
    shape_keys = [k for k in fixed.searched if k not in deploy]
    n_dep = int(np.prod([len(dict(fixed.grid_axes())[k]) for k in deploy]))
    for _, row in front[shape_keys].drop_duplicates().iterrows():
        m = np.ones(len(both), dtype=bool)
        for k in shape_keys:
            m &= (both[k] == row[k]).to_numpy()
        assert len(both.loc[m, deploy].drop_duplicates()) == n_dep


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
    assert (df["source"] == "batch-sweep").sum() > 0
    assert df["trial"].is_unique
    assert main(["sweep", str(path), "--out", str(tmp_path / "p"), "--no-report", "--trials", "25",
                 "--no-refine"]) == 0
    assert len(pd.read_csv(tmp_path / "p" / "s.csv")) == 25


def test_refine_batch_must_be_a_flag(tmp_path):
    with pytest.raises(SpecError, match="refine_batch"):
        load_space(space_from(tmp_path, {"search.refine_batch": "yes"}))
