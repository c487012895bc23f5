"""The compiled kernels (C, ``pipeline/resample/_fused.c``) against the NumPy reference: the same bits for
nearest, bilinear and average on reprojected maps, rows whole and split into segments, with and without nodata; a run
says whether they ran and why."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pipeline.resample import compiled
from pipeline.resample.coords import CoordMap, LineMap
from pipeline.resample.footprint import resample_average
from pipeline.resample.kernels import resample
from pipeline.resample.parity import build_map, build_source, rotated_lines
from pipeline.resample.point import resample_bilinear, resample_nearest

REFERENCE = {"nearest": resample_nearest, "average": resample_average}


@pytest.fixture(autouse=True)
def turned_on(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.delenv("PIPELINE_COMPILED", raising=False)
    assert compiled.kernels() is not None, "the compiled kernels were not built: pip install -e . (needs gcc)"
    yield


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


def full_range(dtype: str, side: int, seed: int) -> np.ndarray:
    """A square source of random values over the type's whole range (float32: normal, sd 1000)."""
    rng = np.random.default_rng(seed)
    if dtype == "float32":
        return (rng.standard_normal((side, side)) * 1000).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, int(info.max) + 1, (side, side)).astype(dtype)


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


@pytest.mark.parametrize("dtype", ["uint8", "int8", "uint16", "int16", "float32"])
@pytest.mark.parametrize(("scale", "degrees"), [(1.0, 3.5), (2.0, 1.5), (0.3, 10.0), (3.7, 0.0)])
def test_average_on_sources_without_nodata_gives_the_numpy_kernels_bits(
    dtype: str, scale: float, degrees: float
) -> None:
    """Sources with every pixel valid take the kernel's four-pixels-at-a-time path wherever four neighbours'
    footprints lie inside the source (the rest, at the edges, one at a time): the same bits as NumPy, over
    each type's whole range (signed types clip at both ends) and footprints of 1 to 5 taps a side."""
    n = 67  # (not a multiple of four: a row's last pixels go one at a time)
    src = full_range(dtype, int(n * scale) + 12, seed=7)
    cmap = CoordMap((n, n), corners=rotated_lines(n + 1, 0.0, scale, degrees, (9.0, 7.0)))
    reference = resample_average(src, math.nan, cmap)
    kept = cmap.keeping_taps()
    for _ in range(2):
        got = compiled.resample(src, math.nan, kept, "average")
        assert got is not None
        np.testing.assert_array_equal(got, reference, err_msg=f"{dtype} x{scale} {degrees} deg")


@pytest.mark.parametrize("dtype", ["uint8", "int8", "uint16", "int16", "float32"])
@pytest.mark.parametrize("nodata", [math.nan, 0.0, 7.0])
@pytest.mark.parametrize(("scale", "degrees"), [(1.0, 3.5), (2.0, 1.5), (3.0, 10.0), (0.3, 10.0)])
def test_bilinear_gives_the_numpy_kernels_bits(dtype: str, nodata: float, scale: float, degrees: float) -> None:
    """Bilinear on reprojected maps whose stretch is a whole number (1 when not downsampling, 2 and 3 when
    downsampling by 2 and 3): the source and its validity prefiltered by the tent, then 2 x 2 taps, as the
    NumPy kernel does it: the same bits, with nodata and without, rows whole and split, on and off the
    source's edges, over each type's whole range."""
    n = 67
    src = full_range(dtype, int(n * scale) + 12, seed=5)
    if not math.isnan(nodata):
        src[10:20, 5:30] = nodata
    lines = rotated_lines(n, 0.5, scale, degrees, (9.0, 7.0))
    for name, centres in {
        "whole": lines,
        "split": split_rows(lines, n // 3),
        "off-edge": lines.shifted(-30, -25),
    }.items():
        cmap = CoordMap((n, n), centres=centres, scale_xy=(1 / scale, 1 / scale))
        reference = resample_bilinear(src, nodata, cmap)
        got = compiled.resample(src, nodata, cmap, "bilinear")
        assert got is not None and got.dtype == reference.dtype
        np.testing.assert_array_equal(got, reference, err_msg=f"{dtype} {nodata} x{scale} {name}")


@pytest.mark.parametrize("dtype", ["uint16", "float32"])
@pytest.mark.parametrize("nodata", [math.nan, 0.0])
def test_average_of_footprints_of_no_width_reads_the_column_they_lie_on(dtype: str, nodata: float) -> None:
    """A map turned by 45 degrees puts each pixel's top-left and bottom-right corners on one source column
    (as a pixel's corners land on one meridian near a pole): footprints of no width, to a float32
    rounding. Each reads that column with weight 1, as GDAL's average weighs a footprint within one pixel
    along an axis: every pixel is filled, with the mean of its rows of that column by their overlaps (GDAL's
    weights, in float64 here), and the compiled kernel gives the NumPy kernel's bits."""
    n = 40
    rng = np.random.default_rng(3)
    src = rng.integers(1, 4000, (64, 64)).astype(dtype)
    lines = rotated_lines(n + 1, 0.0, 1.0, 45.0, (32.0, 2.0))
    cmap = CoordMap((n, n), corners=lines)
    reference = resample_average(src, nodata, cmap)
    got = compiled.resample(src, nodata, cmap.keeping_taps(), "average")
    assert got is not None
    np.testing.assert_array_equal(got, reference)
    x, y = (p.astype("f4").astype("f8") for p in lines.positions(np))
    for r, c in [(0, 0), (5, 17), (20, 20), (39, 1), (39, 39)]:
        (x0, x1), (y0, y1) = sorted((x[r, c], x[r + 1, c + 1])), (y[r, c], y[r + 1, c + 1])
        assert abs(x1 - x0) < 1e-4 and 1.41 < y1 - y0 < 1.42
        col, rows = math.floor(x0 + 1e-10), range(math.floor(y0 + 1e-10), math.ceil(y1 - 1e-10))
        w = np.array([min(k + 1, y1) - max(k, y0) for k in rows])
        expected = float(np.sum(w * src[list(rows), col].astype("f8")) / w.sum())
        assert abs(float(reference[r, c]) - expected) <= (0.5 if dtype == "uint16" else 1e-3), (r, c)


@pytest.mark.parametrize("nodata", [math.nan, 0.0])
def test_bilinear_gives_the_bits_of_the_numpy_kernel_that_prefilters_by_bands(
    monkeypatch: pytest.MonkeyPatch, nodata: float
) -> None:
    """A large source's NumPy bilinear prefilters bands of rows into reused buffers (``_LazyRows``); the
    compiled one prefilters the whole plane: the same bits."""
    from pipeline.resample import common

    monkeypatch.setattr(common, "WHOLE_FRAME_BYTES", 1024)  # every source "large"
    n = 67
    src = full_range("uint16", 2 * n + 12, seed=9)
    src[30:50, 10:60] = 0
    cmap = CoordMap((n, n), centres=rotated_lines(n, 0.5, 2.0, 2.5, (9.0, 7.0)), scale_xy=(0.5, 0.5))
    reference = resample_bilinear(src, nodata, cmap)
    np.testing.assert_array_equal(compiled.resample(src, nodata, cmap, "bilinear"), reference)


def test_bilinear_at_other_stretches_is_left_to_numpy() -> None:
    """Downsampling by 2.5: the kernel's taps are not a prefilter's, and the NumPy kernel weighs them."""
    cmap = CoordMap((20, 20), centres=rotated_lines(20, 0.5, 2.5, 2.0), scale_xy=(0.4, 0.4))
    assert compiled.resample(np.ones((80, 80), "uint16"), 0.0, cmap, "bilinear") is None


def test_bilinear_leaves_sources_past_its_scratch_to_the_numpy_kernels_bands(monkeypatch: pytest.MonkeyPatch) -> None:
    """A source whose prefiltered planes would pass the scratch a thread keeps is left to the NumPy kernel,
    which prefilters it by bands of rows (a 4096² output's source is 271 MB a plane)."""
    cmap = CoordMap((20, 20), centres=rotated_lines(20, 0.5, 2.0, 2.0), scale_xy=(0.5, 0.5))
    src = np.ones((50, 50), "uint16")
    assert compiled.resample(src, 0.0, cmap, "bilinear") is not None
    monkeypatch.setattr(compiled, "SCRATCH_KEPT_BYTES", 50 * 50 * 4 - 1)
    assert compiled.resample(src, 0.0, cmap, "bilinear") is None


@pytest.mark.parametrize("rows", [1, 5, 67])
def test_average_in_row_blocks_gives_the_whole_maps_bits(monkeypatch: pytest.MonkeyPatch, rows: int) -> None:
    """Large maps are averaged a block of rows at a time (their taps made and summed while in cache): the
    same bits as NumPy whatever the block, the last one shorter, with nodata and without, on and off the
    source's edge."""
    n = 67
    monkeypatch.setattr(compiled, "TAPS_BLOCK_PX", n * rows)
    rng = np.random.default_rng(3)
    src = rng.integers(1, 4000, (2 * n + 20, 2 * n + 20)).astype("uint16")
    holed = src.copy()
    holed[30:60, 10:70] = 0
    for corners in (rotated_lines(n + 1, 0.0), rotated_lines(n + 1, 0.0, 1.0, 4.0, (-6.0, 3.0))):
        cmap = CoordMap((n, n), corners=corners)
        for a in (src, holed):
            reference = resample_average(a, 0.0, cmap)
            kept = cmap.keeping_taps()
            for _ in range(2):  # the second time with the blocks' taps it kept
                got = compiled.resample(a, 0.0, kept, "average")
                assert got is not None
                np.testing.assert_array_equal(got, reference, err_msg=f"{rows} rows a block")


@pytest.mark.parametrize(("scale", "degrees"), [(1.0, 3.5), (2.0, 1.5), (0.3, 10.0)])
@pytest.mark.parametrize("nodata", [math.nan, 0.0, math.inf])
def test_average_of_infinite_values_gives_the_numpy_kernels_bits(
    monkeypatch: pytest.MonkeyPatch, scale: float, degrees: float, nodata: float
) -> None:
    """A float source holding infinities, through the kernels' entry: the compiled average and NumPy's give
    the same bits, NaN wherever a footprint weighs an infinity (a tap of weight 0 on one, which both kernels
    sum, changes nothing)."""
    n = 67
    side = int(n * scale) + 12
    src = (np.random.default_rng(7).standard_normal((side, side)) * 1000).astype("float32")
    src[20:23, 10:40] = np.inf
    src[30, 5:50] = -np.inf
    src[40:44, 40:44] = nodata
    cmap = CoordMap((n, n), corners=rotated_lines(n + 1, 0.0, scale, degrees, (9.0, 7.0)))
    got = resample(src, nodata, cmap.keeping_taps(), "average")
    monkeypatch.setenv("PIPELINE_COMPILED", "0")
    reference = resample(src, nodata, cmap, "average")
    assert np.isnan(reference).sum() > 0 and not np.isinf(reference[reference != nodata]).any()
    np.testing.assert_array_equal(got, reference)


def test_compiled_kernels_stay_off_where_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert compiled.available()
    monkeypatch.setenv("PIPELINE_COMPILED", "0")
    assert not compiled.available()
    assert compiled.resample(build_source("nearest", 32, "uint16"), 0.0, build_map("reproj", 32, np), "nearest") is None


def test_one_crs_maps_and_other_types_are_left_to_numpy() -> None:
    src = build_source("average", 32, "uint16")
    assert compiled.resample(src, 0.0, build_map("same", 32, np), "average") is None
    assert compiled.resample(src.astype("f8"), 0.0, build_map("reproj", 32, np), "average") is None
    assert compiled.resample(src.astype("u4"), 0.0, build_map("reproj", 32, np), "average") is None
    assert compiled.resample(src, 0.0, build_map("reproj", 32, np), "cubic") is None


def test_a_run_says_whether_compiled_kernels_ran(tmp_path: Path, small_dir: Path) -> None:
    from pipeline.config import load_config
    from pipeline.execute.runner import run
    from tests.helpers import write_config

    path = write_config(tmp_path, str(small_dir / "**" / "*.tif"))
    on = run(load_config(path, ["execution.scheduler=threads"])).report["execution"]["compiled_kernels"]
    assert on["ran"] and on["windows"] > 0


def test_worker_processes_run_the_kernels(tmp_path: Path, small_dir: Path) -> None:
    """``pipeline run`` on processes: the workers run the compiled kernels (the fork server loaded their
    library) and give the NumPy kernels' cube; ``PIPELINE_COMPILED=0`` turns them off, and the report says
    which ran and why."""
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
        env = {k: v for k, v in os.environ.items() if k != "PIPELINE_COMPILED"}
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env | {"PIPELINE_COMPILED": flag})
        assert r.returncode == 0, r.stderr[-2000:]
        kernels = json.loads((tmp_path / f"cube{flag}.report.json").read_text())["execution"]["compiled_kernels"]
        assert kernels["chosen"] is kernels["ran"] is (flag == "1") and (kernels["windows"] > 0) is (flag == "1")
        assert kernels["reason"] == ("PIPELINE_COMPILED=0" if flag == "0" else compiled.choose()[1])
        cubes[flag] = zarr.open_group(str(out), mode="r")
    for name in ("B02", "B04", "B11"):
        np.testing.assert_array_equal(cubes["1"][name][:], cubes["0"][name][:])


def test_without_the_built_library_runs_use_the_numpy_kernels_and_say_why(
    monkeypatch: pytest.MonkeyPatch, small_config: Any
) -> None:
    """An install without a C compiler has no ``_fused`` library: the choice says so and how to build it,
    and the kernels answer None (the NumPy kernels run)."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "pipeline.resample._fused" else real(name, *a)
    )
    compiled.kernels.cache_clear()
    try:
        on, why = compiled.choose()
        assert not on and "not built" in why and "pip install -e ." in why
        src = build_source("nearest", 32, "uint16")
        assert compiled.resample(src, 0.0, build_map("reproj", 32, np), "nearest") is None
    finally:
        monkeypatch.undo()
        compiled.kernels.cache_clear()
    assert compiled.choose()[0]


def test_a_task_leaves_its_threads_choice_as_it_found_it(
    monkeypatch: pytest.MonkeyPatch, small_config: Any, tmp_path: Path
) -> None:
    """A task's run chose no compiled kernels; on a thread that runs it (here the main one), the kernels
    still run afterwards for a direct call: the choice holds for the task alone."""
    from dataclasses import replace

    from pipeline.execute.runner import _prepare_store, plan_run, task_context
    from pipeline.execute.task import run_partition

    cfg = small_config(f"output.path={tmp_path / 'cube.zarr'}")
    _, plan = plan_run(cfg)
    _prepare_store(cfg, plan, overwrite=True, resume=False)
    run_partition(plan.partitions[0], replace(task_context(cfg, plan), compiled=False))
    src = build_source("nearest", 32, "uint16")
    assert compiled.resample(src, 0.0, build_map("reproj", 32, np), "nearest") is not None


def test_sources_and_maps_the_kernels_do_not_take_are_left_to_numpy() -> None:
    """Swapped bytes and Python objects, and a map whose corners hold NaN: None (the NumPy kernels run)."""
    src = build_source("average", 32, "uint16")
    cmap = build_map("reproj", 32, np)
    for method in ("nearest", "bilinear", "average"):
        assert compiled.resample(src.astype(">u2"), 0.0, cmap, method) is None
    assert compiled.resample(src.astype(object), 0.0, cmap, "nearest") is None
    corners = rotated_lines(33, 0.0)
    x0 = corners.x0.copy()
    x0[3] = np.nan
    broken = CoordMap((32, 32), centres=rotated_lines(32, 0.5), corners=replace(corners, x0=x0))
    assert compiled.resample(src, 0.0, broken, "average") is None
    assert compiled.resample(src, 0.0, cmap, "average") is not None


@pytest.mark.parametrize("method", ["nearest", "bilinear", "average"])
def test_a_map_whose_segments_do_not_fit_it_is_refused_before_the_kernel_runs(method: str) -> None:
    """The kernels index the source and the output with the map's segments unchecked: a map whose lines are
    of another shape than it, or whose segments run past its columns, is a ValueError, not a read past an
    array."""
    src = build_source("average", 32, "uint16")
    other = CoordMap((32, 32), centres=rotated_lines(40, 0.5), corners=rotated_lines(41, 0.0), scale_xy=(0.5, 0.5))
    lines = rotated_lines(32, 0.5)
    past = replace(lines, count=lines.count + 3)
    long_rows = CoordMap(
        (32, 32), centres=past, corners=replace(rotated_lines(33, 0.0), count=rotated_lines(33, 0.0).count + 3)
    )
    for cmap in (other, long_rows):
        with pytest.raises(ValueError, match="do not fit"):
            compiled.resample(src, 0.0, replace(cmap, scale_xy=(0.5, 0.5)), method)


@pytest.mark.parametrize("problem", ["another version", "cannot be loaded"])
def test_a_library_that_cannot_be_used_leaves_the_numpy_kernels_and_says_why(
    problem: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A library built from another version of ``_fused.c`` (a failed rebuild keeps the old one), or one
    that does not load: the choice says which file and how to rebuild it, and nothing fails."""
    import importlib.util

    if problem == "another version":
        monkeypatch.setattr(compiled, "ABI", compiled.ABI + 1)
    else:
        real = importlib.util.find_spec
        not_a_library = importlib.util.spec_from_file_location("pipeline.resample._fused", compiled.__file__)
        monkeypatch.setattr(
            importlib.util,
            "find_spec",
            lambda name, *a: not_a_library if name == "pipeline.resample._fused" else real(name, *a),
        )
    compiled.kernels.cache_clear()
    try:
        on, why = compiled.choose()
        assert not on and problem in why and "pip install -e ." in why
        assert (
            compiled.resample(build_source("nearest", 32, "uint16"), 0.0, build_map("reproj", 32, np), "nearest")
            is None
        )
    finally:
        monkeypatch.undo()
        compiled.kernels.cache_clear()
    assert compiled.choose()[0]
