"""How the processes the pipeline owns start: the local cluster's workers, and the ``pipeline run``
command's own (imports nothing heavy, so the CLI can call it first).

On Linux they are forked from a *fork server*: a fresh, single-threaded process that imports the
worker's stack once (numpy, rasterio, zarr, distributed, the task code). :func:`start_worker_server`
starts it at the beginning of a run, so those imports happen on another core while the driver
imports and plans; the workers are then forked from it in milliseconds, already warm.

Why not spawn (Dask's default): a spawned worker is a fresh interpreter that imports the whole
stack again; on the case study, start, warm-up and shutdown cost 2.5 s of a ~9 s run. Why not fork
the driver itself: the driver has threads (the cluster's event loop, zarr's I/O loop, Dask's
offload pool), and a forked child inherits their locks and executors without the threads that
serve them. A second cluster in one process hung that way in the test suite. The fork server has no
such threads, and it never touches CUDA, so GPU workers can be forked from it too.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import multiprocessing
import os
import sys
import types
from collections.abc import Iterator
from typing import Any

WORKER_PRELOAD = (
    "pipeline.execute.server_preload",
    "numpy",
    "zstandard",
    "rasterio",
    "rasterio.warp",
    "distributed",
    "pipeline.execute.task",
    "pipeline.execute.worker_signals",
)
"""Modules the fork server imports once for every worker (the first imports rasterio without boto3 and
warms the libraries up, :mod:`pipeline.execute.server_preload`; the last makes its workers leave Ctrl-C
to the driver). Not zarr-python: workers write chunks themselves
(:class:`pipeline.store.write.StoreWriter`) and import it only for a codec chain they cannot run directly."""

WORKER_MALLOC = {"MALLOC_TRIM_THRESHOLD_": 64 << 20, "MALLOC_MMAP_THRESHOLD_": 16 << 20}
"""glibc's allocator settings for local workers: heap-allocate below 16 MiB, trim above 64 MiB.
Kernels make many array temporaries of a few hundred KiB per row block. With glibc's defaults (or
Dask's nanny's MALLOC_TRIM_THRESHOLD_=65536, which also freezes the mmap threshold at 128 KiB) each
is a fresh mmap or a trimmed heap top and page-faults on first touch: the cross-CRS average kernel
ran 8x slower per call that way, and resampling 3.3x slower in a run (measured; README,
Performance). Spawned workers get them as environment variables; forked ones through
:func:`tune_malloc`, since glibc reads its environment only when a process starts."""

WORKER_GDAL_CACHE_MB = 16
"""GDAL's block cache in local workers, MB (GDAL's default is 5% of the machine's memory: 1.2 GB on a 24 GB
machine, and a worker's cache grew past 120 MB on the cloudy composite). A task reads each window once
(mask windows are kept judged, :mod:`pipeline.execute.masks`), so the cache serves only the blocks that
neighbouring windows share. Against 32 MB (``python bench/memory_trees.py 5 a=TREE b=TREE:GDAL_CACHEMAX=16
...``, interleaved runs, medians): the cloudy composite's tree PSS 656 -> 621 MB at 1.016x the wall, the
case study's 498 -> 469 MB at 0.970x; 8 MB took the case study 1.099x the wall (its read stage 1.25 ->
1.54 task-seconds). A ``GDAL_CACHEMAX`` in the environment is left to rule; remote reads use the same cache
(their bytes are cached apart, by ``CPL_VSIL_CURL_CACHE_SIZE``: :data:`pipeline.storage.gdal.CLOUD_DEFAULTS`)."""

_MALLOPT = {"MALLOC_TRIM_THRESHOLD_": -1, "MALLOC_MMAP_THRESHOLD_": -3}
"""glibc's mallopt() parameter numbers (M_TRIM_THRESHOLD, M_MMAP_THRESHOLD)."""


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity: ``taskset``, a container's CPU set; not a CPU
    quota, which leaves the affinity as it is), which the machine's count overstates where the process
    is pinned; how many workers ``auto`` starts."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def tune_malloc() -> bool:
    """Apply :data:`WORKER_MALLOC` to this process now (glibc only; False where it cannot)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    return all(mallopt(_MALLOPT[k], v) == 1 for k, v in WORKER_MALLOC.items())


def trim_malloc() -> bool:
    """Hand the allocator's free pages back to the system (glibc's ``malloc_trim(0)``, which returns free
    pages anywhere in its heaps, not only at their top as its trim threshold does): after a worker forgets
    maps it will not use again (:mod:`pipeline.execute.maplife`), whose pages the heap would otherwise keep.
    False where it cannot (not glibc)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        return bool(ctypes.CDLL(None).malloc_trim(0))
    except (OSError, AttributeError):
        return False


def bound_gdal_cache() -> int | None:
    """Bound GDAL's block cache in this process: to ``GDAL_CACHEMAX`` where the environment sets it (MB,
    or bytes from 100000 up, as GDAL reads it; a percentage is left to GDAL), else to
    :data:`WORKER_GDAL_CACHE_MB`. Set now, not read from the environment when GDAL first caches a block: a
    forked worker's GDAL did that in the fork server, under the server's environment. The bound in bytes,
    or None where it was left as it is. Blocks cached beyond a new bound are flushed as they go."""
    value = os.environ.get("GDAL_CACHEMAX", str(WORKER_GDAL_CACHE_MB)).strip()
    try:
        number = int(value)
    except ValueError:
        return None
    from rasterio.env import set_gdal_config

    bound = number << 20 if number < 100_000 else number
    set_gdal_config("GDAL_CACHEMAX", bound)  # an int: rasterio sets it in bytes
    return bound


_CONFIG_ENV = "DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD"


def worker_start_method(configured: str | None = None) -> str:
    """``forkserver`` on Linux unless Dask is configured to another method than its default ``spawn``;
    elsewhere Dask's method. ``configured``: Dask's setting (read from its config when None)."""
    if configured is None:
        import dask

        configured = str(dask.config.get("distributed.worker.multiprocessing-method", "spawn"))
    if configured != "spawn" or not sys.platform.startswith("linux"):
        return configured
    return "forkserver"


PROCESS_PRELOAD = (
    *(m for m in WORKER_PRELOAD if m != "distributed"),
    "pipeline.execute.processes",
)
"""What the fork server imports for ``execution.scheduler: processes``, whose workers never import Dask: the
worker's stack and the pool's own module. Not pydantic: a task's context carries its storage settings as
plain values (:class:`pipeline.storage.StorageSettings`)."""


def start_fork_server(preload: tuple[str, ...] = PROCESS_PRELOAD) -> None:
    """Start the fork server now (idempotent; one per process: a running one keeps its own preload)."""
    from multiprocessing import forkserver

    multiprocessing.get_context("forkserver").set_forkserver_preload(list(preload))
    forkserver.ensure_running()


def start_worker_server() -> None:
    """Start the fork server now (idempotent), with the cluster worker's stack to import, where it will be used."""
    if worker_start_method(os.environ.get(_CONFIG_ENV, "spawn")) != "forkserver":
        return
    start_fork_server(preload=WORKER_PRELOAD)


class _Boto3OnDemand(types.ModuleType):
    """Stands for boto3 in ``rasterio.session``, which imports it when rasterio is imported but uses it
    only to make the AWS session of a remote read: the real boto3 is imported on first use."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # module dunders (``__path__``, ``__spec__``...): not a package stand-in
            raise AttributeError(name)
        import importlib

        return getattr(importlib.import_module("boto3"), name)


def import_rasterio(lazily: bool = False) -> None:
    """Import rasterio without boto3 (with botocore and s3transfer, ~0.2 s of a short run's start), which
    it imports up front for the AWS sessions of ``s3://`` reads: where neither is imported yet, boto3 is
    held by a stand-in while rasterio imports and then imported on rasterio's first use of it, in the
    import system's usual thread-safe way. Another thread importing boto3 during those ~0.1 s gets the
    stand-in, which works for attributes but not for ``import boto3.x``: so only the ``pipeline run``
    command calls this, first thing, in its own process (:func:`pipeline.run` from Python leaves a
    caller's modules alone), and the fork server.

    ``lazily``: not now, but whenever this process first imports rasterio, whichever code asks for it (a
    finder placed first on ``sys.meta_path`` until then). A driver whose tasks run in worker processes
    never does (planning needs pyproj, not GDAL), and so does not load GDAL at all (~0.17 s)."""
    if "rasterio" in sys.modules or "boto3" in sys.modules:
        return
    if lazily:
        if not any(isinstance(f, _RasterioWithoutBoto3) for f in sys.meta_path):
            sys.meta_path.insert(0, _RasterioWithoutBoto3())
        return
    with _boto3_held():
        import rasterio  # noqa: F401


@contextlib.contextmanager
def _boto3_held() -> Iterator[None]:
    """boto3's stand-in in ``sys.modules`` for the block, where boto3 is installed and not imported yet."""
    import importlib.util

    stand_in = None
    if "boto3" not in sys.modules and importlib.util.find_spec("boto3") is not None:
        stand_in = sys.modules["boto3"] = _Boto3OnDemand("boto3")
    try:
        yield
    finally:
        if stand_in is not None and sys.modules.get("boto3") is stand_in:
            del sys.modules["boto3"]


class _RasterioWithoutBoto3(importlib.abc.MetaPathFinder):
    """Finds rasterio, the first time it is imported, with a loader that holds boto3's stand-in while the
    package runs (:func:`import_rasterio`); then leaves ``sys.meta_path``."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "rasterio":
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _LoaderWithoutBoto3(spec.loader)
        return spec


class _LoaderWithoutBoto3(importlib.abc.Loader):
    """A package's loader, run with boto3's stand-in held."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        module.__loader__ = module.__spec__.loader = self.loader  # (the package sees its own loader)
        with _boto3_held():
            self.loader.exec_module(module)


@contextlib.contextmanager
def main_script_kept_from_workers() -> Iterator[None]:
    """While the run's own worker processes start, keep them from re-running the caller's script.

    Python's ``spawn`` and ``forkserver`` start methods run the main script again in every child (as
    ``__mp_main__``), which is why scripts that start processes need ``if __name__ == "__main__":``.
    The run's workers need nothing from that script (their tasks are this package's functions), so
    where the main module is a script run by path, its path is withheld from multiprocessing's
    preparation data for these starts (``__main__.__file__`` is put back on leaving): a plain script
    that calls :func:`pipeline.run` works without the guard. ``python -m module`` mains are left alone:
    multiprocessing imports them by name and only a guard keeps them from running again."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or path is None or getattr(main, "__spec__", None) is not None:
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path
