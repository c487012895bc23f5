"""Helpers the tests import (fixtures live in conftest.py)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

PATTERN = r"(?P<date>\d{4}-\d{2}-\d{2})/(?P<tile>[^/]+)_(?P<band>[^/_.]+)\.tif$"


def write_config(folder: Path, inputs_glob: str, **sections: Any) -> Path:
    """A config file in ``folder`` for the given input glob; sections override defaults."""
    raw: dict[str, Any] = {
        "inputs": {"paths": [inputs_glob], "pattern": PATTERN},
        "grid": {"crs": "EPSG:32632", "resolution": 20},
        "output": {"path": str(folder / "out.zarr"), "chunks": {"y": 128, "x": 128}},
        "execution": {"workers": 2, "partition_mb": 1},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict):
            raw[key] = raw[key] | value
        else:
            raw[key] = value
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def virtual_tiles(specs: list[tuple[str, float, float, int, int, float, str, str]]) -> Any:
    """A tile table of tiles with no files behind them, sorted by path (the fuse order), for planning
    tests: specs of (crs, x0, y0, width, height, res, band, date), north-up, nodata 0."""
    import numpy as np

    from pipeline.inputs.tiles import TABLE_COLUMNS, TileTable

    rows = [
        {
            "path": f"/virtual/{date}/{i:04d}_{band}.tif",
            "band": band,
            "tile": str(i),
            "date": np.datetime64(date),
            "crs": crs,
            "a": res,
            "b": 0.0,
            "c": x0,
            "d": 0.0,
            "e": -res,
            "f": y0,
            "width": w,
            "height": h,
            "xmin": x0,
            "ymin": y0 - h * res,
            "xmax": x0 + w * res,
            "ymax": y0,
            "dtype": "uint16",
            "file_nodata": 0.0,
            "nodata": 0.0,
            "nodata_from": "file",
            "bidx": 1,
            "block_x": 256,
            "block_y": 256,
            "overview_sizes": [-(-w // 2), -(-h // 2), -(-w // 4), -(-h // 4)],
            "size": w * h * 2,
            "mtime": 0,
        }
        for i, (crs, x0, y0, w, h, res, band, date) in enumerate(specs)
    ]
    table = TileTable.from_records(rows, TABLE_COLUMNS)
    return table.rows(np.argsort(table["path"], kind="stable"))


@contextlib.contextmanager
def serve_stac(parquet: Path) -> Iterator[str]:
    """A real STAC API: ``rustac serve`` on a free loopback port, serving a stac-geoparquet file from
    memory; yields its URL."""
    import shutil
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    exe = shutil.which("rustac") or os.path.join(os.path.dirname(sys.executable), "rustac")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    # The DuckDB backend (rustac's default for one .parquet) does not answer offline; memory does.
    cmd = [exe, "serve", str(parquet), "--use-duckdb", "false", "--addr", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(url + "/", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"rustac serve did not answer: {proc.stderr.read() if proc.stderr else ''}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
