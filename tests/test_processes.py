"""execution.scheduler: processes: the same cube and report as threads; retries of failed tasks and of
dead workers; resume; a plain script without a ``__main__`` guard."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import zarr

import pipeline.execute.processes
from pipeline.config import load_config
from pipeline.errors import WorkerError
from pipeline.execute.runner import plan_run, run
from pipeline.execute.task import run_partition
from tests.helpers import write_config
from tests.test_scheduler import same_cube

ROOT = Path(__file__).resolve().parents[1]
MARK = "PIPELINE_TEST_MARK"


def fails_once(p: Any, *args: Any) -> dict[str, Any]:
    """Planted in the workers: the first partition tried raises once (a marker file says it did)."""
    mark = Path(os.environ[MARK])
    try:
        mark.touch(exist_ok=False)
    except FileExistsError:
        return run_partition(p, *args)
    raise OSError("worker lost (planted)")


def dies_once(p: Any, *args: Any) -> dict[str, Any]:
    """Planted in the workers: the first partition tried kills its worker."""
    mark = Path(os.environ[MARK])
    try:
        mark.touch(exist_ok=False)
    except FileExistsError:
        return run_partition(p, *args)
    os._exit(9)


def always_fails(p: Any, *args: Any) -> dict[str, Any]:
    raise OSError("disk gone (planted)")


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, small_dir: Path) -> dict[str, Any]:
    out = {}
    for scheduler in ("threads", "processes"):
        folder = tmp_path_factory.mktemp(scheduler)
        cfg = load_config(write_config(folder, str(small_dir / "**" / "*.tif")), [f"execution.scheduler={scheduler}"])
        out[scheduler] = (cfg, run(cfg))
    return out


def test_processes_make_the_threads_cube(pair: dict[str, Any]) -> None:
    (a_cfg, a), (b_cfg, b) = pair["threads"], pair["processes"]
    assert a.exit_code == b.exit_code == 0
    same_cube(a_cfg.output.path, b_cfg.output.path)


def test_processes_report_names_workers_memory_and_why(pair: dict[str, Any]) -> None:
    rep = pair["processes"][1].report
    ex = rep["execution"]
    assert ex["scheduler"] == "processes" and ex["scheduler_reason"] == "execution.scheduler is processes"
    assert ex["threads"] == 2 and set(rep["workers"]) == {"process-0", "process-1"}
    assert sum(w["tasks"] for w in rep["workers"].values()) == len(rep["tasks"]) == rep["plan"]["partitions"]
    assert len({t["pid"] for t in rep["tasks"]}) == 2 and os.getpid() not in {t["pid"] for t in rep["tasks"]}
    assert abs(sum(rep["stages"].values()) - rep["wall_s"]) <= 0.05 * rep["wall_s"]
    peaks = rep["memory"]["worker_peak_mb"]
    assert set(peaks) == set(rep["workers"]) and all(10 < mb < 24_000 for mb in peaks.values())
    assert {d["check"] for d in rep["diagnostics"]} >= {"workers_used", "task_overhead", "chunk_size"}


@pytest.mark.parametrize("planted", [fails_once, dies_once], ids=["task-raises", "worker-dies"])
def test_a_failed_task_is_retried_under_processes(
    planted: Any, tmp_path: Path, small_dir: Path, pair: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MARK, str(tmp_path / "mark"))
    monkeypatch.setattr(pipeline.execute.processes, "TASK", planted)
    cfg = load_config(
        write_config(tmp_path, str(small_dir / "**" / "*.tif")),
        ["execution.scheduler=processes", "execution.retries=1"],
    )
    result = run(cfg)
    assert (tmp_path / "mark").exists()
    assert result.exit_code == 0 and len(result.report["tasks"]) == result.report["plan"]["partitions"]
    if planted is dies_once:  # the dead worker was replaced: its peak memory is still reported
        assert "process-2" in result.report["memory"]["worker_peak_mb"]
    same_cube(cfg.output.path, pair["threads"][0].output.path)


def test_a_task_failing_past_its_retries_fails_the_run_under_processes(
    tmp_path: Path, small_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pipeline.execute.processes, "TASK", always_fails)
    cfg = load_config(
        write_config(tmp_path, str(small_dir / "**" / "*.tif")),
        ["execution.scheduler=processes", "execution.retries=1", "execution.partition_mb=256"],
    )
    with pytest.raises(OSError, match="planted"):
        run(cfg)


def test_a_worker_dying_past_its_retries_fails_the_run(
    tmp_path: Path, small_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MARK, str(tmp_path / "mark"))
    monkeypatch.setattr(pipeline.execute.processes, "TASK", dies_once)
    cfg = load_config(
        write_config(tmp_path, str(small_dir / "**" / "*.tif")),
        ["execution.scheduler=processes", "execution.retries=0"],
    )
    with pytest.raises(WorkerError, match="died running partition"):
        run(cfg)


def test_resume_under_processes_finishes_a_threads_run(tmp_path: Path, small_dir: Path, pair: dict[str, Any]) -> None:
    from pipeline.store.layout import JOURNAL_DIR

    path = write_config(tmp_path, str(small_dir / "**" / "*.tif"))
    first = load_config(path, ["execution.scheduler=threads"])
    run(first)
    zarr.open_group(first.output.path, mode="r+").attrs["pipeline_complete"] = False
    journal = Path(first.output.path) / JOURNAL_DIR  # the finished store keeps none: write all but two
    journal.mkdir(exist_ok=True)
    keys = list(plan_run(first)[1].partitions.keys())
    for key in keys[2:]:
        (journal / key).touch()
    result = run(load_config(path, ["execution.scheduler=processes"]), resume=True)
    assert result.report["plan"]["resumed_done"] == len(keys) - 2 and len(result.report["tasks"]) == 2
    assert result.report["execution"]["scheduler"] == "processes"
    same_cube(first.output.path, pair["threads"][0].output.path)


def test_a_plain_script_without_a_main_guard_runs_on_processes(tmp_path: Path, small_dir: Path) -> None:
    """Workers never re-run the caller's script (a spawn or forkserver child would, and start the run
    again in every worker)."""
    config = write_config(tmp_path, str(small_dir / "**" / "*.tif"))
    script = tmp_path / "script.py"
    script.write_text(
        "import pipeline\n"
        "from pipeline.config import load_config\n"
        "print('script body ran', flush=True)\n"
        f"cfg = load_config({str(config)!r}, ['execution.scheduler=processes'])\n"
        "result = pipeline.run(cfg)\n"
        "print('exit', result.exit_code, result.report['execution']['scheduler'], flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=_env()
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("script body ran") == 1 and "exit 0 processes" in done.stdout


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def test_an_idle_worker_takes_the_partition_whose_files_it_has_open() -> None:
    """``_pick``: of the next LOOKAHEAD partitions (costliest first), the one reading most of the worker's
    latest files and fewest of those other workers are reading now; the earliest among equals; never
    one further back (the costliest must start first)."""
    from collections import OrderedDict, deque

    from pipeline.execute.processes import LOOKAHEAD, _pick

    # partitions 0-3: one chunk's 4 bands (tiles a, b); 4-7: the next chunk's (tiles c, d); 8: tiles a, b again
    files = {i: frozenset({"a", "b"} if i < 4 or i == 8 else {"c", "d"}) for i in range(9)}
    assert LOOKAHEAD == 4

    def pick(queue: list[int], recent: set[str], others: list[set[str]]) -> int:
        q = deque(queue)
        got = _pick(q, files.__getitem__, OrderedDict.fromkeys(sorted(recent)), [frozenset(o) for o in others])
        assert got not in q and len(q) == len(queue) - 1
        return got

    assert pick(list(range(9)), set(), []) == 0  # nothing open: the costliest
    assert pick(list(range(1, 9)), set(), [{"a", "b"}]) == 4  # another worker reads a, b: start on c, d
    assert pick([1, 2, 5, 6, 3], {"c", "d"}, [{"a", "b"}]) == 5  # its own files, whoever else is busy
    assert pick([1, 2, 3, 5, 6], {"c", "d"}, []) == 5
    assert pick([1, 2, 3, 7, 8], {"x"}, []) == 1  # no overlap anywhere: the earliest
    assert pick([1, 2, 3, 7, 5], {"c", "d"}, []) == 7  # 5 is past the lookahead

    # the head passed over LOOKAHEAD times is taken next, whatever the worker has open
    q, passed, order = deque([0, *range(4, 12)]), {}, []
    files.update({i: frozenset({"c", "d"}) for i in range(9, 12)})
    while q:
        order.append(_pick(q, files.__getitem__, OrderedDict.fromkeys(["c", "d"]), [], passed))
    assert order.index(0) == LOOKAHEAD, order


WORKER = """
import pickle, sys
from pipeline.execute.workers import PROCESS_PRELOAD
for name in PROCESS_PRELOAD:
    __import__(name)
from pipeline.execute.task import run_partition
with open(sys.argv[1], "rb") as f:
    partition, ctx = pickle.load(f)
record = run_partition(partition, ctx)
print(record["chunks"], "pydantic" in sys.modules)
"""


def test_a_worker_runs_its_tasks_without_importing_pydantic(tmp_path: Path, small_dir: Path) -> None:
    """The fork server imports what workers need and no more: a task's context carries its storage
    settings as plain values, so a worker (the server's imports, then a task unpickled and run) never
    imports pydantic, ~70 ms of the server's start that a short run waits for."""
    import pickle

    from pipeline.execute.runner import _prepare_store, task_context

    cfg = load_config(write_config(tmp_path, str(small_dir / "**" / "*.tif")), ["execution.scheduler=processes"])
    _, plan = plan_run(cfg)
    _prepare_store(cfg, plan, overwrite=True, resume=False)
    (tmp_path / "task.pickle").write_bytes(pickle.dumps((plan.partitions[0], task_context(cfg, plan))))
    r = subprocess.run(
        [sys.executable, "-c", WORKER, str(tmp_path / "task.pickle")], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    chunks, pydantic = r.stdout.split()
    assert int(chunks) > 0 and pydantic == "False"


FORK_SERVER_THREADS = """
import os, time
import numpy  # a program that loaded NumPy (and its OpenBLAS) before it asked for the pool
from multiprocessing import forkserver
from pipeline.execute.workers import start_fork_server
start_fork_server()
pid = forkserver._forkserver._forkserver_pid
most, deadline = 1, time.monotonic() + 120
while time.monotonic() < deadline:  # until the server has loaded GDAL, which it imports after NumPy
    most = max(most, len(os.listdir(f"/proc/{pid}/task")))
    with open(f"/proc/{pid}/maps") as f:
        if "libgdal" in f.read():
            break
    time.sleep(0.01)
time.sleep(0.2)
print(max(most, len(os.listdir(f"/proc/{pid}/task"))))
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or (os.cpu_count() or 1) < 2, reason="OpenBLAS starts helpers on 2+ cores"
)
def test_the_fork_server_starts_no_blas_threads_for_the_caller_that_loaded_numpy_first() -> None:
    """The fork server imports NumPy on a core the driver's own start needs; OpenBLAS would start a helper
    thread per core as it loads, spinning for work before it sleeps. The server holds it to one thread
    whatever the caller's process did (its threads: the main one only, until it forks, when OpenBLAS stops
    any helpers itself)."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    r = subprocess.run(
        [sys.executable, "-c", FORK_SERVER_THREADS], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["1"]
