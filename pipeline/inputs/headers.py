"""One file's header: CRS, transform, size, dtype, nodata, block shape and each overview level's size.
Every source that opens files uses it. A local GeoTIFF's first bytes are parsed here
(:mod:`pipeline.inputs.tiffheader`: 0.32 ms of CPU a file against 2.25 by GDAL, ``bench/stac_overviews.py``);
what that parser leaves to GDAL, a file with sidecars GDAL would read, and URLs are opened through GDAL
(``/vsis3/``, ``/vsicurl/``)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.config import is_url
from pipeline.errors import TileReadError

if TYPE_CHECKING:
    from pipeline.storage import Storage


def read_header(path: str, storage: Storage | None = None, gdal_env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Open one file and return its header fields (:mod:`pipeline.inputs.files` lists them). A URL is opened through
    GDAL's ``/vsis3/`` or ``/vsicurl/`` with the ``storage`` settings (None: the defaults) and ``gdal_env``
    (``inputs.gdal_env``)."""
    if is_url(path):
        from pipeline.inputs.read import cloud_env
        from pipeline.storage import default_storage, redact, vsi_path

        storage = storage if storage is not None else default_storage()
        try:
            with cloud_env(storage, {**HEADER_OPTIONS, **(gdal_env or {})}):
                return gdal_header(vsi_path(path), path)
        except TileReadError as e:
            raise TileReadError(path, redact(e.problem)) from None
    return local_header(path)


SIDECARS = (".ovr", ".OVR", ".aux.xml", ".aux")
"""Files beside a GeoTIFF that GDAL reads with it (external overviews, PAM metadata that may set nodata
or georeferencing): where one exists, the header is GDAL's."""


def local_header(path: str) -> dict[str, Any]:
    """A local file's header fields: parsed from its first :data:`~pipeline.inputs.tiffheader.HEAD_BYTES`
    where :func:`~pipeline.inputs.tiffheader.parse_header` reads them as GDAL does (every field equal:
    ``tests/test_reads_ahead.py``), else GDAL's (:func:`gdal_header`), whose errors name the problem."""
    from pipeline.inputs.tiffheader import HEAD_BYTES, parse_header

    try:
        with open(path, "rb") as f:
            head = f.read(HEAD_BYTES)
    except OSError:
        return gdal_header(path, path)  # unreadable: GDAL's open says why, as for any file
    header = parse_header(head)
    if header is None or any(os.path.exists(path + ext) for ext in SIDECARS):
        return gdal_header(path, path)
    return header


def fetch_headers(urls: list[str], storage: Any, in_flight: int) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """Each ``s3://`` URL's header fields from its first :data:`~pipeline.inputs.tiffheader.HEAD_BYTES`
    (one range GET, ``in_flight`` at once, by obstore on a thread of its own), as they come; None for one
    that GDAL must read (:func:`~pipeline.inputs.tiffheader.parse_header` could not, or the GET failed:
    GDAL's open then says why)."""
    import asyncio
    import queue
    import threading

    import obstore

    from pipeline.inputs import netstats
    from pipeline.inputs.tiffheader import HEAD_BYTES, parse_header
    from pipeline.storage import object_store, split_url

    stores: dict[str, Any] = {}
    done: queue.Queue[tuple[str, dict[str, Any] | None]] = queue.Queue()

    async def one(url: str, gate: asyncio.Semaphore) -> None:
        bucket, key = split_url(url)
        header = None
        try:
            async with gate:
                store = stores.get(bucket)
                if store is None:
                    store = stores[bucket] = object_store(f"s3://{bucket}", storage)
                head = bytes(await obstore.get_range_async(store, key, start=0, length=HEAD_BYTES))
                netstats.record_requests(1, len(head))
                header = parse_header(head)
        except Exception:  # noqa: BLE001 - whatever the store says, GDAL's open says it again, as for any file
            header = None
        finally:
            done.put((url, header))

    async def every() -> None:
        gate = asyncio.Semaphore(in_flight)
        await asyncio.gather(*(one(u, gate) for u in urls))

    # A thread of its own: the caller may be inside an event loop (a notebook), where asyncio.run refuses.
    thread = threading.Thread(target=asyncio.run, args=(every(),), daemon=True, name="pipeline-headers")
    thread.start()
    left = set(urls)
    while left:
        try:
            url, header = done.get(timeout=1.0)
        except queue.Empty:
            if thread.is_alive():
                continue
            break  # the loop ended without them (it cannot, short of a bug): GDAL reads what is left
        left.discard(url)
        yield url, header
    thread.join()
    for url in sorted(left):
        yield url, None


def gdal_header(source: str, path: str) -> dict[str, Any]:
    """The header fields as GDAL reads them from ``source`` (a path or a ``/vsi`` path); errors name ``path``."""
    import rasterio
    from rasterio.errors import NotGeoreferencedWarning, RasterioIOError

    try:
        with warnings.catch_warnings():
            # A file without georeferencing is reported below as a skipped input, not as a warning.
            warnings.simplefilter("ignore", NotGeoreferencedWarning)
            ds = rasterio.open(source)
        with ds:
            if ds.crs is None:
                raise TileReadError(path, "has no CRS; assign one (gdal_edit.py -a_srs) or exclude it")
            if ds.transform.is_identity or ds.transform.is_rectilinear is False:
                raise TileReadError(
                    path, "has no usable geotransform (identity or rotated); georeference it or exclude it"
                )
            t = ds.transform
            epsg = ds.crs.to_epsg()
            row = {
                "crs": f"EPSG:{epsg}" if epsg else ds.crs.to_wkt(),
                "a": t.a,
                "b": t.b,
                "c": t.c,
                "d": t.d,
                "e": t.e,
                "f": t.f,
                "width": ds.width,
                "height": ds.height,
                "xmin": ds.bounds.left,
                "ymin": ds.bounds.bottom,
                "xmax": ds.bounds.right,
                "ymax": ds.bounds.top,
                "dtype": ds.dtypes[0],
                "file_nodata": np.nan if ds.nodata is None else float(ds.nodata),
                "block_x": ds.block_shapes[0][1],
                "block_y": ds.block_shapes[0][0],
                "overview_sizes": _overview_sizes(source, len(ds.overviews(1))),
                "tag_date": ds.tags().get("DATE") or ds.tags().get("TIFFTAG_DATETIME"),
            }
    except RasterioIOError as e:
        raise TileReadError(path, f"cannot be opened as a raster: {e}") from e
    return row


def _overview_sizes(source: str, count: int) -> list[int]:
    """Each overview level's (width, height) as the file declares it, flat: [w0, h0, w1, h1, ...]. Read,
    never computed: GDAL's COG driver rounds sizes down (5490 -> 2745 -> 1372), ``gdaladdo`` up, and
    factors need not be powers of two.

    rasterio gives only rounded factors, so the sizes come from GDAL's own band overviews, through
    rasterio's libgdal (one more open of a header GDAL has cached: ~0.3 ms for a local 4-level COG, where
    one rasterio open per level took ~4.3 ms); by rasterio where that library cannot be loaded."""
    if count == 0:
        return []
    sizes = _gdal_overview_sizes(source)
    if sizes is not None and len(sizes) == 2 * count:
        return sizes
    import rasterio

    out: list[int] = []
    for level in range(count):
        with rasterio.open(source, overview_level=level) as ovr:
            out += [ovr.width, ovr.height]
    return out


def _gdal_overview_sizes(source: str) -> list[int] | None:
    """Band 1's overview sizes by GDAL's C API (the calling thread's GDAL options apply), or None."""
    from pipeline.inputs.netstats import gdal_library

    lib = gdal_library()
    if lib is None:
        return None
    handle = lib.GDALOpenEx(source.encode(), GDAL_OF_RASTER, None, None, None)
    if not handle:
        return None
    try:
        band = lib.GDALGetRasterBand(handle, 1)
        out: list[int] = []
        for i in range(lib.GDALGetOverviewCount(band)):
            ovr = lib.GDALGetOverview(band, i)
            out += [lib.GDALGetRasterBandXSize(ovr), lib.GDALGetRasterBandYSize(ovr)]
        return out
    finally:
        lib.GDALClose(handle)


GDAL_OF_RASTER = 0x02
HEADER_OPTIONS = {"CPL_VSIL_CURL_CHUNK_SIZE": "32768", "GDAL_INGESTED_BYTES_AT_OPEN": "32768"}
"""GDAL options for opening a remote header where :func:`fetch_headers` could not parse it (``inputs.gdal_env``
over them): one request of 32 KB, where the reads' 2 MB would fetch 64 times what a COG's header needs."""
