"""The validated config model: ``load_config(path, overrides)``.

Every problem is a :class:`~pipeline.errors.ConfigError` naming the key
(dotted, as a user would write it in ``--set``) and what to do about it.
Unknown keys are errors, never ignored. Relative paths in the file resolve
against the file's folder; paths given with ``--set`` resolve against the
working directory.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pipeline.errors import ConfigError

FUSE_METHODS = ("first", "last", "min", "max", "mean")
ENGINES = ("auto", "kernels", "gdal")
CODECS = ("zstd", "blosc", "gzip", "none")
DEVICES = ("auto", "cpu", "gpu")
ON_ERROR = ("skip", "fail")

# Keys whose values are paths (resolved against the config folder or the cwd).
_PATH_KEYS = {"inputs.paths", "inputs.stac", "inputs.index", "output.path", "report.path"}
SCHEDULERS = ("auto", "threads", "local-cluster")
GROUPBY = ("solar_day", "time", "none")


def is_url(value: str) -> bool:
    """Whether a path names an object store or web location (``s3://``, ``https://``...) rather than a file."""
    return "://" in value[:16]


DEFAULTS: dict[str, Any] = {
    "storage": {"endpoint_url": None, "region": None, "anonymous": False, "profile": None},
    "inputs": {
        "paths": None,
        "stac": None,
        "stac_search": None,
        "assets": None,
        "groupby": "solar_day",
        "gdal_env": {},
        "pattern": None,
        "date_format": "%Y-%m-%d",
        "bands": None,
        "nodata": None,
        "index": None,
        "trust_index": False,
    },
    "grid": {"crs": None, "resolution": None, "bounds": None},
    "resampling": "average",
    "resampling_engine": "auto",
    "fuse": "first",
    "output": {
        "path": None,
        "chunks": {"y": 1024, "x": 1024},
        "compression": {"codec": "zstd", "level": 3},
        "shards": None,
    },
    "execution": {
        "scheduler": None,
        "workers": "auto",
        "threads_per_worker": 1,
        "device": "auto",
        "partition_mb": 64,
        "retries": 2,
        "on_error": "skip",
        "gpu_profile": None,
    },
    "report": {"path": None},
}


@dataclass(frozen=True)
class StorageConfig:
    """Object-store access, for inputs and output alike. Credentials never live here: they come from the
    usual AWS chain (environment, profile, instance role)."""

    endpoint_url: str | None = None
    """S3-compatible endpoint, e.g. ``http://127.0.0.1:9000``; None: AWS."""
    region: str | None = None
    anonymous: bool = False
    """Unsigned requests (public buckets)."""
    profile: str | None = None
    """A named AWS profile."""


@dataclass(frozen=True)
class InputsConfig:
    paths: tuple[str, ...]
    """Glob patterns: absolute local paths, ``s3://bucket/prefix/**/*.tif`` or ``https://`` URLs; ``**`` recurses.
    Empty when the inputs come from STAC."""
    pattern: str
    """Regex searched in each path (``/`` separators); named groups ``band`` (required), ``date``, ``tile``."""
    date_format: str
    """strptime format of the ``date`` group."""
    bands: tuple[str, ...] | None
    """Only these bands are read, in this order; None: every band found."""
    nodata: float | None
    """Nodata used when a file declares none."""
    index: str | None
    """Absolute path of the Parquet tile index to build/reuse, or None."""
    trust_index: bool = False
    """Use the index as the input list: no glob, no stat, no file opened (planning at scale)."""
    stac: str | None = None
    """A STAC ItemCollection (.json), static catalog (catalog.json) or stac-geoparquet file, local or s3://."""
    stac_search: dict[str, Any] | None = None
    """A STAC API search: {url, collections, bbox, datetime, query}."""
    assets: dict[str, str] | None = None
    """STAC: {band name: asset key}; None: every raster asset, named by its key."""
    groupby: str = "solar_day"
    """STAC: how items become time steps: solar_day | time | none."""
    gdal_env: dict[str, Any] = field(default_factory=dict)
    """Extra GDAL config options for reads (override the cloud defaults)."""


@dataclass(frozen=True)
class GridConfig:
    crs: str
    """Target CRS as the user wrote it (validated)."""
    resolution: tuple[float, float]
    """Pixel size (x, y) in grid CRS units, both positive."""
    bounds: tuple[float, float, float, float] | None
    """(xmin, ymin, xmax, ymax) in the grid CRS, or None for the union of inputs."""


@dataclass(frozen=True)
class OutputConfig:
    path: str
    """Local path (absolute) or ``s3://bucket/prefix/cube.zarr``."""
    chunks_yx: tuple[int, int]
    codec: str
    level: int
    shards_yx: tuple[int, int] | None = None
    """Zarr v3 shard shape (multiples of ``chunks_yx``): one object per shard; None: one object per chunk."""


@dataclass(frozen=True)
class ExecutionConfig:
    scheduler: str
    """auto | threads | local-cluster | an address such as ``tcp://host:8786``."""
    workers: int | None
    """None means auto: one worker per core."""
    threads_per_worker: int
    device: str
    partition_mb: float
    retries: int
    on_error: str
    gpu_profile: dict[str, Any] | None = None
    """Override of the measured GPU profile: {h2d_gb_s, d2h_gb_s, gpu_mpx_s: {method: Mpx/s}}."""

    @property
    def address(self) -> str | None:
        """The existing Dask scheduler's address, or None when the run makes its own workers."""
        return None if self.scheduler in SCHEDULERS else self.scheduler


@dataclass(frozen=True)
class Config:
    inputs: InputsConfig
    grid: GridConfig
    resampling: str
    fuse: str
    output: OutputConfig
    execution: ExecutionConfig
    report_path: str
    source: str | None = field(default=None, compare=False)
    """The config file this came from, for messages."""
    resampling_engine: str = "auto"
    """auto / kernels: the project's array kernels (every method); gdal: GDAL's warper, for comparison."""
    storage: StorageConfig = field(default_factory=StorageConfig)
    """Object-store access for inputs and output."""

    def output_settings(self) -> dict[str, Any]:
        """Every setting that changes the cube's bytes (not how it is computed), flat and dotted."""
        flat: dict[str, Any] = {}
        for section, value in (("inputs", asdict(self.inputs)), ("grid", asdict(self.grid)),
                               ("output", asdict(self.output))):  # fmt: skip
            for k, v in value.items():
                if (section, k) not in (("inputs", "index"), ("output", "path")):
                    flat[f"{section}.{k}"] = list(v) if isinstance(v, tuple) else v
        flat["resampling"] = self.resampling
        flat["resampling_engine"] = self.resampling_engine
        flat["fuse"] = self.fuse
        return json.loads(json.dumps(flat, sort_keys=True, default=str))

    def output_hash(self) -> str:
        """Hash of :meth:`output_settings`."""
        blob = json.dumps(self.output_settings(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def load_config(path: str | os.PathLike[str], overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read a YAML config, apply ``KEY=VALUE`` overrides, validate, resolve paths."""
    return validate(read_config(path, overrides), source=str(path))


def read_config(path: str | os.PathLike[str], overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """The config file's mapping with paths resolved and overrides applied, not yet validated."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError("CONFIG", f"cannot read config file {path}: {e.strerror or e}") from e
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise ConfigError("CONFIG", f"{path} is not valid YAML: {e}") from e
    if not isinstance(raw, dict):
        raise ConfigError("CONFIG", f"{path} must hold a mapping of sections, not {type(raw).__name__}")
    base = path.resolve().parent
    raw = _resolve_paths(raw, base)
    for item in overrides:
        raw = apply_override(raw, item)
    return raw


def uses_scheduler(raw: dict[str, Any]) -> bool:
    """Whether an unvalidated config names an existing Dask scheduler (``execution.scheduler``)."""
    execution = raw.get("execution")
    if not isinstance(execution, dict):
        return False
    value = execution.get("scheduler")
    return isinstance(value, str) and value not in SCHEDULERS


def apply_override(raw: dict[str, Any], item: str) -> dict[str, Any]:
    """Return ``raw`` with one ``a.b=c`` override applied (value YAML-parsed, paths against cwd)."""
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(item, "an override must look like KEY=VALUE, e.g. execution.workers=4")
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError as e:
        raise ConfigError(key, f"value {text!r} is not valid YAML: {e}") from e
    if key in _PATH_KEYS:
        value = _resolve_path_value(value, Path.cwd())
    out = copy.deepcopy(raw)
    node = out
    parts = key.split(".")
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(".".join(parts[: i + 1]), "is a value, not a section; cannot set a key inside it")
        node = child
    node[parts[-1]] = value
    return out


def _resolve_path_value(value: Any, base: Path) -> Any:
    if isinstance(value, str):
        return value if os.path.isabs(value) or is_url(value) else os.path.normpath(str(base / value))
    if isinstance(value, list):
        return [_resolve_path_value(v, base) for v in value]
    return value


def _resolve_paths(raw: dict[str, Any], base: Path) -> dict[str, Any]:
    out = copy.deepcopy(raw)
    for key in _PATH_KEYS:
        section, name = key.split(".")
        node = out.get(section)
        if isinstance(node, dict) and name in node:
            node[name] = _resolve_path_value(node[name], base)
    return out


def _merge_defaults(raw: dict[str, Any]) -> dict[str, Any]:
    """Defaults under the user's values; unknown keys are errors."""

    def merge(defaults: dict[str, Any], given: dict[str, Any], prefix: str) -> dict[str, Any]:
        merged = copy.deepcopy(defaults)
        for k, v in given.items():
            dotted = f"{prefix}{k}"
            if k not in defaults:
                known = ", ".join(sorted(defaults))
                raise ConfigError(dotted, f"unknown key (known here: {known})")
            if isinstance(defaults[k], dict) and k not in ("chunks", "gpu_profile", "gdal_env"):
                if v is None:
                    continue
                if not isinstance(v, dict):
                    raise ConfigError(dotted, f"must be a mapping, got {v!r}")
                merged[k] = merge(defaults[k], v, dotted + ".")
            else:
                merged[k] = v
        return merged

    return merge(DEFAULTS, raw, "")


def _resampling_methods() -> tuple[str, ...]:
    """The kernels' methods, imported when a config is validated: :func:`read_config` imports no numpy,
    so ``pipeline run`` starts its workers' fork server before it."""
    from pipeline.resample.kernels import KERNEL_METHODS

    return KERNEL_METHODS


def _choice(value: Any, key: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ConfigError(key, f"must be one of {' | '.join(choices)}, got {value!r}")
    return str(value)


def _pos_int(value: Any, key: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(key, f"must be an integer >= {minimum}, got {value!r}")
    return value


def _pos_number(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(key, f"must be a positive number, got {value!r}")
    return float(value)


def validate_crs(value: Any, key: str) -> str:
    """Check that ``value`` names a CRS (EPSG code, WKT, PROJ string); return it as given."""
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise ConfigError(key, f"must be a CRS such as 'EPSG:32632', got {value!r}")
    from pyproj import CRS
    from pyproj.exceptions import CRSError

    try:
        CRS.from_user_input(value)
    except CRSError as e:
        raise ConfigError(key, f"{value!r} is not a CRS pyproj/GDAL knows (try 'EPSG:32632'): {e}") from e
    return str(value)


def _gpu_profile(value: Any) -> dict[str, Any] | None:
    key = "execution.gpu_profile"
    if value is None:
        return None
    if not isinstance(value, dict) or not {"h2d_gb_s", "d2h_gb_s", "gpu_mpx_s"} <= set(value):
        raise ConfigError(key, "must be null or a mapping with h2d_gb_s, d2h_gb_s and gpu_mpx_s: {method: Mpx/s}")
    unknown = set(value) - {"h2d_gb_s", "d2h_gb_s", "gpu_mpx_s", "cpu_mpx_s", "launch_s"}
    if unknown:
        raise ConfigError(f"{key}.{sorted(unknown)[0]}", "unknown key")
    for k in ("h2d_gb_s", "d2h_gb_s"):
        _pos_number(value[k], f"{key}.{k}")
    for part in ("gpu_mpx_s", "cpu_mpx_s"):
        rates = value.get(part, {})
        if not isinstance(rates, dict):
            raise ConfigError(f"{key}.{part}", "must map a method to Mpx/s")
        for method, rate in rates.items():
            _choice(method, f"{key}.{part}", _resampling_methods())
            _pos_number(rate, f"{key}.{part}.{method}")
    return dict(value)


def validate(raw: dict[str, Any], source: str | None = None) -> Config:
    """Turn a raw (already path-resolved) mapping into a :class:`Config`."""
    c = _merge_defaults(raw)
    i, g, o, x = c["inputs"], c["grid"], c["output"], c["execution"]

    paths = i["paths"]
    if isinstance(paths, str):
        paths = [paths]
    sources = [k for k in ("paths", "stac", "stac_search") if i[k]]
    if len(sources) > 1:
        raise ConfigError(
            f"inputs.{sources[1]}", f"give one of inputs.paths, inputs.stac, inputs.stac_search, not {sources}"
        )
    if not sources:
        raise ConfigError(
            "inputs.paths", "is required (a list of glob patterns), or give inputs.stac / inputs.stac_search"
        )
    pattern = i["pattern"]
    if i["paths"]:
        if not isinstance(paths, list) or not all(isinstance(p, str) and p for p in paths):
            raise ConfigError("inputs.paths", "must be a non-empty list of glob patterns")
        if not isinstance(pattern, str) or not pattern:
            raise ConfigError("inputs.pattern", "is required: a regex with a named group (?P<band>...)")
    else:
        paths = []
        pattern = pattern or r"(?P<band>.+)"
    try:
        rx = re.compile(pattern)
    except re.error as e:
        raise ConfigError("inputs.pattern", f"is not a valid regex: {e}") from e
    if "band" not in rx.groupindex:
        raise ConfigError("inputs.pattern", "needs a named group (?P<band>...) that captures the band name")
    stac = i["stac"]
    if stac is not None and not isinstance(stac, str):
        raise ConfigError("inputs.stac", "must be null or the path/URL of an ItemCollection, catalog.json or .parquet")
    search = i["stac_search"]
    if search is not None:
        if not isinstance(search, dict) or not isinstance(search.get("url"), str):
            raise ConfigError("inputs.stac_search", "must be null or a mapping with url (and collections, bbox, ...)")
        unknown = set(search) - {"url", "collections", "bbox", "datetime", "query", "ids", "max_items"}
        if unknown:
            raise ConfigError(
                f"inputs.stac_search.{sorted(unknown)[0]}",
                "unknown key (known: url, collections, bbox, datetime, query, ids, max_items)",
            )
        search = dict(search)
    assets = i["assets"]
    if assets is not None:
        if isinstance(assets, list):
            assets = {str(a): str(a) for a in assets}
        if not isinstance(assets, dict) or not assets or not all(isinstance(v, str) for v in assets.values()):
            raise ConfigError("inputs.assets", "must be null or a mapping {band name: asset key}")
        assets = {str(k): v for k, v in assets.items()}
    groupby = _choice(i["groupby"], "inputs.groupby", GROUPBY)
    gdal_env = i["gdal_env"] or {}
    if not isinstance(gdal_env, dict) or not all(isinstance(k, str) for k in gdal_env):
        raise ConfigError("inputs.gdal_env", "must be a mapping of GDAL config options, e.g. {GDAL_HTTP_MAX_RETRY: 5}")
    gdal_env = {k: ("YES" if v is True else "NO" if v is False else str(v)) for k, v in gdal_env.items()}
    secret = [k for k in gdal_env if re.search(r"SECRET|PASSWORD|TOKEN|USERPWD|ACCESS_KEY|CONNECTION_STRING|HEADER", k)]
    if secret:  # it would travel in the task graph and the report's config
        raise ConfigError("inputs.gdal_env", f"{secret[0]} holds a credential: give it through the AWS chain "
                          "(environment, storage.profile, instance role), not the config")  # fmt: skip
    if not isinstance(i["date_format"], str):
        raise ConfigError("inputs.date_format", "must be a strptime format such as '%Y-%m-%d'")
    bands = i["bands"]
    if bands is not None:
        if isinstance(bands, str):
            bands = [bands]
        if not isinstance(bands, list) or not bands or not all(isinstance(b, (str, int)) for b in bands):
            raise ConfigError("inputs.bands", "must be null or a non-empty list of band names")
        bands = tuple(str(b) for b in bands)
    nodata = i["nodata"]
    if nodata is not None and (isinstance(nodata, bool) or not isinstance(nodata, (int, float))):
        raise ConfigError("inputs.nodata", f"must be null or a number, got {nodata!r}")
    index = i["index"]
    if index is not None and not isinstance(index, str):
        raise ConfigError("inputs.index", "must be null or a path to a .parquet file")
    if not isinstance(i["trust_index"], bool):
        raise ConfigError("inputs.trust_index", f"must be true or false, got {i['trust_index']!r}")
    if i["trust_index"] and index is None:
        raise ConfigError("inputs.trust_index", "needs inputs.index: the Parquet index to trust")

    crs = validate_crs(g["crs"], "grid.crs") if g["crs"] is not None else None
    if crs is None:
        raise ConfigError("grid.crs", "is required, e.g. 'EPSG:32632'")
    res = g["resolution"]
    if isinstance(res, list) and len(res) == 2:
        res_xy = (_pos_number(res[0], "grid.resolution"), _pos_number(res[1], "grid.resolution"))
    else:
        r = _pos_number(res, "grid.resolution")
        res_xy = (r, r)
    bounds = g["bounds"]
    if bounds is not None:
        if (
            not isinstance(bounds, list)
            or len(bounds) != 4
            or not all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bounds)
        ):
            raise ConfigError("grid.bounds", "must be null or [xmin, ymin, xmax, ymax]")
        if not (bounds[0] < bounds[2] and bounds[1] < bounds[3]):
            raise ConfigError("grid.bounds", f"needs xmin < xmax and ymin < ymax, got {bounds}")
        bounds = tuple(float(b) for b in bounds)

    resampling = _choice(c["resampling"], "resampling", _resampling_methods())
    engine = _choice(c["resampling_engine"], "resampling_engine", ENGINES)
    fuse = _choice(c["fuse"], "fuse", FUSE_METHODS)

    if not isinstance(o["path"], str) or not o["path"]:
        raise ConfigError("output.path", "is required: where to write the Zarr store")
    chunks = o["chunks"]
    if not isinstance(chunks, dict) or set(chunks) - {"x", "y"}:
        raise ConfigError("output.chunks", f"must be a mapping with keys y and x, got {chunks!r}")
    chunks_yx = (
        _pos_int(chunks.get("y", 1024), "output.chunks.y"),
        _pos_int(chunks.get("x", 1024), "output.chunks.x"),
    )
    shards = o["shards"]
    shards_yx = None
    if shards is not None:
        if not isinstance(shards, dict) or set(shards) - {"x", "y"}:
            raise ConfigError("output.shards", f"must be null or a mapping with keys y and x, got {shards!r}")
        shards_yx = (
            _pos_int(shards.get("y", chunks_yx[0]), "output.shards.y"),
            _pos_int(shards.get("x", chunks_yx[1]), "output.shards.x"),
        )
        for axis, s_, c_ in (("y", shards_yx[0], chunks_yx[0]), ("x", shards_yx[1], chunks_yx[1])):
            if s_ % c_:
                raise ConfigError(
                    f"output.shards.{axis}", f"must be a multiple of output.chunks.{axis} ({c_}), got {s_}"
                )
    comp = o["compression"]
    codec = _choice(comp.get("codec"), "output.compression.codec", CODECS)
    level = comp.get("level")
    if isinstance(level, bool) or not isinstance(level, int):
        raise ConfigError("output.compression.level", f"must be an integer, got {level!r}")

    scheduler = x["scheduler"] or "auto"
    if not isinstance(scheduler, str) or (scheduler not in SCHEDULERS and "://" not in scheduler):
        raise ConfigError(
            "execution.scheduler",
            f"must be auto | threads | local-cluster or an address like tcp://host:8786, got {scheduler!r}",
        )
    workers = None if x["workers"] in ("auto", None) else _pos_int(x["workers"], "execution.workers")
    execution = ExecutionConfig(
        scheduler=scheduler,
        workers=workers,
        threads_per_worker=_pos_int(x["threads_per_worker"], "execution.threads_per_worker"),
        device=_choice(x["device"], "execution.device", DEVICES),
        partition_mb=_pos_number(x["partition_mb"], "execution.partition_mb"),
        retries=_pos_int(x["retries"], "execution.retries", minimum=0),
        on_error=_choice(x["on_error"], "execution.on_error", ON_ERROR),
        gpu_profile=_gpu_profile(x["gpu_profile"]),
    )

    report_path = c["report"]["path"]
    if report_path is None:
        stem = o["path"][:-5] if o["path"].endswith(".zarr") else o["path"]
        report_path = stem + ".report.json"
    elif not isinstance(report_path, str):
        raise ConfigError("report.path", "must be null or a file path")

    st = c["storage"]
    for k in ("endpoint_url", "region", "profile"):
        if st[k] is not None and not isinstance(st[k], str):
            raise ConfigError(f"storage.{k}", f"must be null or a string, got {st[k]!r}")
    if st["endpoint_url"] is not None and not st["endpoint_url"].startswith(("http://", "https://")):
        raise ConfigError("storage.endpoint_url", f"must be an http:// or https:// URL, got {st['endpoint_url']!r}")
    if not isinstance(st["anonymous"], bool):
        raise ConfigError("storage.anonymous", f"must be true or false, got {st['anonymous']!r}")

    return Config(
        storage=StorageConfig(**st),
        inputs=InputsConfig(
            paths=tuple(paths),
            pattern=pattern,
            date_format=i["date_format"],
            bands=bands,
            nodata=None if nodata is None else float(nodata),
            index=index,
            trust_index=i["trust_index"],
            stac=stac,
            stac_search=search,
            assets=assets,
            groupby=groupby,
            gdal_env=gdal_env,
        ),
        grid=GridConfig(crs=crs, resolution=res_xy, bounds=bounds),
        resampling=resampling,
        fuse=fuse,
        output=OutputConfig(path=o["path"], chunks_yx=chunks_yx, codec=codec, level=level, shards_yx=shards_yx),
        execution=execution,
        report_path=report_path,
        source=source,
        resampling_engine=engine,
    )
