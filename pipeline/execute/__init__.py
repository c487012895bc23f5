"""Execution: the wiring from a config to a finished cube, and the one task that does the work.

* :mod:`~pipeline.execute.runner`: index -> plan -> store template -> tasks -> finalize -> report;
* :mod:`~pipeline.execute.prepare`: the run's catalog, plan, store and task context, each stage handed its
  sections of the config (the runner and it are the only modules here that hold the whole config);
* :mod:`~pipeline.execute.schedulers`: where the tasks run (threads in this process, a pool of worker
  processes, a local cluster, or a cluster by address) and ``auto``'s rule, costliest first, with retries;
* :mod:`~pipeline.execute.processes`: the pool of worker processes (no Dask);
* :mod:`~pipeline.execute.chunkcost`: this machine's fixed cost per chunk, measured once and cached;
* :mod:`~pipeline.execute.task`: one partition: read, resample, fuse and write each of its chunks;
* :mod:`~pipeline.execute.device`: which device resamples each task and why (GPU detection, parity
  check, cost model);
* :mod:`~pipeline.execute.workers`: how the pool's and the local cluster's worker processes start
  (:mod:`~pipeline.execute.server_preload`: what the fork server loads before it forks).

Imports the stages; nothing but :mod:`pipeline.api`, :mod:`pipeline.cli` and the tools imports it.
"""
