"""``output.engine: icechunk``: the cube as an Icechunk repository (versioned, transactional Zarr).

The run and the update build the cube exactly as the ``zarr`` engine does, in a plain Zarr v3 working copy
beside the repository (:func:`work_path`: ``<path>/pipeline-work``), with the same tasks, journal,
staging and record. Then :func:`commit_cube` copies into one Icechunk session the objects of the working
copy that changed since the last commit (by their ETags; the same bytes: chunks are not re-encoded) and
commits once, naming the dates added and recomputed. Readers open the repository's branch, so they see
one commit or the next, never between, a date recomputed in place included.

Icechunk 1.x takes only the ``/`` chunk key separator: the working copy's other namespace (``c.t.y.x``,
where an update inserted a date) is committed under ``c/t/y/x`` keys, and each array's metadata says ``/``.
The record of what each date was built from (:mod:`.record`) goes in each commit's metadata, so a rolled
back working copy gets its record back. Icechunk is imported only here (an optional extra).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipeline.errors import ConfigError, StoreError
from pipeline.storage import delete_keys, list_keys, read_bytes, redact, scheme, write_bytes
from pipeline.store.existing import ENGINE_STATE, JOURNAL_DIR, RECORD_DIR, output_store

if TYPE_CHECKING:
    from pipeline.storage import Storage

logger = logging.getLogger(__name__)

WORK_DIR = "pipeline-work"
"""The working copy's folder inside the repository's path (Icechunk keeps its own under other names)."""
STATE = ENGINE_STATE
"""In the working copy: the snapshot it was last committed as, and the ETag of each key then."""
BRANCH = "main"


def work_path(path: str) -> str:
    """The plain Zarr working copy of the repository at ``path``."""
    return f"{path.rstrip('/')}/{WORK_DIR}"


def _icechunk() -> Any:
    try:
        import icechunk
    except ImportError:
        raise ConfigError(
            "output.engine", "icechunk is not installed: pip install 'pipeline[icechunk]' (Python 3.11+)"
        ) from None
    return icechunk


def _storage(path: str, storage: Storage | None) -> Any:
    ic = _icechunk()
    if scheme(path) == "file":
        return ic.local_filesystem_storage(path)
    if not path.startswith("s3://"):
        raise ConfigError("output.path", f"output.engine: icechunk takes a local path or s3:// here, not {path}")
    bucket, _, prefix = path[5:].partition("/")
    endpoint = storage.endpoint_url if storage else None
    return ic.s3_storage(
        bucket=bucket,
        prefix=prefix.rstrip("/") or None,
        region=storage.region if storage else None,
        endpoint_url=endpoint,
        allow_http=bool(endpoint and endpoint.startswith("http://")),
        force_path_style=bool(endpoint),
        anonymous=bool(storage and storage.anonymous) or None,
        from_env=None if storage and storage.anonymous else True,
    )


def repository(path: str, storage: Storage | None, create: bool = False) -> Any:
    """The Icechunk repository at ``path`` (created where ``create`` and there is none)."""
    ic = _icechunk()
    ic.set_logs_filter("error")  # its warning that local disk is not for concurrent commits: one writer here
    try:
        st = _storage(path, storage)
        if create:
            return ic.Repository.open_or_create(st)
        return ic.Repository.open(st)
    except ConfigError:
        raise
    except Exception as e:
        raise StoreError(f"{path}: not an Icechunk repository ({redact(str(e).splitlines()[0])})") from None


def is_repository(path: str, storage: Storage | None) -> bool:
    """Whether ``path`` holds an Icechunk repository (its working copy, which this engine keeps, is the sign)."""
    if scheme(path) == "file":
        return os.path.isfile(os.path.join(work_path(path), "zarr.json"))
    return read_bytes(output_store(work_path(path), storage), "zarr.json") is not None


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def _buffer(data: bytes) -> Any:
    from zarr.core.buffer import default_buffer_prototype

    return default_buffer_prototype().buffer.from_bytes(data)


async def _keys(store: Any) -> list[str]:
    return [k async for k in store.list()]


def _slash(doc: dict[str, Any]) -> dict[str, Any]:
    """An array's (or the group's consolidated) metadata with the ``/`` chunk key separator."""
    if doc.get("node_type") == "array":
        doc = {**doc, "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}}}
    meta = (doc.get("consolidated_metadata") or {}).get("metadata")
    if meta:
        doc = {**doc, "consolidated_metadata": {**doc["consolidated_metadata"], "metadata": {}}}
        doc["consolidated_metadata"]["metadata"] = {k: _slash(v) for k, v in meta.items()}
    return doc


@dataclass(frozen=True)
class _Entry:
    work_key: str
    etag: str
    metadata: bool


def _working_keys(store: Any) -> dict[str, _Entry]:
    """Each key readers of the working copy see, under its repository key (``/`` separator): the group's
    and arrays' ``zarr.json`` and each array's chunks in the namespace its metadata names."""
    import obstore

    root = json.loads(read_bytes(store, "zarr.json") or b"{}")
    arrays = (root.get("consolidated_metadata") or {}).get("metadata") or {}
    seps = {
        n: a.get("chunk_key_encoding", {}).get("configuration", {}).get("separator", "/") for n, a in arrays.items()
    }
    out: dict[str, _Entry] = {}
    for batch in obstore.list(store):
        for m in batch:
            key = m["path"]
            if key.startswith((JOURNAL_DIR, RECORD_DIR, WORK_DIR)) or key == STATE:
                continue
            etag = str(m.get("e_tag") or f"{m['size']}-{m['last_modified']}")
            name, _, rest = key.partition("/")
            if rest == "zarr.json" or key == "zarr.json":
                out[key] = _Entry(key, etag, True)
            elif name in seps:
                sep = seps[name]
                if sep == "/" and rest.startswith("c/"):
                    out[key] = _Entry(key, etag, False)
                elif sep == "." and (rest == "c" or rest.startswith("c.")):
                    out[f"{name}/{rest.replace('.', '/')}"] = _Entry(key, etag, False)
    return out


def _record_objects(store: Any) -> dict[str, Any]:
    """The record objects of the working copy (what each date was built from), for the commit's metadata."""
    return {k: json.loads(read_bytes(store, k) or b"null") for k, _ in list_keys(store, RECORD_DIR)}


def _payload(store: Any, entry: _Entry) -> bytes:
    raw = read_bytes(store, entry.work_key)
    if raw is None:
        raise FileNotFoundError(entry.work_key)
    return json.dumps(_slash(json.loads(raw)), indent=2).encode() if entry.metadata else raw


def commit_cube(path: str, storage: Storage | None, message: str) -> str | None:
    """Commit what the working copy holds that the branch does not, in one commit; its snapshot id, or None
    where nothing changed. A working copy last committed as another snapshot (a crash between the commit and
    :data:`STATE`, or a rollback) is compared byte for byte with the branch."""
    repo = repository(path, storage, create=True)
    work = output_store(work_path(path), storage)
    state = json.loads(read_bytes(work, STATE) or b"{}")
    tip = repo.lookup_branch(BRANCH)
    known: dict[str, str] = state.get("etags", {}) if state.get("snapshot") == tip else {}
    entries = _working_keys(work)
    session = repo.writable_session(BRANCH)
    store = session.store
    present = set(_run(_keys(store)))
    changed = [k for k, e in entries.items() if known.get(k) != e.etag]
    order = sorted(changed, key=lambda k: (not k.endswith("zarr.json"), k.count("/")))  # groups, arrays, chunks
    from zarr.core.buffer import default_buffer_prototype

    async def put_all() -> int:
        sem = asyncio.Semaphore(32)
        n = 0

        async def put(k: str) -> None:
            nonlocal n
            data = _payload(work, entries[k])
            async with sem:
                if not known and k in present:
                    old = await store.get(k, default_buffer_prototype())
                    if old is not None and old.to_bytes() == data:
                        return
                await store.set(k, _buffer(data))
                n += 1

        for k in [k for k in order if k.endswith("zarr.json")]:  # metadata first, one by one
            await put(k)
        await asyncio.gather(*(put(k) for k in order if not k.endswith("zarr.json")))
        gone = sorted(present - set(entries), key=lambda k: -k.count("/"))
        for k in gone:
            if not k.endswith("zarr.json") or k.count("/") == 1:
                await store.delete(k)
                n += 1
        return n

    try:
        n = _run(put_all())
        snapshot = None
        if n or session.has_uncommitted_changes:
            records = _record_objects(work)
            snapshot = session.commit(message, metadata={"pipeline_record": records})
    except Exception as e:
        raise StoreError(f"cannot commit to the Icechunk repository {path}: {redact(str(e).splitlines()[0])}") from None
    done = snapshot or tip
    write_bytes(work, STATE, json.dumps({"snapshot": done, "etags": {k: e.etag for k, e in entries.items()}}).encode())
    return snapshot


def history(path: str, storage: Storage | None) -> list[dict[str, Any]]:
    """The branch's commits, newest first: snapshot id, time (ISO 8601, UTC), message."""
    repo = repository(path, storage)
    return [
        {"snapshot": s.id, "time": s.written_at.isoformat(), "message": s.message} for s in repo.ancestry(branch=BRANCH)
    ]


def open_version(path: str, storage: Storage | None, version: str | None = None) -> Any:
    """The cube as the branch's tip (``version`` None) or snapshot ``version`` has it, a lazy xarray Dataset."""
    import xarray as xr

    repo = repository(path, storage)
    try:
        session = repo.readonly_session(snapshot_id=version) if version else repo.readonly_session(branch=BRANCH)
    except Exception as e:
        raise ConfigError("version", f"{path} has no snapshot {version}: `pipeline history` lists them ({e})") from None
    return xr.open_zarr(session.store, consolidated=False)


def rollback(path: str, storage: Storage | None, snapshot: str) -> dict[str, Any]:
    """Point the branch at ``snapshot`` (one of its ancestors: the later commits stay listed nowhere but are
    kept until Icechunk's expiry) and bring the working copy back to it, so that the next update starts
    from that cube. What it rewrote."""
    repo = repository(path, storage)
    known = {h["snapshot"] for h in history(path, storage)}
    if snapshot not in known:
        raise ConfigError("snapshot", f"{snapshot} is not a commit of {path}'s branch: `pipeline history` lists them")
    try:
        repo.reset_branch(BRANCH, snapshot)
        restored = _restore(repo, path, storage, snapshot)
    except Exception as e:
        raise StoreError(f"cannot roll back {path}: {redact(str(e).splitlines()[0])}") from None
    return {"snapshot": snapshot, **restored}


def _restore(repo: Any, path: str, storage: Storage | None, snapshot: str) -> dict[str, int]:
    """Make the working copy hold what ``snapshot`` holds: the ``/`` keys, its record, and :data:`STATE`."""
    from zarr.core.buffer import default_buffer_prototype

    session = repo.readonly_session(snapshot_id=snapshot)
    work = output_store(work_path(path), storage)
    current = _working_keys(work)
    old = {e.work_key for e in current.values()}
    keys = _run(_keys(session.store))

    async def read_all() -> dict[str, bytes]:
        out = {}
        for k in keys:
            buf = await session.store.get(k, default_buffer_prototype())
            out[k] = buf.to_bytes()
        return out

    wanted = _run(read_all())
    written = 0
    for k in sorted(wanted, key=lambda k: k.endswith("zarr.json")):  # chunks first, metadata last
        if read_bytes(work, k) != wanted[k]:
            write_bytes(work, k, wanted[k])
            written += 1
    stale = sorted(old - set(wanted))
    delete_keys(work, stale)
    delete_keys(work, [k for k, _ in list_keys(work, RECORD_DIR)])
    info = next(s for s in repo.ancestry(snapshot_id=snapshot))
    for k, doc in (info.metadata.get("pipeline_record") or {}).items():
        write_bytes(work, k, json.dumps(doc).encode())
    entries = _working_keys(work)
    write_bytes(
        work, STATE, json.dumps({"snapshot": snapshot, "etags": {k: e.etag for k, e in entries.items()}}).encode()
    )
    return {"objects_written": written, "objects_deleted": len(stale)}


def commit_message(report: dict[str, Any], is_update: bool) -> str:
    """``run: N dates``, or ``update:`` the dates added and recomputed (the report's ``update``)."""
    if not is_update:
        return f"run: {report['output']['shape']['time']} dates"
    update = report.get("update") or {}
    parts = ["update:"]
    for what in ("added", "recomputed"):
        dates = [d[:10] for d in update.get(what) or []]
        if dates:
            shown = ", ".join(dates[:10]) + (f" and {len(dates) - 10} more" if len(dates) > 10 else "")
            parts.append(f"{what} {len(dates)} date{'s' * (len(dates) != 1)} ({shown});")
    if len(parts) > 1:
        return " ".join(parts).rstrip(";")
    return "update: what an interrupted command left in the working copy"
