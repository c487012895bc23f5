from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.config import load_config
from pipeline.errors import ConfigError
from tests.helpers import PATTERN, write_config

ROOT = Path(__file__).resolve().parent.parent


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


def test_config_error_keeps_its_key_through_a_worker_round_trip(tmp_path: Path) -> None:
    """A config error raised where Dask pickles it back still names the key, and code that guards a
    ``ValueError`` (what a bad value is in Python) catches it."""
    import pickle

    with pytest.raises(ValueError) as info:
        load_config(_cfg(tmp_path, BASE), ["execution.partition_mb=-1"])
    back = pickle.loads(pickle.dumps(info.value))
    assert isinstance(back, ConfigError)
    assert back.key == "execution.partition_mb" and str(back) == str(info.value)


def test_output_hash_ignores_execution_settings(tmp_path: Path) -> None:
    p = write_config(tmp_path, "x/*.tif")
    a = load_config(p, ["execution.workers=1"])
    b = load_config(p, ["execution.workers=2", "execution.partition_mb=256"])
    c = load_config(p, ["resampling=nearest"])
    assert a.output_hash() == b.output_hash() != c.output_hash()


# -- the typed model: every key, every level, the schema ------------------------------------------

STAC_BASE = {
    "inputs": {"stac_search": {"url": "http://127.0.0.1:1/", "collections": ["s2"]}},
    "grid": {"crs": "EPSG:32632", "resolution": 20},
    "output": {"path": "/out/x.zarr"},
}
FULL = {
    "storage": {"endpoint_url": "http://127.0.0.1:9000", "region": "eu-west-1", "anonymous": False, "profile": None},
    "inputs": BASE["inputs"]
    | {
        "date_format": "%Y-%m-%d",
        "bands": ["B02"],
        "nodata": 0,
        "index": "i.parquet",
        "trust_index": False,
        "gdal_env": {"GDAL_HTTP_MAX_RETRY": 5},
    },
    "grid": {"crs": "EPSG:32632", "resolution": [10, 20], "bounds": [0, 0, 100, 100]},
    "resampling": "nearest",
    "resampling_engine": "auto",
    "fuse": "last",
    "output": {
        "path": "o.zarr",
        "chunks": {"y": 64, "x": 64},
        "compression": {"codec": "zstd", "level": 3},
        "shards": {"y": 128, "x": 128},
    },
    "execution": {
        "scheduler": "auto",
        "workers": 2,
        "threads_per_worker": 1,
        "device": "cpu",
        "partition_mb": 8,
        "retries": 1,
        "on_error": "fail",
        "gpu_profile": {"h2d_gb_s": 10, "d2h_gb_s": 10, "gpu_mpx_s": {"nearest": 500}},
    },
    "report": {"path": "r.json"},
}
SECTIONS = [  # (a config holding the section, the section's dotted key)
    (FULL, ""),
    (FULL, "storage"),
    (FULL, "inputs"),
    (STAC_BASE, "inputs.stac_search"),
    (FULL, "grid"),
    (FULL, "output"),
    (FULL, "output.chunks"),
    (FULL, "output.compression"),
    (FULL, "output.shards"),
    (FULL, "execution"),
    (FULL, "execution.gpu_profile"),
    (FULL, "report"),
]


def _validate(raw: dict) -> object:
    from pipeline.config import validate

    return validate(yaml.safe_load(yaml.safe_dump(raw)))


@pytest.mark.parametrize(("raw", "section"), SECTIONS, ids=[s or "top" for _, s in SECTIONS])
def test_an_unknown_key_at_any_level_is_an_error_naming_it(raw: dict, section: str) -> None:
    raw = yaml.safe_load(yaml.safe_dump(raw))
    node = raw
    for part in filter(None, section.split(".")):
        node = node[part]
    known = sorted(node)
    node["colour"] = "red"
    key = f"{section}.colour".lstrip(".")
    with pytest.raises(ConfigError) as info:
        _validate(raw)
    assert info.value.key == key
    assert f"config key '{key}': unknown key" in str(info.value)
    assert all(k in info.value.problem for k in known)  # says what is known there


def test_every_key_of_the_full_config_validates() -> None:
    c = _validate(FULL)
    assert c.output.shards_yx == (128, 128) and c.execution.gpu_profile["gpu_mpx_s"] == {"nearest": 500.0}


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("output.chunks.y", "a", "must be an integer >= 1"),
        ("output.chunks.x", 0, "must be an integer >= 1"),
        ("output.shards.x", 100, "must be a multiple of output.chunks.x"),
        ("output.compression.level", 1.5, "must be an integer"),
        ("output.compression.codec", "lz4", "must be one of zstd | blosc | gzip | none"),
        ("output.zarr_format", 4, "must be one of 2 | 3"),
        ("output.path", 5, "must be a string"),
        ("execution.retries", -1, "must be an integer >= 0"),
        ("execution.workers", "many", "must be an integer >= 1"),
        ("execution.partition_mb", 0, "must be a positive number"),
        ("execution.device", "tpu", "must be one of auto | cpu | gpu"),
        ("execution.scheduler", "fast", "must be auto | threads | processes | local-cluster or an address"),
        ("execution.gpu_profile.h2d_gb_s", -1, "must be a positive number"),
        ("execution.gpu_profile.gpu_mpx_s.lanczos", 3, "must be one of nearest | bilinear"),
        ("storage.anonymous", "yes", "must be true or false"),
        ("storage.endpoint_url", "ftp://x", "must be an http:// or https:// URL"),
        ("inputs.nodata", "x", "must be a number"),
        ("inputs.trust_index", 1, "must be true or false"),
        ("inputs.bands", [], "must be null or a non-empty list of band names"),
        ("inputs.gdal_env", [1], "must be a mapping of GDAL config options"),
        ("inputs.groupby", "month", "must be one of solar_day | time | none"),
        ("grid.resolution", "x", "must be a positive number"),
        ("grid.bounds", [0, 0, 1], "must be null or [xmin, ymin, xmax, ymax]"),
        ("fuse", "median", "must be one of first | last | min | max | mean"),
        ("resampling_engine", "fast", "must be one of auto | kernels | gdal"),
        ("report", "r.json", "must be a mapping"),
    ],
)
def test_a_wrong_value_names_the_dotted_key_and_what_is_allowed(key: str, value: object, says: str) -> None:
    raw = yaml.safe_load(yaml.safe_dump(FULL))
    *parents, last = key.split(".")
    node = raw
    for part in parents:
        node = node[part]
    node[last] = value
    with pytest.raises(ConfigError) as info:
        _validate(raw)
    assert info.value.key == key
    assert str(says) in info.value.problem


def test_missing_required_keys_say_what_they_are() -> None:
    raw = yaml.safe_load(yaml.safe_dump(FULL))
    del raw["output"]["path"]
    with pytest.raises(ConfigError, match=r"'output.path': is required: Where to write"):
        _validate(raw)
    del raw["grid"]  # null CRS and resolution: inferred from the inputs when planning
    raw["output"]["path"] = "out.zarr"
    assert _validate(raw).grid.crs is None and _validate(raw).grid.resolution is None
    with pytest.raises(ConfigError, match=r"'inputs.paths': is required"):
        _validate(FULL | {"inputs": {"pattern": PATTERN}})
    with pytest.raises(ConfigError, match=r"'inputs.stac': give one of inputs.paths, inputs.stac"):
        _validate(FULL | {"inputs": FULL["inputs"] | {"stac": "items.json"}})


def test_set_goes_through_the_same_model(tmp_path: Path) -> None:
    p = _cfg(tmp_path, BASE)
    with pytest.raises(ConfigError) as info:
        load_config(p, ["output.chunks={y: 0, x: 64}"])
    assert info.value.key == "output.chunks.y"
    with pytest.raises(ConfigError, match="'output.shards.y': must be a multiple"):
        load_config(p, ["output.chunks.y=64", "output.shards={y: 96}"])
    c = load_config(p, ["output.chunks.y=64", "output.shards={x: 2048}", "execution.workers=auto"])
    assert c.output.shards_yx == (64, 2048) and c.execution.workers is None


def test_zarr_format_2_has_no_shards_and_changes_the_hash_only_where_set(tmp_path: Path) -> None:
    p = _cfg(tmp_path, BASE)
    with pytest.raises(ConfigError) as info:
        load_config(p, ["output.zarr_format=2", "output.shards={y: 1024, x: 1024}"])
    assert info.value.key == "output.shards" and "output.zarr_format" in info.value.problem
    v2, v3, default = (load_config(p, sets) for sets in (["output.zarr_format=2"], ["output.zarr_format=3"], []))
    assert v2.output.zarr_format == 2 and v3.output.zarr_format == default.output.zarr_format == 3
    assert v3.output_hash() == default.output_hash() != v2.output_hash()
    assert v2.output_settings()["output.zarr_format"] == 2 and "output.zarr_format" not in v3.output_settings()


def test_null_sections_and_keys_take_their_defaults(tmp_path: Path) -> None:
    raw = yaml.safe_load(yaml.safe_dump(BASE)) | {"execution": None, "storage": None, "report": None}
    raw["output"]["compression"] = None
    raw["execution"] = {"scheduler": None, "workers": None}
    c = load_config(_cfg(tmp_path, raw))
    assert c.execution.scheduler == "auto" and c.execution.address is None and c.output.codec == "zstd"


def test_urls_are_never_resolved_and_mappings_resolve_against_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipeline.config.model import Config

    monkeypatch.chdir(tmp_path)
    raw = {
        "inputs": {"paths": ["https://example.com/t/*.tif", "rel/*.tif"], "pattern": PATTERN, "index": "i.parquet"},
        "grid": {"crs": "EPSG:32632", "resolution": 20},
        "output": {"path": "s3://bucket/prefix/cube.zarr"},
    }
    c = Config(**raw)
    assert c.inputs.paths == ("https://example.com/t/*.tif", str(tmp_path / "rel/*.tif"))
    assert c.inputs.index == str(tmp_path / "i.parquet")
    assert c.output.path == "s3://bucket/prefix/cube.zarr"
    assert c.report_path == "s3://bucket/prefix/cube.report.json"
    assert Config.model_validate(raw) == c
    with pytest.raises(ConfigError, match="'grid.resolution'"):
        Config(**raw | {"grid": {"crs": "EPSG:32632", "resolution": -1}})


# Hashes of these settings as stores record them: a change breaks --resume of existing stores.
PINNED_HASHES = [
    (
        {
            "inputs": {"paths": ["/data/**/*.tif"], "pattern": PATTERN},
            "grid": {"crs": "EPSG:32632", "resolution": 20},
            "output": {"path": "/out/x.zarr"},
        },
        "85fc6fe3b0cefee7",
    ),
    (
        {
            "inputs": {
                "paths": "/data/*.tif",
                "pattern": r"(?P<band>B\d+)\.tif$",
                "date_format": "%Y%m%d",
                "bands": ["B02", 4],
                "nodata": 0,
                "index": "/i.parquet",
                "trust_index": True,
                "gdal_env": {"GDAL_HTTP_MAX_RETRY": 5, "X": True},
            },
            "grid": {"crs": 32632, "resolution": [10, 20.5], "bounds": [0, 1, 100, 200]},
            "resampling": "nearest",
            "resampling_engine": "gdal",
            "fuse": "max",
            "output": {
                "path": "/out/y.zarr",
                "chunks": {"y": 256, "x": 128},
                "compression": {"codec": "blosc", "level": 5},
                "shards": {"x": 512},
            },
        },
        "ac7d5e53176e6acc",
    ),
    (
        {
            "inputs": {"stac": "/items.json", "assets": ["red", "nir"], "groupby": "time"},
            "grid": {"crs": "EPSG:3857", "resolution": 30},
            "output": {"path": "s3://b/c.zarr"},
        },
        "6ba7c1100c570806",
    ),
    (
        {
            "inputs": {
                "stac_search": {
                    "url": "http://127.0.0.1:1/",
                    "collections": ["s2"],
                    "bbox": [1, 2, 3, 4],
                    "max_items": 10,
                },
                "assets": {"red": "B04"},
            },
            "grid": {"crs": "EPSG:3857", "resolution": 30},
            "output": {"path": "/o.zarr"},
        },
        "788f7b2563904391",
    ),
]


@pytest.mark.parametrize(("raw", "expected"), PINNED_HASHES)
def test_output_hash_is_pinned(raw: dict, expected: str) -> None:
    """The hash the dataclass config gave for these settings: stores written before resume with it."""
    assert _validate(raw).output_hash() == expected


def test_config_is_frozen_picklable_and_round_trips_through_yaml(tmp_path: Path) -> None:
    import pickle

    from pipeline.config.model import Config

    c = load_config(_cfg(tmp_path, FULL))
    with pytest.raises(ValueError):
        c.fuse = "max"  # type: ignore[misc]
    back = pickle.loads(pickle.dumps(c))
    assert back == c and back.source == c.source == str(tmp_path / "c.yaml")
    again = Config.model_validate(yaml.safe_load(c.to_yaml()))
    assert again.to_yaml() == c.to_yaml() and again.output_hash() == c.output_hash()


def test_resampling_choices_are_the_kernels_methods() -> None:
    from typing import get_args

    from pipeline.config.model import Resampling
    from pipeline.resample.kernels import KERNEL_METHODS

    assert get_args(Resampling) == KERNEL_METHODS


CONTRACT_KEYS = [
    "storage.endpoint_url",
    "storage.region",
    "storage.anonymous",
    "storage.profile",
    "inputs.paths",
    "inputs.stac",
    "inputs.stac_search",
    "inputs.assets",
    "inputs.groupby",
    "inputs.gdal_env",
    "inputs.pattern",
    "inputs.date_format",
    "inputs.bands",
    "inputs.nodata",
    "inputs.index",
    "grid.crs",
    "grid.resolution",
    "grid.bounds",
    "resampling",
    "fuse",
    "output.path",
    "output.chunks",
    "output.compression",
    "output.shards",
    "execution.scheduler",
    "execution.workers",
    "execution.threads_per_worker",
    "execution.device",
    "execution.partition_mb",
    "execution.retries",
    "execution.on_error",
    "report.path",
]


def _schema_keys(schema: dict, node: dict, prefix: str = "") -> dict[str, dict]:
    """Dotted key -> property schema, following $ref and anyOf into nested objects."""
    out = {}
    for name, prop in node.get("properties", {}).items():
        key = f"{prefix}{name}"
        out[key] = prop
        for sub in [prop, *prop.get("anyOf", [])]:
            if "$ref" in sub:
                out.update(_schema_keys(schema, schema["$defs"][sub["$ref"].split("/")[-1]], key + "."))
    return out


def test_the_schema_describes_every_key_and_validates_the_shipped_configs() -> None:
    import jsonschema

    from pipeline.config.model import json_schema

    schema = json_schema()
    keys = _schema_keys(schema, schema)
    assert set(CONTRACT_KEYS) <= set(keys)
    assert {
        "output.chunks.y",
        "output.compression.level",
        "inputs.stac_search.url",
        "inputs.trust_index",
        "execution.gpu_profile.gpu_mpx_s",
        "resampling_engine",
    } <= set(keys)

    def described(prop: dict) -> bool:  # on the key, or on the section it refers to
        ref = prop.get("$ref", "").split("/")[-1]
        return bool(prop.get("description") or schema["$defs"].get(ref, {}).get("description"))

    assert not [k for k, p in keys.items() if not described(p)]
    root = Path(__file__).parent.parent
    configs = sorted((root / "configs").glob("*.yaml"))
    assert configs
    for path in configs:
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)
    for bad in (BASE | {"colour": 1}, BASE | {"output": {"path": "x", "chunks": {"y": 0}}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_pipeline_config_prints_the_resolved_config_and_the_schema(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json
    import subprocess
    import sys

    import jsonschema

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pipeline", "config", *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
        )

    p = _cfg(tmp_path, BASE)
    r = cli(str(p), "--set", "execution.workers=3", "--set", "output.path=y.zarr")
    assert r.returncode == 0, r.stderr
    printed = yaml.safe_load(r.stdout)
    assert printed["execution"]["workers"] == 3 and printed["output"]["chunks"] == {"y": 1024, "x": 1024}
    assert printed["output"]["path"] == str(tmp_path / "y.zarr") and printed["report"]["path"].endswith("y.report.json")
    monkeypatch.chdir(tmp_path)  # where the command ran: --set paths resolve there
    assert load_config(p, ["execution.workers=3", "output.path=y.zarr"]).to_yaml() == r.stdout
    schema = json.loads(cli("--schema").stdout)
    jsonschema.validate(printed, schema)
    bad = cli(str(p), "--set", "output.chunks.z=3")
    assert bad.returncode == 2 and "config key 'output.chunks.z': unknown key (known here: y, x)" in bad.stderr


def test_readme_config_block_names_every_key_and_no_other() -> None:
    """The README's annotated config lists every key of the model (a key under a section shown as
    ``null`` counts as shown) and no key the model does not have: the overview cannot drift from the
    model, whose descriptions (``pipeline config --schema``) are the reference."""
    from pydantic import BaseModel

    from pipeline.config.model import Config

    def model_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
        out = []
        for name, field in model.model_fields.items():
            key = prefix + (field.alias or name)
            out.append(key)
            for t in (*getattr(field.annotation, "__args__", ()), field.annotation):
                if isinstance(t, type) and issubclass(t, BaseModel):
                    out += model_keys(t, key + ".")
        return out

    def readme_keys(mapping: dict[str, Any], prefix: str = "") -> dict[str, Any]:
        out = {}
        for k, v in mapping.items():
            out[prefix + k] = v
            if isinstance(v, dict) and v:
                out.update(readme_keys(v, prefix + k + "."))
        return out

    text = (ROOT / "README.md").read_text()
    block = text.split("## The config", 1)[1].split("```yaml", 1)[1].split("```", 1)[0]
    shown = readme_keys(yaml.safe_load(block))
    missing = [
        k for k in model_keys(Config) if k not in shown and shown.get(k.rpartition(".")[0], "section") is not None
    ]
    assert missing == [], f"README's config block lacks {missing}"
    unknown = sorted(set(shown) - set(model_keys(Config)))
    assert unknown == [], f"README's config block names keys the model does not have: {unknown}"


def test_a_misspelt_key_is_reported_first_with_the_nearest_known_key() -> None:
    raw = yaml.safe_load(yaml.safe_dump(FULL))
    raw["output"]["paht"] = raw["output"].pop("path")  # the misspelling also makes output.path missing
    with pytest.raises(ConfigError) as info:
        _validate(raw)
    assert info.value.key == "output.paht"
    assert info.value.problem.startswith("unknown key (did you mean `output.path`?")
    assert "also 'output.path': is required" in info.value.problem
    raw = yaml.safe_load(yaml.safe_dump(FULL))
    raw["grid"]["resolutoin"] = raw["grid"]["resolution"]
    with pytest.raises(ConfigError, match=r"did you mean `grid.resolution`\?"):
        _validate(raw)
    raw = yaml.safe_load(yaml.safe_dump(FULL))
    raw["grid"]["colour"] = "red"  # nothing near: no guess
    with pytest.raises(ConfigError) as info:
        _validate(raw)
    assert "did you mean" not in info.value.problem
