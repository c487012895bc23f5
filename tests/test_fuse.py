from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.resample import fuse_arrays, valid_mask


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


@given(st.lists(st.lists(st.integers(0, 3), min_size=6, max_size=6), min_size=1, max_size=4),
       st.sampled_from(["first", "last", "min", "max", "mean"]))  # fmt: skip
def test_fuse_never_invents_coverage(rows: list[list[int]], method: str) -> None:
    arrays = [np.asarray(r, dtype="u2") for r in rows]
    out = fuse_arrays(arrays, 0.0, method)
    covered = np.any(np.stack(arrays) != 0, axis=0)
    assert np.array_equal(out != 0, covered)
    if method in ("first", "last", "min", "max"):
        for i in np.flatnonzero(covered):
            assert out[i] in {a[i] for a in arrays if a[i] != 0}
