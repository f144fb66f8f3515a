"""Optuna search over a :class:`~explorer.space.SearchSpace` (the only module that imports Optuna).

One multi-objective study per sweep (directions from the space).  Trials run ask/tell in small
batches: a batch of asks is scored in **one** vectorized simulator call, then each trial gets its
graded constraints (``trial.set_constraint``, Optuna 5's replacement for ``constraints_func``; ``<= 0``
feasible) and its finite objective values.  Infeasible points are never FAIL, NaN or penalties; FAIL
is left for real crashes (and for trials asked but not finished when the user presses Ctrl-C).

Samplers: ``tpe`` = ``TPESampler(multivariate=True, n_startup_trials=10 % of the budget, seed)``; ``nsga2`` = ``NSGAIISampler(population_size,
seed)``; ``random`` = ``RandomSampler(seed)``.  Trials per batch default to 1 for TPE (each ask sees
every earlier result), the population size for NSGA-II (one generation), 64 for random.

Resuming: a study is identified by its name in its storage; running again adds trials.  The sampler
of a resumed run (or of worker ``i``) is seeded from ``(seed, trials already in the study, i)`` so it
does not replay the first run's points; a fresh single-process run uses ``seed`` itself, so the same
space, seed and sampler give the same trials.  ``--workers N`` starts N spawned processes on the one
study; worker ``i`` runs ``trials//N`` (+1 for the first ``trials % N``) trials, so together they
run exactly the requested number.

Trials are design points (``search.trial_unit: point``) or model shapes (``shape``): a shape trial
samples only the shape parameters and is scored under every deployment at once, told its own front's
extremes (:mod:`explorer.shapes`); a study keeps its unit (user attribute ``explorer_trial_unit``).

The results table is rebuilt from every COMPLETE trial of the study by re-scoring its parameters in
one vectorized call (cheap, and the front comes from :func:`explorer.frontier.front_table`, never
from ``study.best_trials``).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Literal, cast

import numpy as np
import optuna
import pandas as pd
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from explorer.dashboard_attrs import trial_attrs
from explorer.errors import SpecError
from explorer.interrupts import FORWARD_SIGNAL, GracefulInterrupt
from explorer.space import Choice, FloatRange, IntRange, SearchSpace, space_from_text
from explorer.storage import StorageSpec, open_storage

DEFAULT_BATCH = {"tpe": 1, "random": 64}
FINGERPRINT_ATTR = "explorer_space_fingerprint"
UNIT_ATTR = "explorer_trial_unit"


def trial_unit(space: SearchSpace) -> str:
    """``shape`` when the space asks for shape trials and has both a shape to sample and deployments
    to enumerate (explorer/shapes.py), else ``point``."""
    from explorer.shapes import shape_mode_possible

    return "shape" if space.search.trial_unit == "shape" and shape_mode_possible(space) else "point"


def with_unit(space: SearchSpace, unit: str | None) -> SearchSpace:
    """The space with ``search.trial_unit`` set to ``unit`` (None: unchanged)."""
    if unit is None or unit == space.search.trial_unit:
        return space
    import dataclasses

    return dataclasses.replace(space, search=dataclasses.replace(space.search, trial_unit=unit))


def trial_keys(space: SearchSpace) -> list[str]:
    """The parameters a trial samples: every searched one, or the shape keys of shape trials."""
    if trial_unit(space) == "shape":
        from explorer.shapes import split

        return split(space)[0]
    return list(space.searched)


def distributions(space: SearchSpace) -> dict[str, BaseDistribution]:
    """Optuna distributions of the searched parameters (fixed ones are not suggested)."""
    out: dict[str, BaseDistribution] = {}
    keys = trial_keys(space)
    for name, p in space.searched.items():
        if name not in keys:
            continue
        if isinstance(p, IntRange):
            out[name] = IntDistribution(p.low, p.high, log=p.log, step=p.step)
        elif isinstance(p, FloatRange):
            out[name] = FloatDistribution(p.low, p.high, log=p.log, step=p.step)
        elif isinstance(p, Choice):
            out[name] = CategoricalDistribution(p.choices)
        else:  # pragma: no cover
            raise TypeError(p)
    return out


def tpe_startup(total_trials: int) -> int:
    """Random trials TPE starts with: 10 % of the study's budget, at least Optuna's default 10.
    Measured on quick.yaml with the sweep's refinement (docs/sweeps.md): 10 % random start lifts the
    front from 0.971 to 0.996 of the exhaustive hypervolume at 1,000 trials -- TPE otherwise settles on
    one shape family early."""
    return max(10, int(total_trials) // 10)


def make_sampler(name: str, seed: int, population_size: int = 20, startup_trials: int = 10) -> optuna.samplers.BaseSampler:
    if name == "tpe":
        return optuna.samplers.TPESampler(multivariate=True, n_startup_trials=startup_trials, seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(population_size=population_size, seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise SpecError("--sampler", None, f"'{name}' is not an Optuna sampler here (grid runs without a study)")


def batch_size(space: SearchSpace, sampler: str) -> int:
    if space.search.batch_trials is not None:
        return space.search.batch_trials
    if sampler == "nsga2":
        return space.search.population_size
    return DEFAULT_BATCH[sampler]


def derive_seed(seed: int, trials_before: int, worker: int) -> int:
    """The seed of a run: ``seed`` for a fresh single-process run, else a hash of (seed, trials already
    in the study, worker) so resumed runs and workers do not repeat each other's points."""
    if trials_before == 0 and worker == 0:
        return int(seed)
    return int(np.random.SeedSequence([int(seed), int(trials_before), int(worker)]).generate_state(1)[0])


def _quiet() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    # ask/tell records heartbeats itself (run_trials), which Optuna cannot see
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")


# --------------------------------------------------------------------------------------------
# study
# --------------------------------------------------------------------------------------------


def open_study(space: SearchSpace, spec: StorageSpec, study_name: str, sampler=None, create: bool = True):
    """Create or load the study; a study made from a different space is refused."""
    _quiet()
    storage = open_storage(spec)
    try:
        study = optuna.load_study(study_name=study_name, storage=storage, sampler=sampler)
    except KeyError:
        study = None
    if study is not None:
        fp = study.user_attrs.get(FINGERPRINT_ATTR)
        if fp is not None and fp != space.fingerprint():
            raise SpecError(
                "--study", None,
                f"study '{study_name}' in {spec.describe()} was made from a different search space "
                f"(parameters, constraints or objectives changed); use another --study name",
            )
        if [d.name.lower() for d in study.directions] != space.directions:
            raise SpecError("--study", None, f"study '{study_name}' has other objective directions; use another --study")
        unit = study.user_attrs.get(UNIT_ATTR) or _infer_unit(space, study)
        if unit != trial_unit(space):
            raise SpecError("--study", None, f"study '{study_name}' in {spec.describe()} has {unit} trials, this "
                                             f"sweep runs {trial_unit(space)} trials (search.trial_unit, "
                                             f"--trial-unit {unit} resumes it); use another --study")
        _name_metrics(study, space)  # a study made before the names were set gets them
        return storage, study
    if not create:
        raise SpecError("--study", None, f"no study '{study_name}' in {spec.describe()}")
    directions = cast(list[Literal["minimize", "maximize"]], space.directions)  # objectives are validated
    study = optuna.create_study(storage=storage, study_name=study_name, directions=directions, sampler=sampler)
    study.set_user_attr(FINGERPRINT_ATTR, space.fingerprint())
    study.set_user_attr(UNIT_ATTR, trial_unit(space))
    study.set_user_attr("space_file", space.where)
    study.set_user_attr("objectives", list(space.objectives))
    _name_metrics(study, space)
    return storage, study


def _infer_unit(space: SearchSpace, study: optuna.Study) -> str:
    """The unit of a study without the attribute (made before it existed, or killed between its
    creation and the attribute): ``point`` when a trial sampled a deployment parameter, ``shape``
    when trials sampled only shape keys, else (no trial with parameters) this sweep's, recorded."""
    from explorer.shapes import split

    shape_keys = set(split(space)[0])
    for t in study.get_trials(deepcopy=False):
        if t.params:
            return "shape" if set(t.params) <= shape_keys else "point"
    unit = trial_unit(space)
    study.set_user_attr(UNIT_ATTR, unit)
    return unit


def _name_metrics(study: optuna.Study, space: SearchSpace) -> None:
    """The objectives' names on the study (optuna-dashboard shows them instead of "Objective 0")."""
    names = list(space.objectives)
    if study.metric_names != names:
        study.set_metric_names(names)


def _usable(space: SearchSpace, params: dict[str, Any]) -> bool:
    """Whether a trial's parameters are a point of the space (a damaged journal can lose some)."""
    keys = trial_keys(space)
    for k, p in space.searched.items():
        if k not in keys:
            continue
        if k not in params:
            return False
        v = params[k]
        if isinstance(p, Choice):
            if v not in p.choices:
                return False
        elif isinstance(v, bool) or not isinstance(v, int | float) or not p.low <= v <= p.high:
            return False
    return True


def samples_from_params(space: SearchSpace, params: list[dict[str, Any]]) -> dict[str, list]:
    return {k: [p[k] for p in params] for k in space.searched}


def _score_points(space: SearchSpace, params: list[dict[str, Any]], keys: list[str]):
    """Point trials: (objectives, constraints, attrs) of each trial's point."""
    ev = space.evaluate(samples_from_params(space, params), len(params))
    attrs = trial_attrs(space, ev)
    return ([ev.objectives[i].tolist() for i in range(ev.n)],
            [{k: float(ev.constraints[k][i]) for k in keys} for i in range(ev.n)], attrs)


def _score_shapes(space: SearchSpace, scanner, params: list[dict[str, Any]], keys: list[str]):
    """Shape trials (explorer/shapes.py): each shape scanned over its deployments; the trial is told
    its front's extremes, and its attributes describe its best row in the first objective."""
    results = scanner.scan(params)
    attrs = [dict(r.attrs) for r in results]  # the best front row's figures, kept by the scan
    for a, r in zip(attrs, results, strict=True):
        a["feasible"] = r.feasible
        a["front_points"] = r.front_points
    return [r.objectives for r in results], [r.constraints for r in results], attrs


def run_trials(
    space: SearchSpace,
    study: optuna.Study,
    storage,
    n: int,
    batch: int,
    on_batch: Callable[[int], None] | None = None,
    stop: GracefulInterrupt | None = None,
) -> tuple[int, bool]:
    """Ask/score/tell ``n`` trials in batches.  Returns (finished trials, interrupted).

    Ctrl-C (SIGINT) or SIGTERM stops after the current batch, so no trial is left RUNNING; a second
    one stops at once and marks the trials asked but not told FAIL (:mod:`explorer.interrupts`).
    Every trial told stays in the storage either way.  ``stop``: an active GracefulInterrupt to use
    (worker processes hold one for their whole life)."""
    dists = distributions(space)
    keys = space.constraint_keys()
    scanner = None
    if trial_unit(space) == "shape":
        from explorer.shapes import shared_scanner

        scanner = shared_scanner(space)
    heartbeat = getattr(storage, "get_heartbeat_interval", lambda: None)() is not None
    study_id = storage.get_study_id_from_name(study.study_name) if heartbeat else None
    done = 0
    pending: list[optuna.Trial] = []
    with (nullcontext(stop) if stop is not None else GracefulInterrupt()) as stop:
        try:
            while done < n and not stop.requested:
                if heartbeat:
                    optuna.storages.fail_stale_trials(study)
                for _ in range(min(batch, n - done)):
                    pending.append(study.ask(dists))
                if heartbeat:
                    for t in pending:
                        storage.record_heartbeat(storage.get_trial_id_from_study_id_trial_number(study_id, t.number))
                params = [t.params for t in pending]
                objs, cons, attrs = (_score_points(space, params, keys) if scanner is None
                                     else _score_shapes(space, scanner, params, keys))
                for i, t in enumerate(pending):
                    for k in keys:
                        t.set_constraint(k, cons[i][k])
                    for k, v in attrs[i].items():
                        t.set_user_attr(k, v)
                    study.tell(t, objs[i])
                done += len(pending)
                pending = []
                if on_batch is not None:
                    on_batch(done)
        except KeyboardInterrupt:
            stop.requested = True
        finally:
            for t in pending:
                study.tell(t, state=TrialState.FAIL, skip_if_finished=True)
    return done, stop.requested


@dataclass
class SearchRun:
    study: optuna.Study
    storage_desc: str
    trials_before: int
    trials_run: int
    interrupted: bool
    seconds: float


def _stop_when_orphaned(stop: GracefulInterrupt, parent: int | None) -> None:
    """A worker whose sweep was killed (``kill -9``: nothing forwarded) finishes its batch and stops
    instead of running its share alone."""
    if parent is None:
        return

    def watch() -> None:
        while not stop.requested:
            if os.getppid() != parent:
                stop.requested = True
                return
            time.sleep(0.5)

    threading.Thread(target=watch, name="explorer-orphan-watch", daemon=True).start()


def _worker_main(job: dict[str, Any]) -> None:
    """Entry point of a spawned worker process."""
    with GracefulInterrupt() as stop:  # from the start: the parent may forward a stop at any time
        _quiet()
        _stop_when_orphaned(stop, job.get("parent"))
        try:
            space = with_unit(space_from_text(job["space_text"], job["space_where"]), job.get("unit"))
            sampler = make_sampler(job["sampler"], job["seed"], space.search.population_size, job.get("startup", 10))
            storage, study = open_study(space, job["spec"], job["study"], sampler=sampler, create=False)
            if stop.requested:
                sys.exit(130)
            _, interrupted = run_trials(space, study, storage, job["n"], job["batch"], stop=stop)
        except KeyboardInterrupt:
            sys.exit(130)
    if interrupted:
        sys.exit(130)


def optimize(
    space: SearchSpace,
    spec: StorageSpec,
    study_name: str,
    *,
    trials: int,
    sampler: str,
    seed: int,
    workers: int = 1,
    progress: bool = False,
) -> SearchRun:
    """Run ``trials`` new trials on the study (creating it if needed)."""
    _quiet()
    t0 = time.perf_counter()
    storage, study = open_study(space, spec, study_name)
    before = len(study.get_trials(deepcopy=False))
    batch = batch_size(space, sampler)
    bar = _progress(trials, progress)
    interrupted = False
    run = 0
    try:
        if workers <= 1:
            study.sampler = make_sampler(sampler, derive_seed(seed, before, 0), space.search.population_size,
                                         tpe_startup(before + trials))
            last = [0]

            def tick(done: int) -> None:
                bar.update(done - last[0])
                last[0] = done

            run, interrupted = run_trials(space, study, storage, trials, batch, tick)
        else:
            run, interrupted = _run_workers(space, spec, study, study_name, trials, sampler, seed, before, workers,
                                            batch, bar)
    finally:
        bar.close()
    return SearchRun(study, spec.describe(), before, run, interrupted, time.perf_counter() - t0)


def _run_workers(space, spec, study, study_name, trials, sampler, seed, before, workers, batch, bar):
    ctx = mp.get_context("spawn")
    share = [trials // workers + (1 if i < trials % workers else 0) for i in range(workers)]
    procs = []
    # a signal while a worker is being started must not cut its start-up data short: it is noted,
    # and acted on once every started worker can be told to stop
    with GracefulInterrupt() as starting:
        for i, n in enumerate(share):
            if n == 0 or starting.requested:
                continue
            job = {"space_where": space.where, "space_text": space.text, "sampler": sampler,
                   "seed": derive_seed(seed, before, i + 1), "spec": spec, "study": study_name, "n": n,
                   "batch": batch, "startup": tpe_startup(before + trials), "parent": os.getpid(),
                   "unit": space.search.trial_unit}
            p = ctx.Process(target=_worker_main, args=(job,), name=f"explorer-sweep-{i}")
            p.start()
            procs.append(p)
    interrupted = False
    shown = 0
    try:
        if starting.requested:
            raise KeyboardInterrupt
        while alive := [p for p in procs if p.is_alive()]:
            alive[0].join(timeout=0.5)
            if bar.total:
                now = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))) - before
                bar.update(max(0, min(now, trials) - shown))
                shown = max(shown, min(now, trials))
    except KeyboardInterrupt:  # Ctrl-C (the workers got it too) or SIGTERM (only this process did)
        interrupted = True
        if FORWARD_SIGNAL is not None:
            for p in procs:  # "finish your batch and stop"; never escalates to an immediate stop
                if p.is_alive() and p.pid is not None:
                    try:
                        os.kill(p.pid, FORWARD_SIGNAL)
                    except ProcessLookupError:
                        pass
        for p in procs:
            p.join()
    codes = [p.exitcode for p in procs]
    if any(c == 130 for c in codes):
        interrupted = True
    bad = [(i, c) for i, c in enumerate(codes) if c not in (0, 130)]
    if bad and not interrupted:
        raise SpecError("--workers", None, "sweep worker(s) failed: " + ", ".join(f"#{i} exit {c}" for i, c in bad)
                        + " (their error is above); the trials they finished are kept")
    run = len(study.get_trials(deepcopy=False)) - before
    return run, interrupted


class _NoBar:
    total = 0

    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, enabled: bool):
    if not enabled or total <= 0:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, unit="trial", file=sys.stderr, dynamic_ncols=True, leave=False)


# --------------------------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------------------------


def study_frame(space: SearchSpace, study: optuna.Study) -> tuple[pd.DataFrame, dict[str, int]]:
    """The results table of every COMPLETE trial (sorted by trial number) and counts of trials by state."""
    all_trials = study.get_trials(deepcopy=False)
    states: dict[str, int] = {}
    for t in all_trials:
        states[t.state.name] = states.get(t.state.name, 0) + 1
    complete = [t for t in all_trials if t.state == TrialState.COMPLETE]
    done = sorted((t for t in complete if _usable(space, t.params)), key=lambda t: t.number)
    if len(done) < len(complete):  # parameters lost with damaged journal lines (explorer.journal)
        states["COMPLETE"] -= len(complete) - len(done)
        states["DAMAGED"] = len(complete) - len(done)
    if trial_unit(space) == "shape":  # every trial's shape re-scanned: its own front rows (explorer/shapes.py)
        from explorer.shapes import shared_scanner

        return shared_scanner(space).frame([t.params for t in done], [t.number for t in done]), states
    df = space.score(samples_from_params(space, [t.params for t in done]), len(done))
    df.insert(0, "trial", np.array([t.number for t in done], dtype=np.int64))
    return df, states
