"""The simulator's speed-ups change no figure, bit for bit: GEMM costs carried between the
closed-loop passes (``EXPLORER_REUSE``, explorer/engine/hardware_columns.py ``HardwareColumns.run_gemms``) against recomputing
every GEMM, on the numpy reference path and the compiled one; and the memo's partial recomputation
against a fresh call, field by field."""

from __future__ import annotations

import numpy as np
import pytest
import speed_reference as R

from explorer.costs.gemm import GemmCost
from explorer.design import build_design
from explorer.simulate import _prepare, simulate

#: the frozen tables, cut to keep the test short (every kind of row is still there)
ROWS = {"random": 6_000, "runtimes": 3_000, "open": 1_500, "spec": 1_500, "mtp": 600}


@pytest.fixture(scope="module")
def designs():
    out = {}
    for name, v in R.tables().items():
        n = ROWS[name]
        v = {k: (np.asarray(x)[:n] if np.ndim(x) else x) for k, x in v.items()}
        out[name] = build_design(v, "paths")
    return out


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]), err_msg=k)


@pytest.mark.parametrize("name", list(ROWS))
def test_reuse_between_passes_changes_nothing(designs, name, gemm_path, monkeypatch):
    design, table = designs[name]
    monkeypatch.setenv("EXPLORER_REUSE", "0")
    fresh = simulate(design, table)
    monkeypatch.setenv("EXPLORER_REUSE", "1")
    _same(simulate(design, table), fresh)


def test_memo_recomputes_exactly_the_moved_gemms(designs, gemm_path):
    """Two calls from one site, the second with a share of the batches moved: every field equals a
    call without the memo; and the first call's inputs again give its figures back."""
    design, table = designs["random"]
    one = {k: v for k, v in design.items()}
    idx = np.asarray(one["hw_idx"])
    keep = idx == idx[0]  # one hardware kind per HardwareColumns
    one = {k: (np.asarray(v)[keep] if np.ndim(v) else v) for k, v in one.items()}
    env = _prepare(one, table)
    s, hw = env["s"], env["hw"]
    n = len(s.H)
    rng = np.random.default_rng(1)

    def requests(m):
        return [(m, s.n_in, s.H, s.b_a, s.b_w, s.b_a, 1.0, None, False),
                (m, s.g * s.F / s.t, s.H, s.b_a, s.b_w, s.b_a, 1.0, None, False),
                (m, s.V / s.t, s.H, s.b_a, 2.0, 4.0, 1.0, hw.bf16_peak, False),
                (m * 0.3, s.g * s.Fe / s.te, s.H, s.b_a, s.b_w, s.b_a, np.maximum(s.E_loc * 0.5, 0.0), None, True)]

    m1 = rng.integers(1, 600, n).astype(float)
    m2 = np.where(rng.random(n) < 0.3, m1 + rng.integers(1, 50, n), m1)
    first = [GemmCost(*(np.array(f) for f in vars(g).values())) for g in hw.run_gemms(requests(m1), site="t")]
    second = hw.run_gemms(requests(m2), site="t")
    want = hw.run_gemms(requests(m2))
    for got, ref in zip(second, want, strict=True):
        for f in vars(ref):
            np.testing.assert_array_equal(getattr(got, f), getattr(ref, f), err_msg=f)
    again = hw.run_gemms(requests(m1), site="t")
    for got, ref in zip(again, first, strict=True):
        for f in vars(ref):
            np.testing.assert_array_equal(getattr(got, f), getattr(ref, f), err_msg=f)


def test_columns_passed_again_are_kept_and_a_new_column_is_restacked(designs, gemm_path):
    """run_gemms keeps the stacked columns a site passes again -- the very same arrays, as the
    engine's shape and hardware columns in every closed-loop pass -- and costs only the moved token
    counts (the memo compares M and the groups alone then); a column passed as a new array is
    stacked again and compared whole.  Every call equals a call without the memo, field by field."""
    design, table = designs["random"]
    idx = np.asarray(design["hw_idx"])
    keep = idx == idx[0]
    one = {k: (np.asarray(v)[keep] if np.ndim(v) else v) for k, v in design.items()}
    env = _prepare(one, table)
    s, hw = env["s"], env["hw"]
    n = len(s.H)
    rng = np.random.default_rng(2)
    n_up = s.g * s.F / s.t  # one array, passed again by every call below but the third

    def requests(m, up):
        return [(m, s.n_in, s.H, s.b_a, s.b_w, s.b_a, 1.0, None, False),
                (m, up, s.H, s.b_a, s.b_w, s.b_a, 1.0, None, False),
                (m * 0.3, s.g * s.Fe / s.te, s.H, s.b_a, s.b_w, s.b_a, np.maximum(s.E_loc * 0.5, 0.0), None, True)]

    m1 = rng.integers(1, 600, n).astype(float)
    m2 = np.where(rng.random(n) < 0.3, m1 + rng.integers(1, 50, n), m1)
    calls = [(m1, n_up), (m2, n_up), (m2, n_up * 2.0), (m1, n_up), (m1, n_up)]
    for m, up in calls:
        got = hw.run_gemms(requests(m, up), site="kept")
        want = hw.run_gemms(requests(m, up))
        for g, w in zip(got, want, strict=True):
            for f in vars(w):
                np.testing.assert_array_equal(getattr(g, f), getattr(w, f), err_msg=f)


def test_same_source_is_identity_for_arrays_and_value_for_numbers():
    from explorer.engine.hardware_columns import _same_source

    a = np.arange(3.0)
    assert _same_source(a, a)
    assert not _same_source(a, a.copy())  # equal values, another array: stacked again
    assert not _same_source(a, 1.0) and not _same_source(1.0, a)
    assert _same_source(1.0, 1.0) and _same_source(None, None)
    assert not _same_source(1.0, 2.0)
    assert not _same_source(1, 1.0)  # an int column and a float one are stacked as given


def test_allocator_tuning_is_applied_once_and_can_be_refused():
    """explorer/allocator.py: the first simulate call sets glibc's mmap/trim thresholds (Linux glibc;
    elsewhere it reports False and changes nothing); ``EXPLORER_MALLOPT=0`` leaves the allocator
    alone.  Run in fresh interpreters: the setting is process-wide and permanent."""
    import os
    import platform
    import subprocess
    import sys

    code = ("import numpy as np, explorer.allocator as A; from explorer.api import evaluate; "
            "assert A._applied is None; evaluate('llama-3.1-8b', 'h200'); print(A._applied, A.keep_freed_memory())")
    on = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    glibc = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
    assert on == ([str(glibc)] * 2)
    off = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "EXPLORER_MALLOPT": "0"}).stdout.split()
    assert off == ["False", "False"]


@pytest.mark.parametrize("name", list(ROWS))
def test_chunking_changes_nothing(designs, name, gemm_path, monkeypatch):
    """Large tables run in chunks of ``CHUNK_ROWS`` rows (explorer/simulate.py): every row is scored on
    its own, so any chunk size gives the same figures, bit for bit (chunks of 257 rows against one call)."""
    import explorer.simulate as sim

    design, table = designs[name]
    monkeypatch.setattr(sim, "CHUNK_ROWS", 10**9)
    whole = simulate(design, table)
    monkeypatch.setattr(sim, "CHUNK_ROWS", 257)
    _same(simulate(design, table), whole)


@pytest.mark.parametrize("name", ["runtimes", "open", "spec"])
def test_a_row_scores_the_same_alone_and_in_any_table(designs, name, gemm_path):
    """A design's figures do not depend on the other rows it is scored with, bit for bit: every
    result column of sampled rows scored one at a time against the same rows in a table that mixes
    closed-loop rows with open-loop ones (whose extra fixed-point passes once recosted the closed
    rows too), attention-DP rows with plain ones, and speculative rows with plain ones."""
    design, table = designs[name]
    n = len(design["hidden"])
    mixed = {k: (np.array(v, copy=True) if np.ndim(v) else v) for k, v in design.items()}
    rng = np.random.default_rng(11)
    if name != "open":  # a fifth of the rows become open-loop ones
        rate = np.zeros(n) if "request_rate" not in mixed else np.asarray(mixed["request_rate"], dtype=float)
        mixed["request_rate"] = np.where(rng.random(n) < 0.2, rng.uniform(0.05, 20.0, n), rate)
    else:  # a fifth become closed-loop
        mixed["request_rate"] = np.where(rng.random(n) < 0.2, 0.0, np.asarray(mixed["request_rate"], dtype=float))
    whole = simulate(mixed, table)
    for i in rng.choice(n, 20, replace=False):
        alone = simulate({k: (np.asarray(v)[i:i + 1] if np.ndim(v) else v) for k, v in mixed.items()}, table)
        for k, v in alone.items():
            np.testing.assert_array_equal(np.asarray(v), np.asarray(whole[k])[i:i + 1], err_msg=f"{k} row {i}")
