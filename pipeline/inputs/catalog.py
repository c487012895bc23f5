"""The one builder of the tile table: whichever source found the tiles (files and globs in
:mod:`pipeline.inputs.files`, STAC items in :mod:`pipeline.inputs.stac`), its rows are finished here by
the same rules, so a tile gives the same row however it was found.

The rules: only the configured bands (an error naming the missing ones); one dtype per band (the
majority; files of another are skipped and listed); nodata from the STAC item, else the file, else
``inputs.nodata`` (``nodata_from`` says which); rows sorted by path, the order ``fuse: first/last``
follows. Sources never import each other: each returns a :class:`~pipeline.inputs.tiles.Catalog` of
unfinished rows.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.errors import ConfigError, TileReadError
from pipeline.inputs.files import find_inputs  # noqa: F401 - the files source's listing, importable from here
from pipeline.inputs.headers import read_header  # noqa: F401 - importable from here
from pipeline.inputs.tiles import TABLE_COLUMNS, Catalog, TileTable, _column
from pipeline.report.progress import NoProgress

if TYPE_CHECKING:
    from pipeline.config.fields import OnError
    from pipeline.config.sections import InputsConfig, MaskConfig, StorageConfig

logger = logging.getLogger(__name__)


def build_catalog(
    inputs: InputsConfig,
    storage: StorageConfig,
    *,
    mask_band: str | None = None,
    on_error: OnError = "skip",
    io_concurrency: int | None = None,
    grid_crs: str | None = None,
    grid_bounds: tuple[float, float, float, float] | None = None,
    max_threads: int = 8,
    progress: NoProgress | None = None,
) -> Catalog:
    """Find the ``inputs`` (buckets read with ``storage``) and build the tile table (see the module
    docstring). ``mask_band`` (``mask.band``): its tiles are kept; ``on_error`` (``execution.on_error``):
    ``fail`` raises on the first file skipped; ``io_concurrency`` (``execution.io_concurrency``): remote
    headers read at once; ``grid_crs`` and ``grid_bounds`` (``grid.crs``, ``grid.bounds``): the grid whose
    centre shifts STAC solar days. ``progress`` is told the files listed, the STAC assets parsed and the
    headers read (:mod:`pipeline.report.progress`)."""
    if inputs.stac or inputs.stac_search:
        from pipeline.inputs.stac import stac_catalog

        found = stac_catalog(
            inputs,
            storage,
            mask_band=mask_band,
            grid_crs=grid_crs,
            grid_bounds=grid_bounds,
            max_threads=max_threads,
            progress=progress,
        )
    else:
        from pipeline.inputs.files import files_catalog

        found = files_catalog(
            inputs, storage, io_concurrency=io_concurrency, max_threads=max_threads, progress=progress
        )
    skipped = list(found.skipped)
    tiles = finish_table(found.tiles, inputs, skipped, mask_band=mask_band)
    if on_error == "fail" and skipped:
        raise TileReadError(skipped[0]["path"], skipped[0]["error"])
    for s in skipped:
        logger.warning("skipping %s: %s", s["path"], s["error"])
    found.tiles, found.skipped = tiles, skipped
    return found


def with_versions(inputs: InputsConfig, storage: StorageConfig, tiles: TileTable) -> TileTable:
    """``tiles`` with what tells each file's version from another where finding them did not say it, for
    ``pipeline update``, which compares fingerprints: a STAC source's objects that their items give no
    version, their ETags (one HEAD each; :func:`pipeline.inputs.stac.with_object_versions`). A files source
    has them all from its listing or ``stat``."""
    if inputs.stac or inputs.stac_search:
        from pipeline.inputs.stac import with_object_versions

        return with_object_versions(tiles, storage)
    return tiles


def finish_table(
    tiles: TileTable, inputs: InputsConfig, skipped: list[dict[str, str]], *, mask_band: str | None = None
) -> TileTable:
    """The table a run plans from (see the module docstring); appends to ``skipped``. The mask band's tiles
    (``mask_band``: ``mask.band``) are kept whether ``inputs.bands`` lists it or not: the planner tells them
    apart."""
    if mask_band is not None and mask_band not in set(tiles["band"]):
        known = sorted(set(tiles["band"]))
        raise ConfigError("mask.band", f"no input carries band {mask_band!r}; bands found: {known}")
    if inputs.bands is not None:
        found = set(tiles["band"])
        missing = [b for b in inputs.bands if b not in found]
        if missing:
            raise ConfigError("inputs.bands", f"no input file carries band(s) {missing}; bands found: {sorted(found)}")
        wanted = set(inputs.bands) | ({mask_band} if mask_band else set())
        tiles = tiles.rows(np.fromiter((b in wanted for b in tiles["band"]), bool, len(tiles)))
    keep = np.ones(len(tiles), dtype=bool)
    dtypes = tiles["dtype"]
    for rows in tiles.groups("band").values():
        counts = Counter(dtypes[rows])
        if len(counts) > 1:
            major = counts.most_common(1)[0][0]
            for i in rows[dtypes[rows] != major]:
                keep[i] = False
                skipped.append(
                    {"path": tiles["path"][i], "error": f"dtype {dtypes[i]} differs from band's other files ({major})"}
                )
    if not keep.all():
        tiles = tiles.rows(keep)
    if not len(tiles):
        key = "inputs.stac_search" if inputs.stac_search else "inputs.stac" if inputs.stac else "inputs.paths"
        first = f"; the first: {skipped[0]['path']}: {skipped[0]['error']}" if skipped else ""
        raise ConfigError(key, f"no usable input file remains ({len(skipped)} skipped{first})")
    nodata, source = tiles["nodata"], tiles["nodata_from"]
    if inputs.nodata is not None:
        unset = np.isnan(nodata)
        nodata = np.where(unset, float(inputs.nodata), nodata)
        source = np.where(unset, "config", source).astype(object)
    tiles = tiles.assign(nodata=nodata, nodata_from=_column("nodata_from", source)).select(TABLE_COLUMNS)
    paths = tiles["path"]
    if not (paths[1:] >= paths[:-1]).all():  # an index is stored sorted: no sort needed
        # Python's sort of a list: the order of NumPy's stable argsort of the objects, in ~0.4x its time.
        order = sorted(range(len(paths)), key=paths.tolist().__getitem__)
        tiles = tiles.rows(np.array(order, dtype=np.int64))
    return tiles


def describe_bands(catalog: Catalog) -> dict[str, dict[str, Any]]:
    """Per band, what the report says of it: the nodata used and where it came from (``stac``, ``file``,
    ``config``, ``none``; several where tiles differ), STAC scale/offset/unit, and whether it is a
    class or QA band."""
    tiles = catalog.tiles
    out: dict[str, dict[str, Any]] = {}
    for band, rows in tiles.groups("band").items():
        values = tiles["nodata"][rows]
        known = values[~np.isnan(values)]
        sources = sorted({s or "none" for s in tiles["nodata_from"][rows]})
        out[band] = {
            "nodata": float(known[0]) if len(known) else None,
            "nodata_from": sources[0] if len(sources) == 1 else sources,
            **catalog.band_attrs.get(band, {}),
            "categorical": band in catalog.categorical,
        }
    return out


def mask_rule(mask: MaskConfig | None, catalog: Catalog | None) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``mask.exclude`` and ``mask.exclude_bits`` as class values and bit positions (none without a ``mask``):
    names are looked up in the mask band's STAC ``classification:classes`` / ``bitfields`` (a bitfield name
    stands for each of its bits)."""
    m = mask
    if m is None:
        return (), ()
    known = (catalog.classification.get(m.band) if catalog is not None else None) or {}
    classes, fields = known.get("classes", {}), known.get("bitfields", {})

    def unknown(key: str, name: str, kind: str, names: dict[str, Any]) -> ConfigError:
        if not names:
            return ConfigError(
                f"mask.{key}",
                f"names {name!r}, but band {m.band} carries no STAC classification:{kind}: give numbers instead",
            )
        near = ", ".join(sorted(names))
        return ConfigError(f"mask.{key}", f"{name!r} is not one of band {m.band}'s classification:{kind}: {near}")

    values: list[int] = []
    for v in m.exclude:
        if isinstance(v, str):
            if v not in classes:
                raise unknown("exclude", v, "classes", classes)
            values.append(int(classes[v]))
        else:
            values.append(int(v))
    bits: list[int] = []
    for v in m.exclude_bits:
        if isinstance(v, str):
            if v not in fields:
                raise unknown("exclude_bits", v, "bitfields", fields)
            offset, length = fields[v]
            bits.extend(range(offset, offset + length))
        else:
            bits.append(int(v))
    return tuple(sorted(set(values))), tuple(sorted(set(bits)))
