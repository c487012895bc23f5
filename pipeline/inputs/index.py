"""The Parquet tile index: headers kept between runs, keyed by size and modification time for files
and ETag, size and last-modified for objects, so unchanged inputs are never opened again."""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np

from pipeline.config import is_url
from pipeline.inputs.tiles import (
    _FLOAT_COLUMNS,
    _INT_COLUMNS,
    INDEX_COLUMNS,
    TileTable,
)

logger = logging.getLogger(__name__)


def _load_index(path: str, storage: Any = None) -> TileTable | None:
    import pyarrow.parquet as pq

    source: Any = path
    if is_url(path):  # an index in a bucket: one GET
        import pyarrow as pa

        from pipeline.storage import read_object

        data = read_object(path, storage)
        if data is None:
            return None
        source = pa.BufferReader(data)
    elif not os.path.exists(path):
        return None
    try:
        table = pq.ParquetFile(source).read()  # not read_table: it imports pyarrow.dataset, which imports pandas
    except Exception as e:  # noqa: BLE001
        logger.warning("tile index %s is unreadable (%s); rebuilding it", path, e)
        return None
    if set(INDEX_COLUMNS) - set(table.column_names):
        logger.warning("tile index %s has another layout; rebuilding it", path)
        return None
    columns = {name: _numpy_column(table.column(name)) for name in INDEX_COLUMNS}
    for name in _FLOAT_COLUMNS & set(INDEX_COLUMNS):
        columns[name] = columns[name].astype("f8")
    for name in _INT_COLUMNS & set(INDEX_COLUMNS):
        columns[name] = columns[name].astype(np.int64)
    return TileTable(columns)


def _numpy_column(column: Any) -> np.ndarray:
    """An Arrow column as NumPy, not through Arrow's ``to_numpy``, which imports pandas where it is
    installed (~0.3 s of the driver's start): numbers from their buffers, anything else as objects."""
    import pyarrow as pa

    arr = column.combine_chunks()
    kind = "f" if pa.types.is_floating(arr.type) else "i" if pa.types.is_signed_integer(arr.type) else None
    if kind is None:  # strings (None where null), overview_sizes lists
        out = np.empty(len(arr), dtype=object)
        out[:] = arr.to_pylist()
        return out
    dtype = np.dtype(f"<{kind}{arr.type.bit_width // 8}")
    values = np.frombuffer(arr.buffers()[1], dtype=dtype, count=arr.offset + len(arr))[arr.offset :]
    if arr.null_count:
        bits = np.unpackbits(np.frombuffer(arr.buffers()[0], dtype=np.uint8), bitorder="little")
        valid = bits[arr.offset : arr.offset + len(arr)].astype(bool)
        values = np.where(valid, values.astype("f8"), np.nan)
    return values


def write_index(path: str, table: TileTable, storage: Any = None) -> None:
    """The tile index as Parquet, sorted by path, replaced whole (a reader never sees half a file): a
    local file, or an object (``s3://``; one PUT, which S3 makes visible whole)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = table.rows(np.argsort(table["path"], kind="stable"))
    types = {"overview_sizes": pa.list_(pa.int64()), "tag_date": pa.string(), "etag": pa.string()}
    arrow = pa.table(
        {
            c: pa.array(list(table[c]) if table[c].dtype == object else table[c], type=types.get(c))
            for c in INDEX_COLUMNS
        }
    )
    if is_url(path):
        import io

        from pipeline.storage import write_object

        buffer = io.BytesIO()
        pq.write_table(arrow, buffer)
        write_object(path, buffer.getvalue(), storage)
        logger.info("tile index %s: %d files", path, len(table))
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    pq.write_table(arrow, tmp)
    os.replace(tmp, path)
    logger.info("tile index %s: %d files", path, len(table))
