"""How a STAC run learns its files' overviews: one header per (collection, band, shape) group (what the
pipeline does) against opening every asset, and the glob path's header reads (each local file's first
bytes parsed, as the pipeline does, against GDAL's open of every file), on the case-study fixture (192
COGs). Interleaved repeats, medians of the index stage.

    .venv/bin/python -W ignore bench/stac_overviews.py      # BENCH_REPEATS=5 by default

Learning the overviews inside the tasks instead would need each task to re-plan its windows at the
level it found (the windows are planned at a level before any task runs), so it is not measured as a
run here: its cost floor is the per-asset level opens the "every asset opened" row shows, spread over
the tasks.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    from pipeline.config import Config
    from pipeline.inputs.catalog import build_catalog
    from pipeline.tools.fixtures import write_fixtures
    from pipeline.tools.stac_items import items_from_files, write_item_collection

    data = ROOT / "data_fixtures" / "casestudy"
    if not (data / "2024-06-11").exists():
        write_fixtures(data, "casestudy")
    files = sorted(str(p) for p in data.glob("*/*.tif"))
    repeats = int(os.environ.get("BENCH_REPEATS", "5"))
    with tempfile.TemporaryDirectory() as tmp:
        with_proj = write_item_collection(items_from_files(files), os.path.join(tmp, "items.json"))
        bare = write_item_collection(
            items_from_files(files, projection=False, raster=False), os.path.join(tmp, "bare.json")
        )
        common = {"grid": {"crs": "EPSG:32632", "resolution": 20}, "output": {"path": os.path.join(tmp, "o.zarr")}}
        configs = {
            "STAC, one header per group (the pipeline)": Config(inputs={"stac": with_proj}, **common),
            "STAC, every asset opened": Config(inputs={"stac": bare}, **common),
            "glob, every file opened": Config(
                inputs={
                    "paths": [str(data / "**" / "*.tif")],
                    "pattern": r"(?P<date>\d{4}-\d{2}-\d{2})/(?P<tile>[^/]+)_(?P<band>[^/_.]+)\.tif$",
                },
                **common,
            ),
        }
        import pipeline.inputs.headers as headers_module

        parsed = headers_module.local_header
        configs["STAC, one header per group, by GDAL"] = configs["STAC, one header per group (the pipeline)"]
        configs["STAC, every asset opened by GDAL"] = configs["STAC, every asset opened"]
        configs["glob, every file opened by GDAL"] = configs["glob, every file opened"]
        times: dict[str, list[float]] = {k: [] for k in configs}
        cpus: dict[str, list[float]] = {k: [] for k in configs}
        headers: dict[str, int] = {}
        for _ in range(repeats):
            for name, cfg in configs.items():
                by_gdal = "by GDAL" in name  # the header as GDAL opens it, with its level sizes
                headers_module.local_header = (lambda p: headers_module.gdal_header(p, p)) if by_gdal else parsed  # type: ignore[assignment]
                t0, c0 = time.perf_counter(), time.process_time()
                catalog = build_catalog(cfg.inputs, cfg.storage)
                times[name].append(time.perf_counter() - t0)
                cpus[name].append(time.process_time() - c0)
                headers[name] = catalog.headers_read
        headers_module.local_header = parsed
    out = {}
    for name, ts in times.items():
        med, cpu = statistics.median(ts), statistics.median(cpus[name])
        out[name] = {"index_s": round(med, 3), "cpu_s": round(cpu, 3), "headers_read": headers[name]}
        print(f"{name:45s} {med * 1e3:8.1f} ms  {cpu * 1e3:8.1f} ms CPU  {headers[name]:4d} headers")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
