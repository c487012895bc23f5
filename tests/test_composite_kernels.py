"""Clear-sky masks and temporal reductions (pipeline/resample/mask.py, reduce.py) against independent
references: per-value loops, scipy's binary dilation, GDAL's nearest (rasterio.warp.reproject) at
Sentinel-2's 10/20/60 m and overview levels, numpy's nan-reductions; results that never depend on how a
data window is split; the same code on CuPy where a GPU exists."""

from __future__ import annotations

import math
import tracemalloc
import warnings
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import rasterio.warp
from affine import Affine
from rasterio.enums import Resampling
from scipy import ndimage

from pipeline.resample import mask, reduce
from pipeline.resample.mask import (
    apply_mask,
    dilate,
    drop_pixels,
    mask_window,
    sample_nearest,
    window_transform,
)
from pipeline.resample.reduce import REDUCERS, Reduction, output_dtype, output_nodata, peak_bytes, sorting_network

CRS = "EPSG:32632"
SCL_EXCLUDE = (0, 1, 3, 8, 9, 10)
"""Sentinel-2 SCL classes a clear-sky composite drops: no data, saturated, cloud shadow, clouds, cirrus."""


def host(a: Any) -> np.ndarray:
    """A NumPy copy of a NumPy or CuPy array."""
    return a.get() if hasattr(a, "get") else np.asarray(a)


# ------------------------------------------------------------------------------------------ drop_pixels
def loop_drop(values: np.ndarray, exclude: tuple, bits: tuple) -> np.ndarray:
    out = np.zeros(values.shape, bool)
    for idx, v in np.ndenumerate(values):
        v = v.item()
        hit = any(v == e or (isinstance(v, float) and math.isnan(v) and math.isnan(e)) for e in exclude)
        if bits:
            width = 8 * values.dtype.itemsize
            unsigned = v & ((1 << width) - 1)  # two's complement bits of a signed value
            hit = hit or any(unsigned >> b & 1 for b in bits)
        out[idx] = hit
    return out


@pytest.mark.parametrize(
    "dtype, exclude, bits",
    [
        ("uint8", SCL_EXCLUDE, ()),
        ("uint8", (3, 300, 2.5, -1), ()),  # classes the band cannot hold match nothing
        ("uint16", (), (1, 3, 4)),  # Landsat QA_PIXEL: dilated cloud, cloud, cloud shadow
        ("uint16", (1,), (15, 40)),  # bit 40 is past a uint16's width: never set
        ("int16", (-5,), (15, 0)),  # the sign bit of a signed band
        ("int32", (7,), (31, 2)),
        ("float32", (3.0, 8.5, math.nan), ()),
    ],
)
def test_drop_pixels_against_a_loop(dtype: str, exclude: tuple, bits: tuple) -> None:
    rng = np.random.default_rng(3)
    info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else None
    if info is not None:
        values = rng.integers(max(info.min, -40000), min(info.max, 70000), (23, 31), endpoint=True).astype(dtype)
        values[0, :12] = np.array([0, 1, 3, 8, 9, 10, 11, 2, 4, info.max, info.min, 16], dtype=np.int64).astype(dtype)
    else:
        values = rng.choice(np.array([1.0, 3.0, 8.5, 8.0, math.nan], dtype), (23, 31))
    got = drop_pixels(values, exclude, bits)
    want = loop_drop(values, exclude, bits)
    assert got.dtype == bool
    np.testing.assert_array_equal(got, want)
    assert want.any() and not want.all()


def test_drop_pixels_refuses_bits_of_a_float_band_and_bits_past_63() -> None:
    with pytest.raises(ValueError, match="float32"):
        drop_pixels(np.zeros((2, 2), "float32"), exclude_bits=(3,))
    with pytest.raises(ValueError, match="64"):
        drop_pixels(np.zeros((2, 2), "uint16"), exclude_bits=(64,))
    assert not drop_pixels(np.full((2, 2), 255, "uint8")).any()  # nothing asked, nothing dropped


# ----------------------------------------------------------------------------------------------- dilate
@pytest.mark.parametrize("radius", [0, 1, 2, 3, 5, 8, 40])
def test_dilate_against_scipy(radius: int) -> None:
    rng = np.random.default_rng(radius)
    drop = rng.random((37, 53)) < 0.02
    drop[0, 0] = drop[-1, 20] = drop[10, -1] = True  # at the edges: nothing beyond them is dropped
    want = ndimage.binary_dilation(drop, structure=np.ones((2 * radius + 1,) * 2, bool)) if radius else drop
    got = dilate(drop, radius)
    np.testing.assert_array_equal(got, want)
    if radius == 0:
        assert got is drop


def test_dilate_of_a_single_pixel_is_a_square() -> None:
    drop = np.zeros((15, 15), bool)
    drop[7, 7] = True
    got = dilate(drop, 3)
    assert got.sum() == 49 and got[4:11, 4:11].all()


# ---------------------------------------------------------------------------- mask_window, sample_nearest
MASK_RES = 20.0
MASK_SHAPE = (150, 180)  # an SCL file's corner: enough for every ratio, quick for GDAL


def tile_transform(origin: tuple[float, float], res: float) -> tuple[float, ...]:
    return (res, 0.0, origin[0], 0.0, -res, origin[1])


def scl_values(seed: int) -> np.ndarray:
    """SCL-like classes in blobs (clouds cover runs of pixels), so windows cut through them."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 12, (MASK_SHAPE[0] // 3 + 1, MASK_SHAPE[1] // 3 + 1))
    noisy = np.kron(coarse, np.ones((3, 3), int))[: MASK_SHAPE[0], : MASK_SHAPE[1]]
    flip = rng.random(MASK_SHAPE) < 0.1
    return np.where(flip, rng.integers(0, 12, MASK_SHAPE), noisy).astype("uint8")


def gdal_nearest(values: np.ndarray, src: tuple, dst: tuple, shape: tuple[int, int]) -> np.ndarray:
    """GDAL's nearest of ``values`` onto a grid; 255 where a centre falls off the source."""
    out = np.full(shape, 255, "uint8")
    rasterio.warp.reproject(
        values,
        out,
        src_transform=Affine(*src),
        dst_transform=Affine(*dst),
        src_crs=CRS,
        dst_crs=CRS,
        resampling=Resampling.nearest,
        src_nodata=None,
        dst_nodata=255,
    )
    return out


# Sentinel-2: 10, 20 and 60 m bands read at full resolution and at overview levels 2x and 4x (Sentinel-2's
# tiles' own origins), data windows from the tile's corner and from inside it.
ORIGINS = [(600000.0, 5000040.0), (699960.0, 4890240.0)]
LEVELS = [(10.0, 1), (10.0, 2), (10.0, 4), (20.0, 1), (20.0, 2), (20.0, 4), (60.0, 1), (60.0, 2), (60.0, 4)]


@pytest.mark.parametrize("origin", ORIGINS)
@pytest.mark.parametrize("band_res, level", LEVELS)
def test_sample_nearest_against_gdal(origin: tuple[float, float], band_res: float, level: int) -> None:
    res = band_res * level
    values = scl_values(int(res))
    file_transform = tile_transform(origin, MASK_RES)
    extent = MASK_SHAPE[0] * MASK_RES
    n = int(extent // res)
    for row, col, h, w in [(0, 0, n, n), (n // 5, n // 3, n // 2, n // 3 + 1), (1, 3, max(n - 4, 1), 2)]:
        data = window_transform(tile_transform(origin, res), (row, col, h, w))
        r0, c0, mh, mw = mask_window(data, (h, w), file_transform, MASK_SHAPE, pad=0)
        window = values[r0 : r0 + mh, c0 : c0 + mw]
        got = sample_nearest(
            drop_pixels(window, SCL_EXCLUDE), window_transform(file_transform, (r0, c0, mh, mw)), data, (h, w)
        )
        reference = gdal_nearest(values, file_transform, data, (h, w))
        assert (reference != 255).all()
        np.testing.assert_array_equal(got, drop_pixels(reference, SCL_EXCLUDE))
        assert got.any() and not got.all()


def test_a_centre_on_a_mask_pixel_edge_takes_the_pixel_right_and_below_as_gdal() -> None:
    """A 60 m band at overview 2x (120 m) has its centres at 60 + 120 j m: on 20 m mask pixel edges."""
    values = (np.arange(MASK_SHAPE[0] * MASK_SHAPE[1]) % 251).reshape(MASK_SHAPE).astype("uint8")
    file_transform = tile_transform(ORIGINS[1], MASK_RES)
    data, shape = tile_transform(ORIGINS[1], 120.0), (20, 25)
    picked = [sample_nearest(values == v, file_transform, data, shape) for v in range(251)]
    got = np.argmax(np.stack(picked), axis=0)
    np.testing.assert_array_equal(got, gdal_nearest(values, file_transform, data, shape))
    assert got[0, 0] == values[3, 3] and got[1, 1] == values[9, 9]


def test_mask_window_is_tight_and_empty_off_the_file() -> None:
    file_transform = tile_transform(ORIGINS[0], MASK_RES)
    data = window_transform(tile_transform(ORIGINS[0], 10.0), (41, 17, 30, 22))
    win = mask_window(data, (30, 22), file_transform, MASK_SHAPE, pad=0)
    assert win == (20, 8, 16, 12)  # 10 m rows 41..70 lie on 20 m rows 20..35, columns 17..38 on 8..19
    assert mask_window(data, (30, 22), file_transform, MASK_SHAPE, pad=3) == (17, 5, 22, 18)
    corner = tile_transform(ORIGINS[0], 10.0)
    assert mask_window(corner, (4, 4), file_transform, MASK_SHAPE, pad=5) == (0, 0, 7, 7)  # clipped
    # Every pixel of the window is used: shrinking any side loses some data pixel's mask pixel.
    r0, c0, h, w = win
    whole = sample_nearest(np.ones((h, w), bool), window_transform(file_transform, win), data, (30, 22))
    assert whole.all()
    for shrunk in [(r0 + 1, c0, h - 1, w), (r0, c0 + 1, h, w - 1), (r0, c0, h - 1, w), (r0, c0, h, w - 1)]:
        part = sample_nearest(np.ones(shrunk[2:], bool), window_transform(file_transform, shrunk), data, (30, 22))
        assert not part.all()
    far = window_transform(corner, (0, 5000, 10, 10))
    assert mask_window(far, (10, 10), file_transform, MASK_SHAPE, pad=2) == (0, 0, 0, 0)
    off = sample_nearest(np.ones((0, 0), bool), file_transform, far, (10, 10))
    assert off.shape == (10, 10) and not off.any()


def cuts(n: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    edges = sorted({0, n, *rng.integers(1, n, rng.integers(0, 4)).tolist()})
    return list(zip(edges[:-1], np.diff(edges).tolist(), strict=True))


@pytest.mark.parametrize("band_res, level", [(10.0, 1), (10.0, 4), (20.0, 1), (60.0, 1), (60.0, 2)])
@pytest.mark.parametrize("radius", [0, 1, 4])
def test_results_never_depend_on_how_a_data_window_is_split(band_res: float, level: int, radius: int) -> None:
    rng = np.random.default_rng(int(band_res * level) + radius)
    res = band_res * level
    values = np.where(rng.random(MASK_SHAPE) < 0.01, 9, 4).astype("uint8")  # sparse clouds: dilation leaves gaps
    file_transform = tile_transform(ORIGINS[1], MASK_RES)
    n = int(MASK_SHAPE[0] * MASK_RES // res)
    whole_window = (n // 7, n // 5, n - n // 7 - 1, n // 2)
    data = window_transform(tile_transform(ORIGINS[1], res), whole_window)
    shape = whole_window[2:]
    want = sample_nearest(dilate(drop_pixels(values, SCL_EXCLUDE), radius), file_transform, data, shape)
    assert want.any() and not want.all()
    for _ in range(4):
        got = np.zeros(shape, bool)
        for row, h in cuts(shape[0], rng):
            for col, w in cuts(shape[1], rng):
                part = window_transform(data, (row, col, h, w))
                win = mask_window(part, (h, w), file_transform, MASK_SHAPE, pad=radius)
                r0, c0, mh, mw = win
                drop = dilate(drop_pixels(values[r0 : r0 + mh, c0 : c0 + mw], SCL_EXCLUDE), radius)
                got[row : row + h, col : col + w] = sample_nearest(
                    drop, window_transform(file_transform, win), part, (h, w)
                )
        np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------------------- apply_mask
def test_apply_mask_copies_and_fills() -> None:
    data = np.arange(12, dtype="uint16").reshape(3, 4) + 1
    drop = data % 3 == 0
    out = apply_mask(data, drop, 0.0)
    assert out is not data and out.dtype == data.dtype
    np.testing.assert_array_equal(out, np.where(drop, 0, data))
    assert (data == np.arange(12).reshape(3, 4) + 1).all()  # the input is untouched
    floats = data.astype("float32")
    out = apply_mask(floats, drop, math.nan)
    assert np.isnan(out[drop]).all() and (out[~drop] == floats[~drop]).all()


def stack_with_holes(n: int, dtype: str, nodata: float, seed: int, shape: tuple[int, int] = (19, 23)) -> np.ndarray:
    """``n`` layers with ~40% nodata, a row with none clear and a row with exactly one clear each."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        stack = (rng.random((n, *shape)) * 1000 - 200).astype(dtype)  # fractions: a wrong average rounds apart
    else:
        info = np.iinfo(dtype)
        stack = rng.integers(max(info.min, -30000), info.max, (n, *shape), endpoint=True).astype(dtype)
        stack[:, 0, :5] = info.max  # the largest value is valid data
    stack[rng.random(stack.shape) < 0.4] = nodata
    stack[:, 1] = nodata
    stack[:, 2] = nodata
    stack[rng.integers(0, n), 2] = 5
    return stack


def as_nan(stack: np.ndarray, nodata: float) -> np.ndarray:
    """The stack as float (float64 for integers) with NaN where nodata."""
    out = stack.astype("f8") if stack.dtype.kind in "iu" else stack.copy()
    if not math.isnan(nodata):
        out[stack == nodata] = np.nan
    return out


def reference(reducer: str, stack: np.ndarray, nodata: float) -> np.ndarray:
    """numpy's nan-reductions over the clear values, then the output's type and nodata; first/last by a loop."""
    nans = as_nan(stack, nodata)
    clear = ~np.isnan(nans)
    count = clear.sum(axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN pixels
        if reducer == "median":
            values = np.nanmedian(nans, axis=0)
        elif reducer == "mean":
            values = np.nanmean(nans.astype("f8"), axis=0)
        elif reducer == "min":
            values = np.nanmin(nans, axis=0)
        elif reducer == "max":
            values = np.nanmax(nans, axis=0)
        elif reducer == "count":
            return count.astype("uint16")
        else:
            values = np.full(stack.shape[1:], np.nan)
            for idx in np.ndindex(*stack.shape[1:]):
                dates = np.flatnonzero(clear[(slice(None), *idx)])
                if dates.size:
                    values[idx] = nans[(dates[0] if reducer == "first" else dates[-1], *idx)]
    if stack.dtype.kind in "iu":
        info = np.iinfo(stack.dtype)
        values = np.clip(np.rint(values), info.min, info.max)
    values = np.where(count == 0, nodata, values)
    return values.astype(stack.dtype)


CASES = [("uint16", 0.0), ("float32", math.nan), ("int16", -32768.0), ("float32", -9999.0), ("uint8", 255.0)]


def reduce_stack(reducer: str, stack: np.ndarray, nodata: float, xp: Any = np) -> tuple[np.ndarray, np.ndarray]:
    red = Reduction(reducer, stack.shape[1:], stack.dtype, nodata, xp=xp)
    for layer in stack:
        red.add(xp.asarray(layer))
    values, count = red.result()
    return host(values), host(count)


@pytest.mark.parametrize("dtype, nodata", CASES[:2])
@pytest.mark.parametrize("n", range(1, 41))
def test_median_is_nanmedian(dtype: str, nodata: float, n: int) -> None:
    stack = stack_with_holes(n, dtype, nodata, seed=n)
    values, count = reduce_stack("median", stack, nodata)
    want = reference("median", stack, nodata)
    assert values.dtype == want.dtype
    np.testing.assert_array_equal(values, want)
    np.testing.assert_array_equal(count, (~np.isnan(as_nan(stack, nodata))).sum(axis=0))


@pytest.mark.parametrize("n", [5, 16, 33])
def test_median_over_blocks_is_the_same(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """Blocks of 17 pixels: every block edge in a row, the last block short."""
    stack = stack_with_holes(n, "uint16", 0.0, seed=100 + n)
    monkeypatch.setattr(reduce, "MEDIAN_BLOCK_BYTES", 17 * n * 2)
    values, _ = reduce_stack("median", stack, 0.0)
    np.testing.assert_array_equal(values, reference("median", stack, 0.0))


def test_integer_median_rounds_half_to_even() -> None:
    stack = np.array([[[1, 2, 5, 7]], [[2, 3, 0, 0]]], "uint16")  # medians 1.5, 2.5, 5, 7
    values, count = reduce_stack("median", stack, 0.0)
    assert values.tolist() == [[2, 2, 5, 7]] and count.tolist() == [[2, 2, 1, 1]]


@pytest.mark.parametrize("dtype, nodata", CASES)
@pytest.mark.parametrize("reducer", REDUCERS)
def test_reducers_against_numpy(reducer: str, dtype: str, nodata: float) -> None:
    for n in (1, 2, 7, 12):
        stack = stack_with_holes(n, dtype, nodata, seed=n)
        values, count = reduce_stack(reducer, stack, nodata)
        want = reference(reducer, stack, nodata)
        assert values.dtype == np.dtype(output_dtype(reducer, dtype)) == want.dtype
        np.testing.assert_array_equal(values, want)
        np.testing.assert_array_equal(count, (~np.isnan(as_nan(stack, nodata))).sum(axis=0))
        empty = count == 0
        assert empty.any()
        fill = output_nodata(reducer, nodata)
        assert np.isnan(values[empty]).all() if math.isnan(fill) else (values[empty] == fill).all()


def test_output_types_and_nodata() -> None:
    assert output_dtype("count", "float32") == "uint16" and output_nodata("count", math.nan) == 0
    assert output_dtype("mean", "uint16") == "uint16" and output_dtype("median", "float32") == "float32"
    assert output_nodata("max", -9999.0) == -9999.0
    with pytest.raises(ValueError, match="medoid"):
        Reduction("medoid", (2, 2), "uint16", 0.0)


def test_layers_are_neither_written_nor_kept() -> None:
    stack = stack_with_holes(6, "float32", math.nan, seed=9)
    before = stack.copy()
    for reducer in REDUCERS:
        red = Reduction(reducer, stack.shape[1:], stack.dtype, math.nan)
        for layer in stack:
            red.add(layer)
        values, _ = red.result()
        assert not any(np.shares_memory(values, layer) for layer in stack)
    np.testing.assert_array_equal(stack, before)


def test_sorting_network_sorts() -> None:
    """Every 0/1 input (the 0-1 principle) up to 12 values, random ones up to 40; a pruned network still
    sorts its first positions."""
    for n in range(1, 13):
        pairs = sorting_network(n)
        for bits in range(1 << n):
            a = [(bits >> i) & 1 for i in range(n)]
            for i, j in pairs:
                if a[i] > a[j]:
                    a[i], a[j] = a[j], a[i]
            assert a == sorted(a), (n, bits)
    rng = np.random.default_rng(0)
    for n in (17, 31, 40):
        for keep in (None, n // 2 + 1):
            for _ in range(200):
                a = rng.integers(0, 9, n).tolist()
                want = sorted(a)
                for i, j in sorting_network(n, keep):
                    if a[i] > a[j]:
                        a[i], a[j] = a[j], a[i]
                assert a[: keep or n] == want[: keep or n]
    assert len(sorting_network(32, 17)) < len(sorting_network(32))


@pytest.mark.parametrize("reducer", ["median", "mean", "min", "first", "count"])
def test_peak_bytes_bounds_what_a_reduction_holds(reducer: str) -> None:
    """tracemalloc's peak over a reduction of 1024 x 512 uint16 layers: under :func:`peak_bytes`, and not
    far under it; constant in the number of layers for a streaming reducer."""
    shape = (512, 1024)
    peaks = {}
    for n in (4, 12):
        stack = stack_with_holes(n, "uint16", 0.0, seed=1, shape=shape)
        tracemalloc.start()
        red = Reduction(reducer, shape, "uint16", 0.0)
        for layer in stack:
            red.add(layer)
        red.result()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        budget = peak_bytes(reducer, n, shape, "uint16")
        assert red.nbytes_peak == budget
        assert peak <= budget, (n, peak, budget)
        assert peak >= 0.5 * budget, (n, peak, budget)
        peaks[n] = peak
    if reducer == "median":  # every layer kept
        assert peaks[12] >= 12 * 2 * shape[0] * shape[1]
    else:
        assert peaks[12] < 1.05 * peaks[4]


# ------------------------------------------------------------------------------------------------- CuPy
def test_the_same_code_on_the_device(xp: Any) -> None:
    """NumPy always; CuPy where a GPU exists (the conftest's ``xp`` fixture skips it otherwise)."""
    stack = stack_with_holes(9, "uint16", 0.0, seed=4)
    for reducer in REDUCERS:
        got, count = reduce_stack(reducer, stack, 0.0, xp=xp)
        np.testing.assert_array_equal(got, reference(reducer, stack, 0.0))
    floats = stack_with_holes(8, "float32", math.nan, seed=5)
    got, _ = reduce_stack("median", floats, math.nan, xp=xp)
    np.testing.assert_array_equal(got, reference("median", floats, math.nan))
    values = scl_values(2)
    drop = drop_pixels(xp.asarray(values), SCL_EXCLUDE, xp=xp)
    np.testing.assert_array_equal(host(drop), drop_pixels(values, SCL_EXCLUDE))
    grown = dilate(drop, 2, xp=xp)
    np.testing.assert_array_equal(host(grown), dilate(drop_pixels(values, SCL_EXCLUDE), 2))
    file_transform = tile_transform(ORIGINS[0], MASK_RES)
    data = tile_transform(ORIGINS[0], 10.0)
    got_drop = sample_nearest(grown, file_transform, data, (200, 300), xp=xp)
    np.testing.assert_array_equal(host(got_drop), sample_nearest(host(grown), file_transform, data, (200, 300)))
    masked = apply_mask(xp.asarray(floats[0]), xp.asarray(floats[1] > 300), math.nan, xp=xp)
    np.testing.assert_array_equal(host(masked), apply_mask(floats[0], floats[1] > 300, math.nan))


@pytest.mark.parametrize("dtype", ["uint8", "int8", "uint16", "int16", "int32", "float32", "float64"])
def test_filled_and_put_give_either_sides_bits(dtype: str) -> None:
    """The branch-free selection behind apply_mask and the reducers: bit for bit ``np.where``, signed
    values, NaN, -0.0 and infinities included."""
    rng = np.random.default_rng(11)
    if np.dtype(dtype).kind == "f":
        pool = np.array([-0.0, 0.0, math.nan, math.inf, -math.inf, 1.5, -3.25, 1e30], dtype)
        a, b = rng.choice(pool, (9, 13)), rng.choice(pool, (9, 13))
        value = -0.0
    else:
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max, (9, 13), endpoint=True).astype(dtype)
        b = rng.integers(info.min, info.max, (9, 13), endpoint=True).astype(dtype)
        value = info.min
    where = rng.random((9, 13)) < 0.5
    u = f"u{np.dtype(dtype).itemsize}"
    np.testing.assert_array_equal(
        mask.filled(a, where, value).view(u), np.where(where, np.asarray(value, dtype), a).view(u)
    )
    base = a.copy()
    mask.put(base, where, b)
    np.testing.assert_array_equal(base.view(u), np.where(where, b, a).view(u))
    mask.put(base, ~where, value)
    np.testing.assert_array_equal(base.view(u), np.where(where, b, np.asarray(value, dtype)).view(u))


# ------------------------------------------------------------------- a worker's judged mask windows, kept
def test_kept_mask_windows_serve_every_band_and_judge_as_a_fresh_read(tmp_path: Any, monkeypatch: Any) -> None:
    """A worker keeps each judged mask window (``pipeline.execute.masks._JudgedMasks``): a chunk's 10, 20
    and 60 m bands, asked in any order and in parts, take one read of the SCL file, and every answer
    equals the drop mask judged from the whole file and sampled at the data pixels' centres."""
    from pipeline.execute import masks
    from pipeline.execute.context import TaskContext
    from pipeline.inputs.read import configure_reads, read_window
    from pipeline.planning.plan import MaskSource, SourceWindow

    rng = np.random.default_rng(7)
    scl = np.full((549, 549), 4, dtype="uint8")  # vegetation, with cloud, shadow and cirrus blobs
    for value in rng.choice(np.array([3, 8, 9, 10, 5], dtype="uint8"), size=60):
        r, c, h, w = rng.integers(0, 540), rng.integers(0, 540), rng.integers(1, 30), rng.integers(1, 30)
        scl[r : r + h, c : c + w] = value
    path = str(tmp_path / "T32_SCL.tif")
    origin = (399960.0, 5000040.0)
    file_t = Affine(20.0, 0, origin[0], 0, -20.0, origin[1])
    profile = {"driver": "GTiff", "width": 549, "height": 549, "count": 1, "dtype": "uint8", "crs": CRS}
    with rasterio.open(path, "w", transform=file_t, **profile) as ds:
        ds.write(scl, 1)
    m = MaskSource(path, 1, tuple(file_t)[:6], 549, 549)
    ctx = TaskContext(
        store_path="unused",
        grid_crs=CRS,
        grid_transform=tuple(file_t)[:6],
        bands=(),
        resampling="average",
        fuse="first",
        on_error="fail",
        mask_exclude=(3, 8, 9, 10),
        mask_dilate=2,
    )
    whole = dilate(drop_pixels(scl, (3, 8, 9, 10)), 2)
    reads: list[tuple[int, int, int, int]] = []

    def counted(src: SourceWindow) -> np.ndarray:
        reads.append(src.window)
        return read_window(src)

    monkeypatch.setattr(masks, "read_window", counted)

    def source(res: float, r0: int, c0: int, h: int, w: int) -> tuple[SourceWindow, tuple[int, int]]:
        t = (res, 0.0, origin[0] + c0 * res, 0.0, -res, origin[1] - r0 * res)
        return SourceWindow(path, -1, (r0, c0, h, w), t, CRS, float("nan"), mask=m), (h, w)

    # one chunk's 10, 20 and 60 m windows, then the 10 m window in two row strips
    asks = [
        source(10.0, 300, 410, 512, 512),
        source(20.0, 150, 205, 256, 256),
        source(60.0, 50, 68, 86, 86),
        source(10.0, 300, 410, 256, 512),
        source(10.0, 556, 410, 256, 512),
    ]
    for max_bytes, order in ((64 << 20, asks), (64 << 20, asks[::-1]), (0, asks)):  # kept in either order; none kept
        kept, reads[:] = masks._JudgedMasks(max_bytes), []
        for src, shape in order:
            got = kept.drop(ctx, src, shape)
            want = sample_nearest(whole, tuple(file_t)[:6], src.transform, shape)
            np.testing.assert_array_equal(got, want)
            assert 0.01 < got.mean() < 0.9  # the blobs and their margins, not all or nothing
        if max_bytes == 0:
            assert len(reads) == len(asks) and kept.bytes == 0
        elif order is asks:  # the whole 10 m window first: its read serves the rest
            assert len(reads) == 1 and kept.bytes > 0
        else:
            assert len(reads) < len(asks)

    # the file is made again between two runs (a resumed one too): the next run judges it afresh, the
    # same run keeps what it judged
    src, shape = asks[0]
    ctx = replace(ctx, run_token="first")
    configure_reads(None, (), "first")
    kept.max_bytes = 64 << 20
    kept.drop(ctx, src, shape)
    with rasterio.open(path, "w", transform=file_t, **profile) as ds:
        ds.write(np.where(scl == 4, np.uint8(9), np.uint8(4)), 1)
    again = dilate(drop_pixels(np.where(scl == 4, np.uint8(9), np.uint8(4)), (3, 8, 9, 10)), 2)
    np.testing.assert_array_equal(
        kept.drop(ctx, src, shape), sample_nearest(whole, tuple(file_t)[:6], src.transform, shape)
    )
    configure_reads(None, (), "second")  # as the next run's tasks do: its threads open the files afresh
    got = kept.drop(replace(ctx, run_token="second"), src, shape)
    np.testing.assert_array_equal(got, sample_nearest(again, tuple(file_t)[:6], src.transform, shape))
