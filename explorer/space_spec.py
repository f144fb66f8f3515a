"""What a search space is made of: the parameter kinds (:class:`Fixed`, :class:`Choice`,
:class:`IntRange`, :class:`FloatRange`: mirroring Optuna's distributions, but this module does not
import Optuna: :mod:`explorer.search` maps them), the search settings, the vocabulary of a space
file (samplers, objectives, workload and deployment keys, size limits) and the space's
infeasibility codes (:data:`SPACE_REASONS`, :func:`reason_label`).

Reading a space file: :mod:`explorer.space_parse`; scoring its points: :mod:`explorer.space`
(which re-exports every name here).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from explorer.model import SHAPE_COLUMNS
from explorer.simulate import REASONS
from explorer.specio import MAX_PARALLEL, MAX_SIZE
from explorer.speculative import MAX_DRAFT_TOKENS

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
_MOE_PARAMS = ("experts_per_token", "expert_ffn", "shared_experts", "shared_expert_ffn", "dense_layers")

#: Largest value of each numeric parameter: beyond it the simulator cannot represent the design.
SIZE_LIMITS: dict[str, float] = {**{c: MAX_SIZE for c in SHAPE_COLUMNS}, "isl": MAX_SIZE, "osl": MAX_SIZE,
                                 "batch": MAX_SIZE, "tp": MAX_PARALLEL, "pp": MAX_PARALLEL, "ep": MAX_PARALLEL,
                                 "dp": MAX_PARALLEL, "moe_imbalance": 1000.0,
                                 "draft_tokens": MAX_DRAFT_TOKENS, "acceptance": 1.0}

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
