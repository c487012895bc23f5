"""What every task of a run shares: :class:`TaskContext`, made once by the driver and sent with each
partition (identifiers only, never data or open handles)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline.planning.plan import BandSpec


@dataclass(frozen=True)
class TaskContext:
    """What every task of a run shares: the store, the grid, the bands, the method and the rules;
    identifiers only, so it pickles small."""

    store_path: str
    grid_crs: str
    grid_transform: tuple[float, float, float, float, float, float]
    bands: tuple[BandSpec, ...]
    resampling: str
    fuse: str
    on_error: str
    engine: str = "auto"
    """Resampling engine: auto | kernels | gdal (see pipeline.resample.warp)."""
    grid_width: int = 0
    """Columns in the grid's rows: reprojection positions are approximated along whole rows (no seams)."""
    skip_covered: bool = True
    """first/last fusion: skip reading and resampling where earlier tiles already filled the chunk."""
    storage: Any = None
    """The config's storage settings as a :class:`~pipeline.storage.StorageSettings` (endpoint, region;
    never a credential: each worker resolves those from its own AWS chain), for an ``s3://`` store."""
    store_stamp: str | None = None
    """:func:`pipeline.store.write.store_stamp` of the store: workers read its metadata once per process."""
    gdal_env: tuple[tuple[str, str], ...] = ()
    """``inputs.gdal_env`` as (option, value) pairs, over the cloud defaults for remote reads."""
    mask_exclude: tuple[int, ...] = ()
    """``mask.exclude`` as class values (names resolved against the mask band's STAC classes)."""
    mask_bits: tuple[int, ...] = ()
    """``mask.exclude_bits`` as bit positions."""
    mask_dilate: int = 0
    reducer: str | None = None
    """``composite.reducer``; None: one time step per date."""
    count_band: BandSpec | None = None
    """``clear_count``, written with the first band's chunks."""
    chunk_rows: int = 0
    """The output chunks' height (a composite's jobs may be row strips of them)."""
    grid_height: int = 0
    device: str = "cpu"
    """Where this task's arrays are computed (set per task from the driver's decision)."""
    compiled: bool = False
    """Whether resampling uses the compiled kernels (:func:`pipeline.resample.compiled.choose`, asked once by
    the driver)."""
    io_concurrency: int = 1
    """Windows read at once by the task's I/O threads (``execution.io_concurrency`` as the driver resolved
    it; below 2: each read on the task's thread when it comes to it)."""
    prefetch_bytes: int = 64 << 20
    """Pixels the read-ahead holds at most, read or being read (``execution.prefetch_mb``)."""
    chunk_separator: str | None = None
    """Where chunks are written in the other key namespace than the arrays' own (``/`` or ``.``): an update
    that shifts dates stages the whole time axis there before it publishes (:mod:`pipeline.store.publish`)."""
    run_token: str = ""
    """Unique to this run (a resumed one too): what a worker keeps from the files' contents, such as its
    judged mask windows, is kept for one run, as the files may have changed in between."""
