"""The compiled kernels (numba, PIPELINE_COMPILED=1) against the NumPy reference: the same bits for nearest
and average on reprojected maps, rows whole and split into segments, with and without nodata; a run says
whether they ran."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("numba")

from pipeline.resample import compiled  # noqa: E402
from pipeline.resample.coords import CoordMap, LineMap  # noqa: E402
from pipeline.resample.footprint import resample_average  # noqa: E402
from pipeline.resample.parity import build_map, build_source, rotated_lines  # noqa: E402
from pipeline.resample.point import resample_nearest  # noqa: E402

REFERENCE = {"nearest": resample_nearest, "average": resample_average}


@pytest.fixture(autouse=True)
def turned_on(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("PIPELINE_COMPILED", "1")
    compiled.kernels.cache_clear()
    yield
    compiled.kernels.cache_clear()


def split_rows(lines: LineMap, at: int) -> LineMap:
    """The same positions with every row split into two segments at column ``at``; the second segment keeps
    its anchor at the row's start (``t0 = at``), as a chunk cut from a longer row does."""
    n_rows, cols = lines.shape
    rows = np.arange(n_rows)
    return replace(
        lines,
        row_ptr=np.arange(n_rows + 1) * 2,
        col=np.stack([np.zeros(n_rows, "i8"), np.full(n_rows, at, "i8")], 1).ravel(),
        count=np.stack([np.full(n_rows, at, "i8"), np.full(n_rows, cols - at, "i8")], 1).ravel(),
        t0=np.stack([lines.t0[rows], lines.t0[rows] + at], 1).ravel(),
        x0=np.repeat(lines.x0, 2),
        dx=np.repeat(lines.dx, 2),
        y0=np.repeat(lines.y0, 2),
        dy=np.repeat(lines.dy, 2),
    )


def maps(n: int) -> dict[str, CoordMap]:
    whole = build_map("reproj", n, np)
    split = CoordMap(
        (n, n), centres=split_rows(rotated_lines(n, 0.5), n // 3), corners=split_rows(rotated_lines(n + 1, 0.0), n // 3)
    )
    # Reaching past the source's top-left corner: edge taps, pixels off the source.
    shifted = CoordMap(
        (n, n), centres=rotated_lines(n, 0.5).shifted(-30, -25), corners=rotated_lines(n + 1, 0.0).shifted(-30, -25)
    )
    return {"whole": whole, "split": split, "off-edge": shifted}


@pytest.mark.parametrize("method", ["nearest", "average"])
@pytest.mark.parametrize(
    ("dtype", "nodata"),
    [
        *((d, v) for d in ("uint16", "int16", "uint8", "float32") for v in (0.0, math.nan, 7.0)),
        ("float32", -9999.9),  # not a float32: compared as float32 holds it
        ("float32", np.float64(-9999.9)),  # a NumPy scalar: NumPy compares in float64
    ],
)
def test_compiled_kernels_give_the_numpy_kernels_bits(method: str, dtype: str, nodata: float) -> None:
    for name, cmap in maps(96).items():
        src = build_source(method, 96, dtype)
        if not math.isnan(nodata):
            src[40:50, 60:90] = nodata
        if src.dtype.kind == "f":  # NaN holds no data whatever the nodata value
            src[10:14, 5:40] = np.nan
        reference = REFERENCE[method](src, nodata, cmap)
        kept = cmap.keeping_taps()
        for _ in range(2):  # the second time with the taps it kept
            got = compiled.resample(src, nodata, kept, method)
            assert got is not None and got.dtype == reference.dtype
            np.testing.assert_array_equal(got, reference, err_msg=f"{method} {dtype} {nodata} {name}")


def test_compiled_kernels_stay_off_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIPELINE_COMPILED", "0")
    compiled.kernels.cache_clear()
    assert not compiled.available()
    assert compiled.resample(build_source("nearest", 32, "uint16"), 0.0, build_map("reproj", 32, np), "nearest") is None


def test_one_crs_maps_and_other_types_are_left_to_numpy() -> None:
    src = build_source("average", 32, "uint16")
    assert compiled.resample(src, 0.0, build_map("same", 32, np), "average") is None
    assert compiled.resample(src.astype("f8"), 0.0, build_map("reproj", 32, np), "average") is None
    assert compiled.resample(src, 0.0, build_map("reproj", 32, np), "bilinear") is None


def test_a_run_says_whether_compiled_kernels_ran(tmp_path: Path, small_dir: Path) -> None:
    from pipeline.config import load_config
    from pipeline.execute.runner import run
    from tests.helpers import write_config

    path = write_config(tmp_path, str(small_dir / "**" / "*.tif"))
    on = run(load_config(path, ["execution.scheduler=threads"])).report["execution"]["compiled_kernels"]
    assert on["ran"] and on["windows"] > 0


def test_worker_processes_run_the_kernels_their_fork_server_loaded(tmp_path: Path, small_dir: Path) -> None:
    """``pipeline run`` on processes with ``PIPELINE_COMPILED=1``: the fork server loads numba and the kernels
    before it forks (``pipeline.execute.server_preload``); its workers run them, with the NumPy kernels' cube."""
    import json
    import os
    import subprocess
    import sys

    import zarr

    from tests.helpers import write_config

    path = write_config(tmp_path, str(small_dir / "**" / "*.tif"), execution={"scheduler": "processes", "workers": 2})
    cubes = {}
    for flag in ("1", "0"):
        out = tmp_path / f"cube{flag}.zarr"
        cmd = [sys.executable, "-m", "pipeline", "run", str(path), "-q", "--set", f"output.path={out}"]
        r = subprocess.run(
            cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "PIPELINE_COMPILED": flag}
        )
        assert r.returncode == 0, r.stderr[-2000:]
        report = json.loads((tmp_path / f"cube{flag}.report.json").read_text())
        assert report["execution"]["compiled_kernels"]["ran"] is (flag == "1")
        assert report["execution"]["compiled_kernels"]["loaded_in_tasks"] == 0  # loaded before the fork
        cubes[flag] = zarr.open_group(str(out), mode="r")
    for name in ("B02", "B04", "B11"):
        np.testing.assert_array_equal(cubes["1"][name][:], cubes["0"][name][:])


def test_a_fork_server_whose_kernels_fail_to_load_runs_the_numpy_kernels() -> None:
    """Where the compiled kernels fail to load in the fork server (a broken numba or cache), the server
    logs why and turns them off for the workers it forks, instead of dying and failing the run."""
    import os
    import subprocess
    import sys

    code = (
        "from pipeline.resample import compiled\n"
        "def broken():\n    raise RuntimeError('no LLVM here')\n"
        "compiled.compile_all = broken\n"
        "import pipeline.execute.server_compiled\n"
        "print(compiled.disabled[0], compiled.available())\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PIPELINE_COMPILED": "1"},
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["True", "False"]
    assert "compiled kernels failed to load (RuntimeError: no LLVM here)" in r.stderr


def test_a_run_chooses_the_compiled_kernels_by_its_mask_and_its_reprojected_bytes(
    monkeypatch: pytest.MonkeyPatch, small_config: Any
) -> None:
    """``choose``: a run uses them past ``MIN_MB_PER_WORKER_MASKED`` (masked) or ``MIN_MB_PER_WORKER`` of
    reprojected windows per worker process, the fork server before the plan where the run masks, the
    environment over all; the plan's ``bytes_reprojected`` is the bytes of its windows in another CRS
    than the grid's, and the run's context carries the choice."""
    from pipeline.execute import compiled_choice as choice
    from pipeline.execute.runner import compiled_choice, plan_run, task_context

    monkeypatch.delenv("PIPELINE_COMPILED", raising=False)
    assert choice.choose(masked=True) == (True, "masked sources")  # before the plan: the fork server's preload
    assert choice.choose(masked=False) == (False, "no mask")
    for masked, least in ((False, choice.MIN_MB_PER_WORKER), (True, choice.MIN_MB_PER_WORKER_MASKED)):
        on, why = choice.choose(masked, reprojected_mb_per_worker=least - 1)
        assert not on and f"below {least:,.0f} MB" in why
        on, why = choice.choose(masked, reprojected_mb_per_worker=least)
        assert on and why.startswith("masked sources" if masked else "no mask") and f"past {least:,.0f} MB" in why
    monkeypatch.setenv("PIPELINE_COMPILED", "0")
    assert choice.choose(masked=True) == (False, "PIPELINE_COMPILED=0")
    monkeypatch.setenv("PIPELINE_COMPILED", "1")
    assert choice.choose(masked=False) == (True, "PIPELINE_COMPILED=1")
    monkeypatch.delenv("PIPELINE_COMPILED")

    cfg = small_config("execution.scheduler=processes", "execution.workers=2")
    _, plan = plan_run(cfg)
    itemsize = {b.name: np.dtype(b.dtype).itemsize for b in plan.bands}
    windows = [(s, job.band) for part in plan.partitions for job in part.jobs for s in job.sources]
    other = sum(s.window[2] * s.window[3] * itemsize[band] for s, band in windows if s.crs != plan.grid.crs)
    assert 0 < other < plan.bytes_read and plan.bytes_reprojected == other  # the small preset spans 2 zones
    on, why = compiled_choice(cfg, plan)
    assert not on and f"; {other / 2e6:,.0f} MB of reprojected windows per worker process" in why
    monkeypatch.setattr(choice, "MIN_MB_PER_WORKER", other / 2e6)  # as if each process read that much more
    assert compiled_choice(cfg, plan)[0] and task_context(cfg, plan).compiled
    _, bilinear = plan_run(small_config("resampling=bilinear"))  # no compiled kernel: nothing they would take
    assert bilinear.bytes_read == plan.bytes_read and bilinear.bytes_reprojected == 0


def test_a_task_leaves_its_threads_choice_as_it_found_it(
    monkeypatch: pytest.MonkeyPatch, small_config: Any, tmp_path: Path
) -> None:
    """A task's run chose no compiled kernels; on a thread that runs it (here the main one), the kernels
    still answer ``PIPELINE_COMPILED=1`` afterwards: the choice holds for the task alone."""
    from dataclasses import replace

    from pipeline.execute.runner import _prepare_store, plan_run, task_context
    from pipeline.execute.task import run_partition

    cfg = small_config(f"output.path={tmp_path / 'cube.zarr'}")
    _, plan = plan_run(cfg)
    _prepare_store(cfg, plan, overwrite=True, resume=False)
    run_partition(plan.partitions[0], replace(task_context(cfg, plan), compiled=False))
    src = build_source("nearest", 32, "uint16")
    assert compiled.resample(src, 0.0, build_map("reproj", 32, np), "nearest") is not None


def test_the_command_asks_for_the_choice_without_numpy() -> None:
    """``pipeline run`` decides the fork server's preload before it starts it: the choice's module imports
    neither NumPy nor numba, which would hold the server's start back (~0.17 s)."""
    import subprocess
    import sys

    code = (
        "import sys, pipeline.execute.compiled_choice as c\n"
        "c.choose(True)\n"
        "print(sorted({'numpy', 'numba'} & set(sys.modules)))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert r.stdout.strip() == "[]"
