"""Windowed reads (``pipeline.inputs.read``): GDAL's options around each open, and the datasets a thread
keeps open for one run only."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rasterio
from affine import Affine
from rasterio.env import get_gdal_config

from pipeline.inputs import read
from pipeline.planning.jobs import SourceWindow

CRS = "EPSG:32632"


def _tile(path: Path, value: int) -> SourceWindow:
    """A 64² uint16 GeoTIFF of ``value`` at ``path``, and a window of it."""
    t = Affine(20.0, 0, 399960.0, 0, -20.0, 5000040.0)
    profile = {"driver": "GTiff", "width": 64, "height": 64, "count": 1, "dtype": "uint16", "crs": CRS}
    with rasterio.open(path, "w", transform=t, **profile) as ds:
        ds.write(np.full((64, 64), value, dtype="uint16"), 1)
    w0 = Affine(20.0, 0, 399960.0 + 8 * 20.0, 0, -20.0, 5000040.0 - 4 * 20.0)
    return SourceWindow(str(path), -1, (4, 8, 16, 16), tuple(w0)[:6], CRS, float("nan"))


@pytest.mark.parametrize("on_thread", [True, False])
def test_every_open_of_a_read_sees_the_read_options_and_leaves_none_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, on_thread: bool
) -> None:
    """Each open of a read, not only a thread's first, has ``READ_OPTIONS`` set (a CRS from the GeoKeys);
    none is left set after it (a header read for the index keeps GDAL's default); an option the caller set
    is left as it was."""
    sources = [_tile(tmp_path / f"t{i}.tif", i + 1) for i in range(3)]
    seen: list[Any] = []
    real_open = rasterio.open

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(get_gdal_config("GTIFF_SRS_SOURCE"))
        return real_open(*args, **kwargs)

    monkeypatch.setattr(rasterio, "open", spy)
    after: list[Any] = []

    def reads(run: str) -> None:
        read.configure_reads(None, (), run)
        for src in sources:
            assert int(read.read_window(src)[0, 0]) == int(src.path[-5]) + 1
        after.append(get_gdal_config("GTIFF_SRS_SOURCE"))

    for run in ("a", "b"):  # a second run opens them again: the same options
        if on_thread:
            t = threading.Thread(target=reads, args=(run,))
            t.start()
            t.join()
        else:
            reads(run)
    assert seen == ["GEOKEYS"] * 6 and after == [None, None]

    seen.clear()
    with rasterio.Env(GTIFF_SRS_SOURCE="EPSG"):  # the caller's choice stands
        read.configure_reads(None, (), "c")
        read.read_window(sources[0])
        assert get_gdal_config("GTIFF_SRS_SOURCE") == "EPSG"
    assert seen == ["EPSG"]


def test_a_file_made_again_between_runs_is_read_afresh(tmp_path: Path) -> None:
    """A thread keeps its datasets open for one run: within it a file is opened once; the next run (a
    resumed one too) opens it again, so a file made again in between is read as it is now, not through
    the old handle's cached blocks."""
    src = _tile(tmp_path / "t.tif", 5)
    got: list[int] = []

    def reads() -> None:
        read.configure_reads(None, (), "first")
        before = read.open_count()
        got.append(int(read.read_window(src)[0, 0]))
        got.append(int(read.read_window(src)[0, 0]))
        assert read.open_count() == before + 1  # kept open within the run
        _tile(tmp_path / "t.tif", 9)
        read.configure_reads(None, (), "second")
        got.append(int(read.read_window(src)[0, 0]))

    t = threading.Thread(target=reads)
    t.start()
    t.join()
    assert got == [5, 5, 9]
