"""Model presets: parameter counts from each shape against the vendors' published figures, aliases,
MLA KV size, and shape validation."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pytest

from explorer.errors import SpecError
from explorer.model import (
    ModelShape,
    get_model,
    get_preset,
    kv_elements_per_token_layer,
    official_active_comparable,
    param_counts,
    preset_names,
    presets,
)

ALL = preset_names()


def tolerance(official: float) -> float:
    """Allowed |ours - official|: 1 %, except for figures published with 2 significant digits,
    where it is one unit of the last digit ("3.3B" +-0.1B, "37B" +-1B, "22B" +-1B)."""
    text = format(Decimal(repr(official / 1e9)).normalize(), "f")  # as written in billions: '3.3', '37', '8.03'
    digits = text.replace(".", "").lstrip("0")
    if len(digits) <= 2 and not text.endswith("0"):
        last = Decimal(text).as_tuple().exponent  # -1 for '3.3', 0 for '37'
        return float(Decimal(1).scaleb(last)) * 1e9
    return 0.01 * official


def test_tolerance_rule_itself():
    assert tolerance(3.3e9) == pytest.approx(0.1e9)
    assert tolerance(37e9) == pytest.approx(1e9)
    assert tolerance(5.1e9) == pytest.approx(0.1e9)
    assert tolerance(8.03e9) == pytest.approx(0.0803e9)
    assert tolerance(235e9) == pytest.approx(2.35e9)
    assert tolerance(340e9) == pytest.approx(3.4e9)  # '340': three digits as written


def test_there_are_presets():
    assert len(ALL) >= 10
    assert {"llama-3.1-8b", "llama-3.1-70b", "deepseek-v3", "mixtral-8x7b", "qwen3-30b-a3b"} <= set(ALL)


@pytest.mark.parametrize("name", ALL)
def test_total_params_match_official(name):
    """Total parameters from the shape within 1 % of the vendor's figure -- except figures published
    with only 2 significant digits, which get one unit of their last digit: vendors round (and
    truncate) the headline figure, e.g. Qwen3-30B-A3B's active count is 3.353B from its config but
    published as "3.3B", DeepSeek-V3's 37.55B as "37B"; 1 % of those would reject a correct count."""
    p = get_preset(name)
    ours = float(param_counts(p.shape.columns())["total"])
    assert abs(ours - p.params_total_official) <= tolerance(p.params_total_official), (name, ours)


@pytest.mark.parametrize("name", [n for n in ALL if get_preset(n).params_active_official])
def test_active_params_match_official(name):
    """Active parameters (under the vendor's convention, see ``active_convention``): same rule as
    :func:`test_total_params_match_official` -- 1 %, or one unit of the last digit for 2-digit figures
    (Qwen3-30B-A3B 3.353B vs "3.3B", DeepSeek-V3 37.55B vs "37B": the vendors round)."""
    p = get_preset(name)
    ours = official_active_comparable(p)
    assert abs(ours - p.params_active_official) <= tolerance(p.params_active_official), (name, ours)


def test_rounded_figures_named_in_the_brief():
    q = get_preset("qwen3-30b-a3b")
    assert official_active_comparable(q) == pytest.approx(3.353e9, rel=1e-3)
    d = get_preset("deepseek-v3")
    assert official_active_comparable(d) == pytest.approx(37.55e9, rel=1e-3)


def test_llama_8b_total_by_hand():
    """Llama-3.1-8B: per layer attention 4096*(32+16)*128 + 32*128*4096 = 41,943,040, SwiGLU
    3*4096*14336 = 176,160,768, two norms 8,192; x32 layers + final norm 4,096 + embedding and head
    2*128,256*4096 = 1,050,673,152 -> 8,030,261,248."""
    c = param_counts(get_model("llama-3.1-8b").columns())
    assert float(c["total"]) == 32 * (41_943_040 + 176_160_768 + 8_192) + 4_096 + 1_050_673_152 == 8_030_261_248
    assert float(c["active"]) == float(c["total"])  # dense


def test_moe_active_is_less_than_total():
    for name in ALL:
        p = get_preset(name)
        c = param_counts(p.shape.columns())
        if p.shape.experts:
            assert float(c["active"]) < float(c["total"])
            routed_inactive = (p.shape.experts - p.shape.experts_per_token) * (3 if p.shape.gated else 2) \
                * p.shape.hidden * p.shape.expert_ffn * (p.shape.layers - p.shape.dense_layers)
            assert float(c["total"] - c["active"]) == routed_inactive
        else:
            assert float(c["active"]) == float(c["total"])


@pytest.mark.parametrize("alias, canonical", [
    ("llama-3.3-70b", "llama-3.1-70b"),
    ("deepseek-r1", "deepseek-v3"),
    ("llama-2-70b-chat", "llama-2-70b"),
    ("LLaMA-3.3-70B", "llama-3.1-70b"),  # case-insensitive
])
def test_aliases_resolve(alias, canonical):
    assert get_preset(alias).shape.name == canonical
    assert get_preset(alias) is get_preset(canonical)


def test_unknown_model_suggests():
    with pytest.raises(SpecError, match=r"did you mean 'llama-3.1-8b'"):
        get_preset("llama-3.1-8")


def test_deepseek_mla_kv_elements():
    """MLA caches one latent (kv_lora_rank 512) + the decoupled RoPE key (64) per token and layer."""
    kv = kv_elements_per_token_layer(get_model("deepseek-v3").columns())
    assert float(kv) == 512 + 64 == 576


def test_gqa_kv_elements():
    """Llama-3.1-70B: K and V for 8 KV heads of 128 = 2*8*128 = 2048 elements per token per layer."""
    assert float(kv_elements_per_token_layer(get_model("llama-3.1-70b").columns())) == 2048


def test_counts_vectorize_over_many_shapes():
    shapes = [p.shape.columns() for p in presets().values()]
    cols = {k: np.array([s[k] for s in shapes]) for k in shapes[0]}
    many = param_counts(cols)["total"]
    one = [float(param_counts(s)["total"]) for s in shapes]
    np.testing.assert_array_equal(many, one)


@pytest.mark.parametrize("bad, match", [
    (dict(hidden=0), "hidden"),
    (dict(heads=32, kv_heads=6), "not divisible"),
    (dict(experts=8, experts_per_token=9, expert_ffn=1024), "experts_per_token"),
    (dict(experts=8, experts_per_token=2, expert_ffn=0), "expert_ffn"),
    (dict(experts_per_token=2), "experts"),
    (dict(sliding_layers=33), "sliding_layers"),
])
def test_invalid_shapes_are_rejected(bad, match):
    base = dict(hidden=4096, ffn=14336, layers=32, heads=32, kv_heads=8)
    with pytest.raises(SpecError, match=match):
        ModelShape(**{**base, **bad}).validate()


@pytest.mark.parametrize("label, preset", [
    ("meta-llama/Llama-3.3-70B-Instruct", "llama-3.1-70b"),
    ("Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b"),
    ("amd/Llama-3.1-70B-Instruct-FP8-KV", "llama-3.1-70b"),
    ("nvidia/DeepSeek-R1-0528-FP4-v2", "deepseek-v3"),
    ("Qwen3-235B-A22B-Instruct-2507-FP8", "qwen3-235b-a22b"),
    ("Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"),
    ("llama2-70b-99.9", "llama-2-70b"),
    ("openai/gpt-oss-120b", "gpt-oss-120b"),
    ("amd/DeepSeek-R1-0528-MXFP4-Preview", "deepseek-v3"),
    ("amd/Llama-3.1-70B-Instruct-FP8-KV-PTPC", "llama-3.1-70b"),
])
def test_checkpoint_names_resolve_to_their_architecture(label, preset):
    assert get_preset(label).shape.name == preset


@pytest.mark.parametrize("label", ["DeepSeek-V2", "DeepSeek-V3.2-Exp", "gpt-oss", "Kimi-K2", "mixtral-8x22b"])
def test_other_architectures_stay_unknown(label):
    # a generation tag is not a revision (V2 is not V3), and a bare family names no one preset
    with pytest.raises(SpecError, match="unknown model"):
        get_preset(label)
