"""The ``cloudy`` preset: deterministic, clouds that cover 20-80% of each tile and move, data bands that
show them, ``QA`` bits that agree with ``SCL``, and STAC items that carry the classification extension
and read through the project's STAC reader as the glob does."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rasterio
import yaml

from pipeline.config import load_config
from pipeline.inputs.catalog import build_catalog
from pipeline.tools.clouds import QA_BITFIELDS, QA_FILL, SCL_CLASSES, compute_cloudy_values, write_cloudy_items
from pipeline.tools.fixtures import PRESETS, compute_tile_specs, write_tile

PRESET = PRESETS["cloudy"]
SPECS = {s.name: s for s in compute_tile_specs(PRESET)}
MASKED = [3, 8, 9, 10]
EDGE_TILE = "T32A1"
"""A tile with the orbit-edge nodata wedge on date 1."""


def _scl(tile: str, date_idx: int) -> np.ndarray:
    return compute_cloudy_values(SPECS[tile], "SCL", date_idx, PRESET, 0)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_preset_is_the_case_study_geometry_on_eight_dates_of_two_months() -> None:
    assert len(SPECS) == 8 and {s.epsg for s in SPECS.values()} == {32631, 32632}
    assert PRESET.tile_m == PRESETS["casestudy"].tile_m and PRESET.overlap_m == PRESETS["casestudy"].overlap_m
    months = [d[:7] for d in PRESET.dates]
    assert len(PRESET.dates) == 8 and months.count("2024-06") >= 4 and months.count("2024-07") >= 4
    assert set(PRESET.bands) == {"B02", "B03", "B04", "B08", "B09", "B11", "SCL", "QA"}


def test_two_writes_of_one_tile_are_byte_identical(tmp_path: Path) -> None:
    for band in ("B04", "SCL", "QA"):
        a, b = tmp_path / f"a_{band}.tif", tmp_path / f"b_{band}.tif"
        write_tile(str(a), SPECS[EDGE_TILE], band, 1, PRESET, 0)
        write_tile(str(b), SPECS[EDGE_TILE], band, 1, PRESET, 0)
        assert _sha(a) == _sha(b), band
        with rasterio.open(a) as src:
            assert np.array_equal(src.read(1), compute_cloudy_values(SPECS[EDGE_TILE], band, 1, PRESET, 0))
            assert src.profile["tiled"] and src.profile["blockxsize"] == 256
    with rasterio.open(tmp_path / "a_SCL.tif") as src:
        assert src.dtypes[0] == "uint8" and src.nodata == 0 and src.res == (20.0, 20.0)
    with rasterio.open(tmp_path / "a_QA.tif") as src:
        assert src.dtypes[0] == "uint16" and src.nodata == QA_FILL


def test_cloud_shadow_and_cirrus_cover_20_to_80_percent_of_every_tile_and_date() -> None:
    covers = []
    for tile in SPECS:
        for d in range(len(PRESET.dates)):
            scl = _scl(tile, d)
            valid = scl != 0
            cover = np.isin(scl[valid], MASKED).mean()
            assert 0.2 <= cover <= 0.8, (tile, d, cover)
            for value in (3, 8, 9):  # each kind of cloud is there, with clear ground beside it
                assert (scl == value).any(), (tile, d, value)
            assert np.isin(scl, [4, 5, 6]).any()
            covers.append(cover)
    assert max(covers) - min(covers) > 0.25  # the cover varies between tiles and dates
    assert any((_scl(t, d) == 10).any() for t in SPECS for d in range(len(PRESET.dates)))


def test_clouds_move_between_dates() -> None:
    for tile in ("T31A0", EDGE_TILE):
        clouds = [np.isin(_scl(tile, d), [8, 9]) for d in range(len(PRESET.dates))]
        for a, b in zip(clouds, clouds[1:], strict=False):
            iou = (a & b).sum() / (a | b).sum()
            assert iou < 0.5, (tile, iou)


def test_shadows_lie_beside_their_clouds_away_from_the_sun() -> None:
    scl = _scl("T31A0", 0)
    shadow, cloud = scl == 3, np.isin(scl, [8, 9])
    # the sun is south-east (azimuth 140°): a shadow pixel's cloud lies ~900 m (45 px) down and right
    assert cloud[30:, 30:][shadow[:-30, :-30]].mean() > 0.5
    assert cloud[:-30, :-30][shadow[30:, 30:]].mean() < 0.1


def test_nodata_wedge_is_nodata_in_every_band() -> None:
    scl = _scl(EDGE_TILE, 1)
    b11 = compute_cloudy_values(SPECS[EDGE_TILE], "B11", 1, PRESET, 0)
    qa = compute_cloudy_values(SPECS[EDGE_TILE], "QA", 1, PRESET, 0)
    assert 0.05 < (scl == 0).mean() < 0.5
    assert np.array_equal(scl == 0, b11 == 0) and np.array_equal(scl == 0, qa == QA_FILL)
    assert (_scl(EDGE_TILE, 0) != 0).all()


def _bit(qa: np.ndarray, offset: int, length: int = 1) -> np.ndarray:
    return (qa >> offset) & ((1 << length) - 1)


def test_qa_bits_agree_with_scl() -> None:
    for tile, d in ((EDGE_TILE, 1), ("T31B0", 5)):
        scl = _scl(tile, d)
        qa = compute_cloudy_values(SPECS[tile], "QA", d, PRESET, 0)
        fill = scl == 0
        cloud = np.isin(scl, [8, 9])
        assert np.array_equal(_bit(qa, 0) == 1, fill)
        ok = ~fill
        assert np.array_equal(_bit(qa, 3)[ok] == 1, cloud[ok])
        assert np.array_equal(_bit(qa, 4)[ok] == 1, scl[ok] == 3)
        assert np.array_equal(_bit(qa, 2)[ok] == 1, scl[ok] == 10)
        assert np.array_equal(_bit(qa, 7)[ok] == 1, scl[ok] == 6)
        assert np.array_equal(_bit(qa, 8, 2)[scl == 9], np.full((scl == 9).sum(), 3))
        assert np.array_equal(_bit(qa, 8, 2)[scl == 8], np.full((scl == 8).sum(), 2))
        dilated = _bit(qa, 1) == 1
        assert dilated.any() and not (dilated & cloud).any()
        near = np.zeros_like(cloud)  # every dilated pixel touches a cloud pixel
        for dy in (-1, 0, 1):
            for dx in (-1, 0, 1):
                near |= np.roll(np.roll(cloud, dy, 0), dx, 1)
        assert near[dilated].all()
        assert np.array_equal(_bit(qa, 6)[ok] == 1, (~cloud & ~dilated)[ok])  # Landsat's clear: shadows too
        assert (qa[(scl == 4) & ~dilated] == 21824).all()  # clear land, as Landsat writes it


def test_data_bands_show_the_clouds() -> None:
    tile, d = "T31B1", 3
    scl = _scl(tile, d)
    clear = np.isin(scl, [4, 5, 6])
    for band in ("B02", "B04", "B08", "B11"):
        values = compute_cloudy_values(SPECS[tile], band, d, PRESET, 0).astype(float)
        if values.shape != scl.shape:  # a 10 m band: its 2x2 pixels under each SCL pixel
            values = values.reshape(scl.shape[0], 2, scl.shape[1], 2).mean(axis=(1, 3))
        ref = np.median(values[clear])
        assert np.median(values[scl == 9]) > max(6500, ref + 2000), band
        assert np.percentile(values[scl == 9], 5) >= 6000, band
        assert np.median(values[scl == 3]) < 0.5 * ref, band
        assert ref + 500 < np.median(values[scl == 10]) < 6000, band
        assert values.max() <= 9000


@pytest.fixture(scope="module")
def cloudy_subset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two overlapping tiles on two dates (the second with the nodata wedge), every band, and their items."""
    root = tmp_path_factory.mktemp("cloudy")
    paths = []
    for d in (0, 1):
        date = PRESET.dates[d]
        (root / date).mkdir()
        for tile in ("T32A0", EDGE_TILE):
            for band in PRESET.bands:
                paths.append(write_tile(str(root / date / f"{tile}_{band}.tif"), SPECS[tile], band, d, PRESET, 0))
    written = write_cloudy_items(root, paths)
    assert [Path(p).name for p in written] == ["items.json", "items.parquet"]
    return root


def test_items_carry_classification_classes_and_bitfields(cloudy_subset: Path) -> None:
    import pystac
    from pystac.extensions.classification import ClassificationExtension

    items = json.loads((cloudy_subset / "items.json").read_text())["features"]
    assert len(items) == 4
    for d in items:
        assert "https://stac-extensions.github.io/classification/v2.0.0/schema.json" in d["stac_extensions"]
        assert not any(k.startswith("classification:") for k in d["assets"]["B04"])
        assert d["assets"]["SCL"]["raster:bands"][0] == {"data_type": "uint8", "nodata": 0.0}
        assert d["assets"]["QA"]["raster:bands"][0] == {"data_type": "uint16", "nodata": float(QA_FILL)}
        item = pystac.Item.from_dict(d)
        classes = ClassificationExtension.ext(item.assets["SCL"]).classes or []
        names = {c.value: c.name for c in classes}
        assert names[3] == "cloud_shadows" and names[8] == "cloud_medium_probability"
        assert names[9] == "cloud_high_probability" and names[10] == "thin_cirrus" and names[4] == "vegetation"
        fields = {f.name: f for f in ClassificationExtension.ext(item.assets["QA"]).bitfields or []}
        want = {"fill": 0, "dilated_cloud": 1, "cirrus": 2, "cloud": 3, "cloud_shadow": 4, "snow": 5, "clear": 6}
        for name, offset in {**want, "water": 7}.items():
            assert fields[name].offset == offset and fields[name].length == 1
            assert [c.value for c in fields[name].classes] == [0, 1]
    assert [c["value"] for c in SCL_CLASSES] == list(range(12))
    assert all({"offset", "length", "name", "classes"} <= set(f) for f in QA_BITFIELDS)


def _config(folder: Path, inputs: dict[str, Any]) -> Any:
    raw = {
        "inputs": inputs,
        "grid": {"crs": "EPSG:32632", "resolution": 20},
        "output": {"path": str(folder / "out.zarr")},
    }
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_config(path)


@pytest.mark.parametrize("source", ["items.json", "items.parquet"])
def test_items_read_through_the_stac_reader_as_the_glob_does(cloudy_subset: Path, tmp_path: Path, source: str) -> None:
    pattern = r"(?P<date>\d{4}-\d{2}-\d{2})/(?P<tile>[^/]+)_(?P<band>[^/_.]+)\.tif$"
    globbed_cfg = _config(tmp_path, {"paths": [str(cloudy_subset / "**" / "*.tif")], "pattern": pattern})
    stac_cfg = _config(tmp_path, {"stac": str(cloudy_subset / source), "groupby": "solar_day"})
    globbed = build_catalog(globbed_cfg.inputs, globbed_cfg.storage)
    stac = build_catalog(stac_cfg.inputs, stac_cfg.storage)
    assert not globbed.skipped and not stac.skipped

    def rows(catalog: Any) -> list[tuple[str, str, str]]:
        frame = catalog.tiles.to_pandas()
        days = frame["date"].dt.strftime("%Y-%m-%d")
        return sorted(zip(frame["path"], frame["band"], days, strict=True))

    assert rows(stac) == rows(globbed) and len(rows(stac)) == 2 * 2 * len(PRESET.bands)
    assert {"SCL", "QA"} <= set(stac.categorical)
    frame = stac.tiles.to_pandas()
    nodata = dict(zip(frame["band"], frame["nodata"], strict=False))
    assert nodata["SCL"] == 0 and nodata["QA"] == QA_FILL and nodata["B04"] == 0
