"""Reading ahead: a task's windows read on a pool of I/O threads, many at once, while the task resamples.

A worker that reads one window at a time waits one round trip per read; from a bucket 25 ms away that
is most of a run. A task hands :class:`Prefetch` the windows it will read, in the order it will ask
for them; the pool reads them ahead (:func:`pipeline.inputs.read.read_window` on each: GDAL's reads
release the GIL, and a window's blocks are fetched together), holding at most ``max_bytes`` of pixels
read or being read, and the task takes each as it comes to it. What it takes is what
``read_window`` returns, errors included, so the output does not depend on the number in flight.

The pool belongs to the process (one per size, made on first use) and its threads keep their GDAL
environments; the task thread stays the one that resamples and writes.

A worker that already holds its next task reads that one's windows ahead too (:meth:`Prefetch.early`,
from the process pool's worker, :mod:`pipeline.execute.processes`): once the running task has all of its
own reads under way, the next task's start, in their order, within what the running one leaves of the
same ``max_bytes``; the next task's :class:`Prefetch`, made with the same windows, takes them over. So a
task does not begin with a round trip and the files' opens while the worker's I/O threads wait.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

import numpy as np

from pipeline.inputs.read import read_window
from pipeline.planning.jobs import SourceWindow

_pools: dict[int, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def io_pool(threads: int) -> ThreadPoolExecutor:
    """This process's pool of ``threads`` I/O threads (made once per size, kept)."""
    with _pools_lock:
        pool = _pools.get(threads)
        if pool is None:
            pool = _pools[threads] = ThreadPoolExecutor(threads, thread_name_prefix="pipeline-io")
        return pool


def _timed_read(src: SourceWindow) -> tuple[np.ndarray, float]:
    t0 = time.perf_counter()
    data = read_window(src)
    return data, time.perf_counter() - t0


def _key(src: SourceWindow) -> tuple[Any, ...]:
    return (src.path, src.overview_level, src.window, src.band_index)


_lock = threading.RLock()
"""Guards the running task's read-ahead and the next one's (:data:`_running`, :data:`_early`): the task
thread takes and skips, a worker's message thread starts the next task's."""
_running: list[Prefetch | None] = [None]
_early: list[Prefetch | None] = [None]


class Prefetch:
    """The windows of one task, read ahead on ``threads`` I/O threads, at most ``max_bytes`` of pixels held
    (one window is always let through, whatever its size). ``threads`` below 2: no read-ahead, each window
    read when it is taken, on the task's thread. Where the next task's windows were read ahead
    (:meth:`early`) and are these, in this order, this one takes them over."""

    @staticmethod
    def ahead(threads: int) -> bool:
        """Whether ``threads`` read ahead at all (the caller need not list the windows otherwise)."""
        return threads >= 2

    def __init__(
        self,
        sources: Iterable[SourceWindow],
        threads: int,
        max_bytes: int,
        nbytes: Callable[[SourceWindow], int],
        *,
        _next: bool = False,
    ) -> None:
        self.threads = threads
        self.max_bytes = max_bytes
        self._nbytes = nbytes
        self._pool = io_pool(threads) if self.ahead(threads) else None
        self._todo: deque[SourceWindow] = deque(sources) if self._pool is not None else deque()
        self._ready: dict[tuple[Any, ...], deque[tuple[Future[tuple[np.ndarray, float]], int]]] = {}
        self._order = [_key(src) for src in self._todo] if _next else []
        """The windows of an early read-ahead, in order: what a task must read to take it over."""
        self._held = 0
        self._next = _next
        """Read ahead for the task after the running one (not taken from yet)."""
        self.peak_bytes = 0
        """The most bytes held or being read at once."""
        self.reads = 0
        self.io_s = 0.0
        """Seconds the I/O threads spent on the windows taken (reading ahead: overlapped with the task)."""
        self.adopted = 0
        """Windows this task found read or under way before it began (:meth:`early`)."""
        stale = None
        with _lock:
            if _next:
                stale, _early[0] = _early[0], self
            else:
                stale, _early[0] = _early[0], None
                if stale is not None and self._takes_over(stale):
                    stale = None
                _running[0] = self
            self._fill()
        if stale is not None:
            stale.close()

    @classmethod
    def early(
        cls, sources: Iterable[SourceWindow], threads: int, max_bytes: int, nbytes: Callable[[SourceWindow], int]
    ) -> Prefetch | None:
        """Start reading the next task's windows (in the order it will take them) behind the running task's
        (None where ``threads`` read nothing ahead). The next :class:`Prefetch` made with these windows
        takes them over; another one cancels them."""
        if not cls.ahead(threads):
            return None
        return cls(sources, threads, max_bytes, nbytes, _next=True)

    def _takes_over(self, early: Prefetch) -> bool:
        """Take ``early``'s reads where they are this task's windows in this order (the caller holds the lock)."""
        if (early.threads, early.max_bytes) != (self.threads, self.max_bytes):
            return False
        if early._order != [_key(src) for src in self._todo]:
            return False
        self._todo, self._ready, self._held = early._todo, early._ready, early._held
        self.peak_bytes = early.peak_bytes
        self.adopted = len(early._order) - len(early._todo)
        early._todo, early._ready, early._held = deque(), {}, 0
        return True

    def _room(self) -> int:
        """Bytes held by the other read-ahead of this process (the running task's, or the next one's)."""
        other = _early[0] if self is _running[0] else _running[0] if self is _early[0] else None
        return other._held if other is not None else 0

    def _fill(self) -> None:
        """Start reads while they fit (the caller holds the lock); the next task's only once the running one
        has started all its own, then those of the next task in turn."""
        if self._next and _running[0] is not None and _running[0]._todo:
            return
        while self._todo and self._pool is not None:
            n = self._nbytes(self._todo[0])
            held = self._held + self._room()
            if held and held + n > self.max_bytes:
                return
            src = self._todo.popleft()
            self._held += n
            self.peak_bytes = max(self.peak_bytes, self._held)
            self._ready.setdefault(_key(src), deque()).append((self._pool.submit(_timed_read, src), n))
        early = _early[0]
        if self is _running[0] and early is not None:
            early._fill()

    def take(self, src: SourceWindow) -> np.ndarray:
        """``src``'s pixels, as :func:`~pipeline.inputs.read.read_window` gives them (or raises)."""
        self.reads += 1
        if self._pool is None:
            return read_window(src)
        with _lock:
            queue = self._ready.get(_key(src))
            if not queue:
                # Asked out of turn (or nothing ahead): read it now; drop it from the windows still to come.
                with contextlib.suppress(ValueError):
                    self._todo.remove(src)
                future = None
            else:
                future, n = queue.popleft()
                if not queue:
                    del self._ready[_key(src)]
        if future is None:
            return read_window(src)
        try:
            data, seconds = future.result()
            self.io_s += seconds
            return data
        finally:
            with _lock:
                self._held -= n
                self._fill()

    def skip(self, src: SourceWindow) -> None:
        """``src`` is not needed after all (first/last fusion found its part of the chunk filled): a read not
        yet started is cancelled, one done or under way is dropped."""
        if self._pool is None:
            return
        with _lock:
            queue = self._ready.get(_key(src))
            if not queue:
                with contextlib.suppress(ValueError):
                    self._todo.remove(src)
                return
            future, n = queue.popleft()
            if not queue:
                del self._ready[_key(src)]
            future.cancel()
            self._held -= n
            self._fill()

    def close(self) -> None:
        """Cancel what has not started; wait for what has (its data, or its error, is nobody's): a task
        leaves no read of its own running behind it. Then the next task's reads (:meth:`early`) may take
        the whole budget."""
        with _lock:
            self._todo.clear()
            futures = [future for queue in self._ready.values() for future, _ in queue]
            self._ready.clear()
            for future in futures:
                future.cancel()
        wait(futures)
        with _lock:
            self._held = 0
            if _running[0] is self:
                _running[0] = None
            if _early[0] is self:
                _early[0] = None
            elif _early[0] is not None:
                _early[0]._fill()
