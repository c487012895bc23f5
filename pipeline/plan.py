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
from dataclasses import dataclass

import numpy as np
import pandas as pd

from pipeline.grid import GridSpec, compute_grid, offset_transform, transform_boxes, transform_points

# Source pixels of padding around each window, per method (kernel support + 1 for rounding).
KERNEL_PAD = {"nearest": 1, "bilinear": 2, "cubic": 3, "average": 2, "mode": 2, "min": 2, "max": 2, "median": 2}
# Methods that blend values may read an (average) overview; value-picking methods read full resolution,
# so that nearest/mode/min/max/median only ever return values present in the data.
OVERVIEW_METHODS = frozenset({"average", "bilinear", "cubic"})
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
    """One task: chunks that are read, resampled and written together."""

    index: int
    key: str
    """Deterministic task key."""
    jobs: tuple[ChunkJob, ...]
    cost_bytes: int


@dataclass(frozen=True)
class BandSpec:
    name: str
    dtype: str
    nodata: float
    """Output fill value: the inputs' nodata, else 0 for integers and NaN for floats."""


@dataclass(frozen=True)
class Plan:
    grid: GridSpec
    bands: tuple[BandSpec, ...]
    times: tuple[str, ...]
    """ISO dates of the time axis, ascending."""
    resampling: str
    fuse: str
    partitions: tuple[Partition, ...]
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
    """Tiles read at each overview level ("full", "1/2", ...)."""


def compute_band_specs(tiles: pd.DataFrame, bands_order: tuple[str, ...] | None) -> tuple[BandSpec, ...]:
    names = list(bands_order) if bands_order else sorted(tiles["band"].unique())
    specs = []
    for name in names:
        group = tiles[tiles["band"] == name]
        dtype = str(group["dtype"].iloc[0])
        nodatas = group["nodata"].dropna()
        if len(nodatas):
            nodata = float(nodatas.iloc[0])
        else:
            nodata = float("nan") if np.dtype(dtype).kind == "f" else 0.0
        specs.append(BandSpec(name=name, dtype=dtype, nodata=nodata))
    return tuple(specs)


def compute_footprints(tiles: pd.DataFrame, dst_crs: str) -> np.ndarray:
    """Each tile's bounding box in ``dst_crs``, shape (N, 4)."""
    out = np.full((len(tiles), 4), np.nan)
    boxes = tiles[["xmin", "ymin", "xmax", "ymax"]].to_numpy("f8")
    for crs, idx in tiles.groupby("crs").indices.items():
        out[idx] = transform_boxes(crs, dst_crs, boxes[idx], n=11)
    return out


def compute_levels(tiles: pd.DataFrame, grid_crs: str, res_xy: tuple[float, float], method: str) -> np.ndarray:
    """Overview level per tile: the coarsest not coarser than the target pixel (-1: full resolution)."""
    levels = np.full(len(tiles), -1, dtype=np.int64)
    if method not in OVERVIEW_METHODS:
        return levels
    a = tiles["a"].to_numpy("f8")
    e = tiles["e"].to_numpy("f8")
    cx = (tiles["xmin"].to_numpy("f8") + tiles["xmax"].to_numpy("f8")) / 2
    cy = (tiles["ymin"].to_numpy("f8") + tiles["ymax"].to_numpy("f8")) / 2
    scale = np.ones(len(tiles))  # grid units per source unit, locally at the tile centre
    for crs, idx in tiles.groupby("crs").indices.items():
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
    width, height = tiles["width"].to_numpy(), tiles["height"].to_numpy()
    for i, factors in enumerate(tiles["overviews"]):
        for lvl, f in enumerate(factors):
            ow, oh = math.ceil(width[i] / f), math.ceil(height[i] / f)
            ovr_res = src_res[i] * math.sqrt((width[i] / ow) * (height[i] / oh))
            if ovr_res <= target_src[i] * OVERVIEW_TOLERANCE:
                levels[i] = lvl
    return levels


def level_transforms(tiles: pd.DataFrame, levels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per tile at its level: affine (N, 6), width and height (GDAL's ceil(size / factor))."""
    aff = tiles[["a", "b", "c", "d", "e", "f"]].to_numpy("f8").copy()
    width = tiles["width"].to_numpy().astype(np.int64)
    height = tiles["height"].to_numpy().astype(np.int64)
    lw, lh = width.copy(), height.copy()
    for i in np.flatnonzero(levels >= 0):
        f = tiles["overviews"].iloc[i][levels[i]]
        lw[i], lh[i] = math.ceil(width[i] / f), math.ceil(height[i] / f)
        aff[i, 0] *= width[i] / lw[i]
        aff[i, 4] *= height[i] / lh[i]
    return aff, lw, lh


def compute_plan(
    tiles: pd.DataFrame,
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
) -> Plan:
    """Plan the whole run. ``tiles`` is the catalog's table (sorted by path: the fuse order)."""
    footprints = compute_footprints(tiles, crs)
    if bounds is None:
        bounds = (
            float(np.nanmin(footprints[:, 0])), float(np.nanmin(footprints[:, 1])),
            float(np.nanmax(footprints[:, 2])), float(np.nanmax(footprints[:, 3])),
        )  # fmt: skip
    grid = compute_grid(crs, res_xy, chunks_yx, bounds)
    bands = compute_band_specs(tiles, bands_order)
    band_index = {b.name: i for i, b in enumerate(bands)}
    times = sorted(tiles["date"].unique())
    time_index = {t: i for i, t in enumerate(times)}

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
    tile_crs = tiles["crs"].to_numpy()
    for src_crs in np.unique(tile_crs[tile_of]) if len(tile_of) else []:
        sel = np.flatnonzero(tile_crs[tile_of] == src_crs)
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

    # Group pairs into chunk jobs; order jobs (time, band, cy, cx) so neighbours share files.
    itemsize = np.array([np.dtype(b.dtype).itemsize for b in bands])
    pair_band = np.array([band_index[b] for b in tiles["band"].to_numpy()[tile_of]], dtype=np.int64)
    pair_t = np.array([time_index[d] for d in tiles["date"].to_numpy()[tile_of]], dtype=np.int64)
    order = np.lexsort((tile_of, pair_cx, pair_cy, pair_band, pair_t))
    tile_of, pair_cy, pair_cx, win = tile_of[order], pair_cy[order], pair_cx[order], win[order]
    pair_band, pair_t = pair_band[order], pair_t[order]
    pair_bytes = (win[:, 2] - win[:, 0]) * (win[:, 3] - win[:, 1]) * itemsize[pair_band]

    paths, nodata = tiles["path"].to_numpy(), tiles["nodata"].to_numpy("f8")
    jobs: list[ChunkJob] = []
    bounds_idx = np.flatnonzero(np.diff(np.stack([pair_t, pair_band, pair_cy, pair_cx]), axis=1).any(axis=0)) + 1
    starts = np.concatenate([[0], bounds_idx]) if len(tile_of) else np.array([], dtype=np.int64)
    ends = np.concatenate([bounds_idx, [len(tile_of)]]) if len(tile_of) else np.array([], dtype=np.int64)
    for s, end in zip(starts, ends, strict=True):
        cy, cx, b = int(pair_cy[s]), int(pair_cx[s]), int(pair_band[s])
        cwin = grid.chunk_window(cy, cx)
        sources = []
        for p in range(s, end):
            i = tile_of[p]
            r0, c0, r1, c1 = (int(v) for v in win[p])
            ta = tuple(float(v) for v in aff[i])
            sources.append(
                SourceWindow(
                    path=str(paths[i]),
                    overview_level=int(levels[i]),
                    window=(r0, c0, r1 - r0, c1 - c0),
                    transform=offset_transform(ta, r0, c0),
                    crs=str(tile_crs[i]),
                    nodata=float(nodata[i]),
                )
            )
        out_bytes = cwin[2] * cwin[3] * int(itemsize[b])
        jobs.append(ChunkJob(
            band=bands[b].name, t=int(pair_t[s]), cy=cy, cx=cx, window=cwin,
            sources=tuple(sources), cost_bytes=int(pair_bytes[s:end].sum()) + out_bytes,
        ))  # fmt: skip

    partitions = pack_partitions(jobs, partition_mb * 1e6, key_prefix)
    ny_, nx_ = grid.n_chunks_yx
    level_names = {-1: "full"} | {i: f"overview {i}" for i in range(int(levels.max()) + 1 if len(levels) else 0)}
    used_levels = levels[np.unique(tile_of)] if len(tile_of) else levels[:0]
    return Plan(
        grid=grid,
        bands=bands,
        times=tuple(pd.Timestamp(t).strftime("%Y-%m-%dT%H:%M:%S") for t in times),
        resampling=resampling,
        fuse=fuse,
        partitions=tuple(partitions),
        n_chunks=len(bands) * len(times) * ny_ * nx_,
        n_jobs=len(jobs),
        n_pairs=len(tile_of),
        bytes_read=int(pair_bytes.sum()),
        bytes_out=int(sum(int(np.prod(grid.shape_yx)) * len(times) * np.dtype(b.dtype).itemsize for b in bands)),
        levels_used={
            level_names[int(v)]: int(n) for v, n in zip(*np.unique(used_levels, return_counts=True), strict=True)
        },
    )


def pack_partitions(jobs: list[ChunkJob], target_bytes: float, key_prefix: str) -> list[Partition]:
    """Greedy in job order: close a partition once adding the next job would pass the target."""
    groups: list[list[ChunkJob]] = []
    current: list[ChunkJob] = []
    size = 0
    for job in jobs:
        if current and size + job.cost_bytes > target_bytes:
            groups.append(current)
            current, size = [], 0
        current.append(job)
        size += job.cost_bytes
    if current:
        groups.append(current)
    out = []
    for i, group in enumerate(groups):
        ident = ";".join(f"{j.band}/{j.t}/{j.cy}/{j.cx}" for j in group)
        digest = hashlib.blake2b(ident.encode(), digest_size=6).hexdigest()
        out.append(Partition(index=i, key=f"{key_prefix}-{i:06d}-{digest}", jobs=tuple(group),
                             cost_bytes=sum(j.cost_bytes for j in group)))  # fmt: skip
    return out
