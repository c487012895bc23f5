"""Reading ahead: a task's windows read on a pool of I/O threads, many at once, while the task resamples.

A worker that reads one window at a time waits one round trip per read; from a bucket 25 ms away that
is most of a run. A task hands :class:`Prefetch` the windows it will read, in the order it will ask
for them; the pool reads them ahead (:func:`pipeline.inputs.read.read_window` on each: GDAL's reads
release the GIL, and a window's blocks are fetched together), holding at most ``max_bytes`` of pixels
read or being read, and the task takes each as it comes to it. What it takes is what
``read_window`` returns, errors included, so the output does not depend on the number in flight.

The pool belongs to the process (one per size, made on first use) and its threads keep their GDAL
environments; the task thread stays the one that resamples and writes.
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


class Prefetch:
    """The windows of one task, read ahead on ``threads`` I/O threads, at most ``max_bytes`` of pixels held
    (one window is always let through, whatever its size). ``threads`` below 2: no read-ahead, each window
    read when it is taken, on the task's thread."""

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
    ) -> None:
        self.threads = threads
        self.max_bytes = max_bytes
        self._nbytes = nbytes
        self._pool = io_pool(threads) if self.ahead(threads) else None
        self._todo: deque[SourceWindow] = deque(sources) if self._pool is not None else deque()
        self._ready: dict[tuple[Any, ...], deque[tuple[Future[tuple[np.ndarray, float]], int]]] = {}
        self._held = 0
        self.peak_bytes = 0
        """The most bytes held or being read at once."""
        self.reads = 0
        self.io_s = 0.0
        """Seconds the I/O threads spent on the windows taken (reading ahead: overlapped with the task)."""
        self._fill()

    def _fill(self) -> None:
        while self._todo and self._pool is not None:
            n = self._nbytes(self._todo[0])
            if self._held and self._held + n > self.max_bytes:
                return
            src = self._todo.popleft()
            self._held += n
            self.peak_bytes = max(self.peak_bytes, self._held)
            self._ready.setdefault(_key(src), deque()).append((self._pool.submit(_timed_read, src), n))

    def take(self, src: SourceWindow) -> np.ndarray:
        """``src``'s pixels, as :func:`~pipeline.inputs.read.read_window` gives them (or raises)."""
        self.reads += 1
        if self._pool is None:
            return read_window(src)
        queue = self._ready.get(_key(src))
        if not queue:
            # Asked out of turn (or nothing ahead): read it now; drop it from the windows still to come.
            with contextlib.suppress(ValueError):
                self._todo.remove(src)
            return read_window(src)
        future, n = queue.popleft()
        if not queue:
            del self._ready[_key(src)]
        try:
            data, seconds = future.result()
            self.io_s += seconds
            return data
        finally:
            self._held -= n
            self._fill()

    def skip(self, src: SourceWindow) -> None:
        """``src`` is not needed after all (first/last fusion found its part of the chunk filled): a read not
        yet started is cancelled, one done or under way is dropped."""
        if self._pool is None:
            return
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
        leaves no read of its own running behind it."""
        self._todo.clear()
        futures = [future for queue in self._ready.values() for future, _ in queue]
        for future in futures:
            future.cancel()
        wait(futures)
        self._ready.clear()
        self._held = 0
