"""A real Dask cluster: `dask scheduler` and two `dask worker` processes on loopback."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from tests.helpers import stop_dask, write_config

BIN = os.path.dirname(sys.executable)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    """Scheduler on a random loopback port, two single-threaded workers; torn down after."""
    sched_file = tmp_path / "scheduler.json"
    env = os.environ | {"DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
    procs = [
        subprocess.Popen(
            [
                os.path.join(BIN, "dask"),
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(sched_file),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
    ]
    try:
        deadline = time.time() + 60
        while not sched_file.exists() and time.time() < deadline:
            time.sleep(0.2)
        address = json.loads(sched_file.read_text())["address"]
        assert re.match(r"tcp://127\.0\.0\.1:\d+", address)
        for i in range(2):
            procs.append(
                subprocess.Popen(
                    [
                        os.path.join(BIN, "dask"),
                        "worker",
                        address,
                        "--nthreads",
                        "1",
                        "--nworkers",
                        "1",
                        "--name",
                        f"w{i}",
                        "--no-dashboard",
                        "--host",
                        "127.0.0.1",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    env=env,
                )
            )
        from distributed import Client

        with Client(address, timeout="30s") as c:
            c.wait_for_workers(2, timeout=60)
        yield address
    finally:
        stop_dask(procs)


def test_run_on_a_real_cluster_matches_local(tmp_path: Path, small_dir: Path, cluster: str) -> None:
    remote = write_config(tmp_path, str(small_dir / "**" / "*.tif"))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            "run",
            str(remote),
            "-q",
            "--scheduler",
            cluster,
            "--set",
            "execution.partition_mb=0.5",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    local_dir = tmp_path / "local"
    local_dir.mkdir()
    local = write_config(local_dir, str(small_dir / "**" / "*.tif"))
    r = subprocess.run(
        [sys.executable, "-m", "pipeline", "run", str(local), "-q", "--workers", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    a = zarr.open_group(str(tmp_path / "out.zarr"), mode="r")
    b = zarr.open_group(str(local_dir / "out.zarr"), mode="r")
    for band in ("B01", "B02", "B04", "B11"):
        np.testing.assert_array_equal(a[band][:], b[band][:])
    report = json.loads((tmp_path / "out.report.json").read_text())
    assert report["execution"]["scheduler"] == cluster
    assert {name for name, w in report["workers"].items() if w["tasks"] > 0} == {"w0", "w1"}
    # The workers have no GPU: --device gpu is refused, never silently run on the CPU.
    gpu = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            "run",
            str(remote),
            "-q",
            "--scheduler",
            cluster,
            "--overwrite",
            "--device",
            "gpu",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert gpu.returncode == 2 and "no worker has a usable GPU" in gpu.stderr


def test_local_workers_are_forked_from_a_fork_server_on_linux() -> None:
    import dask

    from pipeline.execute.workers import worker_start_method

    if sys.platform.startswith("linux"):
        assert worker_start_method() == worker_start_method("spawn") == "forkserver"
    with dask.config.set({"distributed.worker.multiprocessing-method": "fork"}):
        assert worker_start_method() == "fork"  # an explicit choice is kept


def test_local_workers_tune_glibcs_allocator() -> None:
    """Forked workers cannot take allocator settings from the environment; warm-up sets them by mallopt."""
    import ctypes.util

    from pipeline.execute.warmup import warm_up
    from pipeline.execute.workers import tune_malloc

    glibc = (
        sys.platform.startswith("linux")
        and ctypes.util.find_library("c") is not None
        and os.confstr("CS_GNU_LIBC_VERSION")
    )
    assert tune_malloc() is bool(glibc)
    assert warm_up(local=True) == os.getpid()


def test_the_local_clusters_workers_run_without_distributeds_profiler(small_config: Any) -> None:
    """Its 10 ms stack sampling holds each worker's GIL; the report times the stages itself."""
    from pipeline.execute.schedulers import _start_client

    client, cluster = _start_client(small_config("execution.workers=1").execution, n_partitions=1)
    try:
        running = client.run(lambda dask_worker: sorted(dask_worker.periodic_callbacks))
        assert running and all("profile" not in names for names in running.values()), running
    finally:
        client.close()
        cluster.close()
