"""Held-out accuracy: refit every hardware kind without each whole measured curve (and without each
single measurement point) and predict what was left out (explorer.calibrate.cross_validate).

    python benchmarks/cross_validate.py [--json OUT.json] [--hold-out curve|config] [--hardware KIND[,KIND]]

Prints median and p90 |error| of the held-out predictions by group (curve throughput, curve
interactivity, curve TTFT, points) and the median error of every curve.  Two processes (one per
core), each taking a few hold-out groups at a time; about 85 min on the 2-core machine
(2026-12-05 fit with the releases' per-step cost; on 2026-12-06, with the VM at about half speed and
other work beside it, 12 of 58 tasks in 105 min: plan on 3 h and rely on the resume below; ``--hold-out config``, curves only: about 10 min; ``--hardware b200,gb200``: those kinds only,
about 12 min, for an experiment that touches a few kinds).

With ``--json OUT``, every finished task's held-out errors are appended to ``OUT.partial.jsonl`` as
they come, under a fingerprint of the inputs (:func:`fingerprint`: the hardware, runtime and
validation files, the fitting code, and the model's prediction of every validation case -- not the
simulator's source, so that a speed-up that moves no prediction keeps it): a run that is interrupted
and started again with the same arguments resumes, skipping the tasks already done, as long as none
of those inputs changed (otherwise it starts over).  ``--restamp OUT`` (no run): the fingerprint of
this checkout written into a finished ``OUT``, for a run made in another checkout of the same inputs.
The partial file is removed once ``OUT`` is written.  ``OUT`` records the same fingerprint, so
that benchmarks/validation_doc.py can say when held-out figures come from other code or another
calibration than the in-sample figures beside them (``stale_note``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from explorer.calibrate import HOLDOUT_UNITS, cross_validate, holdout_groups, load_all_cases
from explorer.errors import ExplorerError
from explorer.report.io import write_text_atomic

_CASES: list = []  # each worker process loads the cases once


def _one(task: tuple[str, str, list[str]]) -> dict[str, float]:
    kind, by, groups = task
    if not _CASES:
        _CASES.extend(load_all_cases())
    return cross_validate(kind, cases=_CASES, by=by, only=groups)


def _tasks(cases: list, kinds: list[str], by: str, per_task: int = 4) -> list[tuple[str, str, list[str]]]:
    """(kind, unit, hold-out groups) tasks of a few groups each, largest kinds first, so that the
    kind with most curves (H200: half the refits) no longer runs alone on one core at the end."""
    out = []
    for k in kinds:
        names = list(holdout_groups([c for c in cases if c.supported and c.hardware == k], by))
        out += [(k, by, names[i:i + per_task]) for i in range(0, len(names), per_task)]
    return sorted(out, key=lambda t: -sum(1 for c in cases if c.hardware == t[0]))


ROOT = Path(__file__).resolve().parents[1]
#: what a held-out error depends on, hashed byte for byte: the calibrated hardware and runtime files, the
#: measured data, the package's model presets and fabric fits (not explorer/data/error_bands.yaml: the
#: bands are computed *from* a cross-validation run) and the code of the fitting procedure itself
FINGERPRINT_DIRS = ("hardware", "runtimes", "validation")
FIT_CODE = ("explorer/data/models.yaml", "explorer/data/fabrics.yaml", "explorer/calibrate.py", "explorer/kernel_fit.py",
            "explorer/kernel_cases.py", "explorer/fabrics.py", "explorer/runtime.py")


def fingerprint(args: argparse.Namespace, root: Path = ROOT) -> str:
    """sha256 of the inputs a resumed run must share with the interrupted one, and that the held-out
    figures of a finished run describe: the hold-out arguments, the files of :data:`FINGERPRINT_DIRS`
    and :data:`FIT_CODE` (the data files among them), and the model itself -- every validation case as parsed and the simulator's
    prediction of each under today's fit (:func:`model_digest`), rather than the simulator's source:
    a change that leaves every prediction bit for bit where it was (a speed-up) keeps the
    fingerprint, any that moves one changes it.  Not seen: a code change that moves predictions only
    away from today's fitted constants (a refit explores them) -- change FIT_CODE or rerun when in doubt."""
    h = hashlib.sha256(json.dumps([args.hold_out, args.hardware]).encode())
    for d in FINGERPRINT_DIRS:
        for f in sorted((root / d).rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts:
                h.update(str(f.relative_to(root)).encode())
                h.update(f.read_bytes())
    for name in FIT_CODE:
        h.update(name.encode())
        h.update((root / name).read_bytes())
    h.update(model_digest().encode())
    return h.hexdigest()


_MODEL_DIGEST: list[str] = []  # once per process: ~4 s


def model_digest() -> str:
    """sha256 of every validation case as parsed (ids, measured values, designs) and of the
    simulator's prediction of every supported one, as float64 bytes: the model as the held-out
    figures saw it, whatever code computes it."""
    if not _MODEL_DIGEST:
        from explorer.validate import predict

        cases = load_all_cases()
        h = hashlib.sha256(repr(cases).encode())  # before predict, which records its choices on the cases
        h.update(np.asarray(predict([c for c in cases if c.supported]), dtype=np.float64).tobytes())
        _MODEL_DIGEST.append(h.hexdigest())
    return _MODEL_DIGEST[0]


def _task_key(task: tuple[str, str, list[str]]) -> str:
    return json.dumps([task[0], task[1], sorted(task[2])])


def load_partial(path: Path, stamp: str) -> dict[str, dict[str, float]]:
    """Finished tasks' errors from an interrupted run with the same fingerprint ({} otherwise)."""
    if not path.exists():
        return {}
    done: dict[str, dict[str, float]] = {}
    with path.open(encoding="utf-8") as f:
        for i, line in enumerate(f):
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                break  # a line cut by the interruption: the tasks after it run again
            if i == 0:
                if rec.get("fingerprint") != stamp:
                    return {}
                continue
            done[rec["task"]] = rec["errors"]
    return done


def stale_note(path: Path, hold_out: str) -> str | None:
    """None when the cross-validation JSON at ``path`` was computed on today's inputs (its recorded
    fingerprint equals this checkout's, whole-kind run), else one sentence saying it was not."""
    rec = json.loads(path.read_text(encoding="utf-8")).get("fingerprint")
    now = fingerprint(argparse.Namespace(hold_out=hold_out, hardware=None))
    if rec == now:
        return None
    why = ("records no fingerprint (written before runs recorded one)" if rec is None
           else f"was computed on other inputs (fingerprint {str(rec)[:12]}, this checkout {now[:12]})")
    shown = path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path
    return (f"`{shown}` {why}: its held-out figures may come from an earlier model or calibration than "
            f"the in-sample figures beside them; rerun `python benchmarks/cross_validate.py"
            f"{' --hold-out config' if hold_out == 'config' else ''} --json {shown}` to refresh them.")


def _result(path: Path) -> dict:
    """A finished run's JSON; ValueError when the file is not one."""
    rec = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(rec, dict) or "errors" not in rec:
        raise ValueError("not a cross-validation result (no 'errors')")
    return rec


def restamp(out: Path, stamp: str) -> str:
    """Record ``stamp`` as the fingerprint of a finished run ``out`` and of its partial file, where
    they exist (each rewritten whole, then moved into place); says what it rewrote."""
    done = []
    partial = Path(str(out) + ".partial.jsonl")
    if out.exists():
        rec = _result(out)
        rec["fingerprint"] = stamp
        write_text_atomic(out, json.dumps(rec, indent=1))
        done.append(str(out))
    if partial.exists():
        lines = partial.read_text(encoding="utf-8").splitlines(keepends=True)
        if lines:
            lines[0] = json.dumps({"fingerprint": stamp}) + "\n"
            write_text_atomic(partial, "".join(lines))
            done.append(str(partial))
    return f"fingerprint {stamp[:12]} written into {', '.join(done)}" if done else f"nothing at {out}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--hold-out", choices=HOLDOUT_UNITS, default="curve",
                    help="curve: leave one measured curve out; config: every curve of one model and runtime on "
                         "the kind (curves only)")
    ap.add_argument("--hardware", help="comma-separated kinds to hold out on (default: every kind with served cases)")
    ap.add_argument("--restamp", metavar="OUT",
                    help="no run: write this checkout's fingerprint (for --hold-out/--hardware) into OUT and "
                         "OUT.partial.jsonl, where they exist -- only for a run made on this checkout's inputs, "
                         "after the fingerprint's definition changed")
    args = ap.parse_args()
    if args.restamp:
        try:
            out = Path(args.restamp)
            if out.exists():
                _result(out)  # a file that is no run fails before the ~4 s fingerprint
            print(restamp(out, fingerprint(args)))
        except (OSError, ValueError, ExplorerError) as err:  # unreadable, unwritable, or not a cross-validation JSON
            print(f"cross_validate.py: --restamp {args.restamp}: {type(err).__name__}: {err}", file=sys.stderr)
            raise SystemExit(2) from None
        return
    cases = load_all_cases()
    by_id = {c.id: c for c in cases}
    kinds = sorted({c.hardware for c in cases if c.supported and c.kind in ("inference", "curve")})
    if args.hardware:
        wanted = set(args.hardware.split(","))
        kinds = [k for k in kinds if k in wanted]
    errs: dict[str, float] = {}
    tasks = _tasks(cases, kinds, args.hold_out)
    partial = Path(args.json + ".partial.jsonl") if args.json else None
    log = None
    if partial is not None:
        stamp = fingerprint(args)
        done = load_partial(partial, stamp)
        for t in tasks:
            errs.update(done.get(_task_key(t), {}))
        if done:
            print(f"resuming: {sum(_task_key(t) in done for t in tasks)} of {len(tasks)} tasks done in {partial}")
        tasks = [t for t in tasks if _task_key(t) not in done]
        log = partial.open("a" if done else "w", encoding="utf-8")
        if not done:
            log.write(json.dumps({"fingerprint": stamp}) + "\n")
            log.flush()
    with ProcessPoolExecutor(2) as ex:
        for task, part in zip(tasks, ex.map(_one, tasks), strict=True):
            errs.update(part)
            if log is not None:
                log.write(json.dumps({"task": _task_key(task), "errors": part}) + "\n")
                log.flush()
    if log is not None:
        log.close()
    groups: dict[str, list[float]] = {}
    curves: dict[str, dict[str, list[float]]] = {}
    for cid, e in errs.items():
        c = by_id[cid]
        g = f"curve {c.metric}" if c.kind == "curve" else (c.regime if c.regime.startswith("mlperf") else "point")
        groups.setdefault(g, []).append(e)
        if c.kind == "curve":
            groups.setdefault(f"curve {c.metric} {c.family}", []).append(e)
            curves.setdefault(c.curve, {}).setdefault(c.metric, []).append(e)
    for g, v in sorted(groups.items()):
        a = np.abs(v)
        print(f"{g:32s} n={len(a):4d} median |err| {np.median(a):6.1%}  p90 {np.percentile(a, 90):6.1%}")
    for cv, m in sorted(curves.items()):
        print(f"  {cv:64s} " + "  ".join(f"{k} {np.median(v):+.1%}" for k, v in sorted(m.items())))
    if args.json:
        write_text_atomic(args.json, json.dumps(  # whole or not at all
            {"fingerprint": stamp, "errors": errs,
             "curves": {k: {a: float(np.median(b)) for a, b in v.items()} for k, v in curves.items()}}, indent=1))
        if partial is not None:
            partial.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
