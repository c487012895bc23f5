from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from pipeline.config import load_config
from pipeline.errors import ConfigError, TileReadError
from pipeline.inputs.catalog import build_catalog
from pipeline.inputs.tiles import TABLE_COLUMNS
from tests.helpers import write_config


def test_tile_table_fields(small_config) -> None:  # type: ignore[no-untyped-def]
    cfg = small_config()
    cat = build_catalog(cfg.inputs, cfg.storage)
    t = cat.tiles
    assert len(t) == 32 and not cat.skipped
    assert set(t["band"]) == {"B01", "B02", "B04", "B11"}
    assert set(t["crs"]) == {"EPSG:32631", "EPSG:32632"}
    assert list(t["path"]) == sorted(t["path"])
    b02 = t.rows(t["band"] == "B02").row(0)
    assert (b02["width"], b02["a"], b02["dtype"], b02["nodata"], b02["block_x"]) == (384, 10.0, "uint16", 0.0, 256)
    assert list(b02["overview_sizes"]) == [192, 192]
    assert str(b02["date"].astype("datetime64[D]")) in ("2024-06-01", "2024-06-11")
    assert t.columns == TABLE_COLUMNS and t["date"].dtype == "datetime64[ns]" and t["width"].dtype == np.int64
    frame = t.to_pandas()
    assert list(frame.columns) == TABLE_COLUMNS and len(frame) == 32


def test_bands_filter_and_missing_band(small_config) -> None:  # type: ignore[no-untyped-def]
    cfg = small_config(inputs={"bands": ["B11", "B02"]})
    cat = build_catalog(cfg.inputs, cfg.storage)
    assert set(cat.tiles["band"]) == {"B02", "B11"}
    cfg = small_config(inputs={"bands": ["B99"]})
    with pytest.raises(ConfigError, match="inputs.bands"):
        build_catalog(cfg.inputs, cfg.storage)


def test_parquet_index_rereads_only_changed_files(tmp_path: Path, small_dir: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(small_dir, data)
    cfg = load_config(
        write_config(tmp_path, str(data / "**" / "*.tif"), inputs={"index": str(tmp_path / "tiles.parquet")})
    )
    first = build_catalog(cfg.inputs, cfg.storage)
    assert first.headers_read == 32 and os.path.exists(tmp_path / "tiles.parquet")
    second = build_catalog(cfg.inputs, cfg.storage)
    assert second.headers_read == 0
    assert second.tiles.columns == first.tiles.columns
    for name in first.tiles.columns:  # the index round trip keeps every value and type
        a, b = first.tiles[name], second.tiles[name]
        assert a.dtype == b.dtype, name
        if name == "overview_sizes":
            assert [list(v) for v in a] == [list(v) for v in b]
        else:
            assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), name
    changed = data / "2024-06-01" / "T31A0_B02.tif"
    os.utime(changed, ns=(1, 1))
    third = build_catalog(cfg.inputs, cfg.storage)
    assert third.headers_read == 1 and len(third.tiles) == 32


def test_unusable_files_are_skipped_or_fail(tmp_path: Path, small_dir: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(small_dir, data)
    (data / "2024-06-01" / "T99Z0_B02.tif").write_bytes(b"")
    (data / "2024-06-01" / "T99Z1_B02.tif").write_text("not a tiff")
    path = write_config(tmp_path, str(data / "**" / "*.tif"))
    cfg = load_config(path)
    cat = build_catalog(cfg.inputs, cfg.storage)
    assert len(cat.tiles) == 32
    assert sorted(os.path.basename(s["path"]) for s in cat.skipped) == ["T99Z0_B02.tif", "T99Z1_B02.tif"]
    with pytest.raises(TileReadError, match="T99Z0_B02.tif"):
        build_catalog(cfg.inputs, cfg.storage, on_error="fail")


def test_no_match_names_the_key(tmp_path: Path, small_dir: Path) -> None:
    cfg = load_config(write_config(tmp_path, str(tmp_path / "nothing" / "*.tif")))
    with pytest.raises(ConfigError, match="inputs.paths"):
        build_catalog(cfg.inputs, cfg.storage)
    cfg = load_config(
        write_config(tmp_path, str(small_dir / "**" / "*.tif"), inputs={"pattern": r"(?P<band>XYZ)\.tif$"})
    )
    with pytest.raises(ConfigError, match="inputs.pattern"):
        build_catalog(cfg.inputs, cfg.storage)


def test_mixed_preset_spans_three_zones_that_overlap() -> None:
    """The ``mixed`` bench preset differs from the case study as its docs say: three UTM zones whose
    tile blocks overlap in the grid CRS, 60 m bands among the five, three dates, non-negative seeds."""
    import numpy as np

    from pipeline.planning.grid import transform_boxes
    from pipeline.tools.fixtures import PRESETS, S2_BANDS, compute_tile_specs, compute_tile_values

    preset = PRESETS["mixed"]
    specs = compute_tile_specs(preset)
    assert {s.epsg for s in specs} == {32631, 32632, 32633} and len(preset.dates) == 3
    assert sum(S2_BANDS[b] == 60 for b in preset.bands) == 2
    boxes = {}
    for s in specs:
        box = np.array([[s.x0, s.y0 - preset.tile_m, s.x0 + preset.tile_m, s.y0]])
        boxes.setdefault(s.epsg, []).append(transform_boxes(f"EPSG:{s.epsg}", "EPSG:32632", box)[0])
    union = {
        epsg: (min(b[0] for b in bs), min(b[1] for b in bs), max(b[2] for b in bs), max(b[3] for b in bs))
        for epsg, bs in boxes.items()
    }
    for a in union:
        for b in union:
            ua, ub = union[a], union[b]
            assert ua[0] < ub[2] and ub[0] < ua[2] and ua[1] < ub[3] and ub[1] < ua[3], (a, b)
    west = min(specs, key=lambda s: s.x0)
    assert compute_tile_values(west, "B01", 0, preset, seed=0).min() >= 1
