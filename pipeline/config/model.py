"""The config model: one pydantic model holds every key, its default, its rules and its documentation.

Here is the top-level :class:`Config` and the translation of pydantic's errors into ConfigErrors; its
sections (``inputs``, ``output``...) are in :mod:`pipeline.config.sections`, re-exported here, and their
field types and validators in :mod:`pipeline.config.fields`.

The field descriptions are the documentation: ``pipeline config --schema`` prints them as the JSON
Schema. Every validation problem becomes a :class:`~pipeline.errors.ConfigError` naming the dotted
key and what is allowed (:func:`config_error`). Path values resolve against the working directory
unless absolute or a URL; :func:`pipeline.config.read_config` has already resolved a file's relative
paths against the file's folder.

This module imports pydantic, so :mod:`pipeline.config` imports it only when a config is validated
(``pipeline run`` starts its workers' fork server before that).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
from typing import Annotated, Any, NotRequired, Required, get_args, get_origin

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, ValidationError, model_validator
from typing_extensions import is_typeddict

from pipeline.config.fields import METHOD_NAMES, Engine, Fuse, Resampling, as_resampling
from pipeline.config.sections import ChunksConfig as ChunksConfig  # (re-exported, as are the other `as` names)
from pipeline.config.sections import (
    CompositeConfig,
    ExecutionConfig,
    GridConfig,
    InputsConfig,
    MaskConfig,
    OutputConfig,
    ReportConfig,
    Section,
    StorageConfig,
)
from pipeline.config.sections import CompressionConfig as CompressionConfig
from pipeline.config.sections import GpuProfile as GpuProfile
from pipeline.config.sections import ShardsConfig as ShardsConfig
from pipeline.config.sections import StacSearch as StacSearch
from pipeline.errors import ConfigError

# -- the model ------------------------------------------------------------------------------------


class Config(Section):
    """A pipeline run: inputs, target grid, resampling, output store, execution, report."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        title="pipeline config",
        json_schema_extra={"$schema": "https://json-schema.org/draft/2020-12/schema"},
    )

    storage: StorageConfig = Field(default_factory=lambda: StorageConfig(), description=StorageConfig.__doc__)
    inputs: InputsConfig = Field(description=InputsConfig.__doc__)
    grid: GridConfig = Field(default_factory=lambda: GridConfig(), description=GridConfig.__doc__)
    resampling: Annotated[
        Resampling | dict[str, Resampling],
        BeforeValidator(as_resampling, json_schema_input_type=Resampling | dict[str, Resampling]),
    ] = Field(
        "average",
        description=" | ".join(METHOD_NAMES) + "; or per band, as odc-stac "
        'takes it: {"*": average, SCL: mode} ("*": every other band; default average). A band STAC marks as '
        "classes or bit flags (classification:*) and not named here takes mode where the rest blend.",
    )
    resampling_engine: Engine = Field(
        "auto", description="auto / kernels: the project's array kernels; gdal: GDAL's warper, for comparison."
    )
    fuse: Fuse = Field("first", description="first | last | min | max | mean: overlapping tiles of one date.")
    mask: MaskConfig | None = Field(None, description="null: none. " + str(MaskConfig.__doc__))
    composite: CompositeConfig | None = Field(
        None, description="null: one time step per date (or groupby group). " + str(CompositeConfig.__doc__)
    )
    output: OutputConfig = Field(description=OutputConfig.__doc__)
    execution: ExecutionConfig = Field(default_factory=lambda: ExecutionConfig(), description=ExecutionConfig.__doc__)
    report: ReportConfig = Field(default_factory=lambda: ReportConfig(), description="The run's JSON report.")

    _source: str | None = PrivateAttr(None)

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as e:
            raise config_error(e) from e

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Config:  # type: ignore[override]
        """As pydantic's, with every problem a ConfigError naming the dotted key."""
        try:
            return super().model_validate(obj, *args, **kwargs)
        except ValidationError as e:
            raise config_error(e) from e

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str], overrides: list[str] | tuple[str, ...] = ()) -> Config:
        """Read a YAML config (its relative paths against its folder), apply ``KEY=VALUE`` overrides, validate."""
        from pipeline.config import read_config

        return cls.model_validate(read_config(path, overrides)).with_source(str(path))

    @model_validator(mode="before")
    @classmethod
    def _report_next_to_output(cls, data: Any) -> Any:
        if isinstance(data, dict):
            out, rep = data.get("output"), data.get("report")
            path = out.get("path") if isinstance(out, dict) else None
            if isinstance(path, str) and path and (rep is None or (isinstance(rep, dict) and rep.get("path") is None)):
                stem = path[:-5] if path.endswith(".zarr") else path
                data = data | {"report": (rep or {}) | {"path": stem + ".report.json"}}
        return data

    def with_source(self, source: str | None) -> Config:
        """A copy of this config that remembers the file it came from (for messages and the report)."""
        copy = self.model_copy()
        copy._source = source
        return copy

    @property
    def source(self) -> str | None:
        """The config file this came from, or None."""
        return self._source

    @property
    def report_path(self) -> str:
        """Where the report is written (``report.path``, filled in from ``output.path`` when not given)."""
        assert self.report.path is not None  # filled in from output.path by validation
        return self.report.path

    @property
    def default_resampling(self) -> str:
        """The method of bands ``resampling`` does not name (its ``"*"``; ``average`` where it has none)."""
        if isinstance(self.resampling, str):
            return self.resampling
        return self.resampling.get("*", "average")

    @model_validator(mode="after")
    def _resampling_bands(self) -> Config:
        if isinstance(self.resampling, dict):
            listed = self.inputs.bands
            unknown = [b for b in self.resampling if b != "*" and listed is not None and b not in listed]
            if unknown:
                raise ConfigError(
                    "resampling", f"names band(s) {unknown} that inputs.bands {list(listed or ())} leaves out"
                )
        return self

    def output_settings(self) -> dict[str, Any]:
        """Every setting that changes the cube's bytes (not how it is computed), flat and dotted. Its keys and
        values are what stores record: a resumed run compares them (and :meth:`output_hash`)."""
        i, g, o = self.inputs, self.grid, self.output
        flat: dict[str, Any] = {
            "inputs.paths": list(i.paths),
            "inputs.pattern": i.pattern,
            "inputs.date_format": i.date_format,
            "inputs.bands": None if i.bands is None else list(i.bands),
            "inputs.nodata": i.nodata,
            "inputs.trust_index": i.trust_index,
            "inputs.stac": i.stac,
            "inputs.stac_search": None if i.stac_search is None else dict(i.stac_search),
            "inputs.assets": i.assets,
            "inputs.groupby": i.groupby,
            "inputs.gdal_env": i.gdal_env,
            "grid.crs": g.crs,
            "grid.resolution": None if g.resolution is None else list(g.resolution),
            "grid.bounds": None if g.bounds is None else list(g.bounds),
            "output.chunks_yx": list(o.chunks_yx),
            "output.codec": o.codec,
            "output.level": o.level,
            "output.shards_yx": None if o.shards_yx is None else list(o.shards_yx),
            "resampling": self.resampling if isinstance(self.resampling, str) else dict(self.resampling),
            "resampling_engine": self.resampling_engine,
            "fuse": self.fuse,
        }
        # Only where set, so that the hash of every store written without these keys stays what it was.
        if i.alternate is not None:
            flat["inputs.alternate"] = i.alternate
        if o.zarr_format != 3:
            flat["output.zarr_format"] = o.zarr_format
        if self.mask is not None:
            flat["mask"] = self.mask.model_dump(mode="json")
        if self.composite is not None:
            flat["composite"] = self.composite.model_dump(mode="json", exclude={"stack_mb"})
        return json.loads(json.dumps(flat, sort_keys=True, default=str))

    def output_hash(self) -> str:
        """Hash of :meth:`output_settings`."""
        blob = json.dumps(self.output_settings(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def to_yaml(self) -> str:
        """The resolved config as YAML (every key, defaults filled in); it validates to the same config."""
        import yaml

        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


def json_schema() -> dict[str, Any]:
    """The config's JSON Schema (draft 2020-12), every key described."""
    return Config.model_json_schema()


# -- errors ---------------------------------------------------------------------------------------


def _unwrap(tp: Any) -> Any:
    """The model or TypedDict behind Annotated / Optional / Required wrappers, else the type itself."""
    while True:
        origin = get_origin(tp)
        if origin in (Annotated, Required, NotRequired):
            tp = get_args(tp)[0]
            continue
        args = [a for a in get_args(tp) if a is not type(None)]
        if origin is not None and len(args) == 1 and type(None) in get_args(tp):
            tp = args[0]
            continue
        return tp


def _children(tp: Any) -> dict[str, Any]:
    """Key -> (annotation, description or None) of a model or TypedDict; {} for anything else."""
    tp = _unwrap(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return {k: (f.annotation, f.description) for k, f in tp.model_fields.items()}
    if is_typeddict(tp):
        from typing import get_type_hints

        hints = get_type_hints(tp, include_extras=True)
        return {
            k: (h, next((m.description for m in get_args(_strip_required(h))[1:] if hasattr(m, "description")), None))
            for k, h in hints.items()
        }
    return {}


def _strip_required(tp: Any) -> Any:
    while get_origin(tp) in (Required, NotRequired):
        tp = get_args(tp)[0]
    return tp


def _at(loc: tuple[str, ...]) -> dict[str, Any]:
    """The keys known at ``loc`` (a path of field names from the top)."""
    node: Any = Config
    for part in loc:
        child = _children(node).get(part)
        if child is None:
            return {}
        node = child[0]
    return _children(node)


def _got(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _problem(err: Any) -> tuple[str, str]:
    """(dotted key, what is wrong and what is allowed) of one pydantic error."""
    names = tuple(str(p) for p in err["loc"] if p != "[key]" and not isinstance(p, int))
    key = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"] if p != "[key]").lstrip(".")
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    error = ctx.get("error")
    if isinstance(error, ConfigError):
        return ".".join(p for p in (key, error.key) if p), error.problem
    if isinstance(error, Exception):
        return key, str(error)
    if kind == "extra_forbidden":
        known = list(_at(names[:-1]))
        near = difflib.get_close_matches(names[-1], known, n=1, cutoff=0.6) if names else []
        parent = ".".join(names[:-1])
        hint = f"did you mean `{'.'.join(p for p in (parent, near[0]) if p)}`? " if near else ""
        return key, f"unknown key ({hint}known here: {', '.join(known)})"
    if kind == "missing":
        desc = _at(names[:-1]).get(names[-1], (None, None))[1] if names else None
        return key, "is required" + (f": {desc}" if desc else "")
    if kind == "literal_error":
        expected = str(ctx.get("expected", ""))
        choices = re.findall(r"'((?:[^'\\]|\\.)*)'", expected) or re.split(r", | or ", expected)  # ints: unquoted
        return key, f"must be one of {' | '.join(choices)}, got {_got(value)}"
    simple = {
        "model_type": "must be a mapping",
        "model_attributes_type": "must be a mapping",
        "dict_type": "must be a mapping",
        "string_type": "must be a string",
        "list_type": "must be a list",
        "tuple_type": "must be a list",
    }
    if kind in simple:
        return key, f"{simple[kind]}, got {_got(value)}"
    msg = str(err.get("msg", kind))
    return key, f"{msg[:1].lower()}{msg[1:]}, got {_got(value)}"


def config_error(e: ValidationError) -> ConfigError:
    """One ConfigError for a ValidationError: its first problem's dotted key; the others follow in the message."""
    errors = sorted(e.errors(), key=lambda err: err["type"] != "extra_forbidden")  # a misspelt key first:
    problems = [_problem(err) for err in errors]  # the "required" error it caused follows it
    key, problem = problems[0]
    if len(problems) > 1:
        problem += "; also " + "; ".join(f"'{k}': {p}" for k, p in problems[1:4])
        if len(problems) > 4:
            problem += f" (and {len(problems) - 4} more)"
    return ConfigError(key or "CONFIG", problem)
