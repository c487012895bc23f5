"""Nothing lost: bad inputs, failed reads, dead workers, failed writes, shuffled order, shell-safe paths."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import rasterio
import zarr

import pipeline.execute.prepare
from pipeline.config import load_config
from pipeline.execute.runner import run
from pipeline.inputs.catalog import build_catalog
from pipeline.store.layout import JOURNAL_DIR, store_is_complete
from tests.helpers import write_config

BANDS = ("B01", "B02", "B04", "B11")
TRUNCATED = "2024-06-01/T32A1_B11.tif"  # header intact, pixel data cut: fails only when read


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pipeline", *args], capture_output=True, text=True, timeout=300)


def same_cube(a: Path, b: Path) -> None:
    za, zb = zarr.open_group(str(a), mode="r"), zarr.open_group(str(b), mode="r")
    for band in BANDS:
        np.testing.assert_array_equal(za[band][:], zb[band][:], err_msg=band)


@pytest.fixture(scope="module")
def clean_cube(tmp_path_factory: pytest.TempPathFactory, small_dir: Path) -> Path:
    """The reference: an uninterrupted run with 64x64 chunks."""
    folder = tmp_path_factory.mktemp("clean")
    cfg = write_config(folder, str(small_dir / "**" / "*.tif"), output={"chunks": {"y": 64, "x": 64}})
    assert cli("run", str(cfg), "-q", "--workers", "1").returncode == 0
    return folder / "out.zarr"


def truncate(path: Path, keep: float = 0.6) -> None:
    with open(path, "r+b") as f:
        f.truncate(int(path.stat().st_size * keep))


@pytest.fixture
def bad_inputs(tmp_path: Path, small_dir: Path) -> Path:
    """The small fixture plus one of every kind of bad file, as real files."""
    data = tmp_path / "data"
    shutil.copytree(small_dir, data)
    d = data / "2024-06-01"
    truncate(data / TRUNCATED)
    (d / "T90Z0_B02.tif").write_bytes(b"")  # zero bytes
    (d / "T90Z1_B02.tif").write_text("this is not a TIFF\n")  # text named .tif
    arr = np.full((32, 32), 500, "uint16")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rasterio.errors.NotGeoreferencedWarning)
        with rasterio.open(d / "T90Z2_B02.tif", "w", driver="GTiff", width=32, height=32, count=1, dtype="uint16") as f:
            f.write(arr, 1)  # no CRS, no transform
    where = {"crs": "EPSG:32632", "transform": rasterio.transform.from_origin(300000, 4990000, 10, 10)}
    with rasterio.open(
        d / "T90Z3_B02.tif", "w", driver="GTiff", width=32, height=32, count=1, dtype="float32", **where
    ) as f:
        f.write(arr.astype("float32"), 1)  # dtype differs from the band's other files
    os.symlink(d / "does-not-exist.tif", d / "T90Z4_B02.tif")  # unreadable: a dangling link
    if os.geteuid() != 0:  # root reads any file whatever its mode; a link stands in for it above
        shutil.copy(d / "T31A0_B02.tif", d / "T90Z5_B02.tif")
        os.chmod(d / "T90Z5_B02.tif", 0)
    return data


def test_bad_inputs_are_skipped_listed_and_exit_3(tmp_path: Path, bad_inputs: Path) -> None:
    cfg = write_config(tmp_path, str(bad_inputs / "**" / "*.tif"), output={"chunks": {"y": 64, "x": 64}})
    r = cli("run", str(cfg), "-q", "--workers", "2")
    assert r.returncode == 3, r.stderr
    report = json.loads((tmp_path / "out.report.json").read_text())
    skipped = {os.path.basename(s["path"]): s["error"] for s in report["inputs"]["skipped"]}
    expected = {
        "T90Z0_B02.tif",
        "T90Z1_B02.tif",
        "T90Z2_B02.tif",
        "T90Z3_B02.tif",
        "T90Z4_B02.tif",
        "T32A1_B11.tif",
    } | ({"T90Z5_B02.tif"} if os.geteuid() != 0 else set())
    assert set(skipped) == expected
    assert "CRS" in skipped["T90Z2_B02.tif"]
    assert "float32" in skipped["T90Z3_B02.tif"]
    assert "read failed" in skipped["T32A1_B11.tif"]
    # The chunks the truncated tile would have touched are listed, and written from the other tiles.
    degraded = report["output"]["chunks_degraded"]
    assert degraded and all(c.startswith("B11/t0/") for c in degraded)
    assert store_is_complete(str(tmp_path / "out.zarr"))
    b11 = zarr.open_group(str(tmp_path / "out.zarr"), mode="r")["B11"][0]
    assert (b11 != 0).mean() > 0.5


def test_on_error_fail_exits_1_naming_the_file(tmp_path: Path, small_dir: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(small_dir, data)
    truncate(data / TRUNCATED)
    cfg = write_config(tmp_path, str(data / "**" / "*.tif"), execution={"on_error": "fail", "retries": 0})
    r = cli("run", str(cfg), "-q", "--workers", "1")
    assert r.returncode == 1
    assert "T32A1_B11.tif" in r.stderr and "Traceback" not in r.stderr
    assert not store_is_complete(str(tmp_path / "out.zarr"))


def test_file_deleted_between_indexing_and_reading(
    tmp_path: Path, small_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    shutil.copytree(small_dir, data)
    victim = data / "2024-06-11" / "T31A0_B02.tif"

    def catalog_then_delete(*args, **kw):  # type: ignore[no-untyped-def]
        catalog = build_catalog(*args, **kw)
        victim.unlink()  # gone after its header was read, before any task reads it
        return catalog

    monkeypatch.setattr(pipeline.execute.prepare, "build_catalog", catalog_then_delete)
    cfg = load_config(write_config(tmp_path, str(data / "**" / "*.tif")), ["execution.workers=1"])
    result = run(cfg)
    assert result.exit_code == 3
    (skip,) = result.report["inputs"]["skipped"]
    assert skip["path"] == str(victim) and "read failed" in skip["error"]


def test_same_cube_whatever_the_submission_order(tmp_path: Path, small_dir: Path, clean_cube: Path) -> None:
    cfg = load_config(
        write_config(tmp_path, str(small_dir / "**" / "*.tif"), output={"chunks": {"y": 64, "x": 64}}),
        ["execution.partition_mb=0.05"],
    )
    result = run(cfg, shuffle_seed=7)
    order = [t["index"] for t in sorted(result.report["tasks"], key=lambda t: t["start"])]
    assert order != sorted(order)
    same_cube(tmp_path / "out.zarr", clean_cube)


def _workers(pid: int) -> list[int]:
    """The local cluster's worker processes: the driver's descendants that are not multiprocessing's
    helpers (the fork server they are forked from, the resource tracker)."""
    import psutil

    helpers = ("resource_tracker", "semaphore_tracker", "forkserver")
    procs = psutil.Process(pid).children(recursive=True)
    helper_pids = {p.pid for p in procs if p.ppid() == pid and any(h in " ".join(p.cmdline()) for h in helpers)}
    return [p.pid for p in procs if p.pid not in helper_pids]


def test_worker_killed_mid_run_is_rescheduled(tmp_path: Path, small_dir: Path, clean_cube: Path) -> None:
    cfg = write_config(tmp_path, str(small_dir / "**" / "*.tif"), output={"chunks": {"y": 64, "x": 64}})
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pipeline",
            "run",
            str(cfg),
            "-q",
            "--workers",
            "2",
            "--set",
            "execution.partition_mb=0.05",
            "--set",
            "execution.scheduler=local-cluster",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    journal = tmp_path / "out.zarr" / JOURNAL_DIR
    deadline = time.time() + 120
    while time.time() < deadline and not (journal.exists() and len(os.listdir(journal)) >= 2):
        time.sleep(0.02)
    workers = _workers(proc.pid)
    assert workers, "no worker process found to kill"
    os.kill(workers[0], signal.SIGKILL)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    same_cube(tmp_path / "out.zarr", clean_cube)


@pytest.fixture
def immutable() -> Iterator[list[Path]]:
    """Paths made immutable with chattr (read-only even for root); always released."""
    paths: list[Path] = []
    yield paths
    for p in paths:
        subprocess.run(["chattr", "-R", "-i", str(p)], check=False)


def _chattr(path: Path, immutable: list[Path]) -> None:
    r = subprocess.run(["chattr", "-R", "+i", str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot make {path} read-only here: {r.stderr.strip()}")
    immutable.append(path)


def test_read_only_destination_then_resume(
    tmp_path: Path, small_dir: Path, clean_cube: Path, immutable: list[Path]
) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    cfg = write_config(
        tmp_path, str(small_dir / "**" / "*.tif"), output={"path": str(dest / "out.zarr"), "chunks": {"y": 64, "x": 64}}
    )
    _chattr(dest, immutable)
    r = cli("run", str(cfg), "-q", "--workers", "1")
    assert r.returncode == 1 and "cannot create the output store" in r.stderr
    subprocess.run(["chattr", "-R", "-i", str(dest)], check=True)
    r = cli("run", str(cfg), "-q", "--workers", "1", "--resume")
    assert r.returncode == 0, r.stderr
    same_cube(dest / "out.zarr", clean_cube)


def test_store_turning_read_only_mid_run_then_resume(
    tmp_path: Path, small_dir: Path, clean_cube: Path, immutable: list[Path]
) -> None:
    cfg = write_config(
        tmp_path, str(small_dir / "**" / "*.tif"), output={"chunks": {"y": 64, "x": 64}}, execution={"retries": 0}
    )
    store = tmp_path / "out.zarr"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pipeline",
            "run",
            str(cfg),
            "-q",
            "--workers",
            "1",
            "--set",
            "execution.partition_mb=0.05",
            "--set",
            "execution.scheduler=local-cluster",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    journal = store / JOURNAL_DIR
    deadline = time.time() + 120
    while time.time() < deadline and not (journal.exists() and len(os.listdir(journal)) >= 1):
        time.sleep(0.01)
    _chattr(store / "B11", immutable)  # the last band: its chunks come after the first finished task
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err
    assert "B11" in err and "Traceback" not in err
    assert not store_is_complete(str(store))
    subprocess.run(["chattr", "-R", "-i", str(store / "B11")], check=True)
    r = cli("run", str(cfg), "-q", "--workers", "1", "--set", "execution.partition_mb=0.05", "--resume")
    assert r.returncode == 0, r.stderr
    assert store_is_complete(str(store))
    same_cube(store, clean_cube)


def test_paths_are_never_expanded_by_a_shell(tmp_path: Path, small_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    odd = tmp_path / "$(touch PWNED); `touch PWNED2` ~ $HOME"
    shutil.copytree(small_dir, odd / "data")
    cfg = write_config(odd, str(odd / "data" / "**" / "*.tif"), output={"path": str(odd / "o $(x).zarr")})
    r = cli("run", str(cfg), "-q", "--workers", "1")
    assert r.returncode == 0, r.stderr
    assert (odd / "o $(x).zarr" / "zarr.json").exists()
    assert not list(tmp_path.rglob("PWNED*")) and not os.path.exists("PWNED")


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 160 KiB tmpfs: room for the store's template, not for its chunks."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_full_destination_then_resume(tmp_path: Path, small_dir: Path, clean_cube: Path, tiny_disk: Path) -> None:
    cfg = write_config(
        tmp_path,
        str(small_dir / "**" / "*.tif"),
        output={"path": str(tiny_disk / "out.zarr"), "chunks": {"y": 64, "x": 64}},
        execution={"retries": 0},
    )
    r = cli("run", str(cfg), "-q", "--workers", "1")
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr  # one message: no Rust debug dump, no traceback
    assert "Debug source" not in r.stderr and "LocalFileSystem" not in r.stderr
    assert f"device tmpfs (mounted at {tiny_disk}" in lines[0] and "MB free" in lines[0] and "is full" in lines[0]
    assert "The plan writes 2.0 MB raw for the " in lines[0]  # the small cube's bytes, from the plan
    assert lines[0].endswith("then rerun the same command with --resume: finished partitions are kept")
    assert not store_is_complete(str(tiny_disk / "out.zarr"))
    subprocess.run(["mount", "-o", "remount,size=64m", str(tiny_disk)], check=True)  # the cause, fixed
    r = cli("run", str(cfg), "-q", "--workers", "1", "--resume")
    assert r.returncode == 0, r.stderr
    same_cube(tiny_disk / "out.zarr", clean_cube)


def test_a_bug_fails_the_run_instead_of_passing_for_a_bad_input(
    tmp_path: Path, small_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only input errors (rasterio's, the OS's) make a skipped input; a bug planted in the read path
    (a KeyError, as a wrong dict lookup would raise) fails the run with that error, and the store is
    not marked complete."""
    import pipeline.inputs.read

    def broken(*args: object, **kw: object) -> object:
        raise KeyError("a bug in the read path")

    monkeypatch.setattr(pipeline.inputs.read, "offset_transform", broken)
    cfg = load_config(write_config(tmp_path, str(small_dir / "**" / "*.tif")), ["execution.scheduler=threads"])
    with pytest.raises(KeyError, match="a bug in the read path"):
        run(cfg)
    assert not store_is_complete(cfg.output.path)
