"""The output store in a bucket and on disk: same bytes through one interface, shards as zarr-python
writes them, partitions that never split a shard, and --overwrite that never removes what the
pipeline did not write (against a real S3 server: moto on loopback)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import obstore
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.codecs import ZstdCodec

from pipeline.config import StorageConfig, load_config
from pipeline.errors import ConfigError
from pipeline.execute.runner import plan_run, run
from pipeline.planning.packing import pack_partitions
from pipeline.storage import object_store, zarr_store
from pipeline.store import layout, write, zarr3
from tests.helpers import write_config


def _objects(url: str, storage: StorageConfig) -> dict[str, bytes]:
    store = object_store(url, storage)
    return {m["path"]: bytes(obstore.get(store, m["path"]).bytes()) for b in obstore.list(store) for m in b}


def _cube_objects(url: str, storage: StorageConfig) -> dict[str, bytes]:
    """Every object but the group's zarr.json (whose consolidated copy of the rest is compared too) and the
    record of the sources (their paths and times differ with where the tiles were read: its dates are kept)."""
    objs = _objects(url, storage)
    for key in [k for k in objs if k.startswith(".pipeline-record/")]:
        objs[key] = json.dumps(sorted(json.loads(objs[key])["dates"])).encode()
    root = json.loads(objs.pop("zarr.json"))
    objs["consolidated"] = json.dumps(root["consolidated_metadata"], sort_keys=True).encode()
    objs["attrs"] = json.dumps({k: v for k, v in root["attributes"].items()}, sort_keys=True).encode()
    return objs


def test_shards_are_what_zarr_python_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A shard written chunk by chunk through StoreWriter holds zarr-python's own shard: the same objects and
    pixels; with zarr's own ZSTD encoder (numcodecs) byte for byte, so the layout (Morton order, index,
    CRC32C) is zarr's. The pipeline's encoder (python-zstandard, another zstd release) compresses the same
    chunks to other, equally valid frames. The sharded array's zarr.json is the document zarr-python writes."""
    import numcodecs

    data = np.random.default_rng(1).integers(0, 500, (1, 300, 250)).astype("uint16")
    data[0, :64, 64:128] = 0  # an empty inner chunk is not stored
    data[0, 256:, :] = 0  # nor an empty shard row
    paths = {}
    for name in ("zarr", "ours", "ours-numcodecs"):
        paths[name] = str(tmp_path / f"{name}.zarr")
        group = zarr.create_group(store=paths[name], zarr_format=3)
        group.create_array(
            "b",
            shape=data.shape,
            chunks=(1, 64, 64),
            shards=(1, 128, 128),
            dtype="uint16",
            fill_value=0,
            compressors=[ZstdCodec(level=3)],
            dimension_names=["time", "y", "x"],
        )
    zarr.open_array(paths["zarr"], path="b", mode="r+")[:] = data
    ref_meta = json.loads(Path(paths["zarr"], "b", "zarr.json").read_text())
    ours_meta = zarr3.array_json(
        data.shape,
        np.dtype("uint16"),
        (1, 128, 128),
        0,
        zarr3.sharding_json(zarr3.codecs_json("zstd", 3, np.dtype("uint16")), (1, 64, 64)),
        ["time", "y", "x"],
        {},
    )
    assert ours_meta == ref_meta

    def objects(name: str) -> dict[str, bytes]:
        root = Path(paths[name])
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in Path(root, "b", "c").rglob("*") if p.is_file()}

    for name in ("ours", "ours-numcodecs"):
        if name == "ours-numcodecs":
            monkeypatch.setattr(write, "zstd_encoder", lambda level, checksum: numcodecs.Zstd(level=level).encode)
        writer = write.StoreWriter(paths[name])
        for r0 in range(0, 300, 64):
            for c0 in range(0, 250, 64):
                writer.write_chunk(
                    "b", 0, (r0, c0, min(64, 300 - r0), min(64, 250 - c0)), data[0, r0 : r0 + 64, c0 : c0 + 64]
                )
        writer.flush()
        np.testing.assert_array_equal(zarr.open_array(paths[name], path="b", mode="r")[:], data)
    ref = objects("zarr")
    assert objects("ours-numcodecs") == ref and len(ref) == 4 and "b/c/0/2/0" not in ref
    assert set(objects("ours")) == set(ref)


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=30),
    costs=st.data(),
    target=st.integers(1, 40),
)
def test_partitions_never_split_a_unit(sizes: list[int], costs: Any, target: int) -> None:
    unit_start = np.cumsum([0, *sizes[:-1]])
    n = int(sum(sizes))
    job_cost = np.array(costs.draw(st.lists(st.integers(1, 10), min_size=n, max_size=n)))
    groups = unit_start[:: max(1, len(sizes) // 3)]
    bounds = pack_partitions(job_cost, float(target), group_start=groups, unit_start=unit_start)
    assert bounds[0] == 0 and bounds[-1] == n and (np.diff(bounds) > 0).all()  # every job once, in order
    assert set(bounds[:-1].tolist()) <= set(unit_start.tolist())  # cuts only where a unit starts


def test_a_sharded_plan_keeps_each_shard_in_one_partition(tmp_path: Path, small_dir: Path) -> None:
    sets = ["output.chunks={y: 64, x: 64}", "output.shards={y: 128, x: 192}", "execution.partition_mb=0.2"]
    cfg = load_config(write_config(tmp_path, str(small_dir / "**" / "*.tif")), sets)
    _, plan = plan_run(cfg)
    owner: dict[tuple[str, int, int, int], int] = {}
    chunks = set()
    for p in plan.partitions:
        for j in p.jobs:
            shard = (j.band, j.t, j.cy // 2, j.cx // 3)
            assert owner.setdefault(shard, p.index) == p.index, f"shard {shard} split across partitions"
            assert (j.band, j.t, j.cy, j.cx) not in chunks
            chunks.add((j.band, j.t, j.cy, j.cx))
    assert len(plan.partitions) > 3 and len(chunks) == plan.n_jobs and len(set(owner.values())) > 3


def _s3_config(tmp_path: Path, small_dir: Path, url: str, endpoint: str, *extra: str) -> Any:
    path = write_config(
        tmp_path,
        str(small_dir / "**" / "*.tif"),
        storage={"endpoint_url": endpoint},
        report={"path": str(tmp_path / "report.json")},
    )
    return load_config(path, [f"output.path={url}", *extra])


def test_s3_output_is_the_local_cube_bit_for_bit(
    tmp_path: Path, small_dir: Path, s3_server: Any, s3_bucket: str
) -> None:
    storage = StorageConfig(endpoint_url=s3_server.endpoint_url)
    url = f"s3://{s3_bucket}/cubes/small.zarr"
    remote = run(_s3_config(tmp_path, small_dir, url, s3_server.endpoint_url))
    local_dir = tmp_path / "local"
    local_dir.mkdir()
    local = run(load_config(write_config(local_dir, str(small_dir / "**" / "*.tif"))))
    assert remote.exit_code == local.exit_code == 0
    ours, ref = _cube_objects(url, storage), _cube_objects(str(local_dir / "out.zarr"), StorageConfig())
    assert sorted(ours) == sorted(ref) and len(ref) > 20
    assert all(ours[k] == ref[k] for k in ref), [k for k in ref if ours[k] != ref[k]]
    assert json.loads(ours["attrs"])["pipeline_complete"] is True
    assert not any(k.startswith(layout.JOURNAL_DIR) for k in ours)
    import rioxarray  # noqa: F401
    import xarray as xr

    ds = xr.open_zarr(zarr_store(url, storage))
    assert ds.rio.crs.to_epsg() == 32632 and set(ds.data_vars) == {"B01", "B02", "B04", "B11"}
    opened, ref_ds = remote.open(), local.open()  # the Python API's result.open(), bucket and local
    for band in ref_ds.data_vars:
        np.testing.assert_array_equal(opened[band].values, ref_ds[band].values)
    assert remote.report["output"]["objects"] == local.report["output"]["objects"] > 0
    diag = {d["check"]: d for d in remote.report["diagnostics"]}
    # 76 small objects: too few requests to judge (test_diagnostics has the store where they matter)
    assert diag["object_size"]["status"] == "ok" and "too few to judge" in diag["object_size"]["detail"]


def test_zarr_v2_in_a_bucket_is_the_local_v2_store_bit_for_bit(
    tmp_path: Path, small_dir: Path, s3_server: Any, s3_bucket: str
) -> None:
    import pipeline

    storage = StorageConfig(endpoint_url=s3_server.endpoint_url)
    url = f"s3://{s3_bucket}/cubes/v2.zarr"
    cfg = _s3_config(tmp_path, small_dir, url, s3_server.endpoint_url, "output.zarr_format=2")
    remote = pipeline.run(cfg)
    local_dir = tmp_path / "local"
    local_dir.mkdir()
    local = pipeline.run(
        load_config(write_config(local_dir, str(small_dir / "**" / "*.tif")), ["output.zarr_format=2"])
    )
    assert remote.exit_code == local.exit_code == 0
    ours, ref = _objects(url, storage), _objects(str(local_dir / "out.zarr"), StorageConfig())
    assert sorted(ours) == sorted(ref) and ".zmetadata" in ref and "B02/0.0.0" in ref
    assert all(ours[k] == ref[k] for k in ref), [k for k in ref if ours[k] != ref[k]]
    assert layout.store_is_complete(url, storage) and layout.inspect_output(url, storage) == ""
    for band, values in local.open().data_vars.items():
        np.testing.assert_array_equal(remote.open()[band].values, values.values)
    assert pipeline.run(cfg, overwrite=True).exit_code == 0  # a v2 store of ours in a bucket is replaced
    assert sorted(_objects(url, storage)) == sorted(ref)


def test_sharded_s3_output_holds_the_same_pixels_in_fewer_objects(
    tmp_path: Path, small_dir: Path, s3_server: Any, s3_bucket: str
) -> None:
    storage = StorageConfig(endpoint_url=s3_server.endpoint_url)
    url = f"s3://{s3_bucket}/sharded.zarr"
    sets = ["output.chunks={y: 64, x: 64}", "execution.partition_mb=0.2"]
    sharded = run(_s3_config(tmp_path, small_dir, url, s3_server.endpoint_url, *sets, "output.shards={y: 128, x: 256}"))
    local_dir = tmp_path / "local"
    local_dir.mkdir()
    plain = run(load_config(write_config(local_dir, str(small_dir / "**" / "*.tif")), sets))
    assert sharded.report["output"]["objects"] < plain.report["output"]["objects"] / 3
    a, b = zarr.open_group(zarr_store(url, storage), mode="r"), zarr.open_group(str(local_dir / "out.zarr"), mode="r")
    for band in ("B01", "B02", "B04", "B11"):
        np.testing.assert_array_equal(a[band][:], b[band][:], err_msg=band)


# --- nothing lost: --overwrite replaces only a store this pipeline wrote ---------------------------------


def _plan(tmp_path: Path, small_dir: Path) -> Any:
    cfg = load_config(write_config(tmp_path, str(small_dir / "**" / "*.tif")))
    return plan_run(cfg)[1]


def _create(
    plan: Any, path: str, storage: StorageConfig | None = None, overwrite: bool = True, zarr_format: int = 3
) -> None:
    layout.create_store(
        plan,
        path,
        codec="zstd",
        level=3,
        config_hash="h",
        settings={},
        overwrite=overwrite,
        storage=storage,
        zarr_format=zarr_format,
    )


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    "case", ["folder", "file", "foreign-zarr", "foreign-zarr2", "ours-plus-a-file", "ours-v2-plus-a-file"]
)
def test_overwrite_refuses_what_the_pipeline_did_not_write_locally(tmp_path: Path, small_dir: Path, case: str) -> None:
    plan = _plan(tmp_path, small_dir)
    target = tmp_path / "target.zarr"
    if case == "folder":
        target.mkdir()
        (target / "thesis.tex").write_text("years of work")
    elif case == "file":
        target.write_text("not a store")
    elif case.startswith("foreign-zarr"):
        fmt = 2 if case.endswith("2") else 3
        zarr.create_group(store=str(target), zarr_format=fmt).create_array("a", shape=(4,), dtype="i1")
        zarr.consolidate_metadata(str(target))  # v2: a .zmetadata without root attributes
    else:
        _create(plan, str(target), zarr_format=2 if "v2" in case else 3)
        (target / "notes.txt").write_text("mine")
    before = _snapshot(target) if target.is_dir() else {"": target.read_bytes()}
    with pytest.raises(ConfigError) as err:
        _create(plan, str(target), overwrite=True)
    assert err.value.key == "output.path" and str(target) in str(err.value)
    assert (_snapshot(target) if target.is_dir() else {"": target.read_bytes()}) == before


def test_overwrite_replaces_a_store_of_the_pipeline_and_exit_2_otherwise(tmp_path: Path, small_dir: Path) -> None:
    import subprocess
    import sys

    plan = _plan(tmp_path, small_dir)
    target = tmp_path / "ours.zarr"
    _create(plan, str(target))
    (target / "B01" / "c" / "0" / "0").mkdir(parents=True)
    (target / "B01" / "c" / "0" / "0" / "0").write_bytes(b"stale chunk")
    with pytest.raises(ConfigError, match="overwrite=True"):
        _create(plan, str(target), overwrite=False)
    _create(plan, str(target), overwrite=True, zarr_format=2)  # a v3 store of ours, replaced by a v2 one
    assert not (target / "B01" / "c").exists() and (target / "B01" / ".zarray").exists()
    assert not layout.store_is_complete(str(target)) and layout.store_config(str(target))["pipeline_config_hash"]
    (target / "B01" / "0.0.0").write_bytes(b"stale chunk")
    with pytest.raises(ConfigError, match="overwrite=True"):
        _create(plan, str(target), overwrite=False)
    _create(plan, str(target), overwrite=True)  # and back
    assert not (target / "B01" / "0.0.0").exists() and not (target / ".zattrs").exists()
    other = tmp_path / "other"
    other.mkdir()
    (other / "data.csv").write_text("1,2")
    cfg = write_config(tmp_path, str(small_dir / "**" / "*.tif"))
    r = subprocess.run(
        [sys.executable, "-m", "pipeline", "run", str(cfg), "--overwrite", "-q", "--set", f"output.path={other}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2 and "output.path" in r.stderr and str(other) in r.stderr
    assert (other / "data.csv").read_text() == "1,2" and sorted(os.listdir(other)) == ["data.csv"]


@pytest.mark.parametrize("case", ["objects", "plain-object", "foreign-zarr", "ours-plus-an-object"])
def test_overwrite_refuses_what_the_pipeline_did_not_write_in_a_bucket(
    tmp_path: Path, small_dir: Path, s3_server: Any, s3_bucket: str, case: str
) -> None:
    plan = _plan(tmp_path, small_dir)
    storage = StorageConfig(endpoint_url=s3_server.endpoint_url)
    client: Any = s3_server.client()
    url = f"s3://{s3_bucket}/out/cube.zarr"
    if case == "objects":
        client.put_object(Bucket=s3_bucket, Key="out/cube.zarr/readme.txt", Body=b"hello")
    elif case == "plain-object":
        client.put_object(Bucket=s3_bucket, Key="out/cube.zarr", Body=b"a file")
    elif case == "foreign-zarr":
        group = zarr.create_group(store=zarr_store(url, storage, read_only=False), zarr_format=3)
        group.create_array("a", shape=(4,), dtype="i1")
    else:
        _create(plan, url, storage)
        client.put_object(Bucket=s3_bucket, Key="out/cube.zarr/notes/n.txt", Body=b"mine")
    before = _objects(f"s3://{s3_bucket}", storage)
    with pytest.raises(ConfigError) as err:
        _create(plan, url, storage, overwrite=True)
    assert err.value.key == "output.path" and url in str(err.value)
    assert _objects(f"s3://{s3_bucket}", storage) == before


def test_overwrite_in_a_bucket_deletes_only_the_store_prefix(
    tmp_path: Path, small_dir: Path, s3_server: Any, s3_bucket: str
) -> None:
    plan = _plan(tmp_path, small_dir)
    storage = StorageConfig(endpoint_url=s3_server.endpoint_url)
    client: Any = s3_server.client()
    url = f"s3://{s3_bucket}/out/cube.zarr"
    _create(plan, url, storage)
    client.put_object(Bucket=s3_bucket, Key="out/cube.zarr/B01/c/0/0/0", Body=b"stale chunk")
    client.put_object(Bucket=s3_bucket, Key="out/cube.zarr2/keep", Body=b"a sibling")
    client.put_object(Bucket=s3_bucket, Key="out/cube.zarr.report.json", Body=b"{}")
    with pytest.raises(ConfigError, match="overwrite=True"):
        _create(plan, url, storage, overwrite=False)
    _create(plan, url, storage, overwrite=True)
    keys = set(_objects(f"s3://{s3_bucket}", storage))
    assert "out/cube.zarr/B01/c/0/0/0" not in keys and "out/cube.zarr/zarr.json" in keys
    assert {"out/cube.zarr2/keep", "out/cube.zarr.report.json"} <= keys


def test_an_unknown_bucket_is_a_config_error_without_secrets(tmp_path: Path, small_dir: Path, s3_server: Any) -> None:
    plan = _plan(tmp_path, small_dir)
    storage = StorageConfig(endpoint_url=s3_server.endpoint_url)
    with pytest.raises(ConfigError) as err:
        _create(plan, "s3://no-such-bucket-here/cube.zarr", storage)
    text = str(err.value)
    assert err.value.key == "output.path" and "no-such-bucket-here" in text
    assert os.environ["AWS_SECRET_ACCESS_KEY"] not in text


def test_storage_options_are_s3fs_style_and_hold_no_secret() -> None:
    from pipeline.storage import storage_options

    opts = storage_options(StorageConfig(endpoint_url="http://127.0.0.1:9000", region="eu-west-1", anonymous=True))
    assert opts == {
        "anon": True,
        "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1"},
    }
    assert storage_options(StorageConfig()) == {}
