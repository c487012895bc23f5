from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import load_config
from pipeline.tools.fixtures import write_fixtures
from tests.helpers import running_alone, suite_lock, use_suite_lock, write_config, written_once

# The suite runs on pytest-xdist's workers (`make test`: -n auto --dist loadfile, each file on one worker).
# The scheduler hands out files in collection order, so these, the slowest (`--durations`, docs/development.md),
# go first: the last to finish is then a short one. Others keep their order, after these.
SLOW_FILES_FIRST = (
    "test_readme.py",
    "test_scale.py",
    "test_diagnostics.py",
    "test_update.py",
    "test_end_to_end.py",
    "test_composite.py",
    "test_cloudy_fixture.py",
    "test_icechunk.py",
    "test_update_s3.py",
    "test_s3_inputs.py",
    "test_cli.py",
    "test_output_store.py",
    "test_failures.py",
    "test_realworld.py",
    "test_s3_runs.py",
    "test_kernels.py",
    "test_processes.py",
    "test_readers.py",
    "test_chunk_independence.py",
    "test_progress.py",
    "test_resume.py",
    "test_api.py",
    "test_start.py",
    "test_interrupt.py",
    "test_reads_ahead.py",
    "test_update_fingerprints.py",
)


def pytest_configure(config: pytest.Config) -> None:
    # Under pytest-xdist each worker's base temp folder is <session>/popen-gwN: the lock lives in <session>.
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    use_suite_lock(Path(config.option.basetemp).parent if worker and config.option.basetemp else None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return  # one process: the files in their usual order
    rank = {name: i for i, name in enumerate(SLOW_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's tests keep their order


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Every test holds the suite lock shared from its setup to its teardown, so that one asking for the
    ``alone`` fixture runs with no other test beside it (tests.helpers.SuiteLock)."""
    lock = suite_lock()
    lock.share()
    try:
        return (yield)
    finally:
        lock.unshare()


@pytest.fixture
def alone() -> Iterator[None]:
    """No other test of the suite runs while this one does (under pytest-xdist the other workers wait).
    For tests that judge shares of time in a real run (the diagnostics' chunk_size, task_overhead,
    long_tail), which another worker's load would move: ask for it after the fixtures that only write
    files, so that their writing runs beside other tests."""
    with running_alone():
        yield


def _cupy_device() -> bool:
    from pipeline.execute.device import detect_gpu

    return detect_gpu().available


@pytest.fixture(params=["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def xp(request: pytest.FixtureRequest) -> Any:
    """The array module: numpy always, cupy where a GPU exists (skipped otherwise)."""
    if request.param == "cupy":
        if not _cupy_device():
            pytest.skip("no CUDA device / CuPy")
        import cupy

        return cupy
    import numpy

    return numpy


@pytest.fixture(scope="session")
def small_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small preset, written once per session (once for all pytest-xdist workers)."""
    return written_once(tmp_path_factory, "small", lambda out: write_fixtures(out, "small", seed=0))


ROOT = Path(__file__).parent.parent
SMALL_CUBE_64_SETS = ("execution.partition_mb=0.05", "output.chunks={y: 64, x: 64}")


@pytest.fixture(scope="session")
def casestudy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The casestudy preset (192 COGs of 10.98 km: the case study at 1/1000): the one `make fixtures` wrote
    under data_fixtures/, else written once per session (~40 s of CPU: ask for it only for real sizes)."""
    made = ROOT / "data_fixtures" / "casestudy"
    if len(list(made.glob("*/*.tif"))) >= 192:
        return made
    return written_once(tmp_path_factory, "casestudy", lambda out: write_fixtures(out, "casestudy", seed=0))


@pytest.fixture(scope="session")
def virtual_casestudy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The case study at full scale without the pixels: a 192,000-tile index of the casestudy layout and
    its config.yaml (``pipeline fixtures --index-only``; ``pipeline demo`` plans the same), written once."""
    from pipeline.tools.fixtures import write_virtual_index

    return written_once(tmp_path_factory, "casestudy-full", lambda out: write_virtual_index(out, "casestudy", 192_000))


@pytest.fixture
def small_config(tmp_path: Path, small_dir: Path) -> Any:
    """Factory: a validated config for the small fixture, with ``--set`` style overrides."""

    def make(*overrides: str, **sections: Any) -> Any:
        path = write_config(tmp_path, os.path.join(small_dir, "**", "*.tif"), **sections)
        return load_config(path, list(overrides))

    return make


@pytest.fixture(scope="session")
def small_cube_64(tmp_path_factory: pytest.TempPathFactory, small_dir: Path) -> Any:
    """Factory: the small fixture's cube at 64² chunks in partitions of 0.05 MB (``SMALL_CUBE_64_SETS``), in
    Zarr format 3 or 2, made once per session by an uninterrupted in-process run: the reference for runs
    killed, interrupted, resumed or written elsewhere (a cube depends on no worker count or scheduler)."""
    from pipeline.execute.runner import run

    def make(zarr_format: int = 3) -> Path:
        def write(folder: Path) -> None:
            folder.mkdir(parents=True)
            path = write_config(folder, str(small_dir / "**" / "*.tif"))
            sets = [*SMALL_CUBE_64_SETS, f"output.zarr_format={zarr_format}"]
            assert run(load_config(path, sets)).exit_code == 0

        return written_once(tmp_path_factory, f"small-cube-64-v{zarr_format}", write) / "out.zarr"

    return make


@pytest.fixture(scope="session")
def s3_server() -> Any:
    """moto's S3 server on 127.0.0.1 for the whole session, with test credentials in the environment
    (the pipeline and any Dask worker it starts resolve them from there, as from a user's AWS chain)."""
    from tests.s3server import TEST_CREDENTIALS, start_moto

    saved = {k: os.environ.get(k) for k in TEST_CREDENTIALS}
    os.environ.update(TEST_CREDENTIALS)
    try:
        with start_moto() as server:
            yield server
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def s3_bucket(s3_server: Any, request: pytest.FixtureRequest) -> str:
    """A fresh, empty bucket on the session's S3 server; its name."""
    import re
    import zlib

    # Parametrised tests share a long name's first 40 characters: a checksum of the whole keeps them apart.
    tag = f"{zlib.crc32(request.node.nodeid.encode()):08x}"
    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-") + f"-{tag}-{os.getpid() % 10000}"
    s3_server.client().create_bucket(Bucket=name)
    return name
