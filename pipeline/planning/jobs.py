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
        file_rows: list[tuple[str, int, str, float, float, float, float, float, int, float, float]] = []
        bands: dict[str, int] = {}
        masks: dict[MaskSource, int] = {}
        src_file, src_win, src_cf, src_dst, job_rows, job_cost, src_lm = [], [], [], [], [], [], []
        for j in self.jobs:
            for w in j.sources:
                src_lm.append((w.layer, -1 if w.mask is None else masks.setdefault(w.mask, len(masks))))
                k = files.setdefault((w.path, w.overview_level, w.band_index), len(files))
                if k == len(file_rows):
                    t, o = w.transform, w.tile_origin or (math.nan, math.nan)
                    file_rows.append(
                        (w.path, w.overview_level, w.crs, w.nodata, t[0], t[1], t[3], t[4], w.band_index, *o)
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
            path, level, crs, nodata, a, bb, d, e, bidx, ox, oy = file_rows[int(src_file[k])]
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
                    tile_origin=None if math.isnan(ox) else (ox, oy),
                )
            )
        s += n
        jobs.append(
            ChunkJob(
                band=bands[b], t=t, cy=cy, cx=cx, window=(r0, c0, h, w), sources=tuple(sources), cost_bytes=cost_bytes
            )
        )
    return Partition(index=index, key=key, jobs=tuple(jobs), cost_bytes=cost)
