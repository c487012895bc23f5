from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.resample import FirstValid, fuse_arrays, valid_mask


def _stack(xp: Any) -> list[Any]:
    a = xp.asarray([[0, 5, 7], [0, 0, 9]], dtype="u2")
    b = xp.asarray([[3, 4, 0], [0, 8, 1]], dtype="u2")
    return [a, b]


@pytest.mark.parametrize(
    ("method", "expected"),
    [
        ("first", [[3, 5, 7], [0, 8, 9]]),
        ("last", [[3, 4, 7], [0, 8, 1]]),
        ("min", [[3, 4, 7], [0, 8, 1]]),
        ("max", [[3, 5, 7], [0, 8, 9]]),
        ("mean", [[3, 4, 7], [0, 8, 5]]),  # (5+4)/2 = 4.5 rounds half to even
    ],
)
def test_fuse_methods_ignore_nodata(xp: Any, method: str, expected: list[list[int]]) -> None:
    out = fuse_arrays(_stack(xp), 0.0, method)
    assert out.dtype == np.dtype("u2")
    np.testing.assert_array_equal(np.asarray(out.get() if hasattr(out, "get") else out), expected)


def test_valid_mask_float_nan_nodata(xp: Any) -> None:
    a = xp.asarray([1.0, math.nan, -9999.0])
    assert valid_mask(a, math.nan).tolist() == [True, False, True]
    assert valid_mask(a, -9999.0).tolist() == [True, False, False]


@given(
    st.lists(st.lists(st.integers(0, 3), min_size=6, max_size=6), min_size=1, max_size=4),
    st.sampled_from(["first", "last", "min", "max", "mean"]),
)
def test_fuse_never_invents_coverage(rows: list[list[int]], method: str) -> None:
    arrays = [np.asarray(r, dtype="u2") for r in rows]
    out = fuse_arrays(arrays, 0.0, method)
    covered = np.any(np.stack(arrays) != 0, axis=0)
    assert np.array_equal(out != 0, covered)
    if method in ("first", "last", "min", "max"):
        for i in np.flatnonzero(covered):
            assert out[i] in {a[i] for a in arrays if a[i] != 0}


@given(
    st.lists(
        st.tuples(
            st.integers(0, 7), st.integers(0, 7), st.integers(1, 8), st.integers(1, 8), st.integers(0, 2**32 - 1)
        ),
        min_size=1,
        max_size=5,
    ),
    st.sampled_from([(0.0, "u2"), (math.nan, "f4"), (-1.0, "f4")]),
)
def test_first_valid_skips_only_what_fuse_would_not_take(windows: list[tuple[int, ...]], nd: tuple[float, str]) -> None:
    """Tile by tile, each resampled only over the box pending() gives, equals fuse_arrays on whole tiles."""
    nodata, dtype = nd
    shape = (8, 8)
    whole, mosaic = [], FirstValid(shape, nodata)
    for r, c, h, w, seed in windows:
        h, w = min(h, 8 - r), min(w, 8 - c)
        rng = np.random.default_rng(seed)
        tile = rng.integers(1, 9, (h, w)).astype(dtype)
        tile[rng.random((h, w)) < 0.4] = nodata
        full = np.full(shape, nodata, dtype=dtype)
        full[r : r + h, c : c + w] = tile
        whole.append(full)
        box = mosaic.pending((r, c, h, w))
        if box is None:
            assert valid_mask(fuse_arrays(whole[:-1], nodata, "first"), nodata)[r : r + h, c : c + w].all()
            continue
        br, bc, bh, bw = box
        assert r <= br and c <= bc and br + bh <= r + h and bc + bw <= c + w
        mosaic.add(full[br : br + bh, bc : bc + bw], br, bc)
    expected = fuse_arrays(whole, nodata, "first")
    np.testing.assert_array_equal(mosaic.result(), expected)


@pytest.mark.parametrize(("nodata", "dtype"), [(0.0, "u2"), (math.nan, "f4"), (-1.0, "f4")])
def test_first_valid_whole_chunk_tile_same_bits_as_a_partial_one(nodata: float, dtype: str) -> None:
    """A first tile covering the chunk becomes the mosaic: the same bits as when it is copied into a
    nodata-filled chunk (invalid pixels, NaNs of any payload included, end up as nodata's own bits)."""
    rng = np.random.default_rng(7)
    first = rng.integers(1, 9, (6, 6)).astype(dtype)
    first[rng.random((6, 6)) < 0.3] = nodata
    second = rng.integers(1, 9, (4, 4)).astype(dtype)
    if dtype == "f4":
        first[0, 0] = np.uint32(0x7FC00001).view("f4")  # a NaN with another payload than np.nan's
        first[1, 1] = math.nan
    second[0, :] = nodata
    adopted, copied = FirstValid((6, 6), nodata), FirstValid((6, 6), nodata)
    adopted.add(first.copy(), 0, 0)
    copied.add(np.pad(first, 1)[1:-1, 1:-1], 0, 0)  # a view: not taken over
    assert copied.result() is not None and not np.shares_memory(copied.result(), first)
    for mosaic in (adopted, copied):
        assert mosaic.pending((1, 1, 4, 4)) is not None or valid_mask(first, nodata)[1:5, 1:5].all()
        mosaic.add(second.copy(), 1, 1)
    full2 = np.full((6, 6), nodata, dtype=dtype)
    full2[1:5, 1:5] = second
    expected = fuse_arrays([first, full2], nodata, "first")
    bits = "u2" if dtype == "u2" else "u4"
    np.testing.assert_array_equal(adopted.result().view(bits), copied.result().view(bits))
    np.testing.assert_array_equal(adopted.result(), expected)
    if dtype == "f4":  # every invalid pixel holds nodata's bits (np.nan's or -1's), not the tile's NaNs
        invalid = ~valid_mask(adopted.result(), nodata)
        assert (adopted.result().view("u4")[invalid] == np.asarray(nodata, dtype="f4").view("u4")).all()
