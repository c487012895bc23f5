"""What adding one date to a cube costs, against the cube's size: ``make bench-update``.

Cubes of 1, 10 and 40 dates of the small preset (each date a copy of one of its dates' 16 tiles), each made
once by ``pipeline.run``; then, side by side and interleaved, ``BENCH_REPEATS`` times (default 3) on a fresh
copy of that cube:

* ``pipeline.update`` adding one date (in this process, 2 threads), with and without a Parquet tile index
  (``inputs.index``, refreshed by the update: only the new files' headers are read);
* a full ``pipeline.run`` over the same N+1 dates (what an update saves).

Per row: the medians of wall time, the update's stages (index = listing and headers, plan = the whole inputs'
plan plus the cube's record and the work's plan), chunks written, and the objects of the store the update
read before its tasks (counted at the store layer's ``read_bytes``). Writes ``bench/results/update.json``.
"""

from __future__ import annotations

import glob
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from save import save_json  # noqa: E402

import pipeline  # noqa: E402
from pipeline.config import validate  # noqa: E402
from pipeline.tools.fixtures import write_fixtures  # noqa: E402

SIZES = (1, 10, 40)
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
PATTERN = r"(?P<date>\d{4}-\d{2}-\d{2})/(?P<tile>[^/]+)_(?P<band>[^/_.]+)\.tif$"


def make_inputs(small: str, folder: str, n: int) -> None:
    """``n`` dates, 2024-01-01 on, alternating copies of the preset's two dates."""
    dates = sorted(os.listdir(small))
    for i in range(n):
        day = time.strftime("%Y-%m-%d", time.gmtime(1704067200 + 86400 * 3 * i))
        os.makedirs(os.path.join(folder, day))
        for f in glob.glob(os.path.join(small, dates[i % 2], "*.tif")):
            shutil.copy2(f, os.path.join(folder, day))


def config(inputs: str, out: str, index: str | None = None) -> Any:
    return validate(
        {
            "inputs": {"paths": [f"{inputs}/**/*.tif"], "pattern": PATTERN, "index": index},
            "grid": {"crs": "EPSG:32632", "resolution": 20},
            "output": {"path": out, "chunks": {"y": 128, "x": 128}},
            "execution": {"scheduler": "threads", "workers": 2, "partition_mb": 1},
        }
    )


class Reads:
    """Counts the store layer's object reads (the cube's metadata, record and journal)."""

    def __init__(self) -> None:
        import pipeline.store.existing as existing
        import pipeline.store.record as record

        self.n = 0
        self.mods = (existing, record)
        self.real = existing.read_bytes

        def counted(store: Any, key: str) -> bytes | None:
            self.n += 1
            return self.real(store, key)

        for m in self.mods:
            m.read_bytes = counted  # type: ignore[attr-defined]

    def close(self) -> None:
        for m in self.mods:
            m.read_bytes = self.real  # type: ignore[attr-defined]


def timed_update(cfg: Any) -> dict[str, Any]:
    reads = Reads()
    t0 = time.perf_counter()
    try:
        r = pipeline.update(cfg)
    finally:
        reads.close()
    wall = time.perf_counter() - t0
    assert r.report["update"]["added"] and not r.report["update"]["recomputed"], r.report["update"]
    return {
        "wall_s": wall,
        "index_s": r.report["stages"]["index"],
        "plan_s": r.report["stages"]["plan"],
        "chunks_written": r.report["output"]["chunks_written"],
        "store_reads": reads.n,
    }


def main() -> None:
    root = tempfile.mkdtemp(prefix="bench-update-")
    small = os.path.join(root, "small")
    write_fixtures(small, "small", seed=0)
    rows = []
    try:
        for n in SIZES:
            inputs = os.path.join(root, f"in{n}")
            make_inputs(small, inputs, n)
            base = os.path.join(root, f"cube{n}.zarr")
            index = os.path.join(root, f"index{n}.parquet")
            pipeline.run(config(inputs, base, index))
            shutil.copytree(base, base + ".keep")
            make_inputs_day = os.path.join(inputs, "2030-01-01")
            os.makedirs(make_inputs_day)
            for f in glob.glob(os.path.join(small, sorted(os.listdir(small))[0], "*.tif")):
                shutil.copy2(f, make_inputs_day)
            got: dict[str, list[dict[str, Any]]] = {"update": [], "update, inputs.index": [], "full run": []}
            for _ in range(REPEATS):
                for name in got:
                    out = os.path.join(root, "work.zarr")
                    shutil.rmtree(out, ignore_errors=True)
                    if name == "full run":
                        t0 = time.perf_counter()
                        r = pipeline.run(config(inputs, out))
                        got[name].append(
                            {"wall_s": time.perf_counter() - t0, "chunks_written": r.report["output"]["chunks_written"]}
                        )
                        continue
                    shutil.copytree(base + ".keep", out)
                    idx = None
                    if name == "update, inputs.index":
                        idx = os.path.join(root, "work-index.parquet")
                        shutil.copy(index, idx)  # the index as the cube's run left it
                    got[name].append(timed_update(config(inputs, out, idx)))
            for name, runs in got.items():
                row = {"dates_in_cube": n, "what": name, "repeats": len(runs)}
                for k in runs[0]:
                    row[k] = statistics.median(r[k] for r in runs)
                rows.append(row)
                print(
                    f"{n:3d} dates  {name:<22} wall {row['wall_s']:6.2f} s"
                    + (f"  index {row['index_s']:5.2f} s  plan {row['plan_s']:5.2f} s" if "index_s" in row else "")
                    + f"  chunks {row['chunks_written']:5.0f}"
                    + (f"  store reads {row['store_reads']:.0f}" if "store_reads" in row else ""),
                    flush=True,
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for n in SIZES:
        mine = {r["what"]: r for r in rows if r["dates_in_cube"] == n}
        print(
            f"{n:3d} dates: update / full run {mine['update']['wall_s'] / mine['full run']['wall_s']:.2f}x, "
            f"with the index {mine['update, inputs.index']['wall_s'] / mine['full run']['wall_s']:.2f}x"
        )
    print(save_json("update", {"repeats": REPEATS, "rows": rows}))


if __name__ == "__main__":
    main()
