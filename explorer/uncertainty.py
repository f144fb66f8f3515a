"""Held-out error bands: where a measured serving figure may fall, given a prediction.

A prediction is a point; how far the measured figure may sit from it is known only from designs
the model was scored on without having been fitted to them.  The bands here come from
cross-validation *by configuration* (``benchmarks/cross_validate.py --hold-out config``): every
measured serving curve of one model and runtime on a hardware kind is left out together, the kind
is refit without them, and the held-out curves are predicted -- the situation of a design a sweep
proposes and nobody has measured.  For each group -- the serving runtime and the model family
(``dense`` or ``moe``) -- ``explorer/data/error_bands.yaml`` keeps the 10th, 50th and 90th
percentiles of the signed held-out error ``e = predicted / measured - 1`` of tokens/s/GPU,
tokens/s/user and TTFT (``benchmarks/error_bands.py`` writes it from the cross-validation JSON and
the shipped ``validation/fronts.yaml``).

For a prediction ``P`` the band is ``[P / (1 + e90), P / (1 + e10)]``: the measured value of 80 % of
the held-out cases of the group lay in the same position relative to their prediction.  A group
with fewer than ``min_cases`` held-out cases falls back to its family across runtimes, then to
every curve (``group`` says which was used).

What a band is not: a confidence interval of this design.  It is the spread of the model's error
on the configurations that were measured (four models, five GPU kinds, three runtimes, InferenceX
recipes); a new shape on the same stack is that situation, a kind without serving curves of its own
(:func:`serving_fit` says so) or a runtime version that moved (docs/validation_notes.md) may be
further off.  The prediction is never shifted by the band's median: it stays the model's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from explorer.errors import SpecError
from explorer.specio import read_yaml

BANDS_FILE = Path(__file__).resolve().parent / "data" / "error_bands.yaml"
#: the figures a band is kept for: validation case axis -> (result column, unit scale in the YAML)
AXES = {"tok_s_gpu": "tokens_per_s_per_gpu", "tok_s_user": "tokens_per_s_per_user", "ttft": "ttft_s"}
ANY = "*"


@dataclass(frozen=True)
class Band:
    """Held-out signed errors ``predicted / measured - 1`` of one group on one figure."""

    group: str  # "runtime/family" actually used (after fallback), e.g. "trtllm/moe", "*/dense"
    cases: int
    e10: float
    e50: float
    e90: float

    def bounds(self, predicted: Any) -> tuple[np.ndarray, np.ndarray]:
        """``(low, high)`` of the measured value for a prediction (arrays, same shape)."""
        p = np.asarray(predicted, dtype=np.float64)
        return p / (1.0 + self.e90), p / (1.0 + self.e10)


@lru_cache(maxsize=4)
def load_bands(path: str | None = None) -> Mapping[str, Any]:
    """The shipped band table (``explorer/data/error_bands.yaml``), checked."""
    where = str(path or BANDS_FILE)
    data = read_yaml(where)
    if not isinstance(data, dict) or not isinstance(data.get("groups"), dict):
        raise SpecError(where, "groups", "expected a mapping 'groups: {runtime/family: {axis: ...}}'")
    min_cases = data.get("min_cases")
    if not isinstance(min_cases, int) or min_cases < 1:
        raise SpecError(where, "min_cases", f"expected a whole number >= 1, got {min_cases!r}")
    for name, axes in data["groups"].items():
        if not isinstance(axes, dict) or set(axes) != set(AXES):
            raise SpecError(where, f"groups.{name}", f"expected the axes {sorted(AXES)}")
        for axis, v in axes.items():
            ok = isinstance(v, dict) and isinstance(v.get("cases"), int) and isinstance(v.get("e"), list) \
                and len(v["e"]) == 3 and all(isinstance(x, (int, float)) and -1.0 < x for x in v["e"]) \
                and v["e"][0] <= v["e"][1] <= v["e"][2]
            if not ok:
                raise SpecError(where, f"groups.{name}.{axis}",
                                "expected {cases: N, e: [e10, e50, e90]} with -1 < e10 <= e50 <= e90")
    if f"{ANY}/{ANY}" not in data["groups"]:
        raise SpecError(where, "groups", f"the fallback group '{ANY}/{ANY}' is missing")
    return data


def band(runtime: str, family: str, axis: str, path: str | None = None) -> Band:
    """The band of ``axis`` (``tok_s_gpu``, ``tok_s_user``, ``ttft``) for a runtime and model family
    (``dense``/``moe``), falling back as the module docstring says."""
    if axis not in AXES:
        raise SpecError("band", "axis", f"expected one of {sorted(AXES)}, got {axis!r}")
    data = load_bands(path)
    groups, min_cases = data["groups"], data["min_cases"]
    for name in (f"{runtime}/{family}", f"{ANY}/{family}", f"{ANY}/{ANY}"):
        g = groups.get(name)
        if g is not None and (g[axis]["cases"] >= min_cases or name == f"{ANY}/{ANY}"):
            e10, e50, e90 = (float(x) for x in g[axis]["e"])
            return Band(name, int(g[axis]["cases"]), e10, e50, e90)
    raise AssertionError("unreachable: the fallback group always exists")


def bounds_table(predicted: Mapping[str, Any], runtime: Sequence[str] | np.ndarray,
                 moe: Sequence[bool] | np.ndarray, path: str | None = None) -> dict[str, np.ndarray]:
    """Bands of many rows at once: ``predicted`` maps result columns (``tokens_per_s_per_gpu``,
    ``tokens_per_s_per_user``, ``ttft_s``; those present) to arrays; returns ``<column>_low`` /
    ``<column>_high`` for each and ``band_group`` (the group each row's bands came from: the first
    column's, as each axis falls back on its own case count)."""
    rt = np.asarray(runtime).astype(str)
    fam = np.where(np.asarray(moe, dtype=bool), "moe", "dense")
    keys = np.char.add(np.char.add(rt, "/"), fam)
    out: dict[str, np.ndarray] = {}
    groups = np.empty(len(keys), dtype=object)
    for key in np.unique(keys):
        sel = keys == key
        r, f = str(key).split("/", 1)
        for axis, column in AXES.items():
            if column not in predicted:
                continue
            b = band(r, f, axis, path)
            lo, hi = b.bounds(np.asarray(predicted[column], dtype=np.float64)[sel])
            out.setdefault(f"{column}_low", np.full(len(keys), np.nan))[sel] = lo
            out.setdefault(f"{column}_high", np.full(len(keys), np.nan))[sel] = hi
            if groups[sel][0] is None:
                groups[sel] = b.group
    out["band_group"] = groups
    return out


def serving_fit(runtime: Any, hardware: Any) -> str:
    """Where a runtime's serving fits on a hardware kind come from: ``own`` (calibrated on the kind's
    own measurements), ``transferred from KIND``, ``lent by lineage`` (the median of the runtime's
    fits on the same architecture family, vendor or all: :meth:`explorer.runtime.Runtime.fit_for`)
    or ``prior`` (the profile's priors: no fit anywhere)."""
    from explorer.hardware import Hardware
    from explorer.runtime import load_runtime

    rt = load_runtime(runtime)
    name = hardware.name if isinstance(hardware, Hardware) else str(hardware)
    if name in rt.fitted:
        src = rt.transferred_from.get(name)
        return f"transferred from {src}" if src else "own"
    own = [k for k in rt.fitted if k not in rt.transferred_from]
    return "lent by lineage" if own else "prior"
