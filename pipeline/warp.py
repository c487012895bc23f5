"""Resampling engines behind one seam: warp one source window onto one chunk.

``gdal`` runs GDAL's warper (``rasterio.warp.reproject``) on the in-memory
window. The array kernels that also run on the GPU plug in here as further
engines; the task code calls :func:`warp_window` and nothing else.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from pipeline.plan import SourceWindow

# Our method names -> rasterio's Resampling members where they differ.
GDAL_NAMES = {"median": "med"}


@lru_cache(maxsize=256)
def _crs(text: str) -> Any:
    from rasterio.crs import CRS

    return CRS.from_user_input(text)


def warp_window(
    src_array: np.ndarray,
    src: SourceWindow,
    dst_shape_yx: tuple[int, int],
    dst_transform: tuple[float, ...],
    dst_crs: str,
    dst_nodata: float,
    method: str,
) -> np.ndarray:
    """Resample ``src_array`` (the pixels of ``src.window``) onto a destination chunk."""
    from affine import Affine
    from rasterio.enums import Resampling
    from rasterio.warp import reproject

    dst = np.full(dst_shape_yx, dst_nodata, dtype=src_array.dtype)
    src_nodata = None if np.isnan(src.nodata) and src_array.dtype.kind != "f" else src.nodata
    reproject(
        source=src_array,
        destination=dst,
        src_transform=Affine(*src.transform),
        src_crs=_crs(src.crs),
        src_nodata=src_nodata,
        dst_transform=Affine(*dst_transform),
        dst_crs=_crs(dst_crs),
        dst_nodata=dst_nodata,
        resampling=Resampling[GDAL_NAMES.get(method, method)],
        num_threads=1,
    )
    return dst
