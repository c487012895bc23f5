"""Resume after the driver is killed with SIGKILL: real processes, the same cube bit for bit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from pipeline.store.layout import JOURNAL_DIR, store_is_complete
from tests.helpers import wait_journaled, write_config


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", "run", *args, "-q"], capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_sigkill_then_resume_gives_the_same_cube(
    tmp_path: Path, small_dir: Path, zarr_format: int, small_cube_64: Any
) -> None:
    sets = ["--set", "execution.partition_mb=0.05", "--set", "output.chunks={y: 64, x: 64}", "--workers", "1"]
    sets += ["--set", f"output.zarr_format={zarr_format}"]
    killed_dir = tmp_path / "killed"
    killed_dir.mkdir()
    cfg = write_config(killed_dir, str(small_dir / "**" / "*.tif"))
    store = killed_dir / "out.zarr"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "run", str(cfg), "-q", *sets],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    journal = store / JOURNAL_DIR
    if not wait_journaled(proc, journal, 3, poll_s=0.02):
        pytest.fail("the run finished before it could be killed; make the partitions smaller")
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and its whole local cluster
    proc.wait()
    assert not store_is_complete(str(store))
    done_before = len(os.listdir(journal))
    # a put the kill cut short (obstore's local store writes name#N, then renames it); a file of the user's
    staged = store / "B02" / ("c/0/0/0#3" if zarr_format == 3 else "0.0.0#3")
    staged.parent.mkdir(parents=True, exist_ok=True)
    staged.write_bytes(b"partial")
    (store / "B02" / "notes#1.txt").write_text("mine")

    r = _run(str(cfg), *sets, "--resume")
    assert r.returncode == 0, r.stderr
    assert store_is_complete(str(store))
    left = [f for f in store.rglob("*#*") if f.is_file()]
    assert left == [store / "B02" / "notes#1.txt"], left
    report = json.loads((killed_dir / "out.report.json").read_text())
    assert report["plan"]["resumed_done"] >= done_before >= 3
    assert len(report["tasks"]) == report["plan"]["partitions"] - report["plan"]["resumed_done"]

    # the cube an uninterrupted run of these settings makes (the session's, run once in-process)
    a, b = zarr.open_group(str(store), mode="r"), zarr.open_group(str(small_cube_64(zarr_format)), mode="r")
    assert a.metadata.zarr_format == b.metadata.zarr_format == zarr_format
    for band in ("B01", "B02", "B04", "B11"):
        np.testing.assert_array_equal(a[band][:], b[band][:])

    again = _run(str(cfg), *sets, "--resume")  # already complete: nothing to redo
    assert again.returncode == 0, again.stderr


def test_resume_refuses_a_store_made_with_other_settings(tmp_path: Path, small_dir: Path) -> None:
    cfg = write_config(tmp_path, str(small_dir / "**" / "*.tif"))
    assert _run(str(cfg), "--workers", "1").returncode == 0
    r = _run(str(cfg), "--resume", "--set", "resampling=nearest", "--set", "output.chunks={y: 64, x: 64}")
    assert r.returncode == 2
    assert r.stderr.startswith("error: config key 'output.chunks': "), r.stderr  # the key a user writes
    assert "output.chunks: the store has {y: 128, x: 128}, the config has {y: 64, x: 64}" in r.stderr
    assert "resampling: the store has 'average', the config has 'nearest'" in r.stderr
    assert "chunks_yx" not in r.stderr and "--resume'" not in r.stderr and "--overwrite to replace it" in r.stderr
