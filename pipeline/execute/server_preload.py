"""The fork server's first import, so its workers start warm: rasterio without boto3
(:func:`pipeline.execute.workers.import_rasterio`, ~0.1 s of the server's start, which a short run
waits for), then each library's run-independent first-use set-up
(:func:`pipeline.execute.task.warm_libraries`, ~60 ms a worker would otherwise spend), and, where
``PIPELINE_COMPILED=1`` turns them on, numba and the compiled kernels loaded from their cache
(:func:`pipeline.resample.compiled.compile_all`, ~0.5 s once instead of in every worker's first task). The server is
single-threaded, so no other thread can meet boto3's stand-in; a worker's first ``s3://`` read imports
the real boto3."""

from pipeline.execute.workers import import_rasterio

import_rasterio()

from pipeline.execute.task import warm_libraries  # noqa: E402 - rasterio first, without boto3

warm_libraries()

from pipeline.resample import compiled  # noqa: E402

if compiled.available():
    try:
        compiled.compile_all()
    except Exception as e:  # noqa: BLE001 - a broken numba must not take the server (and the run) down
        import logging
        import os

        logging.getLogger("pipeline").warning(
            "compiled kernels failed to load (%s: %s); this run's workers use the NumPy kernels", type(e).__name__, e
        )
        os.environ["PIPELINE_COMPILED"] = "0"  # the workers forked from here
        compiled.kernels.cache_clear()
