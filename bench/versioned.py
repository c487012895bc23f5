"""What ``output.engine: icechunk`` costs against ``zarr``: ``python bench/versioned.py [DATES]``.

A cube of ``DATES`` dates (default 10) of the small preset (:mod:`update`'s inputs), made by ``pipeline.run``
with each engine; then one date added by ``pipeline.update``; then, for the repository, ``pipeline.rollback``
to the run's commit. Side by side and interleaved, ``BENCH_REPEATS`` times (default 3), medians; the
commit's share (the copy of the changed objects into the repository and the commit) is timed around
:func:`pipeline.store.icechunk_engine.commit_cube`. Also: the bytes on disk of each (the repository keeps a
plain Zarr working copy beside its own chunks). Writes ``bench/results/versioned.json``.

``python bench/versioned.py --forks``: what Icechunk's fork/merge can carry, with whichever Icechunk is
installed (it needs only icechunk and zarr: ``python3.12 -m venv v && v/bin/pip install icechunk zarr``
runs it against 2.x): forks that each create the same array; chunks beyond the committed shape and of an
array not committed; a session with an uncommitted resize forked; and forks that each apply the same
resize. Each case prints what it read back and the commits it left on the branch.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))


def du(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def main() -> None:
    from save import save_json
    from update import config, make_inputs

    import pipeline
    import pipeline.store.icechunk_engine as engine
    from pipeline.tools.fixtures import write_fixtures

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    commits: list[float] = []
    real = engine.commit_cube

    def timed(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            commits.append(time.perf_counter() - t)

    engine.commit_cube = timed  # type: ignore[assignment]
    rows: dict[str, list[float]] = {}
    sizes: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        write_fixtures(os.path.join(tmp, "fx"), preset="small", seed=0)
        for r in range(REPEATS):
            inputs = os.path.join(tmp, f"in{r}")
            make_inputs(os.path.join(tmp, "fx"), inputs, n)
            for name in ("zarr", "icechunk"):
                cfg = config(inputs, os.path.join(tmp, f"{name}{r}"))
                cfg = cfg.model_copy(update={"output": cfg.output.model_copy(update={"engine": name})})
                t = time.perf_counter()
                first = pipeline.run(cfg).report["output"].get("snapshot")
                rows.setdefault(f"{name} run", []).append(time.perf_counter() - t)
                make_inputs_one(os.path.join(tmp, "fx"), inputs, n) if name == "zarr" else None
                t = time.perf_counter()
                pipeline.update(cfg)
                rows.setdefault(f"{name} update (+1 date)", []).append(time.perf_counter() - t)
                sizes[name] = du(cfg.output.path)
                if name == "icechunk":
                    rows.setdefault("icechunk commit of the run", []).append(commits[-2])
                    rows.setdefault("icechunk commit of the update", []).append(commits[-1])
                    t = time.perf_counter()
                    engine.rollback(cfg.output.path, None, first)
                    rows.setdefault("icechunk rollback to the run", []).append(time.perf_counter() - t)
    out = {k: statistics.median(v) for k, v in rows.items()}
    for k, v in out.items():
        print(f"{k:<34}{v:7.2f} s")
    for k, b in sizes.items():
        print(f"{k} bytes on disk after the update: {b:,}")
    save_json("versioned.json", {"dates": n, "repeats": REPEATS, "median_s": out, "bytes": sizes})


def make_inputs_one(small: str, inputs: str, n: int) -> None:
    """One more date after the ``n`` (the same tiles as :func:`update.make_inputs` would give it)."""
    import glob
    import shutil

    dates = sorted(os.listdir(small))
    day = time.strftime("%Y-%m-%d", time.gmtime(1704067200 + 86400 * 3 * n))
    os.makedirs(os.path.join(inputs, day))
    for f in glob.glob(os.path.join(small, dates[n % 2], "*.tif")):
        shutil.copy2(f, os.path.join(inputs, day))


def forks() -> None:
    import asyncio
    import pickle

    import icechunk
    import zarr
    from zarr.core.buffer import default_buffer_prototype

    def buf(data: bytes) -> Any:
        return default_buffer_prototype().buffer.from_bytes(data)

    mem = zarr.storage.MemoryStore()
    zarr.create_group(mem).create_array("a", shape=(4,), chunks=(1,), dtype="i2")[:] = [1, 2, 3, 4]

    async def objects() -> dict[str, bytes]:
        return {k: (await mem.get(k, default_buffer_prototype())).to_bytes() async for k in mem.list()}

    objs = asyncio.run(objects())
    meta = sorted((k for k in objs if k.endswith("zarr.json")), key=lambda k: k.count("/"))
    chunks = sorted(k for k in objs if not k.endswith("zarr.json"))
    icechunk.set_logs_filter("error")
    folder = tempfile.TemporaryDirectory()
    print(f"icechunk {icechunk.__version__}, zarr {zarr.__version__}, Python {sys.version.split()[0]}")

    def through_forks(session: Any, writes: list[list[tuple[str, bytes]]]) -> None:
        """Each list of (key, bytes) written by a fork of ``session``, pickled to and back as a worker
        gets it and returns it; then merged into ``session``."""
        done = []
        for keys in writes:
            fork = pickle.loads(pickle.dumps(session.fork()))

            async def put(fork: Any = fork, keys: list[tuple[str, bytes]] = keys) -> None:
                for k, data in keys:
                    await fork.store.set(k, buf(data))

            asyncio.run(put())
            done.append(pickle.loads(pickle.dumps(fork)))
        session.merge(*done)

    def commits(repo: Any) -> int:
        return len(list(repo.ancestry(branch="main")))

    def attempt(what: str, case: Any) -> None:
        try:
            print(f"{what}: {case()}")
        except Exception as e:  # noqa: BLE001 - what Icechunk says is the measurement
            print(f"{what}: refused: {type(e).__name__}: {str(e).strip().splitlines()[0][:160]}")

    def same_array_in_each() -> str:
        repo = icechunk.Repository.create(icechunk.local_filesystem_storage(f"{folder.name}/1"))
        session = repo.writable_session("main")
        through_forks(session, [[(k, objs[k]) for k in [*meta, *chunks[i::2]]] for i in range(2)])
        session.commit("two forks")
        return f"read back {zarr.open_array(repo.readonly_session(branch='main').store, path='a')[:]}"

    attempt("2 forks each create array a and write half of [1 2 3 4]", same_array_in_each)
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(f"{folder.name}/2"))
    session = repo.writable_session("main")
    for k in [*meta, *chunks]:
        asyncio.run(session.store.set(k, buf(objs[k])))
    session.commit("a = [1 2 3 4]")
    for key in ("a/c/4", "b/c/0"):  # a chunk beyond the committed shape; one of an array not committed
        fork = repo.writable_session("main").fork()
        attempt(f"a fork writes {key}", lambda fork=fork, key=key: asyncio.run(fork.store.set(key, buf(objs["a/c/0"]))))
    resized = next(v for k, v in objs.items() if k == "a/zarr.json").replace(b"4", b"6", 1)
    tip, before = repo.lookup_branch("main"), commits(repo)

    def dirty_fork() -> str:
        session = repo.writable_session("main")
        asyncio.run(session.store.set("a/zarr.json", buf(resized)))  # uncommitted: a resized to 6
        through_forks(session, [[("a/c/4", objs["a/c/0"])], [("a/c/5", objs["a/c/1"])]])
        snap = session.commit("a resized to 6 and its chunks 4, 5 written by 2 forks")
        parent = list(repo.ancestry(snapshot_id=snap))[1].id
        got = zarr.open_array(repo.readonly_session(branch="main").store, path="a")[:]
        return f"read back {got}; {commits(repo) - before} commit(s), its parent the old tip: {parent == tip}"

    attempt("a session with an uncommitted resize (4 -> 6) forked, 2 forks write chunks 4 and 5", dirty_fork)
    repo.reset_branch("main", tip)

    def resize_in_each() -> str:
        session = repo.writable_session("main")
        writes = [[("a/zarr.json", resized), (f"a/c/{4 + i}", objs[f"a/c/{i}"])] for i in range(2)]
        through_forks(session, writes)
        snap = session.commit("a resized to 6 by each of 2 forks, which write chunks 4 and 5")
        parent = list(repo.ancestry(snapshot_id=snap))[1].id
        got = zarr.open_array(repo.readonly_session(branch="main").store, path="a")[:]
        return f"read back {got}; {commits(repo) - before} commit(s), its parent the old tip: {parent == tip}"

    attempt("2 forks each apply the same resize (4 -> 6) and write chunk 4 or 5", resize_in_each)
    folder.cleanup()


if __name__ == "__main__":
    forks() if sys.argv[1:] == ["--forks"] else main()
