"""Latency cases of MLPerf Server and Interactive runs: what the run measured at the rate it ran.

A Server/Interactive row of ``mlperf.yaml`` is scored on its whole-system tokens/s at the highest
Poisson rate whose p99 TTFT/TPOT meet the limits (:mod:`explorer.sla`).  That one figure mixes two
things the model can get wrong separately: the engine's speed at the operating point, and the
spread of the latencies around their means.  Each run's ``mlperf_log_summary.txt`` also gives the
rate it ran at and the mean and p99 of TTFT and TPOT there; ``validation/mlperf_latency.yaml`` holds
them, copied with their sources.  For each row with such an entry this module adds four cases:

* ``<id>:tpot_mean``, ``<id>:ttft_mean`` -- the mean TPOT / TTFT (ms) predicted open-loop at the
  run's completed request rate (``completed_samples_per_s`` spread evenly over the replicas of the
  deployment the row's own prediction chose, :mod:`explorer.systems`);
* ``<id>:tpot_p99``, ``<id>:ttft_p99`` -- the p99s at the same rate (:mod:`explorer.open_loop`).

Calibration fits the runtime profile on the two means of the Interactive runs (the engine's
speed: one simulator call, no rate search); the p99 cases, the Server runs' latencies and the
throughput rows themselves stay held out.  ``explorer validate --measurements
validation/mlperf_latency.yaml`` scores the latency cases with their rows; ``validate`` of
``mlperf.yaml`` alone scores the rows only.  A row whose entry
does not match it (another ``completed_tokens_per_s``) gets no latency cases.

MLPerf LoadGen's TPOT of a sample is (latency - TTFT) / (tokens - 1); its mean is over samples.
The simulator's mean TPOT is over output tokens (one engine's steps): the two differ by the spread
of TPOT across requests of different lengths, ignored here (a few percent at the spreads the
percentile model predicts).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from explorer.specio import read_yaml
from explorer.validate import split_of as split_of  # the split note's reader (re-exported)

if TYPE_CHECKING:
    from explorer.hardware import Hardware
    from explorer.runtime import Runtime
    from explorer.validate import Case

#: validation/mlperf_latency.yaml (shipped next to mlperf.yaml)
MLPERF_LATENCY = Path(__file__).resolve().parent.parent / "validation" / "mlperf_latency.yaml"
#: case suffix -> (metric, the file's statistics key, its percentile key, simulator column in s)
STATS: dict[str, tuple[str, str, str, str]] = {
    "tpot_mean": ("inter_token_latency", "tpot_ms", "mean", "tpot_s"),
    "ttft_mean": ("first_token_latency", "ttft_ms", "mean", "ttft_s"),
    "tpot_p99": ("inter_token_latency", "tpot_ms", "p99", "tpot_p99_s"),
    "ttft_p99": ("first_token_latency", "ttft_ms", "p99", "ttft_p99_s"),
}
#: the statistics calibration fits (the means: the engine's speed); the p99s are validated only
FITTED_STATS = ("tpot_mean", "ttft_mean")
#: the scenarios whose latency means calibration fits: Interactive runs sit at moderate load, where
#: the mean TPOT measures the engine's step time; Server runs sit close to capacity, where the
#: model's open-loop TPOT is too low (docs/validation.md) and fitting it would slow the engine at
#: every load -- their latency cases are validated only
FITTED_SCENARIOS = ("mlperf_interactive",)
#: a latency entry belongs to a row when their completed tokens/s agree this closely (relative)
MATCH_RTOL = 1e-3


def load_latency(path: Path = MLPERF_LATENCY) -> dict[str, dict[str, Any]]:
    """The file's entries by row id (empty when the file is absent)."""
    if not path.exists():
        return {}
    data = read_yaml(path)
    rows = data.get("rows") if isinstance(data, dict) else None
    return {str(r["id"]): r for r in rows or [] if isinstance(r, dict) and r.get("id") and not r.get("missing")}


def latency_cases(parents: list[Case], entries: dict[str, dict[str, Any]] | None = None) -> list[Case]:
    """The latency cases of the Server/Interactive rows among ``parents`` (module docstring)."""
    from explorer.validate import Case

    entries = load_latency() if entries is None else entries
    out: list[Case] = []
    for p in parents:
        if not (p.supported and p.kind == "system" and not p.saturated):
            continue
        e = entries.get(p.id)
        if e is None:
            continue
        tok = e.get("completed_tokens_per_s")
        rate = e.get("completed_samples_per_s")
        if not (isinstance(tok, int | float) and isinstance(rate, int | float) and rate > 0
                and math.isclose(float(tok), p.measured, rel_tol=MATCH_RTOL)):
            continue
        for suffix, (metric, key, stat, _col) in STATS.items():
            v = (e.get(key) or {}).get(stat)
            if not isinstance(v, int | float) or not v > 0:
                continue
            c = Case(f"{p.id}:{suffix}", metric, "ms", float(v), kind="system_latency",
                     regime=f"{p.regime}_{suffix}", hardware=p.hardware, values=dict(p.values),
                     num_gpus=p.num_gpus, trust=p.trust, runtime=p.runtime, family=p.family)
            c.parent, c.rate_per_system, c.column = p.id, float(rate), STATS[suffix][3]
            out.append(c)
    return out


def latency_file_cases(data: dict[str, Any], path: Path) -> list[Case]:
    """The cases of a latency file read as a validation file (``explorer validate --measurements
    validation/mlperf_latency.yaml``): the system rows of the file its ``meta.rows_file`` names
    (default: ``mlperf.yaml`` beside it) that the entries refer to, then each entry's latency
    cases; an entry without statistics, without its row, or whose tokens/s differ from the row's is
    one unsupported case with the reason."""
    from explorer.errors import SpecError
    from explorer.validate import Case, load_cases

    meta_raw = data.get("meta")
    meta: dict[str, Any] = meta_raw if isinstance(meta_raw, dict) else {}
    rows_file = path.parent / str(meta.get("rows_file") or "mlperf.yaml")
    if not rows_file.exists():
        raise SpecError(str(path), "meta.rows_file", f"the system rows file {rows_file} does not exist "
                                                     "(name it relative to this file)")
    target = read_yaml(rows_file)
    if not (isinstance(target, dict) and isinstance(target.get("measurements"), list)):
        raise SpecError(str(path), "meta.rows_file", f"{rows_file.name} is not a file of MLPerf system rows "
                                                     "(a top-level 'measurements:' list, as validation/mlperf.yaml)")
    rows = {c.id: c for c in load_cases(rows_file)}
    parents = {i: c for i, c in rows.items() if c.kind == "system"}
    raw = [r for r in data["rows"] if isinstance(r, dict)]
    entries = {str(r["id"]): r for r in raw if r.get("id") and not r.get("missing")}
    lat = latency_cases(list(parents.values()), entries)
    have = {c.parent for c in lat}
    out: list[Case] = [parents[i] for i in parents if i in have]
    bad: list[Case] = []
    for i, r in enumerate(raw):
        rid = str(r.get("id") or f"#{i}")
        if rid in have:
            continue
        why = (f"no statistics: {r['missing']}" if r.get("missing") else
               f"no row '{rid}' in {rows_file.name}" if rid not in rows else
               f"its row is not scored: {rows[rid].reason}" if not rows[rid].supported else
               "not a Server or Interactive system row" if rid not in parents or parents[rid].saturated else
               f"completed_tokens_per_s {r.get('completed_tokens_per_s')!r} is not the row's value "
               f"{parents[rid].measured:g}, or the rate is missing")
        bad.append(Case(f"{rid}:latency", "inter_token_latency", "ms", float("nan"), supported=False, reason=why))
    return out + lat + bad


def operating_values(case: Case, parent: Case, rt: Runtime) -> dict[str, Any] | None:
    """The design values of a latency case: its parent's chosen split, open loop at the run's rate
    per replica, the runtime's maximum running requests as the batch cap (as :mod:`explorer.sla`).
    None when the parent has no prediction to take the split from."""
    got = split_of(parent.note) if parent.supported else None
    if got is None:
        return None
    t, e, dp, replicas = got
    v = {k: x for k, x in case.values.items() if k not in ("tp_open", "ttft_limit_ms", "tpot_limit_ms")}
    v.update(tp=t, ep=e, dp=dp, request_rate=case.rate_per_system / replicas,
             batch=max(int(rt.max_batch), int(parent.chosen_batch or 1)))
    return v


def predict_latency(cases: list[Case], parents: dict[str, Case], hardware: dict[str, Hardware],
                    runtimes: dict[str, Runtime]) -> np.ndarray:
    """Predicted value (ms) of every latency case: each becomes a served design point at its
    operating values (:func:`operating_values`) scored by :func:`explorer.validate.predict`'s one
    vectorized call; NaN (and the case marked unsupported with the reason) where the parent row has
    no prediction.  ``hardware``/``runtimes`` override kinds and profiles by name, as in ``predict``."""
    from explorer.runtime import load_runtime
    from explorer.validate import predict

    out = np.full(len(cases), np.nan)
    points: list[Case] = []
    idx: list[int] = []
    for i, c in enumerate(cases):
        parent = parents.get(c.parent)
        name = c.values.get("runtime") or "mlperf"
        runtime = runtimes.get(name) or load_runtime(name)
        v = operating_values(c, parent, runtime) if parent is not None else None
        if v is None:
            c.supported, c.reason = False, "its throughput row has no prediction to take the deployment from"
            continue
        points.append(replace(c, kind="inference", values=v, note=""))
        idx.append(i)
    if not points:
        return out
    got = predict(points, hardware, runtimes)
    for j, i in enumerate(idx):
        c, pt = cases[i], points[j]
        out[i] = got[j]
        c.note = (f"the engine is overloaded in the model at the run's rate: {pt.note}" if pt.note
                  else f"at {pt.values['request_rate']:.4g} requests/s per replica")
    return out
