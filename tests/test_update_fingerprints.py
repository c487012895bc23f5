"""What ``pipeline update`` compares per source: an object's ETag in a bucket (moto's S3 server on loopback),
a STAC asset's ``updated``, a local file's size and mtime; and a record written before the kinds were kept
(``size:mtime_ns`` for every source), read as it is."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rasterio
import xarray as xr
import yaml

import pipeline
from pipeline.config import load_config
from pipeline.store.record import compute_diff, fingerprint, source_change
from pipeline.tools.stac_items import items_from_files, write_geoparquet, write_item_collection
from tests.helpers import PATTERN, write_config
from tests.s3server import upload_tree
from tests.test_update import SMALL_DATES, make_inputs, stats

DATE = "2024-06-11T00:00:00"


def test_fingerprints_compare_on_what_both_have() -> None:
    local = fingerprint(100, 5)
    etag = fingerprint(100, 5, 'etag:"aa"')
    assert local == "100:5" and etag == '100:5:etag:"aa"'
    assert source_change(etag, fingerprint(100, 9, 'etag:"aa"')) is None  # re-uploaded, same bytes
    assert source_change(etag, fingerprint(100, 5, 'etag:"bb"')) == 'etag "aa" -> "bb"'
    assert source_change(etag, fingerprint(101, 5, 'etag:"bb"')) == "size 100 -> 101"
    assert source_change(local, etag) is None  # a record from before the kinds: size and mtime
    assert source_change(local, fingerprint(100, 6, 'etag:"aa"')) == "modified"
    assert source_change(local, fingerprint(100, 5)) is None and source_change(local, "100:6") == "modified"
    stac = fingerprint(100, 0, "updated:2024-06-01T00:00:00Z")
    assert source_change(stac, fingerprint(100, 0, "updated:2024-07-01T00:00:00Z")) == (
        "updated 2024-06-01T00:00:00Z -> 2024-07-01T00:00:00Z"
    )
    assert (
        source_change(stac, fingerprint(100, 0, "checksum:1220ab")) == "fingerprint kind changed (updated -> checksum)"
    )
    diff = compute_diff(("d",), {"d": {"a.tif": local}}, {"d": {"a.tif": etag}})
    assert diff.unchanged == ("d",) and not diff.recomputed


# --- objects in a bucket: the ETag ----------------------------------------------------------------------


def write_tile(src: Path, dst: Path, scale: int) -> None:
    """``src``'s pixels times ``scale`` (mod 2**16), written uncompressed and untiled: the same size in
    bytes whatever ``scale``, other content."""
    with rasterio.open(src) as f:
        data, profile = f.read(1), f.profile
    profile.update(driver="GTiff", tiled=False, compress=None)
    profile.pop("blockxsize", None)
    profile.pop("blockysize", None)
    with rasterio.open(dst, "w", **profile) as out:
        out.write((data.astype(np.uint32) * scale % 65536).astype(data.dtype), 1)


def next_second() -> None:
    """Sleep into the next second: S3's LastModified (moto's too) has one-second resolution."""
    time.sleep(1.05 - time.time() % 1)


def test_an_object_rewritten_in_place_is_told_by_its_etag(
    tmp_path: Path, small_dir: Path, s3_server: Any, s3_bucket: str
) -> None:
    client = s3_server.client()
    inputs = make_inputs(tmp_path, small_dir)
    tile = inputs / "2024-06-11" / "T31A0_B02.tif"
    write_tile(small_dir / "2024-06-11" / tile.name, tile, 1)
    upload_tree(client, inputs, s3_bucket, "in")
    key = f"in/2024-06-11/{tile.name}"
    url = f"s3://{s3_bucket}/{key}"
    path = write_config(
        tmp_path,
        f"s3://{s3_bucket}/in/**/*.tif",
        storage={"endpoint_url": s3_server.endpoint_url},
        execution={"scheduler": "threads"},
    )
    cfg = load_config(path, [f"output.path={tmp_path / 'cube.zarr'}"])
    cube = Path(cfg.output.path)
    pipeline.run(cfg)
    before = stats(cube)
    record_path = cube / json.loads((cube / "zarr.json").read_text())["attributes"]["pipeline_record"]
    recorded = json.loads(record_path.read_text())["dates"][DATE][url]
    head = client.head_object(Bucket=s3_bucket, Key=key)
    assert recorded.endswith(f":etag:{head['ETag']}")

    next_second()  # an identical re-upload: a new LastModified, the same ETag
    client.upload_file(str(tile), s3_bucket, key)
    again = client.head_object(Bucket=s3_bucket, Key=key)
    assert again["LastModified"] != head["LastModified"] and again["ETag"] == head["ETag"]
    r = pipeline.update(cfg)
    assert r.report["update"]["recomputed"] == [] and r.report["output"]["chunks_written"] == 0
    assert stats(cube) == before  # nothing written

    pre = xr.open_zarr(cube)["B02"].sel(time=DATE).values
    write_tile(small_dir / "2024-06-11" / tile.name, tile, 3)  # other pixels, the same size
    client.upload_file(str(tile), s3_bucket, key)
    new = client.head_object(Bucket=s3_bucket, Key=key)
    assert new["ContentLength"] == head["ContentLength"] and new["ETag"] != head["ETag"]
    r = pipeline.update(cfg)
    u = r.report["update"]
    assert u["recomputed"] == [DATE] and u["added"] == []
    assert u["why"][DATE] == [f"tile rewritten: {url} (etag {head['ETag']} -> {new['ETag']})"]
    assert (xr.open_zarr(cube)["B02"].sel(time=DATE).values != pre).any()  # the rewrite is in the cube
    full = pipeline.run(load_config(path, [f"output.path={tmp_path / 'full.zarr'}"]))
    a, b = xr.open_zarr(cube), xr.open_zarr(full.config.output.path)
    for v in b.data_vars:
        np.testing.assert_array_equal(a[v].values, b[v].values)

    # A record from before the kinds were kept (size:mtime_ns only) still reads as "nothing changed".
    record_path = cube / json.loads((cube / "zarr.json").read_text())["attributes"]["pipeline_record"]
    rec = json.loads(record_path.read_text())["dates"]
    legacy = {d: {p: ":".join(f.split(":")[:2]) for p, f in v.items()} for d, v in rec.items()}
    assert legacy != rec
    record_path.write_text(json.dumps({"dates": legacy}))
    kept = stats(cube)
    r = pipeline.update(cfg)
    assert r.report["update"]["recomputed"] == [] and stats(cube) == kept


def test_an_http_object_is_fingerprinted_by_the_etag_of_its_head(
    tmp_path: Path, small_dir: Path, s3_server: Any, s3_bucket: str
) -> None:
    """Plain URLs (moto's http:// URLs of public objects): the HEAD request's ETag, as for a listed object."""
    from pipeline.inputs.catalog import build_catalog
    from pipeline.store.record import tiles_record

    client = s3_server.client()
    urls = upload_tree(client, small_dir / "2024-06-01", s3_bucket, "tiles/2024-06-01")
    etags = {}
    for url in urls:
        key = url.split(f"{s3_bucket}/", 1)[1]
        client.put_object_acl(Bucket=s3_bucket, Key=key, ACL="public-read")
        etags[url.replace("s3://", f"{s3_server.endpoint_url}/")] = client.head_object(Bucket=s3_bucket, Key=key)
    cfg = load_config(write_config(tmp_path, "", inputs={"paths": list(etags), "pattern": PATTERN}))
    record = tiles_record(build_catalog(cfg.inputs, cfg.storage).tiles)
    assert record["2024-06-01T00:00:00"] == {
        u: f"{h['ContentLength']}:{int(h['LastModified'].timestamp() * 1e9)}:etag:{h['ETag']}" for u, h in etags.items()
    }


# --- STAC items: ``updated`` ------------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["items.json", "items.parquet"])
def test_a_stac_item_updated_again_is_recomputed(tmp_path: Path, small_dir: Path, source: str) -> None:
    inputs = make_inputs(tmp_path, small_dir)
    items = items_from_files(sorted(str(p) for p in inputs.glob("*/*.tif")))
    for it in items:
        it["properties"]["updated"] = "2024-06-20T00:00:00Z"
    write = write_item_collection if source == "items.json" else write_geoparquet
    write(items, str(tmp_path / source))
    path = write_config(tmp_path, "unused", execution={"scheduler": "threads"})
    raw = yaml.safe_load(path.read_text())
    raw["inputs"] = {"stac": str(tmp_path / source)}
    path.write_text(yaml.safe_dump(raw))
    cfg = load_config(path, [f"output.path={tmp_path / 'cube.zarr'}"])
    cube = Path(cfg.output.path)
    pipeline.run(cfg)
    before = stats(cube)
    r = pipeline.update(cfg)
    assert r.report["update"]["recomputed"] == [] and stats(cube) == before  # unchanged items: nothing written

    changed = next(it for it in items if it["properties"]["datetime"].startswith("2024-06-11"))
    changed["properties"]["updated"] = "2024-07-01T00:00:00Z"  # reprocessed: the same hrefs
    write(items, str(tmp_path / source))
    r = pipeline.update(cfg)
    u = r.report["update"]
    assert len(u["recomputed"]) == 1 and u["added"] == [], u
    day = u["recomputed"][0]
    assert day.startswith("2024-06-11")
    hrefs = sorted(a["href"] for a in changed["assets"].values())
    assert u["why"][day] == [
        f"tile rewritten: {h} (updated 2024-06-20T00:00:00Z -> 2024-07-01T00:00:00Z)" for h in hrefs
    ]
    assert r.report["output"]["chunks_written"] > 0
    assert [str(t)[:10] for t in xr.open_zarr(cube).time.values] == list(SMALL_DATES)


@pytest.mark.parametrize("kind", ["updated", "file:checksum"])
def test_stac_asset_fields_give_the_version(kind: str) -> None:
    from pipeline.inputs.stac_items import asset_rows_from_items

    item = {
        "id": "a",
        "properties": {"datetime": "2024-06-01T10:30:00Z", "updated": "2024-06-02T00:00:00Z"},
        "assets": {"B02": {"href": "/x/B02.tif", "file:size": 10, kind: "v1"}},
    }
    rows = asset_rows_from_items([item], {"B02": "B02"}, None, [])
    expected = "updated:v1" if kind == "updated" else "updated:2024-06-02T00:00:00Z"
    assert rows["version"] == [expected]  # the asset's own updated first, then the item's
    del item["properties"]["updated"]
    rows = asset_rows_from_items([item], {"B02": "B02"}, None, [])
    assert rows["version"] == ["updated:v1" if kind == "updated" else "checksum:v1"]


def test_a_local_stac_asset_without_a_version_is_fingerprinted_by_its_file(tmp_path: Path, small_dir: Path) -> None:
    """Items that say neither ``updated`` nor ``file:checksum`` (as many static catalogs): a local asset
    rewritten in place, the same size, is seen by its file's mtime, and its date alone recomputed."""
    inputs = make_inputs(tmp_path, small_dir)
    items = items_from_files(sorted(str(p) for p in inputs.glob("*/*.tif")))
    for it in items:
        it["properties"].pop("updated", None)
        for asset in it["assets"].values():
            asset.pop("updated", None)
            asset.pop("file:checksum", None)
    write_item_collection(items, str(tmp_path / "items.json"))
    path = write_config(tmp_path, "unused", execution={"scheduler": "threads"})
    raw = yaml.safe_load(path.read_text())
    raw["inputs"] = {"stac": str(tmp_path / "items.json")}
    path.write_text(yaml.safe_dump(raw))
    cfg = load_config(path, [f"output.path={tmp_path / 'cube.zarr'}"])
    pipeline.run(cfg)
    assert pipeline.update(cfg).report["update"]["recomputed"] == []
    changed = next(it for it in items if it["properties"]["datetime"].startswith("2024-06-11"))
    href = sorted(a["href"] for a in changed["assets"].values())[0]
    local = Path(href.removeprefix("file://"))
    data = local.read_bytes()
    local.write_bytes(data)  # rewritten in place: the same bytes and size, a new mtime
    os.utime(local, ns=(local.stat().st_atime_ns, local.stat().st_mtime_ns + 10**9))
    u = pipeline.update(cfg).report["update"]
    assert len(u["recomputed"]) == 1 and u["recomputed"][0].startswith("2024-06-11"), u
    assert u["why"][u["recomputed"][0]] == [f"tile rewritten: {href} (modified)"]


def test_a_stac_record_of_sizes_alone_is_compared_by_size() -> None:
    """A cube recorded with a STAC asset's ``file:size`` alone (``size:0``), the asset now a local file
    fingerprinted by its stat: an mtime of 0 is not known, so the size decides, and nothing is recomputed."""
    assert source_change(fingerprint(100, 0), fingerprint(100, 1_717_000_000 * 10**9)) is None
    assert source_change(fingerprint(100, 0), fingerprint(101, 1_717_000_000 * 10**9)) == "size 100 -> 101"
    assert source_change(fingerprint(100, 5), fingerprint(100, 6)) == "modified"


def _plain_tiff(src: Path, dst: Path, values: Any = None) -> None:
    """``src`` as an uncompressed GeoTIFF (its size set by its shape alone), with other ``values`` if given."""
    with rasterio.open(src) as s:
        data, profile = s.read(1), s.profile
    profile.update(driver="GTiff", compress=None, tiled=False)
    for k in ("blockxsize", "blockysize", "interleave"):
        profile.pop(k, None)
    dst.parent.mkdir(parents=True, exist_ok=True)
    with rasterio.open(dst, "w", **profile) as d:
        d.write(data if values is None else values(data).astype(data.dtype), 1)


def test_bucket_objects_without_a_stac_version_are_compared_by_their_etag(
    tmp_path: Path, small_dir: Path, s3_server: Any, s3_bucket: str
) -> None:
    """Items in a bucket that say neither ``updated`` nor ``file:checksum``: an update takes each object's
    ETag (one HEAD each), so an object rewritten with other bytes of the same size is seen, once an update
    that published a date has recorded the ETags."""
    client = s3_server.client()
    local = tmp_path / "tiles"
    for f in sorted(small_dir.glob("*/*.tif")):
        _plain_tiff(f, local / f.parent.name / f.name)
    items = items_from_files(sorted(str(p) for p in local.glob("*/*.tif")))
    for it in items:
        it["properties"].pop("updated", None)
        for asset in it["assets"].values():
            asset.pop("file:checksum", None)
            asset["href"] = f"s3://{s3_bucket}/" + Path(asset["href"]).relative_to(local).as_posix()
    upload_tree(client, local, s3_bucket, "")
    write_item_collection(items, str(tmp_path / "items.json"))
    path = write_config(
        tmp_path, "unused", execution={"scheduler": "threads"}, storage={"endpoint_url": s3_server.endpoint_url}
    )
    raw = yaml.safe_load(path.read_text())
    raw["inputs"] = {"stac": str(tmp_path / "items.json")}
    path.write_text(yaml.safe_dump(raw))
    cfg = load_config(path, [f"output.path={tmp_path / 'cube.zarr'}"])
    first = [it for it in items if it["properties"]["datetime"].startswith(SMALL_DATES[0])]
    write_item_collection([it for it in items if it not in first[:1]], str(tmp_path / "items.json"))
    pipeline.run(cfg)  # one tile short on the first date
    write_item_collection(items, str(tmp_path / "items.json"))
    u = pipeline.update(cfg).report["update"]  # its tile added: the date recomputed, the ETags recorded
    assert len(u["recomputed"]) == 1 and u["recomputed"][0].startswith(SMALL_DATES[0]), u
    assert pipeline.update(cfg).report["update"]["recomputed"] == []
    href = sorted(a["href"] for a in first[0]["assets"].values())[0]
    key = href.split(f"{s3_bucket}/", 1)[1]
    size = client.head_object(Bucket=s3_bucket, Key=key)["ContentLength"]
    _plain_tiff(local / key, tmp_path / "rewritten.tif", lambda d: d // 2 + 7)  # the same shape: the same size
    assert (tmp_path / "rewritten.tif").stat().st_size == size
    client.upload_file(str(tmp_path / "rewritten.tif"), s3_bucket, key)
    u = pipeline.update(cfg).report["update"]
    assert len(u["recomputed"]) == 1 and u["recomputed"][0].startswith(SMALL_DATES[0]), u
    (why,) = [w for w in u["why"][u["recomputed"][0]] if href in w]
    assert why.startswith(f"tile rewritten: {href} (etag "), why
