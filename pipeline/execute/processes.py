"""``execution.scheduler: processes``: a pool of worker processes on this machine, no Dask cluster.

Each worker is forked from the fork server (:mod:`pipeline.execute.workers`): a fresh single-threaded
process that imported the worker's stack once, so a worker starts warm in milliseconds, inherits no
driver thread, lock or GDAL state (the server has loaded GDAL but runs no thread and opens no dataset,
so no lock can be held when it forks; forking the driver itself could copy a lock held by zarr's I/O
thread or a GDAL call in flight), and never re-runs the caller's script. Python's forkserver and spawn
starts re-run the parent's ``__main__`` in every child (the reason scripts need an ``if __name__ ==
"__main__"`` guard); these workers are sent everything but the parent's main module, since they run
only :func:`~pipeline.execute.task.run_partition`. A script without that guard therefore works.

The driver hands each idle worker a partition over a pipe and takes back its record, one task at a
time per worker, so the run ends balanced: of the next few partitions (costliest first, as given), the
one whose files the worker read last and the other workers are not reading now
(:func:`_pick`), so each worker opens, maps and judges masks of fewer files. A task that raises is
retried ``execution.retries`` times; a worker that dies (killed, out of memory) takes its task with it:
the task is retried on a fresh worker the same way. Each result carries the worker's peak memory so far.
With each task a worker is told which coordinate maps it holds no task left reads
(:mod:`pipeline.execute.maplife`), and forgets them first.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import logging
import multiprocessing
import os
import signal
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from multiprocessing import connection, forkserver, popen_forkserver, reduction, spawn, util
from multiprocessing.context import ForkServerProcess, set_spawning_popen
from typing import Any

from pipeline.errors import WorkerError
from pipeline.execute.context import TaskContext
from pipeline.execute.maplife import MapLives, forget
from pipeline.execute.task import run_partition
from pipeline.execute.warmup import peak_rss_mb, warm_up

logger = logging.getLogger(__name__)

TASK: Callable[..., dict[str, Any]] = run_partition
"""What a worker runs for each partition (a test may plant an importable stand-in before the run)."""

LOOKAHEAD = 4
"""An idle worker picks among this many of the next partitions (costliest first): enough to keep a
chunk's bands, which cost alike and come together, on the worker that has their files open, few enough
that the costliest still start first."""

RECENT_FILES = 64
"""The files a worker is taken to have open (:data:`pipeline.inputs.read.MAX_OPEN_FILES`)."""

_MAIN_KEYS = ("init_main_from_path", "init_main_from_name")
"""The preparation data's keys that make a child re-run the parent's ``__main__``."""


class _Popen(popen_forkserver.Popen):
    """The standard library's forkserver start, without the parent's main module: the preparation data
    leaves out ``init_main_from_*``, so the child imports only what unpickling its target needs."""

    def _launch(self, process_obj: Any) -> None:
        prep_data = spawn.get_preparation_data(process_obj._name)
        for key in _MAIN_KEYS:
            prep_data.pop(key, None)
        buf = io.BytesIO()
        set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            set_spawning_popen(None)
        self.sentinel, w = forkserver.connect_to_new_process(self._fds)  # type: ignore[attr-defined]
        _parent_w = os.dup(w)  # as the standard library: the child's sentinel of its parent
        self.finalizer = util.Finalize(self, util.close_fds, (_parent_w, self.sentinel))  # type: ignore[attr-defined]
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class _Process(ForkServerProcess):
    @staticmethod
    def _Popen(process_obj: Any) -> Any:  # noqa: N802 - the standard library's name
        return _Popen(process_obj)


def _serve(
    conn: Any, name: str, env: dict[str, str], ctx: TaskContext, crs: tuple[str, ...], task: Callable[..., Any]
) -> None:
    """A worker's life: take the driver's environment as it is now (the fork server's dates from its
    start; the AWS chain and GDAL's options read it), warm up, then run partitions until the driver sends
    None. Ctrl-C is the driver's to handle (it stops the workers), so the worker ignores SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if env != os.environ:
        os.environ.clear()
        os.environ.update(env)
    warm_up(None, ctx, crs, local=True)
    conn.send(("ready", None, None, peak_rss_mb()))
    while True:
        msg = conn.recv()
        if msg is None:
            return
        i, partition, device, reason, dead = msg
        forget(dead)  # the maps no task left reads (:mod:`pipeline.execute.maplife`)
        try:
            rec = task(partition, ctx, device, reason)
            rec["worker"] = name
            conn.send(("done", i, rec, peak_rss_mb()))
        except BaseException as e:  # noqa: BLE001 - every failure goes back to the driver
            try:
                conn.send(("error", i, e, peak_rss_mb()))
            except Exception:  # noqa: BLE001 - an exception that does not pickle goes back as text
                conn.send(("error", i, WorkerError(f"{type(e).__name__}: {e}"), peak_rss_mb()))


class _Worker:
    """One worker process and the driver's end of its pipe."""

    def __init__(self, name: str, ctx: TaskContext, crs: tuple[str, ...]) -> None:
        self.name = name
        self.conn, child = multiprocessing.Pipe()
        self.process = _Process(
            target=_serve, args=(child, name, dict(os.environ), ctx, crs, TASK), name=name, daemon=True
        )
        self.process.start()
        child.close()
        self.task: int | None = None
        self.peak_mb = 0.0
        self.recent: OrderedDict[str, None] = OrderedDict()
        """The files of its latest partitions, newest last (:data:`RECENT_FILES` of them at most)."""

    def ran(self, files: frozenset[str]) -> None:
        for f in files:
            self.recent[f] = None
            self.recent.move_to_end(f)
        while len(self.recent) > RECENT_FILES:
            self.recent.popitem(last=False)

    def stop(self, wait_s: float) -> None:
        with contextlib.suppress(OSError):
            self.conn.send(None)
        self.process.join(wait_s)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(1.0)
        self.conn.close()


def _pick(
    queue: deque[int],
    files_of: Callable[[int], frozenset[str]],
    recent: OrderedDict[str, None],
    others: list[frozenset[str]],
    passed: dict[int, int] | None = None,
) -> int:
    """Take from ``queue`` the partition, of its first :data:`LOOKAHEAD`, that reads most of the files in
    ``recent`` (a worker's latest) less those that other workers are reading now (``others``); the
    earliest among equals. ``passed`` counts how often each partition at the head was passed over: one
    passed over :data:`LOOKAHEAD` times is taken next, so the costliest never drifts to the end of the
    run (a long tail). Task order never changes the output, only what each worker opens again."""
    passed = {} if passed is None else passed
    best, best_score = 0, None
    if passed.get(queue[0], 0) < LOOKAHEAD:
        for k, i in enumerate(itertools.islice(queue, LOOKAHEAD)):  # (not list(queue): O(1) a pick, not O(n))
            mine = files_of(i)
            score = sum(f in recent for f in mine) - sum(len(mine & busy) for busy in others)
            if best_score is None or score > best_score:
                best, best_score = k, score
    if best:
        passed[queue[0]] = passed.get(queue[0], 0) + 1
    picked = queue[best]
    del queue[best]
    return picked


def _receive(w: _Worker) -> Any:
    """The worker's next message, or None where it has gone (its pipe closed)."""
    try:
        return w.conn.recv() if w.conn.poll() else None
    except (EOFError, OSError):
        return None


class ProcessPool:
    """``n`` warm worker processes; :meth:`run` yields task records as they finish."""

    def __init__(self, n: int, ctx: TaskContext, crs: tuple[str, ...]) -> None:
        self.ctx, self.crs = ctx, crs
        self.started = 0
        self.workers: list[_Worker] = []
        self.peak_mb: dict[str, float] = {}
        try:
            for _ in range(n):
                self.workers.append(self._start())
            for w in self.workers:  # each warms up on its own core; wait for all before the clock starts
                self._ready(w)
        except BaseException:
            self.close()
            raise

    def _start(self) -> _Worker:
        w = _Worker(f"process-{self.started}", self.ctx, self.crs)
        self.started += 1
        return w

    def _ready(self, w: _Worker) -> None:
        try:
            kind, _, _, peak = w.conn.recv()
        except EOFError:
            raise WorkerError(f"worker {w.name} exited while starting (exit code {w.process.exitcode})") from None
        w.peak_mb = peak

    def run(self, todo: list[Any], decisions: list[tuple[str, str]], retries: int) -> Iterator[dict[str, Any]]:
        """Run every partition of ``todo`` (in this order) with its (device, reason); yield each record."""
        queue: deque[int] = deque(range(len(todo)))
        tries = [0] * len(todo)
        left = len(todo)

        def again(i: int, error: BaseException) -> None:
            if tries[i] >= retries:
                raise error
            tries[i] += 1
            logger.info("partition %s failed (%s); retry %d", todo[i].key, error, tries[i])
            queue.appendleft(i)

        files: dict[int, frozenset[str]] = {}

        def files_of(i: int) -> frozenset[str]:
            if i not in files:
                files[i] = todo[i].files()
            return files[i]

        passed: dict[int, int] = {}
        lives = MapLives(todo)
        while left:
            for w in self.workers:
                if w.task is None and queue:
                    others = [files_of(o.task) for o in self.workers if o.task is not None]
                    w.task = _pick(queue, files_of, w.recent, others, passed)
                    w.ran(files_of(w.task))
                    dead = lives.sent(w.name, w.task)
                    w.conn.send((w.task, todo[w.task], *decisions[w.task], dead))
            busy = [w for w in self.workers if w.task is not None]
            ready = connection.wait([w.conn for w in busy] + [w.process.sentinel for w in busy])
            for w in busy:
                if w.conn not in ready and w.process.sentinel not in ready:
                    continue
                msg = _receive(w)
                i, w.task = w.task, None
                assert i is not None
                if msg is None:  # the worker is gone, and its task with it
                    w.process.join(5.0)
                    code = w.process.exitcode
                    self._replace(w)
                    again(i, WorkerError(f"worker {w.name} died running partition {todo[i].key} (exit code {code})"))
                    continue
                kind, _, payload, w.peak_mb = msg
                if kind == "done":
                    left -= 1
                    lives.done(i)
                    yield payload
                else:
                    again(i, payload)

    def _replace(self, dead: _Worker) -> None:
        self.peak_mb[dead.name] = dead.peak_mb
        dead.stop(0.0)
        fresh = self._start()
        self._ready(fresh)
        self.workers[self.workers.index(dead)] = fresh

    def close(self) -> dict[str, float]:
        """Stop every worker; each one's peak memory, MB (workers replaced on the way included)."""
        for w in self.workers:
            w.stop(2.0 if w.task is None else 0.0)
            self.peak_mb[w.name] = w.peak_mb
        return dict(self.peak_mb)
