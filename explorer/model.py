"""Model shapes: dense, GQA, MoE and MLA transformers; presets for real models; parameter counts.

Counts are written over numpy arrays (a mapping of column name -> array) so the same formula sizes
one model or a million sampled shapes.  Letters follow DESIGN.md: H hidden, F MLP width, L layers,
n_q query heads, n_kv KV heads, d head dim, V vocabulary, E experts, k experts per token, F_e
expert width.  Small tensors (norm weights, biases, attention sinks) are counted where they are
part of the architecture (norms, QKV bias) and otherwise ignored (< 0.01 % of any preset).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
import yaml

from explorer.errors import SpecError, unknown

#: Columns of a model shape inside a design-point table (all numeric; booleans as 0/1).
SHAPE_COLUMNS = (
    "hidden", "ffn", "layers", "heads", "kv_heads", "head_dim", "vocab", "gated", "tied", "qkv_bias",
    "experts", "experts_per_token", "expert_ffn", "shared_experts", "shared_expert_ffn", "dense_layers",
    "q_lora_rank", "kv_lora_rank", "rope_head_dim", "sliding_window", "sliding_layers",
)


@dataclass(frozen=True)
class ModelShape:
    """A transformer's shape.  ``experts == 0`` is a dense model; ``kv_lora_rank > 0`` is MLA attention."""

    hidden: int
    ffn: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int = 128
    vocab: int = 128256
    gated: bool = True
    tied: bool = False
    qkv_bias: bool = False
    experts: int = 0
    experts_per_token: int = 0
    expert_ffn: int = 0
    shared_experts: int = 0
    shared_expert_ffn: int = 0
    dense_layers: int = 0  # leading dense layers of an MoE model (DeepSeek-V3: 3)
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    rope_head_dim: int = 0
    sliding_window: int = 0  # tokens; 0 = full attention everywhere
    sliding_layers: int = 0  # how many layers use the window
    name: str = "custom"

    def columns(self) -> dict[str, float]:
        # every column is a plain number field: read directly (dataclasses.asdict deep-copies the
        # whole shape, which every design table paid per model per call)
        return {c: float(getattr(self, c)) for c in SHAPE_COLUMNS}

    def validate(self, where: str = "model") -> ModelShape:
        """Raise :class:`SpecError` for shapes that cannot exist; returns self for chaining."""
        for f in ("hidden", "ffn", "layers", "heads", "kv_heads", "head_dim", "vocab"):
            v = getattr(self, f)
            if not isinstance(v, int | np.integer) or v <= 0:
                raise SpecError(where, f, f"must be a positive whole number, got {v!r}")
        for f in ("experts", "experts_per_token", "expert_ffn", "shared_experts", "shared_expert_ffn",
                  "dense_layers", "q_lora_rank", "kv_lora_rank", "rope_head_dim", "sliding_window",
                  "sliding_layers"):
            v = getattr(self, f)
            if not isinstance(v, int | np.integer) or v < 0:
                raise SpecError(where, f, f"must be a whole number >= 0, got {v!r}")
        if self.kv_lora_rank == 0 and self.heads % self.kv_heads:
            raise SpecError(where, "heads", f"query heads {self.heads} not divisible by kv_heads {self.kv_heads}")
        if self.experts:
            if not 1 <= self.experts_per_token <= self.experts:
                raise SpecError(
                    where, "experts_per_token",
                    f"must be between 1 and experts={self.experts}, got {self.experts_per_token}",
                )
            if self.expert_ffn <= 0:
                raise SpecError(where, "expert_ffn", f"MoE models need expert_ffn > 0, got {self.expert_ffn}")
            if self.dense_layers >= self.layers:
                raise SpecError(where, "dense_layers", f"must be < layers={self.layers}, got {self.dense_layers}")
        elif self.experts_per_token or self.expert_ffn:
            raise SpecError(where, "experts", "experts_per_token/expert_ffn given but experts is 0")
        if self.sliding_layers > self.layers:
            raise SpecError(where, "sliding_layers", f"must be <= layers={self.layers}, got {self.sliding_layers}")
        return self


@dataclass(frozen=True)
class Preset:
    shape: ModelShape
    display_name: str
    aliases: tuple[str, ...]
    params_total_official: float
    params_active_official: float | None
    active_convention: str
    source: str
    notes: str
    #: Published pre-training tokens (None when the vendor did not publish them) and where from.
    training_tokens: float | None = None
    training_tokens_source: str = ""
    #: Multi-token-prediction modules shipped with the checkpoint (HF ``num_nextn_predict_layers``;
    #: each is one transformer layer plus a 2H -> H projection, embedding and LM head shared with
    #: the main model) and where the figure comes from; the draft of ``--draft-tokens`` without a
    #: draft model (explorer/speculative.py).
    mtp_layers: int = 0
    mtp_source: str = ""
    #: The Hugging Face repository a launch serves by default (explorer/launch.py), where ``source``
    #: is not one (GitHub configs); empty: the repository of ``source``.
    checkpoint: str = ""
    #: The weight format the published checkpoint holds (DeepSeek-V3 ships FP8, gpt-oss MXFP4).
    checkpoint_format: str = "bf16"


_SHAPE_FIELDS = {f.name for f in fields(ModelShape)} - {"name"}
_PRESET_KEYS = _SHAPE_FIELDS | {
    "name", "display_name", "aliases", "params_total_official", "params_active_official",
    "active_convention", "source", "notes", "training_tokens", "training_tokens_source",
    "mtp_layers", "mtp_source", "checkpoint", "checkpoint_format",
}


@cache
def presets() -> dict[str, Preset]:
    """All presets by canonical name (from ``explorer/data/models.yaml``)."""
    text = resources.files("explorer").joinpath("data/models.yaml").read_text(encoding="utf-8")
    out: dict[str, Preset] = {}
    for entry in yaml.safe_load(text)["models"]:
        extra = set(entry) - _PRESET_KEYS
        if extra:
            raise SpecError("explorer/data/models.yaml", entry.get("name"), f"unknown keys {sorted(extra)}")
        shape_kw = {k: entry[k] for k in _SHAPE_FIELDS if k in entry}
        shape = ModelShape(name=entry["name"], **shape_kw).validate(f"preset {entry['name']}")
        out[entry["name"]] = Preset(
            shape=shape,
            display_name=entry.get("display_name", entry["name"]),
            aliases=tuple(entry.get("aliases", [])),
            params_total_official=float(entry["params_total_official"]),
            params_active_official=(
                float(entry["params_active_official"]) if entry.get("params_active_official") else None
            ),
            active_convention=entry.get("active_convention", "all"),
            source=entry["source"],
            notes=entry.get("notes", ""),
            training_tokens=float(entry["training_tokens"]) if entry.get("training_tokens") else None,
            training_tokens_source=entry.get("training_tokens_source", ""),
            mtp_layers=int(entry.get("mtp_layers", 0)),
            mtp_source=entry.get("mtp_source", ""),
            checkpoint=entry.get("checkpoint", ""),
            checkpoint_format=entry.get("checkpoint_format", "bf16"),
        )
    return out


def preset_names() -> list[str]:
    return sorted(presets())


#: Words a published checkpoint's name adds to the architecture it ships (hub organisation,
#: "Meta-" prefix, instruction tuning, number format, quantizer -- AMD's ``-PTPC`` per-token /
#: per-channel FP8 and ``-Preview`` release tags, as in ``amd/DeepSeek-R1-0528-MXFP4-Preview`` of the
#: InferenceX MI355X recipes -- revision and date tags, MLPerf's accuracy targets): none changes a layer's shape, so :func:`checkpoint_key` drops them when the
#: name as written is neither a preset nor an alias.  Order matters only for readability; the
#: suffix pattern is applied until nothing more comes off.
_CHECKPOINT_PREFIX = re.compile(r"^(?:[\w.-]+/)+|^meta-(?=llama)", re.I)
_CHECKPOINT_SUFFIX = re.compile(
    r"[-_.](?:instruct|chat|hf|base|it|fp8|fp4|nvfp4|mxfp4|bf16|fp16|int8|int4|w4a16|w8a8|w8a16|w4a8|awq|gptq|"
    r"kv|dynamic|static|block|quantized|ptpc|preview|v\d+(?:\.\d+)?|\d{4}|99(?:\.9)?)$", re.I)


def checkpoint_key(name: str) -> str:
    """The architecture a checkpoint name refers to, as a lookup key: lower case, hub organisation
    and the words of :data:`_CHECKPOINT_SUFFIX` removed (``nvidia/DeepSeek-R1-0528-FP4-v2`` ->
    ``deepseek-r1``, ``Meta-Llama-3.1-8B-Instruct`` -> ``llama-3.1-8b``,
    ``Qwen3-235B-A22B-Instruct-2507-FP8`` -> ``qwen3-235b-a22b``)."""
    key = _CHECKPOINT_PREFIX.sub("", str(name).strip().lower())
    while True:
        shorter = _CHECKPOINT_SUFFIX.sub("", key)
        # a version tag is the architecture's generation when nothing numbered precedes it
        # (DeepSeek-V2 is not DeepSeek-V3), a revision otherwise (Mixtral-8x7B-v0.1, ...-NVFP4-v2)
        if shorter == key or not shorter or (re.fullmatch(r"[-_.]v[\d.]+", key[len(shorter):])
                                             and not re.search(r"\d", shorter)):
            return key
        key = shorter


def get_preset(name: str, where: str = "--model", key: str | None = None) -> Preset:
    """A preset by name or alias, case-insensitive; else by the checkpoint words of the name
    (:func:`checkpoint_key`) when they name exactly one preset."""
    lname = str(name).lower().strip()
    table = presets()
    if lname in table:
        return table[lname]
    for p in table.values():
        if lname in p.aliases:
            return p
    want = checkpoint_key(lname)
    hits = {p.shape.name for p in table.values()
            if want in {checkpoint_key(n) for n in (p.shape.name, *p.aliases)}}
    if len(hits) == 1:
        return table[hits.pop()]
    raise unknown(where, key, "model", name, list(table) + [a for p in table.values() for a in p.aliases])


def get_model(name: str, where: str = "--model", key: str | None = None) -> ModelShape:
    return get_preset(name, where, key).shape


# --------------------------------------------------------------------------- counts over arrays


def _g(c: Mapping[str, Any], k: str) -> np.ndarray:
    return np.asarray(c[k], dtype=np.float64)


def mlp_matrices(c: Mapping[str, Any]) -> np.ndarray:
    """Weight matrices per MLP: 3 for gated (SwiGLU: gate, up, down), 2 otherwise."""
    return np.where(_g(c, "gated") > 0, 3.0, 2.0)


def attention_params_per_layer(c: Mapping[str, Any]) -> np.ndarray:
    """Attention weights of one layer: GQA (Q, K, V, O [+ QKV bias]) or MLA (low-rank Q and KV)."""
    H, nq, nkv, d = _g(c, "hidden"), _g(c, "heads"), _g(c, "kv_heads"), _g(c, "head_dim")
    gqa = H * (nq + 2 * nkv) * d + nq * d * H + _g(c, "qkv_bias") * (nq + 2 * nkv) * d
    r, qr, kr = _g(c, "rope_head_dim"), _g(c, "q_lora_rank"), _g(c, "kv_lora_rank")
    q = np.where(qr > 0, H * qr + qr * nq * (d + r) + qr, H * nq * (d + r))
    mla = q + H * (kr + r) + kr + kr * nq * (d + d) + nq * d * H  # v_head_dim = head_dim
    return np.where(kr > 0, mla, gqa)


def moe_layer_count(c: Mapping[str, Any]) -> np.ndarray:
    return np.where(_g(c, "experts") > 0, _g(c, "layers") - _g(c, "dense_layers"), 0.0)


def expert_params(c: Mapping[str, Any]) -> np.ndarray:
    """Weights of one routed expert."""
    return mlp_matrices(c) * _g(c, "hidden") * _g(c, "expert_ffn")


def shared_expert_params(c: Mapping[str, Any]) -> np.ndarray:
    """Weights of a MoE layer's shared experts (always active)."""
    return mlp_matrices(c) * _g(c, "hidden") * _g(c, "shared_expert_ffn") * _g(c, "shared_experts")


def embedding_params(c: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(input embedding, output head) parameters; a tied head shares the embedding (0 extra)."""
    emb = _g(c, "vocab") * _g(c, "hidden")
    return emb, np.where(_g(c, "tied") > 0, 0.0, emb)


def param_counts(c: Mapping[str, Any], attn_per_layer: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Parameter counts of shapes given as columns.

    Returns ``total``, ``active`` (every weight one token multiplies with, both embedding tables
    included), ``expert`` (routed experts, all of them), ``dense`` (total minus routed experts), and
    ``layer_dense`` (per-layer non-expert weights summed over layers: what every decode step reads).
    ``attn_per_layer``: :func:`attention_params_per_layer` of ``c`` where the caller has it.
    """
    H, L = _g(c, "hidden"), _g(c, "layers")
    n_moe = moe_layer_count(c)
    n_dense = L - n_moe
    attn = (attention_params_per_layer(c) if attn_per_layer is None else attn_per_layer) * L
    norms = 2 * H * L + H
    dense_mlp = n_dense * mlp_matrices(c) * H * _g(c, "ffn")
    router = n_moe * H * _g(c, "experts")
    shared = n_moe * shared_expert_params(c)
    expert = expert_params(c)  # (one expert's weights: the same figure for both counts)
    routed_all = n_moe * _g(c, "experts") * expert
    routed_active = n_moe * _g(c, "experts_per_token") * expert
    emb_in, emb_out = embedding_params(c)
    layer_dense = attn + norms + dense_mlp + router + shared
    total = layer_dense + routed_all + emb_in + emb_out
    active = layer_dense + routed_active + emb_in + emb_out
    return {
        "total": total,
        "active": active,
        "expert": routed_all,
        "dense": total - routed_all,
        "layer_dense": layer_dense,
        "embedding_in": emb_in,
        "embedding_out": emb_out,
    }


def official_active_comparable(p: Preset) -> float:
    """Our active count under the vendor's convention (for comparison with the official figure)."""
    counts = param_counts(p.shape.columns())
    active = float(counts["active"])
    if p.active_convention == "no_input_embedding":
        active -= float(counts["embedding_in"])
    return active


def kv_elements_per_token_layer(c: Mapping[str, Any]) -> np.ndarray:
    """KV-cache elements one token stores in one layer (whole model, before tensor parallelism).

    GQA: K and V for each KV head, ``2*n_kv*d``.  MLA: one compressed latent plus the decoupled
    RoPE key, ``kv_lora_rank + rope_head_dim``, shared by all heads (DeepSeek-V2/V3 papers).
    """
    gqa = 2 * _g(c, "kv_heads") * _g(c, "head_dim")
    mla = _g(c, "kv_lora_rank") + _g(c, "rope_head_dim")
    return np.where(_g(c, "kv_lora_rank") > 0, mla, gqa)
