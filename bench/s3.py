"""Cloud storage: this pipeline writing (and reading) a bucket against the local run and odc-stac.

An S3 server (moto, ``tests/s3server.py``) on loopback holds the case-study tiles; then, interleaved,
``BENCH_REPEATS`` (default 3) times after a warm-up, whole processes each:

* ``local->local``: ``pipeline run configs/casestudy.yaml --workers 2`` (the reference);
* ``local->s3``: the same tiles, the cube to ``s3://bench/…`` (one object per chunk);
* ``local->s3 sharded``: the same with ``output.shards`` of 2x2 chunks (one object per 4 chunks);
* ``s3->s3``: tiles read from ``s3://bench/tiles/**/*.tif`` (where this build reads s3:// inputs; else
  listed as not run, with the reason);
* ``odc-stac s3->s3``: ``odc.stac.load`` of STAC items whose assets are the same ``s3://`` URLs (GDAL's
  ``/vsis3/``), ``to_zarr`` into the bucket through zarr-python's ``ObjectStore``, 2 Dask threads.

First, the put path: one real encoded chunk put N times locally through obstore's ``LocalStore`` (what
the writer uses) and through ``open()`` + ``os.replace`` (the atomic alternative), interleaved.
Loopback has no latency worth the name, so what a bucket 10-100 ms away charges per request shows up
here only as the server's per-request CPU. Writes ``bench/results/s3.json``.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from save import run_args, save_json  # noqa: E402  (bench/ is on sys.path when a script runs)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from tests.s3server import TEST_CREDENTIALS, start_moto, upload_tree  # noqa: E402

CONFIG = os.path.join(ROOT, "configs", "casestudy.yaml")
OUT = os.path.join(ROOT, "out", "s3bench")
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
BUCKET = "bench"


def put_paths(n: int = 300) -> dict[str, float]:
    """ms per atomic put of one case-study-sized chunk (512x512 uint16, zstd 3): obstore vs open()."""
    import numcodecs
    import numpy as np
    import obstore
    from obstore.store import LocalStore

    rng = np.random.default_rng(0)
    payload = bytes(numcodecs.Zstd(level=3).encode(rng.integers(0, 3000, (512, 512)).astype("uint16")))
    folder = tempfile.mkdtemp(dir=os.path.join(ROOT, "out"))
    store = LocalStore(os.path.join(folder, "obstore"), mkdir=True)

    def by_obstore(i: int) -> None:
        obstore.put(store, f"c/0/{i // 32}/{i % 32}", payload)

    def by_open(i: int) -> None:
        name = os.path.join(folder, "open", "c", "0", str(i // 32), str(i % 32))
        os.makedirs(os.path.dirname(name), exist_ok=True)
        with open(f"{name}.tmp", "wb") as f:
            f.write(payload)
        os.replace(f"{name}.tmp", name)

    times: dict[str, list[float]] = {"obstore LocalStore": [], "open + os.replace": []}
    for rep in range(5):
        for name, fn in (("obstore LocalStore", by_obstore), ("open + os.replace", by_open)):
            t = time.perf_counter()
            for i in range(n):
                fn(rep * n + i)
            times[name].append((time.perf_counter() - t) / n * 1e3)
    shutil.rmtree(folder)
    return {k: statistics.median(v) for k, v in times.items()}


def pipeline_cmd(out: str, endpoint: str, *sets: str) -> Callable[[], dict]:
    report = os.path.join(OUT, f"{abs(hash((out, sets)))}.report.json")

    def go() -> dict:
        args = [
            sys.executable,
            "-m",
            "pipeline",
            *run_args(CONFIG, out, report, sets=(f"storage.endpoint_url={endpoint}", *sets)),
        ]
        r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
        if r.returncode not in (0, 3):
            raise RuntimeError(r.stderr[-2000:])
        with open(report) as f:
            return json.load(f)

    return go


ODC_SCRIPT = r"""
import json, os, sys, dask, pystac, odc.stac, zarr, zarr.storage
from affine import Affine
from odc.geo.geobox import GeoBox
from pipeline.config import StorageConfig
from pipeline.storage import object_store
grid = json.load(open(sys.argv[1])); items = [pystac.Item.from_dict(d) for d in json.load(open(sys.argv[2]))]
endpoint = sys.argv[4]
odc.stac.configure_rio(cloud_defaults=True, AWS_S3_ENDPOINT=endpoint.split("://", 1)[1], AWS_HTTPS="NO",
                       AWS_VIRTUAL_HOSTING="FALSE")
gbox = GeoBox(tuple(grid["shape"]), Affine(*grid["transform"]), grid["crs"])
cfg = {"*": {"assets": {"*": {"nodata": 0, "data_type": "uint16"}}}}
ds = odc.stac.load(items, geobox=gbox, groupby="solar_day", resampling="average", chunks={"x": 512, "y": 512},
                   stac_cfg=cfg, preserve_original_order=True, dtype="uint16")
enc = {v: {"compressors": [zarr.codecs.ZstdCodec(level=3)]} for v in ds.data_vars}
store = zarr.storage.ObjectStore(object_store(sys.argv[3], StorageConfig(endpoint_url=endpoint)))
with dask.config.set(scheduler="threads", num_workers=2):
    ds.to_zarr(store, mode="w", zarr_format=3, consolidated=False, encoding=enc)
"""


def odc_items(endpoint: str) -> str:
    """peers.py's STAC items with each asset's href the tile's s3:// URL."""
    import peers

    grid, tiles = peers.grid_and_tiles()
    base = os.path.join(ROOT, "data_fixtures", "casestudy")
    for t in tiles:
        t["path"] = f"s3://{BUCKET}/tiles/{os.path.relpath(t['path'], base)}"
    with open(f"{OUT}/grid.json", "w") as f:
        json.dump(grid, f)
    peers.write_stac(tiles, f"{OUT}/items.json")
    return f"{OUT}/items.json"


def main() -> None:
    if not os.path.isdir(os.path.join(ROOT, "data_fixtures", "casestudy", "2024-06-11")):
        sys.exit("no case-study fixture: make fixtures")
    os.makedirs(OUT, exist_ok=True)
    os.environ.update(TEST_CREDENTIALS)  # moto accepts any; every process here gets them from its environment
    puts = put_paths()
    print("atomic local put of one 512x512 chunk: " + ", ".join(f"{k} {v:.2f} ms" for k, v in puts.items()))
    with start_moto(lean=False) as server:
        client: object = server.client()
        client.create_bucket(Bucket=BUCKET)  # type: ignore[attr-defined]
        urls = upload_tree(client, os.path.join(ROOT, "data_fixtures", "casestudy"), BUCKET, "tiles")
        ep = server.endpoint_url
        tools: dict[str, Callable[[], dict]] = {
            "local->local": pipeline_cmd(f"{OUT}/local.zarr", ep),
            "local->s3": pipeline_cmd(f"s3://{BUCKET}/out/local-in.zarr", ep),
            "local->s3 sharded": pipeline_cmd(
                f"s3://{BUCKET}/out/sharded.zarr", ep, "output.shards={y: 1024, x: 1024}"
            ),
        }
        # Its own tile index (objects keyed by ETag), as the local runs keep theirs: headers are read once.
        s3_inputs = ["inputs.paths=[s3://bench/tiles/**/*.tif]", f"inputs.index={OUT}/s3-tiles.parquet"]
        s3s3 = pipeline_cmd(f"s3://{BUCKET}/out/s3-in.zarr", ep, *s3_inputs)
        not_run: dict[str, str] = {}
        try:
            s3s3()
            tools["s3->s3"] = s3s3
        except RuntimeError as e:
            not_run["s3->s3"] = e.args[0].strip().splitlines()[-1]
        try:
            import odc.stac  # noqa: F401

            items = odc_items(ep)
            odc_run = [sys.executable, "-c", ODC_SCRIPT, f"{OUT}/grid.json", items, f"s3://{BUCKET}/out/odc.zarr", ep]

            def odc() -> dict:
                r = subprocess.run(odc_run, cwd=ROOT, capture_output=True, text=True)
                if r.returncode:
                    raise RuntimeError(r.stderr[-2000:])
                return {}

            tools["odc-stac s3->s3"] = odc
        except ImportError:
            not_run["odc-stac s3->s3"] = "odc-stac not installed: pip install -e '.[dev,bench]'"
        reports: dict[str, dict] = {}
        for name, fn in tools.items():  # warm-up
            reports[name] = fn()
        import psutil

        moto = psutil.Process(server.process.pid)

        def moto_cpu() -> float:
            c = moto.cpu_times()
            return float(c.user + c.system)

        times: dict[str, list[float]] = {k: [] for k in tools}
        server_s: dict[str, list[float]] = {k: [] for k in tools}
        for _ in range(REPEATS):
            for name, fn in tools.items():
                t, c = time.perf_counter(), moto_cpu()
                reports[name] = fn()
                times[name].append(time.perf_counter() - t)
                server_s[name].append(moto_cpu() - c)
    med = {k: statistics.median(v) for k, v in times.items()}
    ref = med["local->local"]
    print(f"{len(urls)} input files; {REPEATS} interleaved runs after a warm-up; 2 workers")
    server = {k: statistics.median(v) for k, v in server_s.items()}
    print(f"{'run':<20}{'median s':>10}{'vs local':>10}{'objects':>9}{'MB/object':>11}{'server CPU s':>14}   runs")
    for k, v in med.items():
        out = reports[k].get("output", {})
        n, size = out.get("objects"), out.get("objects_bytes")
        per = f"{size / n / 1e6:11.2f}" if n else f"{'':>11}"
        print(
            f"{k:<20}{v:10.2f}{v / ref:9.2f}x{n or '':>9}{per}{server[k]:14.2f}   "
            + " ".join(f"{x:.2f}" for x in times[k])
        )
    # The S3 server is a Python process on the same 2 cores: the CPU it spends serving a run is taken from
    # the run itself, which a real bucket (its own machines, 10-100 ms away) would not take.
    print("server CPU s: the moto server's CPU seconds during the run (taken from this machine's 2 cores)")
    for k, why in not_run.items():
        print(f"{k:<20} not run: {why}")
    network = {k: r.get("network") for k, r in reports.items() if r.get("network")}
    if not network:
        print("requests per input file, fetched/needed bytes: not in this build's report (no network section)")
    else:
        for k, n in network.items():
            print(
                f"{k}: {n['requests'] / len(urls):.1f} requests per input file, fetched/needed "
                f"{n['bytes_fetched'] / max(n['bytes_needed'], 1):.2f}"
            )
    if "odc-stac s3->s3" in med and "s3->s3" in med:
        print(f"s3->s3 / odc-stac s3->s3: {med['s3->s3'] / med['odc-stac s3->s3']:.2f} (target <= 0.5)")
    if "s3->s3" in med:
        print(f"s3->s3 / local->local: {med['s3->s3'] / ref:.2f} (target <= 1.5)")
    objects = {k: r.get("output", {}).get("objects") for k, r in reports.items()}
    save_json(
        "s3",
        {"puts_ms": puts, "runs": times, "medians": med, "server_cpu_s": server, "not_run": not_run},
    )
    save_json("s3-detail", {"network": network, "objects": objects})


if __name__ == "__main__":
    main()
