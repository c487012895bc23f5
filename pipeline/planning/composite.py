"""Pure planning of masks and composites: which mask tile judges each data tile, which period each date
falls in, and how many row strips a chunk's stack of dates is reduced in so that it fits a worker.

No I/O and no pixels: the tile table's columns in, NumPy arrays out.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pipeline.inputs.tiles import TileTable

PERIODS = ("P16D", "P1M", "P3M", "P1Y", "all")


def period_starts(dates: np.ndarray, period: str) -> np.ndarray:
    """The start of the period each date falls in (datetime64[ns]), for ``composite.period``.

    ``P16D``: 16-day periods counted from each 1 January (days 1, 17, 33, ... of the year, as MODIS's 16-day
    composites; the year's last period is shorter); ``P1M``: the calendar month; ``P3M``: the quarter
    (January, April, July, October); ``P1Y``: the calendar year; ``all``: one period, labelled by the
    earliest date. Fixed anchors, so a period's label never depends on which dates the inputs have.
    """
    d = np.asarray(dates, dtype="datetime64[ns]")
    if period == "all":
        return np.full(len(d), d.min() if len(d) else np.datetime64("NaT"), dtype="datetime64[ns]")
    if period == "P1M":
        return d.astype("datetime64[M]").astype("datetime64[ns]")
    if period == "P3M":
        months = d.astype("datetime64[M]").astype(np.int64)
        return (months - months % 3).astype("datetime64[M]").astype("datetime64[ns]")
    if period == "P1Y":
        return d.astype("datetime64[Y]").astype("datetime64[ns]")
    if period == "P16D":
        year = d.astype("datetime64[Y]").astype("datetime64[D]")
        doy = (d.astype("datetime64[D]") - year).astype(np.int64)
        return (year + (doy // 16) * 16).astype("datetime64[ns]")
    raise ValueError(f"unknown period {period!r}; one of {PERIODS}")


def match_masks(data: TileTable, masks: TileTable) -> np.ndarray:
    """For each data tile, the row of ``masks`` of the same tile and date; -1 where there is none.

    The same tile: the same ``tile`` value (a STAC item, the glob's ``tile`` group) where the data tile has
    one; else the same CRS and footprint (a tile's bands at 10, 20 and 60 m share their bounds to the
    metre). Several candidates (a mask tile listed twice): the first in path order.
    """

    def keys(t: TileTable) -> list[tuple[object, ...]]:
        date = t["date"].astype(np.int64).tolist()
        tile = t["tile"].tolist()
        box = np.round(np.stack([t[c] for c in ("xmin", "ymin", "xmax", "ymax")], axis=1), 0).tolist()
        crs = t["crs"].tolist()
        return [
            (d, "tile", name) if name else (d, "box", c, *b) for d, name, c, b in zip(date, tile, crs, box, strict=True)
        ]

    found: dict[tuple[object, ...], int] = {}
    for k, key in enumerate(keys(masks)):
        found.setdefault(key, k)
    return np.fromiter((found.get(key, -1) for key in keys(data)), np.int64, len(data))


def strip_rows(chunk_h: int, need: Callable[[int], int], budget: float) -> int:
    """Rows per strip, a divisor of ``chunk_h``: the chunk itself where its stack (``need(rows)`` bytes for a
    strip of ``rows``) fits ``budget``, else the tallest strip that does (one row at the least). Strips tile
    the chunk exactly, so a task assembles them and writes the chunk once."""
    for rows in sorted((d for d in range(1, chunk_h + 1) if chunk_h % d == 0), reverse=True):
        if need(rows) <= budget:
            return rows
    return 1
