"""The diagnostics' checks, one module per thing they judge; :func:`pipeline.report.diagnostics.compute_diagnostics`
runs them in the report's order.

* :mod:`~pipeline.report.checks.distribution`: how the work spread over workers and partitions
  (``workers_used``, ``long_tail``, ``blocking``, ``partition_size``, ``idle_workers``; stragglers);
* :mod:`~pipeline.report.checks.fixed_costs`: fixed costs per task and per chunk (``task_overhead``,
  ``task_args_size``, ``chunk_size``) and the chunk size to advise;
* :mod:`~pipeline.report.checks.io_network`: I/O against compute, bytes read per byte written, and
  storage and the network (``object_size``, ``overviews``, ``io_vs_compute``, ``read_amplification``):
  a new check of object storage or remote reads goes here;
* :mod:`~pipeline.report.checks.valid_pixels`: which pixels count as data (``nodata``, and the mask's
  and composite's ``clear_observations``);
* :mod:`~pipeline.report.checks.memory_gpu`: workers' memory and the GPU (``worker_memory``, ``gpu_ran``,
  ``gpu_windows``);
* :mod:`~pipeline.report.checks.entry`: one check's entry and the rounding of a suggested setting.

A check warns only with evidence enough to judge (its MIN_* thresholds); every threshold is a constant in
its group's module with the measurement it comes from.
"""
