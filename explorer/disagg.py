"""Disaggregated prefill/decode serving: a prefill pool and a decode pool of the same model.

A request's prompt runs on a **prefill replica** (``prefill_tp`` x ``prefill_pp`` GPUs, the same
number formats; MoE experts spread over its GPUs when their count allows), its KV cache then
moves to a **decode replica** (the row's own ``tp/pp/ep/dp``), whose steps carry no prompts.

* Prefill capacity: requests/s of one prefill replica served back to back
  (:data:`PREFILL_SATURATION_CLIENTS` closed-loop clients of one-token requests), and its
  unloaded time to first token (one client).
* KV transfer: ``ISL`` tokens of the decode GPU's KV shard (``kv bytes per sequence per GPU``
  scaled to ``ISL``) over the scale-up link when both replicas fit one NVLink domain, else the
  scale-out link, at ``eta_network``, plus one link latency.  It is part of TTFT.
* Decode: the closed loop (or Poisson arrivals) on the decode replica with no prompt work and
  ``TTFT = prefill TTFT + transfer + prefill-pool queueing`` spent outside it.
* Pool ratio: ``pool_prefill : pool_decode`` replicas when given, else, for each decode count
  ``n_D`` in 1..:data:`MAX_DECODE_REPLICAS`, the fewest prefill replicas keeping the prefill pool's
  load at most :data:`PREFILL_TARGET_LOAD`; the ratio with the most tokens/s per GPU wins.
* Prefill queueing: ``n_P`` deterministic servers under Poisson-like arrivals, Sakasegawa's
  M/G/c approximation ``Wq = rho^(sqrt(2(c+1)) - 1) / (c (1 - rho)) * S * (ca^2 + cs^2)/2`` with
  ``ca^2 = 1`` and ``cs^2 = 0`` (Sakasegawa 1977, Ann. Inst. Stat. Math. 29; Allen-Cunneen form).
* tokens/s/GPU counts every GPU of both pools.

Ignored: overlap of the KV transfer with the prefill's last layers (layer-wise streaming would
hide part of it), prefill batching across requests beyond the runtime's token budget, KV-cache
format conversion between pools, and the network contention of many transfers at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

#: closed-loop clients that saturate a prefill replica (one-token requests; the runtime's token
#: budget then carries several prompts per step)
PREFILL_SATURATION_CLIENTS = 64.0
#: load the automatic pool ratio allows on the prefill pool (assumption: keeps queueing waits to
#: a fraction of a prompt's service time; --pool-ratio overrides)
PREFILL_TARGET_LOAD = 0.8
#: decode replicas tried by the automatic pool ratio
MAX_DECODE_REPLICAS = 8


def _rows(c: Mapping[str, np.ndarray], **over: np.ndarray) -> dict[str, np.ndarray]:
    out = {k: np.array(v, copy=True) if np.ndim(v) else v for k, v in c.items()}
    out.update(over)
    return out


def sakasegawa_wait(rho, servers, service_s):
    """Mean queueing wait of ``servers`` deterministic servers under Poisson arrivals (module
    docstring); ``inf`` at ``rho >= 1``."""
    rho = np.asarray(rho, dtype=np.float64)
    c = np.maximum(np.asarray(servers, dtype=np.float64), 1.0)
    w = np.power(np.clip(rho, 0.0, 1.0), np.sqrt(2.0 * (c + 1.0)) - 1.0) / (c * np.maximum(1.0 - rho, 1e-12)) \
        * np.asarray(service_s, dtype=np.float64) * 0.5
    return np.where(rho < 1.0, w, np.inf)


def serve(c: Mapping[str, np.ndarray], table, detail: bool,
          simulate: Callable[..., dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Score rows with ``disagg == 1`` as disaggregated deployments (module docstring); other rows
    as the simulator does.  ``simulate`` is :func:`explorer.simulate.simulate` (passed in to keep
    the import one-way)."""
    flag = np.asarray(c["disagg"], dtype=np.float64)
    is_d = flag == 1
    n = flag.size
    if not np.all(is_d):
        agg = {k: (np.asarray(v)[~is_d] if np.ndim(v) else v) for k, v in c.items()}
        dis = {k: (np.asarray(v)[is_d] if np.ndim(v) else v) for k, v in c.items()}
        ra, rd = simulate(agg, table, detail), serve(dis, table, detail, simulate)
        out: dict[str, np.ndarray] = {}
        for k in ra:
            col = np.empty(n, dtype=np.result_type(ra[k].dtype, rd[k].dtype))
            col[~is_d], col[is_d] = ra[k], rd[k]
            out[k] = col
        return out
    E = np.asarray(c["experts"], dtype=np.float64)
    ptp = np.maximum(np.asarray(c["prefill_tp"], dtype=np.float64), 1.0)
    ppp = np.maximum(np.asarray(c["prefill_pp"], dtype=np.float64), 1.0)
    p_ep = np.where((E > 0) & (np.mod(E, ptp) == 0), ptp, 1.0)
    zeros = np.zeros(n)
    base = {"tp": ptp, "pp": ppp, "ep": p_ep, "dp": np.ones(n), "osl": np.full(n, 2.0), "disagg": zeros,
            "request_rate": zeros, "ttft_extra_s": zeros}
    one = simulate(_rows(c, batch=np.ones(n), **base), table, False)
    sat = simulate(_rows(c, batch=np.full(n, PREFILL_SATURATION_CLIENTS), **base), table, False)
    mu = np.maximum(sat["request_rate"], 1e-30)  # prompts/s one prefill replica sustains
    ttft_pf = one["ttft_s"]
    g_p = ptp * ppp

    # decode pool first (KV bytes per GPU come from it), then the transfer, then again with its TTFT
    dec_rows = _rows(c, disagg=np.full(n, 2.0))
    first = simulate(dec_rows, table, False)
    isl = np.asarray(c["isl"], dtype=np.float64)
    osl = np.asarray(c["osl"], dtype=np.float64)
    kv_bytes = first["kv_bytes_per_seq_per_gpu"] * isl / np.maximum(isl + osl, 1.0)
    g_d = first["gpus"]
    idx = np.asarray(c["hw_idx"], dtype=np.int64)
    kinds = table.kinds
    up_bw = np.array([k.scaleup_bw for k in kinds])[idx]
    out_bw = np.array([k.scaleout_bw for k in kinds])[idx]
    up_lat = np.array([k.scaleup_latency_s for k in kinds])[idx]
    out_lat = np.array([k.scaleout_latency_s for k in kinds])[idx]
    eta_n = np.array([k.eta_network for k in kinds])[idx]
    domain = np.array([k.scaleup_domain for k in kinds], dtype=np.float64)[idx]
    inside = g_p + g_d <= domain
    kv_s = kv_bytes / (np.where(inside, up_bw, out_bw) * eta_n) + np.where(inside, up_lat, out_lat)
    res = simulate(_rows(dec_rows, ttft_extra_s=ttft_pf + kv_s), table, detail)

    X = res["request_rate"]  # requests/s per decode replica
    n_p_fix = np.asarray(c.get("pool_prefill", zeros), dtype=np.float64)
    n_d_fix = np.asarray(c.get("pool_decode", zeros), dtype=np.float64)
    fixed = (n_p_fix > 0) & (n_d_fix > 0)
    best_thr = np.full(n, -1.0)
    n_p = np.where(fixed, n_p_fix, 1.0)
    n_d = np.where(fixed, n_d_fix, 1.0)
    out_tok = X * osl
    for nd in range(1, MAX_DECODE_REPLICAS + 1):
        npf = np.maximum(1.0, np.ceil(nd * X / (mu * PREFILL_TARGET_LOAD) - 1e-9))
        thr = nd * out_tok / (nd * g_d + npf * g_p)
        better = ~fixed & (thr > best_thr * (1 + 1e-12))
        best_thr = np.where(better, thr, best_thr)
        n_p = np.where(better, npf, n_p)
        n_d = np.where(better, float(nd), n_d)
    rho = n_d * X / (n_p * mu)
    wait = sakasegawa_wait(rho, n_p, 1.0 / mu)
    out = dict(res)
    gpus_all = n_d * g_d + n_p * g_p
    out["tokens_per_s_per_gpu"] = n_d * out_tok / gpus_all
    out["ttft_s"] = res["ttft_s"] + np.where(np.isfinite(wait), wait, 1e9)
    for q in ("p50", "p90", "p99"):  # the prefill pool's wait is not in the decode engine's spread
        out[f"ttft_{q}_s"] = res[f"ttft_{q}_s"] + np.where(np.isfinite(wait), wait, 1e9)
    overloaded = rho >= 1.0
    out["reason_code"] = np.where((res["reason_code"] == 0) & ~one["feasible"], 9, res["reason_code"])
    out["reason_code"] = np.where((out["reason_code"] == 0) & overloaded, 8, out["reason_code"])
    out["feasible"] = out["reason_code"] == 0
    out["gpus"] = gpus_all / n_d  # GPUs per decode replica's share of the whole deployment
    out["prefill_replicas"] = n_p
    out["decode_replicas"] = n_d
    out["prefill_gpus_per_replica"] = g_p
    out["kv_transfer_s"] = kv_s
    out["prefill_load"] = rho
    out["prefill_s_per_request"] = 1.0 / mu
    return out
