"""Drive the pipeline from Python: the small fixture -> STAC items -> a Zarr cube on a LocalCluster
-> a quick-look PNG.

    python examples/quicklook.py [WORKDIR]        # default WORKDIR: ./quicklook

Writes WORKDIR/tiles/ (the small synthetic fixture, if missing), WORKDIR/items.json (a STAC
ItemCollection for those tiles, with the projection and raster extensions), WORKDIR/cube.zarr, its
report and WORKDIR/quicklook.png: one band of the first date, as the cube holds it.
"""

from __future__ import annotations

import glob
import os
import sys
from typing import Any

import pipeline


def inputs_for(tiles: str, workdir: str) -> dict[str, Any]:
    """The ``inputs`` section: STAC items for the tiles under ``tiles``, as a catalogue would list them.

    One item per (date, tile), one asset per band, with the projection extension, so the pipeline
    plans from the items without opening a file. A STAC API works the same way:
    ``{"stac_search": {"url": ..., "collections": [...]}}``.
    """
    from pipeline.tools.stac_items import items_from_files, write_item_collection

    items = items_from_files(glob.glob(os.path.join(tiles, "**", "*.tif"), recursive=True), href_base=workdir)
    return {"stac": write_item_collection(items, os.path.join(workdir, "items.json")), "groupby": "solar_day"}


def main(workdir: str) -> int:
    from distributed import Client, LocalCluster

    from pipeline.tools.fixtures import write_fixtures

    tiles = os.path.join(workdir, "tiles")
    if not glob.glob(os.path.join(tiles, "*", "*.tif")):
        print(f"writing the small fixture under {tiles} ...")
        write_fixtures(tiles, "small", seed=0)

    cfg = pipeline.Config(
        inputs=inputs_for(tiles, workdir),
        grid={"crs": "EPSG:32632", "resolution": 20},
        resampling="average",
        output={"path": os.path.join(workdir, "cube.zarr"), "chunks": {"y": 128, "x": 128}},
        execution={"partition_mb": 1},
    )
    plan = pipeline.plan(cfg)
    print(
        f"plan: {plan.grid.shape_yx[1]}x{plan.grid.shape_yx[0]} px, bands {', '.join(plan.bands)}, "
        f"{len(plan.times)} dates, {plan.tasks} tasks, {plan.bytes['read'] / 1e6:.1f} MB to read"
    )

    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, Client(cluster) as client:
        result = pipeline.run(cfg, client=client, overwrite=True)
    print(f"run: exit code {result.exit_code} in {result.report.wall_s:.1f} s, {len(result.skipped)} inputs skipped")

    ds = result.open()
    band = "B04" if "B04" in ds.data_vars else sorted(ds.data_vars)[0]
    image = ds[band].isel(time=0).values
    png = os.path.join(workdir, "quicklook.png")
    save_png(image, png, f"{band}, {str(ds.time.values[0])[:10]}, {cfg.grid.crs} at {cfg.grid.resolution[0]:g} m")
    print(f"cube: {cfg.output.path} ({', '.join(ds.data_vars)}); quick look: {png}")
    return result.exit_code


def save_png(image: Any, path: str, title: str) -> None:
    """A grey-scale quick look, stretched between the 2nd and 98th percentiles of the valid pixels."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display: this script's choice, not the package's
    import matplotlib.pyplot as plt
    import numpy as np

    valid = image[np.isfinite(image)]  # the cube masks nodata as NaN
    lo, hi = np.percentile(valid, [2, 98]) if valid.size else (0, 1)
    fig, ax = plt.subplots(figsize=(6, 6 * image.shape[0] / max(image.shape[1], 1)))
    ax.imshow(image, cmap="gray", vmin=lo, vmax=hi, interpolation="nearest")
    ax.set_title(title, fontsize=9)
    ax.set_axis_off()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main(os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "quicklook")))
