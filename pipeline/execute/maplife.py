"""Coordinate maps no task left will use: when a worker may forget them.

A worker keeps the maps its windows were resampled with (:data:`pipeline.resample.warp.MAPS`) for the
next window of the same geometry: the other bands of its resolution, the other dates of its tile. Most of
what a worker holds late in a run, no task left reads (the cloudy composite's cache peaks at 174 MB; 58
MB were each map forgotten once the last partition reading its window is done: ``bench/map_liveness.py``).

The driver knows every partition's windows (:meth:`Partition.window_columns`, from the packed form), so it
counts, for each geometry, the partitions not done that read it (:class:`MapLives`). A geometry whose
count reaches zero is dead. Each worker is told the dead geometries among those it read with its next
task (the processes pool) or at once (the threads pool's one cache; Dask's workers, by ``client.run``),
and forgets their maps (:func:`forget`). What a task computes never depends on it: a map forgotten too
early would be made again, the same bits, and one never used again costs only memory.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from pipeline.execute.workers import trim_malloc
from pipeline.planning.jobs import Geometry, Partition
from pipeline.resample.warp import MAPS

_COLUMNS = 15
"""A window's geometry as numbers: CRS (index), a, b, d, e, tile origin x, y (NaN: none), tile height,
width (-1: unknown), window row, column, height, width, c, f."""


def forget(geometries: Sequence[Geometry]) -> int:
    """Forget this process's maps of these dead geometries, and hand their pages back to the system
    (:func:`~pipeline.execute.workers.trim_malloc`: the heap keeps freed pages otherwise). The bytes freed."""
    freed = MAPS.drop(geometries)
    if freed:
        trim_malloc()
    return freed


async def forget_on_worker(geometries: Sequence[Geometry]) -> int:
    """:func:`forget` as Dask's ``client.run(..., wait=False)`` takes it (a coroutine, run on the worker's
    event loop: the driver does not wait for the workers)."""
    return forget(geometries)


def tell_cluster(client: Any, geometries: Sequence[Geometry]) -> None:
    """Have every worker of ``client``'s cluster forget these dead geometries' maps, the calling thread
    waiting on nothing: the broadcast is handed to the client's event loop. (A blocking ``client.run`` in
    the driver's loop is where a Ctrl-C could land, and distributed then logged an error from the
    cancelled call's callback: ``tests/test_interrupt.py``, 1 run in 4 beside two busy loops.)"""
    broadcast = client.run(forget_on_worker, geometries, wait=False, asynchronous=True)
    asyncio.run_coroutine_threadsafe(broadcast, client.loop.asyncio_loop)


class MapLives:
    """The partitions not done that read each source-window geometry of ``todo`` (indices into it), and the
    dead geometries each holder (a worker's name) read and has not been told of.

    Counted in arrays: the 192,000-file case study's 4,214 partitions (840,000 windows of 88,000 geometries)
    take ~2 s, which the threads and Dask pools spend once their tasks are submitted."""

    def __init__(self, todo: Sequence[Partition]) -> None:
        crs: dict[str, int] = {}
        blocks, sizes = [], []
        for p in todo:
            rows, src_file, src_win, src_cf = p.window_columns()
            files = np.array([(crs.setdefault(r[2], len(crs)), *r[4:8], *r[9:13]) for r in rows], dtype="f8").reshape(
                -1, 9
            )
            blocks.append(np.concatenate([files[src_file], src_win, src_cf], axis=1))
            sizes.append(len(src_file))
        table = np.ascontiguousarray(np.concatenate(blocks) if blocks else np.empty((0, _COLUMNS)))
        keys = table.view(np.dtype((np.void, _COLUMNS * 8))).ravel()  # a row's bytes: one key
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        self._rows = table[first]
        self._crs = list(crs)
        self._of = [np.unique(ids) for ids in np.split(inverse.ravel(), np.cumsum(sizes)[:-1])] if sizes else []
        self._left = np.zeros(len(first), dtype=np.int64)
        for of in self._of:
            self._left[of] += 1
        self._held: dict[Hashable, set[int]] = {}
        self._dead: dict[Hashable, set[int]] = {}
        self.forgotten = 0
        """Geometries a holder was told to forget."""

    def __len__(self) -> int:
        """The geometries of ``todo``."""
        return len(self._rows)

    def geometry(self, g: int) -> Geometry:
        """Geometry ``g`` as a window's :meth:`~pipeline.planning.jobs.SourceWindow.geometry` gives it."""
        crs, a, b, d, e, ox, oy, th, tw, wr, wc, wh, ww, c, f = self._rows[g].tolist()
        origin = None if math.isnan(ox) else (ox, oy)
        shape = None if th < 0 else (int(th), int(tw))
        return (a, b, c, d, e, f), (int(wr), int(wc), int(wh), int(ww)), origin, shape, self._crs[int(crs)]

    def read_by(self, i: int) -> set[Geometry]:
        """The geometries partition ``i`` reads."""
        return {self.geometry(g) for g in self._of[i].tolist()}

    def sent(self, holder: Hashable, i: int) -> list[Geometry]:
        """Partition ``i`` goes to ``holder``: the dead geometries it holds, to forget before running it."""
        self._held.setdefault(holder, set()).update(self._of[i].tolist())
        return self.take(holder)

    def done(self, i: int) -> None:
        """Partition ``i`` is done (not a failed try: a retry reads its windows again)."""
        dead = self._end(i)
        for holder, held in self._held.items():
            mine = held & dead
            if mine:
                held -= mine
                self._dead.setdefault(holder, set()).update(mine)

    def take(self, holder: Hashable) -> list[Geometry]:
        """The dead geometries ``holder`` read and has not been told of (it is told now)."""
        return self._told(self._dead.pop(holder, set()))

    def dead(self, i: int) -> list[Geometry]:
        """For workers told at once (one process's cache, or every worker of a cluster): partition ``i`` is
        done, and these geometries are dead."""
        return self._told(self._end(i))

    def _end(self, i: int) -> set[int]:
        of = self._of[i]
        self._left[of] -= 1
        return set(of[self._left[of] == 0].tolist())

    def _told(self, dead: set[int]) -> list[Geometry]:
        self.forgotten += len(dead)
        return [self.geometry(g) for g in sorted(dead)]
