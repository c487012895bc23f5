"""The fork server's first import, so its workers start warm: rasterio without boto3
(:func:`pipeline.execute.workers.import_rasterio`, ~0.1 s of the server's start, which a short run
waits for), then each library's run-independent first-use set-up
(:func:`pipeline.execute.task.warm_libraries`, ~60 ms a worker would otherwise spend). The server is
single-threaded, so no other thread can meet boto3's stand-in; a worker's first ``s3://`` read imports
the real boto3."""

from pipeline.execute.workers import import_rasterio

import_rasterio()

from pipeline.execute.task import warm_libraries  # noqa: E402 - rasterio first, without boto3

warm_libraries()
