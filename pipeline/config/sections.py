"""The config's sections: one frozen pydantic model per top-level key of :class:`~pipeline.config.model.Config`
(``storage``, ``inputs``, ``grid``, ``output``, ``execution``, ``mask``, ``composite``, ``report``), with the
nested models and TypedDicts they hold and their cross-key rules. Their field types and validators are in
:mod:`pipeline.config.fields`; :mod:`pipeline.config.model` assembles them into ``Config`` and turns a failed
validation into a :class:`~pipeline.errors.ConfigError` naming the dotted key.

This module imports pydantic (as :mod:`pipeline.config.model` does, which imports it).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, NotRequired, Required

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_serializer,
    model_validator,
    with_config,
)
from typing_extensions import TypedDict

from pipeline.config import SCHEDULERS
from pipeline.config.fields import (
    STAC_PATTERN,
    Codec,
    Device,
    Flag,
    GroupBy,
    Integer,
    NonNegInt,
    Number,
    OnError,
    PathStr,
    Period,
    PosInt,
    PosNumber,
    Reducer,
    Resampling,
    ZarrFormat,
    as_assets,
    as_bands,
    as_bits,
    as_bounds,
    as_classes,
    as_crs,
    as_endpoint,
    as_gdal_env,
    as_paths,
    as_rate_key,
    as_resolution,
    as_scheduler,
    auto_none,
)
from pipeline.errors import ConfigError
from pipeline.execute.executors import SCHEDULERS as EXECUTORS


class Section(BaseModel):
    """Frozen, unknown keys rejected; a key given as null takes its default (a required one stays missing)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _nulls_are_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict):
            fields = cls.model_fields
            return {k: v for k, v in data.items() if not (v is None and k in fields and fields[k].default is not None)}
        return data


class StorageConfig(Section):
    """Object-store access, for inputs and output alike; credentials come from the usual AWS chain, never from here."""

    endpoint_url: Annotated[str | None, AfterValidator(as_endpoint)] = Field(
        None, description="S3-compatible endpoint, e.g. http://127.0.0.1:9000 (MinIO, moto); null: AWS."
    )
    region: str | None = Field(None, description="The bucket's region; null: from the AWS configuration.")
    anonymous: Flag = Field(False, description="Unsigned requests (public buckets).")
    profile: str | None = Field(None, description="A named AWS profile; null: the usual AWS credential chain.")


@with_config(ConfigDict(extra="forbid"))
class StacSearch(TypedDict, total=False):
    """A STAC API search (pystac-client's ``search`` arguments)."""

    url: Required[Annotated[str, Field(description="The STAC API's root URL.")]]
    collections: Annotated[Any, Field(description="Collection id(s) to search.")]
    bbox: Annotated[Any, Field(description="[xmin, ymin, xmax, ymax] in longitude/latitude.")]
    datetime: Annotated[Any, Field(description="A datetime or interval, e.g. '2024-06-01/2024-06-30'.")]
    query: Annotated[Any, Field(description="STAC API query extension: {property: {op: value}}.")]
    ids: Annotated[Any, Field(description="Item ids to fetch.")]
    max_items: Annotated[Any, Field(description="Stop after this many items.")]


class InputsConfig(Section):
    """Where the tiles are and how their paths name band and date."""

    paths: Annotated[tuple[str, ...], BeforeValidator(as_paths, json_schema_input_type=list[str] | str | None)] = Field(
        (),
        description="Glob patterns: local paths, s3://bucket/prefix/**/*.tif or https:// URLs; ** recurses. "
        "Give one of paths, stac, stac_search.",
    )
    stac: PathStr | None = Field(
        None,
        description="Instead of paths: a STAC document, e.g. an ItemCollection (.json), a catalog.json or a "
        "stac-geoparquet file (docs/inputs.md lists the forms read).",
    )
    stac_search: StacSearch | None = Field(
        None, description="Instead of paths: a STAC API search {url, collections, bbox, datetime, query}."
    )
    assets: Annotated[
        dict[str, str] | None, BeforeValidator(as_assets, json_schema_input_type=dict[str, str] | list[str] | None)
    ] = Field(
        None,
        description="STAC: {band name: asset key}; a multi-band asset's band as key.N (1-based) or key.name "
        "(its bands/eo:bands name or common name); null: every single-band raster asset, named by its key.",
    )
    groupby: GroupBy = Field(
        "solar_day",
        description="STAC: how items become time steps: solar_day (labelled by each day's earliest item, as "
        "odc-stac labels them) | time | none.",
    )
    alternate: str | None = Field(
        None,
        description="STAC: read each asset from its alternate href of this name where it has one (e.g. s3, "
        "for catalogues whose hrefs are https://); null: the asset's href.",
    )
    gdal_env: Annotated[dict[str, str], BeforeValidator(as_gdal_env, json_schema_input_type=dict[str, Any] | None)] = (
        Field(default_factory=dict, description="Extra GDAL config options for reads (override the cloud defaults).")
    )
    pattern: str = Field(
        STAC_PATTERN,
        description="Regex searched in each path (/ separators) with named groups band (required), date and tile. "
        "Required with paths; for STAC inputs the band is the asset's name.",
    )
    date_format: str = Field("%Y-%m-%d", description="strptime format of the pattern's date group.")
    bands: Annotated[tuple[str, ...] | None, BeforeValidator(as_bands, json_schema_input_type=list[str] | None)] = (
        Field(None, description="Only these bands are read, in this order; null: every band found.")
    )
    nodata: Number | None = Field(None, description="Nodata used where a file declares none.")
    index: PathStr | None = Field(None, description="A Parquet tile index to build and reuse.")
    trust_index: Flag = Field(
        False, description="Use the index as the input list: no glob, no stat, no file opened (planning at scale)."
    )

    @model_validator(mode="after")
    def _rules(self) -> InputsConfig:
        given = [k for k in ("paths", "stac", "stac_search") if getattr(self, k)]
        if len(given) > 1:
            raise ConfigError(given[1], f"give one of inputs.paths, inputs.stac, inputs.stac_search, not {given}")
        if not given:
            raise ConfigError(
                "paths", "is required (a list of glob patterns), or give inputs.stac / inputs.stac_search"
            )
        if self.paths and "pattern" not in self.model_fields_set:
            raise ConfigError("pattern", "is required with inputs.paths: a regex with a named group (?P<band>...)")
        try:
            rx = re.compile(self.pattern)
        except re.error as e:
            raise ConfigError("pattern", f"is not a valid regex: {e}") from None
        if "band" not in rx.groupindex:
            raise ConfigError("pattern", "needs a named group (?P<band>...) that captures the band name")
        if self.trust_index and self.index is None:
            raise ConfigError("trust_index", "needs inputs.index: the Parquet index to trust")
        return self


class GridConfig(Section):
    """The target grid."""

    crs: Annotated[str | None, BeforeValidator(as_crs, json_schema_input_type=str | int | None)] = Field(
        None,
        description="Target CRS: an EPSG code ('EPSG:32632'), WKT or PROJ string; null: the inputs' CRS when "
        "they share one (else an error listing the CRSs found).",
    )
    resolution: Annotated[
        tuple[float, float] | None,
        BeforeValidator(as_resolution, json_schema_input_type=PosNumber | tuple[PosNumber, PosNumber] | None),
    ] = Field(None, description="Pixel size in grid CRS units: one number, or [x, y]; null: the finest band's.")
    bounds: Annotated[
        tuple[float, float, float, float] | None,
        BeforeValidator(as_bounds, json_schema_input_type=tuple[float, float, float, float] | None),
    ] = Field(None, description="[xmin, ymin, xmax, ymax] in the grid CRS; null: the inputs' union, snapped.")


class ChunksConfig(Section):
    """The spatial chunk shape of every array."""

    y: PosInt = Field(1024, description="Rows per chunk.")
    x: PosInt = Field(1024, description="Columns per chunk.")


class ShardsConfig(Section):
    """Zarr v3 shards: several chunks in one object."""

    y: PosInt = Field(description="Rows per shard (a multiple of output.chunks.y; default: that).")
    x: PosInt = Field(description="Columns per shard (a multiple of output.chunks.x; default: that).")


class CompressionConfig(Section):
    """The codec every chunk is compressed with."""

    codec: Codec = Field("zstd", description="zstd | blosc | gzip | none.")
    level: Integer = Field(3, description="The codec's compression level.")


class OutputConfig(Section):
    """The Zarr store."""

    path: PathStr = Field(description="Where to write the store: a local path or s3://bucket/prefix/cube.zarr.")
    chunks: ChunksConfig = Field(
        default_factory=lambda: ChunksConfig(), description="Spatial chunk shape; the time chunk is 1."
    )
    compression: CompressionConfig = Field(
        default_factory=lambda: CompressionConfig(), description="How chunks are encoded."
    )
    shards: ShardsConfig | None = Field(
        None, description="Zarr v3 shards {y, x}, multiples of chunks: one object per shard; null: one per chunk."
    )
    zarr_format: ZarrFormat = Field(
        3,
        description="3: Zarr v3 (zarr.json). 2: Zarr v2 (.zgroup/.zarray/.zattrs, consolidated .zmetadata), "
        "for readers without Zarr v3: GDAL before 3.12, zarr-python 2, older xarray. No shards with 2.",
    )
    engine: Literal["zarr", "icechunk"] = Field(
        "zarr",
        description="zarr: plain Zarr, updated by `pipeline update` behind one atomic put of the consolidated "
        "metadata (docs/output.md, Updating a cube). icechunk: an Icechunk repository, one commit per run or "
        "update (`pipeline history`, `pipeline rollback`; the optional extra `pipeline[icechunk]`).",
    )

    @model_validator(mode="before")
    @classmethod
    def _shards_default_to_chunks(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("shards"), dict):
            given = data.get("chunks")
            chunks: dict[str, Any] = given if isinstance(given, dict) else {}
            data = data | {"shards": {a: chunks.get(a, 1024) for a in ("y", "x")} | data["shards"]}
        return data

    @model_validator(mode="after")
    def _shards_are_multiples(self) -> OutputConfig:
        if self.shards is not None and self.zarr_format == 2:
            raise ConfigError(
                "shards",
                "Zarr v2 has no shards, and output.zarr_format is 2: set output.shards: null, or output.zarr_format: 3",
            )
        if self.shards is not None:
            for axis in ("y", "x"):
                s, c = getattr(self.shards, axis), getattr(self.chunks, axis)
                if s % c:
                    raise ConfigError(f"shards.{axis}", f"must be a multiple of output.chunks.{axis} ({c}), got {s}")
        return self

    @property
    def chunks_yx(self) -> tuple[int, int]:
        """The chunk shape (rows, columns)."""
        return self.chunks.y, self.chunks.x

    @property
    def shards_yx(self) -> tuple[int, int] | None:
        """Zarr v3 shard shape (multiples of ``chunks_yx``); None: one object per chunk."""
        return None if self.shards is None else (self.shards.y, self.shards.x)

    @property
    def codec(self) -> str:
        """``compression.codec``."""
        return self.compression.codec

    @property
    def level(self) -> int:
        """``compression.level``."""
        return self.compression.level


@with_config(ConfigDict(extra="forbid"))
class GpuProfile(TypedDict):
    """A measured GPU profile (what ``pipeline doctor`` calibrates)."""

    h2d_gb_s: Annotated[PosNumber, Field(description="Host to device copy, GB/s.")]
    d2h_gb_s: Annotated[PosNumber, Field(description="Device to host copy, GB/s.")]
    gpu_mpx_s: Annotated[
        dict[Annotated[str, AfterValidator(as_rate_key)], PosNumber],
        Field(
            description="GPU kernel rate per method, Mpx/s; reduce:<reducer> (e.g. reduce:median): a composite's "
            "reduction, Mpx/s of pixels x dates."
        ),
    ]
    cpu_mpx_s: NotRequired[Annotated[dict[Resampling, PosNumber], Field(description="CPU rate per method, Mpx/s.")]]
    launch_s: NotRequired[Annotated[Number, Field(description="Fixed cost of one GPU task, seconds.")]]


class ExecutionConfig(Section):
    """How the run is executed; none of it changes the cube."""

    scheduler: Annotated[str, AfterValidator(as_scheduler)] = Field(
        "auto",
        description=" | ".join(f"{name} ({what})" if what else name for name, what in EXECUTORS.items())
        + " | the address of an existing Dask scheduler (tcp://host:8786).",
    )
    workers: Annotated[
        PosInt | None, BeforeValidator(auto_none, json_schema_input_type=Literal["auto"] | PosInt | None)
    ] = Field(None, description="Local worker processes; auto (or null): one per core.")
    threads_per_worker: PosInt = Field(1, description="Threads in each local worker.")
    dashboard: Flag = Field(
        True,
        description="A local cluster serves Dask's dashboard on a free port of 127.0.0.1 and the run prints its "
        "link; with a scheduler's address, the link to that scheduler's dashboard is printed.",
    )
    device: Device = Field("auto", description="auto | cpu | gpu: where tasks resample.")
    partition_mb: PosNumber = Field(64.0, description="Target bytes of work per task, MB.")
    io_concurrency: Annotated[
        PosInt | None, BeforeValidator(auto_none, json_schema_input_type=Literal["auto"] | PosInt | None)
    ] = Field(
        None,
        description="Windows each worker reads at once, ahead of its resampling (object-store requests in flight "
        "per worker); auto (or null): from the store's measured latency and bandwidth (a bandwidth-delay product), "
        "1 for local files: one read at a time, when the task comes to it.",
    )
    prefetch_mb: PosNumber = Field(
        64.0, description="Pixels a worker's read-ahead holds at most, read or being read, MB (one window always)."
    )
    retries: NonNegInt = Field(2, description="Retries of a failed task.")
    on_error: OnError = Field("skip", description="A tile that cannot be read: skip it (and list it) or fail the run.")
    gpu_profile: GpuProfile | None = Field(
        None, description="Override of the measured GPU profile {h2d_gb_s, d2h_gb_s, gpu_mpx_s: {method: Mpx/s}}."
    )

    @field_serializer("workers", "io_concurrency")
    def _workers_auto(self, value: int | None) -> int | str:
        return "auto" if value is None else value

    @property
    def address(self) -> str | None:
        """The existing Dask scheduler's address, or None when the run makes its own workers."""
        return None if self.scheduler in SCHEDULERS else self.scheduler


class MaskConfig(Section):
    """Drop pixels before resampling and fusing, judged on each source tile by a band of the same tile and date."""

    band: str = Field(
        description="The mask band: a band of the same tile and date (the glob's `band` group; a STAC asset key). "
        "Read at its own resolution, never at an overview; each source pixel takes the mask value at its centre. "
        "Written to the cube only if inputs.bands lists it."
    )
    exclude: Annotated[
        tuple[int | str, ...], BeforeValidator(as_classes, json_schema_input_type=list[int | str] | None)
    ] = Field(
        (),
        description="Class values to drop, e.g. Sentinel-2 SCL [3, 8, 9, 10], or names from the mask band's STAC "
        "classification:classes (e.g. cloud_shadows, cloud_high_probability).",
    )
    exclude_bits: Annotated[
        tuple[int | str, ...], BeforeValidator(as_bits, json_schema_input_type=list[int | str] | None)
    ] = Field(
        (),
        description="Bit positions to drop where set (any set bit drops the pixel), e.g. Landsat QA_PIXEL [1, 3, 4], "
        "or names from the mask band's STAC classification:bitfields (every bit of the named field).",
    )
    dilate: NonNegInt = Field(
        0,
        description="Grow the dropped area by this many mask pixels (a square of side 2*dilate+1), as cloud "
        "edges are usually under-detected.",
    )

    @model_validator(mode="after")
    def _something_dropped(self) -> MaskConfig:
        if not self.exclude and not self.exclude_bits:
            raise ConfigError("exclude", "mask needs exclude (class values) or exclude_bits (bit positions)")
        return self


class CompositeConfig(Section):
    """Reduce time: one step per period, from the clear observations (after ``mask``) of each pixel."""

    period: Period = Field(
        "P1M",
        description="P16D (16 days from each 1 January, as MODIS's) | P1M | P3M (quarters) | P1Y | all; each "
        "step is labelled by its period's start (all: the earliest date).",
    )
    reducer: Reducer = Field(
        "median",
        description="median | mean | min | max | first | last | count, per pixel over the period's clear "
        "observations; integer bands keep their dtype (mean and median rounded half to even); count is uint16.",
    )
    count: Flag = Field(
        False,
        description="Also write `clear_count` (uint16): the observations of the first band used per pixel and step.",
    )
    stack_mb: PosNumber | None = Field(
        None,
        description="The most one chunk's stack of dates may hold, in MB; a chunk whose stack is larger is computed "
        "in row strips (split in space, never in time). null: a quarter of this machine's memory per core.",
    )


class ReportConfig(Section):
    """Where the run's report goes."""

    path: PathStr | None = Field(None, description="The report JSON; null: <output.path minus .zarr>.report.json.")
