"""Build ``validation/fronts_inferencex.yaml`` -- measured InferenceX serving curves in the shape of
``validation/fronts.yaml`` -- from the transcription of the public InferenceX-app API fixture
(``validation/sources/inferencex_app_benchmarks_44c8e03.csv``; where it comes from and how it was
read: ``validation/sources/README.md``).

    python benchmarks/fixture_curves.py [--check]

``--check`` rebuilds in memory and exits 1 if the shipped YAML differs (the file is generated:
edit the transcription or this script, not the YAML).

What is kept, and why (each decision is also written into the YAML's ``meta``):

* single-node, aggregated runs without speculative decoding (``disagg`` false, ``is_multinode``
  false, ``spec_method`` none): the shape of fronts.yaml, whose meta leaves the others out;
* runtimes the simulator has a profile for (SGLang, TensorRT-LLM, vLLM); AMD's ATOM and the Dynamo
  multi-node stacks are counted in ``meta.left_out`` and not scored;
* rows that fronts.yaml already holds (same GPU, runtime, model, precision, split, lengths,
  concurrency and run date) are left to fronts.yaml: no point is scored twice;
* a row with no measured output throughput takes the derived one of fronts.yaml's
  ``meta.derived_throughput`` (closed loop, mean lengths 0.9 L) and is marked derived;
* rows without a per-user interactivity are dropped (the curve's x axis).

Conventions are fronts.yaml's (InferenceX: lengths uniform in [0.8 L, L], num_prompts = 10 C,
num_gpus = the decode TP size -- the fixture's ``num_decode_gpu`` reports tp*ep for EP > 1).
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from collections import Counter
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SOURCE_CSV = ROOT / "validation" / "sources" / "inferencex_app_benchmarks_44c8e03.csv"
OUT = ROOT / "validation" / "fronts_inferencex.yaml"
EXISTING = ROOT / "validation" / "fronts.yaml"
FIXTURE = ("vngcloud/InferenceX-app@44c8e03e672f38a3c2b78fa03cc900ff674f69e5:packages/app/cypress/fixtures/api/"
           "benchmarks.json (fork of SemiAnalysisAI/InferenceX-app sharing its history; the e2e mock API fixture "
           "of the InferenceX dashboard; each row carries its InferenceX GitHub Actions run_url)")

#: fixture model keys -> the checkpoint names fronts.yaml uses
MODELS = {"dsr1": "DeepSeek-R1-0528", "gptoss": "gpt-oss-120b", "gptoss120b": "gpt-oss-120b",
          "llama70b": "Llama-3.3-70B-Instruct", "70b": "Llama-3.3-70B-Instruct",
          "qwen3-235b": "Qwen3-235B-A22B-FP8", "qwen3": "Qwen3-235B-A22B-FP8"}
#: fixture framework keys -> fronts.yaml's labels (runtimes the simulator has a profile for)
FRAMEWORKS = {"sglang": "SGLang", "vllm": "vLLM", "trt": "TensorRT-LLM", "trtllm": "TensorRT-LLM"}
#: InferenceX --random-range-ratio 0.8: mean length 0.9 L (fronts.yaml meta.derived_throughput)
MEAN_LENGTH = 0.9
_VERSION = re.compile(r":v?(\d+\.\d+(?:\.\d+)?(?:rc\d+)?(?:\.post\d+)?)")


def _num(v: str) -> float | None:
    v = (v or "").strip()
    return float(v) if v else None


def _bool(v: str) -> bool:
    return (v or "").strip().lower() == "true"


def version_of(image: str) -> str | None:
    """The runtime release an image tag names (``lmsysorg/sglang:v0.5.9-cu130`` -> ``0.5.9``)."""
    m = _VERSION.search(image or "")
    return m.group(1) if m else None


def existing_points(path: Path = EXISTING) -> set[tuple]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return {(str(r["gpu"]).lower(), str(r["framework"]).lower(), str(r["model"]), str(r["precision"]).lower(),
             int(r["tp"]), int(r.get("ep", 1)), bool(r.get("dp_attention", False)), int(r["isl"]), int(r["osl"]),
             int(r["concurrency"]), str(r.get("date", ""))) for r in data["rows"]}


def build(rows: list[dict[str, str]], existing: set[tuple]) -> dict:
    left_out: Counter = Counter()
    curves: dict[str, dict] = {}
    out_rows: list[dict] = []
    for r in rows:
        if _bool(r["disagg"]) or _bool(r["is_multinode"]):
            left_out["disaggregated or multi-node"] += 1
            continue
        if (r["spec_method"] or "none").strip().lower() != "none":
            left_out[f"speculative decoding ({r['spec_method']})"] += 1
            continue
        fw = FRAMEWORKS.get(r["framework"].strip().lower())
        model = MODELS.get(r["model"].strip().lower())
        if fw is None or model is None:
            left_out[f"no profile or preset: framework {r['framework']}, model {r['model']}"] += 1
            continue
        user = _num(r["median_intvty"])
        if user is None:
            left_out["no median interactivity"] += 1
            continue
        gpu, prec = r["hardware"].strip().upper(), r["precision"].strip().upper()
        tp, ep, dpa = int(float(r["decode_tp"])), int(float(r["decode_ep"] or 1)), _bool(r["decode_dp_attention"])
        isl, osl, conc, date = int(float(r["isl"])), int(float(r["osl"])), int(float(r["conc"])), r["date"].strip()
        key = (gpu.lower(), fw.lower(), model, prec.lower(), tp, ep, dpa, isl, osl, conc, date)
        if key in existing:
            left_out["already in fronts.yaml"] += 1
            continue
        existing.add(key)
        lengths = f"{isl // 1024}k{osl // 1024}k" if isl % 1024 == 0 and osl % 1024 == 0 else f"{isl}_{osl}"
        cid = (f"ixapp_{r['model'].strip().lower()}_{gpu.lower()}_{fw.lower().replace('tensorrt-llm', 'trtllm')}_"
               f"{prec.lower()}_tp{tp}ep{ep}{'dpa' if dpa else ''}_{lengths}_{date}")
        image = (r["image"] or "").strip() or None
        version = version_of(image or "")
        if cid not in curves:
            curves[cid] = {
                "curve": cid, "model": model, "gpu": gpu, "num_gpus": tp, "framework": fw,
                **({"framework_version": version} if version else {}), **({"image": image} if image else {}),
                "precision": prec, "tp": tp, "ep": ep, "dp_attention": dpa, "isl": isl, "osl": osl, "date": date,
                "concurrencies": [], "throughput_field": "tok_s_gpu (measured)", "source": FIXTURE,
                "notes": ("InferenceX measured row. tok_s_gpu = metrics.output_tput_per_gpu; tok_s_user = "
                          "metrics.median_intvty (median of per-request 1/TPOT); ttft/tpot = medians. ISL/OSL "
                          "drawn uniform in [0.8*L, L] (random-range-ratio 0.8), num_prompts = 10*conc, ignore_eos. "
                          "num_gpus = decode_tp (fixture field num_decode_gpu reports tp*ep for EP>1 rows)."),
                "trust": "high"}
        c = curves[cid]
        c["concurrencies"].append(conc)
        row: dict = {"id": f"{cid}_c{conc}", "curve": cid, "model": model, "gpu": gpu, "num_gpus": tp,
                     "framework": fw, **({"framework_version": version} if version else {}), "precision": prec,
                     "tp": tp, "ep": ep, "dp_attention": dpa, "pp": 1, "isl": isl, "osl": osl, "concurrency": conc}
        measured = _num(r["output_tput_per_gpu"])
        mean_ttft, mean_tpot = _num(r["mean_ttft"]), _num(r["mean_tpot"])
        if measured is not None:
            row["tok_s_gpu"] = round(measured, 3)
        elif mean_ttft is not None and mean_tpot is not None:
            o = MEAN_LENGTH * osl
            row["tok_s_gpu_derived"] = round(conc * o / (mean_ttft + (o - 1.0) * mean_tpot) / tp, 3)
            c["throughput_field"] = "tok_s_gpu_derived (some rows: the fixture row has no output throughput)"
        else:
            left_out["no throughput"] += 1
            c["concurrencies"].pop()
            continue
        row["tok_s_user"] = round(user, 3)
        for key_out, col, scale in (("ttft_ms", "median_ttft", 1e3), ("tpot_ms", "median_tpot", 1e3),
                                    ("mean_ttft_ms", "mean_ttft", 1e3), ("mean_tpot_ms", "mean_tpot", 1e3),
                                    ("total_tok_s_gpu", "tput_per_gpu", 1.0)):
            v = _num(r[col])
            if v is not None:
                row[key_out] = round(v * scale, 3)
        if image:
            row["image"] = image
        row.update({"date": date, "run_url": (r["run_url"] or "").strip(), "source": FIXTURE,
                    "notes": f"See curves[{cid}].notes.", "trust": "high"})
        out_rows.append(row)
    kept = [c for c in curves.values() if c["concurrencies"]]
    for c in kept:
        c["concurrencies"] = sorted(c["concurrencies"])
    out_rows.sort(key=lambda x: (x["curve"], x["concurrency"]))
    kept.sort(key=lambda x: x["curve"])
    meta = {
        "title": "Measured InferenceX serving curves beyond validation/fronts.yaml (same conventions)",
        "source": FIXTURE,
        "transcription": "validation/sources/inferencex_app_benchmarks_44c8e03.csv (validation/sources/README.md)",
        "generated_by": "benchmarks/fixture_curves.py (do not edit by hand)",
        "inferencex_conventions": "InferenceX single-node aggregated runs: utils/bench_serving random dataset, "
                                  "random-range-ratio 0.8 (lengths ~U[0.8L, L]), num_prompts = 10*conc, "
                                  "max-concurrency = conc, request-rate inf, ignore-eos. interactivity = per-request "
                                  "1/TPOT. num_gpus is the decode TP size.",
        "derived_throughput": "tok_s_gpu_derived = concurrency * mean_OSL / (mean TTFT + (mean_OSL-1)*mean TPOT) / "
                              "num_gpus, mean_OSL = 0.9*OSL (as fronts.yaml meta.derived_throughput)",
        "left_out": {k: int(v) for k, v in sorted(left_out.items())},
        "counts": {"curves": len(kept), "rows": len(out_rows)},
    }
    return {"meta": meta, "curves": kept, "rows": out_rows}


def render(doc: dict) -> str:
    head = ("# Generated by benchmarks/fixture_curves.py from validation/sources/inferencex_app_benchmarks_44c8e03.csv;"
            " do not edit.\n")
    return head + yaml.safe_dump(doc, sort_keys=False, width=120, allow_unicode=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the shipped YAML is not what the CSV gives")
    args = ap.parse_args(argv)
    with SOURCE_CSV.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    text = render(build(rows, existing_points()))
    if args.check:
        same = OUT.exists() and OUT.read_text(encoding="utf-8") == text
        print("up to date" if same else f"{OUT.name} differs from what {SOURCE_CSV.name} gives")
        return 0 if same else 1
    OUT.write_text(text, encoding="utf-8")
    doc = yaml.safe_load(text)
    print(f"wrote {OUT.relative_to(ROOT)}: {doc['meta']['counts']}; left out {doc['meta']['left_out']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
