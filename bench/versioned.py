"""What ``output.engine: icechunk`` costs against ``zarr``: ``python bench/versioned.py [DATES]``.

A cube of ``DATES`` dates (default 10) of the small preset (:mod:`update`'s inputs), made by ``pipeline.run``
with each engine; then one date added by ``pipeline.update``; then, for the repository, ``pipeline.rollback``
to the run's commit. Side by side and interleaved, ``BENCH_REPEATS`` times (default 3), medians; the
commit's share (the copy of the changed objects into the repository and the commit) is timed around
:func:`pipeline.store.icechunk_engine.commit_cube`. Also: the bytes on disk of each (the repository keeps a
plain Zarr working copy beside its own chunks). Writes ``bench/results/versioned.json``.

``python bench/versioned.py --forks``: why the engine does not use Icechunk's fork/merge: two forks that
each create the same array and write half of its chunks, merged and committed, read back.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from save import save_json  # noqa: E402
from update import config, make_inputs  # noqa: E402

import pipeline  # noqa: E402
import pipeline.store.icechunk_engine as engine  # noqa: E402
from pipeline.tools.fixtures import write_fixtures  # noqa: E402

REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))


def du(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def main() -> None:
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

    mem = zarr.storage.MemoryStore()
    zarr.create_group(mem).create_array("a", shape=(4,), chunks=(1,), dtype="i2")[:] = [1, 2, 3, 4]

    async def objects() -> dict[str, bytes]:
        return {k: (await mem.get(k, default_buffer_prototype())).to_bytes() async for k in mem.list()}

    objs = asyncio.run(objects())
    meta = sorted((k for k in objs if k.endswith("zarr.json")), key=lambda k: k.count("/"))
    chunks = sorted(k for k in objs if not k.endswith("zarr.json"))
    icechunk.set_logs_filter("error")
    folder = tempfile.TemporaryDirectory()
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(folder.name))
    session = repo.writable_session("main")
    done = []
    for i in range(2):
        fork = pickle.loads(pickle.dumps(session.fork()))  # as a worker receives it

        async def put(fork: Any = fork, i: int = i) -> None:
            for k in [*meta, *chunks[i::2]]:
                await fork.store.set(k, default_buffer_prototype().buffer.from_bytes(objs[k]))

        asyncio.run(put())
        done.append(pickle.loads(pickle.dumps(fork)))  # as the driver gets it back
    session.merge(*done)
    session.commit("two forks")
    got = zarr.open_array(repo.readonly_session(branch="main").store, path="a")[:]
    print(f"icechunk {icechunk.__version__}: wrote [1 2 3 4] through 2 forks, read back {got}")
    fork = repo.writable_session("main").fork()  # a fork of the commit above: array "a" of 4 chunks
    for key in ("a/c/4", "b/c/0"):  # a chunk beyond the committed shape; one of an array not committed
        try:
            asyncio.run(fork.store.set(key, default_buffer_prototype().buffer.from_bytes(objs["a/c/0"])))
            print(f"a fork takes {key}")
        except Exception as e:  # noqa: BLE001 - what Icechunk says is the measurement
            print(f"a fork refuses {key}: {str(e).splitlines()[0].strip()}")
    folder.cleanup()


if __name__ == "__main__":
    forks() if sys.argv[1:] == ["--forks"] else main()
