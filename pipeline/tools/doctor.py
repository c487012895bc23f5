"""``pipeline doctor``: what this machine offers the pipeline."""

from __future__ import annotations

import os
import platform
from importlib import metadata


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _gdal_reads(version: str) -> str:
    """Which of the store's layouts this GDAL opens, and what to set where it opens no v3."""
    from pipeline.store.zarr2 import GDAL_READS_FROM, gdal_reads

    reads = gdal_reads(version)
    names = {"v2": "Zarr v2", "v3": "Zarr v3", "v3-sharded": "sharded Zarr v3"}
    text = ", ".join(names[r] for r in reads) or "none of the store's layouts"
    if "v3" not in reads:
        major, minor = GDAL_READS_FROM["v3"]
        text += f" (Zarr v3 needs GDAL {major}.{minor}+: set output.zarr_format: 2 for stores it must read)"
    return text


def collect() -> dict[str, str]:
    """Versions, cores, memory and the GPU verdict of this machine, as ``pipeline doctor`` prints them."""
    import rasterio

    from pipeline import __version__
    from pipeline.execute.device import detect_gpu

    with rasterio.Env() as env:
        drivers = env.drivers()
    gpu = detect_gpu()
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
        mem_text = f"{mem:.1f} GiB"
    except (ValueError, OSError, AttributeError):
        mem_text = "unknown"
    out = {
        "pipeline": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": str(os.cpu_count()),
        "memory": mem_text,
        "GDAL": rasterio.__gdal_version__,
        "drivers": ", ".join(f"{d} {'yes' if d in drivers else 'NO'}" for d in ("GTiff", "COG", "Zarr")),
        "GDAL reads": _gdal_reads(rasterio.__gdal_version__) if "Zarr" in drivers else "no Zarr store (no driver)",
    }
    for dist in ("rasterio", "pyproj", "numpy", "xarray", "rioxarray", "zarr", "dask", "distributed"):
        out[dist] = _version(dist)
    if gpu.available:
        out["gpu"] = f"{gpu.name}, {(gpu.memory_bytes or 0) / 2**30:.0f} GiB"
        out["cupy"] = f"{gpu.cupy_version} (CUDA runtime {gpu.cuda_version})"
    else:
        out["gpu"] = f"none: {gpu.reason}"
    return out
