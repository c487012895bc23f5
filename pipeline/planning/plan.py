"""The plan's types: the frozen :class:`Plan` every run works from, its output bands (:class:`BandSpec`),
its tables in columns (:class:`PlanTables`) and the partitions built from them one at a time
(:class:`Partitions`).

A partition's own types (:class:`~pipeline.planning.jobs.SourceWindow`, ``ChunkJob``, ``Partition``, ...)
are in :mod:`pipeline.planning.jobs` and importable from here too; the plan is computed by
:func:`pipeline.planning.planner.compute_plan`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np

from pipeline.planning.grid import GridSpec, offset_transform
from pipeline.planning.jobs import ChunkJob, MaskSource, Partition, SourceWindow
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
        return Partition(index=i, key=self.key(i), jobs=self._jobs(j0, j1), cost_bytes=int(t.job_cost[j0:j1].sum()))

    def _jobs(self, j0: int, j1: int) -> tuple[ChunkJob, ...]:
        """Jobs ``j0`` to ``j1 - 1``, their tables read as Python values in one step per column (element
        by element, NumPy's scalars made building a 192,000-tile plan's tasks take ~10 s)."""
        t = self._t
        starts = t.job_start[j0 : j1 + 1].tolist()
        p0 = starts[0]
        tiles = t.pair_tile[p0 : starts[-1]]
        tl = tiles.tolist()
        win = t.pair_win[p0 : starts[-1]].tolist()
        aff, foot = t.aff[tiles].tolist(), t.footprints[tiles].tolist()
        levels, bidx, nodata = t.levels[tiles].tolist(), t.bidx[tiles].tolist(), t.nodata[tiles].tolist()
        layer = None if t.layer is None else t.layer[tiles].tolist()
        mask_of = None if t.mask_of is None else t.mask_of[tiles].tolist()
        jt, jy, jx = t.job_t[j0:j1].tolist(), t.job_cy[j0:j1].tolist(), t.job_cx[j0:j1].tolist()
        jband, jcost = t.job_band[j0:j1].tolist(), t.job_cost[j0:j1].tolist()
        jobs = []
        for k in range(j1 - j0):
            window = self._grid.chunk_window(jy[k], jx[k])
            sources = []
            for q in range(starts[k] - p0, starts[k + 1] - p0):
                i = tl[q]
                r0, c0, r1, c1 = win[q]
                m = -1 if mask_of is None else mask_of[q]
                sources.append(
                    SourceWindow(
                        path=t.paths[i],
                        overview_level=levels[q],
                        window=(r0, c0, r1 - r0, c1 - c0),
                        transform=offset_transform(tuple(aff[q]), r0, c0),
                        crs=t.crs[i],
                        nodata=float(nodata[q]),
                        dst_window=self._covered(window, foot[q]),
                        band_index=bidx[q],
                        layer=jt[k] if layer is None else layer[q],
                        mask=None if m < 0 else t.masks[m],
                        tile_origin=(aff[q][2], aff[q][5]),
                    )
                )
            jobs.append(
                ChunkJob(
                    band=self._bands[jband[k]].name,
                    t=jt[k],
                    cy=jy[k],
                    cx=jx[k],
                    window=window,
                    sources=tuple(sources),
                    cost_bytes=jcost[k],
                )
            )
        return tuple(jobs)

    def _covered(self, window: tuple[int, int, int, int], footprint: Sequence[float]) -> tuple[int, int, int, int]:
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
