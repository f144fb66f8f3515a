"""``explorer evaluate``: score one design point and print where the time goes."""

from __future__ import annotations

import argparse
import json
from typing import Any, cast

from explorer.errors import SpecError
from explorer.specio import MAX_PARALLEL, MAX_SIZE, check_name_text


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
    p.add_argument("--tp", type=_degree, default=1)
    p.add_argument("--pp", type=_degree, default=1)
    p.add_argument("--ep", type=_degree, default=1)
    p.add_argument("--dp", type=_degree, default=1, help="attention data-parallel groups per stage")
    p.add_argument("--precision", default="bf16",
                   help="bf16 | fp16 | fp8 | fp4 | w4a8 | mxfp4 | w8a16 | w4a16, or 'w:fp4/a:fp8/kv:fp8'")
    p.add_argument("--batch", type=_batch, default=1,
                   help="concurrent requests per replica (closed-loop clients), or 'max'")
    p.add_argument("--runtime", default="trtllm",
                   help="serving runtime profile: trtllm | vllm | sglang (runtimes/*.yaml; default trtllm)")
    p.add_argument("--isl", type=_positive_int, default=1024, help="input tokens per request")
    p.add_argument("--osl", type=_positive_int, default=1024, help="output tokens per request")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


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
    check_name_text(args.hardware, "--hardware", None, "hardware")
    check_name_text(args.runtime, "--runtime", None, "runtime")
    r = evaluate(model, args.hardware, batch=args.batch, isl=args.isl, osl=args.osl, tp=args.tp, pp=args.pp,
                 ep=args.ep, dp=args.dp, precision=args.precision, runtime=args.runtime)
    if args.json:
        print(json.dumps(r, indent=1, default=float))
    else:
        print(format_result(r))
    return 0


def format_result(r: dict) -> str:
    d = r["deployment"]
    lines = [
        f"model {r['model']}  on {r['hardware']}  precision {r['precision']}  "
        f"tp={d['tp']} pp={d['pp']} ep={d['ep']} dp={d['dp']}  runtime {r['runtime']}  "
        f"concurrency={r['batch']}  ISL/OSL={d['isl']}/{d['osl']}",
        f"  feasible            {'yes' if r['feasible'] else 'NO: ' + r['reason']}",
        f"  tokens/s/GPU        {r['tokens_per_s_per_gpu']:12,.1f}",
        f"  tokens/s/user       {r['tokens_per_s_per_user']:12,.1f}   (TPOT {r['tpot_s'] * 1e3:.2f} ms)",
        f"  TTFT                {r['ttft_s'] * 1e3:12,.1f} ms (closed loop, queueing included)",
        f"  decode batch        {r['decode_batch']:12,.1f}   (steady state; {r['queued_requests']:.1f} requests queued)",
        f"  GPUs per replica    {int(r['gpus']):12d}",
        f"  memory per GPU      {r['memory_bytes_per_gpu'] / 1e9:12,.1f} GB of {r['memory_capacity_bytes'] / 1e9:.1f} GB "
        f"usable (weights {r['weights_bytes_per_gpu'] / 1e9:.1f}, KV {r['kv_bytes_per_gpu'] / 1e9:.1f}, "
        f"workspace {r['workspace_bytes_per_gpu'] / 1e9:.1f})",
        f"  parameters          {r['params_total'] / 1e9:12,.2f} B total, {r['params_active'] / 1e9:.2f} B active",
        "  time per output token, by component:",
    ]
    total = sum(r["breakdown"].values())
    for k, v in r["breakdown"].items():
        share = v / total if total else 0.0
        lines.append(f"    {k:10s} {v * 1e3:9.3f} ms  {share:6.1%}  {r['bounds'][k]}-bound")
    lines.append(f"    {'total':10s} {total * 1e3:9.3f} ms")
    if "batch_search" in r:
        bs = r["batch_search"]
        caps = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in (bs.get("limits") or {}).items())
        lines.append(f"  batch 'max': best of {bs['candidates']} candidates; memory allows {bs['memory_limited_batch']}"
                     + (f"; runtime limits: {caps}" if caps else "")
                     + ("" if bs.get("any_feasible", True) else "; no candidate is feasible"))
    return "\n".join(lines)
