"""Whole runs writing to a real S3 server (moto on loopback): killed and resumed, on a Dask cluster of
separate processes, and from tiles in the bucket; each cube bit for bit the local run's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import StorageConfig, load_config
from pipeline.errors import ConfigError
from pipeline.execute.runner import run
from tests.helpers import stop_dask, write_config
from tests.s3server import free_port, upload_tree
from tests.test_output_store import _cube_objects

SETS = ["output.chunks={y: 64, x: 64}", "execution.partition_mb=0.05"]  # the small_cube_64 fixture's


@pytest.fixture
def local_cube(small_cube_64: Any) -> dict[str, bytes]:
    """The objects of the local run's cube at SETS (the session's reference, run once)."""
    return _cube_objects(str(small_cube_64()), StorageConfig())


def _s3_config_file(tmp_path: Path, inputs: str, url: str, endpoint: str) -> Path:
    folder = tmp_path / "s3"
    folder.mkdir(exist_ok=True)
    return write_config(
        folder,
        inputs,
        storage={"endpoint_url": endpoint},
        output={"path": url},
        report={"path": str(folder / "report.json")},
    )


def _assert_same(ours: dict[str, bytes], ref: dict[str, bytes]) -> None:
    assert sorted(ours) == sorted(ref) and len(ref) > 20
    assert [k for k in ref if ours[k] != ref[k]] == []


def _journal(client: Any, bucket: str, prefix: str) -> int:
    listing = client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/.pipeline-journal/")
    return int(listing.get("KeyCount", 0))


def test_sigkill_during_an_s3_write_then_resume_gives_the_same_cube(
    tmp_path: Path, small_dir: Path, s3_server: Any, s3_bucket: str, local_cube: dict[str, bytes]
) -> None:
    url = f"s3://{s3_bucket}/cube.zarr"
    cfg = _s3_config_file(tmp_path, str(small_dir / "**" / "*.tif"), url, s3_server.endpoint_url)
    sets = [a for s in SETS for a in ("--set", s)] + ["--workers", "1"]
    client: Any = s3_server.client()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "run", str(cfg), "-q", *sets],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None and _journal(client, s3_bucket, "cube.zarr") < 3:
        time.sleep(0.05)
    if proc.poll() is not None:
        pytest.fail("the run finished before it could be killed; make the partitions smaller")
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and its whole local cluster
    proc.wait()
    storage = StorageConfig(endpoint_url=s3_server.endpoint_url)
    from pipeline.store.layout import store_is_complete

    assert not store_is_complete(url, storage)
    done_before = _journal(client, s3_bucket, "cube.zarr")

    r = subprocess.run(
        [sys.executable, "-m", "pipeline", "run", str(cfg), "-q", *sets, "--resume"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert store_is_complete(url, storage)
    report = json.loads((tmp_path / "s3" / "report.json").read_text())
    assert report["plan"]["resumed_done"] >= done_before >= 3
    assert len(report["tasks"]) == report["plan"]["partitions"] - report["plan"]["resumed_done"]
    _assert_same(_cube_objects(url, storage), local_cube)


def test_a_dask_cluster_of_separate_processes_writes_the_bucket(
    tmp_path: Path, small_dir: Path, s3_server: Any, s3_bucket: str, local_cube: dict[str, bytes]
) -> None:
    """``dask scheduler`` and two ``dask worker`` processes; the credentials are in their environment
    (their AWS chain), never in the task graph or the report."""
    port = free_port()
    dask = str(Path(sys.executable).with_name("dask"))
    procs = [
        subprocess.Popen(
            [dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    try:
        for _ in range(2):
            procs.append(
                subprocess.Popen(
                    [
                        dask,
                        "worker",
                        f"tcp://127.0.0.1:{port}",
                        "--nthreads",
                        "1",
                        "--host",
                        "127.0.0.1",
                        "--no-dashboard",
                        "--no-nanny",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        from distributed import Client

        with Client(f"tcp://127.0.0.1:{port}", timeout="60s") as c:
            c.wait_for_workers(2, timeout=60)
        url = f"s3://{s3_bucket}/cluster.zarr"
        cfg = load_config(
            _s3_config_file(tmp_path, str(small_dir / "**" / "*.tif"), url, s3_server.endpoint_url),
            [*SETS, f"execution.scheduler=tcp://127.0.0.1:{port}"],
        )
        result = run(cfg)
        assert result.exit_code == 0
        assert len({t["worker"] for t in result.report["tasks"]}) == 2
        assert os.environ["AWS_SECRET_ACCESS_KEY"] not in json.dumps(result.report, default=str)
        storage = StorageConfig(endpoint_url=s3_server.endpoint_url)
        _assert_same(_cube_objects(url, storage), local_cube)
    finally:
        stop_dask(procs)


def test_s3_inputs_to_s3_output_give_the_local_cube(
    tmp_path: Path, small_dir: Path, s3_server: Any, s3_bucket: str, local_cube: dict[str, bytes]
) -> None:
    """Tiles in the bucket, cube in the bucket. Needs ``s3://`` globs and reads on the input side
    (catalog.py, read.py); skipped, saying so, where those are not there."""
    upload_tree(s3_server.client(), small_dir, s3_bucket, "tiles")
    url = f"s3://{s3_bucket}/cube.zarr"
    cfg = load_config(_s3_config_file(tmp_path, f"s3://{s3_bucket}/tiles/**/*.tif", url, s3_server.endpoint_url), SETS)
    try:
        result = run(cfg)
    except ConfigError as e:
        if e.key.startswith("inputs"):
            pytest.skip(f"s3:// inputs not supported on this branch yet (input side of issue 19): {e}")
        raise
    assert result.exit_code == 0, result.report["inputs"]["skipped"]
    storage = StorageConfig(endpoint_url=s3_server.endpoint_url)
    ours = _cube_objects(url, storage)
    ref = dict(local_cube)
    ours.pop("attrs"), ref.pop("attrs")  # the settings name the input glob: the cube's bytes do not
    _assert_same(ours, ref)


def test_workers_get_credentials_set_after_the_fork_server(
    tmp_path: Path, small_dir: Path, s3_server: Any, s3_bucket: str
) -> None:
    """A long-lived process (a notebook) runs once, then gets credentials (or fresh ones), then writes a
    bucket: its local workers, forked from a server started before, must see the credentials as they are."""
    from tests.s3server import TEST_CREDENTIALS

    local = write_config(tmp_path, str(small_dir / "**" / "*.tif"))
    url = f"s3://{s3_bucket}/later.zarr"
    remote = _s3_config_file(tmp_path, str(small_dir / "**" / "*.tif"), url, s3_server.endpoint_url)
    script = (
        "import os, sys\n"
        "from pipeline.config import load_config\n"
        "from pipeline.execute.runner import run\n"
        f"assert run(load_config({str(local)!r})).exit_code == 0\n"
        f"os.environ.update({TEST_CREDENTIALS!r})\n"
        f"assert run(load_config({str(remote)!r})).exit_code == 0\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert os.environ["AWS_SECRET_ACCESS_KEY"] not in r.stderr + r.stdout


def test_a_wrong_output_bucket_exits_2_naming_bucket_endpoint_and_what_to_check(
    tmp_path: Path, small_dir: Path, s3_server: Any
) -> None:
    cfg = _s3_config_file(
        tmp_path, str(small_dir / "**" / "*.tif"), "s3://no-such-out-bucket/cube.zarr", s3_server.endpoint_url
    )
    r = subprocess.run(
        [sys.executable, "-m", "pipeline", "run", str(cfg), "-q"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr  # one message, no XML body, no traceback
    assert lines[0].startswith("error: config key 'output.path': ")
    assert "'no-such-out-bucket' does not exist" in lines[0] and s3_server.endpoint_url in lines[0]
    assert "check the bucket name" in lines[0] and "storage.endpoint_url" in lines[0]
    assert "<?xml" not in r.stderr and os.environ["AWS_SECRET_ACCESS_KEY"] not in r.stderr
