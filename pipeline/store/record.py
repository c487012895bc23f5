"""What a cube was built from, and how its inputs differ now: the record :func:`pipeline.update` compares.

The record is one JSON object in the store, ``.pipeline-record/<generation>.json``: for each date of the
time axis, every source file of that date (mask tiles too) and its fingerprint (:func:`fingerprint`):
``size:mtime_ns``, then where the source says more, ``:kind:value``: an object's ``etag``, a STAC asset's
``updated`` or ``file:checksum``. A record written before the kinds were kept (``size:mtime_ns`` for every
source) is read as it is: :func:`source_change` compares what both fingerprints have. The group's
attributes name the record in force (``pipeline_record``), so the record and the cube it describes change
in the one put that publishes an update (:mod:`pipeline.store.publish`), which writes every date's current
fingerprints. An update reads it once: one GET whatever the number of dates.

:func:`compute_diff` is pure: the cube's dates and record against the inputs' record, giving the dates to
add, to recompute (with why: which tile was added, removed or rewritten) and to keep.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.errors import StoreError
from pipeline.storage import read_bytes, redact
from pipeline.store.existing import RECORD_DIR, get_json, local_missing, output_store, put_json
from pipeline.store.write import chunk_key

if TYPE_CHECKING:
    from pipeline.storage import Storage

BAND_DIMS = ["time", "y", "x"]

Record = dict[str, dict[str, str]]
"""{date label: {source path: fingerprint}}."""


def date_label(value: Any) -> str:
    """A date as the plan and the record spell it: ``2024-06-01T00:00:00``."""
    return str(np.datetime64(value, "s"))


def fingerprint(size: int, mtime: int, version: str | None = None) -> str:
    """One source's fingerprint: ``size:mtime_ns``, and ``:kind:value`` where the tile table's ``version``
    has one (``etag:"9b2c..."``, ``updated:2024-06-03T10:00:00Z``, ``checksum:1220...``)."""
    return f"{int(size)}:{int(mtime)}" + (f":{version}" if version else "")


def _parse(value: str) -> tuple[str, str, str, str]:
    """(size, mtime, kind, value) of a fingerprint; kind and value empty where it has none."""
    size, _, rest = value.partition(":")
    mtime, _, version = rest.partition(":")
    kind, _, said = version.partition(":")
    return size, mtime, kind, said


def source_change(old: str, new: str) -> str | None:
    """Why one source differs from its record (None: it does not). Where both fingerprints are of one kind,
    size and that value decide: an ETag or a STAC ``updated`` that did not change means the same file,
    whatever its mtime (an identical re-upload). Where one has no kind (a local file, a record written
    before kinds were kept, a server that sends no ETag), size and mtime decide, an mtime of 0 (a STAC
    asset's ``file:size`` alone) leaving it to size. Two different kinds (a STAC
    item that gained ``updated``) cannot be compared: the date is recomputed, and why says so."""
    s0, m0, k0, v0 = _parse(old)
    s1, m1, k1, v1 = _parse(new)
    if k0 and k1 and k0 != k1:
        return f"fingerprint kind changed ({k0} -> {k1})"
    if s0 != s1:
        return f"size {s0} -> {s1}"
    if k0 and k0 == k1:
        return None if v0 == v1 else f"{k0} {v0} -> {v1}"
    return None if m0 == m1 or "0" in (m0, m1) else "modified"  # (an mtime of 0: not known, a STAC file:size)


def compute_record(
    paths: np.ndarray,
    dates: np.ndarray,
    sizes: np.ndarray,
    mtimes: np.ndarray,
    versions: np.ndarray | None = None,
) -> Record:
    """Each date's source files and their fingerprints (:func:`fingerprint`), from the tile table's columns
    (a file of several bands counts once)."""
    out: Record = {}
    labels = np.datetime_as_string(np.asarray(dates, dtype="datetime64[s]"), unit="s")
    kinds = [None] * len(labels) if versions is None else versions.tolist()
    for path, label, size, mtime, version in zip(
        paths.tolist(), labels.tolist(), sizes.tolist(), mtimes.tolist(), kinds, strict=True
    ):
        out.setdefault(label, {})[str(path)] = fingerprint(size, mtime, version)
    return {d: dict(sorted(out[d].items())) for d in sorted(out)}


def tiles_record(tiles: Any) -> Record:
    """:func:`compute_record` of a tile table (:class:`pipeline.inputs.tiles.TileTable`)."""
    return compute_record(tiles["path"], tiles["date"], tiles["size"], tiles["mtime"], tiles["version"])


def record_key(generation: int) -> str:
    return f"{RECORD_DIR}/{generation:06d}.json"


def write_record(store: Any, generation: int, record: Record) -> str:
    """Put the record of ``generation``; its key (to name in the group's attributes)."""
    key = record_key(generation)
    put_json(store, key, {"dates": record})
    return key


@dataclass(frozen=True)
class CubeState:
    """A finished cube as its consolidated metadata says (what readers see), read in two or three GETs:
    the group's ``zarr.json``, the time coordinate's one chunk and the record."""

    attrs: dict[str, Any]
    """The group's attributes."""
    arrays: dict[str, dict[str, Any]]
    """Every array's metadata, from the consolidated metadata."""
    times: tuple[str, ...]
    """The time axis, as date labels."""
    record: Record | None
    """What each date was built from; None: the cube has no record (written before records were kept)."""
    root: dict[str, Any] = field(repr=False, default_factory=dict)

    @property
    def bands(self) -> list[str]:
        return sorted(n for n, m in self.arrays.items() if m.get("dimension_names") == BAND_DIMS)

    @property
    def generation(self) -> int:
        return int(self.attrs.get("pipeline_generation", 0))

    def separator(self, name: str) -> str:
        """The chunk key separator of array ``name``."""
        enc = self.arrays[name].get("chunk_key_encoding") or {}
        return str(enc.get("configuration", {}).get("separator", "/"))


def read_state(path: str, storage: Storage | None = None) -> CubeState | None:
    """The cube at ``path`` as readers see it; None where there is no group there. StoreError where it is
    not a finished Zarr v3 store with consolidated metadata (what only this pipeline's ``run`` leaves)."""
    if local_missing(path):
        return None
    store = output_store(path, storage)
    try:
        root = get_json(store, "zarr.json")
    except ValueError as e:
        raise StoreError(f"{path}/zarr.json is not a Zarr group ({e})") from None
    if root is None:
        return None
    attrs = dict(root.get("attributes") or {})
    consolidated = (root.get("consolidated_metadata") or {}).get("metadata")
    if not attrs.get("pipeline_complete") or not isinstance(consolidated, dict) or "time" not in consolidated:
        raise StoreError(
            f"{path} is not a finished cube of this pipeline (not marked complete): finish it with "
            "`pipeline run CONFIG --resume`, or replace it with --overwrite"
        )
    time_meta = consolidated["time"]
    n = int(time_meta["shape"][0])
    sep = str(((time_meta.get("chunk_key_encoding") or {}).get("configuration") or {}).get("separator", "/"))
    raw = read_bytes(store, chunk_key("time", (0,), sep))
    codecs = [c.get("name") for c in time_meta.get("codecs") or []]
    if raw is None or codecs != ["bytes"] or len(raw) < 8 * n:
        raise StoreError(f"{path}/time: its chunk is missing or not as this pipeline writes it")
    seconds = np.frombuffer(raw, dtype="<i8")[:n]
    times = tuple(date_label(np.datetime64(int(s), "s")) for s in seconds)
    record = None
    name = attrs.get("pipeline_record")
    if name:
        try:
            doc = get_json(store, str(name))
        except (OSError, ValueError) as e:
            raise StoreError(f"{path}/{name}: the cube's record cannot be read ({redact(str(e))})") from None
        record = None if doc is None else {str(d): dict(v) for d, v in (doc.get("dates") or {}).items()}
    return CubeState(attrs=attrs, arrays=dict(consolidated), times=times, record=record, root=root)


@dataclass(frozen=True)
class UpdateDiff:
    """What an update changes: the time axis it publishes and, per date, added, recomputed or kept."""

    old_times: tuple[str, ...]
    times: tuple[str, ...]
    """The time axis after the update (ascending, unique): the cube's dates and the inputs'."""
    added: tuple[str, ...]
    recomputed: dict[str, list[str]]
    """Date -> why (``tile rewritten: PATH (size 10 -> 12)``, ``tile added: PATH``, ...)."""
    unchanged: tuple[str, ...]
    missing: tuple[str, ...] = ()
    """Dates of the cube no input has now: kept as they are (an update never drops a date)."""

    @property
    def work(self) -> tuple[str, ...]:
        """The dates whose chunks this update writes, in time order."""
        return tuple(sorted({*self.added, *self.recomputed}))

    @property
    def shifts(self) -> bool:
        """Whether a date already in the cube moves along the time axis (a date inserted before it)."""
        return self.times[: len(self.old_times)] != self.old_times

    def position(self, date: str) -> int:
        return self.times.index(date)

    def as_report(self) -> dict[str, Any]:
        return {
            "added": list(self.added),
            "recomputed": sorted(self.recomputed),
            "unchanged": list(self.unchanged),
            "why": {d: list(v) for d, v in sorted(self.recomputed.items())},
            "missing_inputs": list(self.missing),
            "inserted": self.shifts,
            "times": len(self.times),
        }


def describe_changes(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """Why one date's sources differ: each tile added, removed or rewritten (:func:`source_change`)."""
    out = [f"tile added: {p}" for p in sorted(set(new) - set(old))]
    out += [f"tile removed: {p}" for p in sorted(set(old) - set(new))]
    for p in sorted(set(old) & set(new)):
        said = source_change(old[p], new[p])
        if said is not None:
            out.append(f"tile rewritten: {p} ({said})")
    return out


def compute_diff(
    cube_times: tuple[str, ...],
    recorded: Record | None,
    current: Record,
    forced: dict[str, str] | None = None,
) -> UpdateDiff:
    """Compare the cube (its time axis and record; None: no record) with the inputs' record. ``forced``:
    dates to recompute whatever their sources say (date -> why), e.g. those an interrupted update had
    begun to rewrite in place."""
    have = set(cube_times)
    added = tuple(sorted(d for d in current if d not in have))
    recomputed: dict[str, list[str]] = {}
    for d in sorted(set(current) & have):
        if recorded is None or d not in recorded:
            why = ["the cube holds no record of its sources"]
        else:
            why = describe_changes(recorded[d], current[d])
        if forced and d in forced:
            why = [forced[d], *why]
        if why:
            recomputed[d] = why
    unchanged = tuple(d for d in cube_times if d in current and d not in recomputed)
    missing = tuple(d for d in cube_times if d not in current)
    return UpdateDiff(
        old_times=tuple(cube_times),
        times=tuple(sorted(have | set(current))),
        added=added,
        recomputed=recomputed,
        unchanged=unchanged,
        missing=missing,
    )


def work_digest(diff: UpdateDiff, current: Record, generation: int) -> str:
    """Identifies one update's work (its dates, their sources, where they go): the journal's partition keys
    carry it, so an interrupted update is resumed only by the same work."""
    import hashlib

    blob = json.dumps(
        [generation, list(diff.times), [(d, current.get(d, {})) for d in diff.work]], sort_keys=True
    ).encode()
    return hashlib.blake2b(blob, digest_size=8).hexdigest()
