"""Reading a search space: ``search_spaces/<name>.yaml`` -> a validated
:class:`explorer.space.SearchSpace`.

Each parameter is one of (the kinds: :mod:`explorer.space_spec`):

* a fixed value: ``layers: 80``;
* a choice list: ``tp: [1, 2, 4, 8]`` or ``tp: {choices: [1, 2, 4, 8]}``;
* an int range: ``hidden: {low: 6144, high: 10240, step: 512}``, ``batch: {low: 1, high: 1024, log: true}``;
* a float range (only ``moe_imbalance`` and ``acceptance``): ``{low: 1.0, high: 1.5, step: 0.1}``.

Loading is strict (unknown keys with a did-you-mean, wrong types, empty ranges, contradictions,
unknown hardware/model/precision) and every error is one :class:`SpecError` naming file and key.
Rules that depend on the sampled combination (``kv_heads`` must divide ``heads``, ``hidden`` must be
a multiple of ``head_dim`` when heads are derived, ...) never raise: such points are scored as
infeasible with a reason, like the simulator's own rules (:mod:`explorer.space`).

**Quality anchor.**  A space that searches the model shape must state a capacity band on total
and/or active parameters, or a predicted-loss bound (``constraints.quality``, with ``training``:
the logic lives in :mod:`explorer.constraints` and :mod:`explorer.quality`): a throughput search
otherwise simply picks the smallest model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from explorer.constraints import DecisionSpec, QualitySpec, parse_decision, parse_quality, tokens_value
from explorer.errors import SpecError
from explorer.hardware import HARDWARE_DIR, Hardware, load_hardware
from explorer.model import SHAPE_COLUMNS, ModelShape, get_preset, param_counts
from explorer.precision import parse_precision
from explorer.runtime import DEFAULT_RUNTIME, load_runtime
from explorer.space_spec import (
    _MOE_PARAMS,
    DEFAULT_OBJECTIVES,
    DEPLOY_KEYS,
    DIRECTIONS,
    FLAG_PARAMS,
    OBJECTIVE_COLUMNS,
    SAMPLERS,
    SERVING_MODES,
    SIZE_LIMITS,
    TRIAL_UNITS,
    WORKLOAD_KEYS,
    Choice,
    Fixed,
    FloatRange,
    IntRange,
    Param,
    SearchSettings,
)
from explorer.specio import MAX_SEED, Section, check_name_text, check_number, parse_yaml_text, read_text_file
from explorer.speculative import is_mtp_name

if TYPE_CHECKING:
    from explorer.space import SearchSpace

_MIN1 = {"hidden", "ffn", "layers", "heads", "kv_heads", "head_dim", "vocab", "isl", "osl", "batch", "tp", "pp",
         "ep", "dp"}
_SHAPE_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(ModelShape) if f.name in SHAPE_COLUMNS}
_DEPLOY_DEFAULTS = {"tp": 1, "pp": 1, "ep": 1, "dp": 1, "moe_imbalance": 1.0}
#: Float parameters and their lower bounds (everything else numeric is a whole number).
_FLOAT_LOW = {"moe_imbalance": 1.0, "acceptance": 0.0}


# --------------------------------------------------------------------------------------------
# loading
# --------------------------------------------------------------------------------------------


def load_space(path: str | Path) -> SearchSpace:
    """Read and validate a search-space YAML file."""
    p = Path(path)
    text = read_text_file(p, "YAML")
    return parse_space(parse_yaml_text(text, str(p)), str(p), text)


def space_from_text(text: str, where: str) -> SearchSpace:
    """Parse a space from its YAML text (worker processes re-create the space this way)."""
    return parse_space(parse_yaml_text(text, where), where, text)


def parse_space(data: Any, where: str, text: str = "") -> SearchSpace:
    """Validate a parsed YAML document (see the module docstring and docs/sweeps.md)."""
    if data is None:
        raise SpecError(where, None, "empty file: expected a search space (hardware, shape or model, workload, ...)")
    top = Section(data, where)
    top.check_keys({"description", "hardware", "model", "shape", "workload", "deployment", "constraints",
                    "objectives", "search", "cost", "training", "decision"})
    description = top.string("description", "")
    params: dict[str, Param] = {}

    # hardware: shipped kinds by name, other kinds by file path (relative to the space file's folder)
    hw_files: dict[str, str] = {}
    hw_source: dict[str, str] = {}

    def check_hardware(v: Any, where_: str, key: str) -> str:
        hw = _check_hardware(v, where_, key)
        name = hw.name + (f"@{hw.fabric}" if hw.fabric else "")  # KIND@FABRIC: a cloud fabric between nodes
        src = str(Path(hw.path).resolve()) if hw.path else hw.name
        if hw_source.setdefault(name, src) != src:
            raise SpecError(where_, key, f"'{v}' and another entry both define hardware '{hw.name}'; give "
                                         "each kind once (rename the file's 'name:')")
        if hw.path and Path(hw.path).resolve().parent != HARDWARE_DIR.resolve():
            hw_files[name] = src if not hw.fabric else f"{src}@{hw.fabric}"
        return name

    params["hardware"] = _text_param(top, "hardware", check_hardware)

    # model preset or shape
    has_model, has_shape = top.has("model"), top.has("shape")
    if has_model and has_shape:
        raise SpecError(where, "shape", "give either 'model' (a preset: deployment-only search) or 'shape', not both")
    if not has_model and not has_shape:
        raise SpecError(where, None, "give 'model' (a preset name) or 'shape' (the model shape to search)")
    derived: list[str] = []
    shape_search = False
    if has_model:
        params["model"] = _text_param(top, "model", _check_model)
    else:
        sh = top.section("shape")
        sh.check_keys(set(SHAPE_COLUMNS))
        given = {k: _num_param(sh, k) for k in SHAPE_COLUMNS if sh.has(k)}
        shape_search = any(not isinstance(p, Fixed) for p in given.values())
        for req, why in (("hidden", ""), ("layers", ""), ("kv_heads", " (e.g. 8 for grouped-query attention)")):
            if req not in given:
                raise SpecError(where, f"shape.{req}", f"required key is missing{why}")
        moe_possible = "experts" in given and _max_value(given["experts"]) > 0
        moe_always = "experts" in given and _min_value(given["experts"]) > 0
        if "ffn" not in given:
            if not moe_always:
                raise SpecError(where, "shape.ffn", "required key is missing (MLP width; MoE shapes may omit it "
                                                    "when experts > 0 everywhere: ffn then equals expert_ffn)")
            derived.append("ffn")
        if moe_possible:
            for req in ("experts_per_token", "expert_ffn"):
                if req not in given:
                    raise SpecError(where, f"shape.{req}", "required key is missing for an MoE shape (experts > 0)")
        else:
            extra = [k for k in _MOE_PARAMS if k in given and _max_value(given[k]) > 0]
            if extra:
                raise SpecError(where, f"shape.{extra[0]}", "MoE parameter given but the shape has no experts "
                                                            "(set shape.experts > 0)")
        if "heads" not in given:
            derived.append("heads")
        for k in SHAPE_COLUMNS:
            if k in given:
                params[k] = given[k]
            elif k == "heads" or (k == "ffn" and "ffn" in derived):
                continue  # derived per point
            else:
                params[k] = Fixed(int(_SHAPE_DEFAULTS[k]))
        _check_fixed_shape(params, where)

    # workload
    wl = top.section("workload")
    wl.check_keys(set(WORKLOAD_KEYS))
    for k in WORKLOAD_KEYS:
        if not wl.has(k):
            raise SpecError(where, f"workload.{k}", "required key is missing (tokens per request)")
        params[k] = _num_param(wl, k)

    # deployment
    dep = top.section("deployment")
    dep.check_keys(set(DEPLOY_KEYS))
    if not dep.has("batch"):
        raise SpecError(where, "deployment.batch", "required key is missing (concurrent sequences per replica)")
    params["batch"] = _num_param(dep, "batch")
    params["precision"] = _text_param(dep, "precision", _check_precision) if dep.has("precision") else Fixed("bf16")
    # serving runtime profile(s) (runtimes/*.yaml); a list competes on one front
    params["runtime"] = (_text_param(dep, "runtime", _check_runtime) if dep.has("runtime")
                         else Fixed(DEFAULT_RUNTIME))
    for k in ("tp", "pp", "ep", "dp", "moe_imbalance"):
        params[k] = _num_param(dep, k) if dep.has(k) else Fixed(_DEPLOY_DEFAULTS[k])
    _check_ep(params, where, has_model)
    # speculative decoding (explorer/speculative.py): parameters only when the space names them
    for k in ("draft_tokens", "acceptance"):
        if dep.has(k):
            params[k] = _num_param(dep, k)
    if dep.has("draft_model"):
        params["draft_model"] = _text_param(dep, "draft_model", _check_draft_model)
    _check_speculation(params, where, has_model)
    # disaggregated prefill/decode (explorer/disagg.py): parameters only when the space names them
    if dep.has("serving"):
        params["serving"] = _text_param(dep, "serving", _check_serving)
    for k in ("prefill_tp", "prefill_pp"):
        if dep.has(k):
            if not dep.has("serving"):
                raise SpecError(where, f"deployment.{k}", "needs deployment.serving (aggregated, disaggregated)")
            params[k] = _num_param(dep, k)

    # constraints
    cons = top.section("constraints", required=False)
    cons.check_keys({"capacity", "min_tokens_per_s_per_user", "max_ttft_s", "max_ttft_p99_s", "max_tpot_p99_s",
                     "min_tokens_per_s_per_kw",
                     "max_usd_per_million_tokens", "quality"})
    capacity: dict[str, tuple[float, float]] = {}
    if cons.has("capacity"):
        cap = cons.section("capacity")
        cap.check_keys({"total_B", "active_B"})
        for kind in ("total", "active"):
            if cap.has(f"{kind}_B"):
                capacity[kind] = _band(cap, f"{kind}_B")
        if not capacity:
            raise SpecError(where, "constraints.capacity", "give total_B: [low, high] and/or active_B: [low, high]")
    quality = parse_quality(cons.section("quality")) if cons.has("quality") else None
    if shape_search and not capacity and (quality is None or quality.limit is None):
        raise SpecError(
            where, "constraints.capacity",
            "required when the shape is searched: state a capacity band (e.g. capacity: {total_B: [65, 75]}) or a "
            "predicted-loss bound (quality: {reference: llama-3.1-70b, max_loss_increase_pct: 0.5}); "
            "without a quality anchor a throughput search simply picks the smallest model",
        )
    if has_model and capacity:
        _check_presets_in_band(params["model"], capacity, where)
    min_tpu = cons.number("min_tokens_per_s_per_user", None, min_value=0, min_exclusive=True)
    max_ttft = cons.number("max_ttft_s", None, min_value=0, min_exclusive=True)
    p99 = {k: cons.number(k, None, min_value=0, min_exclusive=True) for k in ("max_ttft_p99_s", "max_tpot_p99_s")}
    min_kw = cons.number("min_tokens_per_s_per_kw", None, min_value=0, min_exclusive=True)
    max_usd = cons.number("max_usd_per_million_tokens", None, min_value=0, min_exclusive=True)

    # objectives
    objectives = dict(DEFAULT_OBJECTIVES)
    if top.has("objectives"):
        obj = top.section("objectives")
        obj.check_keys(set(OBJECTIVE_COLUMNS))
        objectives = {str(k): obj.string(k, choices=set(DIRECTIONS)) for k in obj.data}
        if not objectives:
            raise SpecError(where, "objectives", "give at least one objective (e.g. tokens_per_s_per_gpu: maximize)")

    cost = _cost_settings(top, params["hardware"], hw_files, objectives, min_kw, max_usd)
    quality_on, decision = _quality_settings(top, params, quality, objectives, shape_search, has_model)

    # search settings
    se = top.section("search", required=False)
    se.check_keys({"sampler", "trials", "seed", "population_size", "batch_trials", "hypervolume_reference",
                   "refine_batch", "trial_unit", "scan_batches",
                   "max_grid_points", "grid_sample"})
    defaults = SearchSettings()
    ref = None
    if se.has("hypervolume_reference"):
        raw = se.raw("hypervolume_reference")
        if not isinstance(raw, list) or len(raw) != len(objectives):
            raise SpecError(where, "search.hypervolume_reference",
                            f"expected a list of {len(objectives)} numbers (one per objective), got {raw!r}")
        ref = tuple(float(check_number(v, where, f"search.hypervolume_reference[{i}]")) for i, v in enumerate(raw))
    settings = SearchSettings(
        sampler=se.string("sampler", defaults.sampler, choices=set(SAMPLERS)),
        trials=se.number("trials", defaults.trials, integer=True, min_value=1),
        seed=se.number("seed", defaults.seed, integer=True, min_value=0, max_value=MAX_SEED),
        population_size=se.number("population_size", defaults.population_size, integer=True, min_value=2),
        batch_trials=se.number("batch_trials", None, integer=True, min_value=1),
        hypervolume_reference=ref,
        max_grid_points=se.number("max_grid_points", defaults.max_grid_points, integer=True, min_value=1),
        grid_sample=se.number("grid_sample", defaults.grid_sample, integer=True, min_value=0),
        refine_batch=_flag(se, "refine_batch", defaults.refine_batch),
        trial_unit=se.string("trial_unit", defaults.trial_unit, choices=set(TRIAL_UNITS)),
        scan_batches=se.number("scan_batches", defaults.scan_batches, integer=True, min_value=2),
    )
    from explorer.space import SearchSpace  # explorer.space re-exports this module's loaders

    return SearchSpace(
        where=where, text=text, params=params, derived=tuple(derived), shape_search=shape_search,
        capacity=capacity, min_tokens_per_s_per_user=min_tpu, max_ttft_s=max_ttft, objectives=objectives,
        search=settings, description=description, hardware_files=hw_files,
        min_tokens_per_s_per_kw=min_kw, max_usd_per_million_tokens=max_usd, **cost, **p99,
        quality_on=quality_on, quality=quality, decision=decision,
    )


def _quality_settings(top: Section, params: dict[str, Param], quality: QualitySpec | None,
                      objectives: dict[str, str], shape_search: bool, has_model: bool
                      ) -> tuple[bool, DecisionSpec | None]:
    """``training: {tokens}`` (a parameter: fixed, choices or a range), ``decision`` and whether
    quality is on; every point of a quality space must have known training tokens."""
    where = top.where
    if top.has("training"):
        tr = top.section("training")
        tr.check_keys({"tokens"})
        params["training_tokens"] = _tokens_param(tr, "tokens")
    decision = (parse_decision(top.section("decision"), quality.reference if quality is not None else None)
                if top.has("decision") else None)
    on = (top.has("training") or quality is not None or "predicted_loss" in objectives or decision is not None)
    if not on or "training_tokens" in params:
        return on, decision
    why = ("constraints.quality" if quality is not None else "objectives.predicted_loss"
           if "predicted_loss" in objectives else "decision")
    if not has_model:
        raise SpecError(where, "training.tokens", f"required by {why}: the predicted loss needs the training "
                                                  "budget of the shapes (e.g. training: {tokens: 1.5e+13})")
    missing = [n for n in _values(params["model"]) if get_preset(n).training_tokens is None]
    if missing:
        raise SpecError(where, "training.tokens", f"required by {why}: {', '.join(missing)} has no published "
                                                  "training tokens (give training: {tokens: ...})")
    return on, decision


def _listed(raw: Any, where: str, key: str, one) -> Param | None:
    """A choice list (``[a, b]`` or ``{choices: [a, b]}``) of values each checked by
    ``one(value, key)``; None when ``raw`` is neither form."""
    if isinstance(raw, list):
        return _choices([one(v, f"{key}[{i}]") for i, v in enumerate(raw)], where, key)
    if isinstance(raw, Mapping) and "choices" in raw:
        Section(raw, where, key).check_keys({"choices"})
        ch = raw["choices"]
        if not isinstance(ch, list):
            raise SpecError(where, f"{key}.choices", f"expected a list, got {ch!r}")
        return _choices([one(v, f"{key}.choices[{i}]") for i, v in enumerate(ch)], where, f"{key}.choices")
    return None


def _tokens_param(sec: Section, name: str) -> Param:
    """Training tokens: a number, a choice list or a float range (``{low, high, log: true}``)."""
    where, key = sec.where, sec.key(name)
    raw = sec.raw(name)
    listed = _listed(raw, where, key, lambda v, k: tokens_value(v, where, k))
    if listed is not None:
        return listed
    if isinstance(raw, Mapping):
        rs = Section(raw, where, key)
        rs.check_keys({"low", "high", "step", "log"})
        low = tokens_value(rs.raw("low"), where, f"{key}.low")
        high = tokens_value(rs.raw("high"), where, f"{key}.high")
        log = _flag(rs, "log", False)
        if low > high:
            raise SpecError(where, key, f"empty range: low {low:g} > high {high:g}")
        step = tokens_value(rs.raw("step"), where, f"{key}.step") if rs.has("step") else None
        if log and step is not None:
            raise SpecError(where, f"{key}.step", "a log range takes no step (Optuna samples log ranges continuously)")
        if step is not None and not math.isclose(((high - low) / step) % 1.0, 0.0, abs_tol=1e-9) \
                and not math.isclose(((high - low) / step) % 1.0, 1.0, abs_tol=1e-9):
            raise SpecError(where, key, f"high {high:g} is not low {low:g} plus a whole number of steps {step:g}")
        return FloatRange(low, high, step, log)
    return Fixed(tokens_value(raw, where, key))


def _cost_settings(top: Section, hw_param: Param, hw_files: dict[str, str], objectives: dict[str, str],
                   min_kw: float | None, max_usd: float | None) -> dict[str, float | None]:
    """The ``cost:`` section (``usd_per_gpu_hour``, ``power_overhead_factor``), and the rule that a
    space asking for a cost figure (objective or constraint) has it for every hardware kind."""
    sec = top.section("cost", required=False)
    sec.check_keys({"usd_per_gpu_hour", "power_overhead_factor"})
    usd = sec.number("usd_per_gpu_hour", None, min_value=0, min_exclusive=True, max_value=10_000)
    factor = sec.number("power_overhead_factor", None, min_value=1, max_value=10)
    names = [hw_param.value] if isinstance(hw_param, Fixed) else list(cast(Choice, hw_param).choices)
    kinds = [load_hardware(hw_files.get(h, h)) for h in names]
    if usd is None and ("usd_per_million_tokens" in objectives or max_usd is not None):
        bad = [h.name for h in kinds if not math.isfinite(h.usd_per_gpu_hour)]
        if bad:
            key = "objectives.usd_per_million_tokens" if max_usd is None else "constraints.max_usd_per_million_tokens"
            raise SpecError(top.where, key, f"hardware {', '.join(bad)} has no price per GPU-hour (no 'price:' in its "
                                            "file); set cost.usd_per_gpu_hour: <USD>")
    if "tokens_per_s_per_kw" in objectives or min_kw is not None:
        bad = [h.name for h in kinds if not math.isfinite(h.board_power_w)]
        if bad:
            key = "objectives.tokens_per_s_per_kw" if min_kw is None else "constraints.min_tokens_per_s_per_kw"
            raise SpecError(top.where, key, f"hardware {', '.join(bad)} has no board power (no 'power:' in its file); "
                                            "add power: {board_W: <W>, source: ...} to it")
    return {"usd_per_gpu_hour": None if usd is None else float(usd),
            "power_overhead_factor": None if factor is None else float(factor)}


# ---------------------------------------------------------------- parameter parsing


def _flag(sec: Section, name: str, default: bool) -> bool:
    v = sec.raw(name, default)
    if not isinstance(v, bool):
        raise SpecError(sec.where, sec.key(name), f"expected true or false, got {v!r}")
    return v


def _num_param(sec: Section, name: str) -> Param:
    """A numeric parameter: fixed, choices or a range."""
    where, key = sec.where, sec.key(name)
    raw = sec.raw(name)
    flag = name in FLAG_PARAMS
    is_float = name in _FLOAT_LOW
    lo_bound = _FLOAT_LOW[name] if is_float else (1 if name in _MIN1 else 0)
    hi_bound = SIZE_LIMITS.get(name)  # beyond it the simulator cannot represent the value

    def one(v: Any, k: str) -> Any:
        if flag:
            if isinstance(v, bool):
                return int(v)
            if v in (0, 1) and not isinstance(v, float):
                return int(v)
            raise SpecError(where, k, f"expected true/false, got {v!r}")
        return check_number(v, where, k, integer=not is_float, min_value=lo_bound, max_value=hi_bound)

    listed = _listed(raw, where, key, one)
    if listed is not None:
        return listed
    if isinstance(raw, Mapping):
        rs = Section(raw, where, key)
        rs.check_keys({"low", "high", "step", "log"})
        if flag:
            raise SpecError(where, key, "a flag takes true/false or a choice list, not a range")
        low = rs.number("low", integer=not is_float, min_value=lo_bound, max_value=hi_bound)
        high = rs.number("high", integer=not is_float, min_value=lo_bound, max_value=hi_bound)
        log = rs.raw("log", False)
        if not isinstance(log, bool):
            raise SpecError(where, f"{key}.log", f"expected true/false, got {log!r}")
        if low > high:
            raise SpecError(where, key, f"empty range: low {low} > high {high}")
        step = rs.number("step", None, integer=not is_float, min_value=0, max_value=hi_bound, min_exclusive=True)
        if log and step is not None and not (not is_float and step == 1):
            raise SpecError(where, f"{key}.step", "a log range takes no step (Optuna samples log ranges continuously)")
        if log and low <= 0:
            raise SpecError(where, f"{key}.low", f"a log range needs low > 0, got {low}")
        if is_float:
            if step is not None and not math.isclose(((high - low) / step) % 1.0, 0.0, abs_tol=1e-9) \
                    and not math.isclose(((high - low) / step) % 1.0, 1.0, abs_tol=1e-9):
                raise SpecError(where, key, f"high {high} is not low {low} plus a whole number of steps {step}")
            return FloatRange(float(low), float(high), None if step is None else float(step), log)
        step = 1 if step is None else int(step)
        if (high - low) % step:
            raise SpecError(where, key, f"high {high} is not low {low} plus a whole number of steps {step} "
                                        f"(e.g. high: {low + (high - low) // step * step})")
        return IntRange(int(low), int(high), step, log)
    return Fixed(one(raw, key))


def _choices(values: list[Any], where: str, key: str) -> Param:
    if not values:
        raise SpecError(where, key, "empty choice list")
    seen: list[Any] = []
    for v in values:
        if v in seen:
            raise SpecError(where, key, f"duplicate choice {v!r}")
        seen.append(v)
    return Choice(tuple(values)) if len(values) > 1 else Fixed(values[0])


def _check_draft_model(v: Any, where: str, key: str) -> str:
    """A draft model: a preset name, or ``mtp`` for the model's own MTP module."""
    if not isinstance(v, str) or not v.strip():
        raise SpecError(where, key, f"expected a model preset name or 'mtp', got {v!r}")
    check_name_text(v, where, key, "model")
    return "mtp" if is_mtp_name(v) else get_preset(v, where, key).shape.name


def _check_speculation(params: dict[str, Param], where: str, has_model: bool) -> None:
    """Speculation keys that contradict each other or the model, as SpecErrors at load time."""
    if "draft_tokens" not in params:
        for k in ("acceptance", "draft_model"):
            if k in params:
                raise SpecError(where, f"deployment.{k}", "needs deployment.draft_tokens (draft tokens per step)")
        return
    if max(_values(params["draft_tokens"])) == 0:
        return
    if "acceptance" not in params:
        raise SpecError(where, "deployment.acceptance", "required with deployment.draft_tokens > 0: a per-position "
                                                        "acceptance probability in [0, 1] (or a choice list/range)")
    drafts = _values(params["draft_model"]) if "draft_model" in params else ["mtp"]
    if "mtp" in drafts:
        models = [get_preset(m) for m in _values(params["model"])] if has_model else []
        lacking = [m.shape.name for m in models if m.mtp_layers <= 0]
        if not has_model or lacking:
            raise SpecError(where, "deployment.draft_model",
                            f"{'the custom shape' if not has_model else ', '.join(lacking)} has no MTP module: "
                            "name a draft model preset (deployment.draft_model)")


def _text_param(sec: Section, name: str, check) -> Param:
    where, key = sec.where, sec.key(name)
    raw = sec.raw(name)
    if isinstance(raw, Mapping):
        rs = Section(raw, where, key)
        rs.check_keys({"choices"})
        raw = rs.raw("choices")
        key = f"{key}.choices"
        if not isinstance(raw, list):
            raise SpecError(where, key, f"expected a list, got {raw!r}")
    if isinstance(raw, list):
        vals = [check(v, where, f"{key}[{i}]") for i, v in enumerate(raw)]
        return _choices(vals, where, key)
    return Fixed(check(raw, where, key))


def _is_path(v: str) -> bool:
    return Path(v).suffix.lower() in (".yaml", ".yml") or "/" in v or "\\" in v


def _check_hardware(v: Any, where: str, key: str) -> Hardware:
    """A hardware kind by shipped name or alias, or by file path: relative paths are looked up in the
    space file's folder, then in the current folder."""
    if not isinstance(v, str) or not v.strip():
        raise SpecError(where, key, f"expected a hardware name or YAML file path, got {v!r}")
    check_name_text(v, where, key, "hardware")
    target = v
    if _is_path(v):
        p = Path(v).expanduser()
        cands = [p] if p.is_absolute() else [Path(where).parent / p, p]
        found = next((c for c in cands if c.exists()), None)
        if found is None:
            looked = " and ".join(f"'{c}'" for c in dict.fromkeys(str(c) for c in cands))
            raise SpecError(where, key, f"hardware file '{v}' not found (looked for {looked}); give a shipped "
                                        "name (explorer hardware) or a YAML file path")
        target = str(found)
    try:
        return load_hardware(target)
    except SpecError as e:
        if e.where == "--hardware":  # unknown name: re-anchor the message at this file and key
            raise SpecError(where, key, e.message) from None
        raise


def _check_model(v: Any, where: str, key: str) -> str:
    if not isinstance(v, str):
        raise SpecError(where, key, f"expected a model preset name, got {v!r}")
    return get_preset(v, where, key).shape.name


def _check_serving(v: Any, where: str, key: str) -> str:
    if v not in SERVING_MODES:
        raise SpecError(where, key, f"expected one of {', '.join(SERVING_MODES)}, got {v!r}")
    return str(v)


def _check_runtime(v: Any, where: str, key: str) -> str:
    if not isinstance(v, str):
        raise SpecError(where, key, f"expected a runtime name (trtllm, vllm, sglang), got {v!r}")
    check_name_text(v, where, key, "runtime")
    rt = load_runtime(v, where, key)
    rel = rt.release or rt.release_date  # NAME@RELEASE: that build (explorer/runtime.py Release)
    return f"{rt.name}@{rel}" if rel else rt.name


def _check_precision(v: Any, where: str, key: str) -> str:
    if not isinstance(v, str):
        raise SpecError(where, key, f"expected a precision name (bf16, fp8, fp4, ...), got {v!r}")
    parse_precision(v, where, key)
    return v


def _band(sec: Section, name: str) -> tuple[float, float]:
    where, key = sec.where, sec.key(name)
    raw = sec.raw(name)
    if not isinstance(raw, list) or len(raw) != 2:
        raise SpecError(where, key, f"expected [low, high] in billions of parameters, got {raw!r}")
    lo = check_number(raw[0], where, f"{key}[0]", min_value=0)
    hi = check_number(raw[1], where, f"{key}[1]", min_value=0, min_exclusive=True)
    if lo > hi:
        raise SpecError(where, key, f"empty band: low {lo} > high {hi}")
    return float(lo) * 1e9, float(hi) * 1e9


def _values(p: Param) -> list[Any]:
    """A parameter's listed values (a range by its two ends)."""
    if isinstance(p, Fixed):
        return [p.value]
    if isinstance(p, Choice):
        return list(p.choices)
    return [p.low, p.high]


def _min_value(p: Param) -> float:
    return min(_values(p))


def _max_value(p: Param) -> float:
    return max(_values(p))


def _check_fixed_shape(params: dict[str, Param], where: str) -> None:
    """Contradictions between fixed shape values (ranges are checked per point instead)."""

    def fixed(k: str) -> Any:
        p = params.get(k)
        return p.value if isinstance(p, Fixed) else None

    heads, kv, H, d = fixed("heads"), fixed("kv_heads"), fixed("hidden"), fixed("head_dim")
    if heads is None and H is not None and d is not None:
        if H % d:
            raise SpecError(where, "shape.head_dim", f"hidden {H} is not a multiple of head_dim {d} "
                                                     "(heads = hidden/head_dim when heads is not given)")
        heads = H // d
    if heads is not None and kv is not None and not fixed("kv_lora_rank") and heads % kv:
        raise SpecError(where, "shape.kv_heads", f"kv_heads {kv} does not divide heads {heads}")
    if kv is not None and "kv_heads" in params and not fixed("kv_lora_rank"):
        hmax = _max_value(params["heads"]) if "heads" in params else (
            _max_value(params["hidden"]) // _min_value(params["head_dim"]))
        if kv > hmax:
            raise SpecError(where, "shape.kv_heads", f"kv_heads {kv} exceeds the largest possible heads {int(hmax)}")
    E, k = fixed("experts"), fixed("experts_per_token")
    if E and k is not None and not 1 <= k <= E:
        raise SpecError(where, "shape.experts_per_token", f"must be between 1 and experts={E}, got {k}")
    dl, L = fixed("dense_layers"), fixed("layers")
    if E and dl is not None and L is not None and dl >= L:
        raise SpecError(where, "shape.dense_layers", f"must be < layers={L}, got {dl}")


def _check_ep(params: dict[str, Param], where: str, has_model: bool) -> None:
    if _max_value(params["ep"]) <= 1:
        return
    if has_model:
        names = _values(params["model"])
        moe = any(get_preset(n).shape.experts > 0 for n in names)
    else:
        moe = _max_value(params.get("experts", Fixed(0))) > 0
    if not moe:
        raise SpecError(where, "deployment.ep", "expert parallelism needs an MoE model (experts > 0); "
                                                "this space has none")


def _check_presets_in_band(p: Param, capacity: dict[str, tuple[float, float]], where: str) -> None:
    names = _values(p)
    inside = []
    for n in names:
        counts = param_counts(get_preset(n).shape.columns())
        inside.append(all(lo <= float(counts[k]) <= hi for k, (lo, hi) in capacity.items()))
    if not any(inside):
        n = names[0]
        counts = param_counts(get_preset(n).shape.columns())
        desc = ", ".join(f"{k} {float(counts[k]) / 1e9:.1f} B" for k in capacity)
        raise SpecError(where, "constraints.capacity", f"no model in the space lies inside the band ({n}: {desc})")
