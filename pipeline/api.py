"""The Python API: ``pipeline.plan(config)``, ``pipeline.run(config, client=None)``, ``RunResult.open()``.

The CLI's ``plan`` and ``run`` commands go through these functions. Nothing here changes global state
at import; a run sets up what it needs (GDAL options, a local cluster) for its own duration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

__all__ = ["PlanSummary", "Report", "open_cube", "plan", "run", "storage_options", "update"]

if TYPE_CHECKING:
    import xarray

    from pipeline.config.model import Config
    from pipeline.errors import Switches
    from pipeline.execute.runner import RunResult
    from pipeline.planning.grid import GridSpec
    from pipeline.planning.plan import Plan


class Report(dict[str, Any]):
    """A run's report: the JSON mapping the CLI formats, with attribute access to its keys
    (``report.stages.read``, ``report.wall_s``); nested mappings come back as ``Report`` too."""

    def __getattr__(self, name: str) -> Any:
        try:
            value = self[name]
        except KeyError:
            raise AttributeError(f"the report has no key {name!r} (keys: {', '.join(self)})") from None
        return Report(value) if isinstance(value, dict) and not isinstance(value, Report) else value

    def __dir__(self) -> list[str]:
        return [*super().__dir__(), *self]


@dataclass(frozen=True)
class PlanSummary:
    """What a run would do, read from the inputs' headers (or index) only: no pixel is read."""

    grid: GridSpec
    """The target grid (crs, transform, shape_yx, chunks_yx, bounds, res_xy)."""
    bands: tuple[str, ...]
    times: tuple[str, ...]
    """ISO dates of the time axis."""
    chunks: int
    """Output chunks in the cube (bands x times x spatial chunks)."""
    tasks: int
    """Partitions: one Dask task each."""
    bytes_read: int
    """Bytes of source windows the tasks read."""
    bytes_out: int
    """Uncompressed bytes of the whole cube."""
    skipped: tuple[dict[str, Any], ...]
    """Inputs that could not be used: ``{path, error}``."""
    summary: Report
    """Everything ``pipeline plan --json`` prints (advice, partition sizes, timings)."""
    plan: Plan
    """The full plan (partitions, source windows)."""

    @property
    def bytes(self) -> dict[str, int]:
        """``{"read": ..., "write": ...}``: source bytes read, raw cube bytes written."""
        return {"read": self.bytes_read, "write": self.bytes_out}


def _check(config: Any, fn: str) -> None:
    from pipeline.config.model import Config

    if not isinstance(config, Config):
        raise TypeError(
            f"pipeline.{fn} takes a pipeline.Config (pipeline.Config.from_yaml(path) reads a file, "
            f"pipeline.Config(**mapping) takes a mapping), got {type(config).__name__}"
        )


def plan(config: Config, *, progress: Any = False) -> PlanSummary:
    """Index the inputs and plan the run: grid, chunks, tasks, bytes. Reads no pixels. ``progress``: as
    :func:`run`'s (files listed, headers read)."""
    from pipeline.execute.runner import plan_run, summarise_plan
    from pipeline.report.progress import progress_for
    from pipeline.report.summary import StageClock

    _check(config, "plan")
    clock = StageClock()
    show = progress_for(progress)
    try:
        catalog, p = plan_run(config, clock, show)
    finally:
        show.close()
    summary = summarise_plan(config, catalog, p, clock)
    return PlanSummary(
        grid=p.grid,
        bands=tuple(b.name for b in p.bands),
        times=tuple(p.times),
        chunks=p.n_chunks,
        tasks=len(p.partitions),
        bytes_read=p.bytes_read,
        bytes_out=p.bytes_out,
        skipped=tuple(catalog.skipped),
        summary=Report(summary),
        plan=p,
    )


def run(
    config: Config,
    client: Any = None,
    overwrite: bool = False,
    resume: bool = False,
    *,
    progress: bool = False,
    switches: Switches | None = None,
) -> RunResult:
    """Run the pipeline: the store at ``config.output.path`` and the report at ``config.report_path``.

    ``client``: an existing ``distributed.Client``; the run submits its tasks there and leaves the client
    and its cluster open. None: the run starts (and closes) its own workers, as the config says.
    ``overwrite`` replaces a store this pipeline wrote; ``resume`` finishes an interrupted one.
    ``progress``: print progress (indexing, then tasks) to stderr. ``switches``: how messages name
    overwrite and resume (default this function's arguments: ``overwrite=True``; the CLI passes its flags).
    Raises :class:`~pipeline.errors.PipelineError` subclasses (``ConfigError`` names the key).
    """
    from pipeline.errors import PYTHON_SWITCHES, ConfigError
    from pipeline.execute.runner import run as execute_run

    _check(config, "run")
    switches = switches or PYTHON_SWITCHES
    if resume and overwrite:
        raise ConfigError(
            f"{switches.resume}/{switches.overwrite}", "choose one: resume keeps the store, overwrite replaces it"
        )
    result = execute_run(
        config, client=client, overwrite=overwrite, resume=resume, progress=progress, switches=switches
    )
    result.report = Report(result.report)
    return result


def update(
    config: Config,
    client: Any = None,
    *,
    dry_run: bool = False,
    progress: bool = False,
    switches: Switches | None = None,
) -> RunResult:
    """Bring the cube at ``config.output.path`` up to date with its inputs: dates not in it are added in time
    order, dates whose source tiles changed are recomputed, every other date's chunks are left as they are,
    and readers see the cube before or after, never between (a date recomputed in place excepted:
    ``docs/output.md``). No cube there: a run. ``dry_run``: only the report's ``update`` (what would be
    added, recomputed and kept); nothing is written. A cube whose grid, bands, dtypes, chunks or pixel
    settings differ from the config's is a :class:`~pipeline.errors.ConfigError` naming the difference.
    Interrupted, the cube is as it was (but a date being recomputed in place), and the next update finishes it.
    """
    from pipeline.errors import Switches as Names
    from pipeline.execute.runner import run as execute_run

    _check(config, "update")
    names = switches or Names("overwrite=True", "pipeline.update(config) again")
    result = execute_run(config, client=client, progress=progress, switches=names, update=True, dry_run=dry_run)
    result.report = Report(result.report)
    return result


def open_cube(config: Config) -> xarray.Dataset:
    """The cube ``config`` writes, as a lazy ``xarray.Dataset`` (one variable per band, dims time, y, x)."""
    from pipeline.store.cube import open_cube as open_store

    return open_store(config.output, config.storage)


def open(path: str, version: str | None = None, *, storage: Any = None) -> xarray.Dataset:  # noqa: A001
    """The cube at ``path`` as a lazy ``xarray.Dataset``: a plain Zarr store, or an Icechunk repository
    (``output.engine: icechunk``) at its latest commit or at snapshot ``version`` (``pipeline history``
    lists them). ``storage``: a :class:`~pipeline.config.StorageConfig` for a bucket (None: the defaults)."""
    import xarray as xr

    from pipeline.errors import ConfigError
    from pipeline.storage import zarr_store
    from pipeline.store.existing import local_missing, root_json
    from pipeline.store.icechunk_engine import is_repository, open_version

    if version is not None or is_repository(path, storage):
        return open_version(path, storage, version)
    if local_missing(path) or root_json(path, storage) is None:
        raise ConfigError("path", f"{path}: no cube there (neither a Zarr store nor an Icechunk repository)")
    return xr.open_zarr(zarr_store(path, storage), consolidated=True)


def storage_options(config: Config) -> dict[str, Any] | None:
    """Options for opening ``config.output.path`` with xarray through fsspec (``storage_options=``): None
    for a local store; for ``s3://``, s3fs's options from ``config.storage`` (endpoint, region,
    anonymous, profile; credentials from the usual AWS chain, never from here)."""
    from pipeline.config import is_url
    from pipeline.storage import storage_options as s3fs_options

    return s3fs_options(config.storage) if is_url(config.output.path) else None
