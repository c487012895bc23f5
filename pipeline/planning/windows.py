"""Pure planning geometry: tile footprints, overview levels, and the source window of each (tile, chunk).

No I/O. Every step is vectorised over tiles or (tile, chunk) pairs, and geometry is computed once per
distinct input: tiles of several bands and dates share one footprint, and tiles with the same CRS,
bounds, level transform and size (one band's tiles on one date and the next) share every window, so
windows are computed for one tile of each such class and copied to the others. Copies are exact: the
same arithmetic on the same numbers.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from pipeline.errors import ConfigError
from pipeline.planning.grid import GridSpec, transform_boxes_partial, transform_points, x_turn
from pipeline.resample.methods import METHODS

if TYPE_CHECKING:
    from pipeline.inputs.tiles import TileTable

# Source pixels of padding around each window, per method (kernel support + 1 for rounding).
KERNEL_PAD = {name: m.pad for name, m in METHODS.items()}
# Methods that blend values may read an (average) overview; value-picking methods read full resolution,
# so that nearest/mode/min/max/median only ever return values present in the data.
OVERVIEW_METHODS = frozenset(name for name, m in METHODS.items() if m.reads_overviews)
# An overview is used when its pixel is not coarser than the target pixel (up to rounding), as gdalwarp
# picks them: the coarsest level whose decimation (full width / level width) is at most the target's. GDAL's
# COG driver rounds level sizes down, so a 5490 px band's 1372 px level (80.03 m) is not read for an 80 m grid.
OVERVIEW_TOLERANCE = 1 + 1e-9

_HASH_MULTIPLIERS = np.array(
    [
        0x9E3779B97F4A7C15,
        0xC2B2AE3D27D4EB4F,
        0x165667B19E3779F9,
        0xD6E8FEB86659FD93,
        0xFF51AFD7ED558CCD,
        0xC4CEB9FE1A85EC53,
        0x94D049BB133111EB,
        0xBF58476D1CE4E5B9,
    ],
    dtype=np.uint64,
)


def distinct_rows(columns: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Rows of equal-length 8-byte columns that are equal bit for bit: (index of one row of each distinct
    row, per row the position of its distinct row in that index).

    By a 64-bit hash of each row and NumPy's sort of the hashes, then checked row by row against the
    chosen representative (a collision falls back to sorting the rows' bytes), so never approximate."""
    bits = [np.asarray(c).view(np.uint64) for c in columns]
    h = np.zeros(len(bits[0]), dtype=np.uint64)
    for k, b in enumerate(bits):  # wraps modulo 2**64
        h += b * (_HASH_MULTIPLIERS[k % len(_HASH_MULTIPLIERS)] + np.uint64(2 * k))
    h ^= h >> np.uint64(31)
    _, first, inverse = np.unique(h, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    rep = first[inverse]
    if not all(np.array_equal(b, b[rep]) for b in bits):  # two rows with one hash: compare their bytes
        rows = np.ascontiguousarray(np.column_stack(bits))
        keys = rows.view(np.dtype((np.void, 8 * len(bits)))).reshape(-1)
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
    return first, inverse


def compute_footprints(tiles: TileTable, dst_crs: str) -> tuple[np.ndarray, np.ndarray]:
    """Each tile's bounding box in ``dst_crs``, shape (N, 4), transformed once per distinct box; and whether
    the tile lies across the edge of the projection's domain (its box is then the part that projects)."""
    out = np.full((len(tiles), 4), np.nan)
    partial = np.zeros(len(tiles), dtype=bool)
    boxes = np.column_stack([tiles[c] for c in ("xmin", "ymin", "xmax", "ymax")]).astype("f8")
    for crs, idx in tiles.groups("crs").items():
        first, inverse = distinct_rows(list(boxes[idx].T))
        fp, part = transform_boxes_partial(crs, dst_crs, boxes[idx[first]], n=11)
        if part.any():  # across the domain's edge: denser samples, edges and inside, of the part that projects
            fp[part] = transform_boxes_partial(crs, dst_crs, boxes[idx[first]][part], n=33, interior=33)[0]
        out[idx], partial[idx] = fp[inverse], part[inverse]
    return out, partial


def compute_levels(
    tiles: TileTable,
    grid_crs: str,
    res_xy: tuple[float, float],
    method: str | np.ndarray,
    sizes: np.ndarray | None = None,
) -> np.ndarray:
    """Overview level per tile, as gdalwarp picks it: the coarsest whose decimation (full width over the
    level's width, from the sizes the file declares) is at most the target pixel's size in source pixels
    (-1: full resolution).

    ``method``: one method for every tile, or one per tile (per-band resampling); only blending methods
    read overviews. ``sizes``: :func:`size_matrix` of ``tiles``, where the caller has it."""
    levels = np.full(len(tiles), -1, dtype=np.int64)
    blends = (
        np.isin(np.asarray(method, dtype=object), list(OVERVIEW_METHODS))
        if isinstance(method, np.ndarray)
        else np.full(len(tiles), method in OVERVIEW_METHODS)
    )
    if not blends.any():
        return levels
    a = tiles["a"].astype("f8")
    e = tiles["e"].astype("f8")
    scale = local_scale(tiles, grid_crs)
    target_ratio = math.sqrt(res_xy[0] * res_xy[1]) / scale / np.sqrt(np.abs(a * e))  # source pixels per target pixel
    width = tiles["width"].astype("f8")
    sizes = size_matrix(tiles) if sizes is None else sizes
    for lvl in range(sizes.shape[1]):
        ow, oh = sizes[:, lvl, 0], sizes[:, lvl, 1]
        has = (ow > 0) & (oh > 0) & blends
        ratio = width / np.where(has, ow, 1)
        levels[has & (ratio <= target_ratio * OVERVIEW_TOLERANCE)] = lvl
    return levels


def local_scale(tiles: TileTable, grid_crs: str) -> np.ndarray:
    """Per tile, grid units per source unit at the tile's centre (1 in the grid's CRS): the square root
    of the transform's Jacobian determinant, once per distinct (CRS, centre, pixel size)."""
    a = tiles["a"].astype("f8")
    cx = (tiles["xmin"].astype("f8") + tiles["xmax"].astype("f8")) / 2
    cy = (tiles["ymin"].astype("f8") + tiles["ymax"].astype("f8")) / 2
    scale = np.ones(len(tiles))
    for crs, idx in tiles.groups("crs").items():
        if crs == grid_crs:
            continue
        x, y, u = cx[idx], cy[idx], np.abs(a[idx]) * 10
        first, inverse = distinct_rows([x, y, u])
        x, y, u = x[first], y[first], u[first]
        xs = np.concatenate([x, x + u, x])
        ys = np.concatenate([y, y, y + u])
        gx, gy = transform_points(crs, grid_crs, xs, ys)
        n = len(first)
        j11, j21 = (gx[n : 2 * n] - gx[:n]) / u, (gy[n : 2 * n] - gy[:n]) / u
        j12, j22 = (gx[2 * n :] - gx[:n]) / u, (gy[2 * n :] - gy[:n]) / u
        scale[idx] = np.sqrt(np.abs(j11 * j22 - j12 * j21))[inverse]
    return scale


def infer_grid(
    tiles: TileTable, crs: str | None, res_xy: tuple[float, float] | None
) -> tuple[str, tuple[float, float], dict[str, str]]:
    """The grid's CRS and resolution where the config leaves them null, as odc-stac infers them: the
    inputs' CRS when they share one (an error listing them otherwise), and the finest band's pixel size
    in that CRS (rounded to 6 significant digits across CRSs). Also what was inferred, and from what."""
    inferred: dict[str, str] = {}
    if crs is None:
        found = sorted(set(tiles["crs"]))
        if len(found) != 1:
            raise ConfigError(
                "grid.crs",
                f"is null, but the inputs are in {len(found)} CRSs ({', '.join(found[:8])}"
                f"{', ...' if len(found) > 8 else ''}): set grid.crs to one of them",
            )
        crs = found[0]
        inferred["grid.crs"] = f"{crs} (the inputs' CRS)"
    if res_xy is None:
        pixel = np.sqrt(np.abs(tiles["a"].astype("f8") * tiles["e"].astype("f8"))) * local_scale(tiles, crs)
        k = int(np.nanargmin(pixel))
        finest = float(f"{float(pixel[k]):.6g}")
        res_xy = (finest, finest)
        inferred["grid.resolution"] = f"{finest:g} (band {tiles['band'][k]}'s pixel, the finest)"
    return crs, res_xy, inferred


def size_matrix(tiles: TileTable) -> np.ndarray:
    """Overview sizes as a (tiles, max levels, 2) int matrix of (width, height), 0 where a tile has fewer
    levels. The ``overview_sizes`` column holds each tile's flat [w0, h0, w1, h1, ...]."""
    lists = tiles["overview_sizes"].tolist()
    lengths = np.fromiter(map(len, lists), np.int64, len(lists))
    depth = int(lengths.max(initial=0))
    out = np.zeros((len(lists), depth), dtype=np.int64)
    if depth:
        flat = np.fromiter(itertools.chain.from_iterable(lists), np.int64, int(lengths.sum()))
        row = np.repeat(np.arange(len(lists)), lengths)
        out[row, np.arange(len(flat)) - np.repeat(np.cumsum(lengths) - lengths, lengths)] = flat
    return out.reshape(len(lists), depth // 2, 2)


def level_transforms(
    tiles: TileTable, levels: np.ndarray, sizes: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per tile at its level: affine (N, 6), width and height, the level's size as the file declares it
    and its transform as GDAL derives it (the pixel scaled by full size over level size)."""
    aff = np.column_stack([tiles[c] for c in ("a", "b", "c", "d", "e", "f")]).astype("f8")
    width = tiles["width"].astype(np.int64)
    height = tiles["height"].astype(np.int64)
    sizes = size_matrix(tiles) if sizes is None else sizes
    lw, lh = width.copy(), height.copy()
    sel = np.flatnonzero(levels >= 0)
    lw[sel], lh[sel] = sizes[sel, levels[sel], 0], sizes[sel, levels[sel], 1]
    aff[:, 0] *= width / lw
    aff[:, 4] *= height / lh
    return aff, lw, lh


def chunk_windows(
    grid: GridSpec,
    footprints: np.ndarray,
    aff: np.ndarray,
    lw: np.ndarray,
    lh: np.ndarray,
    crs_code: np.ndarray,
    crs_names: list[str],
    pad: int | np.ndarray,
    partial: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every (tile, chunk) pair with a non-empty source window, in tile order and, within a tile, in
    row-major chunk order: (tile, chunk row, chunk column, window (pairs, 4): row0, col0, row1, col1 at
    the tile's level, padded by ``pad`` (one for all, or one per footprint) and clipped to the tile). A
    tile's footprint in the grid CRS gives the range of chunks it can touch (no chunks x tiles loop); the
    chunk's box in the tile's CRS gives the window.

    At the edge of a projection's domain, where sampled boxes may miss what projects: a ``partial`` tile
    (per footprint: across the edge in the grid's CRS) may touch a chunk more around its footprint, and a
    chunk whose box lies across the edge in a tile's CRS also reads what the tile's own sample points say
    lands in it (:func:`_from_source`; GDAL, whose sample grid misses it too, searches from the source's
    side)."""
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
    if partial is not None and partial.any():  # a chunk's margin around what the samples found
        cx0, cy0 = np.where(partial, np.maximum(cx0 - 1, 0), cx0), np.where(partial, np.maximum(cy0 - 1, 0), cy0)
        cx1, cy1 = (
            np.where(partial, np.minimum(cx1 + 1, nx - 1), cx1),
            np.where(partial, np.minimum(cy1 + 1, ny - 1), cy1),
        )
    ok &= (footprints[:, 2] > grid.bounds[0]) & (footprints[:, 0] < grid.bounds[2])
    ok &= (footprints[:, 3] > grid.bounds[1]) & (footprints[:, 1] < grid.bounds[3])
    nxs = np.where(ok, cx1 - cx0 + 1, 0).astype(np.int64)
    nys = np.where(ok, cy1 - cy0 + 1, 0).astype(np.int64)
    counts = nxs * nys
    tile_of = np.repeat(np.arange(len(footprints)), counts)
    k = np.arange(len(tile_of)) - np.repeat(np.cumsum(counts) - counts, counts)
    pair_cx = (cx0[tile_of] + k % nxs[tile_of]).astype(np.int64)
    pair_cy = (cy0[tile_of] + k // nxs[tile_of]).astype(np.int64)

    # Source window of each pair, from the chunk's box in the tile's CRS.
    win = np.zeros((len(tile_of), 4), dtype=np.int64)  # row0, col0, row1, col1
    chunk_boxes = grid.chunk_boxes().reshape(-1, 4)
    pair_crs = crs_code[tile_of]
    edge_pairs: list[np.ndarray] = []  # pairs whose chunk lies across the edge of the tile CRS's domain
    for code in np.unique(pair_crs):
        sel = np.flatnonzero(pair_crs == code)
        needed = np.unique(pair_cy[sel] * nx + pair_cx[sel])
        boxes_src = np.full((ny * nx, 4), np.nan)
        across = np.zeros(ny * nx, dtype=bool)
        boxes_src[needed], across[needed] = transform_boxes_partial(grid.crs, crs_names[code], chunk_boxes[needed], n=9)
        bx = boxes_src[pair_cy[sel] * nx + pair_cx[sel]]
        edge_pairs.append(sel[across[pair_cy[sel] * nx + pair_cx[sel]]])
        t = aff[tile_of[sel]]
        own = x_turn(crs_names[code])
        if own is not None:  # the chunk's x (longitudes), by whole turns, where the tile lies
            k = np.round((t[:, 2] + t[:, 0] * lw[tile_of[sel]] / 2 - (bx[:, 0] + bx[:, 2]) / 2) / own.period)
            bx = bx + np.nan_to_num(k)[:, None] * np.array([own.period, 0.0, own.period, 0.0])
        pad_sel = pad if np.isscalar(pad) else np.asarray(pad)[tile_of[sel]]
        with np.errstate(invalid="ignore"):
            col0 = np.floor((bx[:, 0] - t[:, 2]) / t[:, 0]) - pad_sel
            col1 = np.ceil((bx[:, 2] - t[:, 2]) / t[:, 0]) + pad_sel
            row0 = np.floor((bx[:, 3] - t[:, 5]) / t[:, 4]) - pad_sel
            row1 = np.ceil((bx[:, 1] - t[:, 5]) / t[:, 4]) + pad_sel
        w_, h_ = lw[tile_of[sel]], lh[tile_of[sel]]
        win[sel, 0] = np.clip(np.nan_to_num(row0, nan=0), 0, h_)
        win[sel, 1] = np.clip(np.nan_to_num(col0, nan=0), 0, w_)
        win[sel, 2] = np.clip(np.nan_to_num(row1, nan=0), 0, h_)
        win[sel, 3] = np.clip(np.nan_to_num(col1, nan=0), 0, w_)
    edge = np.concatenate(edge_pairs) if edge_pairs else np.zeros(0, dtype=np.int64)
    if len(edge):
        _from_source(grid, aff, lw, lh, crs_code, crs_names, tile_of, pair_cy, pair_cx, win, edge, pad)
    keep = (win[:, 2] > win[:, 0]) & (win[:, 3] > win[:, 1])
    return tile_of[keep], pair_cy[keep], pair_cx[keep], win[keep]


def _from_source(
    grid: GridSpec,
    aff: np.ndarray,
    lw: np.ndarray,
    lh: np.ndarray,
    crs_code: np.ndarray,
    crs_names: list[str],
    tile_of: np.ndarray,
    pair_cy: np.ndarray,
    pair_cx: np.ndarray,
    win: np.ndarray,
    edge: np.ndarray,
    pad: int | np.ndarray,
    samples: int = 33,
) -> None:
    """Windows of the ``edge`` pairs (their chunk across the edge of the tile CRS's domain, where its sampled
    box may miss what projects) grown, in place, to hold every sampled source point of the tile that lands
    in the chunk, with a sample's spacing and the pad around: GDAL's search from the source's side."""
    a, _, c, _, e, f = grid.transform
    h, w = grid.shape_yx
    ch, cw = grid.chunks_yx
    nx = grid.n_chunks_yx[1]
    s = np.linspace(0.0, 1.0, samples)
    u, v = (m.ravel() for m in np.meshgrid(s, s))
    turn = x_turn(grid.crs)
    for tile in np.unique(tile_of[edge]).tolist():
        t = aff[tile]
        cols, rows = u * lw[tile], v * lh[tile]
        gx, gy = transform_points(crs_names[crs_code[tile]], grid.crs, t[2] + cols * t[0], t[5] + rows * t[4])
        if turn is not None:
            gx = c + (gx - c) % turn.period
        with np.errstate(invalid="ignore"):
            gc, gr = (gx - c) / a, (gy - f) / e
            on = np.isfinite(gc) & np.isfinite(gr) & (gc >= 0) & (gc < w) & (gr >= 0) & (gr < h)
        chunk = np.where(on, (np.nan_to_num(gr) // ch) * nx + np.nan_to_num(gc) // cw, -1).astype(np.int64)
        grow = pad if np.isscalar(pad) else int(np.asarray(pad)[tile])
        step_c, step_r = lw[tile] / (samples - 1) + grow, lh[tile] / (samples - 1) + grow
        for p in edge[tile_of[edge] == tile].tolist():
            hit = chunk == pair_cy[p] * nx + pair_cx[p]
            if not hit.any():
                continue
            r0 = max(int(np.floor(rows[hit].min() - step_r)), 0)
            c0 = max(int(np.floor(cols[hit].min() - step_c)), 0)
            r1 = min(int(np.ceil(rows[hit].max() + step_r)), int(lh[tile]))
            c1 = min(int(np.ceil(cols[hit].max() + step_c)), int(lw[tile]))
            if win[p, 2] > win[p, 0] and win[p, 3] > win[p, 1]:
                r0, c0 = min(r0, int(win[p, 0])), min(c0, int(win[p, 1]))
                r1, c1 = max(r1, int(win[p, 2])), max(c1, int(win[p, 3]))
            win[p] = (r0, c0, r1, c1)


def expand_classes(tile_class: np.ndarray, class_of: np.ndarray, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Pairs of tiles from pairs of their classes: ``class_of`` gives each class pair's class (class
    pairs grouped by class, in order). Returns (tile, class pair) per tile pair, in tile order and,
    within a tile, in its class's pair order."""
    per_class = np.bincount(class_of, minlength=n_classes)
    class_start = np.cumsum(per_class) - per_class
    per_tile = per_class[tile_class]
    tile_of = np.repeat(np.arange(len(tile_class)), per_tile)
    k = np.arange(len(tile_of)) - np.repeat(np.cumsum(per_tile) - per_tile, per_tile)
    return tile_of, np.repeat(class_start[tile_class], per_tile) + k


def stable_order(major: np.ndarray, minor: np.ndarray, n_major: int, n_minor: int) -> np.ndarray:
    """The order sorting by (major, minor), ties in their input order; keys in [0, n_major) and
    [0, n_minor). Keys that fit in 16 bits take two passes of NumPy's radix sort."""
    if n_major <= 1 << 16 and n_minor <= 1 << 16:
        first = np.argsort(minor.astype(np.uint16), kind="stable")
        return first[np.argsort(major[first].astype(np.uint16), kind="stable")]
    if n_major * n_minor < 1 << 62:
        return np.argsort(major.astype(np.int64) * n_minor + minor, kind="stable")
    return np.lexsort((minor, major))
