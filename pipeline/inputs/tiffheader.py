"""A GeoTIFF's header fields from its first bytes, without GDAL: what the index needs of a COG, local or
remote.

A cloud-optimised GeoTIFF keeps every IFD and its tags at the front of the file, so one range GET of
:data:`HEAD_BYTES` holds all the index records (:func:`pipeline.inputs.headers.read_header`'s fields):
size, transform, CRS (an EPSG code from the GeoKeys), dtype, nodata (``GDAL_NODATA``), block shape,
each overview's size and the ``DATE`` / ``DateTime`` tags. Reading them here costs ~0.1 ms of CPU a
file, where a GDAL open over ``/vsis3/`` costs ~4 ms (curl, the driver's probing and parsing): the
index of 192,000 files is then bound by requests in flight, not by the indexer's CPU
(``bench/headers_s3.py``).

Anything this parser does not read exactly as GDAL does returns None, and the caller opens the file
with GDAL instead: a header past the fetched bytes, strips instead of tiles, a model transformation
(rotation) or ``PixelIsPoint`` rasters, a user-defined or missing CRS code. ``tests/test_reads_ahead.py``
compares the two on the small preset and on GeoTIFFs made to differ (BigTIFF, NaN nodata, strips).
"""

from __future__ import annotations

import math
import re
import struct
from typing import Any

HEAD_BYTES = 1 << 15
"""Bytes fetched for a header (GDAL's ``GDAL_INGESTED_BYTES_AT_OPEN`` for COGs)."""

_TYPES = {1: "B", 2: "s", 3: "H", 4: "I", 5: "II", 6: "b", 7: "B", 8: "h", 9: "i", 10: "ii", 11: "f", 12: "d"}
_TYPES_BIG = {16: "Q", 17: "q", 18: "Q"}
_SIZES = {"B": 1, "s": 1, "H": 2, "I": 4, "II": 8, "b": 1, "h": 2, "i": 4, "ii": 8, "f": 4, "d": 8, "Q": 8, "q": 8}

WIDTH, HEIGHT, BITS, PHOTOMETRIC, SAMPLES = 256, 257, 258, 262, 277
SUBFILE, DATETIME, TILE_W, TILE_H, SAMPLE_FORMAT = 254, 306, 322, 323, 339
PIXEL_SCALE, TIEPOINT, MODEL_TRANSFORM, GEOKEYS = 33550, 33922, 34264, 34735
GDAL_METADATA, GDAL_NODATA = 42112, 42113
_WANTED = {WIDTH, HEIGHT, BITS, PHOTOMETRIC, SAMPLES, SUBFILE, DATETIME, TILE_W, TILE_H, SAMPLE_FORMAT}
_WANTED |= {PIXEL_SCALE, TIEPOINT, MODEL_TRANSFORM, GEOKEYS, GDAL_METADATA, GDAL_NODATA}
_DTYPES = {(1, 8): "uint8", (2, 8): "int8", (1, 16): "uint16", (2, 16): "int16", (1, 32): "uint32"}
_DTYPES.update({(2, 32): "int32", (3, 32): "float32", (3, 64): "float64", (1, 64): "uint64", (2, 64): "int64"})


class _Short(Exception):
    """A value lies past the bytes fetched."""


def _ifds(buf: bytes) -> list[dict[int, Any]]:
    """Every IFD's tags (values decoded), in file order."""
    order = {b"II": "<", b"MM": ">"}.get(buf[:2])
    if order is None:
        raise ValueError("not a TIFF")
    version = struct.unpack_from(order + "H", buf, 2)[0]
    big = version == 43
    if version not in (42, 43):
        raise ValueError("not a TIFF")
    offset = struct.unpack_from(order + ("Q" if big else "I"), buf, 8 if big else 4)[0]
    out: list[dict[int, Any]] = []
    seen: set[int] = set()
    while offset and offset not in seen:
        seen.add(offset)
        count_fmt, entry, inline = ("Q", 20, 8) if big else ("H", 12, 4)
        if offset + 8 > len(buf):
            raise _Short
        (n,) = struct.unpack_from(order + count_fmt, buf, offset)
        pos = offset + (8 if big else 2)
        if pos + n * entry + inline > len(buf):
            raise _Short
        tags: dict[int, Any] = {}
        for k in range(n):
            at = pos + k * entry
            if big:
                tag, typ, count = struct.unpack_from(order + "HHQ", buf, at)
                value_at = at + 12
            else:
                tag, typ, count = struct.unpack_from(order + "HHI", buf, at)
                value_at = at + 8
            code = _TYPES.get(typ) or (_TYPES_BIG.get(typ) if big else None)
            if code is None:
                continue
            size = _SIZES[code] * count
            if size > inline:
                value_at = struct.unpack_from(order + ("Q" if big else "I"), buf, value_at)[0]
            if tag not in _WANTED:
                continue  # (tile offsets and byte counts: large, and not needed)
            if value_at + size > len(buf):
                raise _Short
            if code == "s":
                tags[tag] = buf[value_at : value_at + count].split(b"\0", 1)[0].decode("latin-1")
            elif code in ("II", "ii"):
                v = struct.unpack_from(order + code[0] * (2 * count), buf, value_at)
                tags[tag] = tuple(v[i] / v[i + 1] if v[i + 1] else math.nan for i in range(0, len(v), 2))
            else:
                tags[tag] = struct.unpack_from(order + code * count, buf, value_at)
        out.append(tags)
        offset = struct.unpack_from(order + ("Q" if big else "I"), buf, pos + n * entry)[0]
    return out


def _one(tags: dict[int, Any], tag: int, default: Any = None) -> Any:
    v = tags.get(tag)
    return default if v is None else v[0]


def _crs(keys: tuple[int, ...]) -> str | None:
    """``EPSG:n`` from a GeoKey directory's model type and projected / geographic CRS code, or None."""
    if len(keys) < 4:
        return None
    entries = {keys[i]: (keys[i + 1], keys[i + 3]) for i in range(4, 4 + 4 * keys[3], 4) if i + 3 < len(keys)}
    model = entries.get(1024, (1, 0))
    raster = entries.get(1025, (0, 1))
    if raster[0] != 0 or raster[1] != 1:  # PixelIsPoint (GDAL shifts the origin), or stored elsewhere
        return None
    key = {1: 3072, 2: 2048}.get(model[1]) if model[0] == 0 else None
    if key is None or key not in entries:
        return None
    location, code = entries[key]
    return f"EPSG:{code}" if location == 0 and 1024 <= code < 32767 else None


def _date(tags: dict[int, Any]) -> str | None:
    """GDAL's ``DATE`` item (dataset metadata, not a band's), else the ``DateTime`` tag."""
    xml = tags.get(GDAL_METADATA)
    if xml:
        for m in re.finditer(r"<Item\s+([^>]*)>([^<]*)</Item>", xml):
            attrs = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            if attrs.get("name") == "DATE" and "sample" not in attrs and "domain" not in attrs:
                return m.group(2)
    date = tags.get(DATETIME)
    return date or None


def parse_header(buf: bytes) -> dict[str, Any] | None:
    """The header fields of the GeoTIFF whose first bytes are ``buf`` (the keys
    :func:`pipeline.inputs.headers.read_header` returns), or None where GDAL should read it."""
    try:
        ifds = _ifds(buf)
    except (_Short, ValueError, struct.error):
        return None
    if not ifds:
        return None
    main = ifds[0]
    if _one(main, SUBFILE, 0) & 1 or TILE_W not in main or MODEL_TRANSFORM in main:
        return None
    scale, tie = main.get(PIXEL_SCALE), main.get(TIEPOINT)
    crs = _crs(main.get(GEOKEYS, ()))
    if not scale or not tie or len(tie) != 6 or crs is None or len(scale) < 2:
        return None
    bits = main.get(BITS, (1,))
    fmt = main.get(SAMPLE_FORMAT, (1,))
    dtype = _DTYPES.get((fmt[0], bits[0]))
    if dtype is None or _one(main, PHOTOMETRIC) == 6:  # (YCbCr JPEG: GDAL converts)
        return None
    width, height = _one(main, WIDTH), _one(main, HEIGHT)
    a, e = float(scale[0]), -float(scale[1])
    c, f = tie[3] - tie[0] * a, tie[4] - tie[1] * e
    nodata_text = main.get(GDAL_NODATA)
    try:
        nodata = float(nodata_text.strip()) if nodata_text else math.nan
    except ValueError:
        return None
    sizes: list[int] = []
    for ifd in ifds[1:]:
        kind = _one(ifd, SUBFILE, 0)
        if kind & 1 and not kind & 4:  # a reduced-resolution image, not a mask
            sizes += [_one(ifd, WIDTH), _one(ifd, HEIGHT)]
    return {
        "crs": crs,
        "a": a,
        "b": 0.0,
        "c": float(c),
        "d": 0.0,
        "e": e,
        "f": float(f),
        "width": int(width),
        "height": int(height),
        "xmin": float(c),
        "ymin": float(f + e * height),
        "xmax": float(c + a * width),
        "ymax": float(f),
        "dtype": dtype,
        "file_nodata": nodata,
        "block_x": int(_one(main, TILE_W)),
        "block_y": int(_one(main, TILE_H)),
        "overview_sizes": sizes,
        "tag_date": _date(main),
    }
