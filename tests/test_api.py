"""The Python API as a notebook user drives it: import, Config, plan, run on their own Dask client, open."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import pipeline
from pipeline.errors import ConfigError, PipelineError
from tests.helpers import PATTERN

ROOT = Path(__file__).parent.parent


def _mapping(small_dir: Path, out: Path) -> dict:
    return {
        "inputs": {"paths": [str(small_dir / "**" / "*.tif")], "pattern": PATTERN},
        "grid": {"crs": "EPSG:32632", "resolution": 20},
        "output": {"path": str(out), "chunks": {"y": 128, "x": 128}},
        "execution": {"workers": 1, "partition_mb": 1},
    }


def test_importing_pipeline_changes_no_global_state() -> None:
    script = (
        "import json, logging, os, sys, warnings\n"
        "env = dict(os.environ); handlers = list(logging.root.handlers); filters = list(warnings.filters)\n"
        "loggers = set(logging.root.manager.loggerDict)\n"
        "import pipeline\n"
        "after_import = sorted(m for m in ('matplotlib', 'distributed', 'dask', 'rasterio', 'numpy', 'pydantic',\n"
        "                                  'xarray', 'zarr', 'osgeo', 'pyproj') if m in sys.modules)\n"
        "pipeline.Config, pipeline.plan, pipeline.run, pipeline.ConfigError, pipeline.InputError\n"
        "after_names = sorted(m for m in ('matplotlib', 'distributed', 'dask', 'rasterio') if m in sys.modules)\n"
        "print(json.dumps({'env': dict(os.environ) == env, 'handlers': logging.root.handlers == handlers,\n"
        "                  'level': logging.root.level, 'filters': warnings.filters == filters,\n"
        "                  'new_loggers': sorted(set(logging.root.manager.loggerDict) - loggers),\n"
        "                  'after_import': after_import, 'after_names': after_names}))\n"
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    got = json.loads(r.stdout)
    assert got == {
        "env": True,
        "handlers": True,
        "level": 30,  # WARNING: untouched
        "filters": True,
        "new_loggers": [],
        "after_import": [],  # `import pipeline` imports nothing heavy
        "after_names": [],  # nor do the names it exposes, until they are called
    }


def test_submodules_leave_the_api_names() -> None:
    """Importing every submodule leaves ``pipeline.plan``, ``pipeline.run``... the API's own objects: a
    submodule named like one of them would replace it on the package."""
    import importlib
    import pkgutil

    for info in pkgutil.walk_packages(pipeline.__path__, "pipeline."):
        if info.name != "pipeline.__main__":
            importlib.import_module(info.name)
    from pipeline.planning.plan import Plan

    assert callable(pipeline.plan) and pipeline.plan.__module__ == "pipeline.api"
    assert callable(pipeline.run) and pipeline.run.__module__ == "pipeline.api"
    assert isinstance(pipeline.Config, type) and Plan.__module__ == "pipeline.planning.plan"


def test_config_from_yaml_mapping_and_errors(tmp_path: Path, small_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = pipeline.Config.from_yaml(ROOT / "configs" / "small.yaml", overrides=["execution.workers=2"])
    assert c.source == str(ROOT / "configs" / "small.yaml")
    assert c.output.path == str(ROOT / "out" / "small.zarr") and c.execution.workers == 2
    monkeypatch.chdir(tmp_path)
    m = _mapping(small_dir, Path("rel.zarr"))
    assert pipeline.Config(**m).output.path == str(tmp_path / "rel.zarr")
    assert pipeline.Config.model_validate(m).output_hash() == pipeline.Config(**m).output_hash()
    with pytest.raises(pipeline.ConfigError) as info:
        pipeline.Config(**m | {"fuse": "median"})
    assert info.value.key == "fuse" and "first | last | min | max | mean" in info.value.problem
    assert isinstance(info.value, PipelineError) and isinstance(info.value, ValueError)
    assert issubclass(pipeline.InputError, PipelineError) and issubclass(pipeline.InputError, ValueError)


def test_plan_reads_no_pixels_and_says_grid_chunks_tasks_bytes(tmp_path: Path, small_dir: Path) -> None:
    from pipeline.execute.runner import plan_run

    cfg = pipeline.Config(**_mapping(small_dir, tmp_path / "c.zarr"))
    p = pipeline.plan(cfg)
    _, ref = plan_run(cfg)
    assert p.grid == ref.grid and p.tasks == len(ref.partitions) > 1 and p.chunks == ref.n_chunks
    assert p.bytes == {"read": ref.bytes_read, "write": ref.bytes_out} and p.bytes["read"] > 0
    assert p.bands == ("B01", "B02", "B04", "B11") and len(p.times) == 2
    assert p.summary.tasks == p.tasks and p.summary.grid.shape_yx == list(p.grid.shape_yx)
    assert not (tmp_path / "c.zarr").exists()  # a plan writes nothing


def test_run_on_the_callers_client_leaves_it_open_and_gives_the_same_cube(tmp_path: Path, small_dir: Path) -> None:
    from distributed import Client, LocalCluster

    own = pipeline.run(pipeline.Config(**_mapping(small_dir, tmp_path / "own.zarr")))
    cfg = pipeline.Config(**_mapping(small_dir, tmp_path / "given.zarr"))
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None)
    with cluster, Client(cluster) as client:
        result = pipeline.run(cfg, client=client)
        # the caller's client and cluster are still theirs, open and working
        assert client.status == "running" and cluster.status.name == "running"
        assert client.submit(sum, [1, 2]).result() == 3
        assert len(client.scheduler_info()["workers"]) == 2
    assert result.exit_code == 0 and result.skipped == []
    assert result.report.execution.scheduler == cluster.scheduler_address
    assert result.report.execution.workers == 2
    assert set(result.report.stages) >= {"read", "resample", "write"} and result.report.wall_s > 0
    assert isinstance(result.report, dict) and json.loads(json.dumps(result.report))["wall_s"] == result.report.wall_s
    with pytest.raises(AttributeError, match="no key 'nope'"):
        _ = result.report.nope
    ds, ref = result.open(), own.open()
    assert isinstance(ds, xr.Dataset) and sorted(ds.data_vars) == ["B01", "B02", "B04", "B11"]
    assert ds["B04"].dims == ("time", "y", "x") and ds.sizes["time"] == 2
    for band in ds.data_vars:  # same tiles, same bits, whoever's workers ran it
        np.testing.assert_array_equal(ds[band].values, ref[band].values)


def test_run_refuses_resume_with_overwrite(tmp_path: Path, small_dir: Path) -> None:
    cfg = pipeline.Config(**_mapping(small_dir, tmp_path / "x.zarr"))
    with pytest.raises(ConfigError, match="resume=True/overwrite=True"):
        pipeline.run(cfg, overwrite=True, resume=True)
    assert not (tmp_path / "x.zarr").exists()
    with pytest.raises(TypeError, match=r"takes a pipeline.Config \(pipeline.Config.from_yaml"):
        pipeline.run(str(ROOT / "configs" / "small.yaml"))  # type: ignore[arg-type]


def test_the_quicklook_example_runs(tmp_path: Path) -> None:
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quicklook.py"), str(tmp_path / "work")],
        capture_output=True,
        text=True,
        timeout=280,
        cwd=tmp_path,
        env=env,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    png = tmp_path / "work" / "quicklook.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    ds = xr.open_zarr(tmp_path / "work" / "cube.zarr")
    assert sorted(ds.data_vars) == ["B01", "B02", "B04", "B11"] and ds.sizes["time"] == 2
    assert np.isfinite(ds["B04"].isel(time=0).values).any()
    report = json.loads((tmp_path / "work" / "cube.report.json").read_text())
    # planned from the items, with one header per band (its shape group) read for the overviews
    assert report["inputs"]["files"] == 32 and report["inputs"]["headers_read"] == 4


def test_api_errors_name_the_api_arguments_not_the_cli_flags(tmp_path: Path, small_dir: Path) -> None:
    cfg = pipeline.Config(**_mapping(small_dir, tmp_path / "x.zarr"))
    assert pipeline.run(cfg).exit_code == 0
    with pytest.raises(ConfigError) as info:
        pipeline.run(cfg)
    assert "pass overwrite=True to replace it (or resume=True to finish it)" in str(info.value)
    assert "--" not in str(info.value)
    other = pipeline.Config(**_mapping(small_dir, tmp_path / "x.zarr") | {"fuse": "last"})
    with pytest.raises(ConfigError) as info:
        pipeline.run(other, resume=True)
    assert info.value.key == "fuse" and "the store has 'first', the config has 'last'" in info.value.problem
    assert "overwrite=True" in info.value.problem and "--" not in str(info.value)
