"""`pipeline plan` over 192,000 STAC items in stac-geoparquet, against odc-stac setting up the same load.

Writes synthetic Sentinel-2-like items (projection and raster extensions, UTM zones 31-33, three bands
B02/B04 at 10 m and B11 at 20 m, ``s3://`` hrefs) to stac-geoparquet once, then, each in a fresh
process timed from outside (wall, peak RSS from the kernel):

* ``pipeline plan CONFIG --json``: the grid and plan settings of ``bench/plan_scale.py`` (EPSG:32632,
  20 m, 512 px chunks, average), ``inputs.stac`` = the parquet file;
* odc-stac: the parquet read into pystac Items (rustac), then ``odc.stac.load(items, ..., chunks=...)``
  for the same grid (lazy: the Dask graph only, no pixel read).

odc-stac spends ~25 ms an item densifying footprints (odc-geo ``GeoBox.footprint``), over an hour for
192,000, so both tools are also timed side by side on the first ``STAC_ODC_ITEMS`` items (default 4800)
and only the pipeline on all of them. ``STAC_ITEMS`` (default 192000) sets the item count,
``STAC_ODC_TIMEOUT`` (default 900 s) bounds the odc-stac process. Writes ``bench/results/stac_scale.json``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from save import save_json  # noqa: E402  (bench/ is on sys.path when a script runs)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BANDS = {"B02": 10, "B04": 10, "B11": 20}
TILE_M = 10980
OVERLAP_M = 960
ZONES = (31, 32, 33)
GRID = {"crs": "EPSG:32632", "resolution": 20}
CHUNKS = 512


def make_items(count: int) -> list[dict]:
    """``count`` items: ZONES x dates x a square-ish block of tiles per zone, one item per (tile, date)."""
    import numpy as np
    from pyproj import Transformer

    dates = 16
    per_zone = count // (len(ZONES) * dates)
    nx = int(np.sqrt(per_zone))
    while per_zone % nx:
        nx -= 1
    ny = per_zone // nx
    step = TILE_M - OVERLAP_M
    items = []
    for zone in ZONES:
        epsg = 32600 + zone
        to_ll = Transformer.from_crs(f"EPSG:{epsg}", "EPSG:4326", always_xy=True)
        x0 = 500_000 - nx * step // 2
        y0 = 5_000_000 + ny * step // 2
        xs = x0 + np.arange(nx) * step
        ys = y0 - np.arange(ny) * step
        gx, gy = np.meshgrid(xs, ys)
        corners = [to_ll.transform(gx + dx, gy - dy) for dx, dy in ((0, 0), (TILE_M, 0), (0, TILE_M), (TILE_M, TILE_M))]
        lons = np.stack([c[0] for c in corners])
        lats = np.stack([c[1] for c in corners])
        bbox = np.stack([lons.min(0), lats.min(0), lons.max(0), lats.max(0)], axis=-1)
        for d in range(dates):
            day = np.datetime64("2024-06-01") + np.timedelta64(5 * d, "D")
            stamp = f"{day}T10:{30 + zone - 31:02d}:00Z"
            for j in range(ny):
                for i in range(nx):
                    tile = f"{zone}T{j:03d}{i:03d}"
                    item_id = f"S2A_{tile}_{str(day).replace('-', '')}_0_L2A"
                    b = [float(v) for v in bbox[j, i]]
                    x, y = float(xs[i]), float(ys[j])
                    assets = {}
                    for band, res in BANDS.items():
                        n = TILE_M // res
                        assets[band] = {
                            "href": f"s3://sentinel-cogs/sentinel-s2-l2a-cogs/{zone}/T/{j:03d}{i:03d}/{day}/"
                            f"{item_id}/{band}.tif",
                            "type": "image/tiff; application=geotiff; profile=cloud-optimized",
                            "roles": ["data"],
                            "proj:shape": [n, n],
                            "proj:transform": [float(res), 0.0, x, 0.0, -float(res), y],
                            "raster:bands": [{"data_type": "uint16", "nodata": 0, "scale": 0.0001, "offset": -0.1}],
                        }
                    items.append(
                        {
                            "type": "Feature",
                            "stac_version": "1.1.0",
                            "id": item_id,
                            "collection": "sentinel-2-l2a",
                            "stac_extensions": [
                                "https://stac-extensions.github.io/projection/v2.0.0/schema.json",
                                "https://stac-extensions.github.io/raster/v1.1.0/schema.json",
                            ],
                            "geometry": {
                                "type": "Polygon",
                                "coordinates": [[[b[0], b[1]], [b[2], b[1]], [b[2], b[3]], [b[0], b[3]], [b[0], b[1]]]],
                            },
                            "bbox": b,
                            "properties": {"datetime": stamp, "proj:code": f"EPSG:{epsg}"},
                            "links": [],
                            "assets": assets,
                        }
                    )
    return items


ODC = """
import json, sys, time
t0 = time.perf_counter()
import odc.stac, pystac, rustac
items = [pystac.Item.from_dict(d) for d in rustac.read_sync(sys.argv[1])["features"]]
t1 = time.perf_counter()
print(json.dumps({"read_items_s": t1 - t0}), flush=True)
ds = odc.stac.load(items, bands=sys.argv[2].split(","), crs=sys.argv[3], resolution=float(sys.argv[4]),
                   chunks={"x": int(sys.argv[5]), "y": int(sys.argv[5])}, groupby="solar_day")
t2 = time.perf_counter()
print(json.dumps({"load_s": t2 - t1, "dims": dict(ds.sizes)}))
"""


def timed(cmd: list[str], timeout: float | None = None) -> tuple[float, float, str, int]:
    """Wall seconds, peak RSS in MiB (GNU time's maximum resident set size; NaN if killed), stdout (what
    it printed before a timeout, too), exit code (124: timed out)."""
    t = time.perf_counter()
    try:
        r = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or ""
        return time.perf_counter() - t, float("nan"), out, 124
    wall = time.perf_counter() - t
    rss = next(int(line.split(":")[1]) for line in r.stderr.splitlines() if "Maximum resident set size" in line)
    return wall, rss / 1024, r.stdout, r.returncode


def _json_lines(text: str) -> dict:
    out: dict = {}
    for line in text.splitlines():
        if line.startswith("{"):
            out.update(json.loads(line))
    return out


def _plan(parquet: str, tmp: str) -> dict:
    import yaml

    config = os.path.join(tmp, f"{os.path.basename(parquet)}.yaml")
    with open(config, "w") as f:
        yaml.safe_dump(
            {
                "inputs": {"stac": parquet},
                "grid": GRID,
                "resampling": "average",
                "output": {"path": os.path.join(tmp, "out.zarr"), "chunks": {"y": CHUNKS, "x": CHUNKS}},
            },
            f,
        )
    wall, rss, out, rc = timed([sys.executable, "-m", "pipeline", "plan", config, "--json"])
    if rc:
        raise SystemExit(f"pipeline plan failed ({rc})")
    plan = json.loads(out)
    return {
        "assets": plan["inputs"]["files"],
        "process_s": wall,
        "peak_mib": rss,
        "driver_s": plan["driver_s"],
        "timings_s": plan["timings_s"],
        "headers_read": plan["inputs"]["headers_read"],
        "tasks": plan["tasks"],
        "windows": plan["windows"],
    }


def _odc(parquet: str, timeout: float) -> dict:
    wall, rss, out, rc = timed(
        [sys.executable, "-c", ODC, parquet, ",".join(BANDS), GRID["crs"], str(GRID["resolution"]), str(CHUNKS)],
        timeout,
    )
    return {"process_s": wall, "peak_mib": rss, "rc": rc, **_json_lines(out)}


def main() -> None:
    sys.path.insert(0, ROOT)
    from pipeline.tools.stac_items import write_geoparquet

    count = int(os.environ.get("STAC_ITEMS", "192000"))
    sub = min(count, int(os.environ.get("STAC_ODC_ITEMS", "4800")))
    timeout = float(os.environ.get("STAC_ODC_TIMEOUT", "900"))
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        items = make_items(count)
        full, part = os.path.join(tmp, "items.parquet"), os.path.join(tmp, "subset.parquet")
        write_geoparquet(items, full)
        write_geoparquet(items[:sub], part)
        del items
        row = {
            "items": count,
            "parquet_mb": os.path.getsize(full) / 1e6,
            "make_s": time.perf_counter() - t,
            "pipeline": _plan(full, tmp),
            "subset_items": sub,
            "subset_pipeline": _plan(part, tmp),
            "subset_odc_stac": _odc(part, timeout),
        }
    print(json.dumps(row, indent=1))
    p, sp, so = row["pipeline"], row["subset_pipeline"], row["subset_odc_stac"]
    print(f"\n{count} items ({p['assets']} assets), stac-geoparquet {row['parquet_mb']:.0f} MB")
    print(
        f"  pipeline plan, all items:  {p['process_s']:7.1f} s {p['peak_mib']:7.0f} MiB peak "
        f"(catalog {p['timings_s']['index']:.1f} s, plan {p['timings_s']['plan']:.1f} s)"
    )
    print(f"first {sub} items side by side:")
    print(f"  pipeline plan:             {sp['process_s']:7.1f} s {sp['peak_mib']:7.0f} MiB peak")
    print(
        f"  odc-stac (read + load):    {so['process_s']:7.1f} s {so['peak_mib']:7.0f} MiB peak "
        f"(pystac items {so.get('read_items_s', float('nan')):.1f} s, load {so.get('load_s', float('nan')):.1f} s)"
        + ("" if so["rc"] == 0 else f"  did not finish: exit {so['rc']}")
    )
    if so["rc"] == 0:
        per_item = so["load_s"] / sub
        print(
            f"  odc-stac load per item: {per_item * 1e3:.1f} ms; x {count} items: ~{per_item * count:.0f} s "
            "(extrapolated, not measured)"
        )
    save_json("stac_scale", row)


if __name__ == "__main__":
    main()
