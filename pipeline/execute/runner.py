"""Wiring only: index -> plan -> store template -> tasks on Dask -> finalize -> report.

Every partition is submitted before any result is awaited; results are
consumed with ``as_completed`` so no task blocks another.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from pipeline import __version__
from pipeline.config import Config, is_url
from pipeline.errors import PYTHON_SWITCHES, ConfigError, StoreError, Switches
from pipeline.execute.chunkcost import chunk_cost as chunk_cost_now
from pipeline.execute.chunkcost import planned_chunk, small_chunks
from pipeline.execute.context import TaskContext
from pipeline.execute.device import (
    check_request,
    detect_gpu,
)
from pipeline.execute.prepare import _prepare_store, plan_run, plan_update, task_context
from pipeline.execute.schedulers import execute_tasks, threads_available
from pipeline.execute.stopping import stopped_cleanly
from pipeline.execute.update import publish, record_run, stage, update_result, update_section
from pipeline.execute.warmup import peak_rss_mb
from pipeline.execute.workers import start_fork_server, start_worker_server, usable_cores
from pipeline.inputs.catalog import describe_bands
from pipeline.inputs.iosizing import IoChoice, choose_io, request_bytes
from pipeline.inputs.netstats import summarise as summarise_network
from pipeline.planning.plan import Plan
from pipeline.report.diagnostics import compute_diagnostics, compute_stragglers, compute_task_overhead
from pipeline.report.progress import NoProgress, progress_for
from pipeline.report.summary import StageClock, compute_stages, summarise_workers, write_report
from pipeline.resample import compiled
from pipeline.storage import write_object
from pipeline.store.layout import finalize_store, journal_done
from pipeline.store.replace import move_aside


@dataclass
class RunResult:
    """What a run gives back: its report, its exit code and its config."""

    report: dict[str, Any]
    """The report (what ``report.path`` holds); :func:`pipeline.run` gives it attribute access too."""
    exit_code: int
    """0: every input used; 3: done, but some inputs were skipped."""
    config: Config | None = None
    """The run's config (where the store is, how to reach it)."""

    @property
    def skipped(self) -> list[dict[str, Any]]:
        """Inputs that were not used: ``[{path, error}]``."""
        return list(self.report["inputs"]["skipped"])

    def open(self) -> Any:
        """The written cube as a lazy ``xarray.Dataset``."""
        from pipeline.store.cube import open_cube

        if self.config is None:
            raise ValueError("this result has no config to find its store by")
        return open_cube(self.config.output, self.config.storage)


def _plan_chunk_advice(plan: Plan) -> list[str]:
    """Sizing advice from the plan alone: chunk size (by the run's own rule, :mod:`pipeline.execute.chunkcost`),
    and reads at full resolution for a coarser grid."""
    from pipeline.execute.chunkcost import plan_chunk_advice, planned_chunk
    from pipeline.report.diagnostics import READ_AMPLIFICATION, overview_verdict

    chunks = plan_chunk_advice(plan)
    advice = [chunks] if chunks else []
    chunk_bytes, _ = planned_chunk(plan)
    written = plan.n_jobs * chunk_bytes
    mostly, why = overview_verdict(plan.levels_used, plan.full_with_overviews, plan.full_by_method)
    if written and plan.bytes_read > READ_AMPLIFICATION * written and mostly:
        advice.append(f"reads {plan.bytes_read / written:.1f} bytes per byte written at full resolution: {why}")
    return advice


def summarise_inputs(catalog: Any) -> dict[str, Any]:
    """The inputs as the report and ``pipeline plan`` give them: files, bytes (from the listing, the
    files' sizes or STAC ``file:size``; ``bytes_unknown``: files whose size no source gave), headers
    read, and per band the nodata used and where it came from, with STAC's scale, offset and unit."""
    paths = catalog.tiles["path"]  # sorted: a file of several bands counts once
    first = np.ones(len(paths), dtype=bool)
    first[1:] = paths[1:] != paths[:-1]
    sizes = catalog.tiles["size"][first]
    return {
        "files": int(first.sum()),
        "bytes": int(sizes.sum()),
        "bytes_unknown": int((sizes <= 0).sum()),
        "headers_read": catalog.headers_read,
        "bands": describe_bands(catalog),
    }


def summarise_plan(config: Config, catalog: Any, plan: Plan, clock: StageClock | None = None) -> dict[str, Any]:
    """What ``pipeline plan`` prints: inputs, grid, chunks, tasks, bytes, advice."""
    import statistics

    costs = [float(c) / 1e6 for c in plan.partitions.costs()] or [0.0]
    advice = []
    workers = config.execution.workers or usable_cores()
    if len(plan.partitions) < 2 * workers:
        advice.append(
            f"{len(plan.partitions)} tasks for {workers} workers: lower execution.partition_mb "
            "so every worker gets several"
        )
    if max(costs) > 3 * statistics.median(costs):
        advice.append("the largest partition is over 3x the median: lower output.chunks to even them out")
    if len(plan.partitions) > 100_000:
        advice.append("over 100,000 tasks: raise execution.partition_mb to keep scheduling overhead small")
    advice += _plan_chunk_advice(plan)
    if plan.strips > 1:
        advice.append(composite_split_note(plan))
    g = plan.grid
    return {
        "inputs": {**summarise_inputs(catalog), "skipped": catalog.skipped},
        "bands": [b.name for b in plan.bands],
        "times": list(plan.times),
        "grid": {
            "crs": g.crs,
            "res_xy": list(g.res_xy),
            "shape_yx": list(g.shape_yx),
            "chunks_yx": list(g.chunks_yx),
            "bounds": list(g.bounds),
            "transform": list(g.transform),
        },
        "chunks": plan.n_chunks,
        "jobs": plan.n_jobs,
        "windows": plan.n_pairs,
        "geometries": plan.n_geometries,
        "tasks": len(plan.partitions),
        "partition_mb": {
            "target": config.execution.partition_mb,
            "median": statistics.median(costs),
            "max": max(costs),
        },
        "bytes_to_read": plan.bytes_read,
        "bytes_out": plan.bytes_out,
        "levels_used": plan.levels_used,
        "resampling": {b.name: b.resampling for b in plan.bands},
        "inferred": dict(plan.inferred),
        "advice": advice,
        **({"composite": summarise_composite(plan)} if plan.composite else {}),
        **({"mask": {"band": plan.mask_band, "unmasked": len(plan.unmasked)}} if plan.mask_band else {}),
        "driver_s": sum(clock.seconds.values()) if clock else None,
        "timings_s": dict(clock.seconds) if clock else {},
    }


def composite_split_note(plan: Plan) -> str:
    """What the plan says of a composite whose chunks are split in space."""
    ch = plan.grid.chunks_yx[0]
    return (
        f"a chunk's stack of dates would hold about {plan.stack_mb * plan.strips:.0f} MB, over composite.stack_mb "
        f"({plan.stack_budget_mb:.0f} MB): each chunk is reduced in {plan.strips} row strips of {plan.strip_rows} "
        f"of its {ch} rows (split in space, never in time; one task writes the chunk once)"
    )


def summarise_composite(plan: Plan) -> dict[str, Any]:
    """The composite's shape: period, reducer, steps and the dates in them, and the stack each chunk holds."""
    assert plan.composite is not None  # called for composite plans only
    return {
        "period": plan.composite[0],
        "reducer": plan.composite[1],
        "steps": len(plan.times),
        "dates": len(plan.dates),
        "strip_rows": plan.strip_rows,
        "strips": plan.strips,
        "stack_mb": plan.stack_mb,
        "stack_budget_mb": plan.stack_budget_mb,
        "split": composite_split_note(plan) if plan.strips > 1 else None,
    }


def summarise_masks(plan: Plan, ctx: TaskContext, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The report's ``mask``: the rule as applied and, per band and date, the fraction of the source pixels
    judged (valid data) that the mask dropped."""
    sums: dict[tuple[str, int], list[int]] = {}
    for r in records:
        for band, t, dropped, valid in r.pop("masked", ()):
            acc = sums.setdefault((band, t), [0, 0])
            acc[0] += dropped
            acc[1] += valid
    dropped_by: dict[str, dict[str, float | None]] = {}
    for (band, t), (d, v) in sorted(sums.items()):
        dropped_by.setdefault(band, {})[plan.dates[t]] = d / v if v else None
    rules: dict[str, int] = {}
    for r in records:
        for rule, n in r.pop("mask_rules", {}).items():
            rules[rule] = rules.get(rule, 0) + n
    pixels = rules.pop("pixels", 0)
    return {
        "band": plan.mask_band,
        "exclude": list(ctx.mask_exclude),
        "exclude_bits": list(ctx.mask_bits),
        "dilate": ctx.mask_dilate,
        "tiles_without_mask": len(plan.unmasked),
        "dropped_fraction": dropped_by,
        "matched_share": {rule: n / pixels for rule, n in rules.items()} if pixels else {},
    }


def summarise_clear(plan: Plan, records: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Per time step, pixels of the first band with 0, 1, ... 16+ clear observations (tile-covered pixels)."""
    out: dict[str, list[int]] = {}
    for r in records:
        for t, hist in r.pop("clear", ()):
            mine = out.setdefault(plan.times[t], [0] * len(hist))
            for k, n in enumerate(hist):
                mine[k] += n
    return dict(sorted(out.items()))


def _io_choice(config: Config, catalog: Any, plan: Plan) -> IoChoice:
    """``execution.io_concurrency`` for this run (:func:`pipeline.inputs.iosizing.choose_io`)."""
    tiles = catalog.tiles
    pixels = tiles["width"].astype("f8") * tiles["height"] * [np.dtype(d).itemsize for d in tiles["dtype"]]
    size = request_bytes(tiles["size"], pixels, plan.bytes_read, plan.n_pairs)
    largest_first = [tiles["path"][i] for i in np.argsort(-tiles["size"].astype("f8"), kind="stable")]
    return choose_io(config.execution.io_concurrency, largest_first, config.storage, size)


def run(
    config: Config,
    *,
    client: Any = None,
    overwrite: bool = False,
    resume: bool = False,
    progress: Any = False,
    shuffle_seed: int | None = None,
    switches: Switches = PYTHON_SWITCHES,
    update: bool = False,
    dry_run: bool = False,
) -> RunResult:
    """The batch run; with ``update``, an update of the cube there (:mod:`pipeline.execute.update`; ``dry_run``:
    what it would do). Raises PipelineError subclasses; returns the report and exit code.

    ``client``: an existing ``distributed.Client`` to run on (left open); None: as the config says.
    ``progress``: True shows it on stderr, False none, or an object with the interface of
    :class:`~pipeline.report.progress.NoProgress`. ``shuffle_seed`` submits the partitions in a shuffled
    order (the cube must not change). ``switches``: how messages name overwrite and resume (the CLI
    passes its flags). Ctrl-C raises :class:`~pipeline.errors.RunInterrupted` (a KeyboardInterrupt).
    """
    show = progress_for(progress)
    try:
        if config.output.engine == "icechunk":
            return _versioned(config, client, overwrite, resume, show, shuffle_seed, switches, update, dry_run)
        return _run(config, client, overwrite, resume, show, shuffle_seed, switches, update, dry_run)
    finally:
        show.close()


def _versioned(config: Config, *args: Any) -> RunResult:
    """``output.engine: icechunk``: the run or update on the working copy, then one commit of what it changed
    (:mod:`pipeline.store.icechunk_engine`); a dry run commits nothing."""
    from pipeline.store.icechunk_engine import commit_cube, commit_message, repository, work_path

    repo = config.output.path
    if config.output.zarr_format != 3:
        raise ConfigError("output.zarr_format", "an Icechunk repository holds Zarr v3: set output.zarr_format: 3")
    if not args[-1]:  # Icechunk creates a repository only where nothing is: before the working copy
        repository(repo, config.storage, create=True)
    output = config.output.model_copy(update={"path": work_path(repo)})
    result = _run(config.model_copy(update={"output": output}), *args)
    if not args[-1]:  # dry_run
        snapshot = commit_cube(repo, config.storage, commit_message(result.report, args[-2]))
        result.report["output"] = {**result.report["output"], "path": repo, "snapshot": snapshot}
        save_report(config, result.report)  # the repository's path and the commit, not the working copy's
    result.config = config
    return result


def _run(
    config: Config,
    client: Any,
    overwrite: bool,
    resume: bool,
    progress: NoProgress,
    shuffle_seed: int | None,
    switches: Switches,
    update: bool = False,
    dry_run: bool = False,
) -> RunResult:
    clock = StageClock()
    own_workers = not config.execution.address and client is None
    if own_workers and config.execution.scheduler == "local-cluster":
        start_worker_server()  # its imports overlap the planning below (auto starts it once it picks a cluster)
    elif own_workers and config.execution.scheduler == "processes":
        start_fork_server()
    catalog, plan = plan_run(config, clock, progress)
    work = None
    if update:  # the dates to add or recompute alone (pipeline.execute.update); no cube: a run
        with clock.stage("plan"):
            work = plan_update(config, catalog, plan)
        if dry_run or (work is not None and work.plan is None):
            said = update_result(
                config.output.path, config.report_path, config.storage, catalog, plan, work, clock, dry_run
            )
            return RunResult(report=said, exit_code=3 if catalog.skipped else 0, config=config)
        plan = plan if work is None or work.plan is None else work.plan
    if config.inputs.trust_index:  # planned without a request: check the store answers before writing
        from pipeline.storage import check_access

        check_access(list(catalog.tiles["path"]), config.storage)
    if config.execution.device == "gpu" and own_workers:
        check_request("gpu", {"local": asdict(detect_gpu())})  # refuse before anything is written
    config_hash = config.output_hash()
    with clock.stage("write"), stopped_cleanly(config.output, config.storage, plan, switches, progress):
        if work is not None:
            removing, done = None, stage(config.output.path, config.storage, work)
        else:
            removing = move_aside(config.output.path, config.storage, overwrite=overwrite, resume=resume)
            done = _prepare_store(config, plan, overwrite=overwrite, resume=resume, switches=switches)
    todo = [plan.partitions[i] for i, key in enumerate(plan.partitions.keys()) if key not in done]
    # Costliest first (stable: equal ones keep plan order), so the run ends on its cheapest partitions
    # and the workers finish together: the longest-processing-time rule. The cube does not depend on it.
    todo.sort(key=lambda p: p.cost_bytes, reverse=True)
    if shuffle_seed is not None:
        import random

        random.Random(shuffle_seed).shuffle(todo)
    with clock.stage("plan"):
        io = _io_choice(config, catalog, plan)
    ctx = replace(task_context(config, plan, catalog), io_concurrency=io.concurrency)
    if work is not None:
        ctx = replace(ctx, chunk_separator=work.separator)
    max_arg = max((len(pickle.dumps(p)) for p in todo), default=0)

    records: list[dict[str, Any]] = []
    exec_wall, threads, worker_names = 0.0, 1, list[str]()
    info: dict[str, Any] = {
        "scheduler": config.execution.address or config.execution.scheduler,
        "reason": "nothing to do",
        "worker_peak_mb": {},
    }
    if todo:
        crs = tuple(sorted(set(catalog.tiles["crs"])))
        progress.phase("tasks", len(todo), "tasks")
        with stopped_cleanly(config.output, config.storage, plan, switches, progress):
            records, exec_wall, threads, worker_names, info = execute_tasks(
                config.execution, todo, ctx, progress, crs, client
            )
        progress.close()
    chunk_bytes, _ = planned_chunk(plan)
    # The `chunk_size` check's fixed cost per chunk: this machine's, measured once (after the tasks, so a
    # first measurement competes with nothing), looked up only where chunks are small enough to judge.
    chunk_cost = chunk_cost_now() if small_chunks(chunk_bytes, sum(r["chunks"] for r in records)) else None

    with clock.stage("finalize"):
        if removing is not None:
            removing.join()
        finished = done | (journal_done(config.output.path, config.storage) if todo else set())
        missing = len(set(plan.partitions.keys()) - finished)
        if missing:  # never marked complete unless it holds every partition the plan promised
            raise StoreError(
                f"{config.output.path}: {missing} of {len(plan.partitions)} planned partitions were not written; "
                f"the store is left incomplete: run again with {switches.resume}"
            )
        if work is not None:
            usage = publish(config.output.path, config.storage, work)
        else:
            usage = finalize_store(
                config.output.path, config.storage, record_run(config.output, config.storage, catalog)
            )
    records.sort(key=lambda r: r["index"])
    skipped = list(catalog.skipped)
    seen = {s["path"] for s in skipped}
    for r in records:
        for s in r.pop("skipped"):
            if s["path"] not in seen:
                seen.add(s["path"])
                skipped.append(s)
    degraded = sorted({c for r in records for c in r.pop("degraded_chunks")})
    network = summarise_network([catalog.network, *(r.pop("network", None) for r in records)])
    wall = clock.elapsed()
    stages, stage_task_s = compute_stages(wall, clock.seconds, records, threads)
    report: dict[str, Any] = {
        "version": __version__,
        "config": config.source,
        "config_hash": config_hash,
        "resolved_config": config.model_dump(mode="json"),
        "wall_s": wall,
        "stages": stages,
        "stage_task_s": stage_task_s,
        "inputs": {
            **summarise_inputs(catalog),
            "bytes_read": int(sum(r["bytes_read"] for r in records)),
            "skipped": skipped,
        },
        "output": {
            "path": config.output.path,
            "bytes": usage.bytes,
            "objects": usage.data_objects,
            "objects_bytes": usage.data_bytes,
            "bytes_raw": plan.bytes_out,
            "chunks_written": int(sum(r["chunks"] for r in records)),
            "chunks_degraded": degraded,
            "shape": {"time": len(plan.times), "y": plan.grid.shape_yx[0], "x": plan.grid.shape_yx[1]},
            "bands": [b.name for b in plan.output_bands],
            "dtypes": {b.name: b.dtype for b in plan.output_bands},
        },
        "plan": {
            "partitions": len(plan.partitions),
            "resumed_done": len(plan.partitions) - len(todo),
            "chunks": plan.n_chunks,
            "jobs": plan.n_jobs,
            "windows": plan.n_pairs,
            "geometries": plan.n_geometries,
            "windows_skipped": int(sum(r.get("windows_skipped", 0) for r in records)),
            "bytes_to_read": plan.bytes_read,
            "partition_mb": config.execution.partition_mb,
            "levels_used": plan.levels_used,
            "full_with_overviews": plan.full_with_overviews,
            "full_by_method": plan.full_by_method,
            "inferred": dict(plan.inferred),
            "resampling": {b.name: b.resampling for b in plan.bands},
            "chunks_yx": list(plan.grid.chunks_yx),
            "shards_yx": None if config.output.shards_yx is None else list(config.output.shards_yx),
        },
        "execution": {
            "scheduler": info["scheduler"],
            "scheduler_reason": info["reason"],
            "dashboard": info.get("dashboard"),
            "workers": len(worker_names),
            "threads": threads,
            "threads_available": threads_available(config.execution, threads),
            "cores": usable_cores(),
            "device_requested": config.execution.device,
            "exec_wall_s": exec_wall,
            "max_task_arg_bytes": max_arg,
            "scheduling_overhead_s": compute_task_overhead(records)[1] / max(threads, 1),
            "chunk_cost": chunk_cost,
            "compiled_kernels": {  # pipeline.resample.compiled
                "chosen": ctx.compiled,
                "reason": compiled.choose()[1],
                "windows": int(sum(r.get("compiled_windows", 0) for r in records)),
                "ran": any(r.get("compiled_windows", 0) for r in records),
            },
            "maps": {
                "reused": int(sum(r.get("maps_reused", 0) for r in records)),
                "made": int(sum(r.get("maps_made", 0) for r in records)),
                "kept_mb": max((r.get("maps_kept_mb", 0.0) for r in records), default=0.0),
            },
        },
        "tasks": records,
        "workers": summarise_workers(records, worker_names),
        "devices": {
            "cpu": sum(r["device"] == "cpu" for r in records),
            "gpu": sum(r["device"] == "gpu" for r in records),
            "decisions": [{"task": r["id"], "device": r["device"], "reason": r["device_reason"]} for r in records],
        },
    }
    if plan.mask_band is not None:
        report["mask"] = summarise_masks(plan, ctx, records)
    if plan.composite is not None:
        report["composite"] = {**summarise_composite(plan), "clear_observations": summarise_clear(plan, records)}
    for r in records:  # what a run without a mask or composite left in them: empty lists
        r.pop("masked", None)
        r.pop("mask_rules", None)
        r.pop("clear", None)
    report["network"] = network
    if update:
        report["update"] = update_section(work, catalog, plan)
    report["io"] = {
        **io.as_report(),
        "prefetch_mb": config.execution.prefetch_mb,
        "prefetch_peak_mb": max((r.get("prefetch_peak_mb", 0.0) for r in records), default=0.0),
    }
    report["memory"] = {
        "driver_peak_mb": peak_rss_mb(),
        "worker_peak_mb": info["worker_peak_mb"],
        "worker_limit_mb": info.get("worker_limit_mb", {}),
    }
    if info["scheduler"] == "threads":
        report["memory"]["note"] = "threads share the driver's process: each one's figure is that process's peak"
    report["stragglers"] = compute_stragglers(records)
    report["diagnostics"] = compute_diagnostics(report)
    save_report(config, report)
    return RunResult(report=report, exit_code=3 if skipped else 0, config=config)


def save_report(config: Config, report: dict[str, Any]) -> None:
    if is_url(config.report_path):
        payload = json.dumps(report, indent=1, default=str).encode()
        write_object(config.report_path, payload, config.storage, key="report.path")
    else:
        write_report(report, config.report_path)
