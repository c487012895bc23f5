"""Reading the case study from object storage that answers like a real bucket: every request waits.

An S3 server (moto, ``tests/s3server.py``) on 127.0.0.1 holds the case-study tiles; a loopback proxy
(``tests/latencyproxy.py``) in front of it holds every request ``L`` ms before it forwards it (an S3
GET's first byte comes after ~20-30 ms). For each ``L`` in ``BENCH_LATENCIES_MS`` (default ``0,25``),
interleaved ``BENCH_REPEATS`` (default 3) times after a warm-up, whole processes each, every output
written to local disk:

* ``pipeline local``: ``pipeline run configs/casestudy.yaml --workers 2`` from local disk (once per
  round, not per latency: the reference);
* ``pipeline s3``: the same tiles from ``s3://bench/tiles/**/*.tif`` through the proxy, as a new user
  runs it (no tile index kept: the headers are read each run), the project's defaults otherwise;
* ``pipeline s3 io=1``: the same with ``execution.io_concurrency: 1`` (one request at a time per worker);
* ``pipeline s3 (baseline)``: with ``BENCH_BASELINE_TREE`` set, that checkout's ``pipeline s3``;
* ``pipeline s3 small ranges``: the same with GDAL reading in small ranges (``pipeline.storage.gdal.SMALL_RANGES``
  in ``inputs.gdal_env``: 32 KB at open, 256 KB chunks, a request per block range of a window);
* ``odc-stac 2`` / ``odc-stac 8``: ``odc.stac.load`` of STAC items whose assets are the ``s3://`` URLs
  (GDAL's ``/vsis3/``, odc's cloud defaults), ``to_zarr`` locally on 2 and 8 Dask threads;
* ``gdalwarp``: per band and date over ``/vsis3/``, 2 processes at a time (bench/peers.py's commands);
* ``floor``: the harness's own bound, the GETs the last ``pipeline s3`` run made (the proxy's log),
  issued again by a plain client (obstore) with 64 in flight, bodies discarded.

Prints the medians, the requests each run made (the proxy's count: every GET, headers and listing
included) and the most it held at once, the ratios the targets are stated in, and the pipeline's own
view of each run (its report's read stage, requests, in-flight and p50); writes ``bench/results/s3-latency.json``.
Needs the ``bench`` extra (odc-stac) and ``gdalwarp`` (``make bench-s3`` installs both).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import peers
from save import run_args, save_json  # noqa: E402  (bench/ is on sys.path when a script runs)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from pipeline.storage.gdal import SMALL_RANGES  # noqa: E402
from tests.latencyproxy import LatencyProxy  # noqa: E402
from tests.s3server import TEST_CREDENTIALS, start_moto, upload_tree  # noqa: E402

CONFIG = os.path.join(ROOT, "configs", "casestudy.yaml")
FIXTURE = os.path.join(ROOT, "data_fixtures", "casestudy")
OUT = os.path.join(ROOT, "out", "s3latency")
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
LATENCIES_MS = [float(x) for x in os.environ.get("BENCH_LATENCIES_MS", "0,25").split(",")]
ONLY = set(filter(None, os.environ.get("BENCH_ONLY", "").split(",")))
"""Run only these tools (names as printed, e.g. ``pipeline s3,floor``); all by default."""
BASELINE = os.environ.get("BENCH_BASELINE_TREE")
"""Another checkout of the project (``git worktree add /tmp/base COMMIT``, its compiled kernels copied in):
its ``pipeline s3`` run as a row of its own, ``pipeline s3 (baseline)``."""
BUCKET = "bench"
FLOOR_IN_FLIGHT = 64

ODC_SCRIPT = r"""
import json, sys, dask, pystac, odc.stac, zarr
from affine import Affine
from odc.geo.geobox import GeoBox
grid = json.load(open(sys.argv[1])); items = [pystac.Item.from_dict(d) for d in json.load(open(sys.argv[2]))]
endpoint, threads = sys.argv[4], int(sys.argv[5])
odc.stac.configure_rio(cloud_defaults=True, AWS_S3_ENDPOINT=endpoint.split("://", 1)[1], AWS_HTTPS="NO",
                       AWS_VIRTUAL_HOSTING="FALSE")
gbox = GeoBox(tuple(grid["shape"]), Affine(*grid["transform"]), grid["crs"])
cfg = {"*": {"assets": {"*": {"nodata": 0, "data_type": "uint16"}}}}
ds = odc.stac.load(items, geobox=gbox, groupby="solar_day", resampling="average", chunks={"x": 512, "y": 512},
                   stac_cfg=cfg, preserve_original_order=True, dtype="uint16")
enc = {v: {"compressors": [zarr.codecs.ZstdCodec(level=3)]} for v in ds.data_vars}
with dask.config.set(scheduler="threads", num_workers=threads):
    ds.to_zarr(sys.argv[3], mode="w", zarr_format=3, consolidated=False, encoding=enc)
"""

GDAL_S3 = {
    "GDAL_DISABLE_READDIR_ON_OPEN": "EMPTY_DIR",
    "CPL_VSIL_CURL_ALLOWED_EXTENSIONS": ".tif",
    "AWS_HTTPS": "NO",
    "AWS_VIRTUAL_HOSTING": "FALSE",
}
"""What a user sets to point gdalwarp at an S3-compatible endpoint (plus ``AWS_S3_ENDPOINT``)."""


def _pipeline(out: str, report: str, sets: tuple[str, ...], tree: str = ROOT) -> Callable[[], dict[str, Any]]:
    def go() -> dict[str, Any]:
        args = [sys.executable, "-m", "pipeline", *run_args(CONFIG, out, report, sets=sets)]
        r = subprocess.run(args, cwd=tree, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"pipeline exit {r.returncode}: {r.stderr[-3000:]}")
        with open(report) as f:
            return dict(json.load(f))

    return go


def _odc(items: str, endpoint: str, threads: int, out: str) -> Callable[[], dict[str, Any]]:
    cmd = [sys.executable, "-c", ODC_SCRIPT, f"{OUT}/grid.json", items, out, endpoint, str(threads)]

    def go() -> dict[str, Any]:
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(r.stderr[-3000:])
        return {}

    return go


def _gdalwarp(grid: dict, tiles: list[dict], endpoint: str, out: str) -> Callable[[], dict[str, Any]]:
    remote = [{**t, "path": f"/vsis3/{BUCKET}/tiles/{os.path.relpath(t['path'], FIXTURE)}"} for t in tiles]
    env = {**GDAL_S3, "AWS_S3_ENDPOINT": endpoint.split("://", 1)[1]}

    def go() -> dict[str, Any]:
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            peers.run_gdal(grid, remote, out)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        return {}

    return go


def _floor(endpoint: str, log: list[tuple[str, str, str]]) -> Callable[[], dict[str, Any]]:
    """The logged GETs again, ``FLOOR_IN_FLIGHT`` at a time, by obstore (Rust, async): what the harness
    serves when the client waits for nothing else."""
    from obstore.store import S3Store

    store = S3Store(
        BUCKET,
        endpoint=endpoint,
        region="us-east-1",
        client_options={"allow_http": True},
        access_key_id=TEST_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        secret_access_key=TEST_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        virtual_hosted_style_request=False,
    )
    gets = []
    for method, target, rng in log:
        path = target.split("?", 1)[0].split(f"/{BUCKET}/", 1)[-1]
        if method != "GET" or not path or "/" not in target.lstrip("/"):
            continue
        if rng.startswith("bytes="):
            a, _, b = rng[6:].partition("-")
            gets.append((path, int(a), int(b) + 1 if b else None))
        else:
            gets.append((path, None, None))

    async def fetch_all() -> int:
        import obstore

        gate = asyncio.Semaphore(FLOOR_IN_FLIGHT)

        async def one(path: str, start: int | None, end: int | None) -> int:
            async with gate:
                if start is None:
                    r = await obstore.get_async(store, path)
                    return len(await r.bytes_async())
                if end is None:
                    r = await obstore.get_async(store, path, options={"range": {"offset": start}})
                    return len(await r.bytes_async())
                return len(await obstore.get_range_async(store, path, start=start, end=end))

        return sum(await asyncio.gather(*(one(*g) for g in gets)))

    def go() -> dict[str, Any]:
        got = asyncio.run(fetch_all())
        return {"requests": len(gets), "bytes": got}

    return go


def _summary(report: dict[str, Any]) -> str:
    n = report.get("network") or {}
    st = report.get("stages") or {}
    fl = n.get("in_flight") or {}
    lat = (n.get("latency_ms") or {}).get("p50")
    io = (report.get("io") or {}).get("concurrency")
    parts = [f"read {st.get('read', 0):.2f} s", f"index {st.get('index', 0):.2f} s"]
    if n:
        parts.append(f"{n.get('requests', 0)} requests")
    if lat is not None:
        parts.append(f"p50 {lat:.0f} ms")
    if fl.get("mean") is not None:
        parts.append(f"in flight mean {fl.get('mean', 0):.1f} max {fl.get('max', 0)}")
    if io:
        parts.append(f"io_concurrency {io}")
    return ", ".join(parts)


def main() -> None:
    if not os.path.isdir(os.path.join(FIXTURE, "2024-06-11")):
        sys.exit("no case-study fixture: make fixtures")
    if shutil.which("gdalwarp") is None:
        sys.exit("gdalwarp not found: install Debian's gdal-bin (make bench-s3 does)")
    os.makedirs(OUT, exist_ok=True)
    os.environ.update(TEST_CREDENTIALS)  # moto accepts any; every process here gets them from its environment
    grid, tiles = peers.grid_and_tiles()
    with open(f"{OUT}/grid.json", "w") as f:
        json.dump(grid, f)
    with start_moto(lean=False) as server:
        client: Any = server.client()
        client.create_bucket(Bucket=BUCKET)
        urls = upload_tree(client, FIXTURE, BUCKET, "tiles")
        s3_tiles = [{**t, "path": f"s3://{BUCKET}/tiles/{os.path.relpath(t['path'], FIXTURE)}"} for t in tiles]
        peers.write_stac(s3_tiles, f"{OUT}/items.json")
        proxies = {ms: LatencyProxy(server.endpoint_url, ms / 1e3).__enter__() for ms in LATENCIES_MS}
        tools: dict[str, Callable[[], dict[str, Any]]] = {
            "pipeline local": _pipeline(f"{OUT}/local.zarr", f"{OUT}/local.report.json", ())
        }
        s3_sets = ("inputs.paths=[s3://bench/tiles/**/*.tif]", "inputs.index=null")
        for ms, proxy in proxies.items():
            ep = proxy.url
            tag = f"@{ms:g}ms"
            sets = (*s3_sets, f"storage.endpoint_url={ep}")
            tools[f"pipeline s3 {tag}"] = _pipeline(f"{OUT}/s3-{ms:g}.zarr", f"{OUT}/s3-{ms:g}.report.json", sets)
            tools[f"pipeline s3 io=1 {tag}"] = _pipeline(
                f"{OUT}/s3io1-{ms:g}.zarr", f"{OUT}/s3io1-{ms:g}.report.json", (*sets, "execution.io_concurrency=1")
            )
            if BASELINE:
                tools[f"pipeline s3 (baseline) {tag}"] = _pipeline(
                    f"{OUT}/s3base-{ms:g}.zarr", f"{OUT}/s3base-{ms:g}.report.json", sets, BASELINE
                )
            small = "inputs.gdal_env={" + ", ".join(f"{k}: {v}" for k, v in SMALL_RANGES.items()) + "}"
            tools[f"pipeline s3 small ranges {tag}"] = _pipeline(
                f"{OUT}/s3small-{ms:g}.zarr", f"{OUT}/s3small-{ms:g}.report.json", (*sets, small)
            )
            for threads in (2, 8):
                tools[f"odc-stac {threads} {tag}"] = _odc(
                    f"{OUT}/items.json", ep, threads, f"{OUT}/odc{threads}-{ms:g}.zarr"
                )
            tools[f"gdalwarp {tag}"] = _gdalwarp(grid, tiles, ep, f"{OUT}/gdal-{ms:g}")
        if ONLY:
            tools = {k: v for k, v in tools.items() if k.rsplit(" @", 1)[0] in ONLY or k in ONLY}
        reports: dict[str, dict[str, Any]] = {}
        floors: dict[str, Callable[[], dict[str, Any]]] = {}
        for name, fn in tools.items():  # warm-up; the floor replays the warm-up's GETs
            proxy = next((p for ms, p in proxies.items() if name.endswith(f"@{ms:g}ms")), None)
            if proxy is not None:
                proxy.clear()
            reports[name] = fn()
            if proxy is not None and name.startswith("pipeline s3 @"):
                floors[f"floor {name.rsplit(' ', 1)[1]}"] = _floor(proxy.url, list(proxy.log))
        if not ONLY or "floor" in ONLY:
            tools.update(floors)
        times: dict[str, list[float]] = {k: [] for k in tools}
        peaks: dict[str, list[int]] = {k: [] for k in tools}
        gets: dict[str, list[int]] = {k: [] for k in tools}
        for _ in range(REPEATS):
            for name, fn in tools.items():
                proxy = next((p for ms, p in proxies.items() if name.endswith(f"@{ms:g}ms")), None)
                if proxy is not None:
                    proxy.clear()
                t = time.perf_counter()
                got = fn()
                times[name].append(time.perf_counter() - t)
                if got:
                    reports[name] = got
                if proxy is not None:
                    peaks[name].append(proxy.in_flight_max)
                    gets[name].append(len(proxy.log))
        for p in proxies.values():
            p.__exit__()
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{len(urls)} input files in the bucket; {REPEATS} interleaved runs after a warm-up; outputs to local disk")
    print(f"{'run':<34}{'median s':>10}{'requests':>10}{'peak':>6}   runs / the run's own report")
    for k, v in med.items():
        peak = max(peaks[k]) if peaks[k] else ""
        n = int(statistics.median(gets[k])) if gets[k] else ""
        print(f"{k:<34}{v:10.2f}{n:>10}{peak:>6}   " + " ".join(f"{x:.2f}" for x in times[k]))
        if k.startswith("pipeline"):
            print(f"{'':<34}{'':>26}   {_summary(reports[k])}")
        elif k.startswith("floor"):
            print(f"{'':<34}{'':>26}   {reports[k]['requests']} GETs, {reports[k]['bytes'] / 1e6:.1f} MB")
    ratios: dict[str, float] = {}
    local = med.get("pipeline local")
    for ms in LATENCIES_MS:
        tag = f"@{ms:g}ms"
        ours = med.get(f"pipeline s3 {tag}")
        if ours is None:
            continue
        for peer in (f"odc-stac 8 {tag}", f"odc-stac 2 {tag}", f"gdalwarp {tag}"):
            if peer in med:
                ratios[f"pipeline s3 {tag} / {peer}"] = ours / med[peer]
        floor = med.get(f"floor {tag}")
        if floor is not None and local is not None:
            ratios[f"pipeline s3 {tag} / (floor + local)"] = ours / (floor + local)
        if local is not None:
            ratios[f"pipeline s3 {tag} / local"] = ours / local
    for k, r in ratios.items():
        print(f"{k}: {r:.2f}")
    save_json(
        "s3-latency",
        {
            "latencies_ms": LATENCIES_MS,
            "runs": times,
            "medians": med,
            "proxy_peak_in_flight": {k: max(v) if v else None for k, v in peaks.items()},
            "proxy_requests": {k: statistics.median(v) if v else None for k, v in gets.items()},
            "ratios": ratios,
            "reports": {
                k: {"stages": r.get("stages"), "network": r.get("network"), "io": r.get("io")}
                for k, r in reports.items()
                if k.startswith("pipeline")
            },
        },
    )


if __name__ == "__main__":
    main()
