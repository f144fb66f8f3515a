"""Measured serving curves (the shape of ``validation/fronts.yaml``) as validation cases.

A curve is one model / GPU / runtime / deployment / workload measured at several client
concurrencies (closed loop, :mod:`explorer.closed_loop`).  Each row (one concurrency) yields the
cases ``<id>:tok_s_gpu`` (output tokens/s per GPU), ``<id>:tok_s_user`` (tokens/s per user) and,
where a TTFT is given, ``<id>:ttft`` (milliseconds), scored by the same simulator at
``batch = concurrency`` with the row's runtime (``framework``).

Reading rules (each documented where it is applied):

* **Lengths.** InferenceX / InferenceMAX runs draw ISL and OSL uniform in ``[r L, L]``
  (``--random-range-ratio r``; r read from the file's ``meta``, fronts.yaml
  ``meta.inferencex_conventions`` says 0.8, the default): the simulator gets the means
  ``(1 + r)/2 L`` = 0.9 L.  A curve whose notes say the lengths are fixed, or that is not an
  InferenceX run, gets ``L``.
* **Measured and derived throughput.** A measured InferenceX ``tok_s_gpu`` is total output tokens
  over the run's wall time, and the run is finite (``num_prompts = 10 C``): its drain, the slots
  going idle one by one after the queue empties, is in the figure.  Those rows carry
  ``values["finite_run_cv"]`` (their lengths' coefficient of variation) and are scored against the
  steady-state prediction times :func:`explorer.closed_loop.finite_run_throughput_factor` (0.95-0.98).
  Rows without a measured ``tok_s_gpu`` carry ``tok_s_gpu_derived`` (Little's law from the
  measured mean TTFT/TPOT), which has no drain in it: scored against the steady state as it is.
  (fronts.yaml ``meta.derived_throughput`` measured derived / measured - 1 = +2.3 % median on 232
  InferenceX rows, which the drain explains: until 2026-12-06 derived figures were divided by
  1.023 and measured ones scored at the steady state.)
* **TTFT** is compared with the median where the row gives one, else with the mean.  ``ttft_ms``
  is the statistic the row's ``stat`` names (text starting ``mean`` or ``median``); without one it
  is the median when the row also carries ``mean_ttft_ms`` (InferenceX fixture rows: ``ttft_ms`` =
  median_ttft, ``mean_ttft_ms`` = mean_ttft) and the mean otherwise.  A median is scored against the simulator's
  closed-loop p50 (``ttft_p50_s``, :func:`explorer.open_loop.percentiles`, with the lengths'
  spread of the uniform draw); a mean against its steady-state mean plus the opening burst of a
  finite InferenceX run (:func:`explorer.closed_loop.start_burst_ttft_s`).  Why the median first:
  the measured means carry one-off stalls that no steady state has -- on the 55 InferenceX SGLang
  DeepSeek-R1 rows with both, (mean - median) x 10 C requests is already 4.1 s at 4 clients on H200
  and 10.8 s on MI300X (the opening burst of 4 prompts is ~0.2 s of it): seconds-long stalls in a
  few requests (first-use JIT compiles of new batch shapes are the likely cause; not modelled).
  Fitted to those means, the per-request host cost (``per_request_us``) absorbed them (320 ms on
  MI300X against a measured median TTFT of 167 ms at 4 clients) and every TTFT limit in a sweep
  was judged against it.
* **Deployment.** ``tp``/``ep`` as given (``ep`` only for MoE models); ``dp_attention: true`` is
  attention data parallelism over the ``tp`` GPUs (``t = 1, dp = tp``: TensorRT-LLM "DEP", SGLang
  ``--enable-dp-attention``); ``num_gpus`` must equal ``tp * pp``.  The all-reduce + RMSNorm fusion as
  the run had it (:func:`recipe_allreduce_fusion`: off for vLLM before 0.17, on where the recipe asks).
* **Precision.** As :func:`explorer.validate.precision_policy` (FP8 -> fp8, NVFP4 -> fp4, MXFP4
  gpt-oss -> fp4 on Blackwell, MXFP4 weight-only on Hopper).  The model label may carry a format
  suffix (``Qwen3-235B-A22B-FP8``), which is dropped to find the preset.  The KV cache is the
  policy's (FP8) unless the run's InferenceX recipe left its dtype at ``auto``
  (:data:`INFERENCEX_KV_CACHE`: BF16 for DeepSeek-R1 under SGLang on H200 and gpt-oss on Hopper).
* **Speculative decoding.** A curve (or row) may say ``spec_decoding: mtp`` (InferenceX's
  ``spec-decoding`` field; values :data:`SPEC_DECODING`), with ``spec_decoding_source``.  A curve row
  carries no draft length or acceptance rate, and an MTP run's tokens/s per user is its engine's
  times the accepted tokens per step (DeepSeek-R1 FP8 TP8 on B200: 1.6-1.9x the same deployment's
  plain-decoding curves at 4 clients), so such rows are kept unsupported
  with the reason rather than scored as plain decoding (fronts.yaml ``meta.not_included`` leaves
  MTP rows out; one curve that entered unlabelled is labelled in the project's copy, with its
  evidence in ``spec_decoding_source``).
"""

from __future__ import annotations

import math
import os
import re
from typing import Any

from explorer.closed_loop import BENCHMARK_PROMPTS_PER_CLIENT, finite_run_throughput_factor
from explorer.errors import ExplorerError, SpecError

#: Context batching waits the InferenceX TensorRT-LLM recipes set (explorer/batch_wait.py), as
#: (model preset, isl, osl, largest tp, timeout iterations, token ratio): the Llama-3.3-70B scripts
#: write ``batch_wait_max_tokens_ratio: 0.9`` and ``batch_wait_timeout_iters: 20`` into the LLM API
#: options when ISL = OSL = 1024 and TP < 8, with ``--max_num_tokens 16384``
#: (SemiAnalysisAI/InferenceX@a267b4bd52f1cd162813fedfdcffb73936128dab:benchmarks/70b_fp8_h200_trt_slurm.sh
#: and benchmarks/70b_fp8_b200_trt_slurm.sh).  Other recipes set none.
#: Not applied (tried 2026-12-02, docs/validation_notes.md): the DeepSeek-R1 FP8 B200 script's
#: DELAY_BATCHING at 1k/1k and 64-255 clients (40 iterations, 0.8;
#: SemiAnalysisAI/InferenceX@0a919c5f81cec20c030d748c813de41c8c415db1:benchmarks/dsr1_fp8_b200_trt.sh).
INFERENCEX_TRT_BATCH_WAIT: tuple[tuple[str, int, int, int, int, float], ...] = (
    ("llama-3.1-70b", 1024, 1024, 7, 20, 0.9),
)
_IX_RECIPES = "SemiAnalysisAI/InferenceX@1fc5d73cdd31c7fbdd657f3c7e5ec2180f4b0598:benchmarks/"
_IX_B300 = "SemiAnalysisAI/InferenceX@563248391c2959883e8131b265ae3d995d74d4fa:benchmarks/single_node/"
#: Request polling the InferenceX SGLang recipes set (explorer/engine/engine_step.py ``poll``: the
#: scheduler takes in new requests every N decode steps), as (model preset, hardware kind, weight
#: format or None for any, tp or None for any, N below 16 clients, N at 16 clients or more, source).
#: The B200 DeepSeek-R1 recipes pass ``--scheduler-recv-interval`` ("recv every ~10 requests; if CONC
#: >= 16, relax to ~30"); the MI300X / MI325X / MI355X ones ``--num-continuous-decode-steps=4`` (four decode
#: steps back to back, no request taken in between).  Other SGLang recipes set neither (the H200 one:
#: dsr1_fp8_h200.sh).  Read at one commit of the recipes; runs of other dates may have used others.
INFERENCEX_SGLANG_POLL: tuple[tuple[str, str, str | None, int | None, int, int, str], ...] = (
    ("deepseek-v3", "b200", "fp4", None, 10, 30, _IX_RECIPES + "dsr1_fp4_b200.sh"),
    ("deepseek-v3", "b200", "fp8", 8, 10, 30, _IX_RECIPES + "dsr1_fp8_b200.sh"),
    ("deepseek-v3", "b200", "fp8", 4, 10, 10, _IX_RECIPES + "dsr1_fp8_b200.sh"),
    ("deepseek-v3", "mi300x", None, None, 4, 4, _IX_RECIPES + "dsr1_fp8_mi300x.sh"),
    ("deepseek-v3", "mi325x", None, None, 4, 4, _IX_RECIPES + "dsr1_fp8_mi325x.sh"),
    ("deepseek-v3", "mi355x", None, None, 4, 4, _IX_RECIPES + "dsr1_fp8_mi355x.sh and dsr1_fp4_mi355x.sh"),
    # B300 runs the B200 recipes as they are ("reuses the B200 FP8 recipe as-is")
    ("deepseek-v3", "b300", "fp4", None, 10, 30, _IX_B300 + "dsr1_fp4_b300.sh"),
    ("deepseek-v3", "b300", "fp8", 8, 10, 30, _IX_B300 + "dsr1_fp8_b300.sh"),
    ("deepseek-v3", "b300", "fp8", 4, 10, 10, _IX_B300 + "dsr1_fp8_b300.sh"),
)


#: KV-cache formats of the InferenceX recipes that leave ``--kv-cache-dtype`` / ``kv_cache_config.dtype``
#: at ``auto`` -- the checkpoint's activation dtype, BF16 for these models -- as (model preset,
#: runtime, hardware kinds, KV format, source).  Every other recipe of the curves asks for FP8 (the
#: Llama-3.3-70B vLLM and TensorRT-LLM scripts, DeepSeek-R1 on MI300X / MI325X / B200, gpt-oss on
#: B200), which the precision policy already gives.  BF16 KV doubles the cache's bytes: its reads in
#: every decode step and the memory that caps the running batch.  Read at one commit of the
#: recipes; runs of other dates may have used others.
INFERENCEX_KV_CACHE: tuple[tuple[str, str, tuple[str, ...], str, str], ...] = (
    ("deepseek-v3", "sglang", ("h200",), "bf16", _IX_RECIPES + "dsr1_fp8_h200.sh (no --kv-cache-dtype)"),
    ("gpt-oss-120b", "vllm", ("h100", "h200"), "bf16",
     _IX_RECIPES + "gptoss_fp4_h100.sh and @16cd95561e3c4c8115e2558658f626370c573c9d:benchmarks/gptoss_fp4_h200.sh"
     " (no kv-cache-dtype)"),
    ("gpt-oss-120b", "trtllm", ("h200",), "bf16",
     "SemiAnalysisAI/InferenceX@111f0312c13b4c3cca0dd365f6db4c017048f0d3:benchmarks/gptoss_fp4_h200_trt.sh and "
     "@2e46dba0393537668d37d83b532fff2cdbbad231:benchmarks/gptoss_fp4_h200_trt_slurm.sh (kv_cache_config dtype: auto)"),
)


def recipe_kv_cache(model: str, runtime: str, hardware: str) -> str | None:
    """The KV-cache format an InferenceX recipe ran with where it is not the precision policy's
    (:data:`INFERENCEX_KV_CACHE`), else None."""
    for m, rt, kinds, kv, _ in INFERENCEX_KV_CACHE:
        if m == model and rt == runtime and hardware in kinds:
            return kv
    return None


#: The all-reduce + RMSNorm fusion (design column ``allreduce_fusion``, explorer/design.py) as the runs had
#: it, where it is not the runtime profile's.  vLLM turns it on by default from 0.17 (the ``-O2`` default
#: optimisation level: vllm-project/vllm#34299, merged 2026-02-11, "Enable AR+rms fusion by default";
#: vllm-project/recipes#325: the flag "is no longer needed as of vLLM v0.17"), which runtimes/vllm.yaml
#: describes; runs of an older vLLM had NCCL's all-reduce and separate norms unless their recipe asked
#: for the fusion.  Recipes that ask for it, as (model preset, runtime, hardware kinds, weight format or
#: None for any, source):
INFERENCEX_ALLREDUCE_FUSION: tuple[tuple[str, str, tuple[str, ...], str | None, str], ...] = (
    ("llama-3.1-70b", "vllm", ("b200",), None,
     "SemiAnalysisAI/InferenceX@bb4c7f9389a89b399fb0bd0090944713baea59e5:benchmarks/70b_fp8_b200_docker.sh "
     "(compilation-config pass_config enable_fi_allreduce_fusion: true)"),
    ("deepseek-v3", "sglang", ("b200", "b300"), None,
     _IX_RECIPES + "dsr1_fp4_b200.sh and dsr1_fp8_b200.sh; " + _IX_B300 + "dsr1_fp4_b300.sh and dsr1_fp8_b300.sh "
     "(--enable-flashinfer-allreduce-fusion)"),
)
#: the first vLLM release whose default turns the fusion on
VLLM_ALLREDUCE_FUSION_SINCE = (0, 17)


def _release(version: Any) -> tuple[int, ...] | None:
    """``"0.10.2"`` -> (0, 10, 2); None where the label has no leading dotted number."""
    m = re.match(r"\s*v?(\d+(?:\.\d+)*)", str(version or ""))
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


def recipe_allreduce_fusion(model: str, runtime: str, hardware: str, precision: str, version: Any,
                            recipes: bool = True) -> int:
    """``allreduce_fusion`` of a run: 1 where its InferenceX recipe (``recipes``: the run is one) turns
    the fusion on (:data:`INFERENCEX_ALLREDUCE_FUSION`), -1 for a vLLM older than
    :data:`VLLM_ALLREDUCE_FUSION_SINCE` (its default was off), else 0 (the runtime profile's; also
    where the version is not stated)."""
    for m, rt, kinds, fmt, _ in INFERENCEX_ALLREDUCE_FUSION if recipes else ():
        if m == model and rt == runtime and hardware in kinds and fmt in (None, precision):
            return 1
    rel = _release(version)
    if runtime == "vllm" and rel is not None and rel < VLLM_ALLREDUCE_FUSION_SINCE:
        return -1
    return 0


def recipe_max_num_tokens(model: str, hardware: str, isl: int, clients: int) -> int:
    """The ``--max_num_tokens`` of the InferenceX TensorRT-LLM recipe for a run, 0 where it is the runtime
    profile's (16,384: the Llama-3.3-70B scripts).  DeepSeek-R1 on B200 (SemiAnalysisAI/InferenceX@
    0a919c5f81cec20c030d748c813de41c8c415db1:benchmarks/dsr1_fp8_b200_trt.sh) and on H200
    (@1fc5d73cdd31c7fbdd657f3c7e5ec2180f4b0598:benchmarks/dsr1_fp8_h200_trt.sh): ``(CONC + ISL + 64)``
    rounded up to 64, at least 8,192; gpt-oss-120b (@1825e7f0676d9adf7a3dbffcf50708907b7b25db:
    benchmarks/gptoss_fp4_b200_trt.sh, @111f0312c13b4c3cca0dd365f6db4c017048f0d3:
    benchmarks/gptoss_fp4_h200_trt.sh): 20,000."""
    if model == "deepseek-v3" and hardware in ("b200", "h200"):
        return max(-(-(clients + isl + 64) // 64) * 64, 8192)
    if model == "gpt-oss-120b":
        return 20000
    return 0


def recipe_poll_interval(model: str, hardware: str, precision: str, tp: int, clients: int) -> int:
    """The request-polling interval of the InferenceX SGLang recipe for a run (1: every step)."""
    for m, hw, fmt, r_tp, low, high, _ in INFERENCEX_SGLANG_POLL:
        if m == model and hw == hardware and fmt in (None, precision) and r_tp in (None, tp):
            return high if clients >= 16 else low
    return 1


def recipe_waits_enabled() -> bool:
    """Whether curve cases carry the recipes' batching waits and request polling (on by default since
    2026-12-01, the polling since 2026-12-02; ``EXPLORER_RECIPE_WAITS=0`` turns both off).  On since the offline TensorRT-LLM points got their
    own runtime profile (runtimes/trtllm-bench.yaml), which took away the one figure that kept it off
    (below): refitted with both, held out (benchmarks/cross_validate.py), TTFT 24.9 % / 56.5 % ->
    14.7 % / 50.2 % (dense 23.8 -> 10.0 %), tokens/s/GPU 9.9 / 22.9 -> 9.9 / 23.0, tokens/s/user
    10.6 / 22.3 -> 9.8 / 23.7, the points' leave-one-out 9.9 / 42.3 -> 9.5 / 41.0 %.  History: measured 2026-12-01 with it on and every kind refitted (benchmarks/cross_validate.py):
    held-out TTFT 25.5 % / 57.7 % -> 16.7 % / 48.4 % (median / p90; dense 24.7 / 51.9 -> 11.4 /
    29.9), tokens/s/GPU 10.8 / 23.7 -> 11.2 / 24.1, tokens/s/user 11.5 / 24.1 -> 11.9 / 24.9, but the
    held-out points' p90 41.7 -> 44.6 % (issue 8 asks <= 42.5): B200's TensorRT-LLM fit moved to
    attention 0.56 / compute 1.0 (from 1.0 / 0.63), which put B200 DeepSeek-R1 points 15 points
    higher.  Off until B200 has enough serving data to pin those residuals.  Re-measured after the
    all-reduce-fusion refit (2026-12-01, same procedure): held-out TTFT 24.9 % / 56.5 % -> 15.1 % /
    46.7 % (dense 23.8 -> 11.0 %), tokens/s/GPU 9.9 / 22.9 -> 10.3 / 23.3, tokens/s/user 10.6 / 22.3
    -> 10.6 / 23.0, MLPerf Interactive in sample 16.3 -> 12.8 %, but the held-out points' p90 42.3 ->
    43.4 % and MLPerf Offline left out one by one 11.1 -> 12.0 %: still off."""
    return os.environ.get("EXPLORER_RECIPE_WAITS", "1") != "0"
#: InferenceX --random-range-ratio 0.8: lengths uniform in [0.8 L, L], mean 0.9 L (the default when
#: the file's ``meta`` does not state another ratio).
INFERENCEX_MEAN_LENGTH = 0.9
_RANGE_RATIO = re.compile(r"range[- _]ratio\s*([0-9]*\.?[0-9]+)", re.I)


def inferencex_mean_length(meta: Any) -> float:
    """Mean length / L of InferenceX's uniform [r L, L] draws, r read from the file's ``meta``
    (``inferencex_conventions``: "random-range-ratio 0.8") when it states one: (1 + r) / 2."""
    text = " ".join(str(v) for v in (meta.values() if isinstance(meta, dict) else [meta or ""]))
    m = _RANGE_RATIO.search(text)
    if m:
        r = float(m.group(1))
        if 0.0 < r <= 1.0:
            return (1.0 + r) / 2.0
    return INFERENCEX_MEAN_LENGTH
CURVE_KEYS = {"curve", "model", "gpu", "num_gpus", "framework", "framework_version", "image", "precision", "tp", "ep",
              "pp", "dp_attention", "isl", "osl", "date", "concurrencies", "throughput_field", "source", "notes",
              "trust", "spec_decoding", "spec_decoding_source"}
#: Values of a curve's ``spec_decoding`` (InferenceX's ``spec-decoding`` field): ``none`` is plain
#: decoding; the others draft tokens (the model's MTP module, an EAGLE head, a draft model).
SPEC_DECODING = ("none", "mtp", "eagle", "draft_model")
ROW_KEYS = CURVE_KEYS - {"concurrencies", "throughput_field"} | {
    "id", "concurrency", "tok_s_gpu", "tok_s_gpu_derived", "tok_s_user", "ttft_ms", "tpot_ms", "mean_ttft_ms",
    "mean_tpot_ms", "total_tok_s_gpu", "stat", "run_url"}
AXES = ("tok_s_gpu", "tok_s_user", "ttft")
def length_cv(meta: Any) -> float:
    """Coefficient of variation of InferenceX's uniform ``[r L, L]`` lengths (r as
    :func:`inferencex_mean_length` reads it): ``(1 - r) / (sqrt(3) (1 + r))``, 0.064 at r = 0.8."""
    m = 2.0 * inferencex_mean_length(meta) - 1.0  # r
    return (1.0 - m) / (math.sqrt(3.0) * (1.0 + m))


#: the simulator column a median TTFT is scored against (seconds; explorer/simulate.py)
MEDIAN_TTFT_COLUMN = "ttft_p50_s"


def ttft_statistic(raw: dict) -> tuple[float | None, str]:
    """The row's TTFT (ms) to score and its simulator column: ``(median, MEDIAN_TTFT_COLUMN)`` where
    the row gives a median, else ``(mean, "")`` (the mean's default column, ``ttft_s``), or
    ``(None, "")`` without a TTFT.  See the module docstring for which key holds which statistic."""
    from explorer.validate import positive_number as _positive

    stat = str(raw.get("stat") or "").strip().lower()  # free text in the files ("unknown (probably mean)")
    plain = _positive(raw, "ttft_ms", required=False)
    mean = _positive(raw, "mean_ttft_ms", required=False)
    plain_is_median = stat.startswith("median") or (not stat.startswith("mean") and mean is not None)
    if plain is not None and plain_is_median:
        return plain, MEDIAN_TTFT_COLUMN
    return (mean if mean is not None else plain), ""


def is_curves_file(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("rows"), list) and "curves" in data


def _inferencex(text: str) -> bool:
    t = text.lower()
    return "inferencex" in t or "inferencemax" in t or "range-ratio 0.8" in t or "range ratio 0.8" in t


def _fixed_lengths(text: str) -> bool:
    return "fixed isl" in text.lower() or "fixed lengths" in text.lower()


def curve_cases(data: dict, where: str) -> list:
    """Every case of a curves file.  A malformed row becomes unsupported cases with the reason
    (never dropped, never an exception); a file that is not a curves file raises SpecError."""
    from explorer.hardware import Hardware
    from explorer.model import get_preset
    from explorer.precision import with_kv_cache
    from explorer.validate import Case, extra_keys_note, gpu_hardware, precision_policy
    from explorer.validate import positive_number as _positive
    from explorer.validate import whole_number as _whole

    if not is_curves_file(data):
        raise SpecError(where, "rows", "expected top-level 'curves:' and 'rows:' lists (the shape of fronts.yaml)")
    curves = {}
    for i, c in enumerate(data.get("curves") or []):
        if isinstance(c, dict) and c.get("curve") is not None:
            curves[str(c["curve"])] = c
        else:
            curves[f"#curve{i}"] = {}
    out: list = []
    seen: set[str] = set()
    ix_mean = inferencex_mean_length(data.get("meta"))
    for i, raw in enumerate(data["rows"]):
        rid = str(raw.get("id")) if isinstance(raw, dict) and raw.get("id") is not None else f"#{i}"
        if rid in seen:
            rid = f"{rid}#{i}"
        seen.add(rid)
        curve_id = str(raw.get("curve", "")) if isinstance(raw, dict) else ""
        try:
            if not isinstance(raw, dict):
                raise ValueError(f"row is not a mapping: {raw!r}")
            ignored = extra_keys_note(raw, ROW_KEYS)
            cid = str(raw.get("curve") or rid)
            meta = curves.get(cid, {})
            text = " ".join(str(x) for x in (raw.get("notes", ""), meta.get("notes", ""), raw.get("source", ""),
                                             meta.get("source", ""), cid))
            preset = get_preset(str(raw.get("model", "")), rid, "model")
            hw: Hardware = gpu_hardware(raw.get("gpu"))
            from explorer.runtime import load_runtime

            rt = load_runtime(str(raw.get("framework", "")), rid, "framework")
            prec = precision_policy(raw.get("precision"), hw, preset.shape.name)
            conc = _whole(raw, "concurrency")
            n_gpus = _whole(raw, "num_gpus")
            tp = _whole(raw, "tp", 1)
            pp = _whole(raw, "pp", 1)
            ep = _whole(raw, "ep", 1) if preset.shape.experts else 1
            dpa = raw.get("dp_attention", False)
            if not isinstance(dpa, bool):
                raise ValueError(f"'dp_attention' must be true or false, got {dpa!r}")
            t, dp = (1, tp) if (dpa and preset.shape.experts) else (tp, 1)
            if t * dp * pp != n_gpus:
                raise ValueError(f"tp*pp = {t * dp * pp} does not match num_gpus = {n_gpus}")
            spec = str(raw.get("spec_decoding", meta.get("spec_decoding", "none")) or "none").strip().lower()
            if spec not in SPEC_DECODING:
                raise ValueError(f"'spec_decoding' must be one of {', '.join(SPEC_DECODING)}, got {spec!r}")
            if spec != "none":
                raise ValueError(f"speculative decoding ({spec}) run: a curve row gives no draft length or acceptance "
                                 "rate, so it is not scored as plain decoding")
            isl, osl = _positive(raw, "isl"), _positive(raw, "osl")
            assert isl is not None and osl is not None
            mean_factor = ix_mean if (_inferencex(text) and not _fixed_lengths(text)) else 1.0
            lengths_cv = length_cv(data.get("meta")) if mean_factor != 1.0 else 0.0  # drawn lengths' spread
            values = {"model": preset.shape.name, "precision": prec, "isl": max(1, round(isl * mean_factor)),
                      "osl": max(2, round(osl * mean_factor)), "tp": t, "pp": pp, "ep": ep, "dp": dp,
                      "batch": conc, "runtime": rt.name}
            if _inferencex(text):
                values["benchmark"] = "inferencex"  # num_prompts = 10*conc: the mean TTFT includes the opening burst
                if rt.name == "trtllm" and recipe_waits_enabled():
                    for model, r_isl, r_osl, tp_max, iters, ratio in INFERENCEX_TRT_BATCH_WAIT:
                        if preset.shape.name == model and (isl, osl) == (r_isl, r_osl) and tp <= tp_max:
                            values.update(batch_wait_iters=iters, batch_wait_ratio=ratio)
                    budget = recipe_max_num_tokens(preset.shape.name, hw.name, int(isl), int(conc))
                    if budget:
                        values["max_num_tokens"] = budget
                if rt.name == "sglang" and recipe_waits_enabled():
                    poll = recipe_poll_interval(preset.shape.name, hw.name, str(prec), tp, conc)
                    if poll > 1:
                        values["poll_interval"] = poll
                kv = recipe_kv_cache(preset.shape.name, rt.name, hw.name)
                if kv is not None:
                    values["precision"] = with_kv_cache(prec, kv)
            fusion = recipe_allreduce_fusion(preset.shape.name, rt.name, hw.name, str(prec),
                                             raw.get("framework_version") or meta.get("framework_version"),
                                             recipes=_inferencex(text))
            if fusion:
                values["allreduce_fusion"] = fusion
            # the run's software release (explorer/runtime.py Release): its version, else its date
            version = str(raw.get("framework_version") or meta.get("framework_version") or "").strip()
            run_date = str(raw.get("date") or meta.get("date") or "").strip()
            if version or run_date:
                values["release"] = version
                values["release_date"] = run_date
            family = "moe" if preset.shape.experts else "dense"
            common: dict[str, Any] = dict(kind="curve", regime="curve", hardware=hw.name, values=values,
                                          num_gpus=n_gpus, trust=str(raw.get("trust", "")), curve=cid,
                                          family=family, runtime=rt.name)
            got = _positive(raw, "tok_s_gpu", required=False)
            derived = got is None
            if got is None:
                got = float(_positive(raw, "tok_s_gpu_derived") or 0.0)
            elif _inferencex(text):  # a finite run's wall time: its drain is in the figure
                values["finite_run_cv"] = lengths_cv
            measured_gpu: float = got
            note = "derived throughput (Little's law on the measured means: scored at the steady state)" \
                if derived and _inferencex(text) else ("derived throughput (bias unknown)" if derived else "")
            if "finite_run_cv" in values:
                drain = float(finite_run_throughput_factor(conc, values["finite_run_cv"]))
                note = f"finite run of {BENCHMARK_PROMPTS_PER_CLIENT * conc} requests: scored as the steady state x {drain:.3f} (its drain)"
            measured_user = _positive(raw, "tok_s_user")
            ttft, ttft_column = ttft_statistic(raw)
            if ttft_column:  # the median: the closed-loop p50 over InferenceX's uniform lengths
                values.update(latency_percentiles=1.0, isl_cv=lengths_cv, osl_cv=lengths_cv)
            # every figure of the row is read before any case is made: a bad one fails them all
            first = len(out)
            out.append(Case(f"{rid}:tok_s_gpu", "tok_s_gpu", "tok/s/gpu", measured_gpu, note=note, **common))
            out.append(Case(f"{rid}:tok_s_user", "tok_s_user", "tok/s/user", measured_user or 0.0, **common))
            if ttft is not None:
                out.append(Case(f"{rid}:ttft", "ttft", "ms", ttft, column=ttft_column,
                                note="median TTFT (closed-loop p50)" if ttft_column else "", **common))
            for c in out[first:] if ignored else ():
                c.note = f"{c.note}; {ignored}" if c.note else ignored
        except (ValueError, TypeError, ExplorerError) as e:
            for axis, unit in (("tok_s_gpu", "tok/s/gpu"), ("tok_s_user", "tok/s/user")):
                out.append(Case(f"{rid}:{axis}", axis, unit, float("nan"), kind="curve", regime="curve",
                                supported=False, reason=str(e), curve=curve_id))
    return out
