"""A run's fixed costs: what it imports, and how ``--overwrite`` removes the store it replaces."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pipeline.errors import ConfigError
from pipeline.execute import run


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_overwrite_replaces_the_store_and_leaves_nothing_beside_it(tmp_path: Path, small_config: Any) -> None:
    out = tmp_path / "cube" / "out.zarr"
    cfg = small_config(f"output.path={out}", "report.path=" + str(tmp_path / "report.json"))
    run(cfg)
    first = _files(out)
    stale = next(p for p in out.iterdir() if p.is_dir() and (p / "c").is_dir()) / "c" / "99" / "99"
    stale.mkdir(parents=True)
    (stale / "99").write_bytes(b"a chunk no plan of this grid writes")
    result = run(cfg, overwrite=True)
    assert result.exit_code == 0
    assert not stale.exists()
    assert os.listdir(out.parent) == ["out.zarr"]  # the hidden folder it was moved into is gone too
    again = _files(out)
    assert again.keys() == first.keys()
    chunks = [k for k in first if "/c/" in k]
    assert chunks and all(again[k] == first[k] for k in chunks)


def test_overwrite_leaves_what_the_pipeline_did_not_write(tmp_path: Path, small_config: Any) -> None:
    out = tmp_path / "cube" / "out.zarr"
    out.mkdir(parents=True)
    (out / "thesis.tex").write_text("years of work")
    cfg = small_config(f"output.path={out}", "report.path=" + str(tmp_path / "report.json"))
    with pytest.raises(ConfigError) as err:
        run(cfg, overwrite=True)
    assert err.value.key == "output.path"
    assert os.listdir(out.parent) == ["out.zarr"] and _files(out) == {"thesis.tex": b"years of work"}


CHILD = """
import sys
import pipeline
from pipeline.config import load_config
result = pipeline.run(load_config(sys.argv[1]), overwrite=True)
loaded = "boto3" in sys.modules
import rasterio.session
session = rasterio.session.AWSSession(aws_access_key_id="testing", aws_secret_access_key="testing")
print(result.exit_code, loaded, type(session._session).__module__)
"""


def test_a_local_run_does_not_import_boto3_and_rasterio_still_gets_it(tmp_path: Path, small_dir: Path) -> None:
    from tests.helpers import write_config

    cfg = write_config(tmp_path, str(small_dir / "**" / "*.tif"), execution={"scheduler": "threads"})
    # AWS keys in the environment make rasterio start an AWS session (boto3) for every dataset, local or not
    env = {k: v for k, v in os.environ.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    r = subprocess.run([sys.executable, "-c", CHILD, str(cfg)], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "False", "boto3.session"]


def test_the_command_inside_another_program_leaves_its_collector_alone(tmp_path: Path, small_dir: Path) -> None:
    import gc

    from click.testing import CliRunner

    from pipeline.cli import main
    from tests.helpers import write_config

    cfg = write_config(tmp_path, str(small_dir / "**" / "*.tif"), execution={"scheduler": "threads"})
    frozen = gc.get_freeze_count()
    result = CliRunner().invoke(main, ["run", str(cfg), "-q"])
    assert result.exit_code == 0, result.output
    assert gc.isenabled() and gc.get_freeze_count() == frozen
