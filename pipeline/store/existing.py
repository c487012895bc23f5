"""The store at an output path, as found there: its obstore store and JSON documents, whether it is a
store of this pipeline and finished, its resume journal, recorded attributes and size, and so what
``--overwrite`` may remove (:func:`check_output_path`: only a store this pipeline wrote)."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from typing import TYPE_CHECKING, Any

from pipeline.errors import PYTHON_SWITCHES, ConfigError, StoreError, Switches
from pipeline.storage import (
    cached_store,
    default_storage,
    delete_keys,
    list_keys,
    read_bytes,
    redact,
    scheme,
    split_url,
    store_error,
    write_bytes,
)
from pipeline.store import zarr2

if TYPE_CHECKING:  # the model imports pydantic; workers need only its attributes
    from pipeline.storage import Storage

logger = logging.getLogger("pipeline.store.layout")
"""Named as before these rules left :mod:`pipeline.store.layout`: the run's log lines read as they did."""


JOURNAL_DIR = ".pipeline-journal"
"""Inside the store while it is incomplete: one empty object per finished partition."""

RECORD_DIR = ".pipeline-record"
"""Inside a finished store: what each date was built from (:mod:`pipeline.store.record`)."""

ENGINE_STATE = ".pipeline-icechunk.json"
"""Inside an Icechunk repository's working copy: what it was last committed as (:mod:`.icechunk_engine`)."""

ROOT_DOCS = ("zarr.json", zarr2.GROUP, zarr2.ATTRS, zarr2.CONSOLIDATED)
"""The group's own metadata objects, Zarr v3 and v2."""
ARRAY_DOCS = ("zarr.json", zarr2.ARRAY)
"""The object that makes a folder an array, Zarr v3 and v2."""


def output_store(path: str, storage: Storage | None) -> Any:
    """The obstore store of the output at ``path`` (cached per path and storage settings)."""
    return cached_store(path, storage or default_storage())


def put_json(store: Any, key: str, doc: dict[str, Any]) -> None:
    write_bytes(store, key, json.dumps(doc, indent=2, allow_nan=False).encode())


def get_json(store: Any, key: str) -> dict[str, Any] | None:
    """The JSON object at ``key``, or None where there is none (ValueError: not an object)."""
    raw = read_bytes(store, key)
    if raw is None:
        return None
    doc = json.loads(raw)
    if not isinstance(doc, dict):
        raise ValueError(f"{key} is not a JSON object")
    return doc


def local_missing(path: str) -> bool:
    """A local path that does not exist yet (opening an obstore store there would create the folder)."""
    return scheme(path) == "file" and not os.path.isdir(path)


def root_json(path: str, storage: Storage | None) -> dict[str, Any] | None:
    """The group's ``zarr.json``; for a Zarr v2 store, a document of the same shape whose attributes are
    the consolidated ``.zmetadata``'s (written last, so completion is judged there) or, before
    finalisation, ``.zattrs`` (never complete); None: no group."""
    if local_missing(path):
        return None
    store = output_store(path, storage)
    root = get_json(store, "zarr.json")
    if root is not None:
        return root
    consolidated = get_json(store, zarr2.CONSOLIDATED)
    if consolidated is not None:
        attrs = (consolidated.get("metadata") or {}).get(zarr2.ATTRS)
        return {"zarr_format": 2, "attributes": attrs if isinstance(attrs, dict) else {}}
    attrs = get_json(store, zarr2.ATTRS)
    if attrs is not None:
        return {"zarr_format": 2, "attributes": {**attrs, "pipeline_complete": False}}
    return {"zarr_format": 2, "attributes": {}} if read_bytes(store, zarr2.GROUP) is not None else None


def store_is_complete(path: str, storage: Storage | None = None) -> bool:
    """Whether the store at ``path`` is one this pipeline finished (its attributes say ``pipeline_complete``)."""
    try:
        root = root_json(path, storage)
    except (OSError, ValueError):  # unreadable: not complete
        return False
    return bool(root and root.get("attributes", {}).get("pipeline_complete", False))


def store_exists(path: str, storage: Storage | None = None) -> bool:
    """Whether ``path`` holds a group ``zarr.json`` (a store to resume, or to refuse)."""
    try:
        return root_json(path, storage) is not None
    except ValueError:
        return True
    except OSError as e:
        raise StoreError(f"cannot read the output store {redact(path)}: {redact(str(e))}") from e


def _ours(root: dict[str, Any] | None) -> bool:
    attrs = (root or {}).get("attributes") or {}
    return isinstance(attrs, dict) and "pipeline_config_hash" in attrs and "pipeline_version" in attrs


def _names(entries: list[str]) -> str:
    shown = sorted(entries)[:5]
    return ", ".join(shown) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")


def inspect_output(path: str, storage: Storage | None = None) -> str | None:
    """What is at ``path``: None for nothing (no such path, an empty folder, an empty prefix); ``""`` for
    a store of this pipeline and nothing else; otherwise a phrase saying what is there."""
    import obstore

    if scheme(path) == "file":
        if not os.path.lexists(path):
            return None
        if os.path.islink(path) or not os.path.isdir(path):
            return "is a file, not a Zarr store"
        entries = os.listdir(path)
        if not entries:
            return None
        top = set(entries)
        dirs = {e for e in entries if any(os.path.isfile(os.path.join(path, e, doc)) for doc in ARRAY_DOCS)}
    else:
        store = output_store(path, storage)
        bucket, prefix = split_url(path)
        if prefix.strip("/"):
            parent, _, name = prefix.strip("/").rpartition("/")
            try:
                obstore.head(cached_store(f"s3://{bucket}/{parent}", storage or default_storage()), name)
                return "is an object (a file), not a Zarr store"
            except FileNotFoundError:
                pass
        listing = obstore.list_with_delimiter(store)
        top = {m["path"].rsplit("/", 1)[-1] for m in listing["objects"]}
        prefixes = [p.rstrip("/").rsplit("/", 1)[-1] for p in listing["common_prefixes"]]
        if not top and not prefixes:
            return None
        dirs = set()
        for name in prefixes:
            for doc in ARRAY_DOCS:
                try:
                    obstore.head(store, f"{name}/{doc}")
                    dirs.add(name)
                    break
                except FileNotFoundError:
                    pass
        entries = sorted(top | set(prefixes))
        top |= set(prefixes)
    try:
        root = root_json(path, storage)
    except ValueError:
        root = None
    if root is None:
        return f"holds no Zarr store of this pipeline ({_names(entries)})"
    if not _ours(root):
        return "is a Zarr store this pipeline did not write (its attributes have no pipeline_config_hash)"
    # obstore's local puts stage beside the target as "name#N": an interrupted put leaves one behind.
    foreign = [
        e
        for e in top
        if not (e.split("#")[0] in ROOT_DOCS or e in (JOURNAL_DIR, RECORD_DIR, ENGINE_STATE) or e in dirs)
    ]
    if foreign:
        return f"holds a store of this pipeline and also objects it did not write ({_names(foreign)})"
    return ""


def check_output_path(
    path: str, storage: Storage | None, *, overwrite: bool, switches: Switches = PYTHON_SWITCHES
) -> None:
    """Make ``path`` ready for a new store: nothing there, or (with ``overwrite``) a store this pipeline
    wrote, which is removed; anything else is a ConfigError naming ``output.path`` and stays untouched.
    ``switches``: how messages name overwrite and resume (the CLI's flags or the API's arguments)."""
    try:
        found = inspect_output(path, storage)
    except Exception as e:  # unknown bucket, wrong endpoint, refused credentials: say where, never what secret
        if isinstance(e, ConfigError):
            raise
        raise store_error(e, path, storage or default_storage(), key="output.path") from None
    if found is None:
        return
    if found:
        raise ConfigError(
            "output.path",
            f"{path} {found}; {switches.overwrite} replaces only a store this pipeline wrote: "
            "choose another output.path, or move it away yourself",
        )
    if not overwrite:
        raise ConfigError(
            "output.path",
            f"{path} already exists; pass {switches.overwrite} to replace it (or {switches.resume} to finish it)",
        )
    logger.info("removing existing store %s (--overwrite)", path)
    if scheme(path) == "file":
        shutil.rmtree(path)
    else:
        store = output_store(path, storage)
        delete_keys(store, [k for k, _ in list_keys(store)])


def journal_done(path: str, storage: Storage | None = None) -> set[str]:
    """Keys of the partitions a previous run finished."""
    if local_missing(path):
        return set()
    return {k.rsplit("/", 1)[-1] for k, _ in list_keys(output_store(path, storage), JOURNAL_DIR)}


def store_config(path: str, storage: Storage | None = None, switches: Switches = PYTHON_SWITCHES) -> dict[str, Any]:
    """The attributes a previous run left: config hash and settings, completion."""
    try:
        root = root_json(path, storage)
        if root is None:
            raise FileNotFoundError("no zarr.json")
        return dict(root["attributes"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise StoreError(f"{path} is not a store this tool can resume ({e}); use {switches.overwrite}") from e


STAGED = re.compile(r"^[^#]+#\d+$")
"""A staged put's temporary file beside its target: obstore's local store writes ``name#N`` and renames it
to ``name``; a process killed in between leaves it behind."""


def drop_staged_leftovers(path: str) -> int:
    """Delete the staged puts a killed writer left in the local store at ``path`` (``B02/c/0/1/2#1``; the
    rename never happened, so the target holds the previous bytes or nothing, and the journal does not
    record that partition as finished). Only names this pipeline's writer makes, inside a store this
    pipeline wrote, are touched. Buckets publish a put at once and leave nothing. Returns how many."""
    if scheme(path) != "file" or not os.path.isdir(path) or not _ours(root_json(path, None)):
        return 0
    n = 0
    for folder, _, files in os.walk(path):
        for name in files:
            if STAGED.match(name):
                try:
                    os.unlink(os.path.join(folder, name))
                    n += 1
                except FileNotFoundError:
                    pass
    if n:
        logger.info("%s: removed %d temporary file(s) a killed writer left", path, n)
    return n


def store_size(path: str, storage: Storage | None = None) -> int:
    """Bytes of every object under ``path`` (0 where nothing is there)."""
    return 0 if local_missing(path) else sum(size for _, size in list_keys(output_store(path, storage)))
