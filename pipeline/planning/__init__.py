"""Planning, pure (no I/O): the tile table and the config's grid settings -> partitions of work.

* :mod:`~pipeline.planning.grid`: the target grid, an immutable value object, and its chunk grid;
* :mod:`~pipeline.planning.windows`: tile footprints, overview levels and the source window of each
  (tile, chunk), computed once per distinct geometry;
* :mod:`~pipeline.planning.planner`: the planning itself, tiles -> chunk jobs -> partitions;
* :mod:`~pipeline.planning.packing`: chunk jobs packed into partitions (whole shards, bounded bytes);
* :mod:`~pipeline.planning.plan`: the frozen :class:`~pipeline.planning.plan.Plan` the planner returns;
* :mod:`~pipeline.planning.jobs`: what every task receives a part of: a
  :class:`~pipeline.planning.jobs.Partition` of chunk jobs and their source windows.

May import :mod:`pipeline.errors` and :mod:`pipeline.resample.methods` (the method table); the tile
table's type from :mod:`pipeline.inputs` for annotations only.
"""
