"""The fork server's first import, so its workers start warm: rasterio without boto3
(:func:`pipeline.execute.workers.import_rasterio`, ~0.1 s of the server's start, which a short run
waits for), then each library's run-independent first-use set-up
(:func:`pipeline.execute.warmup.warm_libraries`, ~60 ms a worker would otherwise spend). The server is
single-threaded, so no other thread can meet boto3's stand-in; a worker's first ``s3://`` read imports
the real boto3.

Before any of it, NumPy's OpenBLAS is held to no helper threads where nothing set its count
(``OPENBLAS_NUM_THREADS``, read once, when NumPy loads): OpenBLAS starts its helpers as it loads and they
spin ~0.05 s waiting for work before they sleep, on the core the driver's own imports and planning need
while the server imports (the ``pipeline`` command sets it for itself too). Tasks make no BLAS calls,
and each worker is one core; forked workers inherit the server's OpenBLAS. Spawn to the first task of
the case study 0.683 -> 0.608 s (``python bench/startup.py OTHER_TREE configs/casestudy.yaml 16``)."""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from pipeline.execute.workers import import_rasterio  # noqa: E402 - after the BLAS setting

import_rasterio()

from pipeline.execute.warmup import warm_libraries  # noqa: E402 - rasterio first, without boto3

warm_libraries()
