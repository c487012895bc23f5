"""Helpers the tests import (fixtures live in conftest.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

PATTERN = r"(?P<date>\d{4}-\d{2}-\d{2})/(?P<tile>[^/]+)_(?P<band>[^/_.]+)\.tif$"


def write_config(folder: Path, inputs_glob: str, **sections: Any) -> Path:
    """A config file in ``folder`` for the given input glob; sections override defaults."""
    raw: dict[str, Any] = {
        "inputs": {"paths": [inputs_glob], "pattern": PATTERN},
        "grid": {"crs": "EPSG:32632", "resolution": 20},
        "output": {"path": str(folder / "out.zarr"), "chunks": {"y": 128, "x": 128}},
        "execution": {"workers": 2, "partition_mb": 1},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict):
            raw[key] = raw[key] | value
        else:
            raw[key] = value
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def run_raw(folder: Path, raw: dict[str, Any]) -> tuple[Any, Any]:
    """Run the config ``raw`` (written to ``folder/config.yaml``) in this process: the run's result and its
    cube at ``folder/out.zarr``, opened raw (``mask_and_scale=False``)."""
    import xarray as xr

    from pipeline.config import load_config
    from pipeline.execute.runner import run

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(raw))
    result = run(load_config(folder / "config.yaml"))
    return result, xr.open_zarr(folder / "out.zarr", mask_and_scale=False)


def virtual_tiles(specs: list[tuple[str, float, float, int, int, float, str, str]]) -> Any:
    """A tile table of tiles with no files behind them, sorted by path (the fuse order), for planning
    tests: specs of (crs, x0, y0, width, height, res, band, date), north-up, nodata 0."""
    import numpy as np

    from pipeline.inputs.tiles import TABLE_COLUMNS, TileTable

    rows = [
        {
            "path": f"/virtual/{date}/{i:04d}_{band}.tif",
            "band": band,
            "tile": str(i),
            "date": np.datetime64(date),
            "crs": crs,
            "a": res,
            "b": 0.0,
            "c": x0,
            "d": 0.0,
            "e": -res,
            "f": y0,
            "width": w,
            "height": h,
            "xmin": x0,
            "ymin": y0 - h * res,
            "xmax": x0 + w * res,
            "ymax": y0,
            "dtype": "uint16",
            "file_nodata": 0.0,
            "nodata": 0.0,
            "nodata_from": "file",
            "bidx": 1,
            "block_x": 256,
            "block_y": 256,
            "overview_sizes": [-(-w // 2), -(-h // 2), -(-w // 4), -(-h // 4)],
            "size": w * h * 2,
            "mtime": 0,
        }
        for i, (crs, x0, y0, w, h, res, band, date) in enumerate(specs)
    ]
    table = TileTable.from_records(rows, TABLE_COLUMNS)
    return table.rows(np.argsort(table["path"], kind="stable"))


@contextlib.contextmanager
def serve_stac(parquet: Path) -> Iterator[str]:
    """A real STAC API: ``rustac serve`` on a free loopback port, serving a stac-geoparquet file from
    memory; yields its URL."""
    import shutil
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    exe = shutil.which("rustac") or os.path.join(os.path.dirname(sys.executable), "rustac")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    # The DuckDB backend (rustac's default for one .parquet) does not answer offline; memory does.
    cmd = [exe, "serve", str(parquet), "--use-duckdb", "false", "--addr", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(url + "/", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"rustac serve did not answer: {proc.stderr.read() if proc.stderr else ''}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


# --- one session over several pytest-xdist workers --------------------------------------------------------


def session_folder(tmp_path_factory: Any) -> Path:
    """The folder every worker of one pytest run shares: the run's base temp folder, or under pytest-xdist
    its parent (each worker's is ``<base>/popen-gwN``)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``path`` (made if missing), held for the block, across processes."""
    import fcntl

    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def written_once(tmp_path_factory: Any, name: str, write: Any) -> Path:
    """``session_folder/name``, made by ``write(folder)`` once per test session: the first worker to ask
    writes it while the others wait, then all read the same files (a session fixture's files, under
    pytest-xdist as without it). A write that failed is redone by the next to ask."""
    import shutil

    root = session_folder(tmp_path_factory) / "shared"
    root.mkdir(exist_ok=True)
    out, done = root / name, root / f"{name}.done"
    with file_lock(root / f"{name}.lock"):
        if not done.exists():
            if out.exists():
                shutil.rmtree(out)
            write(out)
            done.touch()
    return out


class SuiteLock:
    """Lets a test run with nothing else of the suite running beside it (:meth:`alone`): every other test
    holds the lock shared (:meth:`share`, for its whole setup, call and teardown; the conftest's hook), and
    a test that must be alone waits until the tests running on the other workers end, and holds theirs
    back until it is done. A turnstile keeps the one waiting to be alone from being starved by tests that
    keep starting. No-ops without pytest-xdist (one test at a time anyway)."""

    def __init__(self, folder: Path | None) -> None:
        # Held open for the worker's life (the locks are the open files'); closed as the process ends.
        self._files = None
        if folder is not None:
            self._files = (open(folder / "suite.lock", "a+"), open(folder / "turn.lock", "a+"))  # noqa: SIM115
        self._shared = False
        self._alone = 0

    def share(self) -> None:
        import fcntl

        if self._files is None or self._alone:
            return
        suite, turn = self._files
        fcntl.flock(turn, fcntl.LOCK_EX)  # not while one waits to be alone, or is
        fcntl.flock(suite, fcntl.LOCK_SH)
        fcntl.flock(turn, fcntl.LOCK_UN)
        self._shared = True

    def unshare(self) -> None:
        import fcntl

        if self._files is not None and self._shared and not self._alone:
            fcntl.flock(self._files[0], fcntl.LOCK_UN)
            self._shared = False

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        import fcntl

        if self._files is None or self._alone:
            self._alone += 1
            try:
                yield
            finally:
                self._alone -= 1
            return
        suite, turn = self._files
        if self._shared:  # let go first: two workers each waiting to be alone while holding theirs would deadlock
            fcntl.flock(suite, fcntl.LOCK_UN)
        fcntl.flock(turn, fcntl.LOCK_EX)
        fcntl.flock(suite, fcntl.LOCK_EX)
        self._alone = 1
        try:
            yield
        finally:
            self._alone = 0
            fcntl.flock(suite, fcntl.LOCK_SH if self._shared else fcntl.LOCK_UN)
            fcntl.flock(turn, fcntl.LOCK_UN)


_suite_lock = SuiteLock(None)


def use_suite_lock(folder: Path | None) -> SuiteLock:
    """The session's :class:`SuiteLock` (the conftest makes it as each worker starts)."""
    global _suite_lock
    _suite_lock = SuiteLock(folder)
    return _suite_lock


def suite_lock() -> SuiteLock:
    """The session's :class:`SuiteLock`."""
    return _suite_lock


def running_alone() -> contextlib.AbstractContextManager[None]:
    """The block runs with no other test of the suite running (for module fixtures whose runs are judged
    on shares of time; a test asks for the ``alone`` fixture)."""
    return _suite_lock.alone()


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_pipeline(args: list[str]) -> subprocess.Popen[str]:
    """``python -m pipeline ARGS`` in its own process group, as a terminal's foreground job, with Ctrl-C's
    default action whatever this test inherited (a shell starts a background job, `make test &` or a CI
    runner's, with SIGINT ignored, and Python then leaves it ignored); stdout and stderr piped, as text."""
    return subprocess.Popen(
        [sys.executable, "-m", "pipeline", *args],
        start_new_session=True,
        preexec_fn=_sigint_default,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},  # SIGABRT prints every thread's stack (exited())
    )


def wait_journaled(
    proc: subprocess.Popen[Any], journal: Path, n: int, *, prefix: str = "", poll_s: float = 0.01
) -> bool:
    """Wait until the store's ``journal`` lists ``n`` entries (those whose names start with ``prefix``) or the
    process has ended; whether ``proc`` is still running (and so can be signalled mid-run). A process still
    running after 120 s without them is stuck: the test fails with what each of its threads was doing
    (SIGABRT, printed by faulthandler), not with what a signal sent before its first task would say."""
    deadline = time.time() + 120
    while proc.poll() is None:
        if journal.exists() and len([e for e in os.listdir(journal) if e.startswith(prefix)]) >= n:
            break
        if time.time() > deadline:
            proc.send_signal(signal.SIGABRT)
            _, err = proc.communicate(timeout=60)
            raise AssertionError(
                f"{proc.args!r} journaled fewer than {n} partitions in 120 s; its threads:\n{err[-12000:]}"
            )
        time.sleep(poll_s)
    return proc.poll() is None


def exited(proc: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    """(stdout, stderr) of ``proc`` once it exits; where it has not within ``timeout`` seconds, the test
    fails with what each of its threads was doing (SIGABRT, printed by faulthandler)."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        _, err = proc.communicate(timeout=60)
        raise AssertionError(
            f"{proc.args!r} did not exit within {timeout:.0f} s; its threads:\n{err[-12000:]}"
        ) from None


def stop_dask(procs: list[subprocess.Popen[Any]]) -> None:
    """Stop a ``dask scheduler`` (``procs[0]``) and its ``dask worker`` processes: the workers first, then the
    scheduler. A worker told to stop while its scheduler went away too sometimes waited out its comm
    timeouts (15-20 s of a test's wall) before exiting."""
    for group in (procs[1:], procs[:1]):
        for p in group:
            p.terminate()
        for p in group:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
