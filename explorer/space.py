"""Search spaces: ``search_spaces/<name>.yaml`` -> a validated :class:`SearchSpace` -> design points
-> scored results (feasibility, graded constraints, objectives).

A space says what to sample and what to hold fixed (a model shape, or a fixed ``model`` preset for a
deployment-only search), the workload, the hardware, the constraints, the objectives and the search
settings.  This module holds :class:`SearchSpace` and its scoring of sampled points
(:class:`Evaluation`); the parameter kinds, the search settings and the reason codes are in
:mod:`explorer.space_spec`, reading and validating a space file in :mod:`explorer.space_parse` (their
names are re-exported here).

Rules that depend on the sampled combination (``kv_heads`` must divide ``heads``, ``hidden`` must be
a multiple of ``head_dim`` when heads are derived, ...) never raise: such points are scored as
infeasible with a reason, like the simulator's own rules.

**Graded constraints** (``c_*`` columns, one per rule, dimensionless, ``<= 0`` feasible) let the
samplers tell "nearly feasible" from "hopeless": ``c_memory = needed/usable - 1``, band violations as
relative distance outside the band, SLOs as relative shortfall, and ``c_structure = 1`` when a
divisibility rule fails (these have no natural grade).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
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
    quality_reasons,
    quality_results,
)
from explorer.cost import add_cost
from explorer.design import build_design
from explorer.errors import SpecError
from explorer.hardware import Hardware, HardwareTable, load_hardware
from explorer.model import SHAPE_COLUMNS, get_preset, param_counts
from explorer.precision import parse_precision
from explorer.results import results_frame
from explorer.runtime import load_runtime
from explorer.simulate import format_support_masks, simulate, structural_checks

# ``X as X``: re-exported, every public name of explorer.space_spec and the loaders of explorer.space_parse
from explorer.space_parse import load_space as load_space
from explorer.space_parse import parse_space as parse_space
from explorer.space_parse import space_from_text as space_from_text
from explorer.space_spec import _MOE_PARAMS
from explorer.space_spec import DEFAULT_OBJECTIVES as DEFAULT_OBJECTIVES
from explorer.space_spec import DEPLOY_KEYS as DEPLOY_KEYS
from explorer.space_spec import DIRECTIONS as DIRECTIONS
from explorer.space_spec import FLAG_PARAMS as FLAG_PARAMS
from explorer.space_spec import OBJECTIVE_COLUMNS as OBJECTIVE_COLUMNS
from explorer.space_spec import SAMPLERS as SAMPLERS
from explorer.space_spec import SERVING_MODES as SERVING_MODES
from explorer.space_spec import SIZE_LIMITS as SIZE_LIMITS
from explorer.space_spec import SPACE_REASONS as SPACE_REASONS
from explorer.space_spec import TEXT_PARAMS as TEXT_PARAMS
from explorer.space_spec import TRIAL_UNITS as TRIAL_UNITS
from explorer.space_spec import WORKLOAD_KEYS as WORKLOAD_KEYS
from explorer.space_spec import Choice as Choice
from explorer.space_spec import Fixed as Fixed
from explorer.space_spec import FloatRange as FloatRange
from explorer.space_spec import IntRange as IntRange
from explorer.space_spec import Param as Param
from explorer.space_spec import SearchSettings as SearchSettings
from explorer.space_spec import reason_label as reason_label

#: The shape-rule codes of :data:`SPACE_REASONS` (101-105).
_SHAPE_RULES = (101, 102, 103, 104, 105)
#: The space's cost settings (``cost:`` section and cost constraints), as SearchSpace attribute names.
_COST_KEYS = ("usd_per_gpu_hour", "power_overhead_factor", "min_tokens_per_s_per_kw", "max_usd_per_million_tokens")
#: Largest graded violation of the price constraint (zero throughput costs +inf USD per token).
_MAX_GRADE = 1e12
_SIM_STRUCTURAL = (1, 2, 3, 4, 5, 7)


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
