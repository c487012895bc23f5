"""Planning, pure (no I/O): the tile table and the config's grid settings -> partitions of work.

* :mod:`~pipeline.planning.grid`: the target grid, an immutable value object, and its chunk grid;
* :mod:`~pipeline.planning.windows`: tile footprints, overview levels and the source window of each
  (tile, chunk), computed once per distinct geometry;
* :mod:`~pipeline.planning.plan`: chunk jobs packed into partitions (whole shards, bounded bytes), the
  frozen :class:`~pipeline.planning.plan.Plan` every task receives a part of.

May import :mod:`pipeline.errors` and :mod:`pipeline.resample.methods` (the method table); the tile
table's type from :mod:`pipeline.inputs` for annotations only.
"""
