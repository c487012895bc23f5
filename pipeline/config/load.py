"""Reading a config: ``load_config(path, overrides)``; the model itself is :mod:`pipeline.config.model`.

Every problem is a :class:`~pipeline.errors.ConfigError` naming the key
(dotted, as a user would write it in ``--set``) and what to do about it.
Unknown keys are errors, never ignored. Relative paths in the file resolve
against the file's folder; paths given with ``--set`` resolve against the
working directory. This module imports no pydantic (nor numpy): ``pipeline run`` reads
the config with it, starts its workers' fork server, then validates.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.errors import ConfigError
from pipeline.execute.executors import NAMES

if TYPE_CHECKING:
    from pipeline.config.model import Config

# Keys whose values are paths (resolved against the config folder or the cwd).
_PATH_KEYS = {"inputs.paths", "inputs.stac", "inputs.index", "output.path", "report.path"}
SCHEDULERS = NAMES
"""``execution.scheduler``'s modes (:mod:`pipeline.execute.executors`'s names); any other value is the address
of an existing Dask scheduler."""


def is_url(value: str) -> bool:
    """Whether a path names an object store or web location (``s3://``, ``https://``...) rather than a file."""
    return "://" in value[:16]


def load_config(path: str | os.PathLike[str], overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read a YAML config, apply ``KEY=VALUE`` overrides, validate, resolve paths."""
    return validate(read_config(path, overrides), source=str(path))


def read_config(path: str | os.PathLike[str], overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """The config file's mapping with paths resolved and overrides applied, not yet validated."""
    import yaml  # (here, not at the top: worker processes import this package for is_url, never YAML)

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
    import yaml

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


def validate(raw: dict[str, Any], source: str | None = None) -> Config:
    """Turn a raw mapping into a :class:`Config` (the one model; relative paths against the working directory)."""
    from pipeline.config.model import Config

    return Config.model_validate(raw).with_source(source)
