"""``pipeline update``: dates added in time order (appended or inserted), changed dates recomputed, every
other date's chunk objects untouched, a second update writing nothing, a cube that differs from the config
refused (exit 2), and the result the cube a full run over the same inputs makes, chunk object for chunk
object. Readers polling ``xarray.open_zarr`` during a slowed update see the cube before or after, never
between (and the same check catches an update that publishes its metadata first)."""

from __future__ import annotations

import glob
import json
import os
import shutil
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
from pipeline.config import load_config
from pipeline.errors import ConfigError
from tests.helpers import exited, start_pipeline, wait_journaled, write_config

SMALL_DATES = ("2024-06-01", "2024-06-11")


def add_date(inputs: Path, small_dir: Path, date: str, like: str = "2024-06-11") -> None:
    """Copies of the small fixture's tiles of ``like`` as the tiles of ``date``."""
    (inputs / date).mkdir(parents=True)
    for f in sorted(glob.glob(str(small_dir / like / "*.tif"))):
        shutil.copy2(f, inputs / date)


def rewrite_tile(path: Path) -> None:
    """Write the tile again with other pixels (a provider's reprocessing)."""
    import rasterio

    with rasterio.open(path) as src:
        data, profile = src.read(1), src.profile
    profile.update(driver="GTiff", tiled=False)
    profile.pop("blockxsize", None)
    profile.pop("blockysize", None)
    tmp = path.with_suffix(".tmp.tif")
    with rasterio.open(tmp, "w", **profile) as dst:
        dst.write((data // 2 + 7).astype(data.dtype), 1)
    os.replace(tmp, path)


def make_inputs(tmp_path: Path, small_dir: Path, dates: tuple[str, ...] = SMALL_DATES) -> Path:
    inputs = tmp_path / "in"
    for d in dates:
        add_date(inputs, small_dir, d, d if d in SMALL_DATES else "2024-06-11")
    return inputs


def config(tmp_path: Path, inputs: Path, out: str = "cube.zarr", *sets: str) -> Any:
    path = write_config(tmp_path, str(inputs / "**" / "*.tif"), execution={"scheduler": "threads"})
    return load_config(path, [f"output.path={tmp_path / out}", *sets])


def chunk_objects(store: Path) -> dict[tuple[str, str, int, int], bytes]:
    """Every band's chunk object by (band, date, row, col), whichever key namespace the cube uses."""
    root = json.loads((store / "zarr.json").read_text())
    meta = root["consolidated_metadata"]["metadata"]
    times = [str(t)[:10] for t in xr.open_zarr(store).time.values]
    out = {}
    for band, m in meta.items():
        if m.get("dimension_names") != ["time", "y", "x"]:
            continue
        sep = m["chunk_key_encoding"]["configuration"]["separator"]
        prefix = str(store / band / "c") + sep
        for f in glob.glob(str(store / band / "c") + ("/**/*" if sep == "/" else ".*"), recursive=True):
            assert "#" not in f, f"a killed writer's temporary file is left in the store: {f}"
            parts = f[len(prefix) :].split(sep)
            if os.path.isfile(f) and all(i.isdigit() for i in parts):
                t, y, x = (int(i) for i in parts)
                if t < m["shape"][0]:
                    out[(band, times[t], y, x)] = Path(f).read_bytes()
    return out


def stats(store: Path) -> dict[str, tuple[int, int, int]]:
    """(inode, mtime_ns, size) of every file of the store."""
    out = {}
    for f in glob.glob(str(store / "**" / "*"), recursive=True):
        if os.path.isfile(f):
            st = os.stat(f)
            out[os.path.relpath(f, store)] = (st.st_ino, st.st_mtime_ns, st.st_size)
    return out


def same_as_full_run(tmp_path: Path, inputs: Path, cube: Path, *sets: str) -> None:
    """The updated cube is a full run's over the same inputs: time axis, every value, every chunk's bytes."""
    full = pipeline.run(config(tmp_path, inputs, "full.zarr", *sets), overwrite=True)
    a, b = xr.open_zarr(cube), xr.open_zarr(full.config.output.path)
    np.testing.assert_array_equal(a.time.values, b.time.values)
    assert sorted(a.data_vars) == sorted(b.data_vars)
    for v in b.data_vars:
        np.testing.assert_array_equal(a[v].values, b[v].values)
        assert a[v].attrs == b[v].attrs and a[v].encoding["chunks"] == b[v].encoding["chunks"]
    assert chunk_objects(cube) == chunk_objects(Path(full.config.output.path))


def test_append_then_nothing_new(tmp_path: Path, small_dir: Path) -> None:
    inputs = make_inputs(tmp_path, small_dir)
    cfg = config(tmp_path, inputs)
    cube = Path(cfg.output.path)
    pipeline.run(cfg)
    before = stats(cube)
    add_date(inputs, small_dir, "2024-06-21")
    r = pipeline.update(cfg)
    u = r.report["update"]
    assert u["added"] == ["2024-06-21T00:00:00"] and u["recomputed"] == [] and not u["inserted"]
    assert u["unchanged"] == [f"{d}T00:00:00" for d in SMALL_DATES]
    after = stats(cube)
    kept = {k: v for k, v in before.items() if "/c/" in k}
    assert kept and all(after[k] == v for k, v in kept.items())  # same inode, mtime and size
    assert r.report["output"]["chunks_written"] == 40  # one date: 4 bands x 10 chunks
    same_as_full_run(tmp_path, inputs, cube)

    again = stats(cube)
    r = pipeline.update(cfg)
    assert r.report["update"]["added"] == [] and r.report["update"]["recomputed"] == []
    assert r.report["output"]["chunks_written"] == 0 and stats(cube) == again  # not one object written


def test_insert_and_recompute_equal_a_full_run(tmp_path: Path, small_dir: Path) -> None:
    inputs = make_inputs(tmp_path, small_dir, (*SMALL_DATES, "2024-06-21"))
    cfg = config(tmp_path, inputs)
    cube = Path(cfg.output.path)
    pipeline.run(cfg)
    before = stats(cube)
    add_date(inputs, small_dir, "2024-06-05")  # before two of the cube's dates
    r = pipeline.update(cfg)
    assert r.report["update"]["added"] == ["2024-06-05T00:00:00"] and r.report["update"]["inserted"]
    same_as_full_run(tmp_path, inputs, cube)
    # the kept dates' objects, linked into the other key namespace: the same files (inode, mtime, bytes)
    inodes = {v for k, v in stats(cube).items() if "/c." in k}
    assert {v for k, v in before.items() if "/c/" in k and k.startswith("B")} <= inodes

    tile = sorted((inputs / "2024-06-11").glob("*_B02.tif"))[0]
    size = tile.stat().st_size
    rewrite_tile(tile)
    assert tile.stat().st_size != size
    (inputs / "2024-06-21" / sorted(os.listdir(inputs / "2024-06-21"))[0]).unlink()
    untouched = stats(cube)
    dry = pipeline.update(cfg, dry_run=True)
    assert stats(cube) == untouched and dry.report["update"]["recomputed"] == [
        "2024-06-11T00:00:00",
        "2024-06-21T00:00:00",
    ]
    r = pipeline.update(cfg)
    why = r.report["update"]["why"]
    assert why["2024-06-11T00:00:00"] == [f"tile rewritten: {tile} (size {size} -> {tile.stat().st_size})"]
    assert why["2024-06-21T00:00:00"][0].startswith("tile removed: ")
    assert r.report["update"]["unchanged"] == ["2024-06-01T00:00:00", "2024-06-05T00:00:00"]
    same_as_full_run(tmp_path, inputs, cube)


def test_dry_run_writes_nothing_and_no_cube_is_a_run(tmp_path: Path, small_dir: Path) -> None:
    inputs = make_inputs(tmp_path, small_dir)
    cfg = config(tmp_path, inputs)
    dry = pipeline.update(cfg, dry_run=True)
    assert dry.report["update"]["added"] == [f"{d}T00:00:00" for d in SMALL_DATES]
    assert not os.path.exists(cfg.output.path) and not os.path.exists(cfg.report_path)
    r = pipeline.update(cfg)
    assert r.report["update"]["created"] and r.exit_code == 0
    assert xr.open_zarr(cfg.output.path).sizes["time"] == 2
    add_date(inputs, small_dir, "2024-06-21")
    before = stats(Path(cfg.output.path))
    out = CliRunner().invoke(
        main, ["update", str(tmp_path / "config.yaml"), "--set", f"output.path={cfg.output.path}", "--dry-run"]
    )
    assert out.exit_code == 0, out.output
    assert "would add:         1 date(s)  2024-06-21" in out.output and "would keep:        2 date(s)" in out.output
    assert stats(Path(cfg.output.path)) == before


@pytest.mark.parametrize(
    ("setting", "key"),
    [
        ("output.chunks={y: 64, x: 128}", "output.chunks"),
        ("grid.resolution=40", "grid.resolution"),
        ("fuse=last", "fuse"),
        ("inputs.bands=[B02, B04]", "inputs.bands"),
    ],
)
def test_a_cube_that_differs_is_refused(tmp_path: Path, small_dir: Path, setting: str, key: str) -> None:
    inputs = make_inputs(tmp_path, small_dir)
    cfg = config(tmp_path, inputs)
    pipeline.run(cfg)
    before = stats(Path(cfg.output.path))
    with pytest.raises(ConfigError) as e:
        pipeline.update(config(tmp_path, inputs, "cube.zarr", setting))
    assert e.value.key == key and "pipeline run CONFIG --overwrite" in str(e.value)
    assert stats(Path(cfg.output.path)) == before
    out = CliRunner().invoke(
        main, ["update", str(tmp_path / "config.yaml"), "--set", setting, "--set", f"output.path={cfg.output.path}"]
    )
    assert out.exit_code == 2 and key in out.output


def test_a_composite_is_refused(tmp_path: Path, small_dir: Path) -> None:
    inputs = make_inputs(tmp_path, small_dir)
    cfg = config(tmp_path, inputs, "cube.zarr", "composite={period: P1M, reducer: median}")
    with pytest.raises(ConfigError, match="update supports per-date cubes"):
        pipeline.update(cfg)


# -- readers during an update ---------------------------------------------------------------------------


def check_view(path: Any, expected: dict[str, dict[str, np.ndarray]]) -> str | None:
    """What is wrong with the cube a reader opens now (None: a whole cube, old or new): the bands' time axes,
    a time axis not unique and increasing, or a date whose pixels are not all its final ones."""
    ds = xr.open_zarr(path)
    times = [str(t)[:10] for t in ds.time.values]
    if sorted(set(times)) != times:
        return f"time not unique and increasing: {times}"
    for band in ds.data_vars:
        if ds[band].sizes["time"] != len(times):
            return f"{band} has {ds[band].sizes['time']} dates, time {len(times)}"
        values = ds[band].values
        for i, t in enumerate(times):
            if not np.array_equal(values[i], expected[t][band], equal_nan=True):
                return f"{band} on {t} is not that date's cube"
    return None


def poll(path: Any, expected: dict[str, dict[str, np.ndarray]], stop: threading.Event, seen: list[Any]) -> None:
    while not stop.is_set():
        try:
            seen.append(check_view(path, expected))
        except Exception as e:  # noqa: BLE001 - a reader that cannot open the cube saw a broken one
            seen.append(f"{type(e).__name__}: {e}")


GATED = 6
"""The update's first chunk puts that each wait for a whole look of the reader: the reader is sure to look
while the update is half done, however loaded the machine (later puts are only slowed by 10 ms)."""


def slowed_update(
    cfg: Any, expected: Any, monkeypatch: pytest.MonkeyPatch, naive: bool, target: Any = None
) -> list[Any]:
    """Run an update while a reader polls the cube (``target``: what ``xarray.open_zarr`` takes; default
    ``output.path``), its first :data:`GATED` chunk puts each held until the reader has looked once more;
    what the reader saw. ``naive``: publish the metadata before the chunks (as resize-first appenders do)."""
    import pipeline.execute.runner as runner
    import pipeline.store.write as write

    real_write = write.write_bytes
    stop, seen = threading.Event(), list[Any]()
    gate = threading.Lock()
    gated = [0]

    def slow(store: Any, key: str, payload: bytes) -> None:
        with gate:
            if gated[0] < GATED:
                gated[0] += 1
                looked = len(seen)
                deadline = time.time() + 10
                while len(seen) < looked + 1 and time.time() < deadline and not stop.is_set():
                    time.sleep(0.002)
            else:
                time.sleep(0.01)
        real_write(store, key, payload)

    monkeypatch.setattr(write, "write_bytes", slow)
    if naive:
        real_stage = runner.stage

        def stage_and_publish_first(path: str, storage: Any, work: Any) -> set[str]:
            done = real_stage(path, storage, work)
            runner.publish(path, storage, work)  # the new shapes before any chunk is there
            return done

        monkeypatch.setattr(runner, "stage", stage_and_publish_first)
    reader = threading.Thread(target=poll, args=(target or cfg.output.path, expected, stop, seen))
    reader.start()
    try:
        pipeline.update(cfg)
    finally:
        stop.set()
        reader.join()
    return seen


def final_values(tmp_path: Path, inputs: Path) -> dict[str, dict[str, np.ndarray]]:
    full = xr.open_zarr(pipeline.run(config(tmp_path, inputs, "full.zarr"), overwrite=True).config.output.path)
    return {
        str(t)[:10]: {b: full[b].isel(time=i).values for b in full.data_vars} for i, t in enumerate(full.time.values)
    }


@pytest.mark.parametrize("naive", [False, True])
@pytest.mark.parametrize("new_date", ["2024-06-21", "2024-06-05"])
def test_readers_see_the_cube_before_or_after(
    tmp_path: Path, small_dir: Path, monkeypatch: pytest.MonkeyPatch, new_date: str, naive: bool
) -> None:
    inputs = make_inputs(tmp_path, small_dir)
    cfg = config(tmp_path, inputs)
    pipeline.run(cfg)
    add_date(inputs, small_dir, new_date)
    expected = final_values(tmp_path, inputs)
    seen = slowed_update(cfg, expected, monkeypatch, naive)
    assert len(seen) >= GATED
    broken = [s for s in seen if s is not None]
    print(f"local, {new_date}, {'publish first' if naive else 'update'}: {len(seen)} looks, {len(broken)} mixed")
    if naive:  # the same reader catches an update that shows its new shape before its chunks
        assert broken, f"the check saw nothing wrong with a publish-first update in {len(seen)} looks"
    else:
        assert broken == [], f"{len(broken)} of {len(seen)} looks saw a half-applied update: {broken[:3]}"
        assert check_view(cfg.output.path, expected) is None


# -- interrupted updates ----------------------------------------------------------------------------------

SMALL_PARTS = ("execution.partition_mb=0.05",)
"""The interrupted update's: one chunk a partition (the cube does not depend on it)."""


def interrupt_update(cfg_path: Path, store: Path, sig: int) -> Any:
    """Start ``pipeline update`` in its own process group and send ``sig`` to the whole group once two
    partitions are journaled; the finished process."""
    from pipeline.store.layout import JOURNAL_DIR

    sets = [a for s in SMALL_PARTS for a in ("--set", s)]
    proc = start_pipeline(["update", str(cfg_path), *sets, "--set", f"output.path={store}", "-q"])
    journal = store / JOURNAL_DIR
    if not wait_journaled(proc, journal, 2, prefix="pipeline-", poll_s=0.005):
        pytest.fail(f"the update ended before it could be interrupted: {proc.stderr.read() if proc.stderr else ''}")
    os.killpg(proc.pid, sig)
    _, err = exited(proc, 120)
    return proc.returncode, err


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGINT"])
def test_an_interrupted_update_leaves_the_cube_and_the_next_one_completes_it(
    tmp_path: Path, small_dir: Path, sig: str
) -> None:
    import signal

    inputs = make_inputs(tmp_path, small_dir)
    cfg = config(tmp_path, inputs, "cube.zarr")
    cube = Path(cfg.output.path)
    pipeline.run(cfg)
    old = {str(t)[:10]: {b: v.values for b, v in ds.items()} for t, ds in xr.open_zarr(cube).groupby("time")}
    old = {t: {b: v[0] for b, v in bands.items()} for t, bands in old.items()}
    root = (cube / "zarr.json").read_bytes()
    for d in ("2024-06-05", "2024-06-21", "2024-06-25"):
        add_date(inputs, small_dir, d)
    code, err = interrupt_update(tmp_path / "config.yaml", cube, getattr(signal, sig))
    if sig == "SIGINT":
        assert code == 130 and "resume with: pipeline update " in err and "--resume" not in err, err
    assert (cube / "zarr.json").read_bytes() == root and check_view(str(cube), old) is None  # as it was
    r = pipeline.update(config(tmp_path, inputs, "cube.zarr", *SMALL_PARTS))  # the same command again
    assert r.report["plan"]["resumed_done"] >= 2  # the interrupted update's finished partitions are kept
    assert r.report["update"]["added"] == ["2024-06-05T00:00:00", "2024-06-21T00:00:00", "2024-06-25T00:00:00"]
    same_as_full_run(tmp_path, inputs, cube)


def test_other_work_after_an_interrupted_update_cleans_up_after_it(tmp_path: Path, small_dir: Path) -> None:
    """Killed while it recomputed a date in place and added others; then the inputs change back and on: the
    next update recomputes the half-rewritten date even though its sources now match the record, drops
    what the killed one wrote beyond the cube, and makes a full run's cube."""
    import signal

    inputs = make_inputs(tmp_path, small_dir, (*SMALL_DATES, "2024-06-21"))
    cfg = config(tmp_path, inputs, "cube.zarr")
    cube = Path(cfg.output.path)
    pipeline.run(cfg)
    tiles = sorted((inputs / "2024-06-21").glob("*.tif"))
    saved = tmp_path / "saved"
    saved.mkdir()
    for t in tiles:
        shutil.copy2(t, saved / t.name)
        rewrite_tile(t)
    for d in ("2024-06-25", "2024-06-27"):
        add_date(inputs, small_dir, d)
    interrupt_update(tmp_path / "config.yaml", cube, signal.SIGKILL)
    staged = cube / "B02" / "c" / "1" / "0" / "0#7"  # as a put the kill cut short leaves it (obstore's local
    staged.parent.mkdir(parents=True, exist_ok=True)  # store writes name#N, then renames it)
    staged.write_bytes(b"partial")
    for t in tiles:  # the provider's reprocessing withdrawn: the tiles are the recorded ones again
        shutil.copy2(saved / t.name, t)
    shutil.rmtree(inputs / "2024-06-27")
    r = pipeline.update(cfg)
    assert r.report["update"]["added"] == ["2024-06-25T00:00:00"]
    assert r.report["update"]["why"]["2024-06-21T00:00:00"] == ["an interrupted update had begun to rewrite it"]
    same_as_full_run(tmp_path, inputs, cube)


def test_the_report_and_its_page_say_what_changed_and_why(tmp_path: Path, small_dir: Path) -> None:
    from pipeline.report.html import render_html

    inputs = make_inputs(tmp_path, small_dir)
    cfg = config(tmp_path, inputs)
    pipeline.run(cfg)
    add_date(inputs, small_dir, "2024-06-21")
    tile = sorted((inputs / "2024-06-01").glob("*_B04.tif"))[0]
    size = tile.stat().st_size
    rewrite_tile(tile)
    assert tile.stat().st_size != size
    r = pipeline.update(cfg)
    saved = json.loads(Path(cfg.report_path).read_text())["update"]
    assert saved["added"] == ["2024-06-21T00:00:00"] and saved["unchanged"] == ["2024-06-11T00:00:00"]
    assert saved["why"] == {"2024-06-01T00:00:00": [f"tile rewritten: {tile} (size {size} -> {tile.stat().st_size})"]}
    page = render_html(r.report)
    assert "<h2>Update</h2>" in page and f"tile rewritten: {tile}" in page
    assert "<td>2024-06-21T00:00:00</td><td>added</td>" in page
    out = CliRunner().invoke(main, ["report", cfg.report_path])
    assert (
        "recomputed:        1 date(s)  2024-06-01" in out.output and f"2024-06-01: tile rewritten: {tile}" in out.output
    )
    nothing = pipeline.update(cfg)  # up to date: a report of its dates alone, and its page
    assert "no chunk written" in render_html(nothing.report) and nothing.report["update"]["unchanged"]


def test_one_update_at_a_time(tmp_path: Path, small_dir: Path) -> None:
    """A cron job that starts while the last one still runs is refused (exit 1, naming the lock); a lock whose
    process is gone (killed) is taken over."""
    import socket
    import subprocess
    import sys

    from pipeline.errors import StoreError
    from pipeline.store.publish import LOCK

    inputs = make_inputs(tmp_path, small_dir)
    cfg = config(tmp_path, inputs)
    pipeline.run(cfg)
    add_date(inputs, small_dir, "2024-06-21")
    lock = Path(cfg.output.path) / LOCK
    lock.parent.mkdir()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock.write_text(json.dumps({"host": socket.gethostname(), "pid": sleeper.pid, "since": "then"}))
        before = stats(Path(cfg.output.path))
        with pytest.raises(StoreError, match=f"another update holds it .*process {sleeper.pid}.*delete .*{LOCK}"):
            pipeline.update(cfg)
        assert stats(Path(cfg.output.path)) == before
    finally:
        sleeper.kill()
        sleeper.wait()
    r = pipeline.update(cfg)  # its process is gone
    assert r.report["update"]["added"] == ["2024-06-21T00:00:00"] and not lock.exists()
