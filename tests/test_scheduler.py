"""execution.scheduler: threads and a local cluster make the same cube and the same report; auto picks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import pipeline.execute.schedulers
from pipeline.config import load_config
from pipeline.execute.runner import plan_run, run
from pipeline.execute.schedulers import (
    AUTO_THREADS_MAX_MB,
    AUTO_THREADS_MAX_MB_IDLE,
    auto_threads_max_mb,
    choose_scheduler,
)
from tests.helpers import write_config

BANDS = ("B01", "B02", "B04", "B11")


def same_cube(a: str, b: str) -> None:
    za, zb = zarr.open_group(a, mode="r"), zarr.open_group(b, mode="r")
    for band in BANDS:
        np.testing.assert_array_equal(za[band][:], zb[band][:], err_msg=band)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, small_dir: Path) -> dict[str, Any]:
    out = {}
    for scheduler in ("threads", "local-cluster"):
        folder = tmp_path_factory.mktemp(scheduler)
        cfg = load_config(write_config(folder, str(small_dir / "**" / "*.tif")), [f"execution.scheduler={scheduler}"])
        out[scheduler] = (cfg, run(cfg))
    return out


def test_threads_and_local_cluster_make_the_same_cube(runs: dict[str, Any]) -> None:
    (a_cfg, a), (b_cfg, b) = runs["threads"], runs["local-cluster"]
    assert a.exit_code == b.exit_code == 0
    same_cube(a_cfg.output.path, b_cfg.output.path)


def test_threads_report_names_threads_memory_and_why(runs: dict[str, Any]) -> None:
    rep = runs["threads"][1].report
    ex = rep["execution"]
    assert ex["scheduler"] == "threads" and ex["scheduler_reason"] == "execution.scheduler is threads"
    assert ex["threads"] == 2 and set(rep["workers"]) == {"thread-0", "thread-1"}
    assert {t["worker"] for t in rep["tasks"]} <= set(rep["workers"])
    assert sum(w["tasks"] for w in rep["workers"].values()) == len(rep["tasks"]) == rep["plan"]["partitions"]
    assert abs(sum(rep["stages"].values()) - rep["wall_s"]) <= 0.05 * rep["wall_s"]
    mem = rep["memory"]
    assert set(mem["worker_peak_mb"]) == set(rep["workers"]) and 10 < mem["driver_peak_mb"] < 24_000
    assert {d["check"] for d in rep["diagnostics"]} >= {"workers_used", "task_overhead"}


def test_local_cluster_report_has_each_workers_memory(runs: dict[str, Any]) -> None:
    rep = runs["local-cluster"][1].report
    assert rep["execution"]["scheduler"] == "local-cluster"
    peaks = rep["memory"]["worker_peak_mb"]
    assert set(peaks) == set(rep["workers"]) and len(peaks) == 2
    assert all(10 < mb < 24_000 for mb in peaks.values())


def test_a_failed_task_is_retried_under_threads(
    tmp_path: Path, small_dir: Path, runs: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = pipeline.execute.schedulers.run_partition
    calls: dict[str, int] = {}
    victim: list[str] = []

    def fails_once(p: Any, *args: Any) -> dict[str, Any]:
        calls[p.key] = calls.get(p.key, 0) + 1
        if not victim:
            victim.append(p.key)
        if p.key == victim[0] and calls[p.key] == 1:
            raise OSError("worker lost (planted)")
        return real(p, *args)

    monkeypatch.setattr(pipeline.execute.schedulers, "run_partition", fails_once)
    cfg = load_config(
        write_config(tmp_path, str(small_dir / "**" / "*.tif")), ["execution.scheduler=threads", "execution.retries=1"]
    )
    result = run(cfg)
    assert result.exit_code == 0 and calls[victim[0]] == 2
    assert len(result.report["tasks"]) == result.report["plan"]["partitions"]
    same_cube(cfg.output.path, runs["threads"][0].output.path)


def test_a_task_failing_past_its_retries_fails_the_run_under_threads(
    tmp_path: Path, small_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = [0]

    def always_fails(p: Any, *args: Any) -> dict[str, Any]:
        calls[0] += 1
        raise OSError("disk gone (planted)")

    monkeypatch.setattr(pipeline.execute.schedulers, "run_partition", always_fails)
    cfg = load_config(
        write_config(tmp_path, str(small_dir / "**" / "*.tif")),
        ["execution.scheduler=threads", "execution.retries=2", "execution.partition_mb=256"],
    )
    with pytest.raises(OSError, match="planted"):
        run(cfg)
    assert calls[0] == 3  # one partition: the first try and two retries


def test_auto_picks_threads_for_the_small_fixture(tmp_path: Path, small_dir: Path) -> None:
    cfg = load_config(write_config(tmp_path, str(small_dir / "**" / "*.tif")), ["execution.device=cpu"])
    assert cfg.execution.scheduler == "auto"
    result = run(cfg)
    ex = result.report["execution"]
    assert ex["scheduler"] == "threads" and ex["scheduler_reason"].startswith("auto:")
    assert set(result.report["workers"]) == {"thread-0", "thread-1"}


def test_auto_picks_processes_above_the_bound_and_a_cluster_for_addresses_and_gpus(
    tmp_path: Path, small_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_config(tmp_path, str(small_dir / "**" / "*.tif"))
    cfg = load_config(path, ["execution.device=cpu"])
    _, plan = plan_run(cfg)
    todo = [plan.partitions[i] for i in range(len(plan.partitions))]
    assert sum(p.cost_bytes for p in todo) / 1e6 < min(AUTO_THREADS_MAX_MB, AUTO_THREADS_MAX_MB_IDLE)
    assert choose_scheduler(cfg.execution, todo)[0] == "threads"
    monkeypatch.setattr(pipeline.execute.schedulers, "AUTO_THREADS_MAX_MB", 0.5)  # the small fixture counts as large
    monkeypatch.setattr(pipeline.execute.schedulers, "AUTO_THREADS_MAX_MB_IDLE", 0.5)
    scheduler, reason = choose_scheduler(cfg.execution, todo)
    assert scheduler == "processes" and "> 0 MB" in reason
    address = load_config(path, ["execution.scheduler=tcp://127.0.0.1:8786"])
    assert choose_scheduler(address.execution, todo) == ("tcp://127.0.0.1:8786", "an existing Dask scheduler was given")
    gpu = load_config(path, ["execution.device=gpu"])
    assert choose_scheduler(gpu.execution, todo)[0] == "local-cluster"
    forced = load_config(path, ["execution.scheduler=threads"])
    monkeypatch.setattr(pipeline.execute.schedulers, "AUTO_THREADS_MAX_MB", 0.0)
    assert choose_scheduler(forced.execution, todo)[0] == "threads"


def test_resume_under_threads_finishes_a_cluster_run(tmp_path: Path, small_dir: Path, runs: dict[str, Any]) -> None:
    """A store half written by one scheduler is finished by the other: the journal is the same."""
    from pipeline.store.layout import JOURNAL_DIR

    path = write_config(tmp_path, str(small_dir / "**" / "*.tif"))
    first = load_config(path, ["execution.scheduler=local-cluster"])
    run(first)
    root = zarr.open_group(first.output.path, mode="r+")
    root.attrs["pipeline_complete"] = False
    # Pretend one partition never finished: drop its journal entry (its chunks are rewritten alike).
    journal = Path(first.output.path) / JOURNAL_DIR
    journal.mkdir(exist_ok=True)
    _, plan = plan_run(first)
    keys = list(plan.partitions.keys())
    for key in keys[1:]:
        (journal / key).touch()
    result = run(load_config(path, ["execution.scheduler=threads"]), resume=True)
    assert result.report["plan"]["resumed_done"] == len(keys) - 1 and len(result.report["tasks"]) == 1
    assert result.report["execution"]["scheduler"] == "threads"
    same_cube(first.output.path, runs["threads"][0].output.path)


def test_auto_bound_is_lower_where_the_cores_are_free() -> None:
    """Free cores (load under one per core) run the fork server's imports beside the planning: processes
    from 16 MB of planned work; busy ones from 100 MB. The reason names the load."""
    assert auto_threads_max_mb(1.3, 2) == (AUTO_THREADS_MAX_MB_IDLE, "cores free: load 1.3 on 2")
    assert auto_threads_max_mb(2.0, 2) == (AUTO_THREADS_MAX_MB, "cores busy: load 2.0 on 2")
    assert auto_threads_max_mb(None, 2)[0] == AUTO_THREADS_MAX_MB
    assert AUTO_THREADS_MAX_MB_IDLE < 57 < AUTO_THREADS_MAX_MB  # the mixed preset: processes only on free cores


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux's")
def test_auto_counts_the_cores_this_process_may_use() -> None:
    """A process pinned to one core (``taskset``, a container's CPU set) starts one worker, not one per
    core of the machine: ``usable_cores`` reads the affinity."""
    import subprocess
    import sys

    code = (
        "import os\nos.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})\n"
        "from pipeline.execute.workers import usable_cores\nprint(usable_cores(), os.cpu_count())\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    pinned, machine = map(int, r.stdout.split())
    assert pinned == 1 and machine >= 1
