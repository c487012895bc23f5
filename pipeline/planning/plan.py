"""The plan's types: the frozen :class:`Plan` every run works from, its output bands (:class:`BandSpec`),
its tables in columns (:class:`PlanTables`) and the partitions built from them one at a time
(:class:`Partitions`).

A partition's own types (:class:`~pipeline.planning.jobs.SourceWindow`, ``ChunkJob``, ``Partition``, ...)
are in :mod:`pipeline.planning.jobs` and importable from here too; the plan is computed by
:func:`pipeline.planning.planner.compute_plan`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np

from pipeline.planning.grid import GridSpec, offset_transform  # noqa: F401 - importable from here too
from pipeline.planning.jobs import ChunkJob, MaskSource, Packed, Partition, SourceWindow, pack_arrays  # noqa: F401
from pipeline.planning.windows import OVERVIEW_TOLERANCE  # noqa: F401 - importable from here too


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
    """(tiles, 4) bounding box of each tile in the grid CRS (a geographic grid's longitudes past 180 where
    the grid runs there; a tile on both edges of a world grid is two rows, a turn apart)."""
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
    shape: np.ndarray | None = None
    """(tiles, 2) height and width of each tile at its level; None: unknown (stretches measured at corners)."""


class Partitions(Sequence[Partition]):
    """The plan's partitions, built one at a time when asked for: a 192,000-tile plan holds
    ~10^6 windows as arrays, and only the tasks being submitted become Python objects."""

    def __init__(self, tables: PlanTables, grid: GridSpec, bands: tuple[BandSpec, ...], key_prefix: str) -> None:
        self._t, self._grid, self._bands, self._prefix = tables, grid, bands, key_prefix

    def __len__(self) -> int:
        return len(self._t.part_start) - 1

    @property
    def prefix(self) -> str:
        """What every partition key starts with."""
        return self._prefix

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
        packed = self._packed(j0, j1)
        return Partition(index=i, key=self.key(i), cost_bytes=int(t.job_cost[j0:j1].sum()), packed=packed)

    def _packed(self, j0: int, j1: int) -> Packed:
        """Jobs ``j0`` to ``j1 - 1`` in the form a task is sent them (:func:`~pipeline.planning.jobs.pack_jobs`'s,
        bit for bit), computed column by column from the tables: building each window as an object first
        made a 192,000-tile plan's tasks take ~15 s to submit."""
        t, grid = self._t, self._grid
        starts = t.job_start[j0 : j1 + 1]
        p0, p1 = int(starts[0]), int(starts[-1])
        counts = np.diff(starts)
        tiles = t.pair_tile[p0:p1]
        win = t.pair_win[p0:p1].astype(np.int64)
        r0, c0 = win[:, 0], win[:, 1]
        aff = t.aff[tiles]
        # files: one row per (path, level, band, tile origin), in the order the sources first name them
        order = np.unique(tiles, return_index=True)
        first = order[0][np.argsort(order[1], kind="stable")].tolist()
        files: dict[tuple[Any, ...], int] = {}
        file_rows: list[tuple[Any, ...]] = []
        k_of: dict[int, int] = {}
        for i in first:
            a = t.aff[i].tolist()
            key = (t.paths[i], int(t.levels[i]), int(t.bidx[i]), a[2], a[5])
            k = files.setdefault(key, len(files))
            if k == len(file_rows):
                row = (t.paths[i], int(t.levels[i]), t.crs[i], float(t.nodata[i]), a[0], a[1], a[3], a[4])
                shape = (-1, -1) if t.shape is None else (int(t.shape[i, 0]), int(t.shape[i, 1]))
                file_rows.append((*row, int(t.bidx[i]), a[2], a[5], *shape))
            k_of[i] = k
        src_file = np.array([k_of[i] for i in tiles.tolist()], dtype=np.int32)
        # where each window's chunk is, and the part of it the tile's footprint covers (plus a pixel)
        cy, cx = t.job_cy[j0:j1].astype(np.int64), t.job_cx[j0:j1].astype(np.int64)
        ch, cw = grid.chunks_yx
        wy, wx = cy * ch, cx * cw
        wh, ww = np.minimum(ch, grid.shape_yx[0] - wy), np.minimum(cw, grid.shape_yx[1] - wx)
        sy, sx, sh, sw = (np.repeat(v, counts) for v in (wy, wx, wh, ww))
        ga, _, gc, _, ge, gf = grid.transform
        x0, y0 = gc + ga * sx, gf + ge * sy
        fp = t.footprints[tiles]
        col0 = np.maximum(np.floor((fp[:, 0] - x0) / ga).astype(np.int64) - 1, 0)
        col1 = np.minimum(np.ceil((fp[:, 2] - x0) / ga).astype(np.int64) + 1, sw)
        row0 = np.maximum(np.floor((fp[:, 3] - y0) / ge).astype(np.int64) - 1, 0)
        row1 = np.minimum(np.ceil((fp[:, 1] - y0) / ge).astype(np.int64) + 1, sh)
        empty = (col1 <= col0) | (row1 <= row0)
        dst = np.stack(
            [
                np.where(empty, 0, row0),
                np.where(empty, 0, col0),
                np.where(empty, sh, row1 - row0),
                np.where(empty, sw, col1 - col0),
            ],
            axis=1,
        )
        layer = np.repeat(t.job_t[j0:j1], counts) if t.layer is None else t.layer[tiles]
        mask_of = np.full(len(tiles), -1) if t.mask_of is None else t.mask_of[tiles]
        masks: dict[MaskSource, int] = {}
        m_of = {-1: -1}
        for m in mask_of.tolist():
            if m not in m_of:
                m_of[m] = masks.setdefault(t.masks[m], len(masks))
        band_ids = t.job_band[j0:j1].tolist()
        bands: dict[str, int] = {}
        for b in band_ids:
            bands.setdefault(self._bands[b].name, len(bands))
        job_band = [bands[self._bands[b].name] for b in band_ids]
        arrays = (
            src_file,
            np.stack([r0, c0, win[:, 2] - r0, win[:, 3] - c0], axis=1).astype(np.int32),
            np.stack([aff[:, 2] + aff[:, 0] * c0 + aff[:, 1] * r0, aff[:, 5] + aff[:, 3] * c0 + aff[:, 4] * r0], 1),
            dst.astype(np.int32),
            np.stack([job_band, t.job_t[j0:j1], cy, cx, wy, wx, wh, ww, counts], axis=1).astype(np.int32),
            t.job_cost[j0:j1].astype(np.int64),
            np.stack([layer, [m_of[m] for m in mask_of.tolist()]], axis=1).astype(np.int32),
        )
        return pack_arrays(arrays, file_rows, tuple(bands), tuple(masks))

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
    unprojected: tuple[str, ...] = ()
    """Tiles whose footprint cannot be computed in the grid's CRS (outside the projection's domain): not
    planned (the run lists them as skipped)."""

    @property
    def output_bands(self) -> tuple[BandSpec, ...]:
        """Every array of bands the cube holds: the bands, and ``clear_count`` where asked for."""
        return (*self.bands, *([self.count_band] if self.count_band else []))

    @property
    def strips(self) -> int:
        """Row strips per chunk (1: whole chunks)."""
        return max(1, self.grid.chunks_yx[0] // self.strip_rows) if self.strip_rows else 1
