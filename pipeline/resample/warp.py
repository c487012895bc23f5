"""Resampling engines behind one seam: warp one source window onto one chunk.

``kernels`` runs the project's array kernels (:mod:`pipeline.resample.kernels`,
NumPy or CuPy) on a coordinate map built here: exact and separable when the
source and destination share a CRS, else GDAL's approximate transformer along
the grid's rows (:mod:`pipeline.resample.transform`: exact pyproj positions at segment
ends), which the kernel interpolates. ``gdal`` runs GDAL's warper
(``rasterio.warp.reproject``) on the in-memory window. The task code calls
:func:`warp_window` and nothing else.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Collection
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from pipeline.planning.grid import transform_points
from pipeline.planning.jobs import Geometry, SourceWindow
from pipeline.resample.common import valid_mask
from pipeline.resample.coords import LineMap
from pipeline.resample.kernels import CENTRE_METHODS, CoordMap, resample
from pipeline.resample.methods import METHODS
from pipeline.resample.transform import approx_lines

# Our method names -> rasterio's Resampling members where they differ.
GDAL_NAMES = {name: m.gdal_name for name, m in METHODS.items() if m.gdal_name != name}


@lru_cache(maxsize=256)
def _crs(text: str) -> Any:
    from rasterio.crs import CRS

    return CRS.from_user_input(text)


@lru_cache(maxsize=1024)
def same_crs(a: str, b: str) -> bool:
    """Whether two CRS strings name the same CRS (pyproj's equality; cached)."""
    return a == b or bool(_crs(a) == _crs(b))


def _separable(src: SourceWindow, dst_transform: tuple[float, ...], dst_crs: str) -> bool:
    t = src.transform
    return t[1] == 0 and t[3] == 0 and dst_transform[1] == 0 and dst_transform[3] == 0 and same_crs(src.crs, dst_crs)


@dataclass(frozen=True)
class RowSpan:
    """Where a destination block sits in the grid: GDAL-style approximation runs along whole grid rows,
    so every chunk of a row sees the same positions (no seams)."""

    transform: tuple[float, ...]
    """The grid's geotransform (rasterio order)."""
    width: int
    row_off: int
    col_off: int


def compute_coord_map(
    src: SourceWindow,
    dst_shape_yx: tuple[int, int],
    dst_transform: tuple[float, ...],
    dst_crs: str,
    method: str = "nearest",
    grid: RowSpan | None = None,
) -> CoordMap:
    """Where the destination's pixels fall in the source window: exact and separable for one CRS, else
    GDAL's approximate transformer along the grid's rows (pixel centres or corners, as ``method`` reads).

    Positions are formed in the pixels of the whole tile from the grid's own pixel indices, then moved by
    the window's whole offsets (exact), so a pixel has the same source position, and so the same value,
    whichever chunk and window it is computed in."""
    h, w = dst_shape_yx
    scale = _scale(src, dst_transform, dst_crs)
    col_off, row_off, t = _tile_frame(src)
    if _separable(src, dst_transform, dst_crs):
        sa, sc, se, sf = t[0], t[2], t[4], t[5]
        if grid is None:
            da, dc, de, df = dst_transform[0], dst_transform[2], dst_transform[4], dst_transform[5]
            cols, rows = np.arange(w + 1, dtype="f8"), np.arange(h + 1, dtype="f8")
        else:  # the grid's corner and its pixel indices: the same numbers whichever chunk holds the pixel
            da, dc, de, df = grid.transform[0], grid.transform[2], grid.transform[4], grid.transform[5]
            cols = np.arange(grid.col_off, grid.col_off + w + 1, dtype="f8")
            rows = np.arange(grid.row_off, grid.row_off + h + 1, dtype="f8")
        xe = (dc + da * cols - sc) / sa - col_off
        ye = (df + de * rows - sf) / se - row_off
        return CoordMap(shape_yx=(h, w), xe=xe, ye=ye, scale_xy=scale)
    grid = grid or RowSpan(tuple(dst_transform[:6]), w, 0, 0)
    centres = method in CENTRE_METHODS
    if t[1] == 0 and t[3] == 0:
        # A north-up source: its origin only shifts the positions, so one map serves every tile of this
        # CRS and pixel size over the same part of the grid (every band and date of a tile): cached.
        lines = _origin_free_lines(dst_crs, src.crs, t[0], t[4], grid, h, w, centres)
        lines = lines.shifted(-t[2] / t[0], -t[5] / t[4])
    else:
        from affine import Affine  # (a rotated or sheared source; the workers have it from rasterio)

        inv = ~Affine(*t[:6])
        lines = _approx(dst_crs, src.crs, grid, h, w, centres, (inv.a, inv.b, inv.c, inv.d, inv.e, inv.f))
    lines = lines.windowed(col_off, row_off) if col_off or row_off else lines
    if centres:
        return CoordMap(shape_yx=(h, w), centres=lines, scale_xy=scale)
    return CoordMap(shape_yx=(h, w), corners=lines, scale_xy=scale)


def _tile_frame(src: SourceWindow) -> tuple[int, int, tuple[float, ...]]:
    """(column offset, row offset, affine of pixel (0, 0)) of the frame ``src``'s positions are formed in:
    the whole tile at its level where the window knows its tile's corner, else the window itself."""
    t = tuple(src.transform[:6])
    if src.tile_origin is None:
        return 0, 0, t
    return int(src.window[1]), int(src.window[0]), (t[0], t[1], src.tile_origin[0], t[3], t[4], src.tile_origin[1])


@lru_cache(maxsize=256)
def _origin_free_lines(
    dst_crs: str, src_crs: str, a: float, e: float, grid: RowSpan, h: int, w: int, centres: bool
) -> LineMap:
    """The line map of a north-up source whose origin is (0, 0): positions X / a, Y / e. A tile's map is
    this shifted by its origin (:meth:`LineMap.shifted`), the same whichever tile filled the cache."""
    return _approx(dst_crs, src_crs, grid, h, w, centres, (1.0 / a, 0.0, 0.0, 0.0, 1.0 / e, 0.0))


def _approx(
    dst_crs: str, src_crs: str, grid: RowSpan, h: int, w: int, centres: bool, inv: tuple[float, ...]
) -> LineMap:
    """GDAL's approximate transformer from grid pixels to source pixels (``inv``: georeferenced to
    source pixels) over ``h`` rows and ``w`` columns of the grid from ``grid``'s offsets."""
    ga, gb, gc, gd, ge, gf = grid.transform[:6]
    ia, ib, ic, id_, ie, if_ = inv

    def exact(cols: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # GDAL's GenImgProj transformer: destination pixel -> georeferenced -> source CRS -> source pixel
        x, y = transform_points(dst_crs, src_crs, gc + cols * ga + rows * gb, gf + cols * gd + rows * ge)
        return ia * x + ib * y + ic, id_ * x + ie * y + if_

    if centres:
        rows = grid.row_off + np.arange(h) + 0.5
        return approx_lines(exact, rows, grid.width, grid.col_off, grid.col_off + w, offset=0.5)
    rows = grid.row_off + np.arange(h + 1, dtype="f8")
    return approx_lines(exact, rows, grid.width + 1, grid.col_off, grid.col_off + w + 1, offset=0.0)


@lru_cache(maxsize=1024)
def _unit_metres(crs: str) -> float | None:
    c = _crs(crs)
    return float(c.linear_units_factor[1]) if c.is_projected else None


def _scale(src: SourceWindow, dst_transform: tuple[float, ...], dst_crs: str) -> tuple[float, float] | None:
    """Destination pixels per source pixel, the same for every chunk: from the two grids' pixel sizes
    (projected CRSs, or one CRS), else (a geographic CRS) one destination pixel's steps measured in the
    source's pixels at the tile's centre (at its corner where its size is not known: near a pole the corner
    can be the pole itself, where a pixel spans every longitude). None (estimated per map) where neither is
    known."""
    fs, fd = _unit_metres(src.crs), _unit_metres(dst_crs)
    t = src.transform
    if (fs is not None and fd is not None) or same_crs(src.crs, dst_crs):
        fs, fd = fs or 1.0, fd or 1.0
        return abs(t[0]) * fs / (abs(dst_transform[0]) * fd), abs(t[4]) * fs / (abs(dst_transform[4]) * fd)
    if src.tile_origin is None or t[1] != 0 or t[3] != 0:
        return None
    x0, y0 = src.tile_origin
    if src.tile_shape is not None:
        x0, y0 = x0 + t[0] * src.tile_shape[1] / 2, y0 + t[4] * src.tile_shape[0] / 2
    px, py = transform_points(src.crs, dst_crs, np.array([x0]), np.array([y0]))
    da, de = dst_transform[0], dst_transform[4]
    sx, sy = transform_points(dst_crs, src.crs, px + np.array([0.0, da, 0.0]), py + np.array([0.0, 0.0, de]))
    step_x, step_y = abs(float(sx[1] - sx[0]) / t[0]), abs(float(sy[2] - sy[0]) / t[4])
    if not (np.isfinite(step_x) and np.isfinite(step_y) and step_x > 0 and step_y > 0):
        return None
    return 1.0 / step_x, 1.0 / step_y


MAP_CACHE_BYTES = 256 << 20
"""Bytes of coordinate maps and their tap tables one process keeps (:class:`MapCache`): the casestudy's
reprojected windows at 512² chunks keep ~9 MB each with the average's taps. Maps no task left reads are
forgotten as the run goes (:mod:`pipeline.execute.maplife`), so this bounds only what later tasks will
read. The case study's partitions each span every chunk, so a worker takes its live maps around in a
cycle with every band and date, and a smaller bound thrashes: at 64 MiB it made 197 maps instead of 172,
for no less memory (docs/performance.md, the composite's memory)."""


class MapCache:
    """Coordinate maps by geometry, each keeping the tap tables its kernels make
    (:meth:`CoordMap.keeping_taps`), least recently used out first past ``max_bytes`` (0: none kept). A map depends on
    the source window's grid (transform, offsets and shape in its tile, the tile's corner, CRS), the
    destination block's, the method and where the block sits in the grid's rows, never on the band, the
    date or the pixels: bands of one resolution and
    the dates of one tile reuse it. One per process, shared by its threads (a lock around the table;
    maps and taps are never written into once made). Hits and misses are counted per thread, so a task
    (which runs on one thread) reads its own with :meth:`tally`. A run's driver tells each worker the
    source windows no task left reads (:mod:`pipeline.execute.maplife`), whose maps it forgets (:meth:`drop`)."""

    def __init__(self, max_bytes: int = MAP_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._maps: OrderedDict[tuple[Any, ...], tuple[CoordMap, int, int]] = OrderedDict()
        """key -> (map, bytes, tap tables it kept when measured)."""
        self._lock = threading.Lock()
        self._local = threading.local()
        self.bytes = 0
        """Bytes kept now (maps and taps, as last measured)."""

    def get(
        self,
        src: SourceWindow,
        dst_shape_yx: tuple[int, int],
        dst_transform: tuple[float, ...],
        dst_crs: str,
        method: str,
        grid: RowSpan | None,
    ) -> tuple[tuple[Any, ...], CoordMap]:
        """(key, map) for this geometry: the kept map, else a new one (kept once :meth:`settle` sizes it)."""
        key = (
            src.geometry(),
            tuple(dst_shape_yx),
            tuple(dst_transform[:6]),
            dst_crs,
            method,
            grid,
        )
        counts = self._counts()
        with self._lock:
            found = self._maps.get(key)
            if found is not None:
                self._maps.move_to_end(key)
        if found is not None:
            counts[0] += 1
            return key, found[0]
        counts[1] += 1
        cmap = compute_coord_map(src, dst_shape_yx, dst_transform, dst_crs, method, grid)
        return key, cmap.keeping_taps() if self.max_bytes > 0 else cmap

    def settle(self, key: tuple[Any, ...], cmap: CoordMap) -> None:
        """Keep ``cmap`` (after its kernel ran: its taps are made) at its size now; drop the least recently
        used maps past the bound (a map larger than the bound alone is not kept)."""
        with self._lock:
            kept = self._maps.get(key)
            if kept is not None and kept[0] is cmap and kept[2] == len(cmap.taps or ()):
                return  # (no new taps: the same size)
        size = cmap.nbytes()
        with self._lock:
            old = self._maps.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
            if size <= self.max_bytes:
                self._maps[key] = (cmap, size, len(cmap.taps or ()))
                self.bytes += size
            while self.bytes > self.max_bytes:
                _, (_, dropped, _) = self._maps.popitem(last=False)
                self.bytes -= dropped

    def drop(self, geometries: Collection[Geometry]) -> int:
        """Forget the maps of source windows of these geometries (:meth:`SourceWindow.geometry`: no task
        left will read one); the bytes freed."""
        if not geometries:
            return 0
        freed, wanted = 0, set(geometries)
        with self._lock:
            for key in [k for k in self._maps if k[0] in wanted]:
                freed += self._maps.pop(key)[1]
            self.bytes -= freed
        return freed

    def tally(self) -> tuple[int, int]:
        """(hits, misses) of this thread so far."""
        counts = self._counts()
        return counts[0], counts[1]

    def clear(self) -> None:
        """Forget every kept map."""
        with self._lock:
            self._maps.clear()
            self.bytes = 0

    def __len__(self) -> int:
        return len(self._maps)

    def _counts(self) -> list[int]:
        counts: list[int] | None = getattr(self._local, "counts", None)
        if counts is None:
            counts = self._local.counts = [0, 0]
        return counts


MAPS = MapCache()
"""This process's maps (:func:`warp_window` with ``maps=MAPS``; the tasks use it)."""


def warp_window(
    src_array: np.ndarray,
    src: SourceWindow,
    dst_shape_yx: tuple[int, int],
    dst_transform: tuple[float, ...],
    dst_crs: str,
    dst_nodata: float,
    method: str,
    engine: str = "kernels",
    device: str = "cpu",
    grid: RowSpan | None = None,
    maps: MapCache | None = None,
) -> np.ndarray:
    """Resample ``src_array`` (the pixels of ``src.window``) onto a destination block.

    ``engine``: ``kernels`` (the project's array kernels; ``auto`` means the same) or ``gdal``
    (GDAL's warper, kept for comparison). ``device="gpu"``: the kernels on CuPy (decoded pixels
    in, warped pixels back). ``grid``: where the block sits in the grid's rows (default: the block is
    the whole grid). ``maps``: where coordinate maps and their taps are kept for the next window of the
    same geometry (:class:`MapCache`); None: made for this window alone. The pixels are the same either way.
    """
    if engine == "gdal" and device != "gpu":
        return _warp_gdal(src_array, src, dst_shape_yx, dst_transform, dst_crs, dst_nodata, method)
    if maps is None:
        cmap = compute_coord_map(src, dst_shape_yx, dst_transform, dst_crs, method, grid)
    else:
        key, cmap = maps.get(src, dst_shape_yx, dst_transform, dst_crs, method, grid)
    if device == "gpu":
        import cupy

        out = _resample_kernels(cupy.asarray(src_array), src, cmap.to(cupy), dst_nodata, method)
    else:
        out = _resample_kernels(src_array, src, cmap, dst_nodata, method)
    if maps is not None:
        maps.settle(key, cmap)
    return out


def _resample_kernels(array: Any, src: SourceWindow, cmap: CoordMap, dst_nodata: float, method: str) -> np.ndarray:
    """The array kernels on ``array`` (NumPy or CuPy), back on the host with the chunk's nodata."""
    nodata = dst_nodata if np.isnan(src.nodata) else src.nodata
    out = resample(array, nodata, cmap, method)
    out = out.get() if not isinstance(out, np.ndarray) else out
    if nodata != dst_nodata and not (np.isnan(nodata) and np.isnan(dst_nodata)):
        out = np.where(valid_mask(out, nodata), out, np.asarray(dst_nodata).astype(out.dtype))
    return out


def _warp_gdal(
    src_array: np.ndarray,
    src: SourceWindow,
    dst_shape_yx: tuple[int, int],
    dst_transform: tuple[float, ...],
    dst_crs: str,
    dst_nodata: float,
    method: str,
) -> np.ndarray:
    """GDAL's warper on the in-memory window."""
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
