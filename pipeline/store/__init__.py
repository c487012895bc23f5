"""The output store: a Zarr v3 datacube, locally or in a bucket.

:mod:`~pipeline.store.layout` writes the template first (metadata, coordinates, CRS; spelt by
:mod:`~pipeline.store.zarr3` or :mod:`~pipeline.store.zarr2`) and the completion stamp last;
:mod:`~pipeline.store.existing` says what is already at the output path and what ``--overwrite`` may
remove (only a store this pipeline wrote);
:mod:`~pipeline.store.write` puts each chunk or shard as one atomic object and a journal entry per
finished partition (resume); :mod:`~pipeline.store.cube` opens the written cube with xarray.
:mod:`~pipeline.store.record` keeps what each date was built from and compares it with the inputs
(``pipeline update``); :mod:`~pipeline.store.publish` stages an update's chunks where readers do not look
and publishes them in one put of the consolidated ``zarr.json``.

May import :mod:`pipeline.config`, :mod:`pipeline.errors`, :mod:`pipeline.storage` and the plan's
types from :mod:`pipeline.planning`.
"""
