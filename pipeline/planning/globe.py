"""Pure planning at the corners of the globe: the antimeridian in geographic grids, tiles whose footprint
does not project, and the check that the plan covers every source.

A geographic grid's x wraps every 360 degrees, and a cylindrical one's (Web Mercator, Mercator, Plate
Carree, equal-area cylindrical) every length of the equator (:func:`~pipeline.planning.grid.x_turn`): a grid
may run past 180 (or -180), and a tile's footprint, computed continuous across the antimeridian
(:func:`~pipeline.planning.grid.transform_boxes`), is moved by whole turns onto the grid
(:func:`wrap_copies`; a tile that meets both edges of a grid wider than a turn less the tile's width meets
it twice, and is planned twice). GDAL does the same: a grid pixel at longitude 180.2 is warped from the
source pixel at -179.8. A tile in a CRS whose x wraps is then georeferenced the same turns over (a
geographic one by 360 degrees), so that a grid pixel at 180.2 reads its column at -179.8; between two such
CRSs points keep their turn (:func:`~pipeline.planning.grid.transform_points`). Any other tile (UTM) keeps
its transform: PROJ takes longitudes past 180.

Inferred bounds (:func:`infer_bounds`) in such a CRS are the shortest range of longitudes that holds every
footprint, so tiles either side of 180 give one contiguous range past 180, not the whole world.

:func:`check_coverage` compares the plan with the sources: points inside each distinct tile geometry,
projected onto the grid, must each fall in a chunk the tile is planned for, inside the tile's window
there. A point that does not is a grid pixel GDAL would fill and the plan leaves empty: a planning bug,
raised as :class:`PlanCoverageError` before any pixel is read.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from pipeline.errors import PlanCoverageError
from pipeline.planning.grid import GridSpec, Turn, transform_points, x_turn
from pipeline.planning.windows import distinct_rows

if TYPE_CHECKING:
    from pipeline.inputs.tiles import TileTable
    from pipeline.planning.jobs import MaskSource

__all__ = [
    "PlanCoverageError",
    "check_coverage",
    "infer_bounds",
    "shift_masks",
    "shift_tiles",
    "unprojectable",
    "wrap_copies",
]


def infer_bounds(footprints: np.ndarray, crs: str) -> tuple[float, float, float, float]:
    """The union of the footprints that project (N, 4 in ``crs``). In a CRS whose x wraps (geographic or
    cylindrical, :func:`~pipeline.planning.grid.x_turn`), x is the shortest arc holding them all (past 180
    where the tiles lie across it; the whole turn, [-180, 180], where they leave no gap), its west end in
    the CRS's own turn ([-180, 180) in degrees)."""
    ok = np.isfinite(footprints).all(axis=1)
    fp = footprints[ok]
    if not len(fp):
        return (np.nan, np.nan, np.nan, np.nan)
    ymin, ymax = float(fp[:, 1].min()), float(fp[:, 3].max())
    turn = x_turn(crs)
    if turn is None:
        return (float(fp[:, 0].min()), ymin, float(fp[:, 2].max()), ymax)
    period, x_west = turn.period, turn.west
    x_east = x_west + period
    if (fp[:, 2] - fp[:, 0] >= period).any():
        return (x_west, ymin, x_east, ymax)
    start = fp[:, 0] - period * np.floor((fp[:, 0] - x_west) / period)  # in the CRS's own turn, unchanged there
    end = start + (fp[:, 2] - fp[:, 0])
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    reach = np.maximum.accumulate(end)
    # Merged runs: a new run starts where a footprint begins past everything before it.
    new = np.concatenate([[True], start[1:] > reach[:-1]])
    run_start = start[new]
    run_end = np.maximum.reduceat(end, np.flatnonzero(new))
    gaps = np.concatenate([run_start[1:] - run_end[:-1], [run_start[0] + period - run_end[-1]]])
    k = int(np.argmax(gaps[::-1]))  # the largest gap; on a tie, the one across the antimeridian
    k = len(gaps) - 1 - k
    if gaps[k] <= 0:
        return (x_west, ymin, x_east, ymax)
    if k == len(gaps) - 1:
        return (float(run_start[0]), ymin, float(run_end[-1]), ymax)
    west, east = float(run_start[k + 1]), float(run_end[k] + period)
    if west >= x_east:
        west, east = west - period, east - period
    return (west, ymin, east, ymax)


def wrap_copies(footprints: np.ndarray, grid: GridSpec) -> tuple[np.ndarray, np.ndarray]:
    """Each tile's place(s) on a grid whose x wraps (geographic or cylindrical): (tile index, shift in the
    grid's x) for every whole turn that moves its footprint onto the grid, in tile order (a tile with none
    keeps its one row, unshifted; the planner finds it meets no chunk). Any other grid: every tile once,
    unshifted."""
    n = len(footprints)
    turn = x_turn(grid.crs)
    if turn is None:
        return np.arange(n), np.zeros(n)
    period = turn.period
    gx0, _, gx1, _ = grid.bounds
    ok = np.isfinite(footprints).all(axis=1)
    x0, x1 = np.where(ok, footprints[:, 0], 0.0), np.where(ok, footprints[:, 2], 0.0)
    # Turns k with x1 + k*period > gx0 and x0 + k*period < gx1.
    k0 = np.floor((gx0 - x1) / period).astype(np.int64) + 1
    k1 = np.ceil((gx1 - x0) / period).astype(np.int64) - 1
    count = np.where(ok, np.maximum(k1 - k0 + 1, 0), 0)
    keep_one = count == 0
    k0 = np.where(keep_one, 0, k0)
    count = np.maximum(count, 1)
    tile = np.repeat(np.arange(n), count)
    step = np.arange(len(tile)) - np.repeat(np.cumsum(count) - count, count)
    return tile, (k0[tile] + step) * period


def _moves(crs: list[str], shift: np.ndarray, grid_turn: Turn | None) -> np.ndarray:
    """``shift`` (in the grid's x) as each tile's own x moves by the same turns: a tile in a CRS whose x
    wraps moves that far in its units; any other (UTM) stays, as PROJ takes it any longitude."""
    if grid_turn is None:
        return np.zeros(len(shift))
    periods = {c: t.period if (t := x_turn(c)) is not None else 0.0 for c in set(crs)}
    return shift / grid_turn.period * np.fromiter((periods[c] for c in crs), "f8", len(crs))


def shift_tiles(tiles: TileTable, tile: np.ndarray, shift: np.ndarray, grid_crs: str) -> TileTable:
    """The tile table with a row per (tile, shift): a tile in a CRS whose x wraps georeferenced the same
    turns over as ``shift`` (in ``grid_crs``'s x) (its transform and bounds), any other tile as it is."""
    out = tiles.rows(tile)
    moved = _moves([str(c) for c in out["crs"].tolist()], shift, x_turn(grid_crs))
    if not moved.any():
        return out
    return out.assign(
        c=out["c"].astype("f8") + moved,
        xmin=out["xmin"].astype("f8") + moved,
        xmax=out["xmax"].astype("f8") + moved,
    )


def shift_masks(
    mask_of: np.ndarray, masks: tuple[MaskSource, ...], tiles: TileTable, shift: np.ndarray, grid_crs: str
) -> tuple[np.ndarray, tuple[MaskSource, ...]]:
    """Mask tiles for copies a turn over: a tile georeferenced a turn over (:func:`shift_tiles`) is judged
    by its mask tile moved as far (added to the mask table); ``tiles``: the copies, shifted."""
    moved = np.where(mask_of >= 0, _moves([str(c) for c in tiles["crs"].tolist()], shift, x_turn(grid_crs)), 0.0)
    if not moved.any():
        return mask_of, masks
    table, out, index = list(masks), mask_of.copy(), {}
    for i in np.flatnonzero(moved).tolist():
        key = (int(mask_of[i]), float(moved[i]))
        if key not in index:
            m = masks[key[0]]
            a, b, c, d, e, f = m.transform
            index[key] = len(table)
            table.append(replace(m, transform=(a, b, c + key[1], d, e, f)))
        out[i] = index[key]
    return out, tuple(table)


def unprojectable(footprints: np.ndarray) -> np.ndarray:
    """Tiles whose footprint could not be computed in the grid's CRS (outside the projection's domain)."""
    return ~np.isfinite(footprints).all(axis=1)


def check_coverage(
    grid: GridSpec,
    tiles: TileTable,
    aff: np.ndarray,
    pair_tile: np.ndarray,
    pair_cy: np.ndarray,
    pair_cx: np.ndarray,
    pair_win: np.ndarray,
    origin: np.ndarray,
    n: int = 12,
) -> None:
    """Raise :class:`PlanCoverageError` where a source point lands in the grid outside the plan.

    For one tile of each distinct geometry (CRS, bounds, level transform): ``n`` x ``n`` points inside it
    (cell centres), projected onto the grid (a wrapping grid's x taken a turn over where that
    lands them on it). Each point that lands in the grid must fall in a chunk that a row of the same
    ``origin`` tile (the tile, or a copy of it a turn over) is planned for, inside that pair's window at
    the tile's level. ``pair_*``: the plan's (tile, chunk) pairs, windows as (row0, col0, row1, col1)."""
    if not len(tiles):
        return
    a, _, c, _, e, f = grid.transform
    h, w = grid.shape_yx
    ch, cw = grid.chunks_yx
    ny, nx = grid.n_chunks_yx
    crs_names, crs_code = tiles.codes("crs")
    boxes = [tiles[k].astype("f8") for k in ("xmin", "ymin", "xmax", "ymax")]
    rep, _ = distinct_rows([crs_code, *boxes, *aff.T, tiles["width"].astype("f8"), tiles["height"].astype("f8")])
    # The plan's pairs by (origin tile, chunk): sorted keys to look windows up in.
    key = (origin[pair_tile].astype(np.int64) * ny + pair_cy) * nx + pair_cx
    order = np.argsort(key, kind="stable")
    key_sorted = key[order]
    s = (np.arange(n) + 0.5) / n
    u, v = (m.ravel() for m in np.meshgrid(s, s))
    turn = x_turn(grid.crs)
    rep_code = crs_code[rep]
    for code in np.unique(rep_code).tolist():
        ts = rep[rep_code == code]
        crs = crs_names[code]
        x0, y0, x1, y1 = (b[ts][:, None] for b in boxes)
        px, py = (x0 + (x1 - x0) * u).ravel(), (y1 - (y1 - y0) * v).ravel()
        point_tile = np.repeat(ts, n * n)
        gx, gy = transform_points(crs, grid.crs, px, py)
        if turn is not None:  # the turn that lands a longitude on the grid, where one does
            gx = c + (gx - c) % turn.period
        with np.errstate(invalid="ignore"):
            col, row = (gx - c) / a, (gy - f) / e
            on = np.isfinite(col) & np.isfinite(row) & (col >= 0) & (col < w) & (row >= 0) & (row < h)
        if not on.any():
            continue
        px, py, gx, gy, point_tile = px[on], py[on], gx[on], gy[on], point_tile[on]
        cy, cx = (row[on] // ch).astype(np.int64), (col[on] // cw).astype(np.int64)
        want = (origin[point_tile].astype(np.int64) * ny + cy) * nx + cx
        lo = np.searchsorted(key_sorted, want, "left")
        hi = np.searchsorted(key_sorted, want, "right")
        # The point at the tile's level: the column and row its planned window must hold.
        ta = aff[point_tile]
        sc, sr = (px - ta[:, 2]) / ta[:, 0], (py - ta[:, 5]) / ta[:, 4]
        own = x_turn(crs)
        if turn is not None and own is not None:  # a copy a turn over holds the same column
            sc = sc % (own.period / np.abs(ta[:, 0]))
        held = np.zeros(len(want), dtype=bool)
        for extra in range(int((hi - lo).max(initial=0))):  # usually one pair per (tile, chunk)
            has = lo + extra < hi
            win = pair_win[order[np.minimum(lo + extra, len(order) - 1)]]
            held |= has & (win[:, 0] <= sr) & (sr <= win[:, 2]) & (win[:, 1] <= sc) & (sc <= win[:, 3])
        if not held.all():
            j = int(np.flatnonzero(~held)[0])
            raise PlanCoverageError(
                f"planning bug: {tiles['path'][point_tile[j]]} covers the grid at ({gx[j]:.6f}, {gy[j]:.6f}) in "
                f"{grid.crs} (chunk row {cy[j]}, column {cx[j]}), but the plan does not read it there: that part "
                f"of the cube would be left empty ({int((~held).sum())} of {len(held)} points checked). Please "
                "report it with the config and this message."
            )
