"""``explorer sweep --sampler grid --cluster dask://HOST:PORT`` on a real Dask cluster.

The module starts its own cluster: ``dask scheduler`` and ``dask worker --nworkers 2`` as
subprocesses on 127.0.0.1 (what docs/sweeps.md tells users to run on their machines), and the
CLI connects to the scheduler's address.  The grid's results must be identical on the cluster, on
local worker processes and in one process.  Needs ``distributed`` (in the ``test`` extra): without
it the tests skip locally and fail under CI (``CI`` set).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import stop_process
from test_space import space_from

import explorer.cluster as cluster
import explorer.grid as grid
from explorer.cli import main
from explorer.errors import SpecError
from explorer.space import load_space

ROOT = Path(__file__).resolve().parent.parent


def _need_distributed():
    try:
        import distributed
    except ImportError:
        msg = "Dask distributed is not installed: pip install -e '.[test]'"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return distributed


def _stop(proc: subprocess.Popen) -> None:
    stop_process(proc, 20.0)


def _env() -> dict[str, str]:
    """explorer (and this test module, for the probe test) importable where the cluster runs."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), str(ROOT / "tests"), env.get("PYTHONPATH")) if p)
    return env


def _start_scheduler(tmp: Path, log) -> tuple[subprocess.Popen, str]:
    """``dask scheduler`` on 127.0.0.1, a free port; (process, tcp:// address)."""
    sched_file = tmp / "scheduler.json"
    proc = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                             "--port", "0", "--no-dashboard", "--scheduler-file", str(sched_file)],
                            cwd=tmp, env=_env(), stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while True:
        try:
            return proc, json.loads(sched_file.read_text())["address"]
        except (OSError, ValueError, KeyError):  # not written (completely) yet
            if time.monotonic() > deadline or proc.poll() is not None:
                _stop(proc)
                pytest.fail(f"the Dask scheduler did not start: {Path(log.name).read_text()[-2000:]}")
            time.sleep(0.2)


@pytest.fixture(scope="module")
def dask_url(tmp_path_factory):
    """``dask://127.0.0.1:PORT`` of a scheduler with two single-thread worker processes."""
    distributed = _need_distributed()
    tmp = tmp_path_factory.mktemp("dask")
    env = _env()
    logs = [open(tmp / "scheduler.log", "wb"), open(tmp / "worker.log", "wb")]
    procs: list[subprocess.Popen] = []
    try:
        proc, address = _start_scheduler(tmp, logs[0])
        procs.append(proc)
        procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--nworkers", "2",
                                       "--nthreads", "1", "--memory-limit", "2GiB", "--no-dashboard",
                                       "--death-timeout", "60", "--local-directory", str(tmp)],
                                      cwd=tmp, env=env, stdout=logs[1], stderr=subprocess.STDOUT))
        with distributed.Client(address, timeout=30, set_as_default=False) as client:
            client.wait_for_workers(2, timeout=90)
        yield "dask://" + address.removeprefix("tcp://")
    finally:
        for p in reversed(procs):
            _stop(p)
        for f in logs:
            f.close()


def _task_workers(url: str, since: float) -> list[str]:
    """Workers that ran explorer's chunks since ``since`` (the scheduler's task stream)."""
    import distributed

    with distributed.Client(cluster.parse_cluster(url).address, timeout=30, set_as_default=False) as client:
        return [t["worker"] for t in client.get_task_stream(start=since) if str(t["key"]).startswith("explorer-")]


@pytest.fixture
def space(tmp_path):
    return load_space(space_from(tmp_path, {"shape.kv_heads": [4, 8, 16], "search.grid_sample": 50}))


def test_grid_on_the_cluster_is_identical_to_local_processes_and_one_process(dask_url, space, monkeypatch):
    import distributed

    with distributed.Client(cluster.parse_cluster(dask_url).address, timeout=30, set_as_default=False) as client:
        client.get_task_stream()  # start recording
    since = time.time()
    one = grid.run_grid(space, chunk=37)
    on_cluster = grid.run_grid(space, chunk=37, cluster=cluster.parse_cluster(dask_url))
    local = grid.run_grid(space, chunk=37, workers=2)
    for other in (on_cluster, local):
        pd.testing.assert_frame_equal(one.frame, other.frame)
        assert (other.total, other.feasible, other.reason_counts) == (one.total, one.feasible, one.reason_counts)
    ran = _task_workers(dask_url, since)
    chunks = -(-one.total // 37)
    assert len(ran) == chunks and len(set(ran)) == 2  # every chunk ran on the cluster, on both workers
    # the front + sample path, other chunk sizes
    monkeypatch.setattr(grid, "KEEP_ALL_MAX", 10)
    big = grid.run_grid(space, chunk=500)
    for chunk in (29, 200):
        pd.testing.assert_frame_equal(big.frame, grid.run_grid(space, chunk=chunk,
                                                               cluster=cluster.parse_cluster(dask_url)).frame)
    assert not big.kept_all and set(big.frame["kept"]) == {"front", "sample"}


def test_cli_cluster_writes_the_same_csv_as_workers(dask_url, tmp_path):
    path = space_from(tmp_path, {"shape.kv_heads": [4, 8, 16]})
    base = ["sweep", str(path), "--sampler", "grid", "--no-report", "--study", "g"]
    assert main([*base, "--cluster", dask_url, "--out", str(tmp_path / "c")]) == 0
    assert main([*base, "--workers", "2", "--out", str(tmp_path / "w")]) == 0
    assert (tmp_path / "c" / "g.csv").read_bytes() == (tmp_path / "w" / "g.csv").read_bytes()


def _pid_chunk(space, start, stop):
    """A chunk function whose answer depends on the process: the probe must refuse it."""
    return os.getpid()


def test_workers_that_score_differently_are_refused(dask_url, space):
    with pytest.raises(SpecError, match=r"--cluster: worker tcp://127\.0\.0\.1:\d+ scores .* differently"):
        with cluster.DaskCluster(cluster.parse_cluster(dask_url)) as c:
            c.check(space, _pid_chunk, 10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("value, why", [
    ("ray://127.0.0.1:10001", "scheme 'ray://' is not supported"),
    ("127.0.0.1:8786", "is not a cluster address"),
    ("dask://127.0.0.1", "has no usable HOST:PORT"),
    ("dask://127.0.0.1:70000", "has no usable HOST:PORT"),
    ("dask://", "has no usable HOST:PORT"),
    ("unreachable", "cannot reach a Dask scheduler"),
])
def test_bad_cluster_values_are_one_line_errors_and_write_nothing(tmp_path, value, why):
    if value == "unreachable":
        _need_distributed()
        value = f"dask://127.0.0.1:{_free_port()}"  # nothing listens there
    path = space_from(tmp_path, {"shape.kv_heads": [4, 8, 16]})
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "explorer", "sweep", str(path), "--sampler", "grid", "--cluster", value,
                        "--out", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("explorer sweep: error: --cluster: "), r.stderr
    assert value in lines[0] and why in lines[0] and "allowed: dask://HOST:PORT" in lines[0]
    assert r.stdout == "" and not out.exists()


def test_a_port_that_is_no_dask_scheduler_is_refused(tmp_path, monkeypatch, capsys):
    _need_distributed()
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 1.0)
    with socket.socket() as srv:  # accepts TCP connections (backlog) but never speaks Dask
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        url = f"dask://127.0.0.1:{srv.getsockname()[1]}"
        path = space_from(tmp_path, {"shape.kv_heads": [4, 8, 16]})
        assert main(["sweep", str(path), "--sampler", "grid", "--cluster", url, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"--cluster: '{url}' answers but is not a Dask scheduler" in err and not (tmp_path / "o").exists()


def test_a_scheduler_without_workers_is_refused(tmp_path, monkeypatch, capsys):
    _need_distributed()
    monkeypatch.setattr(cluster, "WORKER_WAIT_S", 1.0)
    with open(tmp_path / "scheduler.log", "wb") as log:
        proc, address = _start_scheduler(tmp_path, log)
        try:
            url = "dask://" + address.removeprefix("tcp://")
            path = space_from(tmp_path, {"shape.kv_heads": [4, 8, 16]})
            out = tmp_path / "out"
            assert main(["sweep", str(path), "--sampler", "grid", "--cluster", url, "--out", str(out)]) == 2
        finally:
            _stop(proc)
    err = capsys.readouterr().err
    assert f"--cluster: the Dask scheduler at '{url}' has no workers after 1 s" in err and not out.exists()


@pytest.mark.parametrize("extra, why", [
    (["--sampler", "tpe"], "runs the exhaustive grid (--sampler grid), not the tpe sampler"),
    (["--sampler", "grid", "--workers", "2"], "give --cluster or --workers, not both"),
])
def test_cluster_with_a_study_or_workers_is_refused(tmp_path, capsys, extra, why):
    path = space_from(tmp_path, {"shape.kv_heads": [4, 8, 16]})
    out = tmp_path / "out"
    assert main(["sweep", str(path), *extra, "--cluster", "dask://127.0.0.1:8786", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--cluster: {why}" in err and not out.exists()


def test_an_interrupted_cluster_grid_resumes_from_its_checkpoint(dask_url, space, tmp_path, monkeypatch):
    """The sweep's side stops after five chunks came back from the cluster (a Ctrl-C there); the
    rerun on the cluster scores only the rest, and the merged result is the one process's."""
    from explorer.grid_checkpoint import GridCheckpoint

    want = grid.run_grid(space, chunk=37)
    ckpt = tmp_path / "g.grid-checkpoint"
    real_add = GridCheckpoint.add
    added: list[int] = []

    def add_five(self, i, c, keep=None):
        if len(added) == 5:
            raise KeyboardInterrupt
        added.append(i)
        real_add(self, i, c, keep)

    monkeypatch.setattr(GridCheckpoint, "add", add_five)
    with pytest.raises(KeyboardInterrupt):
        grid.run_grid(space, chunk=37, cluster=cluster.parse_cluster(dask_url), checkpoint=ckpt)
    assert len(ckpt.read_text().splitlines()) == 1 + 5  # header + the five finished chunks
    monkeypatch.setattr(GridCheckpoint, "add", real_add)
    got = grid.run_grid(space, chunk=37, cluster=cluster.parse_cluster(dask_url), checkpoint=ckpt)
    assert got.chunks_resumed == 5 and got.chunks_run == want.chunks_run - 5
    pd.testing.assert_frame_equal(want.frame, got.frame)
    assert (got.total, got.feasible, got.reason_counts) == (want.total, want.feasible, want.reason_counts)
