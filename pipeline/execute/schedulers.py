"""Where a run's tasks execute: on threads in this process, on a pool of worker processes
(:mod:`pipeline.execute.processes`), on a local cluster the run starts, or on an
existing Dask cluster by address; each task's device decided first. Submits the costliest partitions
first, collects records as they complete, retries failed tasks as Dask does, and tells the workers which
coordinate maps no task left reads (:mod:`pipeline.execute.maplife`)."""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.execute.context import TaskContext
from pipeline.execute.device import (
    check_request,
    decide,
    detect_gpu,
    load_profile,
    probe_worker,
    submit_options,
    task_work,
)
from pipeline.execute.maplife import MapLives, forget, tell_cluster
from pipeline.execute.task import run_partition
from pipeline.execute.warmup import peak_rss_mb, warm_up
from pipeline.execute.workers import (
    WORKER_MALLOC,
    main_script_kept_from_workers,
    start_worker_server,
    usable_cores,
    worker_start_method,
)
from pipeline.report.progress import NoProgress
from pipeline.storage import worker_environment

if TYPE_CHECKING:
    from pipeline.config import ExecutionConfig

logger = logging.getLogger(__name__)


def _worker_log_level() -> int:
    """Task errors come back to the driver and are reported there; the local workers' own copies are noise."""
    return logging.WARNING if logger.isEnabledFor(logging.DEBUG) else logging.CRITICAL


def _start_client(execution: ExecutionConfig, n_partitions: int) -> tuple[Any, Any]:
    import dask
    from distributed import Client, LocalCluster

    if execution.address:
        return Client(execution.address, timeout="30s"), None
    start_worker_server()  # idempotent: `local-cluster` runs started it before planning; `auto` starts it here
    n = execution.workers or usable_cores()
    n = max(1, min(n, n_partitions))
    settings: dict[str, Any] = {f"distributed.nanny.pre-spawn-environ.{k}": v for k, v in WORKER_MALLOC.items()}
    # distributed's statistical profiler samples each worker's task thread every 10 ms, holding the GIL
    # (~5% of a worker's CPU here); the report times the stages itself and never reads that profile.
    settings["distributed.worker.profile.enabled"] = False
    # distributed imports the packages it would preload on its first forkserver context (pandas among them,
    # ~0.3 s of the driver): a cost only clusters pay, which auto keeps for jobs where it is small.
    settings["distributed.worker.multiprocessing-method"] = worker_start_method()  # server: run()
    with dask.config.set(settings), main_script_kept_from_workers():
        cluster = LocalCluster(
            n_workers=n,
            threads_per_worker=execution.threads_per_worker,
            processes=True,
            dashboard_address=DASHBOARD_ADDRESS if execution.dashboard else None,
            silence_logs=_worker_log_level(),
            env=worker_environment(),  # the AWS chain as it is now (the fork server's may be older)
        )
    return Client(cluster), cluster


DASHBOARD_ADDRESS = "127.0.0.1:0"
"""Where a local cluster serves Dask's dashboard: a free port, on this machine only (an SSH tunnel reaches it
from elsewhere)."""


def dashboard_link(client: Any) -> str | None:
    """The dashboard's URL of ``client``'s scheduler (its own cluster's, or the one at an address), or None
    where the scheduler serves none (or bokeh is not installed)."""
    try:
        info = client.scheduler_info(n_workers=0)
        if "dashboard" not in (info.get("services") or {}):
            return None
        return str(client.dashboard_link)
    except Exception as e:  # noqa: BLE001 - a link not found costs the link, not the run
        logger.debug("no dashboard link: %s", e)
        return None


def _decide_devices(
    client: Any, execution: ExecutionConfig, todo: list[Any], ctx: TaskContext
) -> list[tuple[str, str]]:
    """Probe the workers' GPUs, calibrate one if needed, and decide each task's device with its reason."""
    gpus = client.run(probe_worker)
    requested = execution.device
    check_request(requested, gpus)
    with_gpu = [addr for addr, g in gpus.items() if g["available"]]
    profile = None
    if with_gpu and requested != "cpu":
        from pipeline.execute.device import DeviceProfile, calibrate_gpu

        profile = load_profile(dict(execution.gpu_profile or {}) or None)
        stale = profile is not None and not execution.gpu_profile and ctx.reducer is not None
        if profile is None or (stale and f"reduce:{ctx.reducer}" not in profile.gpu_mpx_s):  # measured before
            measured = client.run(calibrate_gpu, workers=[with_gpu[0]])[with_gpu[0]]
            profile = DeviceProfile(**{k: v for k, v in measured.items() if k in DeviceProfile.__dataclass_fields__})
    parity = None
    if with_gpu and requested == "auto":
        from pipeline.execute.device import verify_gpu

        parity = client.run(verify_gpu, workers=[with_gpu[0]])[with_gpu[0]]
    reason_none = next(iter({g["reason"] for g in gpus.values()}), "no workers")
    itemsize = {b.name: np.dtype(b.layer_dtype).itemsize for b in ctx.bands}
    return [
        decide(
            requested, bool(with_gpu), reason_none, task_work(p, ctx.resampling, itemsize, ctx.reducer), profile, parity
        )
        for p in todo
    ]


AUTO_THREADS_MAX_MB = 100.0
"""``execution.scheduler: auto`` runs the partitions on threads in the driver up to this many MB of
planned work (bytes to read plus bytes to write, summed over the partitions to do) where the machine's
cores are busy (a load average of at least one per core); above it, on a pool of worker processes
(:mod:`pipeline.execute.processes`). Threads save the pool's start (the fork server's imports and each
worker's warm-up, ~0.6 s on 2 cores); processes share no GIL, which NumPy's short operations hand over
between threads thousands of times a task. Measured with ``BENCH_REPEATS=3 python bench/scheduler.py``
(2 workers on 2 cores shared with other users' jobs, load 2.4-3.6; docs/performance.md), wall over
threads': small (4 MB) processes 1.62x, local cluster 2.89x; casestudy (199 MB) processes 0.75x, local
cluster 1.63x; casestudy-x4 (797 MB) processes 1.01x, local cluster 1.41x. On the line through the small
and case-study points the two meet near 80 MB. A local cluster lost at every size on one machine: auto
picks it only for a GPU, whose device handling lives there."""

AUTO_THREADS_MAX_MB_IDLE = 16.0
"""The same bound where the cores are free (a load average under one per core): the fork server's
imports then take a core that would idle while the driver plans. Measured with ``BENCH_CONFIGS=
configs/small.yaml,configs/mixed.yaml,configs/casestudy.yaml BENCH_SCHEDULERS=threads,processes
BENCH_REPEATS=5 python bench/scheduler.py`` (load 1.3-1.8 on 2 cores), processes' wall over threads':
small (6 MB) 1.04x, mixed (57 MB) 0.86x, casestudy (266 MB) 0.94x; the line through the first two
crosses 1 near 17 MB."""


def auto_threads_max_mb(load: float | None, cores: int) -> tuple[float, str]:
    """(the bound, why) for a machine of ``cores`` at a 1-minute ``load`` average (None: unknown, taken
    as busy)."""
    if load is not None and load < cores:
        return AUTO_THREADS_MAX_MB_IDLE, f"cores free: load {load:.1f} on {cores}"
    return AUTO_THREADS_MAX_MB, "cores busy: load " + (f"{load:.1f} on {cores}" if load is not None else "unknown")


def _machine_load() -> tuple[float | None, int]:
    """The 1-minute load average (None where the system gives none) and the cores."""
    try:
        load: float | None = os.getloadavg()[0]
    except (OSError, AttributeError):
        load = None
    return load, usable_cores()


def choose_scheduler(execution: ExecutionConfig, todo: list[Any], given: Any = None) -> tuple[str, str]:
    """(scheduler, reason): ``threads``, ``processes``, ``local-cluster``, the configured address or the
    caller's client's scheduler, and why."""
    chosen = execution.scheduler
    if given is not None:
        return str(given.scheduler.address), "the caller's distributed.Client was given"
    if execution.address:
        return execution.address, "an existing Dask scheduler was given"
    if chosen != "auto":
        return chosen, f"execution.scheduler is {chosen}"
    if execution.device == "gpu":
        return "local-cluster", "auto: GPU runs use a local cluster's worker processes"
    if execution.device == "auto" and detect_gpu().available:
        return "local-cluster", "auto: a GPU is present; GPU runs use a local cluster's worker processes"
    work_mb = sum(p.cost_bytes for p in todo) / 1e6
    bound, why = auto_threads_max_mb(*_machine_load())
    if work_mb <= bound:
        return "threads", f"auto: {work_mb:.0f} MB of planned work <= {bound:.0f} MB ({why}): threads"
    return (
        "processes",
        f"auto: {work_mb:.0f} MB of planned work > {bound:.0f} MB ({why}): worker processes (no GIL shared)",
    )


def _name_thread(ids: Iterator[int]) -> None:
    """Name a pool thread ``thread-N``: the report's worker name for the tasks it runs."""
    threading.current_thread().name = f"thread-{next(ids)}"


class _InProcess:
    """``client.run`` for the threads scheduler: the function runs once, here, for the one "worker"
    that is this process (what :func:`_decide_devices` asks each worker)."""

    def run(self, fn: Any, *args: Any, workers: list[str] | None = None) -> dict[str, Any]:
        return {"threads": fn(*args)}


def _run_on_thread(p: Any, ctx: TaskContext, device: str, reason: str) -> dict[str, Any]:
    rec = run_partition(p, ctx, device, reason)
    rec["worker"] = threading.current_thread().name
    return rec


def _execute_threads(
    execution: ExecutionConfig, todo: list[Any], ctx: TaskContext, progress: NoProgress, crs: tuple[str, ...]
) -> tuple[list[dict[str, Any]], float, int, list[str], dict[str, float]]:
    """The partitions on a thread pool in this process: no cluster, no pickling. The kernels, GDAL's
    decoding and the codecs release the GIL. Failed tasks are retried ``execution.retries`` times,
    as Dask retries them."""
    import queue
    from concurrent.futures import Future, ThreadPoolExecutor

    n = (execution.workers or usable_cores()) * execution.threads_per_worker
    n = max(1, min(n, len(todo)))
    warm_up(None, ctx, crs)  # (this process is the caller's: its allocator is left as it is)
    decisions = _decide_devices(_InProcess(), execution, todo, ctx)
    records: list[dict[str, Any]] = []
    names = [f"thread-{i}" for i in range(n)]
    t_exec = time.perf_counter()
    # Finished futures arrive on a queue, not through concurrent.futures.wait: wait() takes every pending
    # future's lock in a loop, and Ctrl-C landing inside that loop left some taken for good, so the pool's
    # shutdown waited forever on a thread blocked on one of them.
    finished: queue.SimpleQueue[Future[dict[str, Any]]] = queue.SimpleQueue()
    pool = ThreadPoolExecutor(n, initializer=_name_thread, initargs=(itertools.count(),))
    with pool:
        attempts: dict[Future[dict[str, Any]], tuple[int, int]] = {}

        def submit(i: int, tries: int) -> None:
            device, reason = decisions[i]
            fut = pool.submit(_run_on_thread, todo[i], ctx, device, reason)
            attempts[fut] = (i, tries)
            fut.add_done_callback(finished.put)

        try:
            for i in range(len(todo)):
                submit(i, 0)
            lives = MapLives(todo)  # (while the first tasks run)
            while attempts:
                fut = finished.get()
                i, tries = attempts.pop(fut)
                error = fut.exception()
                if error is None:
                    records.append(fut.result())
                    forget(lives.dead(i))  # the threads' one cache: the maps no task left reads
                    progress.task_done(records[-1])
                elif tries < execution.retries:
                    logger.info("partition %s failed (%s); retry %d", todo[i].key, error, tries + 1)
                    submit(i, tries + 1)
                else:
                    raise error
        except BaseException:
            for fut in list(attempts):
                fut.cancel()
            raise
    exec_wall = time.perf_counter() - t_exec
    peak = peak_rss_mb()
    return records, exec_wall, n, names, {name: peak for name in names}


def _execute_processes(
    execution: ExecutionConfig, todo: list[Any], ctx: TaskContext, progress: NoProgress, crs: tuple[str, ...]
) -> tuple[list[dict[str, Any]], float, int, list[str], dict[str, float]]:
    """The partitions on a pool of worker processes forked from the fork server
    (:mod:`pipeline.execute.processes`): no cluster, no GIL shared between tasks. Failed tasks, and tasks
    whose worker died, are retried ``execution.retries`` times."""
    from pipeline.execute.processes import ProcessPool
    from pipeline.execute.workers import start_fork_server

    n = (execution.workers or usable_cores()) * execution.threads_per_worker
    n = max(1, min(n, len(todo)))
    decisions = _decide_devices(_InProcess(), execution, todo, ctx)
    start_fork_server()  # idempotent: a `processes` run started it before planning
    records: list[dict[str, Any]] = []
    pool = ProcessPool(n, ctx, crs)
    try:
        names = [w.name for w in pool.workers]
        t_exec = time.perf_counter()
        for rec in pool.run(todo, decisions, execution.retries):
            records.append(rec)
            progress.task_done(rec)
        exec_wall = time.perf_counter() - t_exec
    finally:
        peaks = pool.close()
    names += sorted(set(peaks) - set(names))  # workers that replaced a dead one
    return records, exec_wall, n, names, peaks


EXECUTORS: dict[str, Callable[..., tuple[list[dict[str, Any]], float, int, list[str], dict[str, float]]]] = {
    "threads": _execute_threads,
    "processes": _execute_processes,
}
"""The executors that run on this machine without Dask, by their name in
:data:`pipeline.execute.executors.SCHEDULERS`: each takes ``(execution, todo, ctx, progress, crs)`` and returns
(records, wall, threads, worker names, each worker's peak MB). ``local-cluster`` and a scheduler's address
go through Dask (:func:`execute_tasks`); ``auto`` is :func:`choose_scheduler`'s rule."""


def threads_available(execution: ExecutionConfig, threads: int) -> int:
    """The worker threads ``execution`` asked for: local runs start no more than they have partitions."""
    if execution.address:
        return threads
    return max(threads, (execution.workers or usable_cores()) * execution.threads_per_worker)


def machine_mb() -> float:
    """This machine's physical memory, MB (0 where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e6
    except (ValueError, OSError, AttributeError):
        return 0.0


def execute_tasks(
    execution: ExecutionConfig,
    todo: list[Any],
    ctx: TaskContext,
    progress: NoProgress,
    crs: tuple[str, ...],
    given: Any = None,
) -> tuple[list[dict[str, Any]], float, int, list[str], dict[str, Any]]:
    """Submit every partition, then collect results as they finish: (records, wall, threads, workers,
    info), ``info`` holding the scheduler used, why, and each worker's peak memory (MB).

    ``crs``: the tiles' CRSs, set up on every worker before the first task. ``given``: the caller's
    ``distributed.Client``, used as it is and left open. ``progress`` is told each task's record as it
    arrives (:meth:`~pipeline.report.progress.NoProgress.task_done`), and the dashboard's link."""
    scheduler, why = choose_scheduler(execution, todo, given)
    logger.info("scheduler: %s (%s)", scheduler, why)
    info: dict[str, Any] = {"scheduler": scheduler, "reason": why}
    if scheduler in EXECUTORS:
        execute = EXECUTORS[scheduler]
        done, exec_wall, threads, names, info["worker_peak_mb"] = execute(execution, todo, ctx, progress, crs)
        info["worker_limit_mb"] = {name: machine_mb() for name in names}  # this machine's memory
        return done, exec_wall, threads, names, info

    from distributed import as_completed

    records: list[dict[str, Any]] = []
    client, cluster = (given, None) if given is not None else _start_client(execution, len(todo))
    stopped = interrupted = False
    try:
        if execution.dashboard and (link := dashboard_link(client)):
            info["dashboard"] = link
            progress.note(f"dashboard: {link}")
        info_workers = client.scheduler_info(n_workers=-1)["workers"]
        worker_names = [str(w.get("name", a)) for a, w in info_workers.items()]
        threads = sum(int(w.get("nthreads", 1)) for w in info_workers.values()) or 1
        local = not execution.address and given is None
        client.run(warm_up, _worker_log_level() if local else None, ctx, crs, local)
        decisions = _decide_devices(client, execution, todo, ctx)
        gpu_resources = any("GPU" in (w.get("resources") or {}) for w in info_workers.values())
        t_exec = time.perf_counter()
        futures: list[Any] = []
        try:  # Ctrl-C while submitting (slow on a loaded machine) stops the run as during the tasks
            for p, (device, reason) in zip(todo, decisions, strict=True):
                futures.append(
                    client.submit(
                        run_partition,
                        p,
                        ctx,
                        device,
                        reason,
                        key=p.key,
                        retries=execution.retries,
                        pure=False,
                        **submit_options(device, gpu_resources),
                    )
                )
            lives, index = MapLives(todo), {p.key: i for i, p in enumerate(todo)}  # (while the first tasks run)
            for _, rec in as_completed(futures, with_results=True):
                records.append(rec)
                if dead := lives.dead(index[rec["id"]]):  # every worker forgets the maps no task left reads
                    tell_cluster(client, dead)
                progress.task_done(rec)
        except KeyboardInterrupt:
            stopped = interrupted = True
            client.cancel(futures)
            raise
        except BaseException:
            stopped = True
            client.cancel(futures)
            raise
        exec_wall = time.perf_counter() - t_exec
        try:
            peaks = client.run(peak_rss_mb)
            info["worker_peak_mb"] = {str(info_workers.get(a, {}).get("name", a)): mb for a, mb in peaks.items()}
            info["worker_limit_mb"] = {
                str(w.get("name", a)): float(w.get("memory_limit") or 0) / 1e6
                for a, w in info_workers.items()
                if w.get("memory_limit")
            }
        except Exception as e:  # noqa: BLE001 - a worker gone at the end costs the figure, not the run
            logger.info("worker memory not collected: %s", e)
            info["worker_peak_mb"] = {}
    finally:
        with _teardown_quiet(keep=interrupted) if stopped else contextlib.nullcontext():
            if given is None:
                client.close()
            if cluster is not None:
                cluster.close()
    return records, exec_wall, threads, worker_names, info


@contextlib.contextmanager
def _teardown_quiet(keep: bool = False) -> Iterator[None]:
    """While a stopped run (Ctrl-C, a failed task) closes its client and cluster, distributed's own log
    lines about the results that closing drops (``lost already computed task(s)``, a closed comm) are
    expected and say nothing to act on: its loggers are held above CRITICAL until the cluster is closed.
    ``keep``: after Ctrl-C they stay there, as the scheduler's loop may still log a closed comm after
    ``close`` returns, under the one line that says how to resume."""
    names = ["distributed"] + [
        n
        for n, lg in list(logging.root.manager.loggerDict.items())
        if n.startswith("distributed.") and isinstance(lg, logging.Logger) and lg.level != logging.NOTSET
    ]
    levels = {n: logging.getLogger(n).level for n in names}
    for n in names:
        logging.getLogger(n).setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        if not keep:
            for n, level in levels.items():
                logging.getLogger(n).setLevel(level)
