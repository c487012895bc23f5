"""``pipeline update`` of a cube in a bucket (moto's S3 server on loopback): an appended and an inserted date
(the kept dates copied by the bucket into the other key namespace) give a full run's cube object for object;
readers polling ``xarray.open_zarr`` through the bucket during a slowed update see the cube before or after;
an update killed mid-way (SIGKILL of its process group) leaves the cube as it was, and the next one
completes it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

import pipeline
from pipeline.config import load_config
from pipeline.storage import zarr_store
from tests.helpers import write_config
from tests.test_update import GATED, add_date, check_view, chunk_objects, config, make_inputs, slowed_update


def s3_config(tmp_path: Path, inputs: Path, url: str, endpoint: str, *sets: str) -> Any:
    folder = tmp_path / "s3"
    folder.mkdir(exist_ok=True)
    path = write_config(
        folder,
        str(inputs / "**" / "*.tif"),
        storage={"endpoint_url": endpoint},
        output={"path": url},
        report={"path": str(folder / "report.json")},
        execution={"scheduler": "threads"},
    )
    return load_config(path, list(sets))


def objects(client: Any, bucket: str, prefix: str) -> dict[str, tuple[str, Any]]:
    """(ETag, LastModified) of every object under ``prefix``."""
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        for o in page.get("Contents", []):
            out[o["Key"][len(prefix) + 1 :]] = (o["ETag"], o["LastModified"])
    return out


def chunks_by_date(client: Any, bucket: str, prefix: str) -> dict[tuple[str, str, str], bytes]:
    """Every band chunk's bytes by (band, date, "row/col"), whichever key namespace the cube uses."""
    root = json.loads(client.get_object(Bucket=bucket, Key=f"{prefix}/zarr.json")["Body"].read())
    meta = root["consolidated_metadata"]["metadata"]
    sep = meta["time"]["chunk_key_encoding"]["configuration"]["separator"]
    raw = client.get_object(Bucket=bucket, Key=f"{prefix}/time/c{sep}0")["Body"].read()
    times = [str(t)[:10] for t in np.frombuffer(raw, "<i8")[: meta["time"]["shape"][0]].astype("datetime64[s]")]
    out = {}
    for band, m in meta.items():
        if m.get("dimension_names") != ["time", "y", "x"]:
            continue
        s = m["chunk_key_encoding"]["configuration"]["separator"]
        start = f"{prefix}/{band}/c{s}"
        for key in objects(client, bucket, f"{prefix}/{band}"):
            full = f"{prefix}/{band}/{key}"
            if full.startswith(start):
                t, y, x = full[len(start) :].split(s)
                if int(t) < m["shape"][0]:
                    out[(band, times[int(t)], f"{y}/{x}")] = client.get_object(Bucket=bucket, Key=full)["Body"].read()
    return out


def full_run_chunks(tmp_path: Path, inputs: Path, full: Any = None) -> dict[tuple[str, str, str], bytes]:
    """A full run's chunks over ``inputs`` as :func:`chunks_by_date` keys them, the run made on local disk
    (``full``: one made already): the same tiles give the same bits wherever the cube is written."""
    full = full or pipeline.run(config(tmp_path, inputs, "full.zarr"), overwrite=True)
    return {(b, d, f"{y}/{x}"): v for (b, d, y, x), v in chunk_objects(Path(full.config.output.path)).items()}


def test_update_in_a_bucket_equals_a_full_run(
    tmp_path: Path, small_dir: Path, s3_server: Any, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = s3_server.client()
    inputs = make_inputs(tmp_path, small_dir)
    cfg = s3_config(tmp_path, inputs, f"s3://{s3_bucket}/cube.zarr", s3_server.endpoint_url)
    pipeline.run(cfg)
    before = objects(client, s3_bucket, "cube.zarr")
    add_date(inputs, small_dir, "2024-06-21")
    r = pipeline.update(cfg)
    assert r.report["update"]["added"] == ["2024-06-21T00:00:00"]
    after = objects(client, s3_bucket, "cube.zarr")
    kept = {k: v for k, v in before.items() if k.startswith("B") and "/c/" in k}
    assert kept and all(after[k] == v for k, v in kept.items())  # not rewritten: same ETag, same LastModified
    add_date(inputs, small_dir, "2024-06-05")  # inserted: the kept dates copied by the bucket
    full = pipeline.run(config(tmp_path, inputs, "full.zarr"))
    expected = {
        str(t)[:10]: {b: ds[b].values[0] for b in ds.data_vars}
        for t, ds in xr.open_zarr(full.config.output.path).groupby("time")
    }
    seen = slowed_update(cfg, expected, monkeypatch, naive=False, target=zarr_store(cfg.output.path, cfg.storage))
    print(f"moto, insert: {len(seen)} looks, {len([s for s in seen if s is not None])} mixed")
    assert len(seen) >= GATED and [s for s in seen if s is not None] == []
    ours = xr.open_zarr(zarr_store(cfg.output.path, cfg.storage))
    assert [str(t)[:10] for t in ours.time.values] == ["2024-06-01", "2024-06-05", "2024-06-11", "2024-06-21"]
    assert check_view(zarr_store(cfg.output.path, cfg.storage), expected) is None
    assert chunks_by_date(client, s3_bucket, "cube.zarr") == full_run_chunks(tmp_path, inputs, full)
    before = objects(client, s3_bucket, "cube.zarr")
    assert pipeline.update(cfg).report["output"]["chunks_written"] == 0
    assert objects(client, s3_bucket, "cube.zarr") == before  # nothing new: not one object written


def test_sigkill_during_an_update_in_a_bucket(tmp_path: Path, small_dir: Path, s3_server: Any, s3_bucket: str) -> None:
    client = s3_server.client()
    inputs = make_inputs(tmp_path, small_dir)
    url = f"s3://{s3_bucket}/cube.zarr"
    cfg = s3_config(tmp_path, inputs, url, s3_server.endpoint_url, "execution.partition_mb=0.05")
    pipeline.run(cfg)
    root = client.get_object(Bucket=s3_bucket, Key="cube.zarr/zarr.json")["Body"].read()
    old = {
        str(t)[:10]: {b: ds[b].values[0] for b in ds.data_vars}
        for t, ds in xr.open_zarr(zarr_store(url, cfg.storage)).groupby("time")
    }
    for d in ("2024-06-05", "2024-06-21"):
        add_date(inputs, small_dir, d)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "update", str(tmp_path / "s3" / "config.yaml")]
        + ["--set", "execution.partition_mb=0.05", "-q"],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        listing = client.list_objects_v2(Bucket=s3_bucket, Prefix="cube.zarr/.pipeline-journal/pipeline-")
        if listing.get("KeyCount", 0) >= 2:
            break
        time.sleep(0.01)
    if proc.poll() is not None:
        pytest.fail(f"the update ended before it could be killed: {proc.stderr.read() if proc.stderr else ''}")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert client.get_object(Bucket=s3_bucket, Key="cube.zarr/zarr.json")["Body"].read() == root
    assert check_view(zarr_store(url, cfg.storage), old) is None  # as it was
    r = pipeline.update(cfg)
    assert r.report["plan"]["resumed_done"] >= 2
    assert chunks_by_date(client, s3_bucket, "cube.zarr") == full_run_chunks(tmp_path, inputs)


def test_a_held_lock_in_a_bucket_refuses_a_second_update(
    tmp_path: Path, small_dir: Path, s3_server: Any, s3_bucket: str
) -> None:
    """The lock is a conditional put (If-None-Match: *, which moto honours): a second update while one holds
    it is refused and writes nothing."""
    import socket

    from pipeline.errors import StoreError
    from pipeline.store.publish import LOCK

    client = s3_server.client()
    inputs = make_inputs(tmp_path, small_dir)
    cfg = s3_config(tmp_path, inputs, f"s3://{s3_bucket}/cube.zarr", s3_server.endpoint_url)
    pipeline.run(cfg)
    add_date(inputs, small_dir, "2024-06-21")
    held = {"host": socket.gethostname(), "pid": os.getppid(), "since": "then"}  # a live process, not this one
    client.put_object(Bucket=s3_bucket, Key=f"cube.zarr/{LOCK}", Body=json.dumps(held).encode())
    before = objects(client, s3_bucket, "cube.zarr")
    with pytest.raises(StoreError, match="another update holds it"):
        pipeline.update(cfg)
    assert objects(client, s3_bucket, "cube.zarr") == before


def test_a_bucket_lost_mid_update(tmp_path: Path, small_dir: Path, s3_server: Any, s3_bucket: str) -> None:
    """The bucket stops answering mid-update (a proxy in front of moto that, once cut, answers every
    request 403: obstore retries resets and 5xx for up to 3 minutes, which a test cannot wait out): the
    update fails (exit 1), the cube is as it was, and the next update, the bucket back, completes it into a
    full run's cube."""
    import socket as sockets

    from pipeline.errors import PipelineError
    from tests.faultproxy import LoopbackProxy, _read_request, forward

    class Cuttable(LoopbackProxy):
        cut = False
        puts = 0

        def _handle(self, conn: sockets.socket) -> None:
            with conn:
                request = _read_request(conn)
                if request is None:
                    return
                if request.startswith(b"PUT") and b"/.pipeline-journal/pipeline-" in request.split(b"\r\n", 1)[0]:
                    self.puts += 1
                    self.cut = self.cut or self.puts > 2
                if self.cut:
                    body = b"<Error><Code>AccessDenied</Code><Message>cut</Message></Error>"
                    conn.sendall(
                        b"HTTP/1.1 403 Forbidden\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body
                    )
                    return
                forward(conn, request, self.upstream)

    client = s3_server.client()
    inputs = make_inputs(tmp_path, small_dir)
    url = f"s3://{s3_bucket}/cube.zarr"
    cfg = s3_config(tmp_path, inputs, url, s3_server.endpoint_url, "execution.partition_mb=0.05")
    pipeline.run(cfg)
    root = client.get_object(Bucket=s3_bucket, Key="cube.zarr/zarr.json")["Body"].read()
    for d in ("2024-06-05", "2024-06-21"):
        add_date(inputs, small_dir, d)
    with Cuttable(s3_server.endpoint_url) as proxy:
        cut = s3_config(tmp_path, inputs, url, proxy.url, "execution.partition_mb=0.05")
        with pytest.raises(PipelineError):
            pipeline.update(cut)
        assert proxy.cut
    assert client.get_object(Bucket=s3_bucket, Key="cube.zarr/zarr.json")["Body"].read() == root
    r = pipeline.update(cfg)
    assert r.report["plan"]["resumed_done"] >= 2 and len(r.report["update"]["added"]) == 2
    assert chunks_by_date(client, s3_bucket, "cube.zarr") == full_run_chunks(tmp_path, inputs)
