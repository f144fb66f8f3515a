"""``explorer evaluate``: score one design point and print where the time goes."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any, cast

from explorer.errors import SpecError
from explorer.specio import MAX_PARALLEL, MAX_SIZE, check_name_text
from explorer.speculative import MAX_DRAFT_TOKENS, parse_acceptance_text, parse_draft_tokens_text


def _whole(text: str, minimum: int, maximum: int) -> int:
    try:
        v = int(text)
    except ValueError:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{shown}'") from None
    if not minimum <= v <= maximum:
        raise argparse.ArgumentTypeError(f"must be between {minimum} and {maximum:,} (the simulator's range), "
                                         f"got {v}")
    return v


def _positive_int(text: str) -> int:
    """A size: 1 .. MAX_SIZE (beyond it the simulator cannot represent the design)."""
    return _whole(text, 1, MAX_SIZE)


def _count(text: str) -> int:
    """A count that may be zero (experts, shared experts)."""
    return _whole(text, 0, MAX_SIZE)


def _degree(text: str) -> int:
    """A parallelism degree: 1 .. MAX_PARALLEL."""
    return _whole(text, 1, MAX_PARALLEL)


def _batch(text: str) -> int | str:
    return "max" if text == "max" else _positive_int(text)


def _real(text: str, low: float, high: float, low_exclusive: bool) -> float:
    try:
        v = float(text)
    except ValueError:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise argparse.ArgumentTypeError(f"expected a number, got '{shown}'") from None
    if not (math.isfinite(v) and (v > low if low_exclusive else v >= low) and v <= high):
        raise argparse.ArgumentTypeError(f"must be {'>' if low_exclusive else '>='} {low:g} and <= {high:g}, got {text}")
    return v


def _price(text: str) -> float:
    """USD per GPU-hour: > 0 .. 10,000."""
    return _real(text, 0.0, 10_000.0, True)


def _power_factor(text: str) -> float:
    """Facility watts per GPU board watt: 1 .. 10."""
    return _real(text, 1.0, 10.0, False)


def register(sub) -> None:
    p = sub.add_parser("evaluate", help="score one design point (preset or custom shape)",
                       description="Score one design point: throughput, interactivity, TTFT, memory and "
                                   "the per-component time breakdown.")
    p.add_argument("--model", help="preset name (see 'explorer models'); or give a custom shape")
    g = p.add_argument_group("custom shape (overrides the preset's values)")
    for flag, dest in (("--hidden", "hidden"), ("--ffn", "ffn"), ("--layers", "layers"), ("--heads", "heads"),
                       ("--kv-heads", "kv_heads"), ("--head-dim", "head_dim"), ("--vocab", "vocab"),
                       ("--experts", "experts"), ("--experts-per-token", "experts_per_token"),
                       ("--expert-ffn", "expert_ffn"), ("--shared-experts", "shared_experts")):
        g.add_argument(flag, dest=dest, type=_positive_int if dest not in ("experts", "shared_experts") else _count)
    g.add_argument("--no-gate", action="store_true", help="non-gated MLP (2 matrices instead of 3)")
    p.add_argument("--hardware", default="h200", help="hardware name or YAML path (default h200)")
    p.add_argument("--fabric", default=None,
                   help="scale-out fabric between nodes when not the hardware file's InfiniBand: aws-efa | "
                        "gcp-a3-mega-tcpxo (explorer/data/fabrics.yaml; matters for groups spanning nodes)")
    p.add_argument("--tp", type=_degree, default=1)
    p.add_argument("--pp", type=_degree, default=1)
    p.add_argument("--ep", type=_degree, default=1)
    p.add_argument("--dp", type=_degree, default=1, help="attention data-parallel groups per stage")
    p.add_argument("--precision", default="bf16",
                   help="bf16 | fp16 | fp8 | fp4 | w4a8 | mxfp4 | w8a16 | w4a16, or 'w:fp4/a:fp8/kv:fp8'")
    p.add_argument("--batch", type=_batch, default=1,
                   help="concurrent requests per replica (closed-loop clients), or 'max'")
    p.add_argument("--runtime", default="trtllm",
                   help="serving runtime profile: trtllm | vllm | sglang (runtimes/*.yaml; default trtllm); "
                        "NAME@RELEASE (sglang@0.5.9, trtllm@2025-11-02) for an older software release")
    p.add_argument("--isl", type=_positive_int, default=1024, help="input tokens per request")
    p.add_argument("--osl", type=_positive_int, default=1024, help="output tokens per request")
    p.add_argument("--usd-per-gpu-hour", type=_price, default=None,
                   help="price per GPU-hour for usd_per_million_tokens (default: the hardware file's dated "
                        "market-price assumption)")
    p.add_argument("--power-overhead-factor", type=_power_factor, default=None,
                   help="facility W per GPU board W for tokens_per_s_per_kw (default: host 1.82 x PUE 1.3, "
                        "explorer/cost.py)")
    p.add_argument("--concurrency", dest="batch", type=_batch, help="same as --batch (closed-loop clients)")
    p.add_argument("--request-rate", type=lambda t: _real(t, 0.0, 1e7, True), default=None,
                   help="open loop: Poisson arrivals, requests/s per replica (adds TTFT/TPOT p50/p90/p99)")
    p.add_argument("--ttft-limit-ms", type=lambda t: _real(t, 0.0, 1e7, True), default=None,
                   help="p99 TTFT limit; with --batch max: the highest rate whose p99s meet the limits")
    p.add_argument("--tpot-limit-ms", type=lambda t: _real(t, 0.0, 1e7, True), default=None,
                   help="p99 TPOT limit (see --ttft-limit-ms)")
    p.add_argument("--batch-wait-iters", type=lambda t: _whole(t, 0, 10**6), default=0,
                   help="the runtime holds new prompts up to N decode iterations to batch them (TensorRT-LLM "
                        "batch_wait_timeout_iters; 0 = off, the default; explorer/batch_wait.py)")
    p.add_argument("--batch-wait-ratio", type=lambda t: _real(t, 0.0, 1.0, False), default=0.0,
                   help="...or until the pending tokens reach this share of the step's token budget "
                        "(batch_wait_max_tokens_ratio; with --batch-wait-iters)")
    p.add_argument("--poll-interval", type=lambda t: _whole(t, 1, 10**4), default=1, metavar="N",
                   help="the scheduler takes in new requests every N decode steps (SGLang --scheduler-recv-interval "
                        "or --num-continuous-decode-steps; default 1: every step); a new request waits N/2 steps on "
                        "average for the next poll")
    p.add_argument("--max-num-tokens", type=lambda t: _whole(t, 0, 10**7), default=0, metavar="N",
                   help="tokens one step may carry, as the launch sets it (trtllm --max_num_tokens, vLLM "
                        "--max-num-batched-tokens, SGLang --chunked-prefill-size); default 0: the runtime profile's")
    p.add_argument("--allreduce-fusion", choices=("on", "off"), default=None,
                   help="the tensor-parallel all-reduce fused with the residual add and RMSNorm after it (FlashInfer / "
                        "TensorRT-LLM one- and two-shot kernels: vLLM pass_config fuse_allreduce_rms, SGLang "
                        "--enable-flashinfer-allreduce-fusion) or NCCL's and separate norms; default: the runtime "
                        "profile's")
    p.add_argument("--num-requests", type=lambda t: _whole(t, 0, 10**9), default=0,
                   help="a finite offline run of N requests queued at once, as trtllm-bench throughput runs "
                        "(explorer/offline_run.py: concurrency at most N, plus the ramp and drain); 0 = steady state")
    p.add_argument("--front-end", action="store_true",
                   help="add the runtime's serving front end (trtllm: trtllm-serve's HTTP server, detokenisation and "
                        "streaming, fitted on the InferenceX curves; it works beside the engine and bounds small "
                        "models at high concurrency); off: the engine alone, as an offline benchmark sees it")
    p.add_argument("--serving", default="aggregated", choices=("aggregated", "disaggregated"),
                   help="disaggregated: a prefill pool and this deployment as the decode pool (explorer/disagg.py)")
    p.add_argument("--prefill-tp", type=_degree, default=1, help="prefill pool: tensor parallel per replica")
    p.add_argument("--prefill-pp", type=_degree, default=1, help="prefill pool: pipeline stages per replica")
    p.add_argument("--pool-ratio", default=None, help="prefill:decode replicas, e.g. 1:3 (default: prefill keeps up)")
    p.add_argument("--gpus", type=_positive_int, default=None,
                   help="whole system: split N GPUs into the best set of replicas (explorer/systems.py); "
                        "with latency limits, MLPerf Server semantics")
    p.add_argument("--gpus-per-node", type=_positive_int, default=8,
                   help="GPUs per node for tokens/s per node (default 8: HGX; GB200 NVL72 trays hold 4)")
    p.add_argument("--check-events", action="store_true",
                   help="with an open-loop point: also run the discrete-event oracle and print both")
    sp = p.add_argument_group("speculative decoding / MTP (explorer/speculative.py; off by default)")
    sp.add_argument("--draft-tokens", type=parse_draft_tokens_text, default=0, metavar="K",
                    help=f"draft tokens per step, 0..{MAX_DRAFT_TOKENS} (default 0: no speculation)")
    sp.add_argument("--acceptance", type=parse_acceptance_text, default=None, metavar="A",
                    help="per-position acceptance probability in [0, 1], or a comma list with one per draft "
                         "position (e.g. 0.9,0.8,0.7)")
    sp.add_argument("--draft-model", default=None, metavar="PRESET",
                    help="separate draft model (a preset); default: the model's own MTP module")
    p.add_argument("--training-tokens", type=_tokens, default=None, metavar="D",
                   help="pre-training tokens for the predicted loss (e.g. 15e12; default: a preset's published "
                        "tokens; a custom shape needs it). docs/quality.md")
    p.add_argument("--emit-launch", default=None, metavar="DIR",
                   help="also write the runtime's launch for this point into DIR: launch.sh (trtllm-serve, vllm serve "
                        "or sglang.launch_server with its parallelism, batch and token budget, CUDA graphs, KV format, "
                        "MTP) and, for trtllm, its extra-llm-api-config.yml (explorer/launch.py)")
    p.add_argument("--checkpoint", default=None,
                   help="with --emit-launch: the weights to serve (default: the preset's Hugging Face repository)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _tokens(text: str) -> float:
    """Training tokens: a number 1e6 .. 1e15 (``15e12``, ``1.5e13``, ``15000000000000``)."""
    try:
        v = float(text.replace("_", ""))
    except ValueError:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise argparse.ArgumentTypeError(f"expected a number of tokens (e.g. 15e12), got '{shown}'") from None
    if not 1e6 <= v <= 1e15:
        raise argparse.ArgumentTypeError(f"must be between 1e6 and 1e15 tokens, got {text}")
    return v


def run(args) -> int:
    from explorer.api import evaluate
    from explorer.model import SHAPE_COLUMNS, ModelShape, get_preset

    shape = {k: getattr(args, k) for k in SHAPE_COLUMNS if getattr(args, k, None) is not None}
    if args.no_gate:
        shape["gated"] = 0
    model: str | ModelShape | None = args.model
    if args.model is None:
        need = ("hidden", "ffn", "layers", "heads")
        missing = [k for k in need if k not in shape]
        if missing:
            raise SpecError("evaluate", None, "give --model NAME or a custom shape with --"
                            + ", --".join(m.replace("_", "-") for m in missing))
        shape.setdefault("kv_heads", shape["heads"])
        model = ModelShape(**cast(dict[str, Any], {k: int(v) for k, v in shape.items()}), name="custom").validate("evaluate")
        shape = {}
    elif shape:
        base = get_preset(args.model).shape
        fields = {k: getattr(base, k) for k in SHAPE_COLUMNS}
        fields.update({k: int(v) for k, v in shape.items()})
        model = ModelShape(**fields, name=f"{base.name}*").validate("evaluate")
        shape = {}
        if args.training_tokens is None:  # a modified preset keeps the preset's training budget
            args.training_tokens = get_preset(args.model).training_tokens
    check_name_text(args.hardware, "--hardware", None, "hardware")
    check_name_text(args.runtime, "--runtime", None, "runtime")
    if args.gpus is not None:
        from explorer.api import evaluate_system

        s = evaluate_system(model, args.hardware, gpus=args.gpus, isl=args.isl, osl=args.osl, pp=args.pp,
                            precision=args.precision, runtime=args.runtime, ttft_limit_ms=args.ttft_limit_ms,
                            tpot_limit_ms=args.tpot_limit_ms, gpus_per_node=args.gpus_per_node)
        print(json.dumps(s, indent=1, default=float) if args.json else format_system(s))
        return 0
    r = evaluate(model, args.hardware, batch=args.batch, isl=args.isl, osl=args.osl, tp=args.tp, pp=args.pp,
                 ep=args.ep, dp=args.dp, precision=args.precision, runtime=args.runtime,
                 usd_per_gpu_hour=args.usd_per_gpu_hour, power_overhead_factor=args.power_overhead_factor,
                 request_rate=args.request_rate, ttft_limit_ms=args.ttft_limit_ms, tpot_limit_ms=args.tpot_limit_ms,
                 check_events=args.check_events, draft_tokens=args.draft_tokens, acceptance=args.acceptance,
                 draft_model=args.draft_model, training_tokens=args.training_tokens, serving=args.serving,
                 prefill_tp=args.prefill_tp, prefill_pp=args.prefill_pp, pool_ratio=args.pool_ratio,
                 batch_wait_iters=args.batch_wait_iters, batch_wait_ratio=args.batch_wait_ratio,
                 front_end=args.front_end, num_requests=args.num_requests, fabric=args.fabric,
                 poll_interval=args.poll_interval, max_num_tokens=args.max_num_tokens,
                 allreduce_fusion={"on": 1, "off": -1}.get(args.allreduce_fusion or "", 0))

    written: list = []
    if args.emit_launch is not None:
        from explorer.launch import launch_recipe, write_launch

        if args.checkpoint is not None:
            check_name_text(args.checkpoint, "--checkpoint", None, "checkpoint")
        launch = launch_recipe(r, args.checkpoint, batch_wait_iters=args.batch_wait_iters,
                               batch_wait_ratio=args.batch_wait_ratio)
        written = write_launch(launch, args.emit_launch)
        r = dict(r, launch=launch.as_dict())
    if args.json:
        print(json.dumps(r, indent=1, default=float))
    else:
        print(format_result(r))
        if written:
            print(f"  launch ({r['launch']['runtime']})  wrote " + ", ".join(str(p) for p in written))
            for n in r["launch"]["notes"]:
                print(f"    note: {n}")
    return 0


def _release_text(r: dict) -> str:
    rel = r.get("runtime_release")
    return f"@{rel['release']} (kernels at {rel['speed']:.2f} of the newest release)" if rel else ""


def format_system(s: dict) -> str:
    if not s["feasible"]:
        return f"system of {s['gpus']} x {s['hardware']}: no feasible deployment ({s['reason']})"
    mode = (f"p99 limits TTFT {s['limits_ms']['ttft_p99']} ms, TPOT {s['limits_ms']['tpot_p99']} ms"
            if s.get("limits_ms") else "saturated (offline)")
    return "\n".join([
        f"system of {s['gpus']} x {s['hardware']}  model {s['model']}  precision {s['precision']}  "
        f"runtime {s['runtime']}  ISL/OSL={s['isl']}/{s['osl']}  [{mode}]",
        f"  best split          {s['replicas']} replicas of tp={s['tp']} ep={s['ep']} dp={s['dp']} pp={s['pp']} "
        f"({s['gpus_per_replica']} GPUs each)",
        f"  tokens/s (system)   {s['tokens_per_s_system']:12,.0f}",
        f"  tokens/s per node   {s['tokens_per_s_per_node']:12,.0f}   ({s['gpus_per_node']} GPUs per node)",
        f"  tokens/s per GPU    {s['tokens_per_s_per_gpu']:12,.1f}",
        f"  tokens/s per user   {s['tokens_per_s_per_user']:12,.1f}",
        (f"  request rate        {s['request_rate_per_replica']:12,.2f} /s per replica (Poisson)"
         if s.get("limits_ms") else f"  concurrency         {s['batch']:12d} per replica"),
    ])


def _cost_line(label: str, value: float | None, fmt: str, note: str, missing: str) -> str:
    if value is None:
        return f"  {label:20s}{'n/a':>12s}   ({missing})"
    return f"  {label:20s}{fmt.format(value)}   {note}"


def quality_lines(r: dict) -> list[str]:
    """Predicted loss, its band and the fitted ranges the point leaves (explorer/quality.py)."""
    if r.get("predicted_loss") is None:
        return ["  predicted loss               n/a   (training tokens unknown: give --training-tokens D)"]
    lo, hi = r["predicted_loss_band"]
    band = f"band {lo:.4f} .. {hi:.4f}" if hi - lo > 1e-12 else "dense: no MoE band"
    q = r["quality"]
    out = [f"  predicted loss      {r['predicted_loss']:12.4f}   nats/token ({band}; base {q['loss_base']:.4f} x shape "
           f"{q['shape_factor']:.4f} x format {q['format_factor']:.4f}; {r['training_tokens']:.3g} training tokens, "
           f"training compute {r['training_flop']:.3g} FLOP)"]
    left = r.get("quality_ranges_left") or []
    out.append("  quality flags       " + ("inside every fitted range" if not left else
                                          f"EXTRAPOLATED ({len(left)}): " + "; ".join(left)))
    return out


def band_lines(r: dict) -> list[str]:
    """The held-out error band (api.error_band), one line; none for an infeasible point."""
    b = r.get("band")
    if not b or not r["feasible"]:
        return []
    g, u, t = b["tokens_per_s_per_gpu"], b["tokens_per_s_per_user"], b["ttft_s"]
    return [f"  held-out band       tokens/s/GPU {g[0]:,.1f}..{g[1]:,.1f}, tokens/s/user {u[0]:,.1f}..{u[1]:,.1f}, "
            f"TTFT {t[0] * 1e3:,.1f}..{t[1] * 1e3:,.1f} ms  (80 % of {b['cases']} held-out {b['group']} curve points; "
            f"serving fits: {b['serving_fit']})"]


def format_result(r: dict) -> str:
    d = r["deployment"]
    lines = [
        f"model {r['model']}  on {r['hardware']}  precision {r['precision']}  "
        f"tp={d['tp']} pp={d['pp']} ep={d['ep']} dp={d['dp']}  runtime {r['runtime']}{_release_text(r)}  "
        + (f"request rate={r['request_rate']:.3g}/s" if r.get("load") == "open-loop Poisson" else f"concurrency={r['batch']}")
        + f"  ISL/OSL={d['isl']}/{d['osl']}",
        f"  feasible            {'yes' if r['feasible'] else 'NO: ' + r['reason']}",
        f"  tokens/s/GPU        {r['tokens_per_s_per_gpu']:12,.1f}",
        f"  tokens/s/user       {r['tokens_per_s_per_user']:12,.1f}   (TPOT {r['tpot_s'] * 1e3:.2f} ms)",
        f"  TTFT                {r['ttft_s'] * 1e3:12,.1f} ms (mean, queueing included)",
        *band_lines(r),
        f"  decode batch        {r['decode_batch']:12,.1f}   (steady state; {r['queued_requests']:.1f} requests queued)",
        f"  GPUs per replica    {int(r['gpus']):12d}",
        f"  memory per GPU      {r['memory_bytes_per_gpu'] / 1e9:12,.1f} GB of {r['memory_capacity_bytes'] / 1e9:.1f} GB "
        f"usable (weights {r['weights_bytes_per_gpu'] / 1e9:.1f}, KV {r['kv_bytes_per_gpu'] / 1e9:.1f}, "
        f"workspace {r['workspace_bytes_per_gpu'] / 1e9:.1f})",
        f"  parameters          {r['params_total'] / 1e9:12,.2f} B total, {r['params_active'] / 1e9:.2f} B active",
        _cost_line("tokens/s/kW", r["tokens_per_s_per_kw"], "{:12,.1f}",
                   f"(board {r['board_power_w'] or 0:.0f} W x {r['power_overhead_factor']:.2f} host and cooling)",
                   "no board power in the hardware file"),
        _cost_line("$ per 1M tokens", r["usd_per_million_tokens"], "{:12,.3f}",
                   f"(at ${r['usd_per_gpu_hour'] or 0:.2f}/GPU-hour, output tokens)",
                   "no price in the hardware file; give --usd-per-gpu-hour"),
        *quality_lines(r),
        "  time per output token, by component:",
    ]
    if "speculation" in r:
        sp = r["speculation"]
        lines.insert(-1, f"  speculation         {sp['accepted_tokens_per_step']:12.3f}   tokens per step per sequence "
                         f"({sp['draft_tokens']} draft tokens from {sp['draft']}, acceptance "
                         f"{', '.join(f'{a:g}' for a in sp['acceptance'])})")
    total = sum(r["breakdown"].values())
    for k, v in r["breakdown"].items():
        share = v / total if total else 0.0
        lines.append(f"    {k:10s} {v * 1e3:9.3f} ms  {share:6.1%}  {r['bounds'][k]}-bound")
    lines.append(f"    {'total':10s} {total * 1e3:9.3f} ms")
    if r.get("prefill_replicas") is not None:
        lines.append(f"  disaggregated: {r['prefill_replicas']:.0f} prefill replicas of {r['prefill_gpus_per_replica']:.0f} "
                     f"GPUs : {r['decode_replicas']:.0f} decode replicas (prefill load {r['prefill_load']:.0%}, "
                     f"KV transfer {r['kv_transfer_s'] * 1e3:.2f} ms in TTFT)")
    if r.get("load") == "open-loop Poisson":
        lines.append(f"  open loop: Poisson arrivals at {r['request_rate']:.3f} requests/s per replica")
        for m in ("ttft", "tpot"):
            lines.append(f"    {m.upper():5s} p50 {r[f'{m}_p50_s'] * 1e3:9.1f} ms   p90 {r[f'{m}_p90_s'] * 1e3:9.1f} ms   "
                         f"p99 {r[f'{m}_p99_s'] * 1e3:9.1f} ms")
    if "limits_ms" in r:
        lim = r["limits_ms"]
        lines.append(f"  p99 limits: TTFT {lim['ttft_p99']} ms, TPOT {lim['tpot_p99']} ms -> "
                     + ("met" if r["meets_limits"] else "NOT met (no rate meets them)"))
    if "events" in r:
        ev = r["events"]
        lines.append(f"  discrete-event oracle ({ev['requests']} requests, one engine): analytic / events")
        for m in ("ttft", "tpot"):
            lines.append(f"    {m.upper():5s} " + "   ".join(
                f"{q} {r[f'{m}_{q}_s'] * 1e3:.1f}/{ev[f'{m}_{q}_s'] * 1e3:.1f} ms" for q in ("p50", "p90", "p99")))
    if "batch_search" in r:
        bs = r["batch_search"]
        caps = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in (bs.get("limits") or {}).items())
        lines.append(f"  batch 'max': best of {bs['candidates']} candidates; memory allows {bs['memory_limited_batch']}"
                     + (f"; runtime limits: {caps}" if caps else "")
                     + ("" if bs.get("any_feasible", True) else "; no candidate is feasible"))
    return "\n".join(lines)
