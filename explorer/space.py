"""Search spaces: ``search_spaces/<name>.yaml`` -> a validated :class:`SearchSpace` -> design points
-> scored results (feasibility, graded constraints, objectives).

A space says what to sample and what to hold fixed (a model shape, or a fixed ``model`` preset for a
deployment-only search), the workload, the hardware, the constraints, the objectives and the search
settings.  Each parameter is one of (mirroring Optuna's distributions, but this module does not
import Optuna: :mod:`explorer.search` maps them):

* a fixed value: ``layers: 80``;
* a choice list: ``tp: [1, 2, 4, 8]`` or ``tp: {choices: [1, 2, 4, 8]}``;
* an int range: ``hidden: {low: 6144, high: 10240, step: 512}``, ``batch: {low: 1, high: 1024, log: true}``;
* a float range (only ``moe_imbalance`` and ``acceptance``): ``{low: 1.0, high: 1.5, step: 0.1}``.

Loading is strict (unknown keys with a did-you-mean, wrong types, empty ranges, contradictions,
unknown hardware/model/precision) and every error is one :class:`SpecError` naming file and key.
Rules that depend on the sampled combination (``kv_heads`` must divide ``heads``, ``hidden`` must be
a multiple of ``head_dim`` when heads are derived, ...) never raise: such points are scored as
infeasible with a reason, like the simulator's own rules.

**Quality anchor.**  A space that searches the model shape must state a capacity band on total
and/or active parameters, or a predicted-loss bound (``constraints.quality``, with ``training``:
the logic lives in :mod:`explorer.constraints` and :mod:`explorer.quality`): a throughput search
otherwise simply picks the smallest model.

**Graded constraints** (``c_*`` columns, one per rule, dimensionless, ``<= 0`` feasible) let the
samplers tell "nearly feasible" from "hopeless": ``c_memory = needed/usable - 1``, band violations as
relative distance outside the band, SLOs as relative shortfall, and ``c_structure = 1`` when a
divisibility rule fails (these have no natural grade).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from explorer.constraints import (
    LOSS_REFERENCE_FACTOR,
    QUALITY_REASON,
    DecisionSpec,
    QualitySpec,
    grade_quality,
    parse_decision,
    parse_quality,
    quality_reasons,
    quality_results,
    tokens_value,
)
from explorer.cost import add_cost
from explorer.design import build_design
from explorer.errors import SpecError
from explorer.hardware import HARDWARE_DIR, Hardware, HardwareTable, load_hardware
from explorer.model import SHAPE_COLUMNS, ModelShape, get_preset, param_counts
from explorer.precision import parse_precision
from explorer.results import results_frame
from explorer.runtime import DEFAULT_RUNTIME, load_runtime
from explorer.simulate import REASONS, format_support_masks, simulate, structural_checks
from explorer.specio import (
    MAX_PARALLEL,
    MAX_SEED,
    MAX_SIZE,
    Section,
    check_name_text,
    check_number,
    parse_yaml_text,
    read_text_file,
)
from explorer.speculative import MAX_DRAFT_TOKENS, is_mtp_name

# --------------------------------------------------------------------------------------------
# parameter kinds
# --------------------------------------------------------------------------------------------

SAMPLERS = ("tpe", "nsga2", "random", "grid")
TRIAL_UNITS = ("point", "shape")
DIRECTIONS = ("maximize", "minimize")
#: Result columns that may be objectives (all numeric, all finite for every row).
OBJECTIVE_COLUMNS = (
    "tokens_per_s_per_gpu", "tokens_per_s_per_user", "ttft_s", "tpot_s", "gpus", "memory_bytes_per_gpu",
    "params_total", "params_active", "tokens_per_s_per_kw", "usd_per_million_tokens",
    "predicted_loss",  # explorer/quality.py; turns quality on
)
DEFAULT_OBJECTIVES = {"tokens_per_s_per_gpu": "maximize", "tokens_per_s_per_user": "maximize"}

WORKLOAD_KEYS = ("isl", "osl")
DEPLOY_KEYS = ("batch", "precision", "runtime", "tp", "pp", "ep", "dp", "moe_imbalance",
               "draft_tokens", "acceptance", "draft_model",  # these three: explorer/speculative.py
               "serving", "prefill_tp", "prefill_pp")  # these three: explorer/disagg.py
TEXT_PARAMS = ("hardware", "model", "precision", "runtime", "draft_model", "serving")
SERVING_MODES = ("aggregated", "disaggregated")
FLAG_PARAMS = ("gated", "tied", "qkv_bias")
_MIN1 = {"hidden", "ffn", "layers", "heads", "kv_heads", "head_dim", "vocab", "isl", "osl", "batch", "tp", "pp",
         "ep", "dp"}
_MOE_PARAMS = ("experts_per_token", "expert_ffn", "shared_experts", "shared_expert_ffn", "dense_layers")
_SHAPE_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(ModelShape) if f.name in SHAPE_COLUMNS}
_DEPLOY_DEFAULTS = {"tp": 1, "pp": 1, "ep": 1, "dp": 1, "moe_imbalance": 1.0}

#: Largest value of each numeric parameter: beyond it the simulator cannot represent the design.
SIZE_LIMITS: dict[str, float] = {**{c: MAX_SIZE for c in SHAPE_COLUMNS}, "isl": MAX_SIZE, "osl": MAX_SIZE,
                                 "batch": MAX_SIZE, "tp": MAX_PARALLEL, "pp": MAX_PARALLEL, "ep": MAX_PARALLEL,
                                 "dp": MAX_PARALLEL, "moe_imbalance": 1000.0,
                                 "draft_tokens": MAX_DRAFT_TOKENS, "acceptance": 1.0}
#: Float parameters and their lower bounds (everything else numeric is a whole number).
_FLOAT_LOW = {"moe_imbalance": 1.0, "acceptance": 0.0}

#: Infeasibility codes added by the space (the simulator's are 1-7, see ``explorer.simulate.REASONS``).
SPACE_REASONS = {
    101: "hidden is not a multiple of head_dim (heads = hidden/head_dim)",
    102: "kv_heads does not divide heads",
    103: "experts_per_token outside 1..experts",
    104: "dense_layers not below layers",
    105: "sliding_layers exceeds layers",
    110: "total parameters outside the capacity band",
    111: "active parameters outside the capacity band",
    112: "predicted loss above the quality limit",
    120: "tokens/s/user below the minimum",
    121: "TTFT above the maximum",
    122: "p99 TTFT above the maximum",
    123: "p99 TPOT above the maximum",
    130: "tokens/s/kW below the minimum",
    131: "USD per million tokens above the maximum",
}
_SHAPE_RULES = (101, 102, 103, 104, 105)
#: The space's cost settings (``cost:`` section and cost constraints), as SearchSpace attribute names.
_COST_KEYS = ("usd_per_gpu_hour", "power_overhead_factor", "min_tokens_per_s_per_kw", "max_usd_per_million_tokens")
#: Largest graded violation of the price constraint (zero throughput costs +inf USD per token).
_MAX_GRADE = 1e12
_SIM_STRUCTURAL = (1, 2, 3, 4, 5, 7)


def reason_label(code: int) -> str:
    """Short description of an infeasibility code (simulator or space)."""
    return SPACE_REASONS.get(int(code)) or REASONS.get(int(code), f"reason {code}")


@dataclass(frozen=True)
class Fixed:
    value: Any

    def describe(self) -> str:
        return str(self.value)


@dataclass(frozen=True)
class IntRange:
    low: int
    high: int
    step: int = 1
    log: bool = False

    def describe(self) -> str:
        return f"{self.low}..{self.high}" + (" log" if self.log else f" step {self.step}" if self.step != 1 else "")

    def count(self) -> int:
        return (self.high - self.low) // self.step + 1

    def values(self) -> np.ndarray:
        return np.arange(self.low, self.high + 1, self.step, dtype=np.float64)


@dataclass(frozen=True)
class FloatRange:
    low: float
    high: float
    step: float | None = None
    log: bool = False

    def describe(self) -> str:
        return f"{self.low:g}..{self.high:g}" + (" log" if self.log else f" step {self.step:g}" if self.step else "")

    def count(self) -> int:
        assert self.step is not None
        return int(math.floor((self.high - self.low) / self.step + 1e-9)) + 1

    def values(self) -> np.ndarray:
        assert self.step is not None
        return self.low + self.step * np.arange(self.count(), dtype=np.float64)


@dataclass(frozen=True)
class Choice:
    choices: tuple[Any, ...]

    def describe(self) -> str:
        return "[" + ", ".join(str(c) for c in self.choices) + "]"


Param = Fixed | IntRange | FloatRange | Choice


@dataclass(frozen=True)
class SearchSettings:
    sampler: str = "tpe"
    trials: int = 300
    seed: int = 0
    population_size: int = 20
    #: Trials asked and scored together in one vectorized simulator call (None: per-sampler default).
    batch_trials: int | None = None
    #: Hypervolume reference point, one value per objective (default: the origin, all-maximize only).
    hypervolume_reference: tuple[float, ...] | None = None
    #: Refuse grids larger than this (points).
    max_grid_points: int = 20_000_000
    #: Grid CSV: rows kept as a uniform sample when the grid is too large to keep every row.
    grid_sample: int = 20_000
    #: After a study, score every batch value of the front's designs (explorer/refine.py).
    refine_batch: bool = False
    #: What one Optuna trial is: ``point`` (one design point) or ``shape`` (a model shape scored under
    #: every deployment at once, explorer/shapes.py).
    trial_unit: str = "point"
    #: Shape trials: batch values per deployment in a shape's scan (thinned geometrically).
    scan_batches: int = 32


@dataclass(frozen=True, eq=False)
class SearchSpace:
    where: str
    text: str
    params: dict[str, Param]
    derived: tuple[str, ...]  # "heads" (= hidden/head_dim) and/or "ffn" (= expert_ffn, MoE)
    shape_search: bool
    capacity: dict[str, tuple[float, float]]  # "total"/"active" -> (low, high) parameters
    min_tokens_per_s_per_user: float | None
    max_ttft_s: float | None
    objectives: dict[str, str]
    search: SearchSettings
    description: str = ""
    #: Hardware kinds given as file paths: name -> absolute path (shipped kinds are loaded by name).
    hardware_files: dict[str, str] = field(default_factory=dict)
    #: ``cost:`` section (explorer/cost.py): price per GPU-hour override (one number for every kind)
    #: and facility W per board W; None = the hardware files' prices / the default factor.
    usd_per_gpu_hour: float | None = None
    power_overhead_factor: float | None = None
    #: ``constraints.min_tokens_per_s_per_kw`` / ``constraints.max_usd_per_million_tokens``.
    min_tokens_per_s_per_kw: float | None = None
    max_usd_per_million_tokens: float | None = None
    #: ``constraints.max_ttft_p99_s`` / ``constraints.max_tpot_p99_s`` (explorer/open_loop.py spread)
    max_ttft_p99_s: float | None = None
    max_tpot_p99_s: float | None = None
    #: Predicted quality (explorer/quality.py, explorer/constraints.py): on only when the space asks
    #: (``training``, ``constraints.quality``, a ``predicted_loss`` objective, ``decision``).
    quality_on: bool = False
    quality: QualitySpec | None = None
    decision: DecisionSpec | None = None

    # ---------------------------------------------------------------- structure
    @property
    def name(self) -> str:
        return Path(self.where).stem

    @property
    def searched(self) -> dict[str, IntRange | FloatRange | Choice]:
        return {k: p for k, p in self.params.items() if not isinstance(p, Fixed)}

    @property
    def uses_model(self) -> bool:
        return "model" in self.params

    @property
    def directions(self) -> list[str]:
        return list(self.objectives.values())

    def constraint_keys(self) -> list[str]:
        keys = ["structure", "memory"]
        keys += [f"params_{k}" for k in ("total", "active") if k in self.capacity]
        if self.min_tokens_per_s_per_user is not None:
            keys.append("min_tokens_per_s_per_user")
        if self.max_ttft_s is not None:
            keys.append("max_ttft_s")
        keys += [k for k in ("max_ttft_p99_s", "max_tpot_p99_s") if getattr(self, k) is not None]
        keys += [k for k in ("min_tokens_per_s_per_kw", "max_usd_per_million_tokens") if getattr(self, k) is not None]
        if self.quality is not None and self.quality.limit is not None:
            keys.append("quality")
        return keys

    def hypervolume_reference(self) -> list[float] | None:
        """Reference point for hypervolumes, or None when it cannot be defaulted."""
        ref = self.search.hypervolume_reference
        if ref is not None:
            return list(ref)
        if all(d == "maximize" for d in self.directions):
            return [0.0] * len(self.objectives)
        # predicted_loss (minimised): LOSS_REFERENCE_FACTOR x the quality limit (docs/quality.md)
        lim = self.quality.limit if self.quality is not None else None
        if lim is not None and all(d == "maximize" or k == "predicted_loss" for k, d in self.objectives.items()):
            return [LOSS_REFERENCE_FACTOR * lim if k == "predicted_loss" else 0.0 for k in self.objectives]
        return None

    def grid_axes(self) -> list[tuple[str, np.ndarray | list]]:
        """The discrete values of every searched parameter (the grid is their Cartesian product)."""
        self.grid_size()  # refuses float ranges without a step
        return [(name, list(p.choices) if isinstance(p, Choice) else p.values()) for name, p in self.searched.items()]

    def grid_size(self) -> int:
        """Points in the grid (computed without listing them)."""
        size = 1
        for name, p in self.searched.items():
            if isinstance(p, FloatRange) and p.step is None:
                raise SpecError(self.where, self._key(name),
                                f"a float range without 'step' cannot be gridded ({p.describe()}); add a step "
                                "or use a sampler (tpe, nsga2, random)")
            size *= len(p.choices) if isinstance(p, Choice) else p.count()
        return size

    @cached_property
    def grid(self) -> tuple[list[str], list[np.ndarray], tuple[int, ...]]:
        """(names, values, shape) of the grid axes; text axes as object arrays."""
        axes = self.grid_axes()
        values = [np.asarray(v, dtype=object) if any(isinstance(x, str) for x in v) else np.asarray(v, dtype=np.float64)
                  for _, v in axes]
        return [n for n, _ in axes], values, tuple(len(v) for v in values)

    def fingerprint(self) -> str:
        """Hash of what defines the points and their scores (not the search settings): a study resumed
        under a different space would mix incomparable trials."""
        canon: dict[str, Any] = {
            "params": {k: [type(p).__name__, _jsonable(p.__dict__)] for k, p in self.params.items()},
            "derived": list(self.derived),
            "capacity": {k: list(v) for k, v in self.capacity.items()},
            "slo": [self.min_tokens_per_s_per_user, self.max_ttft_s]
            + ([self.max_ttft_p99_s, self.max_tpot_p99_s] if self.max_ttft_p99_s or self.max_tpot_p99_s else []),
            "objectives": self.objectives,
        }
        cost = {k: getattr(self, k) for k in _COST_KEYS if getattr(self, k) is not None}
        if cost:  # only when set: spaces without cost settings keep their fingerprint
            canon["cost"] = cost
        if self.quality_on:  # likewise for quality
            canon["quality"] = self.quality.canon() if self.quality is not None else True
        return hashlib.sha256(json.dumps(canon, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def _key(self, name: str) -> str:
        if name == "hardware" or name == "model":
            return name
        if name in WORKLOAD_KEYS:
            return f"workload.{name}"
        if name in DEPLOY_KEYS:
            return f"deployment.{name}"
        if name == "training_tokens":
            return "training.tokens"
        return f"shape.{name}"

    # ---------------------------------------------------------------- provenance
    def constraints_meta(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.capacity:
            out["capacity"] = {f"{k}_B": [lo / 1e9, hi / 1e9] for k, (lo, hi) in self.capacity.items()}
            out["anchor"] = "; ".join(f"{k} parameters in [{lo / 1e9:g}, {hi / 1e9:g}] B"
                                      for k, (lo, hi) in self.capacity.items())
        else:
            out["anchor"] = "fixed model" if not self.shape_search else "none"
        if self.min_tokens_per_s_per_user is not None:
            out["min_tokens_per_s_per_user"] = self.min_tokens_per_s_per_user
        if self.max_ttft_s is not None:
            out["max_ttft_s"] = self.max_ttft_s
        for k in ("max_ttft_p99_s", "max_tpot_p99_s"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        for k in _COST_KEYS:
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        if self.quality is not None:
            out["quality"] = self.quality.meta()
            if self.quality.limit is not None:
                out["anchor"] = (self.quality.anchor() if out["anchor"] in ("none", "fixed model")
                                 else f"{out['anchor']}; {self.quality.anchor()}")
        return out

    def workload_meta(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k in WORKLOAD_KEYS:
            p = self.params[k]
            out[k] = _jsonable(p.value) if isinstance(p, Fixed) else p.describe()
        return out

    def hardware_names(self) -> list[str]:
        p = self.params["hardware"]
        return [p.value] if isinstance(p, Fixed) else list(cast(Choice, p).choices)

    def hardware_spec(self, name: str) -> Hardware:
        """The hardware kind ``name`` of this space (from its file when the space gave a path)."""
        return load_hardware(self.hardware_files.get(name, name))

    # ---------------------------------------------------------------- scoring
    def columns(self, samples: Mapping[str, Any], n: int | None = None) -> tuple[int, dict[str, np.ndarray]]:
        """Every parameter as a column of ``n`` points: the sampled ones from ``samples`` (1-D arrays or
        lists, one entry per point), the fixed ones broadcast.  ``n`` is needed only when nothing is
        searched."""
        for k, v in samples.items():
            if k not in self.params:
                raise KeyError(f"sample column '{k}' is not a parameter of {self.where}")
            if n is not None and len(v) != n:
                raise ValueError(f"sample column '{k}' has {len(v)} entries, expected {n}")
            n = len(v)
        missing = [k for k in self.searched if k not in samples]
        if missing:
            raise KeyError(f"samples lack searched parameter(s) {missing}")
        n = 1 if n is None else n
        cols: dict[str, np.ndarray] = {}
        for k, p in self.params.items():
            if k in samples:
                v = samples[k]
                cols[k] = (np.asarray(v, dtype=object) if k in TEXT_PARAMS
                           else np.asarray(v, dtype=np.float64))
            else:
                assert isinstance(p, Fixed)
                v = p.value
                cols[k] = np.full(n, v, dtype=object) if k in TEXT_PARAMS else np.full(n, float(v))
        return n, cols

    def evaluate(self, samples: Mapping[str, Any], n: int | None = None, detail: bool = True) -> Evaluation:
        """Score design points (cheap path: arrays only, no text).  ``detail=False`` skips the
        breakdown (``t_*_s`` are NaN; see :func:`explorer.simulate.simulate`): for grid scans."""
        n, cols = self.columns(samples, n)
        if n == 0:  # the simulator needs a row: score one and keep none
            one = {k: [p.choices[0] if isinstance(p, Choice) else p.low] for k, p in self.searched.items()}
            return self.evaluate(one, 1, detail).take(np.zeros(0, dtype=np.int64))
        values, shape_codes = self._design_values(cols, n)
        design, table = build_design(values, self.where)
        res = add_cost(simulate(design, table, detail=detail), design, table, self.usd_per_gpu_hour,
                       self.power_overhead_factor)
        return self._finish(n, cols, design, table, res, shape_codes)

    def classify(self, samples: Mapping[str, Any], n: int | None = None, structure: bool = True) -> np.ndarray:
        """The final reason code of every point whose code is decided before the simulator runs, 0
        for the points that must be simulated (what :meth:`evaluate` gives them is their code).

        Decided without simulating, in :meth:`evaluate`'s precedence (the first that applies): the
        shape rules (101-105), the capacity band and the quality limit (110, 111, 112: parameter
        counts and predicted loss need no simulation), then, with ``structure``, the simulator's
        structural checks that take precedence over every other simulator reason (1 format, 2-5
        parallel splits: :func:`_simulator_structure`).  Without ``structure`` the codes depend only on
        :attr:`screen_params`, so one point stands for every point that differs from it only in the
        other parameters (the grid counts whole blocks of points this way: explorer/grid.py)."""
        n, cols = self.columns(samples, n)
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        values, shape_codes = self._design_values(cols, n)
        design, table = build_design(values, self.where)
        counts = param_counts(design)
        _, band_code, _ = self._band(n, cols, design, {"params_total": counts["total"],
                                                        "params_active": counts["active"]})
        later = [band_code, _simulator_structure(design, table)] if structure else [band_code]
        code = shape_codes
        for codes in later:
            code = np.where(code == 0, codes, code)
        return code

    @property
    def screen_params(self) -> frozenset[str]:
        """The parameters :meth:`classify` ``(structure=False)`` depends on: the shape (or ``model``),
        the training tokens and, when quality is on, ``precision`` (its serving-format penalty)."""
        deployment = {"hardware", *WORKLOAD_KEYS, *DEPLOY_KEYS}
        if self.quality_on:
            deployment.discard("precision")
        return frozenset(k for k in self.params if k not in deployment)

    def _design_values(self, cols: dict[str, np.ndarray], n: int) -> tuple[dict[str, Any], np.ndarray]:
        """What :func:`explorer.design.build_design` takes for the points ``cols``, and the space's
        shape-rule codes (0 where every rule holds)."""
        shape_codes = np.zeros(n, dtype=np.int64)
        sim_cols = dict(cols)
        if not self.uses_model:
            sim_cols, shape_codes = self._shape_columns(cols, n)
        values: dict[str, Any] = {k: v for k, v in sim_cols.items() if k not in TEXT_PARAMS}
        hw = cols["hardware"].astype(str)
        if self.hardware_files:  # kinds given as files are loaded from them, not by name
            uniq, inv = np.unique(hw, return_inverse=True)
            hw = np.asarray([self.hardware_files.get(u, u) for u in uniq], dtype=object)[inv]
        values["hardware"] = hw
        values["precision"] = cols["precision"].astype(str)
        values["runtime"] = cols["runtime"].astype(str)
        if "draft_model" in cols:
            values["draft_model"] = cols["draft_model"].astype(str)
        if "serving" in cols:  # disaggregated prefill/decode rows (explorer/disagg.py)
            values["disagg"] = (cols["serving"].astype(str) == "disaggregated").astype(np.float64)
        if self.max_ttft_p99_s is not None or self.max_tpot_p99_s is not None:
            values["latency_percentiles"] = 1.0
        if self.uses_model:
            values["model"] = cols["model"].astype(str)
        return values, shape_codes

    def score(self, samples: Mapping[str, Any], n: int | None = None) -> pd.DataFrame:
        """Score design points into a results table (``explorer.results`` columns + ``c_*``)."""
        return self.frame(self.evaluate(samples, n))

    def _shape_columns(self, cols: dict[str, np.ndarray], n: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Derived shape columns, the space's shape rules as codes, and values made safe to simulate
        for rows that break a rule (the results table shows the sampled values)."""
        c = dict(cols)
        code = np.zeros(n, dtype=np.int64)

        def flag(rule: int, bad: np.ndarray) -> None:
            np.copyto(code, rule, where=bad & (code == 0))

        if "heads" in self.derived:
            H, d = c["hidden"], c["head_dim"]
            flag(101, np.mod(H, d) != 0)
            c["heads"] = np.maximum(np.floor(H / d), 1.0)
        if "ffn" in self.derived:
            c["ffn"] = c["expert_ffn"].copy()
        mla = c["kv_lora_rank"] > 0
        flag(102, ~mla & (np.mod(c["heads"], c["kv_heads"]) != 0))
        E = c["experts"]
        moe = E > 0
        k = c["experts_per_token"]
        flag(103, moe & ((k < 1) | (k > E)))
        flag(104, moe & (c["dense_layers"] >= c["layers"]))
        flag(105, c["sliding_layers"] > c["layers"])
        # dense rows of a mixed dense/MoE space carry no MoE parameters
        for m in _MOE_PARAMS:
            c[m] = np.where(moe, c[m], 0.0)
        c["experts_per_token"] = np.where(moe, np.clip(k, 1.0, np.maximum(E, 1.0)), 0.0)
        c["dense_layers"] = np.where(moe, np.minimum(c["dense_layers"], c["layers"] - 1.0), 0.0)
        c["sliding_layers"] = np.minimum(c["sliding_layers"], c["layers"])
        return c, code

    def _finish(self, n, cols, design, table, res, shape_codes) -> Evaluation:
        sim_code = np.asarray(res["reason_code"], dtype=np.int64)
        cons: dict[str, np.ndarray] = {}
        structural = (shape_codes > 0) | np.isin(sim_code, _SIM_STRUCTURAL)
        cons["structure"] = structural.astype(np.float64)
        cons["memory"] = res["memory_bytes_per_gpu"] / res["memory_capacity_bytes"] - 1.0
        code = np.where(shape_codes > 0, shape_codes, 0)
        band_cons, band_code, quality = self._band(n, cols, design, res)
        cons.update(band_cons)
        res = {**res, **quality}
        slo_code = np.zeros(n, dtype=np.int64)
        if self.min_tokens_per_s_per_user is not None:
            lim = self.min_tokens_per_s_per_user
            cons["min_tokens_per_s_per_user"] = (lim - res["tokens_per_s_per_user"]) / lim
            np.copyto(slo_code, 120, where=cons["min_tokens_per_s_per_user"] > 0)
        if self.max_ttft_s is not None:
            lim = self.max_ttft_s
            cons["max_ttft_s"] = (res["ttft_s"] - lim) / lim
            np.copyto(slo_code, 121, where=(cons["max_ttft_s"] > 0) & (slo_code == 0))
        for key, col, rule in (("max_ttft_p99_s", "ttft_p99_s", 122), ("max_tpot_p99_s", "tpot_p99_s", 123)):
            lim = getattr(self, key)
            if lim is not None:
                cons[key] = np.minimum((np.asarray(res[col], dtype=np.float64) - lim) / lim, _MAX_GRADE)
                np.copyto(slo_code, rule, where=(cons[key] > 0) & (slo_code == 0))
        if self.min_tokens_per_s_per_kw is not None:
            lim = self.min_tokens_per_s_per_kw
            cons["min_tokens_per_s_per_kw"] = (lim - res["tokens_per_s_per_kw"]) / lim
            np.copyto(slo_code, 130, where=(cons["min_tokens_per_s_per_kw"] > 0) & (slo_code == 0))
        if self.max_usd_per_million_tokens is not None:
            lim = self.max_usd_per_million_tokens
            cons["max_usd_per_million_tokens"] = np.minimum((res["usd_per_million_tokens"] - lim) / lim, _MAX_GRADE)
            np.copyto(slo_code, 131, where=(cons["max_usd_per_million_tokens"] > 0) & (slo_code == 0))
        # precedence: shape rules, capacity band, simulator (structure, then memory), SLOs
        for later in (band_code, sim_code, slo_code):
            code = np.where(code == 0, later, code)
        feasible = code == 0
        objectives = np.column_stack([np.asarray(res[k], dtype=np.float64) for k in self.objectives])
        if "usd_per_million_tokens" in self.objectives:  # zero throughput costs +inf: keep objectives finite
            objectives = np.minimum(objectives, np.finfo(np.float64).max)
        return Evaluation(n=n, cols=cols, design=design, table=table, res=res, code=code, feasible=feasible,
                          constraints=cons, objectives=objectives)

    def _band(self, n: int, cols: dict[str, np.ndarray], design: dict[str, np.ndarray],
              params: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray, dict[str, np.ndarray]]:
        """The capacity band and the quality limit (both decided by the design alone): their graded
        constraints, their code (110 total, 111 active, 112 quality: the first that fails; 0) and
        the quality columns (empty when quality is off).  ``params`` holds ``params_total`` and
        ``params_active`` (the simulator's, or :func:`explorer.model.param_counts` of the design:
        the same numbers)."""
        cons: dict[str, np.ndarray] = {}
        band_code = np.zeros(n, dtype=np.int64)
        for kind, rule in (("total", 110), ("active", 111)):
            if kind in self.capacity:
                lo, hi = self.capacity[kind]
                p = params[f"params_{kind}"]
                cons[f"params_{kind}"] = np.maximum((lo - p) / lo if lo > 0 else -p, (p - hi) / hi)
                np.copyto(band_code, rule, where=(cons[f"params_{kind}"] > 0) & (band_code == 0))
        quality: dict[str, np.ndarray] = {}
        if self.quality_on:  # predicted loss (explorer/quality.py) and its limit (explorer/constraints.py)
            quality = quality_results(design, self._training_tokens(cols, n), cols["precision"], self.quality)
            grade = grade_quality(quality, self.quality) if self.quality is not None else None
            if grade is not None:
                cons["quality"] = grade
                np.copyto(band_code, QUALITY_REASON, where=(grade > 0) & (band_code == 0))
        return cons, band_code, quality

    def _training_tokens(self, cols: dict[str, np.ndarray], n: int) -> np.ndarray:
        """Training tokens of each point: ``training.tokens``, else the preset's published tokens
        (checked at load: every preset of a quality space has them)."""
        if "training_tokens" in cols:
            return np.asarray(cols["training_tokens"], dtype=np.float64)
        tokens = _map_text(cols["model"], lambda m: get_preset(m).training_tokens)
        return np.asarray(tokens, dtype=np.float64)

    def frame(self, ev: Evaluation) -> pd.DataFrame:
        """The results table of an evaluation: ``explorer.results`` columns, the sampled values of the
        space's own parameters, the final ``feasible``/``reason_code``/``reason`` and ``c_*``."""
        model = _map_text(ev.cols["model"], lambda m: get_preset(m).shape.name) if self.uses_model else "custom"
        prec = _map_text(ev.cols["precision"], lambda p: parse_precision(p).label)
        rt = _map_text(ev.cols["runtime"], lambda r: load_runtime(r).name)
        df = results_frame(ev.design, ev.table, ev.res, text={"model": model, "precision": prec, "runtime": rt})
        if "serving" in ev.cols:
            df["serving"] = ev.cols["serving"].astype(str)
            for k in ("prefill_tp", "prefill_pp"):
                df[k] = np.asarray(ev.design[k]).astype(np.int64)
        if "serving" in ev.cols or "draft_tokens" in ev.cols:  # explorer/report/modes.py compares these
            serving = df["serving"].to_numpy(dtype=object) if "serving" in df.columns else np.full(len(df), "aggregated")
            spec = (np.asarray(ev.cols["draft_tokens"], dtype=np.float64) > 0 if "draft_tokens" in ev.cols
                    else np.zeros(len(df), dtype=bool))
            df["serving_mode"] = np.where(spec, serving.astype(str) + " + speculative", serving.astype(str))
        if not self.uses_model:
            bad = np.isin(ev.code, _SHAPE_RULES)
            for k in SHAPE_COLUMNS:
                if k in ev.cols and bad.any():
                    df.loc[bad, k] = ev.cols[k][bad].astype(np.int64)
        df["feasible"] = ev.feasible
        df["reason_code"] = ev.code
        reason = df["reason"].to_numpy(dtype=object).copy()
        for c in np.unique(ev.code):
            if c in SPACE_REASONS:
                m = ev.code == c
                reason[m] = self._space_reasons(int(c), ev, m)
        df["reason"] = reason
        for k, v in ev.constraints.items():
            df[f"c_{k}"] = v
        return df

    def _space_reasons(self, code: int, ev: Evaluation, m: np.ndarray) -> list[str]:
        c, r = ev.cols, ev.res
        if code == 101:
            return [f"hidden={int(h)} is not a multiple of head_dim={int(d)}"
                    for h, d in zip(c["hidden"][m], c["head_dim"][m], strict=True)]
        if code == 102:
            heads = ev.design["heads"][m]
            return [f"kv_heads={int(k)} does not divide heads={int(h)}"
                    for k, h in zip(c["kv_heads"][m], heads, strict=True)]
        if code == 103:
            return [f"experts_per_token={int(k)} outside 1..experts={int(e)}"
                    for k, e in zip(c["experts_per_token"][m], c["experts"][m], strict=True)]
        if code == 104:
            return [f"dense_layers={int(a)} not below layers={int(b)}"
                    for a, b in zip(c["dense_layers"][m], c["layers"][m], strict=True)]
        if code == 105:
            return [f"sliding_layers={int(a)} exceeds layers={int(b)}"
                    for a, b in zip(c["sliding_layers"][m], c["layers"][m], strict=True)]
        if code in (110, 111):
            kind = "total" if code == 110 else "active"
            lo, hi = self.capacity[kind]
            return [f"{kind} parameters {p / 1e9:.1f} B outside the capacity band {lo / 1e9:g}-{hi / 1e9:g} B"
                    for p in r[f"params_{kind}"][m]]
        if code == QUALITY_REASON and self.quality is not None:
            return quality_reasons(r, self.quality, m)
        if code == 120:
            return [f"tokens/s/user {x:.1f} below the minimum {self.min_tokens_per_s_per_user:g}"
                    for x in r["tokens_per_s_per_user"][m]]
        if code == 121:
            return [f"TTFT {x:.3g} s above the maximum {self.max_ttft_s:g} s" for x in r["ttft_s"][m]]
        if code in (122, 123):
            what, col, lim = (("TTFT", "ttft_p99_s", self.max_ttft_p99_s) if code == 122
                              else ("TPOT", "tpot_p99_s", self.max_tpot_p99_s))
            return [f"p99 {what} {x:.3g} s above the maximum {lim:g} s" for x in r[col][m]]
        if code == 130:
            return [f"tokens/s/kW {x:.1f} below the minimum {self.min_tokens_per_s_per_kw:g}"
                    for x in r["tokens_per_s_per_kw"][m]]
        if code == 131:
            return [f"USD {x:.3g} per million tokens above the maximum {self.max_usd_per_million_tokens:g}"
                    for x in r["usd_per_million_tokens"][m]]
        return [reason_label(code)] * int(m.sum())


@dataclass
class Evaluation:
    """Scores of ``n`` design points before they become a table."""

    n: int
    cols: dict[str, np.ndarray]  # every parameter as sampled (fixed ones broadcast)
    design: dict[str, np.ndarray]
    table: HardwareTable
    res: dict[str, np.ndarray]
    code: np.ndarray  # final reason code (0 feasible)
    feasible: np.ndarray
    constraints: dict[str, np.ndarray]  # graded, <= 0 feasible
    objectives: np.ndarray  # (n, m) in the space's objective order

    def take(self, idx: np.ndarray) -> Evaluation:
        """The rows ``idx`` only."""
        def sub(d: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            return {k: np.asarray(v)[idx] for k, v in d.items()}

        return Evaluation(len(idx), sub(self.cols), sub(self.design), self.table, sub(self.res), self.code[idx],
                          self.feasible[idx], sub(self.constraints), self.objectives[idx])




def _simulator_structure(design: Mapping[str, np.ndarray], table: HardwareTable) -> np.ndarray:
    """The simulator's structural reasons of each design point, predicted from its columns alone:
    the checks of :func:`explorer.simulate.simulate` that take precedence over memory (6), batch
    (7) and load (8) -- 1 a format the hardware lacks, 2 heads / KV heads not splitting over ``tp``,
    3 more stages than layers, 4 ``ep`` not dividing the experts or ``tp*dp`` (or ``ep`` without
    experts), 5 ``ffn`` not splitting over ``tp`` -- the smallest code that applies, 0 where none
    does (the rules themselves: :func:`explorer.simulate.structural_checks`, the simulator's own).
    Disaggregated rows (explorer/disagg.py scores their pools) are left to the simulator (0).
    tests/test_grid_screen.py checks it against the simulator on random designs."""
    n = len(np.asarray(design["hw_idx"]))

    def col(k: str) -> np.ndarray:
        return np.broadcast_to(np.asarray(design[k], dtype=np.float64), (n,))

    F, L, nq, nkv = col("ffn"), col("layers"), col("heads"), col("kv_heads")
    E, t, p, e, dp = col("experts"), col("tp"), col("pp"), col("ep"), col("dp")
    mla = col("kv_lora_rank") > 0
    support = format_support_masks(table.kinds)[np.asarray(design["hw_idx"], dtype=np.int64)]
    fmt_mask = np.broadcast_to(np.asarray(design["fmt_mask"], dtype=np.int64), (n,))
    reason = np.zeros(n, dtype=np.int64)
    for code, bad in structural_checks(F, t, E, e, dp, p, L, nq, nkv, mla, fmt_mask, support):  # later ones win
        reason = np.where(bad, code, reason)
    if "disagg" in design:
        reason = np.where(np.broadcast_to(np.asarray(design["disagg"], dtype=np.float64), (n,)) != 0, 0, reason)
    return reason


def _map_text(col: np.ndarray, fn) -> np.ndarray:
    """Apply ``fn`` once per distinct value of a text column."""
    uniq, inv = np.unique(col.astype(str), return_inverse=True)
    return np.array([fn(u) for u in uniq], dtype=object)[inv]


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


# --------------------------------------------------------------------------------------------
# loading
# --------------------------------------------------------------------------------------------


def load_space(path: str | Path) -> SearchSpace:
    """Read and validate a search-space YAML file."""
    p = Path(path)
    text = read_text_file(p, "YAML")
    return parse_space(parse_yaml_text(text, str(p)), str(p), text)


def space_from_text(text: str, where: str) -> SearchSpace:
    """Parse a space from its YAML text (worker processes re-create the space this way)."""
    return parse_space(parse_yaml_text(text, where), where, text)


def parse_space(data: Any, where: str, text: str = "") -> SearchSpace:
    """Validate a parsed YAML document (see the module docstring and docs/sweeps.md)."""
    if data is None:
        raise SpecError(where, None, "empty file: expected a search space (hardware, shape or model, workload, ...)")
    top = Section(data, where)
    top.check_keys({"description", "hardware", "model", "shape", "workload", "deployment", "constraints",
                    "objectives", "search", "cost", "training", "decision"})
    description = top.string("description", "")
    params: dict[str, Param] = {}

    # hardware: shipped kinds by name, other kinds by file path (relative to the space file's folder)
    hw_files: dict[str, str] = {}
    hw_source: dict[str, str] = {}

    def check_hardware(v: Any, where_: str, key: str) -> str:
        hw = _check_hardware(v, where_, key)
        src = str(Path(hw.path).resolve()) if hw.path else hw.name
        if hw_source.setdefault(hw.name, src) != src:
            raise SpecError(where_, key, f"'{v}' and another entry both define hardware '{hw.name}'; give "
                                         "each kind once (rename the file's 'name:')")
        if hw.path and Path(hw.path).resolve().parent != HARDWARE_DIR.resolve():
            hw_files[hw.name] = src
        return hw.name

    params["hardware"] = _text_param(top, "hardware", check_hardware)

    # model preset or shape
    has_model, has_shape = top.has("model"), top.has("shape")
    if has_model and has_shape:
        raise SpecError(where, "shape", "give either 'model' (a preset: deployment-only search) or 'shape', not both")
    if not has_model and not has_shape:
        raise SpecError(where, None, "give 'model' (a preset name) or 'shape' (the model shape to search)")
    derived: list[str] = []
    shape_search = False
    if has_model:
        params["model"] = _text_param(top, "model", _check_model)
    else:
        sh = top.section("shape")
        sh.check_keys(set(SHAPE_COLUMNS))
        given = {k: _num_param(sh, k) for k in SHAPE_COLUMNS if sh.has(k)}
        shape_search = any(not isinstance(p, Fixed) for p in given.values())
        for req, why in (("hidden", ""), ("layers", ""), ("kv_heads", " (e.g. 8 for grouped-query attention)")):
            if req not in given:
                raise SpecError(where, f"shape.{req}", f"required key is missing{why}")
        moe_possible = "experts" in given and _max_value(given["experts"]) > 0
        moe_always = "experts" in given and _min_value(given["experts"]) > 0
        if "ffn" not in given:
            if not moe_always:
                raise SpecError(where, "shape.ffn", "required key is missing (MLP width; MoE shapes may omit it "
                                                    "when experts > 0 everywhere: ffn then equals expert_ffn)")
            derived.append("ffn")
        if moe_possible:
            for req in ("experts_per_token", "expert_ffn"):
                if req not in given:
                    raise SpecError(where, f"shape.{req}", "required key is missing for an MoE shape (experts > 0)")
        else:
            extra = [k for k in _MOE_PARAMS if k in given and _max_value(given[k]) > 0]
            if extra:
                raise SpecError(where, f"shape.{extra[0]}", "MoE parameter given but the shape has no experts "
                                                            "(set shape.experts > 0)")
        if "heads" not in given:
            derived.append("heads")
        for k in SHAPE_COLUMNS:
            if k in given:
                params[k] = given[k]
            elif k == "heads" or (k == "ffn" and "ffn" in derived):
                continue  # derived per point
            else:
                params[k] = Fixed(int(_SHAPE_DEFAULTS[k]))
        _check_fixed_shape(params, where)

    # workload
    wl = top.section("workload")
    wl.check_keys(set(WORKLOAD_KEYS))
    for k in WORKLOAD_KEYS:
        if not wl.has(k):
            raise SpecError(where, f"workload.{k}", "required key is missing (tokens per request)")
        params[k] = _num_param(wl, k)

    # deployment
    dep = top.section("deployment")
    dep.check_keys(set(DEPLOY_KEYS))
    if not dep.has("batch"):
        raise SpecError(where, "deployment.batch", "required key is missing (concurrent sequences per replica)")
    params["batch"] = _num_param(dep, "batch")
    params["precision"] = _text_param(dep, "precision", _check_precision) if dep.has("precision") else Fixed("bf16")
    # serving runtime profile(s) (runtimes/*.yaml); a list competes on one front
    params["runtime"] = (_text_param(dep, "runtime", _check_runtime) if dep.has("runtime")
                         else Fixed(DEFAULT_RUNTIME))
    for k in ("tp", "pp", "ep", "dp", "moe_imbalance"):
        params[k] = _num_param(dep, k) if dep.has(k) else Fixed(_DEPLOY_DEFAULTS[k])
    _check_ep(params, where, has_model)
    # speculative decoding (explorer/speculative.py): parameters only when the space names them
    for k in ("draft_tokens", "acceptance"):
        if dep.has(k):
            params[k] = _num_param(dep, k)
    if dep.has("draft_model"):
        params["draft_model"] = _text_param(dep, "draft_model", _check_draft_model)
    _check_speculation(params, where, has_model)
    # disaggregated prefill/decode (explorer/disagg.py): parameters only when the space names them
    if dep.has("serving"):
        params["serving"] = _text_param(dep, "serving", _check_serving)
    for k in ("prefill_tp", "prefill_pp"):
        if dep.has(k):
            if not dep.has("serving"):
                raise SpecError(where, f"deployment.{k}", "needs deployment.serving (aggregated, disaggregated)")
            params[k] = _num_param(dep, k)

    # constraints
    cons = top.section("constraints", required=False)
    cons.check_keys({"capacity", "min_tokens_per_s_per_user", "max_ttft_s", "max_ttft_p99_s", "max_tpot_p99_s",
                     "min_tokens_per_s_per_kw",
                     "max_usd_per_million_tokens", "quality"})
    capacity: dict[str, tuple[float, float]] = {}
    if cons.has("capacity"):
        cap = cons.section("capacity")
        cap.check_keys({"total_B", "active_B"})
        for kind in ("total", "active"):
            if cap.has(f"{kind}_B"):
                capacity[kind] = _band(cap, f"{kind}_B")
        if not capacity:
            raise SpecError(where, "constraints.capacity", "give total_B: [low, high] and/or active_B: [low, high]")
    quality = parse_quality(cons.section("quality")) if cons.has("quality") else None
    if shape_search and not capacity and (quality is None or quality.limit is None):
        raise SpecError(
            where, "constraints.capacity",
            "required when the shape is searched: state a capacity band (e.g. capacity: {total_B: [65, 75]}) or a "
            "predicted-loss bound (quality: {reference: llama-3.1-70b, max_loss_increase_pct: 0.5}); "
            "without a quality anchor a throughput search simply picks the smallest model",
        )
    if has_model and capacity:
        _check_presets_in_band(params["model"], capacity, where)
    min_tpu = cons.number("min_tokens_per_s_per_user", None, min_value=0, min_exclusive=True)
    max_ttft = cons.number("max_ttft_s", None, min_value=0, min_exclusive=True)
    p99 = {k: cons.number(k, None, min_value=0, min_exclusive=True) for k in ("max_ttft_p99_s", "max_tpot_p99_s")}
    min_kw = cons.number("min_tokens_per_s_per_kw", None, min_value=0, min_exclusive=True)
    max_usd = cons.number("max_usd_per_million_tokens", None, min_value=0, min_exclusive=True)

    # objectives
    objectives = dict(DEFAULT_OBJECTIVES)
    if top.has("objectives"):
        obj = top.section("objectives")
        obj.check_keys(set(OBJECTIVE_COLUMNS))
        objectives = {str(k): obj.string(k, choices=set(DIRECTIONS)) for k in obj.data}
        if not objectives:
            raise SpecError(where, "objectives", "give at least one objective (e.g. tokens_per_s_per_gpu: maximize)")

    cost = _cost_settings(top, params["hardware"], hw_files, objectives, min_kw, max_usd)
    quality_on, decision = _quality_settings(top, params, quality, objectives, shape_search, has_model)

    # search settings
    se = top.section("search", required=False)
    se.check_keys({"sampler", "trials", "seed", "population_size", "batch_trials", "hypervolume_reference",
                   "refine_batch", "trial_unit", "scan_batches",
                   "max_grid_points", "grid_sample"})
    defaults = SearchSettings()
    ref = None
    if se.has("hypervolume_reference"):
        raw = se.raw("hypervolume_reference")
        if not isinstance(raw, list) or len(raw) != len(objectives):
            raise SpecError(where, "search.hypervolume_reference",
                            f"expected a list of {len(objectives)} numbers (one per objective), got {raw!r}")
        ref = tuple(float(check_number(v, where, f"search.hypervolume_reference[{i}]")) for i, v in enumerate(raw))
    settings = SearchSettings(
        sampler=se.string("sampler", defaults.sampler, choices=set(SAMPLERS)),
        trials=se.number("trials", defaults.trials, integer=True, min_value=1),
        seed=se.number("seed", defaults.seed, integer=True, min_value=0, max_value=MAX_SEED),
        population_size=se.number("population_size", defaults.population_size, integer=True, min_value=2),
        batch_trials=se.number("batch_trials", None, integer=True, min_value=1),
        hypervolume_reference=ref,
        max_grid_points=se.number("max_grid_points", defaults.max_grid_points, integer=True, min_value=1),
        grid_sample=se.number("grid_sample", defaults.grid_sample, integer=True, min_value=0),
        refine_batch=_flag(se, "refine_batch", defaults.refine_batch),
        trial_unit=se.string("trial_unit", defaults.trial_unit, choices=set(TRIAL_UNITS)),
        scan_batches=se.number("scan_batches", defaults.scan_batches, integer=True, min_value=2),
    )
    return SearchSpace(
        where=where, text=text, params=params, derived=tuple(derived), shape_search=shape_search,
        capacity=capacity, min_tokens_per_s_per_user=min_tpu, max_ttft_s=max_ttft, objectives=objectives,
        search=settings, description=description, hardware_files=hw_files,
        min_tokens_per_s_per_kw=min_kw, max_usd_per_million_tokens=max_usd, **cost, **p99,
        quality_on=quality_on, quality=quality, decision=decision,
    )


def _quality_settings(top: Section, params: dict[str, Param], quality: QualitySpec | None,
                      objectives: dict[str, str], shape_search: bool, has_model: bool
                      ) -> tuple[bool, DecisionSpec | None]:
    """``training: {tokens}`` (a parameter: fixed, choices or a range), ``decision`` and whether
    quality is on; every point of a quality space must have known training tokens."""
    where = top.where
    if top.has("training"):
        tr = top.section("training")
        tr.check_keys({"tokens"})
        params["training_tokens"] = _tokens_param(tr, "tokens")
    decision = (parse_decision(top.section("decision"), quality.reference if quality is not None else None)
                if top.has("decision") else None)
    on = (top.has("training") or quality is not None or "predicted_loss" in objectives or decision is not None)
    if not on or "training_tokens" in params:
        return on, decision
    why = ("constraints.quality" if quality is not None else "objectives.predicted_loss"
           if "predicted_loss" in objectives else "decision")
    if not has_model:
        raise SpecError(where, "training.tokens", f"required by {why}: the predicted loss needs the training "
                                                  "budget of the shapes (e.g. training: {tokens: 1.5e+13})")
    missing = [n for n in _values(params["model"]) if get_preset(n).training_tokens is None]
    if missing:
        raise SpecError(where, "training.tokens", f"required by {why}: {', '.join(missing)} has no published "
                                                  "training tokens (give training: {tokens: ...})")
    return on, decision


def _listed(raw: Any, where: str, key: str, one) -> Param | None:
    """A choice list (``[a, b]`` or ``{choices: [a, b]}``) of values each checked by
    ``one(value, key)``; None when ``raw`` is neither form."""
    if isinstance(raw, list):
        return _choices([one(v, f"{key}[{i}]") for i, v in enumerate(raw)], where, key)
    if isinstance(raw, Mapping) and "choices" in raw:
        Section(raw, where, key).check_keys({"choices"})
        ch = raw["choices"]
        if not isinstance(ch, list):
            raise SpecError(where, f"{key}.choices", f"expected a list, got {ch!r}")
        return _choices([one(v, f"{key}.choices[{i}]") for i, v in enumerate(ch)], where, f"{key}.choices")
    return None


def _tokens_param(sec: Section, name: str) -> Param:
    """Training tokens: a number, a choice list or a float range (``{low, high, log: true}``)."""
    where, key = sec.where, sec.key(name)
    raw = sec.raw(name)
    listed = _listed(raw, where, key, lambda v, k: tokens_value(v, where, k))
    if listed is not None:
        return listed
    if isinstance(raw, Mapping):
        rs = Section(raw, where, key)
        rs.check_keys({"low", "high", "step", "log"})
        low = tokens_value(rs.raw("low"), where, f"{key}.low")
        high = tokens_value(rs.raw("high"), where, f"{key}.high")
        log = _flag(rs, "log", False)
        if low > high:
            raise SpecError(where, key, f"empty range: low {low:g} > high {high:g}")
        step = tokens_value(rs.raw("step"), where, f"{key}.step") if rs.has("step") else None
        if log and step is not None:
            raise SpecError(where, f"{key}.step", "a log range takes no step (Optuna samples log ranges continuously)")
        if step is not None and not math.isclose(((high - low) / step) % 1.0, 0.0, abs_tol=1e-9) \
                and not math.isclose(((high - low) / step) % 1.0, 1.0, abs_tol=1e-9):
            raise SpecError(where, key, f"high {high:g} is not low {low:g} plus a whole number of steps {step:g}")
        return FloatRange(low, high, step, log)
    return Fixed(tokens_value(raw, where, key))


def _cost_settings(top: Section, hw_param: Param, hw_files: dict[str, str], objectives: dict[str, str],
                   min_kw: float | None, max_usd: float | None) -> dict[str, float | None]:
    """The ``cost:`` section (``usd_per_gpu_hour``, ``power_overhead_factor``), and the rule that a
    space asking for a cost figure (objective or constraint) has it for every hardware kind."""
    sec = top.section("cost", required=False)
    sec.check_keys({"usd_per_gpu_hour", "power_overhead_factor"})
    usd = sec.number("usd_per_gpu_hour", None, min_value=0, min_exclusive=True, max_value=10_000)
    factor = sec.number("power_overhead_factor", None, min_value=1, max_value=10)
    names = [hw_param.value] if isinstance(hw_param, Fixed) else list(cast(Choice, hw_param).choices)
    kinds = [load_hardware(hw_files.get(h, h)) for h in names]
    if usd is None and ("usd_per_million_tokens" in objectives or max_usd is not None):
        bad = [h.name for h in kinds if not math.isfinite(h.usd_per_gpu_hour)]
        if bad:
            key = "objectives.usd_per_million_tokens" if max_usd is None else "constraints.max_usd_per_million_tokens"
            raise SpecError(top.where, key, f"hardware {', '.join(bad)} has no price per GPU-hour (no 'price:' in its "
                                            "file); set cost.usd_per_gpu_hour: <USD>")
    if "tokens_per_s_per_kw" in objectives or min_kw is not None:
        bad = [h.name for h in kinds if not math.isfinite(h.board_power_w)]
        if bad:
            key = "objectives.tokens_per_s_per_kw" if min_kw is None else "constraints.min_tokens_per_s_per_kw"
            raise SpecError(top.where, key, f"hardware {', '.join(bad)} has no board power (no 'power:' in its file); "
                                            "add power: {board_W: <W>, source: ...} to it")
    return {"usd_per_gpu_hour": None if usd is None else float(usd),
            "power_overhead_factor": None if factor is None else float(factor)}


# ---------------------------------------------------------------- parameter parsing


def _flag(sec: Section, name: str, default: bool) -> bool:
    v = sec.raw(name, default)
    if not isinstance(v, bool):
        raise SpecError(sec.where, sec.key(name), f"expected true or false, got {v!r}")
    return v


def _num_param(sec: Section, name: str) -> Param:
    """A numeric parameter: fixed, choices or a range."""
    where, key = sec.where, sec.key(name)
    raw = sec.raw(name)
    flag = name in FLAG_PARAMS
    is_float = name in _FLOAT_LOW
    lo_bound = _FLOAT_LOW[name] if is_float else (1 if name in _MIN1 else 0)
    hi_bound = SIZE_LIMITS.get(name)  # beyond it the simulator cannot represent the value

    def one(v: Any, k: str) -> Any:
        if flag:
            if isinstance(v, bool):
                return int(v)
            if v in (0, 1) and not isinstance(v, float):
                return int(v)
            raise SpecError(where, k, f"expected true/false, got {v!r}")
        return check_number(v, where, k, integer=not is_float, min_value=lo_bound, max_value=hi_bound)

    listed = _listed(raw, where, key, one)
    if listed is not None:
        return listed
    if isinstance(raw, Mapping):
        rs = Section(raw, where, key)
        rs.check_keys({"low", "high", "step", "log"})
        if flag:
            raise SpecError(where, key, "a flag takes true/false or a choice list, not a range")
        low = rs.number("low", integer=not is_float, min_value=lo_bound, max_value=hi_bound)
        high = rs.number("high", integer=not is_float, min_value=lo_bound, max_value=hi_bound)
        log = rs.raw("log", False)
        if not isinstance(log, bool):
            raise SpecError(where, f"{key}.log", f"expected true/false, got {log!r}")
        if low > high:
            raise SpecError(where, key, f"empty range: low {low} > high {high}")
        step = rs.number("step", None, integer=not is_float, min_value=0, max_value=hi_bound, min_exclusive=True)
        if log and step is not None and not (not is_float and step == 1):
            raise SpecError(where, f"{key}.step", "a log range takes no step (Optuna samples log ranges continuously)")
        if log and low <= 0:
            raise SpecError(where, f"{key}.low", f"a log range needs low > 0, got {low}")
        if is_float:
            if step is not None and not math.isclose(((high - low) / step) % 1.0, 0.0, abs_tol=1e-9) \
                    and not math.isclose(((high - low) / step) % 1.0, 1.0, abs_tol=1e-9):
                raise SpecError(where, key, f"high {high} is not low {low} plus a whole number of steps {step}")
            return FloatRange(float(low), float(high), None if step is None else float(step), log)
        step = 1 if step is None else int(step)
        if (high - low) % step:
            raise SpecError(where, key, f"high {high} is not low {low} plus a whole number of steps {step} "
                                        f"(e.g. high: {low + (high - low) // step * step})")
        return IntRange(int(low), int(high), step, log)
    return Fixed(one(raw, key))


def _choices(values: list[Any], where: str, key: str) -> Param:
    if not values:
        raise SpecError(where, key, "empty choice list")
    seen: list[Any] = []
    for v in values:
        if v in seen:
            raise SpecError(where, key, f"duplicate choice {v!r}")
        seen.append(v)
    return Choice(tuple(values)) if len(values) > 1 else Fixed(values[0])


def _check_draft_model(v: Any, where: str, key: str) -> str:
    """A draft model: a preset name, or ``mtp`` for the model's own MTP module."""
    if not isinstance(v, str) or not v.strip():
        raise SpecError(where, key, f"expected a model preset name or 'mtp', got {v!r}")
    check_name_text(v, where, key, "model")
    return "mtp" if is_mtp_name(v) else get_preset(v, where, key).shape.name


def _param_values(p: Param) -> list[Any]:
    if isinstance(p, Fixed):
        return [p.value]
    if isinstance(p, Choice):
        return list(p.choices)
    return [p.low, p.high]


def _check_speculation(params: dict[str, Param], where: str, has_model: bool) -> None:
    """Speculation keys that contradict each other or the model, as SpecErrors at load time."""
    if "draft_tokens" not in params:
        for k in ("acceptance", "draft_model"):
            if k in params:
                raise SpecError(where, f"deployment.{k}", "needs deployment.draft_tokens (draft tokens per step)")
        return
    if max(_param_values(params["draft_tokens"])) == 0:
        return
    if "acceptance" not in params:
        raise SpecError(where, "deployment.acceptance", "required with deployment.draft_tokens > 0: a per-position "
                                                        "acceptance probability in [0, 1] (or a choice list/range)")
    drafts = _param_values(params["draft_model"]) if "draft_model" in params else ["mtp"]
    if "mtp" in drafts:
        models = [get_preset(m) for m in _param_values(params["model"])] if has_model else []
        lacking = [m.shape.name for m in models if m.mtp_layers <= 0]
        if not has_model or lacking:
            raise SpecError(where, "deployment.draft_model",
                            f"{'the custom shape' if not has_model else ', '.join(lacking)} has no MTP module: "
                            "name a draft model preset (deployment.draft_model)")


def _text_param(sec: Section, name: str, check) -> Param:
    where, key = sec.where, sec.key(name)
    raw = sec.raw(name)
    if isinstance(raw, Mapping):
        rs = Section(raw, where, key)
        rs.check_keys({"choices"})
        raw = rs.raw("choices")
        key = f"{key}.choices"
        if not isinstance(raw, list):
            raise SpecError(where, key, f"expected a list, got {raw!r}")
    if isinstance(raw, list):
        vals = [check(v, where, f"{key}[{i}]") for i, v in enumerate(raw)]
        return _choices(vals, where, key)
    return Fixed(check(raw, where, key))


def _is_path(v: str) -> bool:
    return Path(v).suffix.lower() in (".yaml", ".yml") or "/" in v or "\\" in v


def _check_hardware(v: Any, where: str, key: str) -> Hardware:
    """A hardware kind by shipped name or alias, or by file path: relative paths are looked up in the
    space file's folder, then in the current folder."""
    if not isinstance(v, str) or not v.strip():
        raise SpecError(where, key, f"expected a hardware name or YAML file path, got {v!r}")
    check_name_text(v, where, key, "hardware")
    target = v
    if _is_path(v):
        p = Path(v).expanduser()
        cands = [p] if p.is_absolute() else [Path(where).parent / p, p]
        found = next((c for c in cands if c.exists()), None)
        if found is None:
            looked = " and ".join(f"'{c}'" for c in dict.fromkeys(str(c) for c in cands))
            raise SpecError(where, key, f"hardware file '{v}' not found (looked for {looked}); give a shipped "
                                        "name (explorer hardware) or a YAML file path")
        target = str(found)
    try:
        return load_hardware(target)
    except SpecError as e:
        if e.where == "--hardware":  # unknown name: re-anchor the message at this file and key
            raise SpecError(where, key, e.message) from None
        raise


def _check_model(v: Any, where: str, key: str) -> str:
    if not isinstance(v, str):
        raise SpecError(where, key, f"expected a model preset name, got {v!r}")
    return get_preset(v, where, key).shape.name


def _check_serving(v: Any, where: str, key: str) -> str:
    if v not in SERVING_MODES:
        raise SpecError(where, key, f"expected one of {', '.join(SERVING_MODES)}, got {v!r}")
    return str(v)


def _check_runtime(v: Any, where: str, key: str) -> str:
    if not isinstance(v, str):
        raise SpecError(where, key, f"expected a runtime name (trtllm, vllm, sglang), got {v!r}")
    check_name_text(v, where, key, "runtime")
    return load_runtime(v, where, key).name


def _check_precision(v: Any, where: str, key: str) -> str:
    if not isinstance(v, str):
        raise SpecError(where, key, f"expected a precision name (bf16, fp8, fp4, ...), got {v!r}")
    parse_precision(v, where, key)
    return v


def _band(sec: Section, name: str) -> tuple[float, float]:
    where, key = sec.where, sec.key(name)
    raw = sec.raw(name)
    if not isinstance(raw, list) or len(raw) != 2:
        raise SpecError(where, key, f"expected [low, high] in billions of parameters, got {raw!r}")
    lo = check_number(raw[0], where, f"{key}[0]", min_value=0)
    hi = check_number(raw[1], where, f"{key}[1]", min_value=0, min_exclusive=True)
    if lo > hi:
        raise SpecError(where, key, f"empty band: low {lo} > high {hi}")
    return float(lo) * 1e9, float(hi) * 1e9


def _values(p: Param) -> list[Any]:
    if isinstance(p, Fixed):
        return [p.value]
    if isinstance(p, Choice):
        return list(p.choices)
    return [p.low, p.high]


def _min_value(p: Param) -> float:
    return min(_values(p))


def _max_value(p: Param) -> float:
    return max(_values(p))


def _check_fixed_shape(params: dict[str, Param], where: str) -> None:
    """Contradictions between fixed shape values (ranges are checked per point instead)."""

    def fixed(k: str) -> Any:
        p = params.get(k)
        return p.value if isinstance(p, Fixed) else None

    heads, kv, H, d = fixed("heads"), fixed("kv_heads"), fixed("hidden"), fixed("head_dim")
    if heads is None and H is not None and d is not None:
        if H % d:
            raise SpecError(where, "shape.head_dim", f"hidden {H} is not a multiple of head_dim {d} "
                                                     "(heads = hidden/head_dim when heads is not given)")
        heads = H // d
    if heads is not None and kv is not None and not fixed("kv_lora_rank") and heads % kv:
        raise SpecError(where, "shape.kv_heads", f"kv_heads {kv} does not divide heads {heads}")
    if kv is not None and "kv_heads" in params and not fixed("kv_lora_rank"):
        hmax = _max_value(params["heads"]) if "heads" in params else (
            _max_value(params["hidden"]) // _min_value(params["head_dim"]))
        if kv > hmax:
            raise SpecError(where, "shape.kv_heads", f"kv_heads {kv} exceeds the largest possible heads {int(hmax)}")
    E, k = fixed("experts"), fixed("experts_per_token")
    if E and k is not None and not 1 <= k <= E:
        raise SpecError(where, "shape.experts_per_token", f"must be between 1 and experts={E}, got {k}")
    dl, L = fixed("dense_layers"), fixed("layers")
    if E and dl is not None and L is not None and dl >= L:
        raise SpecError(where, "shape.dense_layers", f"must be < layers={L}, got {dl}")


def _check_ep(params: dict[str, Param], where: str, has_model: bool) -> None:
    if _max_value(params["ep"]) <= 1:
        return
    if has_model:
        names = _values(params["model"])
        moe = any(get_preset(n).shape.experts > 0 for n in names)
    else:
        moe = _max_value(params.get("experts", Fixed(0))) > 0
    if not moe:
        raise SpecError(where, "deployment.ep", "expert parallelism needs an MoE model (experts > 0); "
                                                "this space has none")


def _check_presets_in_band(p: Param, capacity: dict[str, tuple[float, float]], where: str) -> None:
    names = _values(p)
    inside = []
    for n in names:
        counts = param_counts(get_preset(n).shape.columns())
        inside.append(all(lo <= float(counts[k]) <= hi for k, (lo, hi) in capacity.items()))
    if not any(inside):
        n = names[0]
        counts = param_counts(get_preset(n).shape.columns())
        desc = ", ".join(f"{k} {float(counts[k]) / 1e9:.1f} B" for k in capacity)
        raise SpecError(where, "constraints.capacity", f"no model in the space lies inside the band ({n}: {desc})")
