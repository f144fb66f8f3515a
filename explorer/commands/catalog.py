"""``explorer models``, ``explorer hardware`` and ``explorer runtimes``: what is available."""

from __future__ import annotations

import json
from typing import Any


def register(sub) -> None:
    p = sub.add_parser("models", help="list model presets")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run_models)
    h = sub.add_parser("hardware", help="list hardware kinds")
    h.add_argument("--json", action="store_true", help="print JSON")
    h.set_defaults(func=run_hardware)
    r = sub.add_parser("runtimes", help="list serving-runtime profiles")
    r.add_argument("--json", action="store_true", help="print JSON")
    r.set_defaults(func=run_runtimes)


def run_runtimes(args) -> int:
    from explorer.runtime import describe, list_runtimes

    rows = [describe(rt) for rt in list_runtimes()]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'name':12s} {'prompts':9s} {'tokens/step':>11s} {'max batch':>9s} {'KV admission':13s} {'graphs':6s} "
          f"{'AR+norm':7s} {'TP all-reduce':13s} {'ADP wait':8s}  fitted on")
    for r_ in rows:
        print(f"{r_['name']:12s} {r_['prompts']:9s} {r_['max_tokens_per_step']:11d} {r_['max_batch']:9d} "
              f"{r_['kv_admission']:13s} {'padded' if r_['cuda_graph_padding'] else '-':6s} "
              f"{'fused' if r_['allreduce_norm_fusion'] else '-':7s} "
              f"{'custom+NCCL' if r_['custom_allreduce'] else 'NCCL':13s} "
              f"{str(r_['attention_dp_balance_iters']) + ' it' if r_['attention_dp_balance_iters'] else '-':8s}  "
              f"{', '.join(r_['fitted_on'])}")
    rel = [(r_["name"], hw, x) for r_ in rows for hw, xs in r_["releases"].items() for x in xs]
    if rel:
        print("\nsoftware releases (served-kernel speed vs the newest measured on the GPU; NAME@RELEASE asks for one):")
        for name, hw, x in rel:
            print(f"  {name + '@' + x['release']:28s} {hw:8s} {x['family']:6s} first run {x['first_run'] or '-':10s} "
                  f"speed {x['speed']:.2f}")
    return 0


def run_models(args) -> int:
    from explorer.model import param_counts, presets

    rows: list[dict[str, Any]] = []
    for name, p in sorted(presets().items()):
        c = param_counts(p.shape.columns())
        s = p.shape
        rows.append({
            "name": name, "display_name": p.display_name, "aliases": list(p.aliases),
            "params_total": float(c["total"]), "params_active": float(c["active"]),
            "hidden": s.hidden, "ffn": s.ffn, "layers": s.layers, "heads": s.heads, "kv_heads": s.kv_heads,
            "head_dim": s.head_dim, "experts": s.experts, "experts_per_token": s.experts_per_token,
            "attention": "MLA" if s.kv_lora_rank else ("MHA" if s.heads == s.kv_heads else "GQA"),
        })
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'name':18s} {'total':>8s} {'active':>8s} {'H':>6s} {'F':>6s} {'L':>4s} {'heads':>9s} {'attn':>4s} "
          f"{'experts':>8s}  aliases")
    for r in rows:
        moe = f"{r['experts_per_token']}/{r['experts']}" if r["experts"] else "-"
        print(f"{r['name']:18s} {r['params_total'] / 1e9:7.1f}B {r['params_active'] / 1e9:7.1f}B {r['hidden']:6d} "
              f"{r['ffn']:6d} {r['layers']:4d} {r['heads']:4d}/{r['kv_heads']:<4d} {r['attention']:>4s} {moe:>8s}  "
              f"{', '.join(r['aliases'])}")
    return 0


def run_hardware(args) -> int:
    from explorer.hardware import list_hardware

    kinds = list_hardware()
    if args.json:
        print(json.dumps([{
            "name": h.name, "display_name": h.display_name, "aliases": list(h.aliases),
            "peak_TFLOPS": {k: v / 1e12 for k, v in h.peak_flops.items()}, "hbm_GB": h.hbm_bytes / 1e9,
            "hbm_TB_per_s": h.hbm_bw / 1e12, "sms": h.sms, "scaleup_GB_per_s": h.scaleup_bw / 1e9,
            "scaleup_domain": h.scaleup_domain, "efficiency": h.efficiency_kind, "file": h.path,
        } for h in kinds], indent=1))
        return 0
    print(f"{'name':10s} {'bf16':>6s} {'fp8':>6s} {'fp4':>6s} {'HBM GB':>7s} {'TB/s':>5s} {'SMs':>4s} "
          f"{'link GB/s':>9s} {'domain':>6s}  efficiency  display name")
    def pk(h, f: str) -> str:
        return f"{h.peak_flops[f] / 1e12:6.0f}" if f in h.peak_flops else "     -"

    for h in kinds:
        print(f"{h.name:10s} {pk(h, 'bf16')} {pk(h, 'fp8')} {pk(h, 'fp4')} {h.hbm_bytes / 1e9:7.0f} {h.hbm_bw / 1e12:5.2f} "
              f"{h.sms:4d} {h.scaleup_bw / 1e9:9.0f} {h.scaleup_domain:6d}  {h.efficiency_kind:10s}  {h.display_name}")
    from explorer.fabrics import fabrics

    print("\ncloud scale-out fabrics (explorer evaluate --fabric NAME; explorer/data/fabrics.yaml):")
    for f in fabrics().values():
        print(f"  {f.name:20s} {f.scaleout_bw / 1e9:5.0f} GB/s per GPU, steps Simple {f.simple_step_s * 1e6:.0f} us / "
              f"LL {f.ll_step_s * 1e6:.0f} us  {f.display_name}")
    return 0
