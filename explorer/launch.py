"""Launch recipes: the serving command (and config file) that deploys a scored design point on its
runtime, with the parallelism, batch and token budgets, CUDA-graph sizes, KV-cache format and
speculation the simulator scored it with -- so a point read off a front can be stood up and
measured against its prediction.

Three runtimes, as the InferenceX benchmark recipes launch them (the flag names and where each
setting goes are taken from those scripts; SemiAnalysisAI/InferenceX, ``benchmarks/``):

* TensorRT-LLM, ``trtllm-serve`` (PyTorch backend): parallelism, batch, token budget and sequence
  length as flags, the rest in an ``--extra_llm_api_options`` YAML (``cuda_graph_config`` with
  padding, ``kv_cache_config.dtype``, ``enable_attention_dp``, the batching wait, ``speculative_config``
  MTP) -- 70b_fp8_b200_trt_slurm.sh, dsr1_fp8_b200_trt.sh, dsr1_fp8_b200_trt_mtp.sh, gptoss_fp4_b200_trt.sh;
* vLLM, ``vllm serve``: ``--tensor-parallel-size``, ``--max-num-seqs``, ``--max-num-batched-tokens``,
  ``--max-model-len``, ``--kv-cache-dtype fp8`` -- 70b_fp8_h200_slurm.sh; attention data parallelism with
  expert-parallel MoE as ``--data-parallel-size`` + ``--enable-expert-parallel``, MTP as
  ``--speculative-config '{"method": "mtp", ...}'`` (vLLM docs, "MTP (Multi-Token Prediction)");
* SGLang, ``python3 -m sglang.launch_server``: ``--tensor-parallel-size``, ``--ep-size``,
  ``--max-running-requests``, ``--cuda-graph-max-bs``, ``--chunked-prefill-size``,
  ``--kv-cache-dtype fp8_e4m3``, MTP as EAGLE with top-k 1 -- dsr1_fp8_h200.sh, dsr1_fp4_b200.sh,
  dsr1_fp8_b200_mtp.sh; attention data parallelism as ``--enable-dp-attention --data-parallel-size``.

The launch sizes a replica for the point's concurrency: its running-request cap and captured CUDA
graphs are the concurrency (as the recipes set them), its token budget the runtime profile's
(runtimes/*.yaml ``max_tokens_per_step``, the figure the simulator used), its sequence length ISL +
OSL.  What it does not do: quantize a checkpoint (the command names one; a format the checkpoint
does not hold needs a quantized checkpoint -- ModelOpt's for TensorRT-LLM -- or, for FP8 on vLLM and
SGLang, their on-the-fly ``--quantization fp8``, which the recipe adds for a BF16 preset), launch
across nodes (tensor or pipeline groups larger than a node: a note says so), disaggregated
serving, and draft models other than the model's own MTP module (refused, with the flag named).
Host, port and memory fractions are left at the runtimes' defaults.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from explorer.errors import SpecError
from explorer.model import get_preset
from explorer.precision import parse_precision
from explorer.runtime import load_runtime

#: runtimes with a launch recipe
LAUNCH_RUNTIMES = ("trtllm", "vllm", "sglang")
#: GPUs of one node the recipes assume (HGX / DGX / MI300X platforms); larger groups span nodes
GPUS_PER_NODE = 8
#: the TensorRT-LLM options file the command points at
TRTLLM_OPTIONS_FILE = "extra-llm-api-config.yml"
#: placeholder for a checkpoint the tool cannot name (a custom shape)
CHECKPOINT_PLACEHOLDER = "<checkpoint>"

_HF = re.compile(r"huggingface\.co/([\w.-]+/[\w.-]+)")


@dataclass(frozen=True)
class Launch:
    """One replica's launch: the command (argv), the files it reads and what to check first."""

    runtime: str
    argv: tuple[str, ...]
    files: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def command(self) -> str:
        """The command as one shell line (arguments quoted)."""
        return " ".join(shlex.quote(a) for a in self.argv)

    def script(self) -> str:
        """``launch.sh``: the notes as comments, then the command."""
        lines = ["#!/usr/bin/env bash", "# Written by `explorer evaluate --emit-launch` (explorer/launch.py)."]
        lines += [f"# NOTE: {n}" for n in self.notes]
        # the program and its positional arguments on the first line, then one flag (and its value) a line
        parts: list[str] = []
        for a in self.argv:
            if parts and not a.startswith("--"):
                parts[-1] += " " + shlex.quote(a)
            else:
                parts.append(shlex.quote(a))
        lines += ["set -euo pipefail", 'cd "$(dirname "$0")"', " \\\n    ".join(parts), ""]
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {"runtime": self.runtime, "command": self.command(), "argv": list(self.argv),
                "files": dict(self.files), "notes": list(self.notes)}


def checkpoint_format(model: str) -> str:
    """The weight format a preset's published checkpoint holds (``bf16`` for an unknown model)."""
    try:
        return get_preset(model).checkpoint_format
    except SpecError:
        return "bf16"


def preset_checkpoint(model: str) -> str | None:
    """The Hugging Face repository a preset's architecture was read from (its ``source``), or None."""
    try:
        preset = get_preset(model)
    except SpecError:
        return None
    if preset.checkpoint:
        return preset.checkpoint
    m = _HF.search(preset.source)
    return m.group(1) if m else None


def _yaml(d: Mapping[str, Any], indent: int = 0) -> str:
    """A small YAML writer for the options file (nested mappings of scalars; stable order)."""
    out = []
    for k, v in d.items():
        if isinstance(v, Mapping):
            out.append(" " * indent + f"{k}:")
            out.append(_yaml(v, indent + 2))
        else:
            text = "true" if v is True else "false" if v is False else str(v)
            out.append(" " * indent + f"{k}: {text}")
    return "\n".join(out)


def launch_recipe(result: Mapping[str, Any], checkpoint: str | None = None, *, batch_wait_iters: int = 0,
                  batch_wait_ratio: float = 0.0) -> Launch:
    """The launch of the point ``result`` (what :func:`explorer.api.evaluate` returns) on its runtime.
    ``checkpoint``: the weights to serve (default: the preset's Hugging Face repository; a custom
    shape gets a placeholder and a note).  Raises :class:`SpecError` for a runtime without a recipe,
    a disaggregated point or a separate draft model."""
    rt_name = str(result["runtime"])
    if rt_name not in LAUNCH_RUNTIMES:
        raise SpecError("--emit-launch", None, f"no launch recipe for runtime '{rt_name}'; allowed: "
                        + ", ".join(LAUNCH_RUNTIMES))
    pre = result.get("prefill_replicas")
    if pre is not None and not math.isnan(float(pre)):
        raise SpecError("--emit-launch", None, "a disaggregated point has no single-server launch; allowed: "
                        "--serving aggregated")
    if not result.get("feasible", True):
        raise SpecError("--emit-launch", None, f"the point is not feasible ({result.get('reason')}); nothing to launch")
    spec = result.get("speculation")
    if spec and str(spec.get("draft", "mtp")) not in ("mtp", "none"):
        raise SpecError("--emit-launch", None, f"draft model '{spec['draft']}': only the model's own MTP module "
                        "has a launch recipe; allowed: --draft-tokens K without --draft-model")
    rt = load_runtime(rt_name)
    d = result["deployment"]
    t, pp, ep, dp = (int(d[k]) for k in ("tp", "pp", "ep", "dp"))
    isl, osl = int(d["isl"]), int(d["osl"])
    batch = int(result["batch"])
    k_draft = int(spec["draft_tokens"]) if spec else 0
    prec = parse_precision(result["precision"])
    kv_fp8 = prec.kv_cache == "fp8"
    notes: list[str] = []
    ckpt = checkpoint or preset_checkpoint(str(result["model"]))
    if not ckpt:
        ckpt = CHECKPOINT_PLACEHOLDER
        notes.append(f"no checkpoint known for model '{result['model']}': replace {CHECKPOINT_PLACEHOLDER} with one "
                     "of this architecture (or give --checkpoint)")
    # a given checkpoint is taken to hold the point's weight format; a preset's published one holds its own
    native = checkpoint_format(str(result["model"]))
    same = prec.weights == native or (prec.weights.startswith("mxfp4") and native == "mxfp4")
    on_the_fly = False  # vLLM / SGLang quantize BF16 weights to FP8 as they load them (--quantization fp8)
    if checkpoint is None and ckpt != CHECKPOINT_PLACEHOLDER and not same:
        on_the_fly = prec.weights == "fp8" and native in ("bf16", "fp16") and rt_name != "trtllm"
        notes.append(f"weights in {prec.weights}: {ckpt} holds {native} weights -- "
                     + ("the command quantizes them to FP8 as it loads them (--quantization fp8), or serve an FP8 "
                        "checkpoint" if on_the_fly else
                        f"serve a {prec.weights} checkpoint of it (give --checkpoint; TensorRT-LLM reads pre-quantized "
                        "ones, e.g. NVIDIA ModelOpt's)"))
    gpus = t * dp * pp
    if t * dp > GPUS_PER_NODE or gpus > GPUS_PER_NODE:
        notes.append(f"{gpus} GPUs per replica span nodes: launch it with the runtime's multi-node setup "
                     "(mpirun / Ray / --nnodes) across them")
    poll = int(d.get("poll_interval", 1))
    if poll > 1 and rt_name != "sglang":
        notes.append(f"polling for new requests every {poll} steps is SGLang's (--scheduler-recv-interval); "
                     f"{rt_name} takes them in every step")
    fusion = str(d.get("allreduce_fusion", ""))  # "on" / "off" where the point sets it (api.evaluate)
    if fusion == "off" and rt_name == "trtllm":
        notes.append("TensorRT-LLM fuses its tensor-parallel all-reduces with the RMSNorm after them whatever the "
                     "launch says; the point was scored without that fusion")
    if batch_wait_iters and rt_name != "trtllm":
        notes.append("the batching wait is TensorRT-LLM's (batch_wait_timeout_iters); this runtime has none")
    pt = _Point(ckpt=ckpt, t=t, pp=pp, ep=ep, dp=dp, batch=batch,
                budget=int(d.get("max_num_tokens") or rt.max_tokens_per_step), max_len=isl + osl,
                graph=min(batch, int(rt.graph_max_batch)) if rt.graph_padding else 0, kv_fp8=kv_fp8,
                k_draft=k_draft, on_the_fly=on_the_fly, poll=poll, wait_iters=int(batch_wait_iters),
                wait_ratio=float(batch_wait_ratio), fusion=fusion, adp_balance_iters=int(rt.adp_balance_iters))
    return {"trtllm": _trtllm, "vllm": _vllm, "sglang": _sglang}[rt_name](pt, notes)


@dataclass(frozen=True)
class _Point:
    """What a launch is sized by (the scored point's figures, the runtime's budgets)."""

    ckpt: str
    t: int  # attention tensor parallel
    pp: int
    ep: int
    dp: int  # attention data-parallel groups per stage
    batch: int  # clients = running requests of the replica
    budget: int  # tokens per step
    max_len: int  # ISL + OSL
    graph: int  # largest captured CUDA graph batch (0: no padded graphs)
    kv_fp8: bool
    k_draft: int  # MTP draft tokens (0: none)
    on_the_fly: bool  # quantize BF16 weights to FP8 at load (vLLM / SGLang --quantization fp8)
    poll: int  # decode steps between polls for new requests (SGLang)
    wait_iters: int  # TensorRT-LLM batching wait
    wait_ratio: float
    fusion: str = ""  # all-reduce + RMSNorm fusion asked for: "on", "off", or "" (the runtime's default)
    adp_balance_iters: int = 0  # attention-DP balance timeout the point was scored with (0: none)

    @property
    def per_rank(self) -> int:
        """Running requests of one attention data-parallel rank (the engines that split the clients)."""
        return max(1, -(-self.batch // self.dp))


def _trtllm(p: _Point, notes: list[str]) -> Launch:
    # attention DP ("DEP"): tp_size counts every GPU of the stage, each rank runs its own attention
    # and batch (dsr1_fp8_b200_trt_mtp.sh: MAX_BATCH_SIZE = CONC / TP with enable_attention_dp)
    if p.dp > 1 and p.t > 1:
        notes.append(f"attention groups of {p.t} GPUs with attention data parallelism: TensorRT-LLM's attention DP "
                     f"runs one GPU per group; this launch uses tp_size {p.t * p.dp} with one-GPU attention groups")
    opts: dict[str, Any] = {}
    if p.graph:  # CUDA graphs padded up to a captured size, captured to the rank's batch
        opts["cuda_graph_config"] = {"enable_padding": True, "max_batch_size": min(p.per_rank, p.graph)}
    opts["kv_cache_config"] = {"dtype": "fp8" if p.kv_fp8 else "auto", "enable_block_reuse": False}
    opts["enable_attention_dp"] = p.dp > 1
    if p.dp > 1 and p.adp_balance_iters:  # as scored: prompts held until every rank has one (explorer/adp_balance.py)
        opts["attention_dp_config"] = {"enable_balance": True, "batching_wait_iters": 0,
                                       "timeout_iters": p.adp_balance_iters}
    if p.wait_iters:
        opts["batch_wait_timeout_iters"] = p.wait_iters
        opts["batch_wait_max_tokens_ratio"] = p.wait_ratio
    if p.k_draft:
        opts["speculative_config"] = {"decoding_type": "MTP", "num_nextn_predict_layers": p.k_draft}
    argv = ["trtllm-serve", p.ckpt, "--backend", "pytorch", "--tp_size", str(p.t * p.dp), "--pp_size", str(p.pp),
            "--ep_size", str(p.ep), "--max_batch_size", str(p.per_rank), "--max_num_tokens", str(p.budget),
            "--max_seq_len", str(p.max_len), "--extra_llm_api_options", TRTLLM_OPTIONS_FILE]
    return Launch("trtllm", tuple(argv), {TRTLLM_OPTIONS_FILE: _yaml(opts) + "\n"}, tuple(notes))


def _vllm(p: _Point, notes: list[str]) -> Launch:
    argv = ["vllm", "serve", p.ckpt, "--tensor-parallel-size", str(p.t), "--pipeline-parallel-size", str(p.pp),
            "--max-num-seqs", str(p.per_rank), "--max-num-batched-tokens", str(p.budget),
            "--max-model-len", str(p.max_len), "--no-enable-prefix-caching"]
    if p.dp > 1:
        argv += ["--data-parallel-size", str(p.dp)]
    if p.ep > 1:
        argv += ["--enable-expert-parallel"]
        if p.ep != p.t * p.dp:
            notes.append(f"vLLM's expert parallelism spans all {p.t * p.dp} GPUs of the stage; this point has ep={p.ep}")
    if p.kv_fp8:
        argv += ["--kv-cache-dtype", "fp8"]
    if p.on_the_fly:
        argv += ["--quantization", "fp8"]
    if p.k_draft:
        argv += ["--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": p.k_draft})]
    if p.fusion:  # on by default from v0.17 at -O2 (runtimes/vllm.yaml)
        argv += ["--compilation-config", json.dumps({"pass_config": {"fuse_allreduce_rms": p.fusion == "on"}})]
    return Launch("vllm", tuple(argv), {}, tuple(notes))


def _sglang(p: _Point, notes: list[str]) -> Launch:
    # SGLang's tensor-parallel size counts every GPU of the stage; --data-parallel-size splits the attention
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", p.ckpt, "--tensor-parallel-size", str(p.t * p.dp),
            "--pipeline-parallel-size", str(p.pp), "--ep-size", str(p.ep), "--max-running-requests", str(p.batch),
            "--chunked-prefill-size", str(p.budget), "--context-length", str(p.max_len), "--disable-radix-cache"]
    if p.graph:
        argv += ["--cuda-graph-max-bs", str(p.graph)]
    if p.dp > 1:
        argv += ["--enable-dp-attention", "--data-parallel-size", str(p.dp)]
    if p.kv_fp8:
        argv += ["--kv-cache-dtype", "fp8_e4m3"]
    if p.on_the_fly:
        argv += ["--quantization", "fp8"]
    if p.k_draft:  # the model's MTP module as EAGLE drafting, one candidate per step (dsr1_fp8_b200_mtp.sh)
        argv += ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", str(p.k_draft),
                 "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(p.k_draft + 1)]
    if p.poll > 1:  # the scheduler takes in new requests every poll decode steps
        argv += ["--scheduler-recv-interval", str(p.poll)]
    if p.fusion == "on":  # off by default (runtimes/sglang.yaml)
        argv += ["--enable-flashinfer-allreduce-fusion"]
    return Launch("sglang", tuple(argv), {}, tuple(notes))


def write_launch(launch: Launch, directory: str | Path) -> list[Path]:
    """Write ``launch.sh`` (executable) and the launch's files into ``directory`` (created), each
    through a temporary file and a rename, so no half-written file is left; returns the paths."""
    out = Path(directory)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SpecError("--emit-launch", None, f"cannot create directory {out}: {e.strerror}") from None
    written = []
    for name, text, mode in [("launch.sh", launch.script(), 0o755)] + [(n, s, 0o644) for n, s in launch.files.items()]:
        path = out / name
        fd, tmp = tempfile.mkstemp(dir=out, prefix=f".{name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        written.append(path)
    return written
