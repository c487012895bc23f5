"""Where bytes live: local paths, ``s3://`` buckets and ``https://`` URLs, for inputs and output alike.

One place turns the config's ``storage:`` section into the clients the stages use; every name is
importable from here (``from pipeline.storage import object_store``), each defined in the module that
holds its responsibility:

- :mod:`~pipeline.storage.settings` -- the :class:`Storage` settings, and the plain
  :class:`StorageSettings` a task carries;
- :mod:`~pipeline.storage.urls` -- what a path names (:func:`scheme`, :func:`split_url`) and
  :func:`vsi_path`, the GDAL path of a URL;
- :mod:`~pipeline.storage.gdal` -- :func:`gdal_options`, the GDAL config options a worker reads tiles
  with (``/vsis3/``, ``/vsicurl/``): the cloud defaults, the endpoint, then ``inputs.gdal_env`` on top;
  and rasterio's AWS session;
- :mod:`~pipeline.storage.clients` -- :func:`object_store`, an obstore store rooted at a URL (listing,
  heads, puts), for the catalog and the Zarr writer, made once per process by :func:`cached_store`;
  :func:`zarr_store` and :func:`storage_options`, how readers open the cube (zarr-python's
  ``ObjectStore``, or fsspec/s3fs options for ``xr.open_zarr(url, storage_options=...)``);
- :mod:`~pipeline.storage.objects` -- ``read_bytes``/``write_bytes``/``delete_keys``/``list_keys``, the
  one byte interface the Zarr writer puts every object through (atomic puts, locally and in a bucket),
  and whole objects by URL;
- :mod:`~pipeline.storage.listing` -- input objects: an ``s3://`` glob as one listing, an ``https://``
  HEAD, the access check of a run planned from an index;
- :mod:`~pipeline.storage.errors` -- a failed request as a ConfigError naming the setting to check;
- :mod:`~pipeline.storage.credentials` -- :func:`redact`, and the environment workers start with.

Credentials are never part of a :class:`~pipeline.config.StorageConfig`: every process resolves them
itself from the usual AWS chain (environment, ``profile``, instance role), so they never travel in a
task graph, a report or an index. :func:`redact` scrubs them from any text that leaves the process.
"""

from __future__ import annotations

from pipeline.storage.clients import cached_store, object_store, storage_options, zarr_store
from pipeline.storage.credentials import redact, worker_environment
from pipeline.storage.errors import store_error
from pipeline.storage.gdal import CLOUD_DEFAULTS, gdal_options, rasterio_session
from pipeline.storage.listing import check_access, glob_prefix, glob_regex, head_key, head_url, is_glob, list_objects
from pipeline.storage.objects import delete_keys, list_keys, read_bytes, read_object, write_bytes, write_object
from pipeline.storage.settings import Storage, StorageSettings, default_storage, task_storage
from pipeline.storage.urls import scheme, split_url, vsi_path

__all__ = [
    "CLOUD_DEFAULTS",
    "Storage",
    "StorageSettings",
    "cached_store",
    "check_access",
    "default_storage",
    "delete_keys",
    "gdal_options",
    "glob_prefix",
    "glob_regex",
    "head_key",
    "head_url",
    "is_glob",
    "list_keys",
    "list_objects",
    "object_store",
    "rasterio_session",
    "read_bytes",
    "read_object",
    "redact",
    "scheme",
    "split_url",
    "storage_options",
    "store_error",
    "task_storage",
    "vsi_path",
    "worker_environment",
    "write_bytes",
    "write_object",
    "zarr_store",
]
