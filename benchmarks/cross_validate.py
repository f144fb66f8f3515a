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
they come, under a fingerprint of the inputs (the package's sources, the hardware, runtime and
validation files): a run that is interrupted and started again with the same arguments resumes,
skipping the tasks already done, as long as none of those inputs changed (otherwise it starts over).
The partial file is removed once ``OUT`` is written.  ``OUT`` records the same fingerprint, so
that benchmarks/validation_doc.py can say when held-out figures come from other code or another
calibration than the in-sample figures beside them (``stale_note``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from explorer.calibrate import HOLDOUT_UNITS, cross_validate, holdout_groups, load_all_cases

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
#: what a held-out error depends on: the simulator and fit code, the calibrated files and the data
FINGERPRINT_DIRS = ("explorer", "hardware", "runtimes", "validation")


def fingerprint(args: argparse.Namespace) -> str:
    """sha256 of the inputs a resumed run must share with the interrupted one (module docstring)."""
    h = hashlib.sha256(json.dumps([args.hold_out, args.hardware]).encode())
    for d in FINGERPRINT_DIRS:
        for f in sorted((ROOT / d).rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts:
                h.update(str(f.relative_to(ROOT)).encode())
                h.update(f.read_bytes())
    return h.hexdigest()


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--hold-out", choices=HOLDOUT_UNITS, default="curve",
                    help="curve: leave one measured curve out; config: every curve of one model and runtime on "
                         "the kind (curves only)")
    ap.add_argument("--hardware", help="comma-separated kinds to hold out on (default: every kind with served cases)")
    args = ap.parse_args()
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
        tmp = Path(args.json + ".tmp")
        with tmp.open("w") as f:
            json.dump({"fingerprint": stamp, "errors": errs, "curves": {k: {a: float(np.median(b)) for a, b in v.items()}
                                                  for k, v in curves.items()}}, f, indent=1)
        tmp.replace(args.json)  # whole or not at all
        if partial is not None:
            partial.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
