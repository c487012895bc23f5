"""Execution: the wiring from a config to a finished cube, and the one task that does the work.

* :mod:`~pipeline.execute.runner`: index -> plan -> store template -> tasks -> finalize -> report;
* :mod:`~pipeline.execute.schedulers`: where the tasks run (threads in this process, a local cluster,
  or a cluster by address), costliest first, with retries;
* :mod:`~pipeline.execute.task`: one partition: read, resample, fuse and write each of its chunks;
* :mod:`~pipeline.execute.device`: which device resamples each task and why (GPU detection, parity
  check, cost model);
* :mod:`~pipeline.execute.workers`: how the local cluster's worker processes start.

Imports the stages; nothing but :mod:`pipeline.api`, :mod:`pipeline.cli` and the tools imports it.
"""
