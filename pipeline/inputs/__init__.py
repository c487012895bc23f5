"""Inputs: find the tiles and read them.

* :mod:`~pipeline.inputs.catalog`: paths, globs and bucket listings -> one tile table (path, band, date,
  CRS, transform, shape, dtype, nodata, blocks, overviews), kept as a Parquet index;
* :mod:`~pipeline.inputs.stac`: STAC items (ItemCollection, catalog, stac-geoparquet, an API search)
  -> the same tile table;
* :mod:`~pipeline.inputs.read`: windowed reads of one source window at one overview level, through a
  per-thread dataset cache;
* :mod:`~pipeline.inputs.netstats`: what the reads cost on the network (GDAL's counters, retries).

May import :mod:`pipeline.config`, :mod:`pipeline.errors`, :mod:`pipeline.storage`, and
:mod:`pipeline.planning` for its window types; never execute, store or report.
"""
