"""Scoring one design point from Python or the CLI: the same vectorized simulator, one row."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from explorer import speculative
from explorer.cost import COST_COLUMNS, POWER_OVERHEAD_FACTOR, add_cost
from explorer.design import build_design
from explorer.errors import SpecError
from explorer.hardware import Hardware, load_hardware
from explorer.model import ModelShape, get_preset
from explorer.precision import parse_precision
from explorer.quality import point_quality
from explorer.results import reasons_vector
from explorer.runtime import DEFAULT_RUNTIME, Runtime, load_runtime
from explorer.simulate import COMPONENTS, DISAGG_COLUMNS, MAX_BATCH_GRID, REASONS, simulate
from explorer.specio import check_number


def _shape_values(model: str | ModelShape | None, shape: dict[str, Any] | None) -> dict[str, Any]:
    vals: dict[str, Any] = {}
    if isinstance(model, ModelShape):
        vals.update(model.validate().columns())
    elif model is not None:
        vals["model"] = get_preset(model).shape.name
    if shape:
        vals.update({k: v for k, v in shape.items() if v is not None})
    if not vals:
        raise SpecError("evaluate", "model", "give a preset name or a custom shape")
    return vals


def evaluate(
    model: str | ModelShape | None = None,
    hardware: str = "h200",
    *,
    batch: int | str = 1,
    isl: int = 1024,
    osl: int = 1024,
    tp: int = 1,
    pp: int = 1,
    ep: int = 1,
    dp: int = 1,
    precision: str = "bf16",
    shape: dict[str, Any] | None = None,
    runtime: str = DEFAULT_RUNTIME,
    hw_override=None,
    usd_per_gpu_hour: float | None = None,
    power_overhead_factor: float | None = None,
    request_rate: float | None = None,
    ttft_limit_ms: float | None = None,
    tpot_limit_ms: float | None = None,
    check_events: bool = False,
    draft_tokens: int = 0,
    acceptance: float | Sequence[float] | None = None,
    draft_model: str | None = None,
    training_tokens: float | None = None,
    serving: str = "aggregated",
    prefill_tp: int = 1,
    prefill_pp: int = 1,
    pool_ratio: str | None = None,
    batch_wait_iters: int = 0,
    batch_wait_ratio: float = 0.0,
    front_end: bool = False,
    num_requests: int = 0,
    fabric: str | None = None,
    poll_interval: int = 1,
    max_num_tokens: int = 0,
    allreduce_fusion: int = 0,
) -> dict[str, Any]:
    """Score one design point; ``batch`` is the number of concurrent requests (closed-loop
    clients); ``batch='max'`` picks the highest-throughput feasible one.

    Returns a JSON-ready dict: the figures, ``feasible``/``reason``, parameters, memory, the
    steady-state ``decode_batch`` and the per-component ``breakdown`` (seconds per output token of
    one sequence), and the cost figures of :mod:`explorer.cost` (``tokens_per_s_per_kw``,
    ``usd_per_million_tokens``; ``usd_per_gpu_hour``/``power_overhead_factor`` override the hardware
    file's price and the default power overhead).

    Load: ``request_rate`` (requests/s per replica) serves open-loop Poisson arrivals instead of
    ``batch`` clients and adds TTFT/TPOT p50/p90/p99 (:mod:`explorer.open_loop`).  With
    ``batch='max'`` and a ``ttft_limit_ms``/``tpot_limit_ms``, the point is the highest Poisson rate
    whose p99 latencies meet the limits (MLPerf Server; :mod:`explorer.sla`).  ``check_events``
    also runs the discrete-event oracle of :mod:`explorer.events` on the open-loop point (key
    ``events``).

    Speculative decoding (:mod:`explorer.speculative`, off by default): ``draft_tokens`` K per
    step, ``acceptance`` (one probability for every position, or K of them), ``draft_model`` (a
    preset; default the model's own MTP module).  Adds the key ``speculation``.

    Predicted quality (:mod:`explorer.quality`): ``predicted_loss`` (nats/token),
    ``predicted_loss_band``, ``quality_extrapolated``, ``quality_ranges_left``, ``training_flop``
    for ``training_tokens`` (default: a preset's published tokens; None for a custom shape).

    Disaggregated serving (:mod:`explorer.disagg`, off by default): ``serving='disaggregated'``
    serves prompts on a prefill pool of ``prefill_tp`` x ``prefill_pp`` GPU replicas and decodes on
    this deployment; ``pool_ratio='P:D'`` fixes the replica counts (default: prefill keeps up).

    ``poll_interval`` (1 by default): the scheduler takes in new requests every that many decode steps
    (SGLang's ``--scheduler-recv-interval`` / ``--num-continuous-decode-steps``): a new request waits
    ``poll/2`` steps on average for it (explorer/engine/engine_step.py).

    ``max_num_tokens`` (0 by default: the runtime profile's ``max_tokens_per_step``): the tokens one
    step may carry, as a launch sets it (``--max_num_tokens``, ``--max-num-batched-tokens``,
    ``--chunked-prefill-size``).

    ``allreduce_fusion`` (0 by default: the runtime profile's ``fusion.allreduce_norm`` and
    ``collectives.custom_allreduce``): 1 runs each tensor-parallel all-reduce as one fused kernel with the
    residual add and RMSNorm after it (FlashInfer's port of TensorRT-LLM's one-/two-shot all-reduce:
    vLLM's ``fuse_allreduce_rms``, SGLang's ``--enable-flashinfer-allreduce-fusion``), -1 as NCCL's with
    separate norm kernels.

    ``num_requests`` (0, off, by default): a finite offline run of that many requests queued at
    once, as ``trtllm-bench throughput`` runs (:mod:`explorer.offline_run`: the concurrency is at most
    that many, and the ramp and drain cost one burst of prompts); tokens/s/GPU is then the run's.

    ``front_end`` (off by default): add the runtime's serving front end (its fitted ``serve_*`` host
    work beside the engine loop: trtllm-serve's HTTP server, detokenisation and streaming); off is
    the engine alone, as an offline benchmark (trtllm-bench) sees it.

    ``fabric`` (explorer/data/fabrics.yaml, e.g. ``aws-efa``): the hop between scale-up domains is
    that cloud fabric's instead of the hardware file's InfiniBand (groups that span nodes only).
    """
    hw = hw_override or load_hardware(hardware)
    if fabric:  # a cloud scale-out fabric instead of the file's own (explorer/fabrics.py)
        from explorer.fabrics import get_fabric, with_fabric

        hw = with_fabric(hw, get_fabric(fabric, "--fabric"))
    if usd_per_gpu_hour is not None:
        check_number(usd_per_gpu_hour, "--usd-per-gpu-hour", None, min_value=0, min_exclusive=True, max_value=10_000)
    if power_overhead_factor is not None:
        check_number(power_overhead_factor, "--power-overhead-factor", None, min_value=1, max_value=10)
    rt = load_runtime(runtime)
    prec = parse_precision(precision)
    vals = _shape_values(model, shape)
    base = dict(vals, hardware=np.array([hw], dtype=object), precision=prec.label,
                isl=isl, osl=osl, tp=tp, pp=pp, ep=ep, dp=dp, runtime=np.array([rt], dtype=object))
    spec = _spec_values(draft_tokens, acceptance, draft_model)  # {} unless asked for (explorer/speculative.py)
    base.update(spec)
    limited = ttft_limit_ms is not None or tpot_limit_ms is not None
    for flag, v in (("--ttft-limit-ms", ttft_limit_ms), ("--tpot-limit-ms", tpot_limit_ms)):
        if v is not None:
            check_number(v, flag, None, min_value=0, min_exclusive=True, max_value=1e7)
    if request_rate is not None:
        check_number(request_rate, "--request-rate", None, min_value=0, min_exclusive=True, max_value=1e7)
        if isinstance(batch, str):
            raise SpecError("--request-rate", None, "give either --request-rate (open loop) or --batch max, not both")
    if limited and request_rate is None and batch != "max":
        raise SpecError("--ttft-limit-ms", None, "latency limits need --batch max (find the best rate) or --request-rate")
    if isinstance(batch, str):
        if batch != "max":
            raise SpecError("--batch", None, f"expected a positive whole number or 'max', got '{batch}'")
        batch_value, search = _best_batch(base, rt.max_batch)
        if limited:
            sla = _sla_rate(base, batch_value, rt.max_batch, ttft_limit_ms, tpot_limit_ms)
            search["sla"] = sla
            request_rate = sla["request_rate"] if sla["request_rate"] > 0 else None
            batch_value = max(int(rt.max_batch), batch_value)
    else:
        if int(batch) <= 0:
            raise SpecError("--batch", None, f"must be > 0, got {batch}")
        batch_value, search = int(batch), None
    if serving not in ("aggregated", "disaggregated"):
        raise SpecError("--serving", None, f"expected aggregated or disaggregated, got '{serving}'")
    if serving == "disaggregated":
        base.update(disagg=1.0, prefill_tp=prefill_tp, prefill_pp=prefill_pp)
        if pool_ratio is not None:
            base["pool_prefill"], base["pool_decode"] = _pool_ratio(pool_ratio)
    elif pool_ratio is not None or prefill_tp != 1 or prefill_pp != 1:
        raise SpecError("--pool-ratio" if pool_ratio is not None else "--prefill-tp", None,
                        "needs --serving disaggregated")
    if request_rate is not None and not isinstance(batch, str):
        batch_value = max(int(rt.max_batch), int(batch_value))  # memory sized for the runtime's cap
    base["batch"] = batch_value
    if request_rate is not None:
        base["request_rate"] = float(request_rate)
    check_number(batch_wait_iters, "--batch-wait-iters", None, min_value=0, max_value=1e6, integer=True)
    check_number(batch_wait_ratio, "--batch-wait-ratio", None, min_value=0, max_value=1)
    check_number(num_requests, "--num-requests", None, min_value=0, max_value=1e9, integer=True)
    check_number(poll_interval, "--poll-interval", None, min_value=1, max_value=1e4, integer=True)
    base["poll_interval"] = float(poll_interval)
    check_number(max_num_tokens, "--max-num-tokens", None, min_value=0, max_value=1e7, integer=True)
    base["max_num_tokens"] = float(max_num_tokens)
    check_number(allreduce_fusion, "--allreduce-fusion", None, min_value=-1, max_value=1, integer=True)
    base["allreduce_fusion"] = float(allreduce_fusion)
    base.update(batch_wait_iters=float(batch_wait_iters), batch_wait_ratio=float(batch_wait_ratio),
                front_end=1.0 if front_end else 0.0, num_requests=float(num_requests))
    design, table = build_design(base, "evaluate")
    res = add_cost(simulate(design, table), design, table, usd_per_gpu_hour, power_overhead_factor)
    out = {k: (v[0].item() if isinstance(v, np.ndarray) else v) for k, v in res.items()}
    out["usd_per_gpu_hour"] = float(hw.usd_per_gpu_hour if usd_per_gpu_hour is None else usd_per_gpu_hour)
    out["board_power_w"] = float(hw.board_power_w)
    out["power_overhead_factor"] = float(POWER_OVERHEAD_FACTOR if power_overhead_factor is None
                                         else power_overhead_factor)
    for k in (*COST_COLUMNS, "usd_per_gpu_hour", "board_power_w"):  # unknown (no price/power in the file): null
        if not np.isfinite(out[k]):
            out[k] = None
    out["feasible"] = bool(out["feasible"])
    out["reason"] = str(reasons_vector(design, res, {"precision": prec.label, "hardware": hw.name})[0])
    out["batch"] = batch_value
    out["breakdown"] = {k: out.pop(f"t_{k}_s") for k in COMPONENTS}
    out["bounds"] = {
        "gemm": "compute" if out.pop("gemm_bound_compute") else "memory",
        "moe": "compute" if out.pop("moe_bound_compute") else "memory",
        "attention": "compute" if out.pop("attention_bound_compute") else "memory",
        "comm": "network",
        "overhead": "latency",
        "prefill": "compute",
    }
    out["hardware"] = hw.label
    out["precision"] = prec.label
    out["runtime"] = rt.name
    if rt.release or rt.release_date:  # NAME@RELEASE: an older build's kernel speed and per-step cost
        fam = "moe" if float(design["experts"][0]) > 0 else "dense"
        picked = rt.release_for(hw, fam)
        out["runtime_release"] = {"release": rt.release or rt.release_date, "family": fam,
                                  "speed": picked.speed if picked else 1.0,
                                  "latency": picked.latency if picked else 1.0}
    out["model"] = model.name if isinstance(model, ModelShape) else (get_preset(model).shape.name if model else "custom")
    out["shape"] = {k: design[k][0].item() for k in design if k in ModelShape.__dataclass_fields__}
    out["deployment"] = {"tp": tp, "pp": pp, "ep": ep, "dp": dp, "isl": isl, "osl": osl}
    if poll_interval != 1:
        out["deployment"]["poll_interval"] = int(poll_interval)
    if max_num_tokens:
        out["deployment"]["max_num_tokens"] = int(max_num_tokens)
    if allreduce_fusion:
        out["deployment"]["allreduce_fusion"] = "on" if allreduce_fusion > 0 else "off"
    out["band"] = error_band(out, rt, bool(out["shape"].get("experts", 0)), hw)
    if spec:
        out["speculation"] = speculative.describe(spec["draft_tokens"], spec["acceptance_per_position"],
                                                  spec.get("draft_model"))
    if search is not None:
        out["batch_search"] = search
    out["load"] = "open-loop Poisson" if request_rate is not None else "closed-loop clients"
    if check_events:
        if request_rate is None:
            raise SpecError("--check-events", None, "needs an open-loop point: give --request-rate R "
                            "(or --batch max with a latency limit that some rate meets)")
        out["events"] = _events(design, table, float(request_rate) / (dp * pp))
    if limited:
        out["limits_ms"] = {"ttft_p99": ttft_limit_ms, "tpot_p99": tpot_limit_ms}
        met = request_rate is not None and bool(out["feasible"])
        if met and ttft_limit_ms is not None:
            met = met and out["ttft_p99_s"] * 1e3 <= ttft_limit_ms * (1 + 1e-9)
        if met and tpot_limit_ms is not None:
            met = met and out["tpot_p99_s"] * 1e3 <= tpot_limit_ms * (1 + 1e-9)
        out["meets_limits"] = bool(met)
    for k in list(out):
        if (k.endswith(("_p50_s", "_p90_s", "_p99_s")) or k in DISAGG_COLUMNS) and out[k] is not None \
                and not np.isfinite(out[k]):
            out[k] = None  # closed loop without percentiles / aggregated serving: not applicable
    # predicted quality (explorer/quality.py): the preset's published tokens unless given
    if training_tokens is not None:
        check_number(training_tokens, "--training-tokens", None, min_value=1e6, max_value=1e15)
    tokens = training_tokens if training_tokens is not None else (
        get_preset(model).training_tokens if isinstance(model, str) else None)
    out.update(point_quality({k: design[k] for k in ModelShape.__dataclass_fields__ if k in design}, tokens,
                             prec.weights, prec.activations))
    return out


def _pool_ratio(text: str) -> tuple[int, int]:
    """``P:D`` (prefill and decode replica counts, whole numbers >= 1)."""
    parts = str(text).split(":")
    try:
        p, d = (int(x) for x in parts)
    except ValueError:
        raise SpecError("--pool-ratio", None, f"expected P:D with whole numbers, e.g. 1:3, got '{text}'") from None
    if p < 1 or d < 1 or p > 1024 or d > 1024:
        raise SpecError("--pool-ratio", None, f"expected P:D with 1 <= P, D <= 1024, got '{text}'")
    return p, d


def _sla_rate(base: dict[str, Any], best_batch: int, max_batch: int, ttft_limit_ms, tpot_limit_ms) -> dict[str, Any]:
    """The highest Poisson rate (per replica) meeting the p99 limits, below the saturated rate."""
    from explorer.sla import max_rate_within_limits

    d, t = build_design(dict(base, batch=best_batch), "evaluate")
    sat = float(simulate(d, t)["request_rate"][0])
    got = max_rate_within_limits(dict(base, batch=max(int(max_batch), best_batch)), sat,
                                 None if ttft_limit_ms is None else ttft_limit_ms / 1e3,
                                 None if tpot_limit_ms is None else tpot_limit_ms / 1e3, "evaluate")
    rate = float(got["request_rate"][0])
    return {"request_rate": rate, "saturated_request_rate": sat, "share_of_saturated": rate / sat if sat > 0 else 0.0}


def _spec_values(draft_tokens: Any, acceptance: Any, draft_model: str | None) -> dict[str, Any]:
    """Design values of speculative decoding (``--draft-tokens``, ``--acceptance``, ``--draft-model``),
    checked: ``{}`` when none is asked for, so the point is today's."""
    if not draft_tokens and acceptance is None and draft_model is None:
        return {}
    k = speculative.check_draft_tokens(draft_tokens, "--draft-tokens", None)
    probs = speculative.check_acceptance(acceptance, k, "--acceptance", None)
    if draft_model is not None and k == 0:
        raise SpecError("--draft-model", None, f"needs --draft-tokens K >= 1 (got 0); allowed: {speculative.ALLOWED_K}")
    out: dict[str, Any] = {"draft_tokens": k, "acceptance_per_position": probs}
    if draft_model is not None and not speculative.is_mtp_name(draft_model):
        out["draft_model"] = get_preset(draft_model, "--draft-model").shape.name
    return out


def _best_batch(base: dict[str, Any], max_batch: int) -> tuple[int, dict[str, Any]]:
    """Highest-throughput feasible concurrency among :data:`MAX_BATCH_GRID` and the memory maximum
    (the smallest one where several tie: beyond the running-batch cap requests only queue)."""
    probe = dict(base, batch=1)
    d1, t1 = build_design(probe, "evaluate")
    r1 = simulate(d1, t1)
    groups = float(d1["dp"][0]) * float(d1["pp"][0])
    free = float(r1["memory_capacity_bytes"][0] - (r1["memory_bytes_per_gpu"][0] - r1["kv_bytes_per_gpu"][0]))
    kv_seq = float(r1["kv_bytes_per_seq_per_gpu"][0])
    dp = float(d1["dp"][0])
    mem_max = int(max(1, np.floor(free / kv_seq * dp))) if kv_seq > 0 else int(MAX_BATCH_GRID[-1])
    cands = np.unique(np.concatenate([MAX_BATCH_GRID, [mem_max, max(1, mem_max - 1)]])).astype(np.int64)
    cands = cands[cands >= groups] if np.any(cands >= groups) else np.array([int(groups)])
    d, t = build_design(dict(base, batch=cands), "evaluate")
    r = simulate(d, t)
    tps = np.asarray(r["tokens_per_s_per_gpu"], dtype=np.float64)
    thr = np.where(np.asarray(r["feasible"], dtype=bool) & np.isfinite(tps), tps, -1.0)
    best = thr.max()  # -1 when no candidate is feasible: the smallest candidate is reported
    i = int(np.flatnonzero(thr >= best - abs(best) * 1e-9)[0])
    return int(cands[i]), {
        "candidates": int(len(cands)),
        "memory_limited_batch": mem_max,
        "limits": {"max_running_requests": max_batch},
        "any_feasible": bool(r["feasible"].any()),
    }


def _events(design, table, rate_per_engine: float) -> dict[str, Any]:
    """Percentiles of the discrete-event oracle on the design's engine (explorer/events.py)."""
    from explorer.events import run_events
    from explorer.simulate import engine_profile

    cap = max(2.0, float(design["rt_max_batch"][0]))
    grid = np.unique(np.concatenate([np.arange(1.0, 65.0), np.geomspace(64.0, max(cap, 65.0), 48).round()]))
    try:
        ev = run_events(engine_profile(design, table, grid), rate_per_engine)
    except ValueError as e:
        raise SpecError("--check-events", None, f"the oracle could not run this point: {e}") from None
    out: dict[str, Any] = {"requests": ev.requests, "mean_decode_batch": ev.mean_decode_batch,
                           "request_rate": ev.request_rate}
    for m in ("ttft", "tpot"):
        for q, p in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            out[f"{m}_{q}_s"] = ev.percentile(m, p)
    return out


def evaluate_system(model: str | ModelShape | None, hardware: str = "h200", *, gpus: int, isl: int = 1024,
                    osl: int = 1024, pp: int = 1, precision: str = "bf16", runtime: str = DEFAULT_RUNTIME,
                    ttft_limit_ms: float | None = None, tpot_limit_ms: float | None = None,
                    gpus_per_node: int = 8, shape: dict[str, Any] | None = None) -> dict[str, Any]:
    """Best split of ``gpus`` GPUs into replicas (:mod:`explorer.systems`): saturated, or under p99
    latency limits (MLPerf Server).  Returns system and per-node tokens/s and the chosen split."""
    from explorer.systems import best_system

    for flag, v in (("--ttft-limit-ms", ttft_limit_ms), ("--tpot-limit-ms", tpot_limit_ms)):
        if v is not None:
            check_number(v, flag, None, min_value=0, min_exclusive=True, max_value=1e7)
    hw = load_hardware(hardware)
    rt = load_runtime(runtime)
    prec = parse_precision(precision)
    vals = _shape_values(model, shape)
    experts = int(get_preset(model).shape.experts) if isinstance(model, str) else int(getattr(model, "experts", 0) or 0)
    got = best_system(dict(vals, precision=prec.label, isl=isl, osl=osl, pp=pp), hw, rt, gpus, experts=experts,
                      ttft_limit_s=None if ttft_limit_ms is None else ttft_limit_ms / 1e3,
                      tpot_limit_s=None if tpot_limit_ms is None else tpot_limit_ms / 1e3, where="evaluate")
    name = model.name if isinstance(model, ModelShape) else (get_preset(model).shape.name if model else "custom")
    out: dict[str, Any] = {"gpus": gpus, "hardware": hw.name, "model": name, "precision": prec.label,
                           "runtime": rt.name, "isl": isl, "osl": osl, "pp": pp, "gpus_per_node": gpus_per_node,
                           "feasible": got is not None}
    if ttft_limit_ms is not None or tpot_limit_ms is not None:
        out["limits_ms"] = {"ttft_p99": ttft_limit_ms, "tpot_p99": tpot_limit_ms}
    if got is None:
        out["reason"] = "out of memory on every split, or no rate meets the limits"
        return out
    out.update({k: getattr(got, k) for k in got.__dataclass_fields__})
    out["tokens_per_s_per_node"] = got.tokens_per_s_system / max(1.0, gpus / gpus_per_node)
    return out


def error_band(result: dict[str, Any], runtime: Runtime, moe: bool, hw: Hardware) -> dict[str, Any]:
    """The held-out error band of a scored point (explorer/uncertainty.py): where the measured
    tokens/s/GPU, tokens/s/user and TTFT of 80 % of the held-out measured curves of the same runtime
    and model family fell relative to their prediction, and where the runtime's serving fits on
    this hardware come from."""
    from explorer.uncertainty import AXES, band, serving_fit

    out: dict[str, Any] = {}
    for axis, column in AXES.items():
        b = band(runtime.name, "moe" if moe else "dense", axis)
        lo, hi = b.bounds(result[column])
        out[column] = [float(lo), float(hi)]
        if axis == "tok_s_gpu":  # the group named (each axis falls back on its own case count)
            out["group"], out["cases"] = b.group, b.cases
    out["serving_fit"] = serving_fit(runtime, hw)
    out["what"] = ("p10..p90 of measured/predicted on measured curves left out by configuration "
                   "(explorer/uncertainty.py); not a confidence interval of this design")
    return out


__all__ = ["evaluate", "evaluate_system", "REASONS"]

