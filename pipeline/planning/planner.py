"""Pure planning: tile table + grid settings -> partitions of output chunks.

No I/O and no pixels. Every step is vectorised over tiles or tile/chunk
pairs: a tile's footprint in the grid CRS gives the range of chunks it can
touch (no chunks x tiles loop); each pair then gets the source window the
chunk needs, padded for the resampling kernel, at the overview level chosen
for that tile. The geometry (footprints, levels, windows) is in
:mod:`pipeline.planning.windows`, computed once per distinct input; this module
orders the pairs into chunk jobs, and :mod:`pipeline.planning.packing` packs the jobs into partitions.
The result is a :class:`~pipeline.planning.plan.Plan`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # the tile table's type, for annotations only
    from pipeline.inputs.tiles import TileTable

from pipeline.errors import ConfigError
from pipeline.planning.composite import match_masks, period_starts, strip_rows
from pipeline.planning.globe import (
    check_coverage,
    infer_bounds,
    shift_masks,
    shift_tiles,
    unprojectable,
    wrap_copies,
)
from pipeline.planning.grid import compute_grid
from pipeline.planning.jobs import MaskSource
from pipeline.planning.packing import pack_partitions
from pipeline.planning.plan import BandSpec, Partitions, Plan, PlanTables
from pipeline.planning.windows import (
    KERNEL_PAD,
    OVERVIEW_METHODS,
    chunk_windows,
    compute_footprints,
    compute_levels,
    distinct_rows,
    expand_classes,
    level_transforms,
    size_matrix,
    stable_order,
)
from pipeline.resample.reduce import peak_bytes

COUNT_NAME = "clear_count"
"""The array ``composite.count`` adds."""


def compute_band_methods(
    names: Sequence[str], resampling: str | Mapping[str, str], categorical: frozenset[str] = frozenset()
) -> dict[str, str]:
    """Each band's resampling method: the one ``resampling`` names for it, else its ``"*"`` (``average``
    where a mapping has none); a ``categorical`` band (STAC classification) that is not named takes
    ``mode`` where that default blends values, since an average of classes or bit flags is meaningless."""
    if isinstance(resampling, str):
        named: Mapping[str, str] = {}
        default = resampling
    else:
        named, default = resampling, resampling.get("*", "average")
        unknown = sorted(b for b in named if b != "*" and b not in names)
        if unknown:
            raise ConfigError("resampling", f"names band(s) {unknown} that no input carries; bands: {list(names)}")
    out = {}
    for name in names:
        if name in named:
            out[name] = named[name]
        elif name in categorical and default in OVERVIEW_METHODS:
            out[name] = "mode"
        else:
            out[name] = default
    return out


def compute_band_specs(
    tiles: TileTable,
    bands_order: tuple[str, ...] | None,
    band_attrs: dict[str, dict[str, Any]] | None = None,
    methods: Mapping[str, str] | None = None,
) -> tuple[BandSpec, ...]:
    """The output bands in config order (else sorted), each with its tiles' dtype and nodata, any extra
    attributes and its resampling method (``methods``; default ``average``)."""
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
        method = (methods or {}).get(name, "average")
        specs.append(BandSpec(name=name, dtype=dtype, nodata=nodata, attrs=attrs, resampling=method))
    return tuple(specs)


def compute_plan(
    tiles: TileTable,
    *,
    crs: str,
    res_xy: tuple[float, float],
    chunks_yx: tuple[int, int],
    bounds: tuple[float, float, float, float] | None,
    resampling: str | Mapping[str, str],
    fuse: str,
    partition_mb: float,
    bands_order: tuple[str, ...] | None = None,
    key_prefix: str = "pipeline",
    band_attrs: dict[str, dict[str, Any]] | None = None,
    shards_yx: tuple[int, int] | None = None,
    categorical: frozenset[str] = frozenset(),
    inferred: dict[str, str] | None = None,
    mask_band: str | None = None,
    composite: tuple[str, str] | None = None,
    stack_budget_mb: float = float("inf"),
    clear_count: bool = False,
) -> Plan:
    """Plan the whole run. ``tiles`` is the catalog's table (sorted by path: the fuse order).

    ``resampling``: one method, or per band (:func:`compute_band_methods`, with the ``categorical``
    bands). Each tile's overview level and window padding follow its band's method.

    ``shards_yx``: the store's shard shape (multiples of ``chunks_yx``). Jobs are then ordered shard by
    shard and partitions hold whole shards, so no two tasks ever write one shard object.

    ``mask_band``: the band whose tile of the same tile and date judges each other tile's pixels; its tiles
    are planned as masks only (and as output too where ``bands_order`` lists the band). A data tile with no
    mask tile is left out and listed in ``Plan.unmasked``.

    ``composite``: (period, reducer). A job is then one chunk's whole stack of the period's dates (each
    date's tiles fused into one layer, then reduced), ordered by date and, within a date, in fuse order.
    Partitions are packed by the bytes of those stacks; a chunk whose stack exceeds ``stack_budget_mb``
    is computed in row strips (split in space, never in time), all in one task, which writes it once.
    ``clear_count``: the plan's ``count_band``, the observations of the first band used per pixel and step."""
    unmasked: tuple[str, ...] = ()
    mask_table: tuple[MaskSource, ...] = ()
    mask_of = None
    if mask_band is not None:
        names = tiles["band"]
        out_names = set(bands_order) if bands_order else set(names.tolist()) - {mask_band}
        is_mask = names == mask_band
        masks = tiles.rows(is_mask)
        tiles = tiles.rows(np.fromiter((b in out_names for b in names.tolist()), bool, len(names)))
        mask_of = match_masks(tiles, masks)
        mask_of[tiles["band"] == mask_band] = -1  # the mask band itself, where written, is not masked
        lost = (mask_of < 0) & (tiles["band"] != mask_band)
        unmasked = tuple(tiles["path"][lost].tolist())
        if lost.any():
            tiles, mask_of = tiles.rows(~lost), mask_of[~lost]
        used = np.unique(mask_of[mask_of >= 0])
        remap = np.full(len(masks), -1, dtype=np.int64)
        remap[used] = np.arange(len(used))
        mask_of = np.where(mask_of >= 0, remap[np.maximum(mask_of, 0)], -1)
        mask_table = tuple(
            MaskSource(
                path=str(masks["path"][k]),
                band_index=int(masks["bidx"][k]) if "bidx" in masks else 1,
                transform=tuple(float(masks[c][k]) for c in "abcdef"),  # type: ignore[arg-type]
                width=int(masks["width"][k]),
                height=int(masks["height"][k]),
            )
            for k in used.tolist()
        )
    dates = np.unique(tiles["date"])
    layer = None
    if composite is not None:
        # Tiles by date, then in path order (stable): a job's pairs come out in (date, fuse order).
        tile_date = np.searchsorted(dates, tiles["date"])
        order = np.argsort(tile_date, kind="stable")
        tiles, tile_date = tiles.rows(order), tile_date[order]
        if mask_of is not None:
            mask_of = mask_of[order]
        layer = tile_date
    footprints, partial = compute_footprints(tiles, crs)
    lost = unprojectable(footprints)
    unprojected = tuple(dict.fromkeys(tiles["path"][lost].tolist()))
    if lost.any():  # outside the grid CRS's domain: listed, not planned
        tiles, footprints, partial = tiles.rows(~lost), footprints[~lost], partial[~lost]
        mask_of = None if mask_of is None else mask_of[~lost]
        layer = None if layer is None else layer[~lost]
    if bounds is None:
        bounds = infer_bounds(footprints, crs)
    grid = compute_grid(crs, res_xy, chunks_yx, bounds)
    # A grid past 180 (geographic or cylindrical): each tile where it lies on it, a copy per turn (usually one).
    origin, shift = wrap_copies(footprints, grid)
    if len(origin) != len(tiles) or shift.any():
        tiles = shift_tiles(tiles, origin, shift, grid.crs)
        footprints = footprints[origin] + shift[:, None] * np.array([1.0, 0.0, 1.0, 0.0])
        partial = partial[origin]
        layer = None if layer is None else layer[origin]
        if mask_of is not None:
            mask_of, mask_table = shift_masks(mask_of[origin], mask_table, tiles, shift, grid.crs)
    band_names, band_code = tiles.codes("band")
    methods = compute_band_methods(list(bands_order or band_names), resampling, categorical)
    bands = compute_band_specs(tiles, bands_order, band_attrs, methods)
    count_band = None
    if composite is not None and composite[1] == "count":
        bands = tuple(
            replace(b, dtype="uint16", nodata=0.0, source_dtype=b.dtype, source_nodata=b.nodata) for b in bands
        )
    if composite is not None and clear_count:
        attrs = (("long_name", f"clear observations of {bands[0].name} per pixel and {composite[0]} step"),)
        count_band = BandSpec(name=COUNT_NAME, dtype="uint16", nodata=0.0, attrs=attrs, resampling="nearest")
    band_index = {b.name: i for i, b in enumerate(bands)}
    starts = period_starts(tiles["date"], composite[0]) if composite is not None else tiles["date"]
    times = np.unique(starts)
    itemsize = np.array([np.dtype(b.dtype).itemsize for b in bands])

    # A composite chunk's stack may not fit a worker: it is then computed in row strips (the jobs of a grid
    # whose chunks are the strips), each from its chunk's source windows; one task writes the chunk once.
    strip_h = chunks_yx[0]
    stack = 0
    if composite is not None and len(tiles):
        n_layers = int(np.unique(period_starts(dates, composite[0]), return_counts=True)[1].max())  # dates a step
        widest = max((b.layer_dtype for b in bands), key=lambda d: np.dtype(d).itemsize)

        def need(rows: int) -> int:
            return peak_bytes(composite[1], n_layers, (rows, chunks_yx[1]), widest)

        strip_h = strip_rows(chunks_yx[0], need, stack_budget_mb * 1e6)
        stack = need(strip_h)
    cgrid = replace(grid, chunks_yx=(strip_h, chunks_yx[1]))

    band_method = [methods.get(b, "average") for b in band_names]
    tile_method = np.array(band_method, dtype=object)[band_code]
    tile_pad = np.array([KERNEL_PAD[m] for m in band_method], dtype=np.int64)[band_code]
    sizes = size_matrix(tiles)
    levels = compute_levels(tiles, crs, res_xy, tile_method, sizes)
    aff, lw, lh = level_transforms(tiles, levels, sizes)

    # (tile, chunk) pairs and their windows, computed for one tile of each geometry class (CRS, bounds,
    # level transform and size: the same band on several dates) and copied to the class's other tiles.
    crs_names, crs_code = tiles.codes("crs")
    boxes = [tiles[c].astype("f8", copy=False) for c in ("xmin", "ymin", "xmax", "ymax")]
    rep, tile_class = distinct_rows([crs_code, *boxes, *aff.T, lw, lh, tile_pad])
    class_of, cp_cy, cp_cx, cp_win = chunk_windows(
        grid, footprints[rep], aff[rep], lw[rep], lh[rep], crs_code[rep], crs_names, tile_pad[rep], partial[rep]
    )
    tile_of, pair_cp = expand_classes(tile_class, class_of, len(rep))
    check_coverage(grid, tiles.rows(rep), aff[rep], class_of, cp_cy, cp_cx, cp_win, origin[rep])  # one tile a class

    # Group pairs into chunk jobs; order jobs (time, band, [shard row, shard col,] cy, cx) so neighbours
    # share files (and a shard's chunks are consecutive); a job's pairs stay in tile (fuse) order.
    ch, cw = grid.chunks_yx
    ny, nx = grid.n_chunks_yx
    per_shard = (1, 1) if shards_yx is None else (shards_yx[0] // ch, shards_yx[1] // cw)
    cys, cxs = np.divmod(np.arange(ny * nx), nx)
    chunk_rank = np.empty(ny * nx, dtype=np.int64)
    chunk_rank[np.lexsort((cxs, cys, cxs // per_shard[1], cys // per_shard[0]))] = np.arange(ny * nx)
    tile_band = np.array([band_index[b] for b in band_names], dtype=np.int64)[band_code]
    tile_t = np.searchsorted(times, starts)
    tile_tb = tile_t * len(bands) + tile_band  # (time, band) of each tile as one key
    pair_rank = chunk_rank[cp_cy * nx + cp_cx][pair_cp]
    pair_tb = tile_tb[tile_of]
    order = stable_order(pair_tb, pair_rank, len(times) * len(bands), ny * nx)
    tile_of, pair_cp, pair_tb, pair_rank = tile_of[order], pair_cp[order], pair_tb[order], pair_rank[order]
    win = cp_win[pair_cp]
    pair_px = ((cp_win[:, 2] - cp_win[:, 0]) * (cp_win[:, 3] - cp_win[:, 1]))[pair_cp]

    paths = tiles["path"].astype(object)
    n_pairs = len(tile_of)
    if n_pairs:
        new_job = np.empty(n_pairs, dtype=bool)
        new_job[0] = True
        new_job[1:] = (pair_tb[1:] != pair_tb[:-1]) | (pair_rank[1:] != pair_rank[:-1])
        job_first = np.flatnonzero(new_job)
    else:
        job_first = np.zeros(0, dtype=np.int64)
    job_start = np.append(job_first, n_pairs).astype(np.int64)
    job_band, job_t = tile_band[tile_of[job_first]], tile_t[tile_of[job_first]]
    job_cy, job_cx = cp_cy[pair_cp[job_first]], cp_cx[pair_cp[job_first]]
    h, w = grid.shape_yx
    # A job's pairs share its band, so its read bytes are its windows' pixels times the band's item size.
    read_bytes = np.add.reduceat(pair_px, job_first) * itemsize[job_band] if n_pairs else np.zeros(0, dtype=np.int64)
    per_chunk = ch // strip_h
    if per_chunk > 1 and n_pairs:
        # Each chunk job becomes its strips, in order, each with the chunk's source windows: a strip is
        # resampled from the very windows the whole chunk is, so its pixels are the chunk's, bit for bit.
        k_of = -(-np.minimum(ch, h - job_cy * ch) // strip_h)
        rep = np.repeat(np.arange(len(job_first)), k_of)
        strip = np.arange(len(rep)) - np.repeat(np.cumsum(k_of) - k_of, k_of)
        n_src = np.diff(job_start)[rep]
        new_start = np.concatenate([[0], np.cumsum(n_src)]).astype(np.int64)
        pair_src = np.repeat(job_start[rep], n_src) + np.arange(int(new_start[-1])) - np.repeat(new_start[:-1], n_src)
        tile_of, win = tile_of[pair_src], win[pair_src]
        job_band, job_t, job_cx, read_bytes = job_band[rep], job_t[rep], job_cx[rep], read_bytes[rep]
        job_cy = job_cy[rep] * per_chunk + strip  # rows of strips
        job_first, job_start, n_pairs = new_start[:-1], new_start, len(tile_of)
    out_px = np.minimum(strip_h, h - job_cy * strip_h) * np.minimum(cw, w - job_cx * cw)
    job_cost = (read_bytes + out_px * itemsize[job_band]).astype(np.int64)
    if composite is not None and n_pairs:  # and the stack it holds: median keeps every date's layer
        pair_layer = layer[tile_of] if layer is not None else np.zeros(n_pairs, dtype=np.int64)
        new_layer = np.ones(n_pairs, dtype=bool)
        new_layer[1:] = pair_layer[1:] != pair_layer[:-1]
        new_layer[job_first] = True
        job_layers = np.add.reduceat(new_layer.astype(np.int64), job_first)
        job_cost += np.array(
            [
                peak_bytes(composite[1], int(n), (int(px), 1), bands[b].layer_dtype)
                for n, px, b in zip(job_layers, out_px, job_band, strict=True)
            ],
            dtype=np.int64,
        )
    group_first = np.flatnonzero(np.diff(np.stack([job_t, job_band]), axis=1, prepend=-1).any(axis=0))
    unit_first = None
    if shards_yx is not None or per_chunk > 1:  # a shard, or a chunk's strips: written whole by one task
        shard_of = np.stack([job_t, job_band, job_cy // per_chunk // per_shard[0], job_cx // per_shard[1]])
        unit_first = np.flatnonzero(np.diff(shard_of, axis=1, prepend=-1).any(axis=0))
    part_start = pack_partitions(job_cost, partition_mb * 1e6, group_start=group_first, unit_start=unit_first)

    tables = PlanTables(
        paths=paths,
        bidx=tiles["bidx"].astype(np.int64) if "bidx" in tiles else np.ones(len(tiles), dtype=np.int64),
        crs=tiles["crs"].astype(object),
        nodata=tiles["nodata"].astype("f8"),
        levels=levels,
        aff=aff,
        footprints=footprints,
        pair_tile=tile_of,
        pair_win=win,
        job_band=job_band,
        job_t=job_t,
        job_cy=job_cy,
        job_cx=job_cx,
        job_start=job_start,
        job_cost=job_cost,
        part_start=part_start,
        layer=layer,
        mask_of=mask_of,
        masks=mask_table,
        shape=np.stack([lh, lw], axis=1).astype(np.int64),
    )
    read_any = np.zeros(int(origin.max(initial=-1)) + 1, dtype=bool)
    read_any[origin[tile_of]] = True  # a tile read through any of its copies counts once
    read = read_any[origin] & np.concatenate([[True], origin[1:] != origin[:-1]])
    has_overviews = sizes[:, 0, 0] > 0 if sizes.shape[1] else np.zeros(len(tiles), dtype=bool)
    return Plan(
        grid=grid,
        bands=bands,
        times=tuple(str(np.datetime64(t, "s")) for t in times),
        resampling=resampling if isinstance(resampling, str) else resampling.get("*", "average"),
        fuse=fuse,
        partitions=Partitions(tables, cgrid, bands, key_prefix),
        tables=tables,
        n_chunks=len(bands) * len(times) * grid.n_chunks_yx[0] * grid.n_chunks_yx[1],
        n_jobs=len(job_first),
        n_pairs=n_pairs,
        n_geometries=int(len(class_of)),
        bytes_read=int(read_bytes.sum()),
        bytes_out=int(sum(int(np.prod(grid.shape_yx)) * len(times) * np.dtype(b.dtype).itemsize for b in bands)),
        levels_used={
            ("full" if v < 0 else f"overview {v}"): int(n)
            for v, n in zip(*np.unique(levels[read], return_counts=True), strict=True)
        },
        inferred=tuple(sorted((inferred or {}).items())),
        full_with_overviews=int((read & (levels < 0) & has_overviews).sum()),
        full_by_method=int((read & (levels < 0) & has_overviews & ~np.isin(tile_method, list(OVERVIEW_METHODS))).sum()),
        dates=tuple(str(np.datetime64(t, "s")) for t in dates),
        composite=composite,
        strip_rows=strip_h,
        stack_mb=stack / 1e6,
        stack_budget_mb=stack_budget_mb,
        mask_band=mask_band,
        unmasked=unmasked,
        count_band=count_band,
        unprojected=unprojected,
    )
