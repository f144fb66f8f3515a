"""Benchmark `explorer validate`'s two heavy steps against their one-at-a-time baselines, measured in
the same run.

Plain script: ``python benchmarks/bench_validate.py [--repeats 3]``.  Prints seconds and ratios;
asserts nothing about speed (tests/test_systems.py checks the batched search gives the same answers).

* MLPerf split search: the 64 system rows of ``validation/mlperf.yaml`` (Offline at saturation,
  Server/Interactive at the highest rate meeting their p99 limits), each over its candidate
  deployments, as :func:`explorer.systems.best_systems` runs them (one simulator call per phase for
  all rows) against one :func:`explorer.systems.best_system` call per row (the path before, ~5
  simulator calls per row);
* YAML: reading each shipped validation file with the strict loader on libyaml's parser against
  the same loader on PyYAML's pure-Python parser;
* end to end: ``validate()`` on each shipped validation file, one process (imports excluded).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from explorer import specio  # noqa: E402
from explorer.hardware import load_hardware  # noqa: E402
from explorer.runtime import load_runtime  # noqa: E402
from explorer.systems import best_system, best_systems  # noqa: E402
from explorer.validate import DEFAULT_RUNTIME, load_cases, system_request, validate  # noqa: E402

FILES = ("measurements", "fronts", "kernels", "mlperf")


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def system_requests():
    """The split-search requests `validate` makes for mlperf.yaml."""
    return [system_request(c, load_hardware(c.hardware), load_runtime(c.values.get("runtime") or DEFAULT_RUNTIME))
            for c in load_cases(ROOT / "validation" / "mlperf.yaml") if c.supported and c.kind == "system"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    reqs = system_requests()
    best_systems(reqs[:4], "validate")  # warm-up: lazy imports (scipy.special) outside the timings
    one_by_one: list = []
    batched: list = []
    t_one = best_of(lambda: one_by_one.__setitem__(slice(None), [
        best_system(q.values, q.hw, q.rt, q.gpus, experts=q.experts, ttft_limit_s=q.ttft_limit_s,
                    tpot_limit_s=q.tpot_limit_s, deployments=q.deployments, request_s=q.request_s,
                    where="validate") for q in reqs]), args.repeats)
    t_batch = best_of(lambda: batched.__setitem__(slice(None), best_systems(reqs, "validate")), args.repeats)
    same = "same answers" if one_by_one == batched else "ANSWERS DIFFER"
    print(f"MLPerf split search, {len(reqs)} systems: one at a time {t_one:.2f} s, batched {t_batch:.2f} s "
          f"-> {t_one / t_batch:.1f}x ({same})")

    for name in FILES:
        text = (ROOT / "validation" / f"{name}.yaml").read_text(encoding="utf-8")
        t_py = best_of(lambda text=text: yaml.load(text, Loader=specio._StrictLoader), args.repeats)  # noqa: S506
        if specio._FastStrictLoader is None:
            print(f"YAML {name}.yaml: pure-Python parser {t_py:.2f} s (PyYAML has no libyaml here)")
            continue
        t_c = best_of(lambda text=text, name=name: specio.parse_yaml_text(text, name), args.repeats)
        print(f"YAML {name}.yaml ({len(text) / 1e3:,.0f} kB): pure-Python parser {t_py:.3f} s, libyaml {t_c:.3f} s "
              f"-> {t_py / t_c:.1f}x")

    for name in FILES:
        path = ROOT / "validation" / f"{name}.yaml"
        t = best_of(lambda path=path: validate(path), 1)
        print(f"validate {name}.yaml: {t:.2f} s")


if __name__ == "__main__":
    main()
