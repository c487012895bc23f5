"""The target grid: an immutable value object (crs, transform, shape_yx) and its chunk grid.

Also the one place that transforms many points between CRSs at once
(``transform_points``), used by the planner for footprints and windows.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from pipeline.errors import ConfigError

if TYPE_CHECKING:
    from affine import Affine


@lru_cache(maxsize=64)
def _transformer(src_crs: str, dst_crs: str):  # type: ignore[no-untyped-def]
    from pyproj import Transformer

    return Transformer.from_crs(src_crs, dst_crs, always_xy=True)


def transform_points(src_crs: str, dst_crs: str, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised point transform (x/y order whatever the CRS's axis order). Between two CRSs whose x wraps
    (:func:`x_turn`) a point keeps its turn: longitude 181 goes to Web Mercator's x past its east edge, not
    to its west one (PROJ brings every longitude back to its CRS's own turn)."""
    if src_crs == dst_crs:
        return np.asarray(x, dtype="f8"), np.asarray(y, dtype="f8")
    x = np.asarray(x, "f8")
    xo, yo = _transformer(src_crs, dst_crs).transform(x, np.asarray(y, "f8"))
    xo, yo = np.asarray(xo), np.asarray(yo)
    ts, td = x_turn(src_crs), x_turn(dst_crs)
    if ts is None or td is None:
        return xo, yo
    linear = td.x_at(ts.longitude_at(x))  # where x's turn puts the point; PROJ's answer is whole turns from it
    with np.errstate(invalid="ignore"):
        k = np.round((linear - xo) / td.period)
        return np.where(np.isfinite(xo) & np.isfinite(k), xo + k * td.period, xo), yo


@dataclass(frozen=True)
class Turn:
    """How a CRS's x wraps around the globe: every ``period`` (360 degrees in a geographic CRS; the equator's
    length in a cylindrical projection), the turn its own x range covers starting at ``west``, the image of
    longitude ``west_lon`` (-180 in EPSG:4326; -20037508.34 m, longitude -180, in Web Mercator)."""

    period: float
    west: float
    west_lon: float

    def longitude_at(self, x: np.ndarray) -> np.ndarray:
        """The longitude (continuous, past 180 a turn over) of x in this CRS."""
        return self.west_lon + (x - self.west) * (360.0 / self.period)

    def x_at(self, lon: np.ndarray) -> np.ndarray:
        """x in this CRS of a continuous longitude."""
        return self.west + (lon - self.west_lon) * (self.period / 360.0)


@lru_cache(maxsize=64)
def x_turn(crs: str) -> Turn | None:
    """How ``crs``'s x wraps: a geographic CRS, or a cylindrical projection (Mercator, Web Mercator, Plate
    Carree, equal-area cylindrical: x proportional to longitude whatever the latitude, measured here);
    None for any other CRS, whose x does not wrap."""
    from pyproj import CRS

    c = CRS.from_user_input(crs)
    if c.is_geographic:
        return Turn(360.0, -180.0, -180.0)
    if not c.is_projected or c.geodetic_crs is None:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # (the PROJ string loses nothing this reads)
            lon0 = float(c.to_dict().get("lon_0", 0.0))
    except (TypeError, ValueError):
        lon0 = 0.0
    lon = lon0 + np.array([-90.0, 0.0, 90.0] * 3)
    lat = np.repeat([0.0, 40.0, -55.0], 3)
    geodetic = c.geodetic_crs.to_wkt()
    x, _ = _transformer(geodetic, crs).transform(lon, lat)
    x = np.asarray(x).reshape(3, 3)
    quarter = float(x[0, 2] - x[0, 1])
    if not (np.isfinite(x).all() and quarter > 0):
        return None
    tol = 1e-9 * quarter
    if np.abs(x - x[0]).max() > tol or abs((x[0, 1] - x[0, 0]) - quarter) > tol:
        return None  # x moves with latitude, or not in proportion to longitude
    return Turn(4.0 * quarter, float(x[0, 1]) - 2.0 * quarter, lon0 - 180.0)


def densify_boxes(boxes: np.ndarray, n: int = 9) -> tuple[np.ndarray, np.ndarray]:
    """Points along the edges of ``boxes`` (N, 4: xmin, ymin, xmax, ymax): arrays (N, 4n)."""
    s = np.linspace(0.0, 1.0, n)
    x0, y0, x1, y1 = (boxes[:, i : i + 1] for i in range(4))
    xs = np.concatenate(
        [
            x0 + (x1 - x0) * s,
            np.broadcast_to(x1, (len(boxes), n)),
            x1 - (x1 - x0) * s,
            np.broadcast_to(x0, (len(boxes), n)),
        ],
        axis=1,
    )
    ys = np.concatenate(
        [
            np.broadcast_to(y0, (len(boxes), n)),
            y0 + (y1 - y0) * s,
            np.broadcast_to(y1, (len(boxes), n)),
            y1 - (y1 - y0) * s,
        ],
        axis=1,
    )
    return xs, ys


@lru_cache(maxsize=64)
def is_geographic(crs: str) -> bool:
    """Whether ``crs`` is a geographic (longitude, latitude) CRS, whose x wraps every 360 degrees."""
    from pyproj import CRS

    return bool(CRS.from_user_input(crs).is_geographic)


@lru_cache(maxsize=64)
def pole_positions(crs: str) -> tuple[tuple[float, float] | None, ...]:
    """Where the North and South Poles lie in a projected ``crs`` (x, y); None for a pole that does not
    project to one finite point (and for both in a geographic CRS, where a pole is a line)."""
    if is_geographic(crs):
        return (None, None)
    x, y = transform_points("EPSG:4326", crs, np.array([0.0, 0.0]), np.array([90.0, -90.0]))
    ok = np.isfinite(x) & np.isfinite(y) & (np.abs(x) < 1e15) & (np.abs(y) < 1e15)
    return tuple((float(x[k]), float(y[k])) if ok[k] else None for k in range(2))


def unwrap_longitudes(lon: np.ndarray, period: float = 360.0) -> np.ndarray:
    """Longitudes (rows of points; or x in a CRS that wraps every ``period``) made continuous: each within
    half a turn of its row's first finite one, so a row across the antimeridian runs past 180 (or -180)
    instead of jumping across the world."""
    finite = np.isfinite(lon)
    first = np.argmax(finite, axis=1)
    ref = lon[np.arange(len(lon)), first][:, None]
    half = period / 2.0
    with np.errstate(invalid="ignore"):
        return ref + (lon - ref + half) % period - half


def _interior(boxes: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """An n x n grid of points inside each box (cell centres): arrays (N, n*n)."""
    s = (np.arange(n) + 0.5) / n
    u, v = (a.ravel() for a in np.meshgrid(s, s))
    x0, y0, x1, y1 = (boxes[:, i : i + 1] for i in range(4))
    return x0 + (x1 - x0) * u, y0 + (y1 - y0) * v


def _project(src_crs: str, dst_crs: str, xs: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Points (rows of them) into ``dst_crs``; NaN where they do not project (or land at infinity)."""
    xo, yo = transform_points(src_crs, dst_crs, xs.ravel(), ys.ravel())
    xo, yo = xo.reshape(xs.shape), yo.reshape(ys.shape)
    bad = ~(np.isfinite(xo) & np.isfinite(yo)) | (np.abs(xo) > 1e15) | (np.abs(yo) > 1e15)
    return np.where(bad, np.nan, xo), np.where(bad, np.nan, yo)


def transform_boxes(src_crs: str, dst_crs: str, boxes: np.ndarray, n: int = 9, interior: int = 11) -> np.ndarray:
    """Bounding boxes in ``dst_crs`` of ``boxes`` in ``src_crs`` (:func:`transform_boxes_partial`'s)."""
    return transform_boxes_partial(src_crs, dst_crs, boxes, n, interior)[0]


def transform_boxes_partial(
    src_crs: str, dst_crs: str, boxes: np.ndarray, n: int = 9, interior: int = 11
) -> tuple[np.ndarray, np.ndarray]:
    """Bounding boxes in ``dst_crs`` of ``boxes`` in ``src_crs``; NaN if unprojectable.

    From points along the edges (``n`` each) and, where one of them fails to project, an ``interior`` x
    ``interior`` grid inside, as GDAL samples a window whose edges fail. A box that holds a pole holds the
    pole's image: in a geographic ``dst_crs`` every longitude and latitude 90 (or -90). In a geographic
    ``dst_crs`` longitudes are continuous (:func:`unwrap_longitudes`): a box across the antimeridian runs
    past 180 or -180 (in a cylindrical ``dst_crs``, past its x range, alike).

    Also, per box, whether some of its points did not project (it lies across the edge of the projection's
    domain): its box is then that of the part that did, which may miss some of what projects."""
    boxes = np.asarray(boxes, dtype="f8").reshape(-1, 4)
    if src_crs == dst_crs:
        return boxes.copy(), np.zeros(len(boxes), dtype=bool)
    xs, ys = densify_boxes(boxes, n)
    xo, yo = _project(src_crs, dst_crs, xs, ys)
    partial = np.isnan(xo).any(axis=1)
    failed = np.flatnonzero(partial)
    if interior > 0 and len(failed):  # where an edge fails, a grid inside, as GDAL's sample grid
        ix, iy = _interior(boxes[failed], interior)
        gx, gy = _project(src_crs, dst_crs, ix, iy)
        pad = np.full((len(boxes), gx.shape[1]), np.nan)
        px, py = pad.copy(), pad.copy()
        px[failed], py[failed] = gx, gy
        xo, yo = np.concatenate([xo, px], axis=1), np.concatenate([yo, py], axis=1)
    geographic = is_geographic(dst_crs)
    turn = x_turn(dst_crs)
    if turn is not None:
        xo = unwrap_longitudes(xo, turn.period)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows: unprojectable boxes stay NaN
        out = np.stack([np.nanmin(xo, 1), np.nanmin(yo, 1), np.nanmax(xo, 1), np.nanmax(yo, 1)], axis=1)
    if turn is not None:
        wide = out[:, 2] - out[:, 0] >= turn.period
        out[wide, 0], out[wide, 2] = turn.west, turn.west + turn.period
    for k, pole in enumerate(pole_positions(src_crs)):
        if pole is None:
            continue
        pole_x, pole_y = pole
        inside = (boxes[:, 0] <= pole_x) & (pole_x <= boxes[:, 2]) & (boxes[:, 1] <= pole_y) & (pole_y <= boxes[:, 3])
        if not inside.any():
            continue
        if geographic:  # the pole is a line: every longitude, at latitude 90 (-90)
            out[inside, 0], out[inside, 2] = -180.0, 180.0
            if k == 0:
                out[inside, 1], out[inside, 3] = np.fmin(out[inside, 1], 90.0), 90.0
            else:
                out[inside, 1], out[inside, 3] = -90.0, np.fmax(out[inside, 3], -90.0)
            continue
        qx, qy = transform_points("EPSG:4326", dst_crs, np.array([0.0]), np.array([90.0 if k == 0 else -90.0]))
        if np.isfinite(qx[0]) and np.isfinite(qy[0]) and abs(qx[0]) < 1e15 and abs(qy[0]) < 1e15:
            out[inside, 0] = np.fmin(out[inside, 0], qx[0])
            out[inside, 1] = np.fmin(out[inside, 1], qy[0])
            out[inside, 2] = np.fmax(out[inside, 2], qx[0])
            out[inside, 3] = np.fmax(out[inside, 3], qy[0])
    return out, partial & np.isfinite(out).all(axis=1)


def offset_transform(
    t: tuple[float, ...], row_off: float, col_off: float
) -> tuple[float, float, float, float, float, float]:
    """Affine ``t`` moved to pixel (row_off, col_off): the transform of a window starting there."""
    a, b, c, d, e, f = t[:6]
    return (a, b, c + a * col_off + b * row_off, d, e, f + d * col_off + e * row_off)


@dataclass(frozen=True)
class GridSpec:
    """A north-up target grid and its chunking. Compares and hashes by value."""

    crs: str
    """CRS as given in the config (any form pyproj accepts)."""
    transform: tuple[float, float, float, float, float, float]
    """Affine (a, b, c, d, e, f) in rasterio order; b = d = 0, e < 0."""
    shape_yx: tuple[int, int]
    """Pixels (rows, columns)."""
    chunks_yx: tuple[int, int]
    """Output chunk shape (rows, columns); the time chunk is 1."""

    @property
    def affine(self) -> Affine:
        """The transform as an ``affine.Affine`` (imported here: planning needs none, and a driver whose tasks run
        in worker processes is spared the import, ~30 ms with attrs)."""
        from affine import Affine

        return Affine(*self.transform)

    @property
    def res_xy(self) -> tuple[float, float]:
        """Pixel size (x, y), both positive."""
        return self.transform[0], -self.transform[4]

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        """(xmin, ymin, xmax, ymax) of the whole grid."""
        a, _, c, _, e, f = self.transform
        h, w = self.shape_yx
        return c, f + e * h, c + a * w, f

    @property
    def n_chunks_yx(self) -> tuple[int, int]:
        """Chunks along y and x, edge chunks included."""
        return math.ceil(self.shape_yx[0] / self.chunks_yx[0]), math.ceil(self.shape_yx[1] / self.chunks_yx[1])

    def chunk_window(self, cy: int, cx: int) -> tuple[int, int, int, int]:
        """(row_off, col_off, height, width) of chunk (cy, cx); edge chunks are clipped."""
        ch, cw = self.chunks_yx
        y0, x0 = cy * ch, cx * cw
        return y0, x0, min(ch, self.shape_yx[0] - y0), min(cw, self.shape_yx[1] - x0)

    def chunk_boxes(self) -> np.ndarray:
        """Map bounds of every chunk, shape (ny, nx, 4) as (xmin, ymin, xmax, ymax)."""
        a, _, c, _, e, f = self.transform
        ny, nx = self.n_chunks_yx
        ch, cw = self.chunks_yx
        h, w = self.shape_yx
        x_edges = c + a * np.minimum(np.arange(nx + 1) * cw, w).astype("f8")
        y_edges = f + e * np.minimum(np.arange(ny + 1) * ch, h).astype("f8")
        xmin = np.broadcast_to(x_edges[None, :-1], (ny, nx))
        xmax = np.broadcast_to(x_edges[None, 1:], (ny, nx))
        ymin = np.broadcast_to(y_edges[1:, None], (ny, nx))
        ymax = np.broadcast_to(y_edges[:-1, None], (ny, nx))
        return np.stack([xmin, ymin, xmax, ymax], axis=-1)

    def x_coords(self) -> np.ndarray:
        """Pixel-centre x coordinates."""
        a, _, c = self.transform[:3]
        return c + a * (np.arange(self.shape_yx[1]) + 0.5)

    def y_coords(self) -> np.ndarray:
        """Pixel-centre y coordinates (descending)."""
        e, f = self.transform[4:]
        return f + e * (np.arange(self.shape_yx[0]) + 0.5)


def compute_grid(
    crs: str,
    res_xy: tuple[float, float],
    chunks_yx: tuple[int, int],
    bounds: tuple[float, float, float, float],
) -> GridSpec:
    """A grid covering ``bounds``, its edges snapped outward to multiples of the resolution."""
    rx, ry = res_xy
    xmin, ymin, xmax, ymax = bounds
    if not all(map(math.isfinite, bounds)):
        raise ConfigError("grid.bounds", f"inputs could not be projected into {crs}; set grid.bounds")
    # Snap outward, tolerating float noise so an already-aligned bound stays put.
    x0 = math.floor(xmin / rx + 1e-9) * rx
    x1 = math.ceil(xmax / rx - 1e-9) * rx
    y0 = math.floor(ymin / ry + 1e-9) * ry
    y1 = math.ceil(ymax / ry - 1e-9) * ry
    width, height = round((x1 - x0) / rx), round((y1 - y0) / ry)
    if width <= 0 or height <= 0:
        raise ConfigError("grid.bounds", f"gives an empty grid ({width}x{height} pixels)")
    if width * height > 2**40:
        raise ConfigError("grid.resolution", f"gives a {width}x{height} grid; is the resolution in the CRS's units?")
    return GridSpec(crs=crs, transform=(rx, 0.0, x0, 0.0, -ry, y1), shape_yx=(height, width), chunks_yx=chunks_yx)
