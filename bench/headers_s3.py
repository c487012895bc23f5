"""Indexing from a bucket: how fast the headers of many COGs are read through a store 25 ms away.

An S3 server (moto) on 127.0.0.1 holds ``BENCH_FILES`` (default 2,048) objects: the case study's COGs
copied under new keys (``s3://bench/h/<date>/T<n>_<band>.tif``); a loopback proxy holds every request
``BENCH_LATENCY_MS`` (default 25) ms. The headers are read as `pipeline index` reads them (the tile
index's source, :func:`pipeline.inputs.files.files_catalog`, in this process), at the default
concurrency and at 8 at a time (the index's old setting), interleaved ``BENCH_REPEATS`` (default 2)
times. Printed per setting: headers per second, this process's CPU per header and the S3 server's
CPU per request (both processes share this machine's 2 cores), and the projection to the case study's
192,000 files at the measured rate. Writes ``bench/results/headers-s3.json``.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from save import save_json  # noqa: E402  (bench/ is on sys.path when a script runs)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from tests.latencyproxy import LatencyProxy  # noqa: E402
from tests.s3server import TEST_CREDENTIALS, start_moto  # noqa: E402

FILES = int(os.environ.get("BENCH_FILES", "2048"))
LATENCY_MS = float(os.environ.get("BENCH_LATENCY_MS", "25"))
REPEATS = int(os.environ.get("BENCH_REPEATS", "2"))
FIXTURE = os.path.join(ROOT, "data_fixtures", "casestudy")
FULL_FILES = 192_000


def _upload(client: Any) -> None:
    sources = sorted(os.path.join(d, f) for d, _, fs in os.walk(FIXTURE) for f in fs if f.endswith(".tif"))
    blobs = [open(p, "rb").read() for p in sources]  # noqa: SIM115

    def put(i: int) -> None:
        src = sources[i % len(sources)]
        band = os.path.basename(src).rsplit("_", 1)[1]
        date = os.path.basename(os.path.dirname(src))
        client.put_object(Bucket="bench", Key=f"h/{date}/T{i:05d}_{band}", Body=blobs[i % len(blobs)])

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, range(FILES)))


def main() -> None:
    if not os.path.isdir(os.path.join(FIXTURE, "2024-06-11")):
        sys.exit("no case-study fixture: make fixtures")
    os.environ.update(TEST_CREDENTIALS)
    import psutil

    from pipeline.config import Config
    from pipeline.inputs.files import files_catalog, header_threads

    with start_moto(lean=False) as server:
        client: Any = server.client()
        client.create_bucket(Bucket="bench")
        _upload(client)
        moto = psutil.Process(server.process.pid)
        with LatencyProxy(server.endpoint_url, LATENCY_MS / 1e3) as proxy:
            base = {
                "inputs": {
                    "paths": ["s3://bench/h/**/*.tif"],
                    "pattern": r"(?P<date>\d{4}-\d{2}-\d{2})/(?P<tile>[^/]+)_(?P<band>[^/_.]+)\.tif$",
                },
                "storage": {"endpoint_url": proxy.url},
                "grid": {"crs": "EPSG:32632", "resolution": 20},
                "output": {"path": os.path.join(ROOT, "out", "headers.zarr")},
            }
            settings = {
                "default": Config(**base),
                "8 at a time": Config(**{**base, "execution": {"io_concurrency": 8}}),
            }
            rows: dict[str, list[dict[str, float]]] = {k: [] for k in settings}
            for _ in range(REPEATS):
                for name, config in settings.items():
                    proxy.clear()
                    m0 = sum(moto.cpu_times()[:2])
                    c0, t0 = time.process_time(), time.perf_counter()
                    catalog = files_catalog(
                        config.inputs, config.storage, io_concurrency=config.execution.io_concurrency
                    )
                    wall = time.perf_counter() - t0
                    cpu = time.process_time() - c0
                    server_cpu = sum(moto.cpu_times()[:2]) - m0
                    n = len(catalog.tiles)
                    if n != FILES:
                        sys.exit(f"{n} headers of {FILES} read ({len(catalog.skipped)} skipped)")
                    rows[name].append(
                        {
                            "wall_s": wall,
                            "headers_per_s": n / wall,
                            "cpu_ms_per_header": cpu / n * 1e3,
                            "server_cpu_ms_per_request": server_cpu / max(len(proxy.log), 1) * 1e3,
                            "requests": len(proxy.log),
                            "peak_in_flight": proxy.in_flight_max,
                            "threads": header_threads(config.execution.io_concurrency),
                        }
                    )
    print(f"{FILES} COG headers from a bucket {LATENCY_MS:g} ms away; {REPEATS} interleaved runs, medians")
    print(
        f"{'setting':<14}{'threads':>8}{'wall s':>8}{'headers/s':>11}{'CPU ms/hdr':>12}{'server ms/req':>15}"
        f"{'requests':>10}{'peak':>6}{'192,000 in':>12}"
    )
    med: dict[str, dict[str, float]] = {}
    for name, runs in rows.items():
        m = med[name] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        full = FULL_FILES / m["headers_per_s"]
        print(
            f"{name:<14}{m['threads']:8.0f}{m['wall_s']:8.2f}{m['headers_per_s']:11.0f}{m['cpu_ms_per_header']:12.2f}"
            f"{m['server_cpu_ms_per_request']:15.2f}{m['requests']:10.0f}{m['peak_in_flight']:6.0f}{full:11.0f}s"
        )
    d = med["default"]
    own = 2 / (d["cpu_ms_per_header"] / 1e3)  # this process alone on both cores
    print(
        f"at the default: 192,000 headers in {FULL_FILES / d['headers_per_s']:.0f} s at the measured rate; "
        f"the indexer's own CPU ({d['cpu_ms_per_header']:.2f} ms a header) bounds it at {own:.0f}/s on 2 cores "
        f"({FULL_FILES / own:.0f} s), the S3 server's ({d['server_cpu_ms_per_request']:.2f} ms a request) "
        "shares those cores here"
    )
    save_json("headers-s3", {"files": FILES, "latency_ms": LATENCY_MS, "runs": rows, "medians": med})


if __name__ == "__main__":
    main()
