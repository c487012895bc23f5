"""The ``pipeline`` command. The only module that configures logging or exits.

Exit codes: 0 done, every input used; 1 run failed; 2 usage or config
error; 3 done, but some inputs were skipped (listed in the report); 130 interrupted (Ctrl-C): the
message gives the command that resumes.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from functools import wraps
from typing import Any

import click

from pipeline import __version__
from pipeline.errors import CLI_SWITCHES, ConfigError, DeviceError, PipelineError, RunInterrupted, Switches

logger = logging.getLogger("pipeline")
PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _setup_logging(verbose: int, quiet: bool) -> None:
    level = logging.ERROR if quiet else logging.DEBUG if verbose > 1 else logging.INFO if verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    # distributed sets up its own loggers from dask config when first imported.
    dask_level = "info" if verbose > 1 else "error" if quiet else "warning"
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", dask_level)
    logging.getLogger("distributed").setLevel(max(level, logging.WARNING))


def _exits(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn our exceptions into messages and exit codes."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except RunInterrupted as e:
            click.echo(
                f"interrupted: {e.finished} of {e.total} partitions finished and kept in {e.path}; "
                f"resume with: {_command(resume=True)}",
                err=True,
            )
            _leave(130)
        except KeyboardInterrupt:
            click.echo(f"interrupted before any output was written; run again with: {_command()}", err=True)
            _leave(130)
        except (ConfigError, DeviceError) as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(2)
        except PipelineError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(1)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except Exception as e:  # noqa: BLE001 - anything else is a failed run, said plainly
            logger.debug("unexpected error", exc_info=True)
            click.echo(f"error: run failed: {type(e).__name__}: {e} (rerun with -vv for the traceback)", err=True)
            sys.exit(1)

    return wrapper


def _command(resume: bool = False) -> str:
    """The command line this process runs, as a shell would take it back; with ``resume``, ``--resume`` in
    it and ``--overwrite`` out (the command that finishes an interrupted run)."""
    import shlex

    args = [a for a in sys.argv[1:] if not (resume and a == "--overwrite")]
    if resume and "--resume" not in args and "update" not in args[:1]:  # an update resumes by running again
        args.append("--resume")
    return shlex.join(["pipeline", *args])


def _load(config_path: str, sets: tuple[str, ...]) -> Any:
    from pipeline.config import load_config

    return load_config(config_path, sets)


def _versioned(config_path: str, sets: tuple[str, ...]) -> Any:
    cfg = _load(config_path, sets)
    if cfg.output.engine != "icechunk":
        raise ConfigError("output.engine", "versions are kept with output.engine: icechunk (docs/output.md)")
    return cfg


set_option = click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a config key.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="pipeline")
def main() -> None:
    """Many satellite tiles in, one analysis-ready Zarr datacube out."""
    # pydantic looks for plugins in every installed package's entry points when the config model is built
    # (~20 ms of each command's start); the command uses none. Set the variable to "" to let them load.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    # NumPy's OpenBLAS with no helper threads, in this process and the fork server it starts (see
    # pipeline.execute.server_preload): set before either loads NumPy. Set the variable to override.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


@main.command()
@click.argument("config", type=click.Path(dir_okay=False))
@set_option
@click.option("--workers", type=int, help="Local workers (execution.workers).")
@click.option("--scheduler", help="Address of an existing Dask scheduler (execution.scheduler).")
@click.option("--device", type=click.Choice(["auto", "cpu", "gpu"]), help="execution.device")
@click.option("--resume", is_flag=True, help="Finish an interrupted run into the same store.")
@click.option("--overwrite", is_flag=True, help="Replace an existing output store.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False), help="Report JSON path.")
@click.option("-v", "--verbose", count=True)
@click.option("-q", "--quiet", is_flag=True)
@_exits
def run(
    config: str,
    sets: tuple[str, ...],
    workers: int | None,
    scheduler: str | None,
    device: str | None,
    resume: bool,
    overwrite: bool,
    report_path: str | None,
    verbose: int,
    quiet: bool,
) -> None:
    """Index, plan, read, resample and write the datacube described by CONFIG."""
    import gc

    # Where the command is the program itself, it sets up its own process (never a caller's):
    # * the imports and the config model below make ~50k objects and little garbage: the cyclic collector
    #   went over them ~80 times, 50-70 ms of the start; it is off until the run begins, and what they
    #   made is then kept out of later collections (gc.freeze);
    # * rasterio is imported without boto3 (:func:`pipeline.execute.workers.import_rasterio`, ~0.2 s), when
    #   this process first needs it: a run on worker processes never loads GDAL here;
    # * glibc's allocator is tuned for the kernels' temporaries (:func:`pipeline.execute.workers.tune_malloc`),
    #   as the run's own cluster workers are: a threads run computes in this process.
    own = _standalone()
    collector_off = own and gc.isenabled()
    if collector_off:
        gc.disable()
    from pipeline.execute.workers import (
        import_rasterio,
        start_fork_server,
        start_worker_server,
        tune_malloc,
        usable_cores,
    )

    _setup_logging(verbose, quiet)
    extra = {"execution.workers": workers, "execution.scheduler": scheduler, "execution.device": device}
    if report_path:
        extra["report.path"] = os.path.abspath(report_path)
    from pipeline.config import read_config, validate

    raw = read_config(config, list(sets) + [f"{k}={v}" for k, v in extra.items() if v is not None])
    execution = raw.get("execution")
    execution = execution if isinstance(execution, dict) else {}
    chosen = execution.get("scheduler")
    if chosen == "local-cluster":
        start_worker_server()  # the local workers' imports, on another core, while this process imports and plans
    elif chosen == "processes" or (
        chosen in (None, "auto") and execution.get("device") != "gpu" and usable_cores() > 1
    ):
        # The process pool's fork server likewise, and for auto too, which picks processes for all but small
        # jobs: its imports take a core this process leaves idle while it imports and plans.
        start_fork_server()
    if own:  # after the servers start, so their imports overlap these
        tune_malloc()
        import_rasterio(lazily=True)
    cfg = validate(raw, source=config)
    import pipeline.execute.runner  # noqa: F401 - imported here, with the collector off
    from pipeline.api import run as run_pipeline
    from pipeline.report.summary import format_report

    if collector_off:
        gc.freeze()
        gc.enable()
    result = run_pipeline(cfg, overwrite=overwrite, resume=resume, progress=not quiet, switches=CLI_SWITCHES)
    if not quiet:
        click.echo(format_report(result.report))
        click.echo(f"\nstore:  {cfg.output.path}\nreport: {cfg.report_path}")
    _leave(result.exit_code)


@main.command()
@click.argument("config", type=click.Path(dir_okay=False))
@set_option
@click.option("--dry-run", is_flag=True, help="List what would be added, recomputed and kept; write nothing.")
@click.option("-v", "--verbose", count=True)
@click.option("-q", "--quiet", is_flag=True)
@_exits
def update(config: str, sets: tuple[str, ...], dry_run: bool, verbose: int, quiet: bool) -> None:
    """Bring the cube at output.path up to date with CONFIG's inputs: new dates added, changed dates
    recomputed, the rest untouched; readers see the cube before or after. No cube there: a run."""
    from pipeline.api import update as update_cube
    from pipeline.report.summary import format_report, format_update

    _setup_logging(verbose, quiet)
    cfg = _load(config, sets)
    names = Switches("--overwrite", "running the same `pipeline update` again")
    result = update_cube(cfg, dry_run=dry_run, progress=not quiet and not dry_run, switches=names)
    if not quiet or dry_run:
        if result.report.get("tasks") is not None:
            click.echo(format_report(result.report) + "\n")
        click.echo(format_update(result.report["update"], dry_run))
        if not dry_run:
            click.echo(f"\nstore:  {cfg.output.path}\nreport: {cfg.report_path}")
    _leave(result.exit_code)


@main.command()
@click.argument("config", type=click.Path(dir_okay=False))
@set_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@_exits
def history(config: str, sets: tuple[str, ...], as_json: bool) -> None:
    """The versions of the cube at output.path (output.engine: icechunk), newest first: snapshot, time, message."""
    from pipeline.store.icechunk_engine import history as versions

    cfg = _versioned(config, sets)
    rows = versions(cfg.output.path, cfg.storage)
    lines = [f"{r['snapshot']}  {r['time'][:19]}Z  {r['message']}" for r in rows]
    click.echo(json.dumps(rows, indent=1) if as_json else "\n".join(lines))


@main.command()
@click.argument("config", type=click.Path(dir_okay=False))
@click.argument("snapshot")
@set_option
@_exits
def rollback(config: str, snapshot: str, sets: tuple[str, ...]) -> None:
    """Make SNAPSHOT (from `pipeline history`) the cube at output.path again; the next update starts there."""
    from pipeline.store.icechunk_engine import rollback as roll_back

    cfg = _versioned(config, sets)
    done = roll_back(cfg.output.path, cfg.storage, snapshot)
    click.echo(f"{cfg.output.path}: now {snapshot} ({done['objects_written']} objects of the working copy rewritten)")


def _standalone() -> bool:
    """Whether this is the program itself, not a command run inside another program (click's test
    runner, a captured stdout)."""
    return sys.stdout is sys.__stdout__ and sys.stderr is sys.__stderr__


def _leave(code: int) -> None:
    """Exit at once when this is the program itself: the store, the report and the cluster are closed by
    now, and tearing the interpreter down module by module (numpy, pyproj, distributed, ...) took
    ~0.3 s of a ~5 s run. Where the command runs inside another program (click's test runner, a
    captured stdout), a normal ``sys.exit``."""
    if not _standalone():
        sys.exit(code)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    os._exit(code)


@main.command()
@click.argument("config", type=click.Path(dir_okay=False))
@set_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option(
    "--from-report",
    "from_report",
    type=click.Path(exists=True, dir_okay=False),
    help="A previous run's report: estimate the workers this plan needs from its measured costs.",
)
@click.option("--target-time", type=float, default=180.0, show_default=True, help="Seconds, for --from-report.")
@click.option(
    "--latency-ms",
    type=float,
    help="For --from-report: a request's first-byte time to price the bucket at "
    "(default: the report's measured one; 25 ms from a run of local files).",
)
@click.option("-v", "--verbose", count=True)
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
@_exits
def plan(
    config: str,
    sets: tuple[str, ...],
    as_json: bool,
    from_report: str | None,
    target_time: float,
    latency_ms: float | None,
    verbose: int,
    quiet: bool,
) -> None:
    """Dry run: inputs, target grid, partitions, bytes, task count. Reads no pixels."""
    from pipeline.api import plan as plan_pipeline

    _setup_logging(verbose, quiet)
    cfg = _load(config, sets)
    summary = dict(plan_pipeline(cfg, progress=not quiet).summary)
    if from_report:
        from pipeline.report.sizing import estimate_for_plan
        from pipeline.report.summary import read_report

        if target_time <= 0:
            raise ConfigError("--target-time", f"must be positive, got {target_time}")
        if latency_ms is not None and latency_ms <= 0:
            raise ConfigError("--latency-ms", f"must be positive, got {latency_ms}")
        summary["sizing"] = estimate_for_plan(read_report(from_report), summary, target_time, latency_ms)
        summary["sizing"]["from_report"] = from_report
    if as_json:
        click.echo(json.dumps(summary, indent=1))
        return
    g = summary["grid"]
    click.echo(
        f"inputs      {summary['inputs']['files']} files ({summary['inputs']['bytes'] / 1e6:.1f} MB), "
        f"{len(summary['inputs']['skipped'])} skipped; bands {', '.join(summary['bands'])}; "
        f"{len(summary['times'])} dates"
    )
    click.echo(
        f"grid        {g['crs']} {g['shape_yx'][1]}x{g['shape_yx'][0]} px at {g['res_xy']}, bounds {g['bounds']}"
    )
    for key, what in summary["inferred"].items():
        click.echo(f"inferred    {key}: {what}")
    nodata = {b: v["nodata_from"] for b, v in summary["inputs"]["bands"].items()}
    methods = summary["resampling"]
    click.echo(
        "bands       "
        + "; ".join(f"{b}: {methods.get(b, '?')}, nodata from {nodata.get(b, 'none')}" for b in summary["bands"])
    )
    click.echo(
        f"chunks      {summary['chunks']} in the cube ({g['chunks_yx'][0]}x{g['chunks_yx'][1]}), "
        f"{summary['jobs']} with data, {summary['windows']} source windows"
    )
    click.echo(
        f"tasks       {summary['tasks']} partitions of ~{cfg.execution.partition_mb:g} MB "
        f"(median {summary['partition_mb']['median']:.1f} MB, max {summary['partition_mb']['max']:.1f} MB)"
    )
    click.echo(
        f"bytes       read {summary['bytes_to_read'] / 1e6:.1f} MB, write {summary['bytes_out'] / 1e6:.1f} MB "
        f"raw; overview levels {summary['levels_used']}"
    )
    if "mask" in summary:
        m = summary["mask"]
        lost = (
            f"; {m['unmasked']} tiles have no {m['band']} tile to judge them and are skipped" if m["unmasked"] else ""
        )
        click.echo(f"mask        {m['band']} judges each tile's pixels before resampling{lost}")
    if "composite" in summary:
        c = summary["composite"]
        click.echo(
            f"composite   {c['reducer']} over {c['period']}: {c['dates']} dates into {c['steps']} steps; a task "
            f"holds one chunk's stack of dates at a time, {c['stack_mb']:.0f} MB "
            f"(composite.stack_mb {c['stack_budget_mb']:.0f})" + (f"; {c['split']}" if c["split"] else "")
        )
    for line in summary["advice"]:
        click.echo(f"advice      {line}")
    if "sizing" in summary:
        from pipeline.report.sizing import format_estimate

        click.echo(format_estimate(summary["sizing"], f"sizing      from {from_report}:"))


@main.command()
@click.argument("config", type=click.Path(dir_okay=False))
@set_option
@click.option("-v", "--verbose", count=True)
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
@_exits
def index(config: str, sets: tuple[str, ...], verbose: int, quiet: bool) -> None:
    """Build or refresh the Parquet tile index (inputs.index)."""
    from pipeline.execute.prepare import run_catalog
    from pipeline.report.progress import progress_for

    _setup_logging(verbose, quiet)
    cfg = _load(config, sets)
    if not cfg.inputs.index:
        raise ConfigError("inputs.index", "is not set; give a path such as ../out/tiles.parquet")
    show = progress_for(not quiet)
    try:
        cat = run_catalog(cfg, show)
    finally:
        show.close()
    click.echo(
        f"{cfg.inputs.index}: {len(cat.tiles)} tiles ({cat.headers_read} headers read, {len(cat.skipped)} skipped)"
    )
    sys.exit(3 if cat.skipped else 0)


@main.command("config")
@click.argument("config", required=False, type=click.Path(dir_okay=False))
@set_option
@click.option("--schema", is_flag=True, help="Print the config's JSON Schema instead.")
@_exits
def config_cmd(config: str | None, sets: tuple[str, ...], schema: bool) -> None:
    """Print CONFIG resolved (defaults filled in, paths absolute) as YAML, or the JSON Schema of every config."""
    if schema:
        if config or sets:
            raise ConfigError("--schema", "takes no CONFIG or --set: the schema is the same for every config")
        from pipeline.config.model import json_schema

        click.echo(json.dumps(json_schema(), indent=2))
        return
    if not config:
        raise ConfigError("CONFIG", "give a config file to resolve, or --schema")
    click.echo(_load(config, sets).to_yaml(), nl=False)


@main.command()
@click.argument("report_json", type=click.Path(exists=True, dir_okay=False))
@click.option("--html", "html_out", type=click.Path(dir_okay=False), help="Write an HTML page with plots.")
@click.option(
    "--compare",
    "old_json",
    type=click.Path(exists=True, dir_okay=False),
    help="An older run's report: what changed, stage by stage and diagnostic by diagnostic.",
)
@_exits
def report(report_json: str, html_out: str | None, old_json: str | None) -> None:
    """Print a past run's breakdown (or what changed since an older run), and render it as HTML."""
    from pipeline.report.summary import format_report, format_update, read_report

    rep = read_report(report_json)
    old = read_report(old_json) if old_json else None
    if old is not None:
        from pipeline.report.compare import compare_reports, format_comparison

        click.echo(f"{report_json} (new) against {old_json} (old):")
        click.echo(format_comparison(compare_reports(rep, old)))
    else:
        click.echo(format_report(rep) if "tasks" in rep else "")
    if "update" in rep:
        click.echo(format_update(rep["update"], bool(rep.get("dry_run"))))
    if html_out:
        from pipeline.report.html import write_html

        write_html(rep, html_out, old, old_json or "")
        click.echo(f"\nhtml: {html_out}")


# The names of pipeline.tools.fixtures.PRESETS, which this module does not import: a test keeps them equal.
PRESET_NAMES = ["small", "casestudy", "casestudy-x4", "calibration", "mixed", "cloudy"]


@main.command()
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--preset", default="small", show_default=True, type=click.Choice(PRESET_NAMES))
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--count", type=int, help="With --index-only: how many tiles (e.g. 192000).")
@click.option("--index-only", is_flag=True, help="Write OUT/index.parquet and OUT/config.yaml, no rasters.")
@_exits
def fixtures(out: str, preset: str, seed: int, count: int | None, index_only: bool) -> None:
    """Write deterministic synthetic satellite tiles under OUT."""
    from pipeline.tools.fixtures import write_fixtures, write_virtual_index

    if index_only:
        try:
            index, config = write_virtual_index(out, preset, count or 192_000)
        except ValueError as e:
            raise ConfigError("--count", str(e)) from e
        click.echo(f"wrote {index} and {config}")
        return
    if count is not None:
        raise ConfigError("--count", "only applies with --index-only")
    paths = write_fixtures(out, preset, seed)
    click.echo(f"wrote {len(paths)} tiles under {out}")


@main.command()
@click.option("--workers", type=int, help="Local workers (default: one per core).")
@click.option("-q", "--quiet", is_flag=True)
@_exits
def demo(workers: int | None, quiet: bool) -> None:
    """The case study at fixture scale: fixtures, run, breakdown."""
    from pipeline.tools.demo import run_demo

    _setup_logging(0, quiet)
    sys.exit(run_demo(PROJECT_ROOT, workers=workers, echo=click.echo))


@main.command()
def doctor() -> None:
    """Versions, GDAL drivers, CPU/GPU, CuPy, Dask."""
    from pipeline.tools.doctor import collect

    for key, value in collect().items():
        click.echo(f"{key:<14}{value}")
