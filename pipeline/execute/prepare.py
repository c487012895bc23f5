"""What a run prepares before its tasks: the catalog and the plan (:func:`plan_run`, which ``pipeline plan``
and the chunk-cost calibration share with the run), the store (its template, or the check of an existing
one before a resume) and the context every task of the run shares (:func:`task_context`).

Here the run's :class:`~pipeline.config.model.Config` is handed out: each stage takes its own sections and
the few settings it needs (:func:`run_catalog`), never the whole config.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from pipeline.config import Config
from pipeline.errors import PYTHON_SWITCHES, ConfigError, StoreError, Switches
from pipeline.execute.context import TaskContext
from pipeline.execute.schedulers import machine_mb
from pipeline.execute.workers import usable_cores
from pipeline.inputs.catalog import build_catalog, mask_rule, with_versions
from pipeline.inputs.tiles import Catalog
from pipeline.planning.plan import Partitions, Plan
from pipeline.planning.planner import compute_plan
from pipeline.planning.windows import infer_grid
from pipeline.report.progress import NoProgress
from pipeline.report.summary import StageClock
from pipeline.resample import compiled
from pipeline.storage import task_storage
from pipeline.store.existing import drop_staged_leftovers
from pipeline.store.layout import create_store, journal_done, store_config, store_exists
from pipeline.store.publish import check_cube, interrupted_dates, read_marker
from pipeline.store.record import (
    CubeState,
    Record,
    UpdateDiff,
    compute_diff,
    read_state,
    tiles_record,
    work_digest,
)
from pipeline.store.resume import check_resumable
from pipeline.store.write import store_stamp

logger = logging.getLogger("pipeline.execute.runner")
"""Named as before these steps left the runner: the run's log lines read as they did."""


def run_catalog(config: Config, progress: NoProgress | None = None) -> Catalog:
    """The tile table of ``config``'s inputs (:func:`~pipeline.inputs.catalog.build_catalog`, handed the
    inputs and storage sections, the mask band, ``execution.on_error`` and ``io_concurrency``, and the grid)."""
    return build_catalog(
        config.inputs,
        config.storage,
        mask_band=None if config.mask is None else config.mask.band,
        on_error=config.execution.on_error,
        io_concurrency=config.execution.io_concurrency,
        grid_crs=config.grid.crs,
        grid_bounds=config.grid.bounds,
        progress=progress,
    )


def plan_run(config: Config, clock: StageClock | None = None, progress: NoProgress | None = None) -> tuple[Any, Plan]:
    """Catalog and plan (no pixels read): shared by ``run`` and ``pipeline plan``."""
    clock = clock or StageClock()
    with clock.stage("index"):
        catalog = run_catalog(config, progress)
        mask_rule(config.mask, catalog)  # a class name the mask band does not have: exit 2 before planning
    with clock.stage("plan"):
        crs, res_xy, inferred = infer_grid(catalog.tiles, config.grid.crs, config.grid.resolution)
        for key, what in inferred.items():
            logger.info("%s: %s", key, what)
        plan = plan_tiles(
            config, catalog, catalog.tiles, crs=crs, res_xy=res_xy, bounds=config.grid.bounds, inferred=inferred
        )
    for path in plan.unmasked:
        catalog.skipped.append(
            {"path": path, "error": f"no {plan.mask_band} tile of the same tile and date to judge it by (mask.band)"}
        )
    for path in plan.unprojected:
        catalog.skipped.append(
            {
                "path": path,
                "error": f"its footprint cannot be computed in {plan.grid.crs} (outside the projection's domain): "
                "not read; set grid.crs to a CRS that holds it",
            }
        )
    if plan.n_jobs == 0:
        raise ConfigError("grid.bounds", _no_overlap(config, plan))
    return catalog, plan


def plan_tiles(
    config: Config,
    catalog: Catalog,
    tiles: Any,
    *,
    crs: str,
    res_xy: tuple[float, float],
    bounds: tuple[float, float, float, float] | None,
    inferred: dict[str, str] | None = None,
    bands_order: tuple[str, ...] | None = None,
    key_prefix: str | None = None,
) -> Plan:
    """The plan of ``tiles`` (the catalog's, or some of its rows) on the grid of ``crs``, ``res_xy``, ``bounds``."""
    return compute_plan(
        tiles,
        crs=crs,
        res_xy=res_xy,
        chunks_yx=config.output.chunks_yx,
        bounds=bounds,
        resampling=config.resampling,
        fuse=config.fuse,
        partition_mb=config.execution.partition_mb,
        bands_order=bands_order or config.inputs.bands,
        key_prefix=key_prefix or f"pipeline-{config.output_hash()}",
        band_attrs=catalog.band_attrs,
        shards_yx=config.output.shards_yx,
        categorical=catalog.categorical,
        inferred=inferred,
        **composite_args(config),
    )


def composite_args(config: Config) -> dict[str, Any]:
    """The planner's mask and composite arguments: ``mask.band``, (period, reducer), ``composite.count``, and
    what one chunk's stack may hold (``composite.stack_mb``; null: a quarter of this machine's memory per
    core, of 8 GB where the OS does not say)."""
    c = config.composite
    budget = float("inf")
    if c is not None:
        budget = c.stack_mb if c.stack_mb is not None else (machine_mb() or 8000.0) / usable_cores() / 4
    return {
        "mask_band": None if config.mask is None else config.mask.band,
        "composite": None if c is None else (c.period, c.reducer),
        "clear_count": c is not None and c.count,
        "stack_budget_mb": budget,
    }


def _no_overlap(config: Config, plan: Plan) -> str:
    """Why a plan has no chunk to compute: the bounds and the inputs' extent, both in the grid's CRS."""
    fp = plan.tables.footprints
    ok = np.isfinite(fp).all(axis=1)
    extent = (
        [round(float(v), 3) for v in (fp[ok, 0].min(), fp[ok, 1].min(), fp[ok, 2].max(), fp[ok, 3].max())]
        if ok.any()
        else "none (no input's footprint transforms into the grid CRS)"
    )
    bounds = [round(float(v), 3) for v in plan.grid.bounds]
    return (
        f"{bounds} in {plan.grid.crs} miss every input: the {len(fp)} inputs cover {extent} there; "
        "set grid.bounds inside that extent, or null for all of it"
    )


def _prepare_store(
    config: Config, plan: Plan, *, overwrite: bool, resume: bool, switches: Switches = PYTHON_SWITCHES
) -> set[str]:
    """Create the template, or check the existing store for resume; return finished partition keys."""
    path, storage = config.output.path, config.storage
    if resume and store_exists(path, storage):
        attrs = store_config(path, storage, switches)
        check_resumable(path, attrs, config.output_hash(), config.output_settings(), switches)
        if attrs.get("pipeline_complete"):
            logger.info("%s is already complete; nothing to resume", path)
            return set(plan.partitions.keys())
        drop_staged_leftovers(path)
        done = journal_done(path, storage)
        logger.info("resuming %s: %d of %d partitions already done", path, len(done), len(plan.partitions))
        return done
    create_store(
        plan,
        path,
        codec=config.output.codec,
        level=config.output.level,
        config_hash=config.output_hash(),
        settings=config.output_settings(),
        overwrite=overwrite,
        storage=storage,
        shards_yx=config.output.shards_yx,
        zarr_format=config.output.zarr_format,
        switches=switches,
    )
    return set()


def task_context(config: Config, plan: Plan, catalog: Any = None) -> TaskContext:
    """What every task of this run shares (:class:`TaskContext`), for a store that exists: its stamp is
    read from it. ``catalog``: where ``mask`` names classes, the STAC classification they are looked up in."""
    exclude, bits = mask_rule(config.mask, catalog)
    names = [b.name for b in plan.output_bands]
    return TaskContext(
        store_path=config.output.path,
        grid_crs=plan.grid.crs,
        grid_transform=plan.grid.transform,
        bands=plan.bands,
        resampling=plan.resampling,
        fuse=plan.fuse,
        on_error=config.execution.on_error,
        engine=config.resampling_engine,
        grid_width=plan.grid.shape_yx[1],
        storage=task_storage(config.storage),
        store_stamp=store_stamp(config.output.path, names, config.storage),
        gdal_env=tuple(sorted((str(k), str(v)) for k, v in config.inputs.gdal_env.items())),
        mask_exclude=exclude,
        mask_bits=bits,
        mask_dilate=0 if config.mask is None else config.mask.dilate,
        reducer=None if plan.composite is None else plan.composite[1],
        count_band=plan.count_band,
        chunk_rows=plan.grid.chunks_yx[0],
        grid_height=plan.grid.shape_yx[0],
        prefetch_bytes=int(config.execution.prefetch_mb * 1e6),
        run_token=uuid.uuid4().hex,
        compiled=compiled.choose()[0],
    )


def job_records(settings: dict[str, Any]) -> list[dict[str, Any]]:
    """Run a small job here, task after task in plan order: ``settings`` validated into a config, planned,
    its store written (replacing one there), each partition run on this thread. The records (the
    chunk-cost calibration's job, :mod:`pipeline.execute.chunkcost`)."""
    from pipeline.config import validate
    from pipeline.execute.task import run_partition

    config = validate(settings)
    _, plan = plan_run(config)
    _prepare_store(config, plan, overwrite=True, resume=False)
    ctx = task_context(config, plan)
    return [run_partition(p, ctx) for p in plan.partitions]


@dataclass
class UpdateWork:
    """An update of the cube at ``output.path``: what it finds there, what changes and the plan of that work."""

    state: CubeState
    diff: UpdateDiff
    record: Record
    """The record to publish: every date of the new time axis and its sources."""
    digest: str
    plan: Plan | None
    """The plan of the dates to write, its time steps placed on the new axis; None: nothing to write."""
    separator: str = "/"
    """Where the chunks go (set by :func:`pipeline.store.publish.stage_update`)."""


def plan_update(config: Config, catalog: Catalog, plan: Plan) -> UpdateWork | None:
    """Compare the cube with the inputs (exit 2 where they would make another cube) and plan the dates to add
    or recompute alone, on the cube's grid, each at its position in the new time axis. None: no cube there
    (the update is a run)."""
    if config.composite is not None:
        raise ConfigError(
            "composite", "update supports per-date cubes; rerun `pipeline run CONFIG --overwrite` for composites"
        )
    if config.output.zarr_format != 3:
        raise ConfigError("output.zarr_format", "update supports Zarr v3 stores; rerun `pipeline run --overwrite`")
    state = read_state(config.output.path, config.storage)
    if state is None:
        return None
    path, storage = config.output.path, config.storage
    check_cube(path, state, plan, config.output_settings())
    tiles = with_versions(config.inputs, storage, catalog.tiles)  # (STAC objects without one: their ETags)
    current = tiles_record(tiles)
    marker = read_marker(path, storage)
    diff = compute_diff(state.times, state.record, current)
    digest = work_digest(diff, current, state.generation)
    forced = interrupted_dates(marker, digest)
    if forced:
        diff = compute_diff(state.times, state.record, current, {d: w for d, w in forced.items() if d in current})
        digest = work_digest(diff, current, state.generation)
    kept = state.record or {}
    record = {d: current[d] if d in current else kept.get(d, {}) for d in diff.times}
    if not diff.work:
        return UpdateWork(state, diff, record, digest, None)
    labels = np.datetime_as_string(np.asarray(tiles["date"], dtype="datetime64[s]"), unit="s")
    rows = np.isin(labels, list(diff.work))
    work = plan_tiles(
        config,
        catalog,
        tiles.rows(rows),
        crs=plan.grid.crs,
        res_xy=plan.grid.res_xy,
        bounds=plan.grid.bounds,
        bands_order=tuple(b.name for b in plan.bands),
        key_prefix=f"pipeline-{config.output_hash()}-u{digest}",
    )
    if work.grid != plan.grid or [(b.name, b.dtype) for b in work.bands] != [(b.name, b.dtype) for b in plan.bands]:
        raise StoreError(f"{path}: the dates to update planned on another grid or bands than the whole inputs'")
    where = np.array([diff.position(t) for t in work.times], dtype=np.int64)
    tables = replace(work.tables, job_t=where[work.tables.job_t])
    work = replace(work, tables=tables, partitions=Partitions(tables, work.grid, work.bands, work.partitions.prefix))
    return UpdateWork(state, diff, record, digest, replace(work, times=diff.times))
