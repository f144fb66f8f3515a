"""Collective communication times (DESIGN.md section 4).

* ring all-reduce of ``m`` bytes over ``n`` GPUs: ``2(n-1)/n * m / (bw*eta_n) + 2(n-1)*alpha``;
* all-to-all (MoE dispatch or combine) of ``m`` bytes leaving each GPU:
  ``m / (bw*eta_n) + alpha*(1 + log2 n)`` -- the latency term is an assumption (pairwise sends
  issued concurrently through the NVLink switch; log-depth synchronisation);
* point-to-point hand-off (pipeline stages): ``m / (bw*eta_n) + alpha``.

``bw`` and ``alpha`` are the scale-up (NVLink/xGMI) figures when the group fits in one domain,
else the scale-out network's.

:func:`collective_s` is the fuller model of one NCCL-style collective call (all-reduce, all-gather,
reduce-scatter), as NCCL's own tuner sees it (src/graph/tuning.cc): the library picks, per call, the
fastest of its (algorithm, protocol) pairs, each ``base + steps*step_latency + bytes/(bw*fraction)``:

* protocols: LL (8-byte stores carrying 4 bytes of data and a flag: lowest latency, a fraction of
  the bandwidth), LL128 (128-byte lines with 120 bytes of data) and Simple (full bandwidth, highest
  latency); ``protocols`` lists ``(base_s, step_s, bw_fraction)`` per protocol
  (:func:`nccl_protocols` builds it with NCCL's base latencies);
* ring: ``factor*(n-1)`` steps moving ``factor*(n-1)/n * m`` bytes (factor 2 for all-reduce, 1 for
  all-gather / reduce-scatter).  A ring that leaves the scale-up domain runs one ring per NIC
  (assumption: one NIC per GPU, as on DGX/HGX), so its bandwidth is ``min(scale-up, D*scale-out)``
  for ``D`` GPUs per domain, and every step waits for the scale-out hop;
* hierarchical (groups larger than one domain): a ring inside each domain and a ring across the
  ``N`` domains on ``m/D``-byte shards, pipelined (the slower of the two bandwidth terms counts;
  both latency terms add);
* NVLS (NVLink SHARP: the switch reduces, on NVSwitch systems with ``nvls_eta > 0``): each GPU
  sends and receives ``m`` once, ``nvls_latency + m/(bw*nvls_eta)`` inside a domain (all-reduce
  only), and as the intra-domain part of the hierarchical algorithm across domains;
* mesh scale-up (xGMI, no switch): a group of ``n`` of the ``domain`` GPUs only has its ``n-1``
  direct links, ``(n-1)/(domain-1)`` of the per-GPU bandwidth;
* ``call_s``: the fixed cost of one call (launch, proxy thread, synchronisation), added once.

With the defaults (one Simple protocol without base latency, no NVLS, no call cost) and a group
inside one domain it is exactly the ring formula above.

:func:`ep_alltoall_s` is expert-parallel dispatch/combine (DeepEP-style): every token sends
``topk`` copies; with uniform routing a share ``(D-1)/n`` of the copies crosses NVLink and
``(n-D)/n`` the scale-out NIC (``rdma_only``: everything but the local copy goes through the NIC);
the slower side bounds the time.

Ignored: congestion, adaptive routing, NCCL's channel count ramp at medium sizes (folded into the
protocol fractions), per-node deduplication of MoE copies, and overlap with compute.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: NCCL's base latency of one ring collective per protocol, seconds (NVIDIA/nccl src/graph/tuning.cc,
#: ``baseLat`` for Ring: LL 6.6 us, LL128 14.0 us, Simple 8.4 us).
NCCL_BASE_LATENCY_S = {"ll": 6.6e-6, "ll128": 14.0e-6, "simple": 8.4e-6}


def link(group: np.ndarray, domain: np.ndarray, up_bw, up_lat, out_bw, out_lat):
    """(bandwidth bytes/s, latency s) for a group of ``group`` GPUs."""
    inside = group <= domain
    return np.where(inside, up_bw, out_bw), np.where(inside, up_lat, out_lat)


def nccl_protocols(simple_step_s, ll_step_s=0.0, ll128_step_s=0.0, ll_fraction=0.0, ll128_fraction=0.0,
                   base: bool = True, out_ll_step_s=None, out_ll_fraction=None) -> list[tuple]:
    """``(base_s, step_s, bw_fraction)`` for Simple and, where their fraction is > 0, LL and LL128.
    Per-point arrays broadcast; ``base=False`` drops NCCL's base latencies (the roofline).

    ``out_ll_step_s`` / ``out_ll_fraction`` (a scale-out fabric with its own LL figures,
    explorer/fabrics.py): LL's entry gets them as a 4th and 5th element, its per-step latency and
    bandwidth fraction on the hop across domains (:func:`collective_s`)."""
    def b(p: str) -> float:
        return NCCL_BASE_LATENCY_S[p] if base else 0.0
    out: list[tuple] = [(b("simple"), simple_step_s, 1.0)]
    if (np.asarray(ll_fraction) > 0).any():
        ll: tuple = (b("ll"), ll_step_s, np.maximum(ll_fraction, 1e-9))
        if out_ll_step_s is not None:
            ll = (*ll, out_ll_step_s, np.maximum(out_ll_fraction if out_ll_fraction is not None else ll[2], 1e-9))
        out.append(ll)
    if (np.asarray(ll128_fraction) > 0).any():
        out.append((b("ll128"), ll128_step_s, np.maximum(ll128_fraction, 1e-9)))
    return out


def collective_s(nbytes, n, *, domain, up_bw, up_step_s, out_bw, out_step_s, eta_n, kind: str = "allreduce",
                 protocols: Sequence[tuple] | None = None, call_s=0.0, nvls_eta=0.0, nvls_latency_s=0.0,
                 mesh=False, ring_only=False) -> np.ndarray:
    """Time (s) of one all-reduce / all-gather / reduce-scatter of ``nbytes`` (the full buffer) over
    ``n`` GPUs: the fastest (algorithm, protocol) of the module docstring.  Arrays broadcast."""
    terms = collective_terms(n, domain=domain, up_bw=up_bw, up_step_s=up_step_s, out_bw=out_bw,
                             out_step_s=out_step_s, eta_n=eta_n, kind=kind, protocols=protocols, call_s=call_s,
                             nvls_eta=nvls_eta, nvls_latency_s=nvls_latency_s, mesh=mesh, ring_only=ring_only)
    return collective_from_terms(nbytes, terms)


def collective_terms(n, *, domain, up_bw, up_step_s, out_bw, out_step_s, eta_n, kind: str = "allreduce",
                     protocols: Sequence[tuple] | None = None, call_s=0.0, nvls_eta=0.0, nvls_latency_s=0.0,
                     mesh=False, ring_only=False) -> dict:
    """The part of :func:`collective_s` that does not depend on the message size: per candidate
    (algorithm, protocol), its fixed time and the divisors of its bandwidth terms.  A caller costing
    many messages over the same groups (the simulator's closed-loop passes) computes it once and
    calls :func:`collective_from_terms` per size; the two together are :func:`collective_s`."""
    if kind not in ("allreduce", "allgather", "reducescatter"):
        raise ValueError(f"unknown collective '{kind}'")
    factor = 2.0 if kind == "allreduce" else 1.0
    n = np.asarray(n, dtype=np.float64)
    dom = np.asarray(domain, dtype=np.float64)
    D = np.maximum(np.minimum(n, dom), 1.0)  # GPUs of the group per domain
    N = np.ceil(n / D)  # domains spanned
    inside = n <= dom
    up = np.where(mesh, up_bw * (D - 1.0) / np.maximum(dom - 1.0, 1.0), up_bw)
    up = np.maximum(up, 1e-30)
    ring_bw = np.where(inside, up, np.minimum(up, D * out_bw))
    steps = factor * (n - 1.0)
    share = factor * (n - 1.0) / np.maximum(n, 1.0)
    # hierarchical: a ring across domains on m/D-byte shards, ``c_inter * (m/D) / inter_den``
    c_inter, inter_den = factor * (N - 1.0) / N, out_bw * eta_n
    inter_lat = factor * (N - 1.0) * out_step_s
    hier = not ring_only and not inside.all()
    ring, hierarchical = [], []
    for base, step, frac, *fabric in (protocols or [(0.0, up_step_s, 1.0)]):
        # the hop across domains: the protocol's own figures on a fabric that has them, else the
        # scale-out latency and the protocol's scale-up fraction
        o_step, o_frac = (fabric[0], fabric[1]) if fabric else (out_step_s, frac)
        step_lat = np.where(inside, step, np.maximum(step, o_step))
        if fabric:  # the slower of the scale-up and the fabric's bandwidth at this protocol
            lane = np.where(inside, up * frac, np.minimum(up * frac, D * out_bw * o_frac))
            den = lane * eta_n
        else:
            den = ring_bw * eta_n * frac
        ring.append((base + steps * step_lat, den))  # base + steps*step_lat + share*m/den
        if hier:
            o_lat = inter_lat if not fabric else factor * (N - 1.0) * o_step
            # base + factor(D-1)*step + o_lat + max(c_intra*m/intra_den, inter/o_frac)
            hierarchical.append((base + factor * (D - 1.0) * step + o_lat, factor * (D - 1.0) / D, up * eta_n * frac,
                                 o_frac))
    nv = np.asarray(nvls_eta, dtype=np.float64)
    nvls = kind == "allreduce" and not ring_only and bool((nv > 0).any())
    nvls_on = (nv > 0) & ~np.asarray(mesh, dtype=bool) if nvls else None
    multi = n > 1
    return {"n": n, "D": D, "inside": inside, "share": share, "c_inter": c_inter, "inter_den": inter_den,
            "inter_lat": inter_lat, "ring": ring, "hierarchical": hierarchical, "call_s": call_s,
            "shape": np.broadcast(n, dom, up).shape,
            "nvls": (nvls_latency_s, up * np.maximum(nv, 1e-9), nvls_on) if nvls else None,
            # which of np.where's branches collective_from_terms can skip: taken by no element, or by
            # every one (np.where then returns the other branch's values, or this one's, as they are)
            "multi": multi, "any_multi": bool(multi.any()), "all_inside": bool(np.all(inside)),
            "nvls_all_on": nvls and bool(np.all(nvls_on))}


def collective_from_terms(nbytes, terms: dict) -> np.ndarray:
    """:func:`collective_s` of ``nbytes`` from its size-independent :func:`collective_terms`."""
    S = np.asarray(nbytes, dtype=np.float64)
    shape = np.broadcast_shapes(S.shape, terms["shape"])
    if not terms.get("any_multi", True):  # no group of more than one GPU: np.where below gives 0 everywhere
        return np.zeros(np.broadcast_shapes(shape, np.shape(terms["n"]), np.shape(terms["call_s"])))
    inside, D, share = terms["inside"], terms["D"], terms["share"]
    all_inside = terms.get("all_inside", False)  # (np.where(inside, a, b) is a's values: b is not needed)
    inter = terms["c_inter"] * (S / D) / terms["inter_den"] \
        if terms["hierarchical"] or (terms["nvls"] and not all_inside) else None
    best = None  # (np.minimum(inf, x) is x, NaN included: the first candidate starts the minimum)
    for k, (fixed, den) in enumerate(terms["ring"]):
        cand = fixed + share * S / den
        best = cand if best is None and cand.shape == shape else np.minimum(
            np.full(shape, np.inf) if best is None else best, cand)
        if terms["hierarchical"]:
            fixed_h, c_intra, intra_den, o_frac = terms["hierarchical"][k]
            t_h = fixed_h + np.maximum(c_intra * S / intra_den, inter / o_frac)
            best = np.where(inside, best, np.minimum(best, t_h))
    if best is None:
        best = np.full(shape, np.inf)
    if terms["nvls"] is not None:
        lat, den_nv, on = terms["nvls"]
        t_nv = lat + S / den_nv
        if not all_inside:
            t_nv = np.where(inside, t_nv, t_nv + terms["inter_lat"] + np.maximum(0.0, inter - S / den_nv))
        best = np.minimum(best, t_nv) if terms.get("nvls_all_on", False) else np.where(on, np.minimum(best, t_nv), best)
    return np.where(terms["multi"] if "multi" in terms else terms["n"] > 1, best + terms["call_s"], 0.0)


def protocols_of(h) -> list[tuple]:
    """NCCL protocol candidates of a hardware kind (anything with the Hardware attributes): shared
    by the kernel validation and the serving simulator."""
    fabric = getattr(h, "scaleout_ll_step_s", 0.0) > 0
    return nccl_protocols(h.scaleup_latency_s, h.ll_step_s, h.ll128_step_s, h.ll_bw_fraction, h.ll128_bw_fraction,
                          base=h.collective_latency_s > 0 or h.ll_bw_fraction > 0,
                          out_ll_step_s=h.scaleout_ll_step_s if fabric else None,
                          out_ll_fraction=h.scaleout_ll_fraction if fabric and h.scaleout_ll_fraction > 0 else None)


#: Fixed time of one custom (peer-to-peer) all-reduce kernel of a serving runtime inside a CUDA/HIP
#: graph, seconds: the flag exchange with every peer over the scale-up links, launch excluded (the
#: launch is one of the step's counted kernels).  Assumption read off published stand-alone
#: timings, which include a ~1-2 us launch: vLLM's one-stage custom all-reduce 7-9 us from 16 KiB to
#: 256 KiB on 8x B300 (vllm-project/vllm#37756), 10 us at 0.5 MB on 4x H100 (vllm-project/vllm#24532);
#: TensorRT-LLM-style one-shot 4.5-7.8 us at 32 KiB on 2-8x H100 without graphs (sgl-project/sglang#2904);
#: vLLM/AITER on 8x MI355X 6.3 us at 24 KiB (vllm-project/vllm#39080).  NCCL, for the same sizes in
#: those tables: 21-29 us.
CUSTOM_ALLREDUCE_LATENCY_S = 5.0e-6


def custom_allreduce_s(nbytes, n, *, up_bw, eta_n) -> np.ndarray:
    """One custom all-reduce of ``nbytes`` over ``n`` GPUs of one scale-up domain (TensorRT-LLM's
    ONESHOT/TWOSHOT, vLLM's and SGLang's ``custom_all_reduce``, AITER's on ROCm): the faster of

    * one-shot: every GPU reads the other ``n-1`` buffers whole and reduces them locally,
      ``latency + (n-1)*m/(bw*eta_n)``;
    * two-shot: a reduce-scatter then an all-gather through the peers' buffers,
      ``2*latency + 2*(n-1)/n*m/(bw*eta_n)``.

    The slopes agree with the tables behind :data:`CUSTOM_ALLREDUCE_LATENCY_S`: one-shot on 8x B300
    grows ~28 us from 1 to 4 MiB (7 x 3 MiB read at ~750 GB/s of NVLink 5's 900), on 4x H100 ~4 us
    from 0.5 to 1 MB (3 x 0.5 MB at ~375 of NVLink 4's 450).  Ignored: NVLS multimem variants, the
    runtimes' size thresholds for falling back to NCCL (the caller takes the faster of the two)."""
    n = np.asarray(n, dtype=np.float64)
    return np.where(n > 1, custom_allreduce_from_terms(nbytes, custom_allreduce_terms(n, up_bw=up_bw, eta_n=eta_n)),
                    0.0)


def custom_allreduce_terms(n, *, up_bw, eta_n) -> tuple:
    """The part of :func:`custom_allreduce_s` that does not depend on the message size (a caller
    costing many messages over the same groups computes it once)."""
    n = np.asarray(n, dtype=np.float64)
    rate = 1.0 / (np.asarray(up_bw, dtype=np.float64) * eta_n)
    return n - 1.0, 2.0 * (n - 1.0) / np.maximum(n, 1.0), rate


def custom_allreduce_from_terms(nbytes, terms: tuple) -> np.ndarray:
    """:func:`custom_allreduce_s` of ``nbytes`` from its :func:`custom_allreduce_terms`, before the
    ``n > 1`` mask (groups of one GPU get the formulas' figures, not 0): the same operations in the
    same order."""
    hops, shots, rate = terms
    one = CUSTOM_ALLREDUCE_LATENCY_S + hops * nbytes * rate
    two = 2.0 * CUSTOM_ALLREDUCE_LATENCY_S + shots * nbytes * rate
    return np.minimum(one, two)


def allreduce_s(nbytes, n, bw, alpha, eta_n) -> np.ndarray:
    """Ring all-reduce with the bandwidth and per-step latency of the link the group uses."""
    return collective_s(nbytes, n, domain=np.inf, up_bw=bw, up_step_s=alpha, out_bw=bw, out_step_s=alpha,
                        eta_n=eta_n)


def alltoall_s(nbytes, n, bw, alpha, eta_n) -> np.ndarray:
    n = np.asarray(n, dtype=np.float64)
    t = nbytes / (bw * eta_n) + alpha * (1.0 + np.log2(np.maximum(n, 1.0)))
    return np.where(n > 1, t, 0.0)


def ep_alltoall_s(tokens, topk, token_bytes, n, *, domain, up_bw, out_bw, eta_n, up_step_s=0.0, out_step_s=0.0,
                  call_s=0.0, rdma_only=False):
    """(time s, logical bytes, NVLink bytes, scale-out bytes) of one expert-parallel dispatch or
    combine per GPU: ``tokens`` tokens on this GPU, ``topk`` copies each of ``token_bytes``, spread
    uniformly over ``n`` GPUs (module docstring).  Arrays broadcast."""
    terms = ep_alltoall_terms(n, domain=domain, rdma_only=rdma_only)
    t, logical, nvl, rdma = ep_alltoall_from_terms(tokens, topk, token_bytes, terms, up_bw=up_bw, out_bw=out_bw,
                                                   eta_n=eta_n, up_step_s=up_step_s, out_step_s=out_step_s,
                                                   call_s=call_s)
    return np.where(terms[0] > 1, t, 0.0), logical, nvl, rdma


def ep_alltoall_terms(n, *, domain, rdma_only=False) -> tuple:
    """The part of :func:`ep_alltoall_s` that depends on the group alone (``n``, its shares of
    NVLink and scale-out copies): a caller costing many messages over the same groups computes it
    once."""
    n = np.asarray(n, dtype=np.float64)
    D = np.maximum(np.minimum(n, np.asarray(domain, dtype=np.float64)), 1.0)
    nvl_share = np.where(rdma_only, 0.0, (D - 1.0) / n)
    out_share = np.where(rdma_only, (n - 1.0) / n, (n - D) / n)
    return n, nvl_share, out_share


def ep_alltoall_from_terms(tokens, topk, token_bytes, terms: tuple, *, up_bw, out_bw, eta_n, up_step_s=0.0,
                           out_step_s=0.0, call_s=0.0):
    """:func:`ep_alltoall_s` from its :func:`ep_alltoall_terms`, before the ``n > 1`` mask (groups of
    one GPU get the formula's figures, not 0): the same operations in the same order."""
    _, nvl_share, out_share = terms
    logical = np.asarray(tokens, dtype=np.float64) * topk * token_bytes
    nvl, rdma = logical * nvl_share, logical * out_share
    lat = np.where(rdma > 0, out_step_s, up_step_s)
    t = call_s + lat + np.maximum(nvl / (up_bw * eta_n), rdma / (out_bw * eta_n))
    return t, logical, nvl, rdma


def p2p_s(nbytes, bw, alpha, eta_n) -> np.ndarray:
    return nbytes / (bw * eta_n) + alpha
