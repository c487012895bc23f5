"""A run's fixed costs: what it imports, and how ``--overwrite`` removes the store it replaces."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pipeline.errors import ConfigError
from pipeline.execute.runner import run


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
from pipeline.execute.workers import import_rasterio
import_rasterio()
import pipeline
from pipeline.config import load_config
result = pipeline.run(load_config(sys.argv[1]), overwrite=True)
loaded = "boto3" in sys.modules
import rasterio.session
session = rasterio.session.AWSSession(aws_access_key_id="testing", aws_secret_access_key="testing")
print(result.exit_code, loaded, type(session._session).__module__)
"""


def _without_aws_keys() -> dict[str, str]:
    """The environment less AWS keys: with them rasterio starts an AWS session (boto3) for every
    dataset, local or not."""
    return {k: v for k, v in os.environ.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}


def test_after_import_rasterio_a_local_run_does_not_import_boto3_and_rasterio_still_gets_it(
    tmp_path: Path, small_dir: Path
) -> None:
    from tests.helpers import write_config

    cfg = write_config(tmp_path, str(small_dir / "**" / "*.tif"), execution={"scheduler": "threads"})
    env = _without_aws_keys()
    r = subprocess.run([sys.executable, "-c", CHILD, str(cfg)], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "False", "boto3.session"]


def test_the_command_imports_no_boto3_for_a_local_run_and_the_api_leaves_modules_alone(
    tmp_path: Path, small_dir: Path
) -> None:
    """``pipeline run`` (its own process) imports rasterio without boto3; ``pipeline.run`` from Python
    does not touch the caller's modules, so there rasterio brings boto3 in as it always does."""
    from tests.helpers import write_config

    cfg = write_config(tmp_path, str(small_dir / "**" / "*.tif"), execution={"scheduler": "threads"})
    env = _without_aws_keys()
    cmd = [sys.executable, "-X", "importtime", "-m", "pipeline", "run", str(cfg), "-q", "--overwrite"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")]
    assert "rasterio" in imported and "boto3" not in imported
    api = "import sys, pipeline; from pipeline.config import load_config; "
    api += "pipeline.run(load_config(sys.argv[1]), overwrite=True); print('boto3' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", api, str(cfg)], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0 and r.stdout.split() == ["True"], r.stderr[-2000:]


LAZY = """
import sys
from pipeline.execute.workers import import_rasterio
import_rasterio(lazily=True)
before = "rasterio" in sys.modules
import rasterio.session
session = rasterio.session.AWSSession(aws_access_key_id="testing", aws_secret_access_key="testing")
print(before, "boto3.session" in sys.modules and "botocore" in sys.modules, type(rasterio.__loader__).__name__,
      type(rasterio.__spec__.loader).__name__, type(session._session).__module__, len(rasterio.__path__))
"""


def test_a_lazy_import_rasterio_imports_it_without_boto3_when_first_asked_and_leaves_no_trace() -> None:
    r = subprocess.run(
        [sys.executable, "-c", LAZY], capture_output=True, text=True, timeout=120, env=_without_aws_keys()
    )
    assert r.returncode == 0, r.stderr
    # not at the call; boto3 only once the session needs it; the package keeps its own loader
    assert r.stdout.split() == ["False", "True", "SourceFileLoader", "SourceFileLoader", "boto3.session", "1"]


DRIVER = """
import os, sys
leave = os._exit
def report_and_leave(code):  # the command leaves through os._exit
    print("rasterio" in sys.modules, "boto3" in sys.modules, flush=True)
    leave(code)
os._exit = report_and_leave
from pipeline.cli import main
main(sys.argv[1:])
"""


def test_the_command_running_tasks_on_worker_processes_loads_no_gdal_itself(tmp_path: Path, small_dir: Path) -> None:
    """The driver of a run on worker processes plans with pyproj and never needs GDAL: rasterio, imported
    lazily by the command, stays out of its process (the fork server and the workers import it). Run in a
    child whose streams are its own, so the command sets its process up as `pipeline run` does."""
    from tests.helpers import write_config

    index = str(tmp_path / "tiles.parquet")
    cfg = write_config(
        tmp_path,
        str(small_dir / "**" / "*.tif"),
        inputs={"index": index},
        execution={"scheduler": "processes", "workers": 2},
    )
    subprocess.run([sys.executable, "-m", "pipeline", "index", str(cfg), "-q"], check=True, timeout=300)
    r = subprocess.run(
        [sys.executable, "-c", DRIVER, "run", str(cfg), "-q"], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["False", "False"]  # neither rasterio nor boto3
    assert (tmp_path / "out.zarr" / "zarr.json").exists()
    # the same command on threads runs its tasks here: rasterio comes in, boto3 does not
    r = subprocess.run(
        [sys.executable, "-c", DRIVER, "run", str(cfg), "-q", "--overwrite", "--set", "execution.scheduler=threads"],
        capture_output=True,
        text=True,
        timeout=300,
        env=_without_aws_keys(),
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["True", "False"]


HEADERS = """
import sys, threading
from pipeline.execute import workers
run_module = workers._LoaderWithoutBoto3.exec_module
def watched(self, module):
    print("main thread" if threading.current_thread() is threading.main_thread() else "other thread", flush=True)
    return run_module(self, module)
workers._LoaderWithoutBoto3.exec_module = watched
from pipeline.cli import main
main(sys.argv[1:])
"""


def test_the_command_reading_headers_on_threads_imports_rasterio_first_on_its_own_thread(
    tmp_path: Path, small_dir: Path
) -> None:
    """Without an index the command reads the files' headers on a thread pool; rasterio, imported lazily with
    boto3's stand-in held, comes in on the command's own thread before the pool starts, so that no other
    thread can meet the stand-in."""
    from tests.helpers import write_config

    cfg = write_config(tmp_path, str(small_dir / "**" / "*.tif"), execution={"scheduler": "processes", "workers": 2})
    r = subprocess.run(
        [sys.executable, "-c", HEADERS, "run", str(cfg), "-q"], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split("\n")[0] == "main thread"


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
