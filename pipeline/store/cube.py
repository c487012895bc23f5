"""Reading a written cube back: one lazy ``xarray.Dataset`` through zarr-python's own store (obstore
for a bucket), so no fsspec or s3fs is needed."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import xarray

    from pipeline.config import OutputConfig
    from pipeline.storage import Storage


def open_cube(output: OutputConfig, storage: Storage | None = None) -> xarray.Dataset:
    """The cube written at ``output.path`` (reached with ``storage``; None: the defaults) as a lazy
    ``xarray.Dataset`` (one variable per band, dims time, y, x); with ``output.engine: icechunk``, the
    repository branch's latest commit."""
    import xarray as xr

    if output.engine == "icechunk":
        from pipeline.store.icechunk_engine import open_version

        return open_version(output.path, storage)

    from pipeline.storage import zarr_store

    return xr.open_zarr(zarr_store(output.path, storage), consolidated=True)
