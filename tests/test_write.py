"""Chunk writes: the direct path stores exactly what zarr-python would, byte for byte once decoded."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec

from pipeline.errors import StoreError
from pipeline.store import layout, write, zarr3


def _pair(tmp_path: Path, dtype: str, fill: float, compressors: list[object] | None) -> tuple[str, str]:
    """The same array twice: one written by zarr-python, one by write_chunk."""
    paths = []
    for name in ("zarr", "direct"):
        path = str(tmp_path / f"{name}.zarr")
        group = zarr.create_group(store=path, zarr_format=3)
        group.create_array(
            "b", shape=(2, 300, 250), chunks=(1, 128, 128), dtype=dtype, fill_value=fill, compressors=compressors
        )
        paths.append(path)
    return paths[0], paths[1]


@pytest.mark.parametrize(
    ("dtype", "fill", "compressors", "direct"),
    [
        ("uint16", 0, [ZstdCodec(level=3)], True),
        ("int16", -9999, [ZstdCodec(level=1, checksum=True)], True),
        ("float32", np.nan, [GzipCodec(level=4)], True),
        ("uint8", 0, None, True),
        ("uint16", 0, [BloscCodec(cname="zstd", clevel=3, shuffle="bitshuffle")], False),
    ],
)
def test_direct_writes_equal_zarr_writes(
    tmp_path: Path, dtype: str, fill: float, compressors: list[object] | None, direct: bool
) -> None:
    ref_path, path = _pair(tmp_path, dtype, fill, compressors)
    ref = zarr.open_array(ref_path, path="b", mode="r+")
    assert (write.open_array(path, "b").encode is not None) == direct
    rng = np.random.default_rng(0)
    for t in range(2):
        for r0 in range(0, 300, 128):
            for c0 in range(0, 250, 128):
                h, w = min(128, 300 - r0), min(128, 250 - c0)
                data = rng.integers(0, 200, (h, w)).astype(dtype)
                if (t, r0, c0) == (0, 0, 128):
                    data[:] = fill  # an empty chunk is not stored
                elif (r0 + c0) % 256 == 0:
                    data[: h // 2] = fill  # partly empty
                ref[t, r0 : r0 + h, c0 : c0 + w] = data
                write.write_chunk(path, "b", t, (r0, c0, h, w), data)
    got = zarr.open_array(path, path="b", mode="r")[:]
    np.testing.assert_array_equal(got, ref[:])
    ref_keys = sorted(os.path.relpath(os.path.join(d, f), ref_path) for d, _, fs in os.walk(ref_path) for f in fs)
    keys = sorted(os.path.relpath(os.path.join(d, f), path) for d, _, fs in os.walk(path) for f in fs)
    assert keys == ref_keys and "b/c/0/0/1" not in keys


def test_an_empty_chunk_replaces_an_old_one(tmp_path: Path) -> None:
    _, path = _pair(tmp_path, "uint16", 0, [ZstdCodec(level=3)])
    write.write_chunk(path, "b", 1, (128, 0, 128, 128), np.ones((128, 128), np.uint16))
    assert os.path.exists(os.path.join(path, "b", "c", "1", "1", "0"))
    write.write_chunk(path, "b", 1, (128, 0, 128, 128), np.zeros((128, 128), np.uint16))
    assert not os.path.exists(os.path.join(path, "b", "c", "1", "1", "0"))
    assert (zarr.open_array(path, path="b", mode="r")[1] == 0).all()


def test_unaligned_writes_are_refused(tmp_path: Path) -> None:
    _, path = _pair(tmp_path, "uint16", 0, [ZstdCodec(level=3)])
    with pytest.raises(StoreError, match="not one whole chunk"):
        write.write_chunk(path, "b", 0, (64, 0, 128, 128), np.ones((128, 128), np.uint16))
    with pytest.raises(StoreError, match="not one whole chunk"):
        write.write_chunk(path, "b", 0, (256, 0, 40, 128), np.ones((40, 128), np.uint16))


def test_a_store_made_again_at_the_same_path_is_not_written_with_stale_metadata(tmp_path: Path) -> None:
    path = str(tmp_path / "s.zarr")
    for chunks, compressors in (((1, 128, 128), [ZstdCodec(level=3)]), ((1, 64, 64), [GzipCodec(level=1)])):
        if os.path.exists(path):
            shutil.rmtree(path)
        group = zarr.create_group(store=path, zarr_format=3)
        group.create_array(
            "b", shape=(1, 128, 128), chunks=chunks, dtype="uint16", fill_value=0, compressors=compressors
        )
        data = np.arange(64 * 64, dtype=np.uint16).reshape(64, 64) + 1
        write.write_chunk(
            path,
            "b",
            0,
            (0, 0, 64, 64) if chunks[1] == 64 else (0, 0, 128, 128),
            data if chunks[1] == 64 else np.tile(data, (2, 2)),
        )
        got = zarr.open_array(path, path="b", mode="r")[0, :64, :64]
        np.testing.assert_array_equal(got, data)


@pytest.mark.parametrize(
    ("dtype", "fill", "codec", "compressors"),
    [
        ("uint16", 0, "zstd", [ZstdCodec(level=3)]),
        ("int16", -9999, "gzip", [GzipCodec(level=4)]),
        ("float32", np.nan, "blosc", [BloscCodec(cname="zstd", clevel=5, shuffle="bitshuffle", typesize=4)]),
        ("uint8", 0, "none", None),
        ("float64", -np.inf, "zstd", [ZstdCodec(level=1)]),
    ],
)
def test_array_metadata_is_what_zarr_python_writes(
    tmp_path: Path, dtype: str, fill: float, codec: str, compressors: list[object] | None
) -> None:
    """The template is written as JSON without zarr-python (its import cost the driver 0.26 s): each array's
    metadata must be the document zarr-python itself writes for the same array."""
    import json

    group = zarr.create_group(store=str(tmp_path / "ref.zarr"), zarr_format=3)
    group.create_array(
        "b",
        shape=(2, 300, 250),
        chunks=(1, 128, 128),
        dtype=dtype,
        fill_value=fill,
        compressors=compressors,
        dimension_names=["time", "y", "x"],
        attributes={"k": 1},
    )
    ref = json.loads((tmp_path / "ref.zarr" / "b" / "zarr.json").read_text())
    d = np.dtype(dtype)
    ours = zarr3.array_json(
        (2, 300, 250),
        d,
        (1, 128, 128),
        fill,
        zarr3.codecs_json(codec, 3 if codec == "zstd" else 4 if codec == "gzip" else 5, d),
        ["time", "y", "x"],
        {"k": 1},
    )
    if codec == "zstd" and dtype == "float64":
        ours["codecs"][1]["configuration"]["level"] = 1
    assert ours == ref
    assert write.chunk_encoder(ref) is not None or codec == "blosc"


def test_finalised_store_is_consolidated_as_zarr_does_it(tmp_path: Path, small_dir: Path) -> None:
    import json

    from pipeline.config import load_config
    from pipeline.execute.runner import plan_run
    from tests.helpers import write_config

    cfg = load_config(write_config(tmp_path, str(small_dir / "**" / "*.tif")))
    _, plan = plan_run(cfg)
    for name in ("a.zarr", "b.zarr"):
        layout.create_store(
            plan, str(tmp_path / name), codec="zstd", level=3, config_hash="h", settings={}, overwrite=False
        )
    layout.finalize_store(str(tmp_path / "a.zarr"))
    group = zarr.open_group(str(tmp_path / "b.zarr"), mode="r+")
    group.attrs["pipeline_complete"] = True
    zarr.consolidate_metadata(str(tmp_path / "b.zarr"))
    ours, ref = (json.loads((tmp_path / n / "zarr.json").read_text()) for n in ("a.zarr", "b.zarr"))
    assert ours == ref
    assert layout.store_is_complete(str(tmp_path / "a.zarr")) and layout.store_config(str(tmp_path / "a.zarr"))["fuse"]
