"""The tile table: one row per input tile (path, band, date, CRS, transform, shape, dtype, nodata,
blocks, overview sizes), NumPy columns, and the catalog that carries it with what was skipped."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

HEADER_COLUMNS = [
    "crs",
    "a",
    "b",
    "c",
    "d",
    "e",
    "f",
    "width",
    "height",
    "xmin",
    "ymin",
    "xmax",
    "ymax",
    "dtype",
    "file_nodata",
    "block_x",
    "block_y",
    "overview_sizes",
]


INDEX_COLUMNS = ["path", *HEADER_COLUMNS, "tag_date", "size", "mtime", "etag"]


TABLE_COLUMNS = [
    *["path", "bidx", "band", "tile", "date", *HEADER_COLUMNS],
    *["size", "mtime", "version", "nodata", "nodata_from"],
]
"""The tile table a run plans from. ``bidx``: the file's band (1-based); ``version``: what tells this
version of the file from another besides size and mtime, ``kind:value`` (``etag:"..."`` of an object,
``updated:...`` or ``checksum:...`` of a STAC asset; empty: nothing), which the record of
:mod:`pipeline.store.record` keeps; ``nodata``: the value used, ``nodata_from`` where it came from (``stac``,
``file``, ``config``; empty: none)."""


_FLOAT_COLUMNS = {"a", "b", "c", "d", "e", "f", "xmin", "ymin", "xmax", "ymax", "file_nodata", "nodata"}


_INT_COLUMNS = {"width", "height", "block_x", "block_y", "size", "mtime", "bidx"}


def _column(name: str, values: Iterable[Any]) -> np.ndarray:
    """One column as its NumPy type: float64, int64, datetime64[ns] (``date``), else objects (strings,
    None, and the ``overview_sizes`` lists, one per cell)."""
    values = list(values)
    if name in _FLOAT_COLUMNS:
        return np.array([np.nan if v is None else v for v in values], dtype="f8")
    if name in _INT_COLUMNS:
        return np.array(values, dtype=np.int64)
    if name == "date":
        return np.array(values, dtype="datetime64[ns]")
    out = np.empty(len(values), dtype=object)  # filled, not np.array(...): equal-length lists stay cells
    out[:] = [[int(f) for f in v] for v in values] if name == "overview_sizes" else values
    return out


def factorize(values: Sequence[Any] | np.ndarray) -> tuple[list[Any], np.ndarray]:
    """The distinct values in sorted order, and each value's position among them. By hashing: sorting
    192,000 path-like strings took NumPy ~0.3 s a column."""
    items = values.tolist() if isinstance(values, np.ndarray) and values.dtype == object else list(values)
    first: dict[Any, int] = dict.fromkeys(items, 0)  # distinct values in order of appearance, at C speed
    for k, v in enumerate(first):
        first[v] = k
    seen = np.fromiter(map(first.__getitem__, items), np.int64, len(items))
    distinct = list(first)
    order = sorted(range(len(distinct)), key=distinct.__getitem__)
    rank = np.empty(len(distinct), dtype=np.int64)
    rank[order] = np.arange(len(distinct))
    return [distinct[k] for k in order], rank[seen]


class TileTable:
    """Named NumPy columns of equal length, with the few table operations the catalog and the planner
    use. Not pandas: importing it was ~0.3 s of the driver's ~2 s start; :meth:`to_pandas` gives one."""

    def __init__(self, columns: dict[str, np.ndarray]) -> None:
        if len({len(v) for v in columns.values()}) > 1:
            raise ValueError(f"columns of different lengths: { {k: len(v) for k, v in columns.items()} }")
        self._columns = dict(columns)
        self._codes: dict[str, tuple[list[Any], np.ndarray]] = {}

    @classmethod
    def from_records(cls, rows: list[dict[str, Any]], columns: list[str]) -> TileTable:
        """A table of ``columns`` from row dicts (a missing key is None)."""
        return cls({c: _column(c, (r.get(c) for r in rows)) for c in columns})

    @classmethod
    def concat(cls, tables: list[TileTable]) -> TileTable:
        """Rows of ``tables`` one after the other (the columns of the first)."""
        names = tables[0].columns
        return cls({c: np.concatenate([t[c] for t in tables]) for c in names})

    @property
    def columns(self) -> list[str]:
        """The column names, in table order."""
        return list(self._columns)

    def __len__(self) -> int:
        return len(next(iter(self._columns.values()))) if self._columns else 0

    def __contains__(self, name: object) -> bool:
        return name in self._columns

    def __getitem__(self, name: str) -> np.ndarray:
        return self._columns[name]

    def rows(self, which: np.ndarray) -> TileTable:
        """The rows a boolean mask or an index array selects, in that order."""
        return TileTable({c: v[which] for c, v in self._columns.items()})

    def select(self, names: list[str]) -> TileTable:
        """A table of only these columns, in this order."""
        return TileTable({c: self._columns[c] for c in names})

    def assign(self, **columns: np.ndarray) -> TileTable:
        """A table with these columns added or replaced."""
        return TileTable({**self._columns, **columns})

    def row(self, i: int) -> dict[str, Any]:
        """Row ``i`` as a mapping of column to value."""
        return {c: v[i] for c, v in self._columns.items()}

    def codes(self, name: str) -> tuple[list[Any], np.ndarray]:
        """Column ``name`` factorised (:func:`factorize`); once per table and column (columns are not
        modified in place)."""
        if name not in self._codes:
            self._codes[name] = factorize(self._columns[name])
        return self._codes[name]

    def groups(self, name: str) -> dict[Any, np.ndarray]:
        """Row indices of each distinct value of column ``name``, values in sorted order."""
        values, codes = self.codes(name)
        order = np.argsort(codes.astype(np.uint16) if len(values) <= 1 << 16 else codes, kind="stable")  # radix
        bounds = np.searchsorted(codes[order], np.arange(len(values) + 1))
        return {v: order[bounds[k] : bounds[k + 1]] for k, v in enumerate(values)}

    def to_pandas(self) -> Any:
        """A pandas DataFrame of the columns (imports pandas: for tests, benches and notebooks)."""
        import pandas as pd

        return pd.DataFrame(self._columns)


@dataclass
class Catalog:
    """What finding the inputs produced: the tile table, what was skipped, and what it cost."""

    tiles: TileTable
    """The tile table, sorted by path (the order ``fuse: first/last`` follows)."""
    skipped: list[dict[str, str]] = field(default_factory=list)
    """Files matched but unusable: ``{path, error}``."""
    headers_read: int = 0
    """How many file headers were opened this time (the rest came from the index)."""
    band_attrs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Extra attributes per output band: STAC scale/offset as CF ``scale_factor``/``add_offset``, ``units``."""
    categorical: frozenset[str] = frozenset()
    """Bands whose STAC metadata marks them as classes or bit flags (``classification:*``)."""
    classification: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    """Per band, its STAC classification names: ``{"classes": {name: value}, "bitfields": {name: (offset,
    length)}}`` (:func:`pipeline.inputs.stac_fields.classification_of`)."""
    network: dict[str, Any] | None = None
    """What the header reads cost on the network (:func:`pipeline.inputs.netstats.take`); None: all local."""
