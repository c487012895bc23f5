"""The output store: a Zarr v3 datacube, locally or in a bucket.

:mod:`~pipeline.store.write` writes the template first (metadata, coordinates, CRS), then each chunk or
shard as one atomic put, a journal entry per finished partition (resume), and the completion stamp
last; ``--overwrite`` removes only a store this pipeline wrote.

May import :mod:`pipeline.config`, :mod:`pipeline.errors`, :mod:`pipeline.storage` and the plan's
types from :mod:`pipeline.planning`.
"""
