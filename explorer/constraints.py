"""Quality as a constraint: a search space's ``constraints.quality`` and ``decision`` sections, and
the quality columns and graded constraint of its design points.

A space holds quality fixed either relative to a named model (``reference: llama-3.1-70b,
max_loss_increase_pct: 0.5``: predicted loss at most 0.5 % above the reference's, each predicted by
:func:`explorer.quality.predict_loss`, the reference as released: bf16, its published training
tokens) or absolutely (``max_loss: 1.98``, nats/token on the Epoch/Chinchilla scale).  The grade is
``c_quality = L̂/L_limit - 1`` (``<= 0`` feasible, dimensionless), like the capacity band's.
``estimate`` says which loss of the MoE band the constraint reads: ``central`` (default),
``pessimistic`` (effective parameters = active) or ``optimistic`` (= total).

Quality is off unless a space asks for it (``training``, ``constraints.quality``, a
``predicted_loss`` objective or a ``decision`` section): a space without those keys scores exactly
as before, with no quality columns.

What is ignored: the absolute loss's dataset (only relative differences carry over, so a
``max_loss`` is only meaningful next to a predicted reference), and everything
:mod:`explorer.quality` ignores.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from explorer.errors import SpecError
from explorer.model import get_preset
from explorer.precision import parse_precision
from explorer.quality import ESTIMATES, loss_delta_pct, predict_loss, preset_loss, range_text
from explorer.specio import Section, check_number

#: Interactivity targets of the decision summary by default (tokens/s/user): a reading-speed
#: chat (20), a fast chat (50) and an agent/coding loop (100).
DEFAULT_TARGETS_TOKENS_PER_S_PER_USER = (20.0, 50.0, 100.0)
#: Hypervolume reference of a ``predicted_loss`` objective: this factor times the quality limit
#: (every feasible point lies below the limit, so every one adds volume).
LOSS_REFERENCE_FACTOR = 1.05
#: Infeasibility code of a point above the quality limit (the space's codes are 101-121).
QUALITY_REASON = 112
_ESTIMATE_COLUMN = {"central": "predicted_loss", "optimistic": "predicted_loss_low",
                    "pessimistic": "predicted_loss_high"}


@dataclass(frozen=True)
class QualitySpec:
    """``constraints.quality`` of a space (all optional: a space may turn quality on only to report it)."""

    reference: str | None = None  # preset canonical name
    max_loss_increase_pct: float | None = None
    max_loss: float | None = None  # nats/token
    estimate: str = "central"
    reference_tokens: float | None = None  # None: the preset's published tokens

    @cached_property
    def reference_prediction(self) -> dict[str, Any] | None:
        """:func:`explorer.quality.preset_loss` of the reference (as released, bf16)."""
        if self.reference is None:
            return None
        return preset_loss(self.reference, self.reference_tokens)

    @property
    def reference_loss(self) -> float | None:
        ref = self.reference_prediction
        return None if ref is None else float(ref[_ESTIMATE_COLUMN[self.estimate]])

    @property
    def limit(self) -> float | None:
        """Largest feasible predicted loss (nats/token), or None when no limit is set."""
        if self.max_loss is not None:
            return float(self.max_loss)
        if self.max_loss_increase_pct is not None and self.reference_loss is not None:
            return self.reference_loss * (1.0 + self.max_loss_increase_pct / 100.0)
        return None

    @property
    def column(self) -> str:
        """The result column the constraint reads."""
        return _ESTIMATE_COLUMN[self.estimate]

    def anchor(self) -> str:
        est = "" if self.estimate == "central" else f", {self.estimate} estimate"
        if self.max_loss is not None:
            return f"predicted loss <= {self.max_loss:g} nats/token{est}"
        ref = self.reference_prediction
        if ref is None:
            return "predicted loss reported, not constrained"
        base = (f"{self.reference} ({self.reference_loss:.4f} nats/token predicted at "
                f"{float(ref['training_tokens']):.3g} training tokens)")
        if self.max_loss_increase_pct is None:
            return f"predicted loss reported against {base}"
        return f"predicted loss within +{self.max_loss_increase_pct:g} % of {base}{est}"

    def meta(self) -> dict[str, Any]:
        out: dict[str, Any] = {"estimate": self.estimate}
        if self.reference is not None:
            ref = self.reference_prediction or {}
            out.update(reference=self.reference, reference_loss=self.reference_loss,
                       reference_loss_band=[ref.get("predicted_loss_low"), ref.get("predicted_loss_high")],
                       reference_training_tokens=ref.get("training_tokens"),
                       reference_extrapolated=ref.get("quality_extrapolated"))
        if self.max_loss_increase_pct is not None:
            out["max_loss_increase_pct"] = self.max_loss_increase_pct
        if self.max_loss is not None:
            out["max_loss"] = self.max_loss
        if self.limit is not None:
            out["loss_limit"] = self.limit
        return out

    def canon(self) -> dict[str, Any]:
        """What defines the scores (for the space's fingerprint)."""
        return {"reference": self.reference, "pct": self.max_loss_increase_pct, "max_loss": self.max_loss,
                "estimate": self.estimate, "tokens": self.reference_tokens}


@dataclass(frozen=True)
class DecisionSpec:
    """``decision``: the reference deployed beside the front and the interactivity targets."""

    reference: str
    targets: tuple[float, ...] = DEFAULT_TARGETS_TOKENS_PER_S_PER_USER

    def meta(self) -> dict[str, Any]:
        return {"reference": self.reference, "tokens_per_s_per_user": list(self.targets)}


# ------------------------------------------------------------------------------------------------
# parsing (called by explorer.space)
# ------------------------------------------------------------------------------------------------


def _preset_name(v: Any, where: str, key: str) -> str:
    if not isinstance(v, str):
        raise SpecError(where, key, f"expected a model preset name (e.g. llama-3.1-70b), got {v!r}")
    return get_preset(v, where, key).shape.name


def parse_quality(sec: Section) -> QualitySpec:
    """``constraints.quality: {reference, max_loss_increase_pct, max_loss, estimate, reference_tokens}``."""
    sec.check_keys({"reference", "max_loss_increase_pct", "max_loss", "estimate", "reference_tokens"})
    ref = _preset_name(sec.raw("reference"), sec.where, sec.key("reference")) if sec.has("reference") else None
    pct = sec.number("max_loss_increase_pct", None, min_value=-100, max_value=1000, min_exclusive=True)
    max_loss = sec.number("max_loss", None, min_value=0, max_value=100, min_exclusive=True)
    estimate = sec.string("estimate", "central", choices=set(ESTIMATES))
    tokens = tokens_value(sec.raw("reference_tokens"), sec.where, sec.key("reference_tokens")) \
        if sec.has("reference_tokens") else None
    if pct is not None and ref is None:
        raise SpecError(sec.where, sec.key("max_loss_increase_pct"),
                        "is relative to a model: give reference (a preset name, e.g. llama-3.1-70b)")
    if pct is not None and max_loss is not None:
        raise SpecError(sec.where, sec.key("max_loss"), "give max_loss (absolute, nats/token) or "
                                                        "max_loss_increase_pct (relative to reference), not both")
    if tokens is not None and ref is None:
        raise SpecError(sec.where, sec.key("reference_tokens"), "needs reference")
    if ref is None and max_loss is None:
        raise SpecError(sec.where, sec.path, "give reference (+ max_loss_increase_pct) or max_loss")
    spec = QualitySpec(ref, None if pct is None else float(pct), None if max_loss is None else float(max_loss),
                       str(estimate), tokens)
    if ref is not None:
        preset_loss(ref, tokens, where=sec.where, key=sec.key("reference"))  # published tokens known?
    return spec


def parse_decision(sec: Section, default_reference: str | None) -> DecisionSpec:
    """``decision: {reference, tokens_per_s_per_user: [20, 50, 100]}``."""
    sec.check_keys({"reference", "tokens_per_s_per_user"})
    ref = _preset_name(sec.raw("reference"), sec.where, sec.key("reference")) if sec.has("reference") \
        else default_reference
    if ref is None:
        raise SpecError(sec.where, sec.key("reference"), "required without constraints.quality.reference "
                                                         "(the model the front is compared with)")
    targets: tuple[float, ...] = DEFAULT_TARGETS_TOKENS_PER_S_PER_USER
    if sec.has("tokens_per_s_per_user"):
        raw = sec.raw("tokens_per_s_per_user")
        key = sec.key("tokens_per_s_per_user")
        if not isinstance(raw, list) or not raw:
            raise SpecError(sec.where, key, f"expected a list of interactivity targets (tokens/s/user), got {raw!r}")
        vals = [float(check_number(v, sec.where, f"{key}[{i}]", min_value=0, min_exclusive=True, max_value=1e6))
                for i, v in enumerate(raw)]
        if len(set(vals)) != len(vals):
            raise SpecError(sec.where, key, f"duplicate target in {raw!r}")
        targets = tuple(sorted(vals))
    return DecisionSpec(ref, targets)


def tokens_value(v: Any, where: str, key: str) -> float:
    """A training-token count: a number (``1.5e+13``; text such as ``15e12``, which YAML reads as
    text, is accepted too), 1e6 .. 1e15."""
    if isinstance(v, str):
        try:
            v = float(v.replace("_", ""))
        except ValueError:
            raise SpecError(where, key, f"expected a number of training tokens (e.g. 1.5e+13), got {v!r}") from None
    return float(check_number(v, where, key, min_value=1e6, max_value=1e15))


# ------------------------------------------------------------------------------------------------
# scoring (called by explorer.space for every evaluation when quality is on)
# ------------------------------------------------------------------------------------------------


def quality_results(shape: Mapping[str, np.ndarray], tokens: np.ndarray, precision: np.ndarray,
                    spec: QualitySpec | None) -> dict[str, np.ndarray]:
    """The quality columns of design points: :func:`explorer.quality.predict_loss` for the shape
    columns, training tokens and precision policy names of each point, ``quality_ranges_left``
    (text), and with a reference ``predicted_loss_delta_pct`` (+ ``_low``/``_high``, percent)."""
    labels = np.asarray(precision, dtype=object).astype(str)
    uniq, inv = np.unique(labels, return_inverse=True)
    parsed = [parse_precision(u) for u in uniq]
    w = np.array([p.weights for p in parsed], dtype=object)[inv]
    a = np.array([p.activations for p in parsed], dtype=object)[inv]
    out = predict_loss(shape, tokens, w, a)
    out["quality_ranges_left"] = range_text(out["quality_flags"])
    ref = spec.reference_loss if spec is not None else None
    if ref is not None:
        out["predicted_loss_delta_pct"] = loss_delta_pct(out["predicted_loss"], ref)
        out["predicted_loss_delta_low_pct"] = loss_delta_pct(out["predicted_loss_low"], ref)
        out["predicted_loss_delta_high_pct"] = loss_delta_pct(out["predicted_loss_high"], ref)
    return out


def grade_quality(q: Mapping[str, np.ndarray], spec: QualitySpec) -> np.ndarray | None:
    """``c_quality = L̂/limit - 1`` (None when the spec sets no limit)."""
    lim = spec.limit
    if lim is None:
        return None
    return np.asarray(q[spec.column], dtype=np.float64) / lim - 1.0


def quality_reasons(q: Mapping[str, np.ndarray], spec: QualitySpec, m: np.ndarray) -> list[str]:
    """Reason text of the points ``m`` above the limit, with their numbers."""
    lim = spec.limit or float("nan")
    name = {"central": "predicted loss", "optimistic": "optimistic predicted loss",
            "pessimistic": "pessimistic predicted loss"}[spec.estimate]
    rel = f" (+{spec.max_loss_increase_pct:g} % of {spec.reference})" if spec.max_loss_increase_pct is not None else ""
    return [f"{name} {v:.4f} nats above the limit {lim:.4f}{rel}" for v in np.asarray(q[spec.column])[m]]
