"""``output.engine: icechunk``: a run and each update are one commit each, ``pipeline history`` lists them,
``pipeline.open(path, version=...)`` opens an older one, ``pipeline rollback`` makes it the cube again; the
pixels are the ``zarr`` engine's bit for bit; a reader polling during an update that inserts a date and
recomputes another (which the ``zarr`` engine shows half done) sees the old cube or the new one, never a mix."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

import pipeline
from pipeline.cli import main
from tests.test_update import GATED, add_date, config, make_inputs, rewrite_tile

pytest.importorskip("icechunk")

Cube = dict[str, dict[str, np.ndarray]]


def values(ds: xr.Dataset) -> Cube:
    """Every band's pixels by date."""
    return {str(t)[:10]: {b: ds[b].isel(time=i).values for b in ds.data_vars} for i, t in enumerate(ds.time.values)}


def same(a: Cube, b: Cube) -> bool:
    """The same dates, bands and bits."""
    return a.keys() == b.keys() and all(
        a[t].keys() == b[t].keys() and all(a[t][k].tobytes() == b[t][k].tobytes() for k in a[t]) for t in a
    )


def icechunk_config(tmp_path: Path, inputs: Path, *sets: str) -> Any:
    return config(tmp_path, inputs, "cube", "output.engine=icechunk", *sets)


def write_yaml(tmp_path: Path, inputs: Path) -> Path:
    from tests.helpers import write_config

    (tmp_path / "cli").mkdir(exist_ok=True)
    path = write_config(
        tmp_path / "cli",
        str(inputs / "**" / "*.tif"),
        execution={"scheduler": "threads"},
        output={"path": str(tmp_path / "cube"), "engine": "icechunk"},
    )
    return Path(path)


def test_run_update_history_open_rollback(tmp_path: Path, small_dir: Path) -> None:
    inputs = make_inputs(tmp_path, small_dir)
    cfg = icechunk_config(tmp_path, inputs)
    r = pipeline.run(cfg)
    first = r.report["output"]["snapshot"]
    old = values(pipeline.open(cfg.output.path))
    assert list(old) == ["2024-06-01", "2024-06-11"]

    add_date(inputs, small_dir, "2024-06-05")  # inserted before a date of the cube
    rewrite_tile(sorted((inputs / "2024-06-11").glob("*_B02.tif"))[0])  # and one date recomputed
    u = pipeline.update(cfg)
    assert u.report["update"]["added"] == ["2024-06-05T00:00:00"]
    assert u.report["update"]["recomputed"] == ["2024-06-11T00:00:00"]
    second = u.report["output"]["snapshot"]
    assert second and second != first

    cfg_file = write_yaml(tmp_path, inputs)
    shown = CliRunner().invoke(main, ["history", str(cfg_file), "--json"])
    assert shown.exit_code == 0, shown.output
    import json

    rows = json.loads(shown.output)
    assert [row["snapshot"] for row in rows[:2]] == [second, first]  # one commit each, newest first
    assert rows[0]["message"] == "update: added 1 date (2024-06-05); recomputed 1 date (2024-06-11)"
    assert rows[1]["message"] == "run: 2 dates"
    text = CliRunner().invoke(main, ["history", str(cfg_file)]).output.splitlines()
    assert text[0].startswith(f"{second}  ") and text[0].endswith(rows[0]["message"]) and len(text) == 3

    new = values(pipeline.open(cfg.output.path))
    zarr_engine = pipeline.run(config(tmp_path, inputs, "plain.zarr"))
    assert same(new, values(zarr_engine.open()))  # the zarr engine's pixels, bit for bit
    assert same(values(pipeline.open(cfg.output.path, version=first)), old)
    assert not same(new, old)

    again = pipeline.update(cfg)  # nothing new: no chunk, no commit
    assert again.report["output"]["chunks_written"] == 0 and again.report["output"]["snapshot"] is None

    rolled = CliRunner().invoke(main, ["rollback", str(cfg_file), first])
    assert rolled.exit_code == 0, rolled.output
    assert same(values(pipeline.open(cfg.output.path)), old)
    assert json.loads(CliRunner().invoke(main, ["history", str(cfg_file), "--json"]).output)[0]["snapshot"] == first
    bad = CliRunner().invoke(main, ["rollback", str(cfg_file), "0" * 20])
    assert bad.exit_code == 2 and "pipeline history" in bad.output
    plain = CliRunner().invoke(main, ["history", str(cfg_file), "--set", "output.engine=zarr"])
    assert plain.exit_code == 2 and "output.engine" in plain.output

    # the working copy was rolled back too: the next update redoes the insert and the recompute
    redo = pipeline.update(cfg)
    assert redo.report["update"]["added"] == ["2024-06-05T00:00:00"]
    assert redo.report["update"]["recomputed"] == ["2024-06-11T00:00:00"]
    assert same(values(pipeline.open(cfg.output.path)), new)


@pytest.mark.parametrize("reader", ["repository", "working copy"])
def test_readers_never_see_a_mix(tmp_path: Path, small_dir: Path, monkeypatch: pytest.MonkeyPatch, reader: str) -> None:
    """A date recomputed in place: a reader of the plain Zarr working copy (what the zarr engine gives) sees
    it half done; the repository's reader sees the run's commit or the update's, each whole."""
    import pipeline.store.write as write
    from pipeline.store.icechunk_engine import work_path

    inputs = make_inputs(tmp_path, small_dir)
    cfg = icechunk_config(tmp_path, inputs)
    pipeline.run(cfg)
    before = values(pipeline.open(cfg.output.path))
    rewrite_tile(sorted((inputs / "2024-06-11").glob("*_B02.tif"))[0])
    after = values(pipeline.run(config(tmp_path, inputs, "full.zarr")).open())

    def look() -> Cube:
        if reader == "repository":
            return values(pipeline.open(cfg.output.path))
        return values(xr.open_zarr(work_path(cfg.output.path)))

    stop, seen = threading.Event(), list[str]()

    def poll() -> None:
        while not stop.is_set():
            try:
                now = look()
                seen.append("before" if same(now, before) else "after" if same(now, after) else "mixed")
            except Exception as e:  # noqa: BLE001 - a reader that cannot open the cube saw a broken one
                seen.append(f"{type(e).__name__}: {e}")

    real_write, gated, during = write.write_bytes, [0], list[str]()

    def slow(store: Any, key: str, payload: bytes) -> None:  # the first chunk puts wait for a reader's look
        if gated[0] < GATED:
            gated[0] += 1
            looked, deadline = len(seen), time.time() + 10
            while len(seen) < looked + 1 and time.time() < deadline:
                time.sleep(0.002)
            during.extend(seen[looked : looked + 1])  # a look that ended while the update had begun writing
        real_write(store, key, payload)

    monkeypatch.setattr(write, "write_bytes", slow)
    thread = threading.Thread(target=poll)
    thread.start()
    try:
        pipeline.update(cfg)
        looked, deadline = len(seen), time.time() + 10
        while len(seen) < looked + 2 and time.time() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        thread.join()
    print(f"icechunk, recompute in place, {reader}: {len(seen)} looks, {seen.count('mixed')} mixed")
    assert seen[-1] == "after"
    if reader == "repository":
        assert set(seen) == {"before", "after"}, [s for s in seen if s not in ("before", "after")][:3]
        assert during and set(during) == {"before"}, during  # (puts from several threads may share a look)
    else:  # the same reader catches a store that shows a date half recomputed
        assert "mixed" in seen, seen


def test_processes_and_overwrite(tmp_path: Path, small_dir: Path) -> None:
    """The processes executor writes the same cube: its ``overwrite`` finds every object of the branch the
    same, byte for byte, and commits nothing; with a date more, it is one more commit, the history kept."""
    from pipeline.store.icechunk_engine import history

    inputs = make_inputs(tmp_path, small_dir)
    cfg = icechunk_config(tmp_path, inputs)
    threads = values(pipeline.run(cfg).open())
    with pytest.raises(pipeline.ConfigError, match="overwrite"):
        pipeline.run(cfg)
    procs = icechunk_config(tmp_path, inputs, "execution.scheduler=processes", "execution.workers=2")
    again = pipeline.run(procs, overwrite=True)
    assert again.report["output"]["snapshot"] is None and same(values(again.open()), threads)
    add_date(inputs, small_dir, "2024-06-21")
    assert pipeline.run(procs, overwrite=True).report["output"]["snapshot"]
    assert [r["message"] for r in history(cfg.output.path, cfg.storage)] == [
        "run: 3 dates",
        "run: 2 dates",
        "Repository initialized",
    ]


def test_on_s3(tmp_path: Path, small_dir: Path, s3_server: Any, s3_bucket: str) -> None:
    """The repository in a bucket (moto's S3 server): run, update, history, an old version, rollback."""
    from pipeline.store.icechunk_engine import history, rollback
    from tests.test_update_s3 import s3_config

    inputs = make_inputs(tmp_path, small_dir)
    url = f"s3://{s3_bucket}/cube"
    cfg = s3_config(tmp_path, inputs, url, s3_server.endpoint_url, "output.engine=icechunk")
    first = pipeline.run(cfg).report["output"]["snapshot"]
    old = values(pipeline.open(url, storage=cfg.storage))
    add_date(inputs, small_dir, "2024-06-21")
    u = pipeline.update(cfg)
    assert u.report["update"]["added"] == ["2024-06-21T00:00:00"]
    rows = history(url, cfg.storage)
    assert [r["snapshot"] for r in rows[:2]] == [u.report["output"]["snapshot"], first]
    new = values(pipeline.open(url, storage=cfg.storage))
    assert same(new, values(pipeline.run(config(tmp_path, inputs, "plain.zarr")).open()))
    assert same(values(pipeline.open(url, version=first, storage=cfg.storage)), old)
    rollback(url, cfg.storage, first)
    assert same(values(pipeline.open(url, storage=cfg.storage)), old)


def test_moto_honours_the_conditional_writes_icechunk_commits_with(s3_server: Any, s3_bucket: str) -> None:
    """moto refuses a put whose If-None-Match / If-Match does not hold, so of two commits from the same
    parent the second is Icechunk's ConflictError, not a silent overwrite of the branch."""
    import botocore.exceptions
    import icechunk
    import zarr

    client = s3_server.client()
    client.put_object(Bucket=s3_bucket, Key="k", Body=b"1")
    for condition in ({"IfNoneMatch": "*"}, {"IfMatch": '"not-its-etag"'}):
        with pytest.raises(botocore.exceptions.ClientError, match="PreconditionFailed"):
            client.put_object(Bucket=s3_bucket, Key="k", Body=b"2", **condition)
    storage = icechunk.s3_storage(
        bucket=s3_bucket,
        prefix="repo",
        endpoint_url=s3_server.endpoint_url,
        allow_http=True,
        force_path_style=True,
        from_env=True,
    )
    repo = icechunk.Repository.create(storage)
    base = repo.writable_session("main")
    zarr.create_group(base.store).create_array("a", shape=(2,), dtype="i1")
    base.commit("base")
    one, two = repo.writable_session("main"), repo.writable_session("main")
    zarr.open_array(one.store, path="a")[:] = 1
    zarr.open_array(two.store, path="a")[:] = 2
    one.commit("one")
    with pytest.raises(icechunk.ConflictError):
        two.commit("two")
    assert [s.message for s in repo.ancestry(branch="main")][:2] == ["one", "base"]


def test_a_run_that_dies_before_its_commit(tmp_path: Path, small_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The branch stays at its last commit (readers see no cube yet); the next update commits the working copy."""
    import pipeline.store.icechunk_engine as engine

    inputs = make_inputs(tmp_path, small_dir)
    cfg = icechunk_config(tmp_path, inputs)
    real = engine.commit_cube

    def dies(*args: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(engine, "commit_cube", dies)
    with pytest.raises(KeyboardInterrupt):
        pipeline.run(cfg)
    assert [r["message"] for r in engine.history(cfg.output.path, cfg.storage)] == ["Repository initialized"]
    monkeypatch.setattr(engine, "commit_cube", real)
    u = pipeline.update(cfg)
    assert u.report["output"]["chunks_written"] == 0 and u.report["output"]["snapshot"]
    rows = engine.history(cfg.output.path, cfg.storage)
    assert rows[0]["message"] == "update: what an interrupted command left in the working copy"
    assert same(values(pipeline.open(cfg.output.path)), values(pipeline.run(config(tmp_path, inputs, "z.zarr")).open()))
