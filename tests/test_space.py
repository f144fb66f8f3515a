"""Search-space YAML: strict loading, derived rules as infeasible points, graded constraints."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from explorer.api import evaluate
from explorer.errors import SpecError
from explorer.model import ModelShape
from explorer.space import Choice, Fixed, FloatRange, IntRange, load_space, parse_space

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "search_spaces").glob("*.yaml"))

BASE = {
    "hardware": "h200",
    "shape": {"hidden": {"low": 2048, "high": 4096, "step": 1024}, "ffn": {"low": 8192, "high": 16384, "step": 4096},
              "layers": {"low": 16, "high": 32, "step": 8}, "kv_heads": 8},
    "workload": {"isl": 1024, "osl": 1024},
    "deployment": {"batch": [1, 8, 64, 256], "precision": ["bf16", "fp8"], "tp": [1, 2]},
    "constraints": {"capacity": {"total_B": [1, 10]}},
    "search": {"trials": 20},
}


def space_from(tmp_path: Path, patch: dict | None = None, drop: tuple[str, ...] = (), name: str = "s.yaml"):
    data = yaml.safe_load(yaml.safe_dump(BASE))
    for path, value in (patch or {}).items():
        node = data
        keys = path.split(".")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value
    for path in drop:
        node = data
        keys = path.split(".")
        for k in keys[:-1]:
            node = node[k]
        del node[keys[-1]]
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def random_samples(space, n: int, seed: int = 0) -> dict[str, list]:
    rng = np.random.default_rng(seed)
    return {name: [vals[i] for i in rng.integers(0, len(vals), n)] for name, vals in space.grid_axes()}


# ---------------------------------------------------------------------------------------- shipped


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_shipped_spaces_load_and_score(path):
    space = load_space(path)
    df = space.score(random_samples(space, 64))
    assert len(df) == 64
    assert np.isfinite(df[list(space.objectives)].to_numpy()).all()
    assert (df["feasible"] == (df[[c for c in df if c.startswith("c_")]] <= 0).all(axis=1)).all()


def test_shipped_set_is_complete():
    assert {p.stem for p in SHIPPED} >= {"dense-70b-h200", "moe-b200", "llama-3.1-70b-deploy", "quick"}
    dense = load_space(ROOT / "search_spaces/dense-70b-h200.yaml")
    assert dense.capacity == {"total": (65e9, 75e9)} and dense.shape_search
    assert isinstance(dense.params["precision"], Choice) and set(dense.params["precision"].choices) == {"bf16", "fp8"}
    moe = load_space(ROOT / "search_spaces/moe-b200.yaml")
    assert set(moe.hardware_names()) == {"b200", "gb200"} and "fp4" in moe.params["precision"].choices
    assert not isinstance(moe.params["ep"], Fixed)
    deploy = load_space(ROOT / "search_spaces/llama-3.1-70b-deploy.yaml")
    assert deploy.uses_model and not deploy.shape_search and set(deploy.hardware_names()) == {"h100", "h200", "b200"}


# ---------------------------------------------------------------------------------------- parsing


def test_parameter_kinds(tmp_path):
    p = space_from(tmp_path, {"deployment.batch": {"low": 1, "high": 512, "log": True},
                              "deployment.moe_imbalance": {"low": 1.0, "high": 1.5, "step": 0.1},
                              "deployment.tp": {"choices": [1, 2, 4]}, "shape.vocab": 32000,
                              "shape.gated": [True, False]})
    s = load_space(p)
    assert s.params["hidden"] == IntRange(2048, 4096, 1024, False)
    assert s.params["batch"] == IntRange(1, 512, 1, True)
    assert s.params["moe_imbalance"] == FloatRange(1.0, 1.5, 0.1, False)
    assert s.params["tp"] == Choice((1, 2, 4))
    assert s.params["gated"] == Choice((1, 0))
    assert s.params["vocab"] == Fixed(32000)
    assert s.params["pp"] == Fixed(1)  # deployment defaults
    assert s.derived == ("heads",)  # heads = hidden / head_dim
    assert s.name == "s" and s.objectives == {"tokens_per_s_per_gpu": "maximize", "tokens_per_s_per_user": "maximize"}
    assert len(s.grid_axes()[-1][1]) == 6  # 1.0..1.5 step 0.1


BAD = [
    ({"hardwre": "h200"}, (), "hardwre", "did you mean 'hardware'"),
    ({"shape.hiden": 4096}, (), "shape.hiden", "did you mean 'hidden'"),
    ({"shape.layers": "eighty"}, (), "shape.layers", "expected a whole number"),
    ({"shape.layers": 12.5}, (), "shape.layers", "whole number"),
    ({"shape.hidden": {"low": 4096, "high": 2048}}, (), "shape.hidden", "empty range"),
    ({"shape.hidden": {"low": 2048, "high": 4000, "step": 1024}}, (), "shape.hidden", "whole number of steps"),
    ({"deployment.batch": {"low": 1, "high": 64, "log": True, "step": 2}}, (), "deployment.batch.step", "log"),
    ({"deployment.batch": {"low": 1, "hihg": 64}}, (), "deployment.batch.hihg", "did you mean 'high'"),
    ({"deployment.tp": []}, (), "deployment.tp", "empty choice list"),
    ({"deployment.tp": [1, 2, 2]}, (), "deployment.tp", "duplicate"),
    ({"deployment.tp": [0, 2]}, (), "deployment.tp[0]", ">= 1"),
    ({"hardware": "h2000"}, (), "hardware", "unknown hardware 'h2000' (did you mean 'h200'?)"),
    ({"hardware": ["h200", "b2OO"]}, (), "hardware[1]", "unknown hardware"),
    ({"deployment.precision": ["bf16", "fp9"]}, (), "deployment.precision[1]", "unknown precision"),
    ({"model": "llama-3.1-8b"}, (), "shape", "not both"),
    ({}, ("constraints",), "constraints.capacity", "smallest model"),
    ({"constraints.capacity": {"total_B": [10, 1]}}, (), "constraints.capacity.total_B", "empty band"),
    ({"constraints.capacity": {}}, (), "constraints.capacity", "total_B"),
    ({"deployment.ep": [1, 2]}, (), "deployment.ep", "MoE"),
    ({"shape.heads": 30}, (), "shape.kv_heads", "does not divide heads 30"),
    ({"shape.experts_per_token": 2}, (), "shape.experts_per_token", "no experts"),
    ({"shape.experts": 8}, (), "shape.experts_per_token", "required"),
    ({"objectives": {"tokens_per_s_per_gpu": "maximise"}}, (), "objectives.tokens_per_s_per_gpu", "did you mean"),
    ({"objectives": {"throughput": "maximize"}}, (), "objectives.throughput", "unknown key"),
    ({"search.sampler": "cmaes"}, (), "search.sampler", "allowed"),
    ({"search.trials": 0}, (), "search.trials", ">= 1"),
    ({"constraints.max_ttft_s": -1}, (), "constraints.max_ttft_s", "> 0"),
    ({}, ("shape.kv_heads",), "shape.kv_heads", "required"),
    ({}, ("workload.osl",), "workload.osl", "required"),
]


@pytest.mark.parametrize("patch,drop,key,words", BAD, ids=[b[2] + ":" + b[3][:20] for b in BAD])
def test_bad_spaces_name_file_and_key(tmp_path, patch, drop, key, words):
    p = space_from(tmp_path, patch, drop)
    with pytest.raises(SpecError) as e:
        load_space(p)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"{p}: {key}:"), msg
    assert words in msg, msg


def test_malformed_yaml_and_empty_file(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("hardware: [h200\n")
    with pytest.raises(SpecError, match="malformed YAML"):
        load_space(p)
    p.write_text("")
    with pytest.raises(SpecError, match="empty file"):
        load_space(p)


def test_band_needed_only_when_the_shape_is_searched(tmp_path):
    fixed_shape = {"shape.hidden": 4096, "shape.ffn": 14336, "shape.layers": 32}
    assert not load_space(space_from(tmp_path, fixed_shape, ("constraints",))).shape_search
    preset = parse_space({"hardware": "h200", "model": "llama-3.1-8b", "workload": {"isl": 128, "osl": 128},
                          "deployment": {"batch": [1, 2]}}, "inline")
    assert preset.uses_model and preset.constraints_meta()["anchor"] == "fixed model"
    with pytest.raises(SpecError, match="no model in the space lies inside the band"):
        parse_space({"hardware": "h200", "model": "llama-3.1-8b", "workload": {"isl": 128, "osl": 128},
                     "deployment": {"batch": 1}, "constraints": {"capacity": {"total_B": [60, 80]}}}, "inline")


def test_float_range_without_step_cannot_be_gridded(tmp_path):
    s = load_space(space_from(tmp_path, {"deployment.moe_imbalance": {"low": 1.0, "high": 1.5}}))
    with pytest.raises(SpecError, match="deployment.moe_imbalance: a float range without 'step' cannot be gridded"):
        s.grid_axes()


def test_fingerprint_tracks_points_not_settings(tmp_path):
    a = load_space(space_from(tmp_path, name="a.yaml"))
    b = load_space(space_from(tmp_path, {"search.trials": 999, "search.seed": 3}, name="b.yaml"))
    c = load_space(space_from(tmp_path, {"constraints.capacity": {"total_B": [1, 11]}}, name="c.yaml"))
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()


# ---------------------------------------------------------------------------------------- scoring


def test_one_point_matches_the_simulator_directly(tmp_path):
    s = load_space(space_from(tmp_path))
    df = s.score({"hidden": [4096], "ffn": [12288], "layers": [32], "batch": [64], "precision": ["fp8"], "tp": [2]})
    r = evaluate(ModelShape(hidden=4096, ffn=12288, layers=32, heads=32, kv_heads=8), "h200", batch=64,
                 isl=1024, osl=1024, tp=2, precision="fp8")
    row = df.iloc[0]
    assert row["heads"] == 32
    for k in ("tokens_per_s_per_gpu", "tokens_per_s_per_user", "ttft_s", "memory_bytes_per_gpu", "params_total"):
        assert row[k] == pytest.approx(r[k], rel=1e-12), k
    assert bool(row["feasible"]) == r["feasible"]


def test_derived_rules_make_points_infeasible_never_raise(tmp_path):
    p = space_from(tmp_path, {"shape.hidden": {"low": 2048, "high": 4096, "step": 64},
                              "shape.experts": [0, 4], "shape.experts_per_token": [1, 8],
                              "shape.expert_ffn": 1024, "shape.dense_layers": [0, 40]})
    s = load_space(p)
    df = s.score({"hidden": [2560, 2112, 2048, 2048, 2048], "ffn": [8192] * 5, "layers": [16] * 5,
                  "experts": [0, 0, 4, 4, 0], "experts_per_token": [1, 1, 8, 1, 8], "dense_layers": [0, 0, 0, 40, 0],
                  "batch": [8] * 5, "precision": ["bf16"] * 5, "tp": [1] * 5})
    assert df["reason_code"].tolist()[:4] == [102, 101, 103, 104]
    assert "kv_heads=8 does not divide heads=20" in df["reason"].iloc[0]
    assert "hidden=2112 is not a multiple of head_dim=128" in df["reason"].iloc[1]
    assert "experts_per_token=8 outside 1..experts=4" in df["reason"].iloc[2]
    assert "dense_layers=40 not below layers=16" in df["reason"].iloc[3]
    assert (df["c_structure"].iloc[:4] == 1.0).all()
    assert not df["feasible"].iloc[:4].any()
    assert df["experts_per_token"].iloc[2] == 8  # the table shows the sampled value
    assert df["experts_per_token"].iloc[4] == 0  # dense rows carry no MoE parameters
    assert np.isfinite(df[["tokens_per_s_per_gpu", "tokens_per_s_per_user", "ttft_s"]].to_numpy()).all()


def test_constraints_agree_with_feasibility(tmp_path):
    p = space_from(tmp_path, {"constraints.min_tokens_per_s_per_user": 60, "constraints.max_ttft_s": 0.02,
                              "constraints.capacity": {"total_B": [2, 6], "active_B": [1, 6]},
                              "deployment.batch": {"low": 1, "high": 1024, "log": True}})
    s = load_space(p)
    assert s.constraint_keys() == ["structure", "memory", "params_total", "params_active",
                                   "min_tokens_per_s_per_user", "max_ttft_s"]
    df = s.score(random_samples(s, 3000))
    cons = df[[f"c_{k}" for k in s.constraint_keys()]]
    assert (df["feasible"] == (cons <= 0).all(axis=1)).all()
    assert set(df["reason_code"]) >= {110, 120}  # (TTFT now carries the runtime's per-request work: few or no rows meet 20 ms)
    f = df[df["feasible"]]
    assert f["params_total"].between(2e9, 6e9).all()
    assert (f["tokens_per_s_per_user"] >= 60).all() and (f["ttft_s"] <= 0.02).all()
    oom = df["reason_code"] == 6
    assert (df.loc[oom, "c_memory"] > 0).all()
    slow = df["reason_code"] == 120
    assert slow.any() and (df.loc[slow, "c_min_tokens_per_s_per_user"] > 0).all()
    assert df.loc[slow, "reason"].str.contains("below the minimum 60").all()


def test_model_choice_space():
    s = parse_space({"hardware": ["h200", "b200"], "model": ["llama-3.1-8b", "Llama-3.1-70B"],
                     "workload": {"isl": 1024, "osl": 256}, "deployment": {"batch": [1, 64], "tp": [1, 4],
                                                                           "precision": ["fp8", "nvfp4"]}}, "inline")
    assert s.params["model"] == Choice(("llama-3.1-8b", "llama-3.1-70b"))
    df = s.score({k: [v[0], v[-1]] for k, v in s.grid_axes()})
    assert df["model"].tolist() == ["llama-3.1-8b", "llama-3.1-70b"]
    assert df["hardware"].tolist() == ["h200", "b200"]
    assert df["precision"].tolist() == ["fp8", "fp4"]  # policy labels


def test_nothing_searched_scores_n_copies(tmp_path):
    s = load_space(space_from(tmp_path, {"shape.hidden": 4096, "shape.ffn": 14336, "shape.layers": 32,
                                         "deployment.batch": 8, "deployment.precision": "bf16", "deployment.tp": 1},
                              ("constraints",)))
    assert s.searched == {} and s.grid_size() == 1
    df = s.score({}, 3)
    assert len(df) == 3 and df["tokens_per_s_per_gpu"].nunique() == 1
