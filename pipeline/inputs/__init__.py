"""Inputs: find the tiles and read them.

* sources: :mod:`~pipeline.inputs.files` (paths, globs and bucket listings; headers kept in a Parquet
  index, :mod:`~pipeline.inputs.index`) and :mod:`~pipeline.inputs.stac` (ItemCollection, catalog, an API
  search; stac-geoparquet through :mod:`~pipeline.inputs.stac_parquet`; the STAC rules in
  :mod:`~pipeline.inputs.stac_fields`), each reading file headers with :mod:`~pipeline.inputs.headers`;
* :mod:`~pipeline.inputs.catalog`: the one builder that finishes any source's rows into the tile table
  (:mod:`~pipeline.inputs.tiles`: path, band, date, CRS, transform, shape, dtype, nodata and where it came
  from, blocks, overview sizes). Sources never import each other;
* :mod:`~pipeline.inputs.read`: windowed reads of one source window at one overview level, through a
  per-thread dataset cache;
* :mod:`~pipeline.inputs.netstats`: what the reads cost on the network (GDAL's counters, retries).

May import :mod:`pipeline.config`, :mod:`pipeline.errors`, :mod:`pipeline.storage`, and
:mod:`pipeline.planning` for its window types; never execute, store or report.
"""
