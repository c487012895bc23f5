"""A worker's judged mask windows: each mask window read once, judged by the rules (classes, bits,
dilation) once, and sampled at the data pixels of every band that asks for it, kept across a process's
tasks and threads up to a budget."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline.execute.context import TaskContext
from pipeline.inputs.read import read_window
from pipeline.planning.grid import offset_transform
from pipeline.planning.plan import SourceWindow
from pipeline.resample.mask import dilate, drop_pixels, mask_window, sample_nearest

MASK_CACHE_BYTES = 32 << 20
"""What a process keeps of judged mask windows and their samplings (one byte per pixel: a 1024-pixel
chunk at 20 m over one Sentinel-2 tile keeps ~2 MB with its 10, 20 and 60 m samplings). The windows worth
keeping are those of the chunks a worker has in hand: the process pool gives a chunk's bands to the
worker that read their files (:func:`pipeline.execute.processes._pick`). On the cloudy composite 32 MiB
opened as many files and spent as much mask time as 64 MiB, with ~30 MB less per worker
(docs/performance.md); at 16 MiB, with partitions taken in plan order, 6x the mask reads."""

MASK_ALIGN = 64
"""Mask windows are read rounded out to multiples of this many mask pixels, so that a chunk's bands at
10, 20 and 60 m, whose windows differ by a pixel or two, share one read and one judgement."""


def _aligned(win: tuple[int, int, int, int], rows: int, cols: int) -> tuple[int, int, int, int]:
    """``win`` (row_off, col_off, height, width) rounded out to :data:`MASK_ALIGN`, clipped to the file."""
    r0, c0 = win[0] // MASK_ALIGN * MASK_ALIGN, win[1] // MASK_ALIGN * MASK_ALIGN
    r1 = min(-(-(win[0] + win[2]) // MASK_ALIGN) * MASK_ALIGN, rows)
    c1 = min(-(-(win[1] + win[3]) // MASK_ALIGN) * MASK_ALIGN, cols)
    return r0, c0, r1 - r0, c1 - c0


class _JudgedMasks:
    """This process's judged mask windows (the drop mask of each mask window read, after the rules and
    the dilation), kept across its tasks: a chunk's bands are tasks of their own where their stacks are
    large, and each would read and judge the same mask window again. A kept window serves any window it
    contains, and a larger window judges the pixels a smaller one needs the same (the needed window
    carries the dilation's margin, :func:`pipeline.resample.mask.dilate`), so results do not depend on
    which task read first. Least recently used out first past ``max_bytes``; keyed by the run's token as
    well, so a later run on a long-lived worker (a resumed one too) judges afresh."""

    def __init__(self, max_bytes: int = MASK_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._kept: OrderedDict[tuple[Any, ...], _Judged] = OrderedDict()
        self._windows: dict[tuple[Any, ...], set[tuple[int, int, int, int]]] = {}
        self._lock = threading.Lock()
        self.bytes = 0

    def drop(
        self, ctx: TaskContext, src: SourceWindow, shape: tuple[int, int], rules: dict[str, int] | None = None
    ) -> np.ndarray:
        """Per pixel of ``src``'s window (``shape``), whether its mask tile drops it: the mask pixel at the
        pixel's centre (nearest, same tile), after the rules and the dilation. ``rules``: where a mask
        window is read and judged, its pixels that each rule matches are added there (:func:`count_rules`)."""
        m = src.mask
        assert m is not None  # called only for masked sources
        need = mask_window(src.transform, shape, m.transform, (m.height, m.width), ctx.mask_dilate)
        if need[2] <= 0 or need[3] <= 0:
            return np.zeros(shape, dtype=bool)
        tile = (m, ctx.mask_exclude, ctx.mask_bits, ctx.mask_dilate, ctx.run_token)
        with self._lock:
            win = next((w for w in self._windows.get(tile, ()) if _contains(w, need)), None)
            entry = None if win is None else self._kept[(tile, win)]
            if entry is not None:
                self._kept.move_to_end((tile, win))
                sampled = entry.samples.get((src.transform, shape))
                if sampled is not None:
                    return sampled
        if entry is None or win is None:
            win = _aligned(need, m.height, m.width)
            at = offset_transform(m.transform, win[0], win[1])
            values = read_window(SourceWindow(m.path, -1, win, at, src.crs, float("nan"), band_index=m.band_index))
            entry = _Judged(dilate(drop_pixels(values, ctx.mask_exclude, ctx.mask_bits), ctx.mask_dilate))
            if rules is not None:
                count_rules(values, ctx.mask_exclude, ctx.mask_bits, rules)
        sampled = sample_nearest(entry.judged, m.transform, src.transform, shape, origin=(win[0], win[1]))
        sampled.flags.writeable = False  # shared by the bands that ask for it
        self._keep(tile, win, entry, (src.transform, shape), sampled)
        return sampled

    def _keep(
        self,
        tile: tuple[Any, ...],
        win: tuple[int, int, int, int],
        entry: _Judged,
        at: tuple[Any, ...],
        sampled: np.ndarray,
    ) -> None:
        """Keep ``entry`` (if new) and its ``sampled`` pixels for a data window ``at`` (transform, shape)."""
        with self._lock:
            key = (tile, win)
            kept = self._kept.get(key)
            if kept is None:  # new, or evicted since this thread found it: counted whole again
                if entry.nbytes() + sampled.nbytes > self.max_bytes:
                    return
                kept = self._kept[key] = entry
                self._windows.setdefault(tile, set()).add(win)
                self.bytes += entry.nbytes()
            if at not in kept.samples:
                kept.samples[at] = sampled
                self.bytes += sampled.nbytes
            while self.bytes > self.max_bytes:
                (old_tile, old_win), old = self._kept.popitem(last=False)
                self.bytes -= old.nbytes()
                wins = self._windows[old_tile]
                wins.discard(old_win)
                if not wins:
                    del self._windows[old_tile]


@dataclass
class _Judged:
    """A mask window's drop mask, and its pixels as sampled for the data windows asked of it so far (a
    chunk's bands of one resolution share them)."""

    judged: np.ndarray
    samples: dict[tuple[Any, ...], np.ndarray] = field(default_factory=dict)

    def nbytes(self) -> int:
        return int(self.judged.nbytes + sum(a.nbytes for a in self.samples.values()))


MASKS = _JudgedMasks()
"""This process's judged mask windows, shared by its threads and tasks."""


def count_rules(values: np.ndarray, exclude: tuple[int, ...], bits: tuple[int, ...], into: dict[str, int]) -> None:
    """Add to ``into`` the mask pixels of ``values`` (a mask window, before the dilation) that each rule
    matches, as ``class <v>`` and ``bit <b>``, and all of them as ``pixels``: the report's
    ``mask.matched_share``, which tells the clear-observations advice which rules cost the most pixels."""
    into["pixels"] = into.get("pixels", 0) + int(values.size)
    for v in exclude:
        key = f"class {v:g}"
        into[key] = into.get(key, 0) + int(np.count_nonzero(drop_pixels(values, (v,), ())))
    for b in bits:
        key = f"bit {b}"
        into[key] = into.get(key, 0) + int(np.count_nonzero(drop_pixels(values, (), (b,))))


def _contains(outer: tuple[int, int, int, int], inner: tuple[int, int, int, int]) -> bool:
    """Whether window ``outer`` (row_off, col_off, height, width) holds all of ``inner``."""
    return (
        outer[0] <= inner[0]
        and outer[1] <= inner[1]
        and inner[0] + inner[2] <= outer[0] + outer[2]
        and inner[1] + inner[3] <= outer[1] + outer[3]
    )
