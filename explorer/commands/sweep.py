"""``explorer sweep SPACE.yaml``: search a space (Optuna study or exhaustive grid), write the results
table ``<out>/<study>.csv`` (atomically) and the report ``<out>/<study>.html``, print a summary."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

from explorer.errors import SpecError
from explorer.specio import MAX_SEED

SAMPLER_CHOICES = ("tpe", "nsga2", "random", "grid")
_STUDY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


#: Longest study name: output files are named after it (file names have at most 255 bytes).
MAX_STUDY_NAME = 100
#: Most local worker processes.
MAX_WORKERS = 256


def _count(text: str, minimum: int, maximum: int | None = None) -> int:
    try:
        v = int(text)
    except ValueError:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{shown}'") from None
    if v < minimum:
        raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {v}")
    if maximum is not None and v > maximum:
        raise argparse.ArgumentTypeError(f"must be <= {maximum}, got {v}")
    return v


def register(sub) -> None:
    p = sub.add_parser(
        "sweep", help="search a space (Optuna or exhaustive grid); write the results table and report",
        description="Search the design space of SPACE.yaml: an Optuna study (tpe, nsga2, random) stored in a "
                    "journal file under --out (so running again adds trials), or the exhaustive grid. Writes "
                    "<out>/<study>.csv (one row per design point, with on_front), <out>/<study>.html and a summary.",
    )
    p.add_argument("space", help="search-space YAML (see search_spaces/ and docs/sweeps.md)")
    p.add_argument("--trials", type=lambda t: _count(t, 0),
                   help="new trials to run (default: the space's search.trials; 0 = rebuild the outputs from the "
                        "study); ignored by grid")
    p.add_argument("--sampler", choices=SAMPLER_CHOICES, help="default: the space's search.sampler (tpe)")
    p.add_argument("--seed", type=lambda t: _count(t, 0, MAX_SEED),
                   help="default: the space's search.seed (0); 0 .. 2^32-1")
    p.add_argument("--storage", help="database URL (postgresql://user@host:port/db) or a .journal path; "
                                     "default <out>/<study>.journal")
    p.add_argument("--study", help="study name (default: the space file's stem); output files are named after it")
    p.add_argument("--workers", type=lambda t: _count(t, 1, MAX_WORKERS), default=1,
                   help="local worker processes on one study (or grid chunks); default 1")
    p.add_argument("--cluster", metavar="dask://HOST:PORT",
                   help="run the grid's chunks on this Dask scheduler's workers (--sampler grid; "
                        "docs/sweeps.md); studies share a --storage postgresql://... instead")
    p.add_argument("--out", default="reports", help="output folder (default: reports)")
    p.add_argument("--no-report", action="store_true", help="write the CSV only")
    p.add_argument("--measured", metavar="FILE",
                   help="measured serving curves (the shape of validation/fronts.yaml) drawn on the report's frontier")
    p.add_argument("--trial-unit", choices=("shape", "point"),
                   help="what one Optuna trial is: a model shape scored under every deployment at once, or one "
                        "design point (default: the space's search.trial_unit; docs/sweeps.md)")
    p.add_argument("--no-refine", action="store_true",
                   help="skip the batch completion of the front's designs (search.refine_batch)")
    p.set_defaults(func=run)


def run(args) -> int:
    from explorer.space import load_space

    space = load_space(args.space)
    if getattr(args, "trial_unit", None):
        from explorer.search import with_unit

        space = with_unit(space, args.trial_unit)
    sampler = args.sampler or space.search.sampler
    seed = space.search.seed if args.seed is None else args.seed
    trials = space.search.trials if args.trials is None else args.trials
    study = args.study or space.name
    if not _STUDY_NAME.match(study) or len(study) > MAX_STUDY_NAME:
        shown = study if len(study) <= 60 else study[:57] + "..."
        raise SpecError("--study", None, f"'{shown}' is not a usable study name (letters, digits, '.', '_', '-'; "
                                         f"at most {MAX_STUDY_NAME} characters); pass --study NAME")
    out = Path(args.out)
    # validate everything before the first file is written
    if sampler == "grid":
        from explorer.grid import check_grid

        if args.storage:
            raise SpecError("--storage", None, "the grid sampler scores every point without a study; drop --storage")
        check_grid(space)
        spec = None
        cluster = _check_cluster(args, space)
    else:
        from explorer.storage import storage_spec

        if getattr(args, "cluster", None) is not None:
            raise SpecError("--cluster", None, f"runs the exhaustive grid (--sampler grid), not the {sampler} "
                                               "sampler; a study shares one --storage postgresql://... across "
                                               "machines instead (docs/sweeps.md)")
        spec = storage_spec(args.storage, out, study, args.workers)
    args.measured_curves = _load_measured(args)
    _check_outputs(args, out, study, sampler, spec)
    progress = sys.stderr.isatty()
    if sampler == "grid":
        from explorer.grid import run_grid
        from explorer.grid_checkpoint import checkpoint_path, remove_checkpoint

        ckpt = checkpoint_path(out, study)
        try:
            g = run_grid(space, workers=args.workers, progress=progress, seed=seed, cluster=cluster, checkpoint=ckpt)
        except KeyboardInterrupt:
            kept = f"every finished chunk is kept in {ckpt}" if ckpt.exists() else "no chunk had finished"
            print(f"explorer sweep: interrupted; {kept}; run the same command again to resume", file=sys.stderr)
            return 130
        df, interrupted = g.frame, False
        info = {"kind": "grid", "points": g.total, "feasible": g.feasible, "reason_counts": g.reason_counts,
                "kept_all": g.kept_all, "seconds": g.seconds, "simulated": g.simulated,
                "chunks_resumed": g.chunks_resumed}
        rc = _finish(args, space, df, info, sampler, seed, study, out, interrupted)
        remove_checkpoint(ckpt)  # the outputs hold it all now
        return rc
    from explorer.search import optimize, study_frame

    assert spec is not None
    r = None
    try:
        r = optimize(space, spec, study, trials=trials, sampler=sampler, seed=seed, workers=args.workers,
                     progress=progress)
        df, states = study_frame(space, r.study)
        interrupted = r.interrupted
        from explorer.search import trial_unit

        info = {"kind": "study", "storage": r.storage_desc, "before": r.trials_before, "run": r.trials_run,
                "states": states, "seconds": r.seconds, "refined": 0, "unit": trial_unit(space),
                "complete": int(states.get("COMPLETE", 0))}
        if space.search.refine_batch and not args.no_refine:
            import pandas as pd

            from explorer.refine import batch_completion

            extra = batch_completion(space, df)
            info["refined"] = len(extra)
            info["refine_scored"] = int(extra.attrs.get("scored", len(extra)))
            df = pd.concat([df.assign(source="search"), extra], ignore_index=True)
        return _finish(args, space, df, info, sampler, seed, study, out, interrupted)
    except KeyboardInterrupt:
        # outside the trial loop (opening the study, refining, writing): the trials are in the storage
        print(f"explorer sweep: interrupted; {_safe_trials(r, spec)} are safe in {spec.describe()}; "
              f"'{_rebuild_command(args)}' rebuilds the CSV and report", file=sys.stderr)
        return 130
    except OSError as e:  # the disk filled up or a folder became unwritable during the run
        where = getattr(e, "filename", None) or spec.describe()
        raise SpecError(str(where), None, f"cannot write ({e.strerror or e}); {_safe_trials(r, spec)} are safe in "
                                          f"{spec.describe()}; '{_rebuild_command(args)}' rebuilds the outputs") \
            from None


def _check_cluster(args, space):
    """``--cluster``: a reachable Dask scheduler whose workers score this space as here (checked
    before any output is written; explorer/cluster.py), or None."""
    if getattr(args, "cluster", None) is None:
        return None
    from explorer.cluster import parse_cluster
    from explorer.grid import check_cluster

    cluster = parse_cluster(args.cluster)
    if args.workers > 1:
        raise SpecError("--cluster", None, "give --cluster or --workers, not both (the cluster's workers are "
                                           "started with 'dask worker')")
    check_cluster(space, cluster)
    return cluster


def _load_measured(args):
    """``--measured FILE``, read before any output is written (explorer/report/measured.py)."""
    if not getattr(args, "measured", None):
        return None
    if args.no_report:
        raise SpecError("--measured", None, "draws on the report; drop --no-report or --measured")
    from explorer.report.measured import load_measured

    return load_measured(args.measured)


def _safe_trials(r, spec) -> str:
    if r is None:
        return "the finished trials of the study"
    try:
        from optuna.trial import TrialState

        n = len(r.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
    except Exception:  # the count is a courtesy; never mask the interruption
        return "the study's finished trials"
    return f"all {n:,} finished trials"


def _rebuild_command(args) -> str:
    import shlex

    words = ["explorer", "sweep", args.space, "--trials", "0"]
    for flag, value, default in (("--out", args.out, "reports"), ("--study", args.study, None),
                                 ("--storage", args.storage, None)):
        if value is not None and value != default:
            words += [flag, value]
    return " ".join(shlex.quote(str(w)) for w in words)


def _check_outputs(args, out: Path, study: str, sampler: str, spec) -> None:
    """Every output path, before the first trial (explorer/outputs.py); a refusal leaves nothing behind."""
    from explorer.outputs import check_append_file, check_output_file, prepare_folder, remove_created

    created = prepare_folder(out, "--out")
    try:
        names = [f"{study}.csv"] + ([] if args.no_report else [f"{study}.html"])
        if sampler == "grid":
            names += [f"{study}.reasons.csv", f"{study}.grid-checkpoint"]
        for name in names:
            check_output_file(out / name, "--study" if args.study else "--out")
        if spec is not None and spec.kind == "journal":
            from explorer.journal import check_journal_path

            check_journal_path(spec.target)
            created += prepare_folder(Path(spec.target).parent, "--storage")
            check_append_file(spec.target, "--storage")
    except BaseException:
        remove_created(created)
        raise
    from explorer.outputs import remove_stale_temporaries

    remove_stale_temporaries(out, study)  # what a killed run of this study left half-written


# --------------------------------------------------------------------------------------------
# outputs
# --------------------------------------------------------------------------------------------


def _finish(args, space, df, info, sampler, seed, study, out, interrupted) -> int:
    import numpy as np
    import pandas as pd

    from explorer.frontier import front_table, hypervolume, hypervolume_history
    from explorer.space import reason_label

    df["on_front"] = front_table(df, space.objectives, "feasible").to_numpy() if len(df) else np.zeros(0, bool)
    paths = [out / f"{study}.csv"]
    _atomic_csv(df, paths[0])
    if info["kind"] == "grid":
        counts = info["reason_counts"]
        if not info["kept_all"]:
            rows = [{"reason_code": c, "reason": "feasible" if c == 0 else reason_label(c), "points": n,
                     "share": n / info["points"]} for c, n in counts.items()]
            paths.append(out / f"{study}.reasons.csv")
            _atomic_csv(pd.DataFrame(rows), paths[-1])
    else:
        codes, n = np.unique(df["reason_code"].to_numpy(), return_counts=True)
        counts = {int(c): int(k) for c, k in zip(codes, n, strict=True)}

    ref = space.hypervolume_reference()
    feas = df["feasible"].to_numpy(dtype=bool)
    vals = df[list(space.objectives)].to_numpy(dtype=float)
    hv = None if ref is None else hypervolume(vals[feas], space.directions, ref) if feas.any() else 0.0
    history: list[float] = []
    if info["kind"] == "study" and ref is not None and len(df):
        # the convergence curve is over the study's own trials; refinement rows are not trials
        trial_rows = (df["source"] == "search").to_numpy() if "source" in df else np.ones(len(df), bool)
        masked = np.where(feas[trial_rows, None], vals[trial_rows], np.nan)
        order = df["trial"].to_numpy()[trial_rows]
        curve = hypervolume_history(masked, space.directions, ref, order=order)
        if info.get("unit") == "shape":  # several rows per trial: the curve after each whole trial
            ordered = np.sort(order, kind="stable")
            last = np.flatnonzero(np.r_[ordered[1:] != ordered[:-1], True])
            curve = curve[last]
        history = curve.tolist()
    from explorer.decision import format_decision, space_decision

    decision = space_decision(space, df)  # None unless the space names a reference model (docs/quality.md)

    if not args.no_report:
        write_report: Callable[..., Path] | None
        try:
            from explorer.report import write_report as _write_report
            write_report = _write_report
        except ImportError:
            write_report = None
        if write_report is None:
            print("note: report skipped (explorer.report is not available)", file=sys.stderr)
        else:
            meta = _meta(space, sampler, seed, study, info, len(df), history, counts, hv)
            if decision is not None:
                meta["decision"] = decision
            final = out / f"{study}.html"
            tmp = out / f".{study}.{os.getpid()}.tmp.html"
            try:
                measured = getattr(args, "measured_curves", None)
                write_report(tmp, df, meta, **({"measured": measured} if measured is not None else {}))
                if tmp.exists():
                    os.replace(tmp, final)
                    paths.append(final)
            finally:
                tmp.unlink(missing_ok=True)

    print(_summary(space, df, info, sampler, seed, study, counts, hv, paths, interrupted))
    if decision is not None:
        print("\n".join("  " + line for line in format_decision(decision)))
    return 130 if interrupted else 0


def _atomic_csv(df, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        df.to_csv(tmp, index=False)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _meta(space, sampler, seed, study, info, rows, history, counts, hv) -> dict:
    from datetime import UTC, datetime

    from explorer import __version__
    from explorer.space import reason_label

    hw_files = {}
    for name in space.hardware_names():
        h = space.hardware_spec(name)
        try:
            hw_files[h.name] = Path(h.path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            hw_files[h.name] = ""
    meta = {
        "study": study,
        "space_file": space.where,
        "space_text": space.text,
        "hardware_files": hw_files,
        "hardware_paths": dict(space.hardware_files),
        "sampler": sampler,
        "seed": seed,
        "trials": info["points"] if info["kind"] == "grid" else rows,
        "objectives": dict(space.objectives),
        "constraints": space.constraints_meta(),
        "workload": space.workload_meta(),
        "tool_version": __version__,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "hypervolume_history": history,
        "hypervolume": hv,
        "hypervolume_reference": space.hypervolume_reference(),
        "reason_counts": [{"reason_code": c, "reason": "feasible" if c == 0 else reason_label(c), "count": n}
                          for c, n in counts.items()],
    }
    if info["kind"] == "grid":
        meta["grid"] = {"points": info["points"], "feasible": info["feasible"], "rows_kept": rows,
                        "kept_all": info["kept_all"]}
    else:
        meta["storage"] = info["storage"]
        refined = int(info.get("refined", 0))
        meta["trials"] = info.get("complete", rows - refined)
        if refined:
            meta["refinement"] = (f"{refined} front points added by explorer/refine.py after the study "
                                  f"({info.get('refine_scored', refined):,} deployments and neighbouring shapes "
                                  "of the front scored; hypervolume above includes them, the convergence curve "
                                  "does not)")
    return meta


def _fmt_point(r, space) -> str:
    shape = (f"{r['model']}" if space.uses_model else
             f"H={r['hidden']} F={r['ffn']} L={r['layers']} heads={r['heads']}/{r['kv_heads']}"
             + (f" E={r['experts']} k={r['experts_per_token']} Fe={r['expert_ffn']}" if r["experts"] else "")
             + f" ({r['params_total'] / 1e9:.1f}B" + (f", {r['params_active'] / 1e9:.1f}B active)" if r["experts"]
                                                        else ")"))
    loss = (f", predicted loss {r['predicted_loss']:.4f}" if "predicted_loss" in r else "") + (
        f" ({r['predicted_loss_delta_pct']:+.2f} %)" if "predicted_loss_delta_pct" in r else "")
    return (f"{r['tokens_per_s_per_gpu']:,.1f} tok/s/GPU at {r['tokens_per_s_per_user']:,.1f} tok/s/user, "
            f"TTFT {r['ttft_s'] * 1e3:,.0f} ms: {r['hardware']} {r['precision']} {shape} batch={r['batch']} "
            f"tp={r['tp']} pp={r['pp']} ep={r['ep']} dp={r['dp']}"
            + (f" {r['serving']}" + (f" (prefill tp={r['prefill_tp']})" if r["serving"] == "disaggregated" else "")
               if "serving" in r else "")
            + f" ({r['memory_bytes_per_gpu'] / 1e9:.0f} GB/GPU)"
            f"{loss}")


def _summary(space, df, info, sampler, seed, study, counts, hv, paths, interrupted) -> str:
    from explorer.space import reason_label

    lines = []
    if info["kind"] == "grid":
        n = info["points"]
        feas = info["feasible"]
        kept = "every point" if info["kept_all"] else f"the front + a sample of {len(df):,} rows"
        sim = info.get("simulated", n)
        resumed = info.get("chunks_resumed", 0)
        lines.append(f"sweep {study}: grid of {n:,} points in {info['seconds']:.1f} s "
                     f"({n / max(info['seconds'], 1e-9):,.0f} points/s"
                     + (f"; {resumed:,} chunks resumed from the checkpoint" if resumed else "")
                     + f"); {sim:,} simulated, {1 - sim / max(n, 1):.1%} decided without simulating; "
                       f"table holds {kept}")
    else:
        n = len(df)
        feas = int(df["feasible"].sum())
        st = info["states"]
        other = {k: v for k, v in st.items() if k != "COMPLETE"}
        refined = info.get("refined", 0)
        lines.append(f"sweep {study}: {info['run']} new trials ({sampler}, seed {seed}) in {info['seconds']:.1f} s; "
                     f"the study holds {info.get('complete', n - refined)} complete trials"
                     + (f" of model shapes ({n - refined:,} rows: each shape's own front)"
                        if info.get("unit") == "shape" else "")
                     + (f", plus {refined:,} front points from refining the front's designs "
                        f"({info.get('refine_scored', refined):,} scored)" if refined else "")
                     + (" (" + ", ".join(f"{v} {k.lower()}" for k, v in sorted(other.items())) + ")" if other else "")
                     + f" [{info['storage']}]")
    if interrupted:
        lines.append("  INTERRUPTED: every finished trial is kept; run the same command again to add more")
    share = feas / n if n else 0.0
    lines.append(f"  feasible     {feas:,} of {n:,} ({share:.1%})")
    front = df[df["on_front"]]
    hv_txt = f"hypervolume {hv:.4g}" if hv is not None else "hypervolume n/a (give search.hypervolume_reference)"
    lines.append(f"  front        {len(front)} points; {hv_txt}")
    lines.append(f"  anchor       {space.constraints_meta()['anchor']}")
    if len(front):
        for obj, d in space.objectives.items():
            f = df[df["feasible"]]
            r = f.loc[f[obj].idxmax() if d == "maximize" else f[obj].idxmin()]
            head = (f"{r[obj]:,.4g} {obj} -- " if obj not in ("tokens_per_s_per_gpu", "tokens_per_s_per_user")
                    else "")
            lines.append(f"  best {obj}: {head}{_fmt_point(r, space)}")
    from explorer.report.modes import modes_table, modes_text

    mt = modes_table(df)  # None unless the space compares serving modes
    if mt is not None:
        lines.extend(modes_text(mt))
    bad = {c: k for c, k in counts.items() if c != 0}
    if bad:
        total_bad = sum(bad.values())
        lines.append(f"  infeasible   {total_bad:,} points, by reason:")
        for c, k in sorted(bad.items(), key=lambda x: (-x[1], x[0]))[:8]:
            label = reason_label(c)
            rows = df[df["reason_code"] == c]
            example = str(rows["reason"].iloc[0]) if len(rows) else ""
            lines.append(f"    {k:>10,}  {label}" + (f"  e.g. {example}" if example and example != label else ""))
    lines.append("  wrote        " + ", ".join(str(p) for p in paths))
    return "\n".join(lines)
