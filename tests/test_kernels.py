"""The array kernels against GDAL on the same arrays, seams, coordinate-map error, nodata placement."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from affine import Affine
from hypothesis import given, settings
from hypothesis import strategies as st
from rasterio.crs import CRS
from rasterio.enums import Resampling
from rasterio.warp import reproject
from scipy.ndimage import binary_erosion

from pipeline.planning.grid import transform_points
from pipeline.planning.jobs import SourceWindow
from pipeline.resample.kernels import KERNEL_METHODS, RESAMPLERS, CoordMap, resample
from pipeline.resample.transform import approx_lines
from pipeline.resample.warp import GDAL_NAMES, RowSpan, compute_coord_map, warp_window

N = 1100


def source(crs: str, x0: float, y0: float, res: float = 10.0) -> tuple[np.ndarray, SourceWindow]:
    """A smooth, coordinate-encoded raster with noise and a nodata hole."""
    yy, xx = np.mgrid[0:N, 0:N]
    v = 2000 + 800 * np.sin(xx / 37.0) * np.cos(yy / 53.0) + 0.5 * xx
    v += np.random.default_rng(0).normal(0, 2, (N, N))
    a = np.clip(np.rint(v), 1, 65535).astype("u2")
    a[300:420, 500:700] = 0
    return a, SourceWindow("mem", -1, (0, 0, N, N), (res, 0.0, x0, 0.0, -res, y0), crs, 0.0)


CASES = {
    # a 20 m zone-32 grid over a 10 m zone-31 source: reprojection and 2x downsampling
    "cross-zone": ("EPSG:32631", 730_000.0, 4_990_000.0),
    # the same CRS, 10 m -> 20 m, offset by a non-integer number of source pixels
    "same-crs": ("EPSG:32632", 300_000.0, 4_990_000.0),
}


def dst_grid(case: str, shape: tuple[int, int] = (512, 512)) -> tuple[tuple[float, ...], tuple[int, int]]:
    crs, x0, y0 = CASES[case]
    if case == "same-crs":
        return (20.0, 0.0, x0 + 405.0, 0.0, -20.0, y0 - 615.0), shape
    tx, ty = transform_points(crs, "EPSG:32632", np.array([x0 + 2000.0]), np.array([y0 - 2000.0]))
    return (20.0, 0.0, round(tx[0] / 20) * 20, 0.0, -20.0, round(ty[0] / 20) * 20), shape


def gdal(a: np.ndarray, s: SourceWindow, dt: tuple[float, ...], shape: tuple[int, int], method: str) -> np.ndarray:
    out = np.zeros(shape, a.dtype)
    reproject(
        a,
        out,
        src_transform=Affine(*s.transform),
        src_crs=CRS.from_user_input(s.crs),
        src_nodata=0,
        dst_transform=Affine(*dt),
        dst_crs=CRS.from_user_input("EPSG:32632"),
        dst_nodata=0,
        resampling=Resampling[GDAL_NAMES.get(method, method)],
        num_threads=1,
    )
    return out


@pytest.mark.parametrize("compiled", ["1", "0"])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("method", KERNEL_METHODS)
def test_kernels_agree_with_gdal(case: str, method: str, compiled: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernels against GDAL's warper, with the compiled kernels where they apply and without (the NumPy
    kernels alone, ``PIPELINE_COMPILED=0``)."""
    monkeypatch.setenv("PIPELINE_COMPILED", compiled)
    a, s = source(*CASES[case])
    dt, shape = dst_grid(case)
    ref = gdal(a, s, dt, shape, method)
    got = warp_window(a, s, shape, dt, "EPSG:32632", 0.0, method, engine="kernels")
    both = (ref != 0) & (got != 0)
    value_range = float(ref[both].max()) - float(ref[both].min())
    diff = np.abs(got[both].astype("f8") - ref[both])
    assert np.mean((ref != 0) != (got != 0)) <= 0.005
    if method == "nearest":
        inner = binary_erosion(both, iterations=1)  # the border pixel excluded
        share = np.mean(got[inner] == ref[inner])
        # Same CRS: exact maps, identical. Across CRSs both use GDAL's approximate transformer along
        # the same rows, so the picks agree too (the acceptance bound is 99%).
        assert share >= (1.0 if case == "same-crs" else 0.999), share
    else:
        assert diff.mean() <= 0.001 * value_range
        assert np.percentile(diff, 99) <= 0.01 * value_range


@pytest.mark.parametrize("compiled", ["1", "0"])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("nodata", [math.nan, -9999.0, math.inf])
def test_average_of_infinite_values_is_nan_where_gdal_gives_nan(
    case: str, nodata: float, compiled: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Float tiles holding infinities (a band ratio's division by zero): GDAL's average is NaN wherever a
    footprint gives one weight, and a footprint that touches one with no weight is unaffected. The same
    pixels NaN with the compiled kernels and with the NumPy ones (a tap of weight 0 times infinity would
    be NaN, whichever pixels share a row block), the rest within the GDAL tolerance; an infinite nodata
    value still holds no data."""
    monkeypatch.setenv("PIPELINE_COMPILED", compiled)
    a, s = source(*CASES[case])
    a, s = a.astype("f4"), replace(s, nodata=nodata)
    a[a == 0] = nodata
    a[600:603, 100:900] = np.inf  # rows of +inf, a column of -inf crossing them
    a[200:1000, 451] = -np.inf
    if math.isinf(nodata):
        a[700:720, 200:260] = nodata  # holes of the nodata value, which is infinite too
    dt, shape = dst_grid(case)
    ref = np.full(shape, nodata, "f4")
    reproject(
        a, ref, src_transform=Affine(*s.transform), src_crs=CRS.from_user_input(s.crs), src_nodata=nodata,
        dst_transform=Affine(*dt), dst_crs=CRS.from_user_input("EPSG:32632"), dst_nodata=nodata,
        resampling=Resampling.average, num_threads=1,
    )  # fmt: skip
    got = warp_window(a, s, shape, dt, "EPSG:32632", nodata, "average", engine="kernels")
    assert np.isnan(ref).sum() > 300 and not np.isinf(got[got != nodata]).any()
    # Across CRSs a footprint that barely reaches an infinite pixel may reach it in one engine's
    # approximate map and not in the other's (the nodata placement's own bound); in one CRS they agree.
    differ = np.isnan(got) != np.isnan(ref)
    assert differ.sum() <= (0.002 * np.isnan(ref).sum() if case == "cross-zone" else 0), differ.sum()
    both = np.isfinite(ref) & np.isfinite(got) & (ref != nodata) & (got != nodata)
    assert np.mean((ref == nodata) != (got == nodata)) <= 0.005
    diff = np.abs(got[both].astype("f8") - ref[both])
    assert diff.mean() <= 0.001 * (float(ref[both].max()) - float(ref[both].min()))


@pytest.mark.parametrize("method", ["nearest", "average"])
def test_cross_crs_coordinate_map_error_is_below_an_eighth_of_a_pixel(method: str) -> None:
    _, s = source(*CASES["cross-zone"])
    dt, (h, w) = dst_grid("cross-zone", (700, 2400))  # wide rows: the approximation has to split them
    cmap = compute_coord_map(s, (h, w), dt, "EPSG:32632", method)
    lines, off = (cmap.centres, 0.5) if method == "nearest" else (cmap.corners, 0.0)
    assert lines is not None
    got_x, got_y = lines.positions(np)
    cols, rows = np.meshgrid(np.arange(lines.shape[1]) + off, np.arange(lines.shape[0]) + off)
    x, y = transform_points("EPSG:32632", s.crs, dt[2] + dt[0] * cols, dt[5] + dt[4] * rows)
    exact_x, exact_y = (x - s.transform[2]) / s.transform[0], (y - s.transform[5]) / s.transform[4]
    err = np.abs(got_x - exact_x) + np.abs(got_y - exact_y)  # GDAL's measure: L1, in source pixels
    assert 0 < err.max() <= 0.125


def test_tiles_of_one_crs_and_pixel_size_share_a_map_whatever_the_order() -> None:
    """A north-up tile's map is the cached origin-free map shifted by its origin: the same positions,
    bit for bit, whichever tile of that CRS and pixel size was mapped first."""
    from pipeline.resample import warp

    _, s = source(*CASES["cross-zone"])
    t = s.transform
    other = SourceWindow("mem2", -1, (0, 0, N, N), (t[0], 0.0, t[2] - 10_980.0, 0.0, t[4], t[5] + 5_490.0), s.crs, 0.0)
    dt, shape = dst_grid("cross-zone", (300, 400))
    grid = RowSpan(dt, 400, 0, 0)
    maps = {}
    for order in ((s, other), (other, s)):
        warp._origin_free_lines.cache_clear()
        for tile in order:
            maps[(order[0].path, tile.path)] = compute_coord_map(tile, shape, dt, "EPSG:32632", "average", grid)
    for tile in (s, other):
        a = maps[(s.path, tile.path)].corners
        b = maps[(other.path, tile.path)].corners
        assert a is not None and b is not None
        for got, ref in zip(a.positions(np), b.positions(np), strict=True):
            np.testing.assert_array_equal(got, ref)
        # and within a millionth of a pixel of the map made from the tile's own inverse geotransform
        inv = ~Affine(*tile.transform)
        direct = warp._approx("EPSG:32632", tile.crs, grid, *shape, False, (inv.a, inv.b, inv.c, inv.d, inv.e, inv.f))
        for got, ref in zip(a.positions(np), direct.positions(np), strict=True):
            assert np.abs(got - ref).max() < 1e-6


def quadratic(a: float, b: float, c: float) -> Any:
    """A smooth non-linear 'projection' for the approximation's own tests."""

    def exact(cols: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return a * cols + b * cols**2 + c * rows, rows + b * cols * rows / 100.0

    return exact


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 700), st.integers(1, 6), st.floats(0.5, 3.0), st.floats(0.0, 2e-4), st.data())
def test_approximation_is_within_budget_and_windows_are_slices(
    n_cols: int, n_rows: int, a: float, b: float, data: st.DataObject
) -> None:
    exact = quadratic(a, b, 0.3)
    rows = np.arange(n_rows) + 0.5
    whole = approx_lines(exact, rows, n_cols, 0, n_cols, 0.5)
    x, y = whole.positions(np)
    cols = np.broadcast_to(np.arange(n_cols) + 0.5, x.shape)
    ex, ey = exact(cols, np.broadcast_to(rows[:, None], x.shape))
    assert (np.abs(x - ex) + np.abs(y - ey)).max() <= 0.125 + 1e-9
    lo = data.draw(st.integers(0, n_cols - 1))
    hi = data.draw(st.integers(lo + 1, n_cols))
    part = approx_lines(exact, rows, n_cols, lo, hi, 0.5)
    px, py = part.positions(np)
    np.testing.assert_array_equal(px, x[:, lo:hi])  # a window of a row is that row's slice, bit for bit
    np.testing.assert_array_equal(py, y[:, lo:hi])


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("method", KERNEL_METHODS)
def test_chunk_by_chunk_equals_whole(case: str, method: str) -> None:
    a, s = source(*CASES[case])
    dt, shape = dst_grid(case, (384, 384))
    whole = warp_window(a, s, shape, dt, "EPSG:32632", 0.0, method, engine="kernels")
    pieces = np.zeros_like(whole)
    for r0 in range(0, 384, 128):
        for c0 in range(0, 384, 128):
            t = (dt[0], 0.0, dt[2] + dt[0] * c0, 0.0, dt[4], dt[5] + dt[4] * r0)
            pieces[r0 : r0 + 128, c0 : c0 + 128] = warp_window(
                a, s, (128, 128), t, "EPSG:32632", 0.0, method, grid=RowSpan(dt, 384, r0, c0)
            )
    np.testing.assert_array_equal(pieces, whole)


def test_kernels_run_on_the_array_module_they_are_given(xp: Any) -> None:
    src = xp.asarray(np.arange(64, dtype="u2").reshape(8, 8) + 1)
    cmap = CoordMap((4, 4), xe=xp.arange(0, 9, 2.0), ye=xp.arange(0, 9, 2.0))
    for method in KERNEL_METHODS:
        out = resample(src, 0.0, cmap, method)
        assert type(out) is type(src) and out.shape == (4, 4)
    avg = resample(src, 0.0, cmap, "average")
    expected = np.arange(64, dtype="f8").reshape(4, 2, 4, 2).mean(axis=(1, 3)) + 1
    np.testing.assert_array_equal(
        np.asarray(avg.get() if hasattr(avg, "get") else avg), np.floor(expected + 0.5).astype("u2")
    )


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 24), st.integers(2, 24), st.integers(1, 3), st.integers(0, 2**32 - 1))
def test_nodata_placement(h: int, w: int, factor: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    src = rng.integers(1, 1000, size=(h * factor, w * factor)).astype("u2")
    src[rng.random(src.shape) < 0.3] = 0
    cmap = CoordMap((h, w), xe=np.arange(w + 1) * float(factor), ye=np.arange(h + 1) * float(factor))
    avg = resample(src, 0.0, cmap, "average")
    blocks = src.reshape(h, factor, w, factor)
    # average: nodata exactly where a whole block is nodata; never 0 where any source is valid
    np.testing.assert_array_equal(avg == 0, (blocks == 0).all(axis=(1, 3)))
    near = resample(src, 0.0, cmap, "nearest")
    np.testing.assert_array_equal(
        near, src[factor // 2 :: factor, factor // 2 :: factor][:h, :w] if factor > 1 else src
    )
    for method in ("mode", "min", "max", "median"):  # the footprint statistics: nodata exactly there too
        np.testing.assert_array_equal(resample(src, 0.0, cmap, method) == 0, avg == 0)
    masked = np.ma.masked_equal(blocks.transpose(0, 2, 1, 3).reshape(h, w, -1).astype("i8"), 0)
    np.testing.assert_array_equal(resample(src, 0.0, cmap, "min"), masked.min(axis=-1).filled(0))
    np.testing.assert_array_equal(resample(src, 0.0, cmap, "max"), masked.max(axis=-1).filled(0))
    bil = resample(src, 0.0, cmap, "bilinear")
    assert not np.any((bil != 0) & (avg == 0) & (factor == 1))


@pytest.mark.parametrize("nodata", [0.0, math.nan])
def test_float_nodata(nodata: float) -> None:
    src = np.array([[1.0, 2.0], [nodata, 4.0]], dtype="f4")
    cmap = CoordMap((1, 1), xe=np.array([0.0, 2.0]), ye=np.array([0.0, 2.0]))
    out = resample(src, nodata, cmap, "average")
    assert out[0, 0] == pytest.approx(7.0 / 3.0)


FOOTPRINT_METHODS = [m for m in KERNEL_METHODS if m not in ("nearest", "bilinear", "cubic")]


@settings(max_examples=80, deadline=None)
@given(
    st.integers(3, 20),
    st.integers(3, 20),
    st.sampled_from([0.5, 1.0, 1 / 3, 2.0, 0.75]),
    st.sampled_from([0.5, 1.0, 1 / 3, 2.0, 0.75]),
    st.integers(-12, 12),
    st.integers(-12, 12),
    st.integers(0, 2**32 - 1),
)
def test_same_crs_fast_paths_equal_the_kernels(
    h: int, w: int, step: float, step_x: float, oy: int, ox: int, seed: int
) -> None:
    """Destinations on lattices of whole or split source pixels (identical grids, 60 m onto 20 m, 10 m
    onto 20 m, and steps that fit no lattice; each axis its own), reaching past the source's edges or
    not: the pixels off the source are cut away and the rest may be a gather of rows and columns; the
    result is the kernel's on the whole map, pixel for pixel."""
    rng = np.random.default_rng(seed)
    src = rng.integers(1, 1000, size=(12, 14)).astype("u2")
    src[rng.random(src.shape) < 0.2] = 0
    cmap = CoordMap((h, w), xe=ox * step_x + np.arange(w + 1) * step_x, ye=oy * step + np.arange(h + 1) * step)
    for method in FOOTPRINT_METHODS:
        np.testing.assert_array_equal(
            resample(src, 0.0, cmap, method), RESAMPLERS[method](src, 0.0, cmap), err_msg=method
        )


@pytest.mark.parametrize("method", FOOTPRINT_METHODS)
def test_aligned_upsampling_past_the_source_edge_matches_gdal(method: str) -> None:
    """60 m onto 20 m on shared edges, the destination reaching 30 pixels past the source's top-left
    corner: each destination pixel on the source is its one source pixel, as GDAL's; off the source,
    nodata. (GDAL also fills the one row and column just off the top and left edges: their footprints
    end on the source's edge and its warper clamps them onto the first source pixel.)"""
    a, s = source("EPSG:32632", 300_000.0, 4_990_000.0, res=60.0)
    dt = (20.0, 0.0, 300_000.0 - 600.0, 0.0, -20.0, 4_990_000.0 + 600.0)
    ref = gdal(a, s, dt, (384, 384), method)
    got = warp_window(a, s, (384, 384), dt, "EPSG:32632", 0.0, method, engine="kernels")
    assert (got[:30] == 0).all() and (got[:, :30] == 0).all()
    np.testing.assert_array_equal(got[30:, 30:], ref[30:, 30:])
    np.testing.assert_array_equal(np.repeat(np.repeat(a[:118, :118], 3, axis=0), 3, axis=1), ref[30:, 30:])


@pytest.mark.parametrize("method", KERNEL_METHODS)
def test_large_sources_give_the_same_pixels_without_a_framed_copy(method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sources over WHOLE_FRAME_BYTES are not copied into a zero frame whole: the weighted methods frame
    bands of rows a few blocks deep, nearest masks the pixels off the source. Same pixels either way (the
    NumPy kernels: the compiled ones would take these maps)."""
    from pipeline.resample import common

    monkeypatch.setenv("PIPELINE_COMPILED", "0")
    a, s = source(*CASES["cross-zone"])
    dt, shape = dst_grid("cross-zone", (600, 600))
    framed_whole = warp_window(a, s, shape, dt, "EPSG:32632", 0.0, method, engine="kernels")
    monkeypatch.setattr(common, "WHOLE_FRAME_BYTES", 0)
    monkeypatch.setattr(common, "BLOCK_PX", 1 << 14)  # more blocks, so bands are framed again and reused
    np.testing.assert_array_equal(
        warp_window(a, s, shape, dt, "EPSG:32632", 0.0, method, engine="kernels"), framed_whole
    )
    assert (framed_whole[:, -1] == 0).all() and (framed_whole != 0).any()  # it reaches past the source


@pytest.mark.parametrize("nodata", [False, True])
@pytest.mark.parametrize("stretch", [(2, 2), (3, 2), (2, 3), (2, 1), (1, 2)])
def test_bands_prefiltered_one_by_one_equal_the_whole_source_prefiltered(
    stretch: tuple[int, int], nodata: bool
) -> None:
    """A large source's bilinear prefilter runs a band of rows at a time into a reused, framed buffer;
    every band equals the same rows of the whole source prefiltered, framed, bit for bit (float pixels,
    so a neighbour row left out would show), at the source's edges and away from them."""
    from pipeline.resample import common, weighted

    rng = np.random.default_rng(7)
    src = rng.uniform(0, 1000, (90, 70)).astype("f4")
    valid = rng.random(src.shape) > 0.1 if nodata else np.ones(src.shape, bool)
    whole = np.where(valid, src, 0).astype("f4")
    vwhole = valid.astype("f4")
    for axis, s in ((1, stretch[0]), (0, stretch[1])):
        whole = common._tent_prefilter(whole, s, axis, np)
        vwhole = common._tent_prefilter(vwhole, s, axis, np)
    lazy = weighted._LazyRows(src, valid if nodata else None, stretch, np)
    pixels = weighted._Weighted(None, None, np.float32, np, lazy=lazy)
    pad = 4
    for r0, r1 in [(0, 20), (1, 2), (30, 61), (75, 90), (0, 90)]:
        got = pixels._made_into(lazy, "data", r0, r1, pad)
        np.testing.assert_array_equal(got, common._pad(whole[r0:r1], pad, 0, np))
        if nodata:
            np.testing.assert_array_equal(
                pixels._made_into(lazy, "valid", r0, r1, pad), common._pad(vwhole[r0:r1], pad, 0, np)
            )


@pytest.mark.parametrize("method", [m for m in KERNEL_METHODS if m not in ("nearest", "bilinear", "cubic")])
def test_taps_of_weight_one_give_the_same_pixels_as_weight_arrays(method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Downsampling by 2 or more, a footprint covers some of its source pixels whole for every
    destination pixel: those taps weigh ONE, a number, and add their pixels without a product. The
    result equals the one with those weights spelt out as arrays of ones, bit for bit (the NumPy kernels')."""
    from pipeline.resample import common

    monkeypatch.setenv("PIPELINE_COMPILED", "0")
    a, s = source(*CASES["cross-zone"])
    dt, shape = dst_grid("cross-zone")
    with_one = warp_window(a, s, shape, dt, "EPSG:32632", 0.0, method, engine="kernels")
    real, seen = common._footprint_taps, []

    def spelt_out(*args: Any, **kw: Any) -> Any:
        first, wts = real(*args, **kw)
        seen.append(any(w is common.ONE for w in wts))
        return first, [np.ones(first.shape, dtype=wts[0].dtype) if w is common.ONE else w for w in wts]

    monkeypatch.setattr(common, "_footprint_taps", spelt_out)
    np.testing.assert_array_equal(warp_window(a, s, shape, dt, "EPSG:32632", 0.0, method, engine="kernels"), with_one)
    assert any(seen)


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from([1.0, 1 / 3, 0.5]),
    st.integers(-6, 6),
    st.integers(-6, 6),
    st.sampled_from([math.nan, -9999.0]),
    st.integers(0, 2**32 - 1),
)
def test_same_crs_fast_paths_for_float_pixels(step: float, oy: int, ox: int, nodata: float, seed: int) -> None:
    """Float pixels with NaN holes, NaN or a number as nodata: the fast paths place nodata where the
    kernels do (NaN pixels count as nodata) and give the same values (the kernels' weighted mean of one
    pixel may differ from it in the last bit)."""
    rng = np.random.default_rng(seed)
    src = rng.uniform(-50, 50, size=(9, 11)).astype("f4")
    src[rng.random(src.shape) < 0.2] = np.nan
    if not math.isnan(nodata):
        src[rng.random(src.shape) < 0.1] = nodata
    cmap = CoordMap((14, 16), xe=ox * step + np.arange(17) * step, ye=oy * step + np.arange(15) * step)
    for method in FOOTPRINT_METHODS:
        got, want = resample(src, nodata, cmap, method), RESAMPLERS[method](src, nodata, cmap)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=0, equal_nan=True, err_msg=method)


def test_method_table_matches_the_kernels_and_gdal() -> None:
    """The one table of methods: each has an array kernel, a GDAL name rasterio knows, and the family
    its kernel implements (a point method samples centres, the others footprints)."""
    from rasterio.enums import Resampling

    from pipeline.resample import kernels
    from pipeline.resample.methods import METHODS

    assert set(kernels.RESAMPLERS) == set(METHODS)
    for name, m in METHODS.items():
        assert hasattr(Resampling, m.gdal_name), name
        assert (name in kernels.CENTRE_METHODS) == (m.family == "point")
        assert m.reads_overviews == (m.family != "rank" and name != "nearest")


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 40),
    stretch=st.integers(2, 5),
    step=st.integers(1, 12),
    seed=st.integers(0, 2**16),
)
def test_tent_prefilter_by_row_ranges_equals_the_whole(rows: int, stretch: int, step: int, seed: int) -> None:
    """The large-source bilinear path prefilters a band range by range while it is in cache
    (``_tent_rows``); that must sum every row exactly as the whole-array prefilter does, bit for bit, for
    any stretch and any range length (one row at a time included)."""
    from pipeline.resample.common import _tent_prefilter, _tent_rows

    a = np.random.default_rng(seed).random((rows, 7)).astype("f4") * 1000
    whole = _tent_prefilter(a.copy(), stretch, 0, np)
    ranged, above = a.copy(), None
    for c0 in range(0, rows, step):
        above = _tent_rows(ranged, c0, min(rows, c0 + step), stretch, above, np)
    assert ranged.tobytes() == whole.tobytes()


@pytest.mark.parametrize("dtype", ["u1", "u2", "i2", "i4", "f4", "f8"])
def test_all_valid_agrees_with_the_mask(dtype: str) -> None:
    """``all_valid`` answers what ``valid_mask(...).all()`` does, reading the values instead of forming
    the mask where it can: nodata 0, the type's extremes, NaN, or any other value; with nodata present
    once or not at all."""
    from pipeline.resample.common import all_valid, valid_mask

    info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else None
    nodatas = [0.0, float("nan"), 7.0] + ([float(info.max), float(info.min)] if info is not None else [-1.5])
    rng = np.random.default_rng(3)
    for nodata in nodatas:
        clean = (rng.integers(1, 100, (9, 11)) + 10).astype(dtype)  # never 0, 7, an extreme or NaN
        for a in (clean, clean.copy()):
            if a is not clean and not (np.isnan(nodata) and info is not None):  # (integers cannot hold NaN)
                a[4, 5] = np.nan if np.isnan(nodata) else nodata
            assert all_valid(a, nodata, np) == bool(valid_mask(a, nodata, np).all()), (dtype, nodata)
        if np.dtype(dtype).kind == "f":
            b = clean.copy()
            b[0, 0] = np.nan  # NaN is never data
            assert all_valid(b, 5.0, np) is False
