"""The one table of resampling methods: what the config, planning, the kernels, the GPU check, the device
model and the GDAL engine each need to know about a method, in one place. Pure data; imports nothing (the
config reads its names: a method is added in ``resample/`` alone).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Method:
    """One resampling method and every fact the planner, the kernels and device choice need about it."""

    name: str
    """The config's name (``resampling:``)."""
    family: str
    """``point``: samples at destination pixel centres (interpolation); ``footprint``: weighs the source
    pixels under each destination pixel's footprint; ``rank``: picks among those pixels by value."""
    gdal_name: str
    """GDAL's name for it (``rasterio.enums.Resampling``), for the GDAL engine."""
    pad: int
    """Source pixels of padding around each window (kernel support + 1 for rounding)."""
    reads_overviews: bool
    """Whether a downsampling read may come from an (average) overview: blending methods may; value
    pickers read full resolution so they only ever return values present in the data."""
    exact_on_gpu: bool
    """Whether a device must match NumPy bit for bit (value pickers) or within 1e-3 relative."""
    ties: str
    """How ties and nodata are settled, as GDAL does."""
    cpu_mpx_s: float
    """The array kernel's rate on one CPU core, Mpx/s of output, cross-CRS 1024^2 (the slower case), from
    ``bench/kernels.py`` on this project's machine: the device model's figure where nothing better is known
    (:mod:`pipeline.execute.device`)."""


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method(
            "nearest",
            "point",
            "nearest",
            1,
            False,
            True,
            "the source pixel containing the centre, floor(x + 1e-10)",
            50.0,
        ),
        Method(
            "bilinear",
            "point",
            "bilinear",
            2,
            True,
            False,
            "kernel stretched over 1/scale when downsampling; weights renormalised over valid pixels",
            9.0,
        ),
        Method("cubic", "point", "cubic", 3, True, False, "Keys a = -0.5, stretched and renormalised as bilinear", 3.5),
        Method(
            "average", "footprint", "average", 2, True, False, "area-weighted over the footprint; nodata ignored", 12.0
        ),
        Method(
            "mode", "rank", "mode", 2, False, True, "the value that first reaches the highest count in scan order", 1.7
        ),
        Method("min", "rank", "min", 2, False, True, "smallest valid value under the footprint", 7.0),
        Method("max", "rank", "max", 2, False, True, "largest valid value under the footprint", 7.0),
        Method("median", "rank", "med", 2, False, True, "the valid value at rank (n - 1) / 2", 4.0),
    )
}

NAMES: tuple[str, ...] = tuple(METHODS)
POINT: tuple[str, ...] = tuple(n for n, m in METHODS.items() if m.family == "point")
"""Methods that sample at pixel centres; the others read each pixel's footprint (its corners)."""
