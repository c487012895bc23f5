"""Ctrl-C, as a terminal sends it (SIGINT to the whole process group): exit 130, one line saying what
was finished and the exact command that resumes, no traceback, no worker left behind; the resumed cube
is the uninterrupted one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from pipeline.store.layout import JOURNAL_DIR, store_is_complete
from tests.helpers import exited, start_pipeline, wait_journaled, write_config

SETS = ["--set", "execution.partition_mb=0.05", "--set", "output.chunks={y: 64, x: 64}", "--workers", "2"]


def _children(pgid: int) -> list[int]:
    """The processes of group ``pgid`` (the run's: its driver, workers, fork server)."""
    out = subprocess.run(["ps", "-o", "pid=", "-g", str(pgid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


@pytest.mark.parametrize("scheduler", ["threads", "local-cluster"])
def test_ctrl_c_exits_130_with_one_line_and_the_resume_command(
    tmp_path: Path, small_dir: Path, scheduler: str, small_cube_64: Any
) -> None:
    cfg = write_config(tmp_path, str(small_dir / "**" / "*.tif"))
    store = tmp_path / "out.zarr"
    args = ["run", str(cfg), *SETS, "--set", f"execution.scheduler={scheduler}"]
    proc = start_pipeline(args)
    journal = store / JOURNAL_DIR
    if not wait_journaled(proc, journal, 2):
        pytest.fail("the run finished before it could be interrupted; make the partitions smaller")
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    out, err = exited(proc, 120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err and "Aborted" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("interrupted: ") and "partitions finished and kept in" in last, err
    finished = int(last.split("interrupted: ", 1)[1].split(" ", 1)[0])
    assert finished >= 2
    command = last.split("resume with: ", 1)[1]
    assert command.startswith("pipeline run ") and command.endswith(" --resume")
    assert not [line for line in err.splitlines() if "Error" in line or "error" in line], err
    deadline = time.time() + 10
    while _children(proc.pid) and time.time() < deadline:  # the fork server sees its driver gone
        time.sleep(0.1)
    left = _children(proc.pid)
    assert left == [], subprocess.run(
        ["ps", "-o", "pid,cmd", "-p", ",".join(map(str, left))], capture_output=True, text=True
    ).stdout
    assert not store_is_complete(str(store))

    # the exact command it printed resumes the run, to the cube an uninterrupted run makes
    import shlex

    r = subprocess.run(
        [sys.executable, "-m", "pipeline", *shlex.split(command)[1:], "-q"], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr
    # the uninterrupted run's cube at these settings (the session's, run once in-process)
    a, b = zarr.open_group(str(store), mode="r"), zarr.open_group(str(small_cube_64()), mode="r")
    for band in ("B01", "B02", "B04", "B11"):
        np.testing.assert_array_equal(a[band][:], b[band][:])
