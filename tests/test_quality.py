"""Predicted quality (explorer/quality.py, explorer/constraints.py, explorer/decision.py): the laws
reproduce their papers' own numbers inside their ranges, L̂ is monotone where it must be, every
70B+ point is flagged as an extrapolation, quality is off unless asked for, and the space, CLI,
report and comparison carry it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from explorer import quality as Q
from explorer.cli import main
from explorer.errors import SpecError
from explorer.frontier import hypervolume, hypervolume_history, pareto_mask
from explorer.model import ModelShape, get_preset, presets
from explorer.space import space_from_text

ROOT = Path(__file__).resolve().parents[1]
SPACES = ROOT / "search_spaces"


def gpt(layers: int, d_model: int, vocab: int = 50257) -> dict[str, float]:
    """A GPT-2-style shape as Kaplan et al. trained them: MHA, d_head 64, non-gated 4x MLP, tied embeddings."""
    return ModelShape(hidden=d_model, ffn=4 * d_model, layers=layers, heads=d_model // 64, kv_heads=d_model // 64,
                      head_dim=64, vocab=vocab, gated=False, tied=True).columns()


# ------------------------------------------------------------------------------------------------
# the papers' own numbers
# ------------------------------------------------------------------------------------------------


def test_epoch_fit_compute_optimal_tokens_per_parameter_is_about_20():
    # Besiroglu et al. 2024: compute-optimal D/N about 20 (QUALITY_LAWS.md: 18.4 at Chinchilla's 5.76e23 FLOP)
    n, d = Q.compute_optimal(5.76e23)
    assert 6 * n * d == pytest.approx(5.76e23)
    assert d / n == pytest.approx(18.4, abs=0.15)
    # and it is the minimum of the law along the iso-FLOP line
    ns = np.geomspace(n / 3, n * 3, 2001)
    loss = Q.epoch_loss(ns, 5.76e23 / (6 * ns))
    assert ns[np.argmin(loss)] == pytest.approx(n, rel=0.01)


def test_epoch_constants_are_the_notebook_mle():
    # epoch-research/analyzing-chinchilla MLE cell: ln A, ln B, ln E = 6.17796, 7.64273, 0.59711
    assert np.log(Q.EPOCH_A) == pytest.approx(6.17796, abs=2e-4)
    assert np.log(Q.EPOCH_B) == pytest.approx(7.64273, abs=2e-4)
    assert np.log(Q.EPOCH_E_NATS) == pytest.approx(0.59711, abs=3e-4)


def test_kaplan_shallow_wide_within_3_percent_of_deep_narrow():
    # Kaplan et al. 2020 Fig. 5: (n_layer, d_model) = (6, 4288) reaches a loss within 3 % of (48, 1600)
    # at about 1.4B non-embedding parameters; the deeper one is better
    shallow, deep = gpt(6, 4288), gpt(48, 1600)
    for c in (shallow, deep):
        counts = Q.param_counts(c)
        nonemb = float(counts["total"] - counts["embedding_in"] - counts["embedding_out"])
        assert 1.2e9 < nonemb < 1.6e9
    a = float(Q.predict_loss(shallow, 2.3e10)["predicted_loss"][0])
    b = float(Q.predict_loss(deep, 2.3e10)["predicted_loss"][0])
    assert 0 < a / b - 1 < 0.03


def test_kaplan_depth_coefficient_is_the_refit_of_the_digitised_points():
    pts = np.asarray(Q.KAPLAN_ASPECT_POINTS_1P5B)
    s = np.log(pts[:, 0] / Q.KAPLAN_R_CENTRE) ** 2
    assert Q.KAPLAN_DEPTH_COEFF == pytest.approx(float((pts[:, 1] * s).sum() / (s * s).sum()), abs=1e-5)


def test_bian_optimum_is_the_papers():
    # Bian et al. 2025: x* = 0.08, r* = 1.032 from the Task-3 coefficients; factors are 1 there, above elsewhere
    assert Q.X_OPT == pytest.approx(0.080, abs=5e-4)
    assert Q.R_OPT == pytest.approx(1.032, abs=1e-3)
    assert float(Q.width_factor(Q.X_OPT)) == pytest.approx(1.0)
    assert float(Q.mlp_factor(Q.R_OPT)) == pytest.approx(1.0)
    xs, rs = np.linspace(0.05, 0.12, 50), np.linspace(0.5, 5, 50)
    assert (Q.width_factor(xs) >= 1 - 1e-12).all() and (Q.mlp_factor(rs) >= 1 - 1e-12).all()
    # outside the fitted range the factor is held at the edge, not extrapolated
    assert float(Q.width_factor(0.01)) == pytest.approx(float(Q.width_factor(0.05)))
    assert float(Q.mlp_factor(50.0)) == pytest.approx(float(Q.mlp_factor(5.0)))


# ------------------------------------------------------------------------------------------------
# monotonicity (hypothesis)
# ------------------------------------------------------------------------------------------------

shapes = st.fixed_dictionaries({
    "hidden_units": st.integers(2, 160),  # x 128
    "ffn_ratio": st.sampled_from([1.0, 2.0, 2.6875, 3.5, 4.0, 5.0]),
    "layers": st.integers(2, 160),
    "kv": st.sampled_from([1, 2, 4, 8]),
    "experts": st.sampled_from([0, 0, 8, 64, 256]),
    "k": st.sampled_from([1, 2, 4, 8]),
    "gated": st.booleans(),
})


def _shape(p: dict, scale: int = 1) -> dict[str, float]:
    h = p["hidden_units"] * 128 * scale
    heads = h // 128
    kv = min(p["kv"], heads)
    while heads % kv:
        kv //= 2
    moe = p["experts"] > 0
    return ModelShape(hidden=h, ffn=int(h * p["ffn_ratio"]), layers=p["layers"] * scale, heads=heads, kv_heads=kv,
                      gated=p["gated"], experts=p["experts"], experts_per_token=min(p["k"], p["experts"]) if moe else 0,
                      expert_ffn=int(h * p["ffn_ratio"] / 4) if moe else 0).columns()


@settings(max_examples=300, deadline=None)
@given(shapes, st.floats(1e8, 1e14), st.floats(1.0, 100.0), st.sampled_from(["bf16", "fp8", "fp4", "int4"]))
def test_more_training_tokens_never_raise_the_loss(p, d, more, fmt):
    act = "bf16" if fmt == "int4" else fmt
    a = Q.predict_loss(_shape(p), d, fmt, act)
    b = Q.predict_loss(_shape(p), d * more, fmt, act)
    for k in ("predicted_loss", "predicted_loss_low", "predicted_loss_high"):
        assert b[k][0] <= a[k][0] * (1 + 1e-12)


@settings(max_examples=300, deadline=None)
@given(shapes, st.integers(2, 4), st.floats(1e9, 1e14))
def test_more_parameters_at_a_fixed_shape_ratio_never_raise_the_loss(p, scale, d):
    # width and depth scaled together: H/L, F/H, heads per KV head and the expert layout fixed
    a = Q.predict_loss(_shape(p), d)
    b = Q.predict_loss(_shape(p, scale), d)
    assert b["params_effective"][0] > a["params_effective"][0]
    assert b["predicted_loss"][0] <= a["predicted_loss"][0] * (1 + 1e-12)


# ------------------------------------------------------------------------------------------------
# band, formats, flags, presets
# ------------------------------------------------------------------------------------------------


def test_moe_band_brackets_the_central_estimate_and_dense_has_none():
    dense = Q.preset_loss("llama-3.1-70b")
    assert dense["predicted_loss_low"] == dense["predicted_loss"] == dense["predicted_loss_high"]
    moe = Q.preset_loss("qwen3-235b-a22b")
    assert moe["predicted_loss_low"] < moe["predicted_loss"] < moe["predicted_loss_high"]
    assert moe["params_effective"] == pytest.approx(np.sqrt(235.1e9 * 22.2e9), rel=0.02)
    assert Q.range_names(moe["quality_flags"]).count("MoE") == 1


def test_format_penalties_order_and_sources():
    s = gpt(24, 2048)
    loss = {f: float(Q.predict_loss(s, 1e11, w, a)["predicted_loss"][0])
            for f, (w, a) in {"bf16": ("bf16", "bf16"), "fp8": ("fp8", "fp8"), "w8a16": ("int8", "bf16"),
                              "fp4": ("fp4", "fp4"), "w4a16": ("int4", "bf16")}.items()}
    assert loss["bf16"] < loss["w8a16"] < loss["fp8"] < loss["fp4"] < loss["w4a16"]
    assert loss["fp4"] / loss["bf16"] - 1 == pytest.approx(0.015)  # NVFP4 W4A4: 1.5 % (arXiv 2509.25149)
    assert np.log(3.41 / 3.32) / np.log(3.32) == pytest.approx(Q.WEIGHT_FORMAT_PENALTY["int4"], abs=5e-4)  # AWQ
    mx = Q.predict_loss(s, 1e11, "mxfp4", "fp8")
    assert "format" in Q.range_names(int(mx["quality_flags"][0]))
    with pytest.raises(KeyError):
        Q.predict_loss(s, 1e11, "fp3", "bf16")


def test_small_chinchilla_like_model_is_inside_every_range():
    # a 1.1B GPT-style model at 20 tokens/parameter: inside the Epoch, Bian and Kaplan ranges
    q = Q.predict_loss(gpt(24, 1792, vocab=32000), 2.2e10)
    assert Q.range_names(int(q["quality_flags"][0])) == []
    assert not q["quality_extrapolated"][0]


def test_presets_carry_published_training_tokens_with_sources():
    assert get_preset("llama-3.1-70b").training_tokens == 15e12
    assert get_preset("llama-3.1-8b").training_tokens == 15e12
    assert get_preset("llama-2-70b").training_tokens == 2e12
    assert get_preset("deepseek-v3").training_tokens == 14.8e12
    for p in presets().values():
        assert p.training_tokens_source, p.shape.name
        if p.training_tokens is None:
            assert "not published" in p.training_tokens_source
    with pytest.raises(SpecError, match="no published training tokens"):
        Q.preset_loss("mixtral-8x7b")


def test_training_compute_is_6_n_active_d():
    q = Q.preset_loss("qwen3-235b-a22b")
    from explorer.model import param_counts

    active = float(param_counts(get_preset("qwen3-235b-a22b").shape.columns())["active"])
    assert q["training_flop"] == pytest.approx(6 * active * 36e12)


def _with_training(text: str) -> str:
    return text + "\ntraining:\n  tokens: 1.5e+13\n" if "training:" not in text else text


@pytest.mark.parametrize("name", ["dense-70b-h200", "moe-b200", "llama-3.1-70b-deploy", "dense-vs-moe-iso-quality"])
def test_every_shipped_70b_space_point_is_flagged_extrapolated(name):
    path = SPACES / f"{name}.yaml"
    space = space_from_text(_with_training(path.read_text()), str(path))
    rng = np.random.default_rng(3)
    samples = {}
    for k, p in space.searched.items():
        vals = list(p.choices) if hasattr(p, "choices") else list(p.values()) if not p.log else \
            list(np.unique(np.round(np.geomspace(p.low, p.high, 64))))
        samples[k] = [vals[i] for i in rng.integers(0, len(vals), 400)]
    df = space.score(samples, 400)
    assert df["quality_extrapolated"].all()
    assert df["quality_ranges_left"].str.contains("D>3.2e11").all()  # 15T tokens: beyond the Epoch fit


# ------------------------------------------------------------------------------------------------
# spaces: quality off unless asked, constraint, objective, errors
# ------------------------------------------------------------------------------------------------

#: Fingerprints of the shipped spaces before quality existed: resumed studies must keep matching.
FINGERPRINTS = {"dense-70b-h200": "eba4358fd5a7b885", "llama-3.1-70b-deploy": "0b82954b8621d660",
                "moe-b200": "04c4d961894a07db", "quick": "acbbd3199bc894d8"}


def _samples(space, n=300, seed=1):
    rng = np.random.default_rng(seed)
    out = {}
    for k, p in space.searched.items():
        vals = list(p.choices) if hasattr(p, "choices") else list(p.values()) if not p.log else \
            list(np.unique(np.round(np.geomspace(p.low, p.high, 64))))
        out[k] = [vals[i] for i in rng.integers(0, len(vals), n)]
    return out


def _without_quality(text: str) -> str:
    """A space's text without its ``training`` and ``decision`` sections (dense-70b-h200 has both)."""
    import re

    return re.sub(r"^(training|decision):.*?(?=^\S|\Z)", "", text, flags=re.S | re.M)


@pytest.mark.parametrize("name", sorted(FINGERPRINTS))
def test_spaces_without_quality_keys_score_exactly_as_before(name):
    path = SPACES / f"{name}.yaml"
    plain = space_from_text(_without_quality(path.read_text()), str(path))
    assert not plain.quality_on and plain.fingerprint() == FINGERPRINTS[name]
    df = plain.score(_samples(plain))
    assert not set(Q.QUALITY_COLUMNS) & set(df.columns) and "c_quality" not in df.columns
    # turning quality on (report only, no limit) adds columns and changes nothing else
    on = space_from_text(_with_training(_without_quality(path.read_text())), str(path))
    assert on.quality_on and on.fingerprint() != plain.fingerprint()
    assert on.constraint_keys() == plain.constraint_keys()
    dq = on.score(_samples(plain))
    assert set(Q.QUALITY_COLUMNS) <= set(dq.columns)
    pd.testing.assert_frame_equal(dq[list(df.columns)], df)


ISO = """
hardware: b200
shape:
  hidden: {low: 6144, high: 10240, step: 1024}
  ffn: {low: 16384, high: 32768, step: 4096}
  layers: {low: 48, high: 96, step: 8}
  kv_heads: [4, 8]
training:
  tokens: 15e12
workload: {isl: 1024, osl: 1024}
deployment:
  batch: [16, 64, 256]
  precision: [fp8, fp4]
  tp: [2, 4, 8]
constraints:
  quality: {reference: llama-3.1-70b, max_loss_increase_pct: 0.5}
search: {trials: 20, sampler: random}
"""


def test_quality_constraint_grades_and_explains(tmp_path):
    space = space_from_text(ISO, str(tmp_path / "iso.yaml"))
    assert space.constraint_keys()[-1] == "quality"
    ref = Q.preset_loss("llama-3.1-70b")["predicted_loss"]
    assert space.quality.limit == pytest.approx(ref * 1.005)
    df = space.score(_samples(space, 500))
    assert np.allclose(df["c_quality"], df["predicted_loss"] / space.quality.limit - 1)
    above = df["c_quality"] > 0
    assert above.any() and (~above).any()
    assert (~df.loc[above, "feasible"]).all()
    assert (df.loc[df["reason_code"] == 112, "reason"].str.contains("above the limit")).all()
    assert np.allclose(df["predicted_loss_delta_pct"], (df["predicted_loss"] / ref - 1) * 100)
    assert "within +0.5 % of llama-3.1-70b" in space.constraints_meta()["anchor"]


def test_predicted_loss_objective_gives_three_objective_front(tmp_path):
    text = ISO + "objectives:\n  tokens_per_s_per_gpu: maximize\n  tokens_per_s_per_user: maximize\n" \
                 "  predicted_loss: minimize\n"
    space = space_from_text(text, str(tmp_path / "iso3.yaml"))
    assert space.directions == ["maximize", "maximize", "minimize"]
    ref = space.hypervolume_reference()
    assert ref == [0.0, 0.0, pytest.approx(1.05 * space.quality.limit)]
    ev = space.evaluate(_samples(space, 400))
    vals = ev.objectives[ev.feasible]
    mask = pareto_mask(vals, space.directions)
    # O(n^2) check: no front point is dominated, every other point is
    sign = np.array([1, 1, -1])
    v = vals * sign
    dominated = np.array([((v >= p).all(axis=1) & (v > p).any(axis=1)).any() for p in v])
    assert (mask == ~dominated).all()
    hv = hypervolume(vals, space.directions, ref)
    assert hv > 0
    assert hypervolume_history(vals, space.directions, ref)[-1] == pytest.approx(hv)


def test_three_objective_hypervolume_known_answer():
    # (max, max, min) against the reference (0, 0, 2): boxes 2x3x1 and 1x1x2 overlapping in 1x1x1
    dirs = ("maximize", "maximize", "minimize")
    assert hypervolume(np.array([[2.0, 3.0, 1.0]]), dirs, [0, 0, 2]) == pytest.approx(6.0)
    pts = np.array([[2.0, 3.0, 1.0], [1.0, 1.0, 0.0], [0.5, 0.5, 1.5]])  # the third is dominated
    assert hypervolume(pts, dirs, [0, 0, 2]) == pytest.approx(7.0)
    assert pareto_mask(pts, dirs).tolist() == [True, True, False]


@pytest.mark.parametrize("patch,key", [
    ("training:\n  tokens: 15e12\n", None),
    ("", "training.tokens"),
])
def test_shape_search_needs_training_tokens(tmp_path, patch, key):
    text = ISO.replace("training:\n  tokens: 15e12\n", patch)
    if key is None:
        space_from_text(text, "iso.yaml")
        return
    with pytest.raises(SpecError) as e:
        space_from_text(text, "iso.yaml")
    assert e.value.key == key


@pytest.mark.parametrize("quality,key,match", [
    ("{reference: llama-9, max_loss_increase_pct: 0.5}", "constraints.quality.reference", "unknown model"),
    ("{max_loss_increase_pct: 0.5}", "constraints.quality.max_loss_increase_pct", "relative to a model"),
    ("{reference: llama-3.1-70b, max_loss_increase_pct: 0.5, max_loss: 2.0}", "constraints.quality.max_loss",
     "not both"),
    ("{reference: mixtral-8x7b, max_loss_increase_pct: 0.5}", "constraints.quality.reference",
     "no published training tokens"),
    ("{reference: llama-3.1-70b, max_loss_increase_pct: 0.5, estimate: median}", "constraints.quality.estimate",
     "allowed"),
    ("{reference: llama-3.1-70b, max_los: 2}", "constraints.quality.max_los", "did you mean"),
])
def test_bad_quality_sections_are_one_line_errors(quality, key, match):
    text = ISO.replace("{reference: llama-3.1-70b, max_loss_increase_pct: 0.5}", quality)
    with pytest.raises(SpecError, match=match) as e:
        space_from_text(text, "iso.yaml")
    assert e.value.key == key


def test_max_loss_and_searched_tokens(tmp_path):
    text = ISO.replace("{reference: llama-3.1-70b, max_loss_increase_pct: 0.5}", "{max_loss: 1.99}") \
        .replace("tokens: 15e12", "tokens: [2.0e+12, 1.5e+13]")
    space = space_from_text(text, "iso.yaml")
    assert "training_tokens" in space.searched and space.quality.limit == 1.99
    df = space.score(_samples(space, 200))
    assert set(df["training_tokens"]) == {2e12, 15e12}
    assert (df.loc[df["training_tokens"] == 2e12, "predicted_loss"].min()
            > df.loc[df["training_tokens"] == 15e12, "predicted_loss"].min())


def test_capacity_or_quality_anchor_is_required():
    text = ISO.replace("constraints:\n  quality: {reference: llama-3.1-70b, max_loss_increase_pct: 0.5}\n", "")
    with pytest.raises(SpecError, match="predicted-loss bound"):
        space_from_text(text, "iso.yaml")


# ------------------------------------------------------------------------------------------------
# CLI, decision summary, report, compare
# ------------------------------------------------------------------------------------------------


def test_evaluate_prints_loss_band_and_flags(capsys):
    assert main(["evaluate", "--model", "llama-3.1-70b", "--hardware", "h200", "--tp", "2", "--precision", "fp8",
                 "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    ref = Q.preset_loss("llama-3.1-70b", None, "fp8", "fp8")
    assert r["predicted_loss"] == pytest.approx(ref["predicted_loss"])
    assert r["predicted_loss_band"] == [pytest.approx(r["predicted_loss"])] * 2
    assert r["quality_extrapolated"] is True and r["training_tokens"] == 15e12
    assert main(["evaluate", "--model", "qwen3-235b-a22b", "--hardware", "b200", "--tp", "8", "--ep", "8",
                 "--precision", "fp8", "--training-tokens", "15e12"]) == 0
    out = capsys.readouterr().out
    assert "predicted loss" in out and "band" in out and "EXTRAPOLATED" in out and "1.5e+13 training tokens" in out
    assert main(["evaluate", "--hidden", "4096", "--ffn", "14336", "--layers", "32", "--heads", "32", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["predicted_loss"] is None and r["predicted_loss_band"] is None and r["quality_extrapolated"] is None
    assert main(["evaluate", "--hidden", "4096", "--ffn", "14336", "--layers", "32", "--heads", "32",
                 "--training-tokens", "2e11", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["predicted_loss"] > 0


def test_evaluate_bad_training_tokens_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["evaluate", "--model", "llama-3.1-8b", "--training-tokens", "lots"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len([ln for ln in err if "--training-tokens" in ln]) == 1


def test_sweep_prints_decision_summary_and_report_shows_quality(tmp_path, capsys):
    path = tmp_path / "iso.yaml"
    path.write_text(ISO + "decision:\n  tokens_per_s_per_user: [20, 50]\n")
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out), "--trials", "40", "--no-refine"]) == 0
    text = capsys.readouterr().out
    assert "decision" in text and ">= 20 tok/s/user" in text and ">= 50 tok/s/user" in text
    assert "x llama-3.1-70b" in text or "no feasible design" in text or "does not reach" in text
    df = pd.read_csv(out / "iso.csv")
    for c in ("predicted_loss", "predicted_loss_low", "predicted_loss_high", "quality_extrapolated",
              "training_flop", "predicted_loss_delta_pct", "c_quality"):
        assert c in df.columns
    html = (out / "iso.html").read_text()
    assert 'id="decision"' in html and 'id="fig-quality"' in html and "pred. loss" in html
    assert "outside the quality laws" in html and "Quality anchor: llama-3.1-70b" in html
    assert main(["compare", str(out / "iso.html"), str(out / "iso.csv"), "--json"]) == 0
    cmp = json.loads(capsys.readouterr().out)
    assert cmp["pairs"][0]["loss"]["median"] == pytest.approx(0.0, abs=0.01)
    assert cmp["inputs"][0]["predicted_loss"]["min"] > 0


def test_decision_summary_ratio_and_component(tmp_path):
    from explorer.decision import decision_summary

    space = space_from_text(ISO, str(tmp_path / "iso.yaml"))
    df = space.score(_samples(space, 600))
    s = decision_summary(df, "llama-3.1-70b", [20.0], 1024, 1024, loss_limit=space.quality.limit)
    assert s["reference_precisions"] == ["fp8"]  # fp4 designs are above the limit: only fp8 rows are feasible
    every = decision_summary(df.assign(feasible=True), "llama-3.1-70b", [20.0], 1024, 1024,
                             loss_limit=space.quality.limit)
    assert every["reference_precisions"] == ["fp8"]
    assert every["reference_precisions_excluded"]["fp4"] == pytest.approx(1.5, abs=0.01)  # NVFP4's +1.5 %
    row = s["rows"][0]
    feas = df[df["feasible"] & (df["tokens_per_s_per_user"] >= 20)]
    assert row["throughput"] == pytest.approx(feas["tokens_per_s_per_gpu"].max())
    assert row["throughput_ratio"] == pytest.approx(row["throughput"] / row["reference_throughput"])
    costs = row["component_costs_gpu_s_per_token"]
    for side, thr in (("design", row["throughput"]), ("reference", row["reference_throughput"])):
        assert sum(v for v in costs[side].values() if np.isfinite(v)) == pytest.approx(1 / thr)
    saving = {c: costs["reference"][c] - costs["design"][c] for c in costs["design"]}
    assert row["component"] == max(saving, key=lambda c: saving[c])
