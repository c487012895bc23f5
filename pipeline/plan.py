"""Pure planning: tile table + grid settings -> partitions of output chunks.

No I/O and no pixels. Every step is vectorised over tiles or tile/chunk
pairs: a tile's footprint in the grid CRS gives the range of chunks it can
touch (no chunks x tiles loop); each pair then gets the source window the
chunk needs, padded for the resampling kernel, at the overview level chosen
for that tile.
"""

from __future__ import annotations

import hashlib
import math
import os
import pickle
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

import numpy as np

if TYPE_CHECKING:  # workers import this module for its task types only
    from pipeline.catalog import TileTable

from pipeline.grid import GridSpec, compute_grid, offset_transform, transform_boxes, transform_points
from pipeline.resample.methods import METHODS

# Source pixels of padding around each window, per method (kernel support + 1 for rounding).
KERNEL_PAD = {name: m.pad for name, m in METHODS.items()}
# Methods that blend values may read an (average) overview; value-picking methods read full resolution,
# so that nearest/mode/min/max/median only ever return values present in the data.
OVERVIEW_METHODS = frozenset(name for name, m in METHODS.items() if m.reads_overviews)
SNAP_TO_GROUP = 1.0
"""A partition cut moves to the start of a band and date when that is within this many partitions' shares
of the total (see :func:`pack_partitions`)."""
# An overview is used when its pixel is at most this much coarser than the target pixel.
OVERVIEW_TOLERANCE = 1.01


@dataclass(frozen=True)
class SourceWindow:
    """One tile's contribution to one chunk: what to read, and where it sits."""

    path: str
    """Absolute path of the file."""
    overview_level: int
    """-1 for full resolution, else the index into the file's overview list."""
    window: tuple[int, int, int, int]
    """(row_off, col_off, height, width) in pixels of that level, clipped to the file."""
    transform: tuple[float, float, float, float, float, float]
    """Affine of the window's top-left pixel at that level."""
    crs: str
    """The file's CRS."""
    nodata: float
    """The file's nodata (NaN when it has none)."""
    dst_window: tuple[int, int, int, int] | None = None
    """(row_off, col_off, height, width) of the chunk that the tile's footprint covers (plus a pixel);
    only this part is resampled. None: the whole chunk."""


@dataclass(frozen=True)
class ChunkJob:
    """One output chunk (band, time step, chunk row, chunk column) and the windows it fuses."""

    band: str
    t: int
    """Index into ``Plan.times``."""
    cy: int
    cx: int
    window: tuple[int, int, int, int]
    """(row_off, col_off, height, width) of the chunk in the grid."""
    sources: tuple[SourceWindow, ...]
    """In fuse order: the input paths' sorted order."""
    cost_bytes: int
    """Bytes to read plus bytes to write: the unit partitions are packed by."""


@dataclass(frozen=True)
class Partition:
    """One task: chunks that are read, resampled and written together.

    Pickles compactly (what a task sends): each (file, level) once, then arrays of windows and jobs.
    """

    index: int
    key: str
    """Deterministic task key."""
    jobs: tuple[ChunkJob, ...]
    cost_bytes: int

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        files: dict[tuple[str, int], int] = {}
        file_rows: list[tuple[str, int, str, float, float, float, float, float]] = []
        bands: dict[str, int] = {}
        src_file, src_win, src_cf, src_dst, job_rows, job_cost = [], [], [], [], [], []
        for j in self.jobs:
            for w in j.sources:
                k = files.setdefault((w.path, w.overview_level), len(files))
                if k == len(file_rows):
                    t = w.transform
                    file_rows.append((w.path, w.overview_level, w.crs, w.nodata, t[0], t[1], t[3], t[4]))
                src_file.append(k)
                src_win.append(w.window)
                src_cf.append((w.transform[2], w.transform[5]))
                src_dst.append(w.dst_window if w.dst_window is not None else (-1, -1, -1, -1))
            job_rows.append((bands.setdefault(j.band, len(bands)), j.t, j.cy, j.cx, *j.window, len(j.sources)))
            job_cost.append(j.cost_bytes)
        arrays = (
            np.asarray(src_file, dtype=np.int32),
            np.asarray(src_win, dtype=np.int32).reshape(-1, 4),
            np.asarray(src_cf, dtype="f8").reshape(-1, 2),
            np.asarray(src_dst, dtype=np.int32).reshape(-1, 4),
            np.asarray(job_rows, dtype=np.int32).reshape(-1, 9),
            np.asarray(job_cost, dtype=np.int64),
        )
        # Paths share their folders, and the integer columns are regular: both shrink well.
        prefix = os.path.commonprefix([r[0] for r in file_rows])
        rows = tuple((r[0][len(prefix) :], *r[1:]) for r in file_rows)
        blob = zlib.compress(pickle.dumps(arrays, protocol=5), 1)
        return _unpack_partition, (self.index, self.key, self.cost_bytes, tuple(bands), prefix, rows, blob)


def _unpack_partition(index: int, key: str, cost: int, bands: tuple[str, ...], prefix: str,
                      rows: tuple[tuple[Any, ...], ...], blob: bytes) -> Partition:  # fmt: skip
    src_file, src_win, src_cf, src_dst, job_rows, job_cost = pickle.loads(zlib.decompress(blob))
    file_rows = tuple((prefix + r[0], *r[1:]) for r in rows)
    jobs, s = [], 0
    for row, cost_bytes in zip(job_rows.tolist(), job_cost.tolist(), strict=True):
        b, t, cy, cx, r0, c0, h, w, n = row
        sources = []
        for k in range(s, s + n):
            path, level, crs, nodata, a, bb, d, e = file_rows[int(src_file[k])]
            c, f = (float(v) for v in src_cf[k])
            wr, wc, wh, ww = (int(v) for v in src_win[k])
            dr, dc, dh, dw = (int(v) for v in src_dst[k])
            sources.append(SourceWindow(path=path, overview_level=level, window=(wr, wc, wh, ww),
                                        transform=(a, bb, c, d, e, f), crs=crs, nodata=nodata,
                                        dst_window=None if dh < 0 else (dr, dc, dh, dw)))  # fmt: skip
        s += n
        jobs.append(ChunkJob(band=bands[b], t=t, cy=cy, cx=cx, window=(r0, c0, h, w), sources=tuple(sources),
                             cost_bytes=cost_bytes))  # fmt: skip
    return Partition(index=index, key=key, jobs=tuple(jobs), cost_bytes=cost)


@dataclass(frozen=True)
class BandSpec:
    name: str
    dtype: str
    nodata: float
    """Output fill value: the inputs' nodata, else 0 for integers and NaN for floats."""
    attrs: tuple[tuple[str, float], ...] = ()
    """Extra array attributes, e.g. CF ``scale_factor``/``add_offset`` from STAC ``raster:bands``."""


@dataclass(frozen=True)
class PlanTables:
    """The plan in columns: tiles, (tile, chunk) windows, chunk jobs, partitions (offsets)."""

    paths: np.ndarray
    crs: np.ndarray
    nodata: np.ndarray
    levels: np.ndarray
    """Overview level per tile (-1: full resolution)."""
    aff: np.ndarray
    """(tiles, 6) affine per tile at its level."""
    footprints: np.ndarray
    """(tiles, 4) bounding box of each tile in the grid CRS."""
    pair_tile: np.ndarray
    pair_win: np.ndarray
    """(pairs, 4): row0, col0, row1, col1 at the tile's level."""
    job_band: np.ndarray
    job_t: np.ndarray
    job_cy: np.ndarray
    job_cx: np.ndarray
    job_start: np.ndarray
    """(jobs + 1) offsets into the pairs."""
    job_cost: np.ndarray
    part_start: np.ndarray
    """(partitions + 1) offsets into the jobs."""


class Partitions(Sequence[Partition]):
    """The plan's partitions, built one at a time when asked for: a 192,000-tile plan holds
    ~10^6 windows as arrays, and only the tasks being submitted become Python objects."""

    def __init__(self, tables: PlanTables, grid: GridSpec, bands: tuple[BandSpec, ...], key_prefix: str) -> None:
        self._t, self._grid, self._bands, self._prefix = tables, grid, bands, key_prefix

    def __len__(self) -> int:
        return len(self._t.part_start) - 1

    @overload
    def __getitem__(self, i: int) -> Partition: ...
    @overload
    def __getitem__(self, i: slice) -> list[Partition]: ...
    def __getitem__(self, i: int | slice) -> Partition | list[Partition]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        t = self._t
        j0, j1 = int(t.part_start[i]), int(t.part_start[i + 1])
        jobs = tuple(self._job(j) for j in range(j0, j1))
        return Partition(index=i, key=self.key(i), jobs=jobs, cost_bytes=int(t.job_cost[j0:j1].sum()))

    def _covered(self, window: tuple[int, int, int, int], footprint: np.ndarray) -> tuple[int, int, int, int]:
        """The part of a chunk that a footprint box (grid CRS) covers, plus one pixel, clipped to the chunk."""
        a, _, c, _, e, f = self._grid.transform
        r0, c0, h, w = window
        x0, y0 = c + a * c0, f + e * r0
        col0 = max(math.floor((footprint[0] - x0) / a) - 1, 0)
        col1 = min(math.ceil((footprint[2] - x0) / a) + 1, w)
        row0 = max(math.floor((footprint[3] - y0) / e) - 1, 0)
        row1 = min(math.ceil((footprint[1] - y0) / e) + 1, h)
        if col1 <= col0 or row1 <= row0:
            return (0, 0, h, w)
        return (row0, col0, row1 - row0, col1 - col0)

    def key(self, i: int) -> str:
        """Deterministic key: the partition's first and last chunk and its size identify its content."""
        t = self._t
        j0, j1 = int(t.part_start[i]), int(t.part_start[i + 1]) - 1
        ident = f"{j1 - j0 + 1}:" + ";".join(
            f"{t.job_band[j]}/{t.job_t[j]}/{t.job_cy[j]}/{t.job_cx[j]}" for j in (j0, j1)
        )
        return f"{self._prefix}-{i:06d}-{hashlib.blake2b(ident.encode(), digest_size=6).hexdigest()}"

    def keys(self) -> list[str]:
        return [self.key(i) for i in range(len(self))]

    def costs(self) -> np.ndarray:
        return np.add.reduceat(self._t.job_cost, self._t.part_start[:-1]) if len(self) else np.zeros(0)

    def _job(self, j: int) -> ChunkJob:
        t = self._t
        cy, cx = int(t.job_cy[j]), int(t.job_cx[j])
        window = self._grid.chunk_window(cy, cx)
        sources = []
        for p in range(int(t.job_start[j]), int(t.job_start[j + 1])):
            i = int(t.pair_tile[p])
            r0, c0, r1, c1 = (int(v) for v in t.pair_win[p])
            sources.append(
                SourceWindow(
                    path=t.paths[i],
                    overview_level=int(t.levels[i]),
                    window=(r0, c0, r1 - r0, c1 - c0),
                    transform=offset_transform(tuple(float(v) for v in t.aff[i]), r0, c0),
                    crs=t.crs[i],
                    nodata=float(t.nodata[i]),
                    dst_window=self._covered(window, t.footprints[i]),
                )
            )
        return ChunkJob(
            band=self._bands[int(t.job_band[j])].name,
            t=int(t.job_t[j]),
            cy=cy,
            cx=cx,
            window=window,
            sources=tuple(sources),
            cost_bytes=int(t.job_cost[j]),
        )


@dataclass(frozen=True)
class Plan:
    grid: GridSpec
    bands: tuple[BandSpec, ...]
    times: tuple[str, ...]
    """ISO dates of the time axis, ascending."""
    resampling: str
    fuse: str
    partitions: Partitions
    """One task each; built lazily from ``tables``."""
    tables: PlanTables
    n_chunks: int
    """Output chunks in the cube (bands x times x spatial chunks), written or not."""
    n_jobs: int
    """Chunks with at least one overlapping tile: the ones tasks compute."""
    n_pairs: int
    """(tile, chunk) source windows."""
    bytes_read: int
    bytes_out: int
    """Uncompressed bytes of the whole cube."""
    levels_used: dict[str, int]
    """Tiles read at each overview level ("full", "overview 0", ...)."""


def compute_band_specs(
    tiles: TileTable, bands_order: tuple[str, ...] | None, band_attrs: dict[str, dict[str, float]] | None = None
) -> tuple[BandSpec, ...]:
    groups = tiles.groups("band")
    names = list(bands_order) if bands_order else sorted(groups)
    specs = []
    for name in names:
        rows = groups[name]
        dtype = str(tiles["dtype"][rows[0]])
        nodatas = tiles["nodata"][rows]
        nodatas = nodatas[~np.isnan(nodatas)]
        if len(nodatas):
            nodata = float(nodatas[0])
        else:
            nodata = float("nan") if np.dtype(dtype).kind == "f" else 0.0
        attrs = tuple(sorted((band_attrs or {}).get(name, {}).items()))
        specs.append(BandSpec(name=name, dtype=dtype, nodata=nodata, attrs=attrs))
    return tuple(specs)


def compute_footprints(tiles: TileTable, dst_crs: str) -> np.ndarray:
    """Each tile's bounding box in ``dst_crs``, shape (N, 4)."""
    out = np.full((len(tiles), 4), np.nan)
    boxes = np.column_stack([tiles[c] for c in ("xmin", "ymin", "xmax", "ymax")]).astype("f8")
    for crs, idx in tiles.groups("crs").items():
        out[idx] = transform_boxes(crs, dst_crs, boxes[idx], n=11)
    return out


def compute_levels(tiles: TileTable, grid_crs: str, res_xy: tuple[float, float], method: str) -> np.ndarray:
    """Overview level per tile: the coarsest not coarser than the target pixel (-1: full resolution)."""
    levels = np.full(len(tiles), -1, dtype=np.int64)
    if method not in OVERVIEW_METHODS:
        return levels
    a = tiles["a"].astype("f8")
    e = tiles["e"].astype("f8")
    cx = (tiles["xmin"].astype("f8") + tiles["xmax"].astype("f8")) / 2
    cy = (tiles["ymin"].astype("f8") + tiles["ymax"].astype("f8")) / 2
    scale = np.ones(len(tiles))  # grid units per source unit, locally at the tile centre
    for crs, idx in tiles.groups("crs").items():
        if crs == grid_crs:
            continue
        u = np.abs(a[idx]) * 10
        xs = np.concatenate([cx[idx], cx[idx] + u, cx[idx]])
        ys = np.concatenate([cy[idx], cy[idx], cy[idx] + u])
        gx, gy = transform_points(crs, grid_crs, xs, ys)
        n = len(idx)
        j11, j21 = (gx[n : 2 * n] - gx[:n]) / u, (gy[n : 2 * n] - gy[:n]) / u
        j12, j22 = (gx[2 * n :] - gx[:n]) / u, (gy[2 * n :] - gy[:n]) / u
        scale[idx] = np.sqrt(np.abs(j11 * j22 - j12 * j21))
    target_src = math.sqrt(res_xy[0] * res_xy[1]) / scale
    src_res = np.sqrt(np.abs(a * e))
    width, height = tiles["width"].astype("f8"), tiles["height"].astype("f8")
    factors = _factor_matrix(tiles)
    for lvl in range(factors.shape[1]):
        f = factors[:, lvl]
        has = f > 0
        fs = np.where(has, f, 1)
        ovr_res = src_res * np.sqrt((width / np.ceil(width / fs)) * (height / np.ceil(height / fs)))
        levels[has & (ovr_res <= target_src * OVERVIEW_TOLERANCE)] = lvl
    return levels


def _factor_matrix(tiles: TileTable) -> np.ndarray:
    """Overview factors as a (tiles, max levels) int matrix, 0 where a tile has fewer levels."""
    lists = tiles["overviews"]
    depth = max((len(v) for v in lists), default=0)
    out = np.zeros((len(lists), depth), dtype=np.int64)
    for k, v in enumerate(lists):
        out[k, : len(v)] = v
    return out


def level_transforms(tiles: TileTable, levels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per tile at its level: affine (N, 6), width and height (GDAL's ceil(size / factor))."""
    aff = np.column_stack([tiles[c] for c in ("a", "b", "c", "d", "e", "f")]).astype("f8")
    width = tiles["width"].astype(np.int64)
    height = tiles["height"].astype(np.int64)
    factors = _factor_matrix(tiles)
    f = np.ones(len(tiles), dtype=np.int64)
    sel = levels >= 0
    f[sel] = factors[np.flatnonzero(sel), levels[sel]]
    lw, lh = -(-width // f), -(-height // f)
    aff[:, 0] *= width / lw
    aff[:, 4] *= height / lh
    return aff, lw, lh


def compute_plan(
    tiles: TileTable,
    *,
    crs: str,
    res_xy: tuple[float, float],
    chunks_yx: tuple[int, int],
    bounds: tuple[float, float, float, float] | None,
    resampling: str,
    fuse: str,
    partition_mb: float,
    bands_order: tuple[str, ...] | None = None,
    key_prefix: str = "pipeline",
    band_attrs: dict[str, dict[str, float]] | None = None,
    shards_yx: tuple[int, int] | None = None,
) -> Plan:
    """Plan the whole run. ``tiles`` is the catalog's table (sorted by path: the fuse order).

    ``shards_yx``: the store's shard shape (multiples of ``chunks_yx``). Jobs are then ordered shard by
    shard and partitions hold whole shards, so no two tasks ever write one shard object."""
    footprints = compute_footprints(tiles, crs)
    if bounds is None:
        bounds = (
            float(np.nanmin(footprints[:, 0])), float(np.nanmin(footprints[:, 1])),
            float(np.nanmax(footprints[:, 2])), float(np.nanmax(footprints[:, 3])),
        )  # fmt: skip
    grid = compute_grid(crs, res_xy, chunks_yx, bounds)
    bands = compute_band_specs(tiles, bands_order, band_attrs)
    band_index = {b.name: i for i, b in enumerate(bands)}
    times = np.unique(tiles["date"])

    levels = compute_levels(tiles, crs, res_xy, resampling)
    aff, lw, lh = level_transforms(tiles, levels)

    # Chunk index ranges each footprint touches -> (tile, cy, cx) pairs.
    a, _, c, _, e, f = grid.transform
    ch, cw = grid.chunks_yx
    ny, nx = grid.n_chunks_yx
    ok = np.all(np.isfinite(footprints), axis=1)
    with np.errstate(invalid="ignore"):
        # Upper ends exclusive: a footprint that only touches a chunk's edge does not overlap it.
        cx0 = np.floor((footprints[:, 0] - c) / (a * cw))
        cx1 = np.ceil((footprints[:, 2] - c) / (a * cw)) - 1
        cy0 = np.floor((footprints[:, 3] - f) / (e * ch))
        cy1 = np.ceil((footprints[:, 1] - f) / (e * ch)) - 1
    cx0, cx1 = np.clip(np.nan_to_num(cx0), 0, nx - 1), np.clip(np.nan_to_num(cx1), 0, nx - 1)
    cy0, cy1 = np.clip(np.nan_to_num(cy0), 0, ny - 1), np.clip(np.nan_to_num(cy1), 0, ny - 1)
    ok &= (footprints[:, 2] > grid.bounds[0]) & (footprints[:, 0] < grid.bounds[2])
    ok &= (footprints[:, 3] > grid.bounds[1]) & (footprints[:, 1] < grid.bounds[3])
    nxs = np.where(ok, cx1 - cx0 + 1, 0).astype(np.int64)
    nys = np.where(ok, cy1 - cy0 + 1, 0).astype(np.int64)
    counts = nxs * nys
    tile_of = np.repeat(np.arange(len(tiles)), counts)
    k = np.arange(len(tile_of)) - np.repeat(np.cumsum(counts) - counts, counts)
    pair_cx = (cx0[tile_of] + k % nxs[tile_of]).astype(np.int64)
    pair_cy = (cy0[tile_of] + k // nxs[tile_of]).astype(np.int64)

    # Source window of each pair, from the chunk's box in the tile's CRS.
    pad = KERNEL_PAD[resampling]
    win = np.zeros((len(tile_of), 4), dtype=np.int64)  # row0, col0, row1, col1
    chunk_boxes = grid.chunk_boxes().reshape(-1, 4)
    crs_names, crs_code = tiles.codes("crs")
    pair_crs = crs_code[tile_of]
    for code in np.unique(pair_crs):
        src_crs = crs_names[code]
        sel = np.flatnonzero(pair_crs == code)
        needed = np.unique(pair_cy[sel] * nx + pair_cx[sel])
        boxes_src = np.full((ny * nx, 4), np.nan)
        boxes_src[needed] = transform_boxes(crs, src_crs, chunk_boxes[needed], n=9)
        bx = boxes_src[pair_cy[sel] * nx + pair_cx[sel]]
        t = aff[tile_of[sel]]
        with np.errstate(invalid="ignore"):
            col0 = np.floor((bx[:, 0] - t[:, 2]) / t[:, 0]) - pad
            col1 = np.ceil((bx[:, 2] - t[:, 2]) / t[:, 0]) + pad
            row0 = np.floor((bx[:, 3] - t[:, 5]) / t[:, 4]) - pad
            row1 = np.ceil((bx[:, 1] - t[:, 5]) / t[:, 4]) + pad
        w_, h_ = lw[tile_of[sel]], lh[tile_of[sel]]
        win[sel, 0] = np.clip(np.nan_to_num(row0, nan=0), 0, h_)
        win[sel, 1] = np.clip(np.nan_to_num(col0, nan=0), 0, w_)
        win[sel, 2] = np.clip(np.nan_to_num(row1, nan=0), 0, h_)
        win[sel, 3] = np.clip(np.nan_to_num(col1, nan=0), 0, w_)
    keep = (win[:, 2] > win[:, 0]) & (win[:, 3] > win[:, 1])
    tile_of, pair_cy, pair_cx, win = tile_of[keep], pair_cy[keep], pair_cx[keep], win[keep]

    # Group pairs into chunk jobs; order jobs (time, band, [shard row, shard col,] cy, cx) so neighbours
    # share files (and a shard's chunks are consecutive).
    itemsize = np.array([np.dtype(b.dtype).itemsize for b in bands])
    band_names, band_code = tiles.codes("band")
    pair_band = np.array([band_index[b] for b in band_names], dtype=np.int64)[band_code][tile_of]
    pair_t = np.searchsorted(times, tiles["date"])[tile_of]
    per_shard = (1, 1) if shards_yx is None else (shards_yx[0] // ch, shards_yx[1] // cw)
    order = np.lexsort((tile_of, pair_cx, pair_cy, pair_cx // per_shard[1], pair_cy // per_shard[0], pair_band, pair_t))
    tile_of, pair_cy, pair_cx, win = tile_of[order], pair_cy[order], pair_cx[order], win[order]
    pair_band, pair_t = pair_band[order], pair_t[order]
    pair_bytes = (win[:, 2] - win[:, 0]) * (win[:, 3] - win[:, 1]) * itemsize[pair_band]

    paths = tiles["path"].astype(object)
    n_pairs = len(tile_of)
    if n_pairs:
        new_job = np.empty(n_pairs, dtype=bool)
        new_job[0] = True
        new_job[1:] = np.diff(np.stack([pair_t, pair_band, pair_cy, pair_cx]), axis=1).any(axis=0)
        job_first = np.flatnonzero(new_job)
    else:
        job_first = np.zeros(0, dtype=np.int64)
    job_start = np.append(job_first, n_pairs).astype(np.int64)
    job_band, job_t = pair_band[job_first], pair_t[job_first]
    job_cy, job_cx = pair_cy[job_first], pair_cx[job_first]
    ch, cw = grid.chunks_yx
    h, w = grid.shape_yx
    out_px = np.minimum(ch, h - job_cy * ch) * np.minimum(cw, w - job_cx * cw)
    read_bytes = np.add.reduceat(pair_bytes, job_first) if n_pairs else np.zeros(0, dtype=np.int64)
    job_cost = (read_bytes + out_px * itemsize[job_band]).astype(np.int64)
    group_first = np.flatnonzero(np.diff(np.stack([job_t, job_band]), axis=1, prepend=-1).any(axis=0))
    unit_first = None
    if shards_yx is not None:
        shard_of = np.stack([job_t, job_band, job_cy // per_shard[0], job_cx // per_shard[1]])
        unit_first = np.flatnonzero(np.diff(shard_of, axis=1, prepend=-1).any(axis=0))
    part_start = pack_partitions(job_cost, partition_mb * 1e6, group_start=group_first, unit_start=unit_first)

    tables = PlanTables(
        paths=paths, crs=tiles["crs"].astype(object), nodata=tiles["nodata"].astype("f8"),
        levels=levels, aff=aff, footprints=footprints, pair_tile=tile_of, pair_win=win, job_band=job_band, job_t=job_t,
        job_cy=job_cy, job_cx=job_cx, job_start=job_start, job_cost=job_cost, part_start=part_start,
    )  # fmt: skip
    used = levels[np.unique(tile_of)] if n_pairs else levels[:0]
    ny_, nx_ = grid.n_chunks_yx
    return Plan(
        grid=grid,
        bands=bands,
        times=tuple(str(np.datetime64(t, "s")) for t in times),
        resampling=resampling,
        fuse=fuse,
        partitions=Partitions(tables, grid, bands, key_prefix),
        tables=tables,
        n_chunks=len(bands) * len(times) * ny_ * nx_,
        n_jobs=len(job_first),
        n_pairs=n_pairs,
        bytes_read=int(pair_bytes.sum()),
        bytes_out=int(sum(int(np.prod(grid.shape_yx)) * len(times) * np.dtype(b.dtype).itemsize for b in bands)),
        levels_used={
            ("full" if v < 0 else f"overview {v}"): int(n)
            for v, n in zip(*np.unique(used, return_counts=True), strict=True)
        },
    )


def pack_partitions(job_cost: np.ndarray, target_bytes: float, split_factor: float = 3.0,
                    group_start: np.ndarray | None = None, snap: float = SNAP_TO_GROUP,
                    unit_start: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """Offsets of partitions over the jobs, in job order.

    ``unit_start``: the first job of each run of jobs that must stay in one partition (one shard's
    chunks); partitions are then packed over these units, cut only at their starts. Every group start
    must be a unit start.

    K = ceil(total / target) partitions cut where the cumulative cost crosses each k/K of the total,
    so tiny jobs are batched and partitions are even (within one job). ``group_start``: the first job
    of each run of jobs that read the same files (one band and date); a cut within ``snap`` of a
    partition's share of a group's start moves there, so that the group's files are opened and
    their blocks decoded by one task rather than two. Then, until none is left, any partition of
    several jobs costing over ``split_factor`` x the median is halved by cost. A single job is never
    split: a chunk is the unit of writing.
    """
    n = len(job_cost)
    if n == 0:
        return np.zeros(1, dtype=np.int64)
    if unit_start is not None:
        units = np.asarray(unit_start, dtype=np.int64)
        unit_cost = np.add.reduceat(np.asarray(job_cost), units)
        groups = None if group_start is None else np.searchsorted(units, group_start)
        bounds = pack_partitions(unit_cost, target_bytes, split_factor, groups, snap)
        return np.append(units, n)[bounds]
    csum = np.concatenate([[0.0], np.cumsum(job_cost, dtype="f8")])
    k = max(1, math.ceil(csum[-1] / target_bytes))
    ideal = csum[-1] * np.arange(1, k) / k
    cuts = np.searchsorted(csum, ideal, side="left")
    if group_start is not None and len(group_start) > 1 and k > 1:
        starts = np.asarray(group_start, dtype=np.int64)[1:]  # the first group starts at 0: no cut there
        at = csum[starts]
        right = np.clip(np.searchsorted(at, ideal), 0, len(starts) - 1)
        left = np.clip(right - 1, 0, len(starts) - 1)
        nearest = np.where(np.abs(at[left] - ideal) <= np.abs(at[right] - ideal), left, right)
        close = np.abs(at[nearest] - ideal) <= snap * csum[-1] / k
        cuts = np.where(close, starts[nearest], cuts)
    bounds = np.unique(np.concatenate([[0], np.clip(cuts, 1, n - 1) if n > 1 else [], [n]]).astype(np.int64))
    while len(bounds) > 2:
        costs = csum[bounds[1:]] - csum[bounds[:-1]]
        too_big = (costs > split_factor * np.median(costs)) & (np.diff(bounds) > 1)
        if not too_big.any():
            break
        lo, hi = bounds[:-1][too_big], bounds[1:][too_big]
        mid = np.searchsorted(csum, (csum[lo] + csum[hi]) / 2, side="left")
        bounds = np.unique(np.concatenate([bounds, np.clip(mid, lo + 1, hi - 1)]))
    return bounds
