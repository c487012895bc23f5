"""Geometry made once: coordinate maps kept by geometry (warp.MapCache) with the tap tables their kernels
make, reused across bands and dates bit for bit, bounded in bytes, shared by threads."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from pipeline.resample import compiled
from pipeline.resample.kernels import KERNEL_METHODS
from pipeline.resample.warp import MapCache, RowSpan, compute_coord_map, warp_window
from tests.test_kernels import CASES, dst_grid, source

SHAPE = (300, 200)


def other_band(a: np.ndarray, seed: int) -> np.ndarray:
    """Another band or date of the same tile: other values, nodata elsewhere."""
    rng = np.random.default_rng(seed)
    b = np.clip(a.astype("i4") + rng.integers(-400, 400, a.shape), 1, 65535).astype(a.dtype)
    b[rng.random(a.shape) < 0.02] = 0
    b[600:700, 100:400] = 0
    return b


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("method", KERNEL_METHODS)
def test_a_kept_map_resamples_other_bands_bit_for_bit(case: str, method: str) -> None:
    """The first band makes the map and its taps; the next ones (other pixels, other nodata) reuse them
    and come out exactly as with a map of their own."""
    a, s = source(*CASES[case])
    dt, shape = dst_grid(case, SHAPE)
    grid = RowSpan(dt, 1000, 7, 3)
    maps = MapCache()
    for i, band in enumerate([a, other_band(a, 1), other_band(a, 2).astype("f4")]):
        fresh = warp_window(band, s, shape, dt, "EPSG:32632", 0.0, method, grid=grid)
        kept = warp_window(band, s, shape, dt, "EPSG:32632", 0.0, method, grid=grid, maps=maps)
        np.testing.assert_array_equal(kept, fresh, err_msg=f"band {i}")
        assert maps.tally() == (i, 1)
    assert len(maps) == 1
    (cmap, size, _), *_ = maps._maps.values()
    assert size == cmap.nbytes() == maps.bytes
    # The reprojected kernels keep their taps, but for nearest, and for bilinear where it is compiled (its
    # prefilter is of each band's pixels; the taps, made per pixel in the same loop, are not kept)
    if case == "cross-zone" and method != "nearest" and not (method == "bilinear" and compiled.available()):
        assert cmap.taps
        assert size > 50 * cmap.shape_yx[0]


def test_taps_stay_with_the_map_that_keeps_them() -> None:
    """``replace`` (a kernel's cut of a map) and ``to`` (another array module) make maps that keep no taps:
    tap tables of one map are never read for another."""
    _, s = source(*CASES["cross-zone"])
    dt, shape = dst_grid("cross-zone", SHAPE)
    cmap = compute_coord_map(s, shape, dt, "EPSG:32632", "average")
    assert cmap.taps is None
    kept = cmap.keeping_taps()
    assert kept.taps == {}
    kept.taps[("x",)] = np.zeros(10)
    assert replace(kept, shape_yx=(10, 10)).taps is None
    assert kept.to(np).taps is None
    assert kept.nbytes() == cmap.nbytes() + 80


def test_the_cache_is_bounded_in_bytes() -> None:
    """Past its bound the least recently used maps go; a map larger than the bound is not kept."""
    a, s = source(*CASES["cross-zone"])
    dt, shape = dst_grid("cross-zone", (128, 128))
    maps = MapCache()
    for k in range(3):  # three tiles' geometries
        t = s.transform
        tile = replace(s, transform=(t[0], t[1], t[2] + 100.0 * k, t[3], t[4], t[5]))
        warp_window(a, tile, shape, dt, "EPSG:32632", 0.0, "average", maps=maps)
    one = maps.bytes // 3
    assert len(maps) == 3 and one > 0
    bounded = MapCache(max_bytes=2 * one + one // 2)
    for k in (0, 1, 2, 0):
        t = s.transform
        tile = replace(s, transform=(t[0], t[1], t[2] + 100.0 * k, t[3], t[4], t[5]))
        warp_window(a, tile, shape, dt, "EPSG:32632", 0.0, "average", maps=bounded)
    assert len(bounded) == 2 and bounded.bytes <= bounded.max_bytes
    assert bounded.tally() == (0, 4)  # tile 0 was dropped for tile 2, so made again
    tiny = MapCache(max_bytes=1000)
    warp_window(a, s, shape, dt, "EPSG:32632", 0.0, "average", maps=tiny)
    assert len(tiny) == 0 and tiny.bytes == 0


def test_threads_sharing_the_cache_get_the_same_bits() -> None:
    """The threads scheduler's tasks share one cache: bands resampled concurrently with the same maps
    (made by whichever thread came first) equal bands resampled alone; each thread counts its own."""
    a, s = source(*CASES["cross-zone"])
    t = s.transform
    tiles = [replace(s, transform=(t[0], t[1], t[2] + 60.0 * k, t[3], t[4], t[5])) for k in range(3)]
    bands = [a, other_band(a, 3), other_band(a, 4)]
    dt, shape = dst_grid("cross-zone", (256, 256))
    want = {
        (i, k): warp_window(b, tile, shape, dt, "EPSG:32632", 0.0, "average")
        for i, b in enumerate(bands)
        for k, tile in enumerate(tiles)
    }
    maps = MapCache()

    def work(i: int) -> tuple[dict[tuple[int, int], np.ndarray], tuple[int, int]]:
        got = {
            (i, k): warp_window(bands[i], tile, shape, dt, "EPSG:32632", 0.0, "average", maps=maps)
            for k, tile in enumerate(tiles)
        }
        return got, (threading.get_ident(), maps.tally())

    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(work, [0, 1, 2, 0, 1, 2]))
    for got, _ in results:
        for key, value in got.items():
            np.testing.assert_array_equal(value, want[key], err_msg=str(key))
    assert len(maps) == 3
    last = {ident: tally for _, (ident, tally) in results}  # each thread's count of its own windows
    assert sum(hits + made for hits, made in last.values()) == 6 * len(tiles)


def test_bands_of_one_grid_share_a_map() -> None:
    """Another file (another band or date) with the same grid, window and CRS is the same geometry: the
    path does not key the map; another window of the tile does."""
    _, s = source(*CASES["cross-zone"])
    other = replace(s, path="another-band.tif")
    moved = replace(s, transform=(*s.transform[:2], s.transform[2] + 10.0, *s.transform[3:]))
    dt, shape = dst_grid("cross-zone", (64, 64))
    maps = MapCache()
    keys = [maps.get(w, shape, dt, "EPSG:32632", "average", None)[0] for w in (s, other, moved)]
    assert keys[0] == keys[1] != keys[2]


def test_a_run_reports_the_maps_it_reused(small_config: Any) -> None:
    """Tasks count the maps they reused and made; the report sums them (bands of one grid share maps)."""
    from pipeline.execute.runner import run
    from pipeline.resample.warp import MAPS

    MAPS.clear()
    report = run(small_config("execution.scheduler=threads")).report
    maps, tasks = report["execution"]["maps"], report["tasks"]
    assert maps["reused"] == sum(t["maps_reused"] for t in tasks) > 0
    assert maps["made"] == sum(t["maps_made"] for t in tasks) > 0
    assert maps["reused"] + maps["made"] <= report["plan"]["windows"]
    assert 0 < maps["kept_mb"] <= MAPS.max_bytes / 1e6


@pytest.mark.parametrize("width", [200, 4000])  # (rows of 4000 columns are split into segments)
def test_line_bounds_are_the_extremes_of_the_positions(width: int) -> None:
    """``LineMap.bounds`` (nearest decides from it whether a block lies inside its source) equals the least
    and greatest of the positions themselves, bit for bit, over any run of rows, with rows whole or split
    into segments and segments starting away from their anchors (a chunk cut from a longer row)."""
    _, s = source(*CASES["cross-zone"])
    dt, _ = dst_grid("cross-zone")
    for grid in (None, RowSpan(dt, 3 * width, 5, width + 7)):
        lines = compute_coord_map(s, (64, width), dt, "EPSG:32632", "nearest", grid).centres
        assert lines is not None
        assert lines.one_per_row() == (width == 200)
        assert bool(lines.t0.any()) == (grid is not None)
        for r0, r1 in [(0, 64), (0, 1), (17, 40), (63, 64)]:
            x, y = lines.positions(np, r0, r1)
            assert lines.bounds(np, r0, r1) == (x.min(), x.max(), y.min(), y.max())
