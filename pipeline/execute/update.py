"""``pipeline update``: bring a finished cube up to date with its inputs, wired into the run.

The runner plans the whole inputs as a run would; :func:`pipeline.execute.prepare.plan_update` compares them
with the cube (its record: :mod:`pipeline.store.record`) and plans only the dates to add or recompute, on the
cube's grid. Then the run goes as ever, but for three steps, here: :func:`stage` (instead of the template),
the tasks writing where :mod:`pipeline.store.publish` staged them, and :func:`publish` (instead of the
completion). A run's completion records what each date was built from (:func:`record_run`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pipeline import __version__
from pipeline.report.summary import write_report
from pipeline.store.existing import journal_done, output_store
from pipeline.store.publish import publish_update, stage_update, take_lock
from pipeline.store.record import compute_diff, tiles_record, write_record

if TYPE_CHECKING:
    from pipeline.config import OutputConfig, StorageConfig
    from pipeline.execute.prepare import UpdateWork
    from pipeline.inputs.tiles import Catalog
    from pipeline.planning.plan import Plan
    from pipeline.report.summary import StageClock
    from pipeline.store.layout import StoreUsage


def record_run(output: OutputConfig, storage: StorageConfig, catalog: Catalog) -> dict[str, Any]:
    """Write the record of a run's cube (generation 0); the group attributes that name it (none for a Zarr
    v2 store, which an update does not take)."""
    if output.zarr_format != 3:
        return {}
    t = catalog.tiles
    key = write_record(output_store(output.path, storage), 0, tiles_record(t))
    return {"pipeline_record": key, "pipeline_generation": 0}


def stage(path: str, storage: StorageConfig, work: UpdateWork) -> set[str]:
    """Make the store ready for the update's chunks; the partitions an interrupted run of the same work finished."""
    take_lock(path, storage)
    staging = stage_update(path, storage, work.state, work.diff, work.digest)
    work.separator = staging.separator
    return journal_done(path, storage) if staging.resumed else set()


def publish(path: str, storage: StorageConfig, work: UpdateWork) -> StoreUsage:
    """Publish the update in one put (:func:`pipeline.store.publish.publish_update`)."""
    assert work.plan is not None  # only an update with chunks to write gets here
    return publish_update(path, storage, work.state, work.diff, work.plan, work.separator, work.record)


def update_section(work: UpdateWork | None, catalog: Catalog, plan: Plan) -> dict[str, Any]:
    """The report's ``update``: dates added, recomputed (and why), kept; with no cube before, every date added."""
    if work is not None:
        out = work.diff.as_report()
        if work.plan is not None:
            out.update(tasks=len(work.plan.partitions), chunks=work.plan.n_jobs, bytes_to_read=work.plan.bytes_read)
        return out
    t = catalog.tiles
    out = compute_diff((), None, tiles_record(t)).as_report()
    return {
        **out,
        "created": True,
        "tasks": len(plan.partitions),
        "chunks": plan.n_jobs,
        "bytes_to_read": plan.bytes_read,
    }


def update_result(
    output_path: str,
    report_path: str,
    storage: StorageConfig,
    catalog: Catalog,
    plan: Plan,
    work: UpdateWork | None,
    clock: StageClock,
    dry_run: bool,
) -> dict[str, Any]:
    """The report of an update that writes no chunk: a dry run (which writes nothing at all) or a cube that
    is up to date (its report is written, the store is not touched)."""
    report: dict[str, Any] = {
        "version": __version__,
        "dry_run": dry_run,
        "wall_s": clock.elapsed(),
        "stages": dict(clock.seconds),
        "inputs": {"files": len(set(catalog.tiles["path"].tolist())), "skipped": list(catalog.skipped)},
        "output": {"path": output_path, "chunks_written": 0},
        "update": update_section(work, catalog, plan),
        "written_at": time.time(),
    }
    if dry_run:
        return report
    if "://" in report_path:
        import json

        from pipeline.storage import write_object

        write_object(report_path, json.dumps(report, indent=1, default=str).encode(), storage, key="report.path")
    else:
        write_report(report, report_path)
    return report
