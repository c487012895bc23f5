from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from pipeline.config import load_config
from pipeline.errors import ConfigError
from tests.conftest import PATTERN, write_config


def _cfg(tmp_path: Path, raw: dict) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(raw))
    return p


BASE = {
    "inputs": {"paths": ["tiles/**/*.tif"], "pattern": PATTERN},
    "grid": {"crs": "EPSG:32632", "resolution": 20},
    "output": {"path": "out/x.zarr"},
}


def test_defaults_and_relative_paths(tmp_path: Path) -> None:
    c = load_config(_cfg(tmp_path, BASE))
    assert c.inputs.paths == (str(tmp_path / "tiles/**/*.tif"),)
    assert c.output.path == str(tmp_path / "out/x.zarr")
    assert c.report_path == str(tmp_path / "out/x.report.json")
    assert c.output.chunks_yx == (1024, 1024)
    assert c.execution.workers is None and c.execution.on_error == "skip"
    assert c.grid.resolution == (20.0, 20.0)


def test_set_overrides_parse_yaml_and_resolve_against_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    os.mkdir("elsewhere")
    c = load_config(
        _cfg(tmp_path, BASE),
        ["execution.workers=4", "output.path=elsewhere/y.zarr", "output.chunks={y: 64, x: 32}", "fuse=max"],
    )
    assert c.execution.workers == 4
    assert c.output.path == str(tmp_path / "elsewhere/y.zarr")
    assert c.output.chunks_yx == (64, 32)
    assert c.fuse == "max"


@pytest.mark.parametrize(
    ("mutate", "key"),
    [
        (lambda r: r.update(colour="red"), "colour"),
        (lambda r: r["grid"].update(crs="EPSG:999999"), "grid.crs"),
        (lambda r: r["grid"].update(crs="not a crs"), "grid.crs"),
        (lambda r: r["inputs"].update(pattern=r"(?P<date>\d+)/.*\.tif"), "inputs.pattern"),
        (lambda r: r["inputs"].update(pattern="(unclosed"), "inputs.pattern"),
        (lambda r: r["grid"].update(resolution=-5), "grid.resolution"),
        (lambda r: r["execution"].update(workers=0), "execution.workers"),
        (lambda r: r.update(resampling="lanczos9"), "resampling"),
        (lambda r: r["output"].update(chunks={"y": 10, "z": 3}), "output.chunks.z"),
        (lambda r: r["grid"].update(bounds=[10, 0, 0, 10]), "grid.bounds"),
        (lambda r: r["execution"].update(speed="fast"), "execution.speed"),
    ],
)
def test_bad_config_names_the_key(tmp_path: Path, mutate, key: str) -> None:  # type: ignore[no-untyped-def]
    raw = yaml.safe_load(yaml.safe_dump(BASE)) | {"execution": {}}
    mutate(raw)
    with pytest.raises(ConfigError) as info:
        load_config(_cfg(tmp_path, raw))
    assert info.value.key == key
    assert key in str(info.value)


def test_unknown_override_key_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="execution.wrkers"):
        load_config(_cfg(tmp_path, BASE), ["execution.wrkers=2"])


def test_config_error_is_a_value_error() -> None:
    assert issubclass(ConfigError, ValueError)


def test_output_hash_ignores_execution_settings(tmp_path: Path) -> None:
    p = write_config(tmp_path, "x/*.tif")
    a = load_config(p, ["execution.workers=1"])
    b = load_config(p, ["execution.workers=2", "execution.partition_mb=256"])
    c = load_config(p, ["resampling=nearest"])
    assert a.output_hash() == b.output_hash() != c.output_hash()
