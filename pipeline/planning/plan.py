"""Pure planning: tile table + grid settings -> partitions of output chunks.

No I/O and no pixels. Every step is vectorised over tiles or tile/chunk
pairs: a tile's footprint in the grid CRS gives the range of chunks it can
touch (no chunks x tiles loop); each pair then gets the source window the
chunk needs, padded for the resampling kernel, at the overview level chosen
for that tile. The geometry (footprints, levels, windows) is in
:mod:`pipeline.planning.windows`, computed once per distinct input; this module
orders the pairs into chunk jobs and packs the jobs into partitions.
"""

from __future__ import annotations

import hashlib
import math
import os
import pickle
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, overload

import numpy as np

if TYPE_CHECKING:  # workers import this module for its task types only
    from pipeline.inputs.tiles import TileTable

from pipeline.errors import ConfigError
from pipeline.planning.composite import match_masks, period_starts, strip_rows
from pipeline.planning.grid import GridSpec, compute_grid, offset_transform
from pipeline.planning.windows import (  # noqa: F401 - OVERVIEW_TOLERANCE: importable from here too
    KERNEL_PAD,
    OVERVIEW_METHODS,
    OVERVIEW_TOLERANCE,
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

SNAP_TO_GROUP = 1.0
"""A partition cut moves to the start of a band and date when that is within this many partitions' shares
of the total (see :func:`pack_partitions`)."""


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
    band_index: int = 1
    """The file's band to read (1-based): a STAC multi-band asset's chosen band."""
    layer: int = 0
    """The tile's date: its index into ``Plan.dates`` (a composite's job fuses each date, then reduces them)."""
    mask: MaskSource | None = None
    """The tile that judges this tile's pixels (``mask.band`` of the same tile and date), or None."""


@dataclass(frozen=True)
class MaskSource:
    """A mask tile, read whole-resolution in the window a data window needs
    (:func:`pipeline.resample.mask.mask_window`)."""

    path: str
    band_index: int
    transform: tuple[float, float, float, float, float, float]
    """The file's affine at full resolution (masks are categorical: overviews are never read)."""
    width: int
    height: int


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
        files: dict[tuple[str, int, int], int] = {}
        file_rows: list[tuple[str, int, str, float, float, float, float, float, int]] = []
        bands: dict[str, int] = {}
        masks: dict[MaskSource, int] = {}
        src_file, src_win, src_cf, src_dst, job_rows, job_cost, src_lm = [], [], [], [], [], [], []
        for j in self.jobs:
            for w in j.sources:
                src_lm.append((w.layer, -1 if w.mask is None else masks.setdefault(w.mask, len(masks))))
                k = files.setdefault((w.path, w.overview_level, w.band_index), len(files))
                if k == len(file_rows):
                    t = w.transform
                    file_rows.append((w.path, w.overview_level, w.crs, w.nodata, t[0], t[1], t[3], t[4], w.band_index))
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
            np.asarray(src_lm, dtype=np.int32).reshape(-1, 2),
        )
        # Paths share their folders, and the integer columns are regular: both shrink well.
        prefix = os.path.commonprefix([r[0] for r in file_rows])
        rows = tuple((r[0][len(prefix) :], *r[1:]) for r in file_rows)
        blob = zlib.compress(pickle.dumps(arrays, protocol=5), 1)
        return _unpack_partition, (
            self.index,
            self.key,
            self.cost_bytes,
            tuple(bands),
            prefix,
            rows,
            blob,
            tuple(masks),
        )


def _unpack_partition(
    index: int,
    key: str,
    cost: int,
    bands: tuple[str, ...],
    prefix: str,
    rows: tuple[tuple[Any, ...], ...],
    blob: bytes,
    masks: tuple[MaskSource, ...] = (),
) -> Partition:
    src_file, src_win, src_cf, src_dst, job_rows, job_cost, src_lm = pickle.loads(zlib.decompress(blob))
    file_rows = tuple((prefix + r[0], *r[1:]) for r in rows)
    jobs, s = [], 0
    for row, cost_bytes in zip(job_rows.tolist(), job_cost.tolist(), strict=True):
        b, t, cy, cx, r0, c0, h, w, n = row
        sources = []
        for k in range(s, s + n):
            path, level, crs, nodata, a, bb, d, e, bidx = file_rows[int(src_file[k])]
            c, f = (float(v) for v in src_cf[k])
            wr, wc, wh, ww = (int(v) for v in src_win[k])
            dr, dc, dh, dw = (int(v) for v in src_dst[k])
            sources.append(
                SourceWindow(
                    path=path,
                    overview_level=level,
                    window=(wr, wc, wh, ww),
                    transform=(a, bb, c, d, e, f),
                    crs=crs,
                    nodata=nodata,
                    dst_window=None if dh < 0 else (dr, dc, dh, dw),
                    band_index=bidx,
                    layer=int(src_lm[k, 0]),
                    mask=None if src_lm[k, 1] < 0 else masks[int(src_lm[k, 1])],
                )
            )
        s += n
        jobs.append(
            ChunkJob(
                band=bands[b], t=t, cy=cy, cx=cx, window=(r0, c0, h, w), sources=tuple(sources), cost_bytes=cost_bytes
            )
        )
    return Partition(index=index, key=key, jobs=tuple(jobs), cost_bytes=cost)


@dataclass(frozen=True)
class BandSpec:
    """One output band: its name, dtype, fill value and extra attributes."""

    name: str
    dtype: str
    nodata: float
    """Output fill value: the inputs' nodata, else 0 for integers and NaN for floats."""
    attrs: tuple[tuple[str, Any], ...] = ()
    """Extra array attributes, e.g. CF ``scale_factor``/``add_offset``/``units`` from STAC."""
    resampling: str = "average"
    """This band's resampling method."""
    source_dtype: str | None = None
    """The dtype of the tiles and of each date's fused layer, where the cube's differs (a ``count``
    composite); None: ``dtype``."""
    source_nodata: float | None = None
    """The layers' nodata where the cube's differs; None: ``nodata``."""

    @property
    def layer_dtype(self) -> str:
        """The dtype tiles are read, resampled and fused in."""
        return self.source_dtype or self.dtype

    @property
    def layer_nodata(self) -> float:
        """The nodata of tiles and fused layers."""
        return self.nodata if self.source_nodata is None else self.source_nodata


@dataclass(frozen=True)
class PlanTables:
    """The plan in columns: tiles, (tile, chunk) windows, chunk jobs, partitions (offsets)."""

    paths: np.ndarray
    bidx: np.ndarray
    """The band of each tile's file to read (1-based)."""
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
    layer: np.ndarray | None = None
    """Per tile, its date's index into ``Plan.dates``; None: each tile's time step (no composite)."""
    mask_of: np.ndarray | None = None
    """Per tile, the row of the mask table that judges it (-1: none); None: no mask."""
    masks: tuple[MaskSource, ...] = ()
    """The mask table: every mask tile a data tile is judged by."""


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
        """Every partition's task key, in partition order."""
        return [self.key(i) for i in range(len(self))]

    def costs(self) -> np.ndarray:
        """Every partition's planned cost (bytes read and written), in partition order."""
        return np.add.reduceat(self._t.job_cost, self._t.part_start[:-1]) if len(self) else np.zeros(0)

    def _job(self, j: int) -> ChunkJob:
        t = self._t
        cy, cx = int(t.job_cy[j]), int(t.job_cx[j])
        window = self._grid.chunk_window(cy, cx)
        sources = []
        for p in range(int(t.job_start[j]), int(t.job_start[j + 1])):
            i = int(t.pair_tile[p])
            r0, c0, r1, c1 = (int(v) for v in t.pair_win[p])
            m = -1 if t.mask_of is None else int(t.mask_of[i])
            sources.append(
                SourceWindow(
                    path=t.paths[i],
                    overview_level=int(t.levels[i]),
                    window=(r0, c0, r1 - r0, c1 - c0),
                    transform=offset_transform(tuple(float(v) for v in t.aff[i]), r0, c0),
                    crs=t.crs[i],
                    nodata=float(t.nodata[i]),
                    dst_window=self._covered(window, t.footprints[i]),
                    band_index=int(t.bidx[i]),
                    layer=int(t.job_t[j]) if t.layer is None else int(t.layer[i]),
                    mask=None if m < 0 else t.masks[m],
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
    """The whole run's plan: grid, bands, times, method, fusion, the partitions and what they add up to."""

    grid: GridSpec
    bands: tuple[BandSpec, ...]
    times: tuple[str, ...]
    """ISO dates of the time axis, ascending."""
    resampling: str
    """The default method; each band's is in ``bands``."""
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
    inferred: tuple[tuple[str, str], ...] = ()
    """Grid settings the config left null and the inputs gave: (key, what was taken)."""
    n_geometries: int = 0
    """Distinct (tile geometry, chunk) pairs: the coordinate maps a worker making every window would make
    (a tile's bands of one resolution and its dates share a map; :mod:`pipeline.report.sizing` prices them)."""
    full_with_overviews: int = 0
    """Tiles read at full resolution whose files have overviews (their band's method reads none, or the
    overviews are coarser than the grid)."""
    full_by_method: int = 0
    """Of those, the tiles whose band's method reads no overviews (nearest, mode, ...); the others' first
    overview is coarser than the grid's pixel where the tile lands, and gdalwarp reads them whole too."""
    dates: tuple[str, ...] = ()
    """ISO dates of the observations (each a fused layer); ``times`` unless a composite reduces them."""
    composite: tuple[str, str] | None = None
    """(period, reducer) of a composite; None: one time step per date."""
    strip_rows: int = 0
    """Rows of the strips a chunk is computed in (a divisor of the chunk's height); the chunk's height
    where its stack of dates fits ``stack_budget``."""
    stack_mb: float = 0.0
    """The most one chunk's composite holds at once, in MB (a strip's, where chunks are split)."""
    stack_budget_mb: float = 0.0
    """What one chunk's stack may hold (``composite.stack_mb``)."""
    mask_band: str | None = None
    """``mask.band``: judges every other band's tiles before resampling."""
    unmasked: tuple[str, ...] = ()
    """Data tiles with no mask tile of the same tile and date: not planned (the run lists them as skipped)."""
    count_band: BandSpec | None = None
    """``clear_count`` (``composite.count``): written by the first band's tasks."""

    @property
    def output_bands(self) -> tuple[BandSpec, ...]:
        """Every array of bands the cube holds: the bands, and ``clear_count`` where asked for."""
        return (*self.bands, *([self.count_band] if self.count_band else []))

    @property
    def strips(self) -> int:
        """Row strips per chunk (1: whole chunks)."""
        return max(1, self.grid.chunks_yx[0] // self.strip_rows) if self.strip_rows else 1


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
    footprints = compute_footprints(tiles, crs)
    if bounds is None:
        bounds = (
            float(np.nanmin(footprints[:, 0])),
            float(np.nanmin(footprints[:, 1])),
            float(np.nanmax(footprints[:, 2])),
            float(np.nanmax(footprints[:, 3])),
        )
    grid = compute_grid(crs, res_xy, chunks_yx, bounds)
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
        grid, footprints[rep], aff[rep], lw[rep], lh[rep], crs_code[rep], crs_names, tile_pad[rep]
    )
    tile_of, pair_cp = expand_classes(tile_class, class_of, len(rep))

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
    )
    read = np.zeros(len(tiles), dtype=bool)
    read[tile_of] = True
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
    )


def pack_partitions(
    job_cost: np.ndarray,
    target_bytes: float,
    split_factor: float = 3.0,
    group_start: np.ndarray | None = None,
    snap: float = SNAP_TO_GROUP,
    unit_start: np.ndarray | None = None,
) -> np.ndarray:
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
