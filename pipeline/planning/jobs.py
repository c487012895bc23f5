"""A task's work, as the plan hands it out: each output chunk (:class:`ChunkJob`) with the source windows it
fuses (:class:`SourceWindow`, each judged by an optional :class:`MaskSource`), packed into a
:class:`Partition`, which pickles compactly (what a task is sent). Workers import this module for these
types; no planning happens here.
"""

from __future__ import annotations

import math
import os
import pickle
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

Geometry = tuple[tuple[float, ...], tuple[int, ...], tuple[float, float] | None, tuple[int, int] | None, str]
"""A source window's :meth:`SourceWindow.geometry`: transform, window, tile origin, tile shape, CRS."""


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
    tile_origin: tuple[float, float] | None = None
    """(x, y) of the tile's top-left corner at that level (``transform`` is this moved by ``window``'s
    offsets): source positions are formed from it, in the tile's pixels, and then moved by the window's
    whole offsets, so a pixel's position has the same bits whichever window reads it. None: the window's
    own corner (a window read on its own)."""
    tile_shape: tuple[int, int] | None = None
    """(height, width) of the tile at that level: where a kernel's one stretch for the whole tile is measured
    (its centre, :func:`pipeline.resample.warp.map_for`). None: at the tile's corner."""

    def geometry(self) -> Geometry:
        """What the window's coordinate maps depend on besides the destination (never its file, band, date
        or pixels): the key a worker keeps them by (:class:`pipeline.resample.warp.MapCache`)."""
        return tuple(self.transform), tuple(self.window), self.tile_origin, self.tile_shape, self.crs


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


Packed = tuple[tuple[str, ...], str, tuple[tuple[Any, ...], ...], bytes, tuple[MaskSource, ...]]
"""A partition's jobs as a task is sent them: band names, the paths' common prefix, one row per file
(path after the prefix, level, CRS, nodata, the affine's a, b, d, e, band index, tile origin x, y), then
the arrays of sources and jobs (zlib-compressed pickle) and the mask table."""


class Partition:
    """One task: chunks that are read, resampled and written together.

    Pickles compactly (what a task sends): each file once, then arrays of windows and jobs. The plan makes
    partitions packed (:meth:`packed`), straight from its tables; ``jobs`` are unpacked when first asked
    for, so a driver that only submits never builds them.
    """

    __slots__ = ("_jobs", "_packed", "cost_bytes", "index", "key")

    def __init__(
        self,
        index: int,
        key: str,
        jobs: tuple[ChunkJob, ...] | None = None,
        cost_bytes: int = 0,
        *,
        packed: Packed | None = None,
    ) -> None:
        if jobs is None and packed is None:
            raise TypeError("a Partition needs its jobs or their packed form")
        self.index, self.key, self.cost_bytes = index, key, cost_bytes
        """``key``: the deterministic task key."""
        self._jobs, self._packed = jobs, packed

    @property
    def jobs(self) -> tuple[ChunkJob, ...]:
        if self._jobs is None:
            assert self._packed is not None
            self._jobs = unpack_jobs(*self._packed)
        return self._jobs

    def packed(self) -> Packed:
        """The jobs in the form a task is sent them."""
        if self._packed is None:
            self._packed = pack_jobs(self.jobs)
        return self._packed

    def files(self) -> frozenset[str]:
        """The files the partition reads: its tiles and their mask tiles (from the packed form, where the
        jobs were not unpacked)."""
        if self._jobs is None and self._packed is not None:
            _, prefix, rows, _, masks = self._packed
            return frozenset([prefix + r[0] for r in rows] + [m.path for m in masks])
        return frozenset(
            f for job in self.jobs for src in job.sources for f in (src.path, src.mask.path if src.mask else src.path)
        )

    def geometries(self) -> set[Geometry]:
        """The :meth:`SourceWindow.geometry` of every window the partition reads (the jobs unpacked: a driver
        counts them from the packed columns instead, :meth:`window_columns`)."""
        return {src.geometry() for job in self.jobs for src in job.sources}

    def window_columns(self) -> tuple[tuple[tuple[Any, ...], ...], np.ndarray, np.ndarray, np.ndarray]:
        """The packed form's file rows (:data:`Packed`) and, for each window, its file row's index, its
        window and its corner (the affine's c and f): the columns a window's geometry is made of, without
        unpacking the jobs (a driver reads every partition's: :mod:`pipeline.execute.maplife`)."""
        _, _, rows, blob, _ = self.packed()
        src_file, src_win, src_cf = pickle.loads(zlib.decompress(blob))[:3]
        return rows, src_file, src_win, src_cf

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _unpack_partition, (self.index, self.key, self.cost_bytes, *self.packed())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Partition):
            return NotImplemented
        mine, theirs = (self.index, self.key, self.cost_bytes), (other.index, other.key, other.cost_bytes)
        return mine == theirs and self.jobs == other.jobs

    def __hash__(self) -> int:
        return hash((self.index, self.key, self.cost_bytes))

    def __repr__(self) -> str:
        return f"Partition(index={self.index}, key={self.key!r}, cost_bytes={self.cost_bytes}, jobs={len(self.jobs)})"


def pack_arrays(
    arrays: tuple[np.ndarray, ...],
    file_rows: list[tuple[Any, ...]],
    bands: tuple[str, ...],
    masks: tuple[MaskSource, ...],
) -> Packed:
    """The packed form of a partition's source and job ``arrays`` (src_file, src_win, src_cf, src_dst,
    job_rows, job_cost, src_lm) and its files (paths in full), bands and masks."""
    # Paths share their folders, and the integer columns are regular: both shrink well.
    prefix = os.path.commonprefix([r[0] for r in file_rows])
    rows = tuple((r[0][len(prefix) :], *r[1:]) for r in file_rows)
    return bands, prefix, rows, zlib.compress(pickle.dumps(arrays, protocol=5), 1), masks


def pack_jobs(jobs: tuple[ChunkJob, ...]) -> Packed:
    """Jobs made as objects, packed. A file is one row per (path, level, band, tile origin): a tile on both
    edges of a world grid is two rows, a turn apart, each with its own origin."""
    files: dict[tuple[Any, ...], int] = {}
    file_rows: list[tuple[Any, ...]] = []
    bands: dict[str, int] = {}
    masks: dict[MaskSource, int] = {}
    src_file, src_win, src_cf, src_dst, job_rows, job_cost, src_lm = [], [], [], [], [], [], []
    for j in jobs:
        for w in j.sources:
            src_lm.append((w.layer, -1 if w.mask is None else masks.setdefault(w.mask, len(masks))))
            o = w.tile_origin or (math.nan, math.nan)
            k = files.setdefault((w.path, w.overview_level, w.band_index, *o), len(files))
            if k == len(file_rows):
                t = w.transform
                shape = w.tile_shape or (-1, -1)
                file_rows.append(
                    (w.path, w.overview_level, w.crs, w.nodata, t[0], t[1], t[3], t[4], w.band_index, *o, *shape)
                )
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
    return pack_arrays(arrays, file_rows, tuple(bands), tuple(masks))


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
    return Partition(index=index, key=key, cost_bytes=cost, packed=(bands, prefix, rows, blob, masks))


def unpack_jobs(
    bands: tuple[str, ...], prefix: str, rows: tuple[tuple[Any, ...], ...], blob: bytes, masks: tuple[MaskSource, ...]
) -> tuple[ChunkJob, ...]:
    """The jobs of a packed partition, as objects."""
    src_file, src_win, src_cf, src_dst, job_rows, job_cost, src_lm = pickle.loads(zlib.decompress(blob))
    file_rows = tuple((prefix + r[0], *r[1:]) for r in rows)
    src_file, src_win, src_cf = src_file.tolist(), src_win.tolist(), src_cf.tolist()
    src_dst, src_lm = src_dst.tolist(), src_lm.tolist()
    jobs, s = [], 0
    for row, cost_bytes in zip(job_rows.tolist(), job_cost.tolist(), strict=True):
        b, t, cy, cx, r0, c0, h, w, n = row
        sources = []
        for k in range(s, s + n):
            path, level, crs, nodata, a, bb, d, e, bidx, ox, oy, th, tw = file_rows[src_file[k]]
            c, f = src_cf[k]
            wr, wc, wh, ww = src_win[k]
            dr, dc, dh, dw = src_dst[k]
            layer, m = src_lm[k]
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
                    layer=layer,
                    mask=None if m < 0 else masks[m],
                    tile_origin=None if math.isnan(ox) else (ox, oy),
                    tile_shape=None if th < 0 else (th, tw),
                )
            )
        s += n
        jobs.append(
            ChunkJob(
                band=bands[b], t=t, cy=cy, cx=cx, window=(r0, c0, h, w), sources=tuple(sources), cost_bytes=cost_bytes
            )
        )
    return tuple(jobs)
