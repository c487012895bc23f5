"""The same bits at any chunk size: a pixel's value never depends on ``output.chunks``, ``output.shards``,
``execution.partition_mb``, the worker count or the kernels (compiled or NumPy) that computed it.

The small fixture spans UTM zones 31 and 32 onto a 32632 grid of 219 x 572 pixels, so most of its tiles
are reprojected, read through windows whose offsets in the tile change with the chunking."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from pipeline.config import load_config
from pipeline.execute.runner import run
from tests.helpers import write_config

RUNS = {
    # name: (overrides, environment)
    "chunks 128, 2 workers": (["output.chunks={y: 128, x: 128}", "execution.workers=2"], {}),
    "chunks 64, 1 worker, 1 partition": (
        ["output.chunks={y: 64, x: 64}", "execution.workers=1", "execution.partition_mb=256"],
        {},
    ),
    "chunks 96 (no divisor), shards 192, NumPy kernels": (
        ["output.chunks={y: 96, x: 96}", "output.shards={y: 192, x: 192}", "execution.partition_mb=2"],
        {"PIPELINE_COMPILED": "0"},
    ),
}


def _cube(folder: Path, small_dir: Path, method: str, overrides: list[str]) -> dict[str, np.ndarray]:
    settings = [f"resampling={method}", "execution.scheduler=processes", *overrides]
    cfg = load_config(write_config(folder, str(small_dir / "**" / "*.tif")), settings)
    result = run(cfg)
    assert result.exit_code == 0
    group = zarr.open_group(cfg.output.path, mode="r")
    return {name: group[name][:] for name in ("B01", "B02", "B04", "B11")}


@pytest.mark.parametrize("method", ["average", "bilinear", "nearest", "cubic"])
def test_same_bits_at_any_chunk_size(
    tmp_path: Path, small_dir: Path, method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cubes: dict[str, Any] = {}
    for name, (overrides, environment) in RUNS.items():
        with monkeypatch.context() as m:
            for key, value in environment.items():
                m.setenv(key, value)
            folder = tmp_path / f"run{len(cubes)}"
            folder.mkdir()
            cubes[name] = _cube(folder, small_dir, method, overrides)
    first, *others = RUNS
    for band, ref in cubes[first].items():
        assert (ref != 0).mean() > 0.5, band  # real data, not an empty cube
        for other in others:
            got = cubes[other][band]
            differ = int(np.count_nonzero(got != ref))
            assert differ == 0, f"{method} {band}: {differ} pixels differ between '{first}' and '{other}'"


def _tile_and_grid(crs: str, edge: bool) -> tuple[np.ndarray, tuple[float, ...], tuple[float, ...]]:
    """A 10 m tile (1000² noise, nodata 0 in two corners) in ``crs`` and a 20 m grid in EPSG:32632 whose
    corner lies 2 km inside the tile, or (``edge``) 400 m outside its left edge, 3 km down (a third of a
    pixel off the tile's lattice in one CRS)."""
    from pipeline.planning.grid import transform_points

    rng = np.random.default_rng(3)
    tile = (rng.random((1000, 1000)) * 5000 + 1000).astype("u2")
    tile[:2, :2] = 0
    tile[-1, -1] = 0
    t = (
        (10.0, 0.0, 700000.0, 0.0, -10.0, 5000000.0)
        if crs == "EPSG:32631"
        else (10.0, 0.0, 300000.0, 0.0, -10.0, 5000000.0)
    )
    gx, gy = transform_points(crs, "EPSG:32632", np.array([t[2] + 2000.0]), np.array([t[5] - 2000.0]))
    if edge:
        gx, gy = transform_points(crs, "EPSG:32632", np.array([t[2] - 400.0]), np.array([t[5] - 3000.0]))
    grid = (20.0, 0.0, round(gx[0] / 20) * 20 + 20 / 3, 0.0, -20.0, round(gy[0] / 20) * 20)
    return tile, t, grid


@pytest.mark.parametrize("crs", ["EPSG:32631", "EPSG:32632"])
@pytest.mark.parametrize("compiled_on", [True, False])
@pytest.mark.parametrize("edge", [False, True])
def test_a_pixel_reads_the_same_bits_through_any_window(crs: str, compiled_on: bool, edge: bool) -> None:
    """One block of the grid resampled from the whole tile (its window holds nodata in the corners) and
    from a window around the block (offsets 91 and 173, or 0 where the block reaches past the tile's left
    edge; no nodata): the same bits for every method, with the compiled kernels and the NumPy ones. The
    window's offsets and whether it holds nodata elsewhere change nothing."""
    from pipeline.planning.grid import offset_transform
    from pipeline.planning.jobs import SourceWindow
    from pipeline.resample import compiled
    from pipeline.resample.methods import METHODS
    from pipeline.resample.warp import RowSpan, warp_window

    tile, t, grid = _tile_and_grid(crs, edge)
    r0, c0, h, w = 10, 20, 120, 150
    whole = SourceWindow("mem", -1, (0, 0, 1000, 1000), t, crs, 0.0, tile_origin=(t[2], t[5]))
    wr, wc = 91, 0 if edge else 173
    part = SourceWindow("mem", -1, (wr, wc, 500, 540), offset_transform(t, wr, wc), crs, 0.0, tile_origin=(t[2], t[5]))
    span = RowSpan(grid, 400, r0, c0)
    before = compiled.use(compiled_on)
    try:
        for method in METHODS:
            got = [
                warp_window(a, src, (h, w), offset_transform(grid, r0, c0), "EPSG:32632", 0.0, method, grid=span)
                for a, src in ((tile, whole), (tile[wr : wr + 500, wc : wc + 540], part))
            ]
            on_tile = np.count_nonzero(got[0]) / got[0].size  # every pixel from data, or (edge) most
            assert on_tile == 1 or (edge and 0.7 < on_tile < 0.99), (method, on_tile)
            differ = int(np.count_nonzero(got[0] != got[1]))
            assert differ == 0, f"{method}: {differ} pixels differ"
    finally:
        compiled.use(before)


@pytest.mark.parametrize("method", ["bilinear", "cubic", "average"])
def test_a_geographic_grid_gives_the_same_bits_in_blocks(method: str) -> None:
    """A UTM tile onto an EPSG:4326 grid, whole and in 100² blocks: the same bits (the kernels' stretch is
    measured at the tile's corner, not estimated from each block's map), and GDAL's answer within the
    acceptance bounds (mean |diff| <= 0.1% of the value range)."""
    from affine import Affine
    from rasterio.crs import CRS
    from rasterio.enums import Resampling
    from rasterio.warp import reproject, transform_bounds

    from pipeline.planning.grid import offset_transform
    from pipeline.planning.jobs import SourceWindow
    from pipeline.resample.warp import GDAL_NAMES, RowSpan, warp_window

    yy, xx = np.mgrid[0:1000, 0:1000]
    tile = (3000 + 1000 * np.sin(xx / 37.0) * np.cos(yy / 23.0)).astype("u2")
    t = (10.0, 0.0, 700000.0, 0.0, -10.0, 5000000.0)
    b = transform_bounds("EPSG:32631", "EPSG:4326", 700000, 4990000, 710000, 5000000)
    res, (h, w) = 0.0002, (300, 400)
    grid = (res, 0.0, round(b[0] / res) * res + 0.01, 0.0, -res, round(b[3] / res) * res - 0.01)
    src = SourceWindow("mem", -1, (0, 0, 1000, 1000), t, "EPSG:32631", 0.0, tile_origin=(t[2], t[5]))
    whole = warp_window(tile, src, (h, w), grid, "EPSG:4326", 0.0, method, grid=RowSpan(grid, w, 0, 0))
    blocks = np.zeros_like(whole)
    for r in range(0, h, 100):
        for c in range(0, w, 100):
            span = RowSpan(grid, w, r, c)
            part = warp_window(tile, src, (100, 100), offset_transform(grid, r, c), "EPSG:4326", 0.0, method, grid=span)
            blocks[r : r + 100, c : c + 100] = part
    assert int(np.count_nonzero(whole != blocks)) == 0
    ref = np.zeros((h, w), "u2")
    reproject(
        tile,
        ref,
        src_transform=Affine(*t),
        src_crs=CRS.from_epsg(32631),
        src_nodata=0,
        dst_transform=Affine(*grid),
        dst_crs=CRS.from_epsg(4326),
        dst_nodata=0,
        resampling=Resampling[GDAL_NAMES.get(method, method)],
    )
    both = (whole != 0) & (ref != 0)
    assert both.mean() > 0.9
    diff = np.abs(whole[both].astype("f8") - ref[both])
    assert diff.mean() <= 0.001 * (float(ref[both].max()) - float(ref[both].min()))
