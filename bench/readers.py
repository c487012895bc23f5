"""Which GDAL reads which layout of the store: docs/output.md's table, "Who reads the store".

    .venv/bin/python bench/readers.py write OUT     # stores of the small fixture in every layout and codec,
                                                    # and what xarray reads from each (OUT/ref.npz)
    PYTHON bench/readers.py check OUT               # open each with the GDAL of PYTHON (rasterio's, or
                                                    # Debian's python3-gdal) and compare with xarray's

``check`` needs only NumPy and rasterio or ``osgeo.gdal``, so it runs under any Python that has a GDAL:
a venv with another rasterio wheel, or ``/usr/bin/python3`` with Debian's ``python3-gdal``.
"""

from __future__ import annotations

import json
import os
import sys

LAYOUTS = {
    "v3": [],
    "v3-sharded": ["output.shards={y: 256, x: 256}"],
    "v2": ["output.zarr_format=2"],
}
CODECS = ["zstd", "blosc", "gzip", "none"]
BAND = "B02"


def write(out: str) -> None:
    import numpy as np
    import rioxarray  # noqa: F401
    import xarray as xr

    import pipeline
    from pipeline.tools.fixtures import write_fixtures

    fixtures = os.path.join(out, "small")
    if not os.path.isdir(fixtures):
        write_fixtures(fixtures, "small", seed=0)
    ref: dict[str, object] = {}
    here = os.path.dirname(os.path.abspath(__file__))
    for layout, sets in LAYOUTS.items():
        for codec in CODECS:
            name = f"{layout}-{codec}"
            cfg = pipeline.Config.from_yaml(
                os.path.join(here, "..", "configs", "small.yaml"),
                overrides=[
                    f"inputs.paths=[{fixtures}/**/*.tif]",
                    f"output.path={out}/{name}.zarr",
                    f"output.compression={{codec: {codec}, level: 3}}",
                    f"report.path={out}/{name}.report.json",
                    *sets,
                ],
            )
            assert pipeline.run(cfg, overwrite=True).exit_code == 0
            ds = xr.open_zarr(cfg.output.path, mask_and_scale=False)
            ref[name] = ds[BAND].values
            meta = {
                "transform": list(ds.rio.transform())[:6],
                "epsg": ds.rio.crs.to_epsg(),
                "nodata": float(ds[BAND].attrs["_FillValue"]),
            }
            ref[f"{name}.meta"] = np.array(json.dumps(meta))
    np.savez(os.path.join(out, "ref.npz"), **ref)  # type: ignore[arg-type]
    print(f"wrote {len(LAYOUTS) * len(CODECS)} stores and ref.npz in {out}")


def _read_rasterio(path: str) -> tuple[object, list[float], int | None, float | None]:
    import rasterio

    with rasterio.open(f'ZARR:"{path}":/{BAND}') as src:
        return src.read(), list(src.transform)[:6], src.crs.to_epsg() if src.crs else None, src.nodata


def _read_osgeo(path: str) -> tuple[object, list[float], int | None, float | None]:
    import numpy as np
    from osgeo import gdal

    gdal.UseExceptions()
    steps, i = [], 0
    try:
        whole = gdal.Open(f'ZARR:"{path}":/{BAND}')
        arrays = whole.ReadAsArray()  # GDAL 3.7+: each time step a band
        ds = whole
    except RuntimeError as e:
        if "extra dimensions" not in str(e):
            raise
        while True:  # GDAL 3.6: one time step per open, by index
            try:
                ds = gdal.Open(f'ZARR:"{path}":/{BAND}:{i}')
            except RuntimeError:
                break
            steps.append(ds.ReadAsArray())
            i += 1
        arrays = np.stack(steps)
        ds = gdal.Open(f'ZARR:"{path}":/{BAND}:0')
    c, a, b, f, d, e = ds.GetGeoTransform()
    srs = ds.GetSpatialRef()
    epsg = int(srs.GetAuthorityCode(None)) if srs is not None and srs.GetAuthorityCode(None) else None
    return arrays, [a, b, c, d, e, f], epsg, ds.GetRasterBand(1).GetNoDataValue()


def check(out: str) -> None:
    import numpy as np

    try:
        import rasterio

        read, version, how = _read_rasterio, rasterio.__gdal_version__, f"rasterio {rasterio.__version__}"
    except ImportError:
        from osgeo import gdal

        read, version, how = _read_osgeo, gdal.__version__, "osgeo.gdal"
    ref = np.load(os.path.join(out, "ref.npz"))
    print(f"GDAL {version} ({how}, Python {sys.version.split()[0]})")
    for layout in LAYOUTS:
        for codec in CODECS:
            name = f"{layout}-{codec}"
            meta = json.loads(str(ref[f"{name}.meta"]))
            try:
                values, transform, epsg, nodata = read(os.path.join(out, f"{name}.zarr"))
            except Exception as e:
                print(f"  {name:16s} no: {str(e).splitlines()[0][:100]}")
                continue
            same = np.array_equal(np.asarray(values).reshape(ref[name].shape), ref[name])
            geo = np.allclose(transform, meta["transform"]) and epsg == meta["epsg"]
            verdict = "yes" if same and geo and nodata == meta["nodata"] else "WRONG"
            print(f"  {name:16s} {verdict}: values {same}, transform {transform}, EPSG {epsg}, nodata {nodata}")


if __name__ == "__main__":
    {"write": write, "check": check}[sys.argv[1]](sys.argv[2])
