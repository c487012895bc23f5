"""Progress a person can watch, and Dask's dashboard: what a terminal, a log file and ``-q`` show, and
the callback interface an executor drives (the same for threads and a local cluster)."""

from __future__ import annotations

import io
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import pipeline
from pipeline.report.progress import NoProgress, Progress
from tests.helpers import write_config


class Recorder(NoProgress):
    """The interface, recording what it is told (and fetching the dashboard while the cluster is up)."""

    def __init__(self) -> None:
        self.phases: list[tuple[str, int | None]] = []
        self.tasks: list[dict[str, Any]] = []
        self.counts: dict[str, int] = {}
        self.notes: list[str] = []
        self.dashboard_status: int | None = None

    def phase(self, name: str, total: int | None = None, unit: str = "") -> None:
        self.phases.append((name, total))
        self.counts[name] = 0

    def add(self, n: int = 1, nbytes: int = 0) -> None:
        self.counts[self.phases[-1][0]] += n

    def task_done(self, record: dict[str, Any]) -> None:
        self.tasks.append(record)
        super().task_done(record)

    def note(self, text: str) -> None:
        self.notes.append(text)
        if text.startswith("dashboard: "):
            with urllib.request.urlopen(text.split(" ", 1)[1], timeout=30) as r:
                self.dashboard_status = r.status


def test_a_log_gets_a_line_every_few_seconds_with_rate_mb_s_and_eta() -> None:
    out = io.StringIO()
    p = Progress(out, tty=False, every_s=0.05)
    p.phase("tasks", 4, "tasks")
    for _ in range(4):
        time.sleep(0.06)
        p.add(1, 2_000_000)
    p.close()
    lines = out.getvalue().splitlines()
    assert len(lines) >= 4 and "\r" not in out.getvalue()  # lines, not a redrawn bar
    first = next(line for line in lines if line.startswith("tasks: 1/4 tasks (25%)"))
    assert "MB/s" in first and "ETA 0:0" in first
    assert lines[-1].startswith("tasks: 4/4 tasks (100%)") and " in 0:00" in lines[-1]


def test_a_log_gets_a_line_while_nothing_finishes() -> None:
    out = io.StringIO()
    p = Progress(out, tty=False, every_s=0.1)
    p.phase("tasks", 2, "tasks")
    time.sleep(0.5)  # one long task: the log still hears from the run
    p.close()
    waiting = [line for line in out.getvalue().splitlines() if line.startswith("tasks: 0/2")]
    assert len(waiting) >= 2 and waiting[0].endswith("ETA unknown")


def test_a_terminal_gets_one_line_redrawn_in_place() -> None:
    out = io.StringIO()
    p = Progress(out, tty=True)
    p.phase("listing", unit="files listed")
    p.add(5)
    time.sleep(0.25)
    p.add(5)
    p.note("dashboard: http://x")
    p.phase("tasks", 3, "tasks")
    p.add(3)
    p.close()
    text = out.getvalue()
    assert "\r\x1b[K" in text and text.count("\n") == 3  # listing, the note, tasks
    assert "listing: 10 files listed" in text and "tasks: 3/3 tasks (100%)" in text


def test_the_cli_shows_progress_in_a_log_and_q_silences_it(tmp_path: Path, small_dir: Path) -> None:
    cfg = write_config(tmp_path, str(small_dir / "**" / "*.tif"))
    with open(tmp_path / "log.txt", "w") as log:  # not a terminal
        r = subprocess.run([sys.executable, "-m", "pipeline", "run", str(cfg)], stdout=log, stderr=log, timeout=300)
    assert r.returncode == 0
    text = (tmp_path / "log.txt").read_text()
    assert "listing: 32 files listed" in text and "headers: 32/32 headers read (100%)" in text
    done = [line for line in text.splitlines() if line.startswith("tasks: ")]
    assert done and "(100%)" in done[-1] and "MB/s" in done[-1]
    assert "\r" not in text
    q = subprocess.run(
        [sys.executable, "-m", "pipeline", "run", str(cfg), "--overwrite", "-q"], capture_output=True, text=True
    )
    assert q.returncode == 0 and q.stderr == "" and q.stdout == ""


@pytest.mark.parametrize("scheduler", ["threads", "local-cluster"])
def test_every_executor_tells_the_progress_each_task(tmp_path: Path, small_dir: Path, scheduler: str) -> None:
    cfg = pipeline.Config.from_yaml(
        write_config(tmp_path, str(small_dir / "**" / "*.tif")), [f"execution.scheduler={scheduler}"]
    )
    rec = Recorder()
    result = pipeline.run(cfg, progress=rec)
    names = [name for name, _ in rec.phases]
    assert names == ["listing", "headers", "tasks"]
    assert rec.counts["listing"] == 32 and rec.counts["headers"] == 32
    assert dict(rec.phases)["tasks"] == len(result.report.tasks) == len(rec.tasks) == rec.counts["tasks"]
    if scheduler == "local-cluster":  # its dashboard, served while the run went on
        link = result.report.execution.dashboard
        assert link.startswith("http://127.0.0.1:") and rec.notes == [f"dashboard: {link}"]
        assert rec.dashboard_status == 200
    else:
        assert rec.notes == [] and result.report.execution.dashboard is None


def test_the_dashboard_can_be_off_and_a_schedulers_own_link_is_printed(tmp_path: Path, small_dir: Path) -> None:
    from distributed import LocalCluster

    path = write_config(tmp_path, str(small_dir / "**" / "*.tif"))
    off = pipeline.Config.from_yaml(path, ["execution.scheduler=local-cluster", "execution.dashboard=false"])
    rec = Recorder()
    assert pipeline.run(off, progress=rec).report.execution.dashboard is None and rec.notes == []
    with LocalCluster(n_workers=1, processes=False, dashboard_address="127.0.0.1:0") as cluster:
        given = pipeline.Config.from_yaml(path, [f"execution.scheduler={cluster.scheduler_address}"])
        rec = Recorder()
        result = pipeline.run(given, progress=rec, overwrite=True)
        port = cluster.dashboard_link.rsplit(":", 1)[1]  # the scheduler's own dashboard, reached from here
        assert rec.notes == [f"dashboard: {result.report.execution.dashboard}"] and rec.dashboard_status == 200
        assert result.report.execution.dashboard.endswith(f":{port}")


def test_index_and_plan_show_listing_and_headers_and_q_silences_them(tmp_path: Path, small_dir: Path) -> None:
    cfg = write_config(tmp_path, str(small_dir / "**" / "*.tif"), inputs={"index": str(tmp_path / "tiles.parquet")})
    r = subprocess.run([sys.executable, "-m", "pipeline", "index", str(cfg)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "listing: 32 files listed" in r.stderr and "headers: 32/32 headers read (100%)" in r.stderr
    p = subprocess.run([sys.executable, "-m", "pipeline", "plan", str(cfg)], capture_output=True, text=True)
    assert p.returncode == 0 and "listing: 32 files listed" in p.stderr and "headers" not in p.stderr  # indexed
    q = subprocess.run(
        [sys.executable, "-m", "pipeline", "plan", str(cfg), "-q", "--json"], capture_output=True, text=True
    )
    assert q.returncode == 0 and q.stderr == ""
