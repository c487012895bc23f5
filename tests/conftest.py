from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import load_config
from pipeline.tools.fixtures import write_fixtures
from tests.helpers import write_config


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
    """The small preset, written once per session."""
    out = tmp_path_factory.mktemp("fixtures") / "small"
    write_fixtures(out, "small", seed=0)
    return out


@pytest.fixture
def small_config(tmp_path: Path, small_dir: Path) -> Any:
    """Factory: a validated config for the small fixture, with ``--set`` style overrides."""

    def make(*overrides: str, **sections: Any) -> Any:
        path = write_config(tmp_path, os.path.join(small_dir, "**", "*.tif"), **sections)
        return load_config(path, list(overrides))

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
