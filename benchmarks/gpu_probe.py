"""Measure on a GPU what the simulator assumes: GEMM times around tile and wave boundaries, skinny
decode GEMMs, grouped (MoE-like) GEMMs and device-to-device copy bandwidth.  Writes one CSV that
``validation/`` can keep and calibration can use.

Run it on a lent GPU as ONE prepared command (device time is short), e.g.::

    python benchmarks/gpu_probe.py --out "$OUT/gemm_probe.csv" --budget-s 240

Plain script; needs PyTorch with CUDA (``--device cpu`` runs a tiny smoke version anywhere torch is
installed).  Each row: ``kind, dtype, m, n, k, groups, seconds, tflops, tb_per_s`` plus the machine's
metadata (GPU name, SM count, driver, torch, CUDA, cuBLAS, date).  Timing: CUDA events around
``--iters`` back-to-back launches after warm-up, median of ``--repeats``; fp8 uses
``torch._scaled_mm`` when the GPU and torch support it (skipped otherwise, and said so).

What each block is for:
* ``tile``: N = 128k-1, 128k, 128k+1 at a compute-bound M -- the sawtooth the GEMM model predicts;
* ``wave``: N stepped so that the output tile count crosses multiples of the SM count -- the staircase;
* ``decode``: M = 1..512 on layer-sized (N, K) -- skinny GEMMs, memory-bound, where the model's
  occupancy and split-K assumptions live;
* ``grouped``: E small GEMMs (bmm) with few tokens each -- MoE expert GEMMs (the fitted ``moe``
  efficiency is the model's largest correction);
* ``copy``: device-to-device copy -- achievable HBM bandwidth.
Stops adding blocks when ``--budget-s`` is spent, so it always finishes and writes what it has.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path


def metadata(torch, device: str) -> dict:
    meta = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "torch": torch.__version__,
            "cuda": str(getattr(torch.version, "cuda", None)), "device": device}
    if device == "cuda":
        p = torch.cuda.get_device_properties(0)
        meta.update(gpu=p.name, sms=p.multi_processor_count, memory_gb=round(p.total_memory / 1e9, 1),
                    cublas=str(torch.backends.cuda.preferred_blas_library()) if hasattr(
                        torch.backends.cuda, "preferred_blas_library") else "")
        try:
            meta["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                            capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            meta["driver"] = ""
    else:
        meta.update(gpu="cpu", sms=os.cpu_count(), memory_gb=0, driver="", cublas="")
    return meta


class Timer:
    def __init__(self, torch, device: str, iters: int, repeats: int):
        self.torch, self.device, self.iters, self.repeats = torch, device, iters, repeats

    def __call__(self, fn) -> float:
        """Median seconds per call of ``fn``."""
        torch = self.torch
        for _ in range(3):
            fn()
        times = []
        for _ in range(self.repeats):
            if self.device == "cuda":
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(self.iters):
                    fn()
                b.record()
                torch.cuda.synchronize()
                times.append(a.elapsed_time(b) / 1e3 / self.iters)
            else:
                t0 = time.perf_counter()
                for _ in range(self.iters):
                    fn()
                times.append((time.perf_counter() - t0) / self.iters)
        times.sort()
        return times[len(times) // 2]


def gemm_fn(torch, dtype: str, m: int, n: int, k: int, device: str):
    """A closure computing one (M x K) @ (K x N) GEMM in ``dtype``; None when unsupported."""
    if dtype == "fp8":
        if device != "cuda" or not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
            return None
        a = torch.randn(m, k, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=device).to(torch.float8_e4m3fn).t()  # column-major B, as _scaled_mm wants
        one = torch.ones((), device=device)
        try:
            torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        except (RuntimeError, TypeError):
            return None
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    tdt = torch.bfloat16 if device == "cuda" else torch.float32
    a = torch.randn(m, k, device=device, dtype=tdt)
    b = torch.randn(k, n, device=device, dtype=tdt)
    return lambda: a @ b


def plan(sms: int, small: bool) -> list[tuple]:
    """(kind, dtype, m, n, k, groups) rows, most valuable first."""
    rows: list[tuple] = []
    big_m, k = (256, 256) if small else (8192, 4096)
    for dtype in ("bf16", "fp8"):
        for base in ((4, 8) if small else (28, 56, 112)):  # tile sawtooth around 128*base
            for n in (128 * base - 1, 128 * base, 128 * base + 1):
                rows.append(("tile", dtype, big_m, n, k, 1))
        # wave staircase: with 128x256 tiles, tiles = (M/128) * ceil(N/256); M spans a divisor of the
        # SM count in row tiles so that N = 256 * waves * SMs / rows puts the tile count exactly on a
        # multiple of the SM count (the next N step costs a whole extra wave if the model is right)
        rows_t = 1 if small else max(d for d in range(1, 17) if sms % d == 0)
        m_w = 128 * rows_t
        for waves in ((1, 2) if small else (1, 2, 3, 4)):
            n_edge = 256 * (waves * sms // rows_t)
            for n in (n_edge - 256, n_edge, n_edge + 256):
                if n > 0:
                    rows.append(("wave", dtype, m_w, n, k, 1))
        for nk in (((256, 256),) if small else ((6144, 4096), (28672, 4096), (4096, 14336), (10240, 8192))):
            for m in ((1, 8) if small else (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)):
                rows.append(("decode", dtype, m, nk[0], nk[1], 1))
    for groups, m in (((4, 4),) if small else ((8, 16), (32, 16), (32, 64), (128, 8), (128, 32))):
        rows.append(("grouped", "bf16", m, 256 if small else 4096, 256 if small else 2048, groups))
    rows.append(("copy", "bf16", 1 << (20 if small else 30), 1, 1, 1))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="CSV path to write")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--budget-s", type=float, default=240.0, help="stop adding measurements after this")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("gpu_probe: PyTorch is not installed", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_probe: no CUDA device (use --device cpu for a smoke run)", file=sys.stderr)
        return 2
    meta = metadata(torch, args.device)
    timer = Timer(torch, args.device, args.iters if args.device == "cuda" else 2, args.repeats)
    t_start = time.perf_counter()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    fields = ["kind", "dtype", "m", "n", "k", "groups", "seconds", "tflops", "tb_per_s", "note", *meta]
    skipped = 0
    with open(tmp, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        for kind, dtype, m, n, k, groups in plan(int(meta["sms"] or 1), args.device == "cpu"):
            if time.perf_counter() - t_start > args.budget_s:
                skipped += 1
                continue
            note = ""
            if kind == "copy":
                x = torch.empty(m, device=args.device, dtype=torch.bfloat16)
                y = torch.empty_like(x)
                sec = timer(lambda x=x, y=y: y.copy_(x))
                flops, nbytes = 0.0, 2.0 * m * 2  # read + write, 2 bytes each
            elif kind == "grouped":
                tdt = torch.bfloat16 if args.device == "cuda" else torch.float32
                a = torch.randn(groups, m, k, device=args.device, dtype=tdt)
                b = torch.randn(groups, k, n, device=args.device, dtype=tdt)
                sec = timer(lambda a=a, b=b: torch.bmm(a, b))
                flops, nbytes = 2.0 * groups * m * n * k, 2.0 * groups * (m * k + k * n + m * n)
            else:
                fn = gemm_fn(torch, dtype, m, n, k, args.device)
                if fn is None:
                    w.writerow({"kind": kind, "dtype": dtype, "m": m, "n": n, "k": k, "groups": 1,
                                "note": "unsupported here", **meta})
                    continue
                sec = timer(fn)
                b_el = 1.0 if dtype == "fp8" else 2.0
                flops, nbytes = 2.0 * m * n * k, b_el * (m * k + k * n) + 2.0 * m * n
            w.writerow({"kind": kind, "dtype": dtype, "m": m, "n": n, "k": k, "groups": groups, "seconds": sec,
                        "tflops": flops / sec / 1e12 if flops else "", "tb_per_s": nbytes / sec / 1e12,
                        "note": note, **meta})
            fh.flush()
    os.replace(tmp, out)
    print(f"gpu_probe: wrote {out} ({meta.get('gpu')}); {skipped} measurements skipped for the time budget")
    return 0


if __name__ == "__main__":
    sys.exit(main())
