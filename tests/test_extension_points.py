"""The four places docs/architecture.md sends a newcomer ("Where to add..."), each a change to one package:
checked here on what the other packages read, so that a second list of names (in the config, the page, the
device model) fails a test instead of a newcomer's first change."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pipeline.config.model import Config
from pipeline.errors import ConfigError

PKG = Path(__file__).resolve().parent.parent / "pipeline"

ADDED = r"""
import dataclasses, json
from pipeline.execute import executors
from pipeline.resample import methods

# A method and an executor added to their tables, and nowhere else, before anything reads them.
median = methods.METHODS["median"]
methods.METHODS["quartile"] = dataclasses.replace(median, name="quartile", gdal_name="q1", cpu_mpx_s=4.5)
methods.NAMES = tuple(methods.METHODS)
executors.SCHEDULERS["serial"] = "each task in turn on this thread"
executors.NAMES = tuple(executors.SCHEDULERS)

from pipeline.config.model import Config
from pipeline.execute.device import CPU_MPX_S
from pipeline.planning.windows import KERNEL_PAD, OVERVIEW_METHODS
from pipeline.resample.kernels import KERNEL_METHODS
from pipeline.resample.parity import EXACT
from pipeline.resample.warp import GDAL_NAMES

cfg = Config(
    inputs={"stac": "/tmp/items.json"},
    output={"path": "/tmp/out.zarr"},
    resampling={"*": "quartile", "B02": "average"},
    execution={"scheduler": "serial", "gpu_profile": {"h2d_gb_s": 1, "d2h_gb_s": 1, "gpu_mpx_s": {"quartile": 9}}},
)
fields = Config.model_fields
print(json.dumps({
    "resampling": cfg.default_resampling,
    "resampling_described": "| quartile;" in fields["resampling"].description,
    "scheduler": cfg.execution.scheduler,
    "address": cfg.execution.address,
    "scheduler_described": "serial (each task in turn on this thread)"
    in type(cfg.execution).model_fields["scheduler"].description,
    "kernel_methods": "quartile" in KERNEL_METHODS,
    "pad": KERNEL_PAD.get("quartile"),
    "overviews": "quartile" in OVERVIEW_METHODS,
    "exact": "quartile" in EXACT,
    "gdal_name": GDAL_NAMES.get("quartile"),
    "cpu_mpx_s": CPU_MPX_S.get("quartile"),
}))
"""


@pytest.fixture(scope="module")
def added() -> dict[str, Any]:
    """What the other packages see of a method and an executor added to their tables alone (a fresh
    interpreter: the tables are read as the modules load)."""
    env = {**os.environ, "PYTHONPATH": str(PKG.parent)}
    out = subprocess.run([sys.executable, "-c", ADDED], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_a_method_in_resamples_table_is_taken_by_the_config_planning_and_the_device_model(
    added: dict[str, Any],
) -> None:
    """``resample/methods.py`` is the one list of methods: the config accepts and describes a new row, the
    planner pads it, the GPU check and the GDAL engine know it, the device model has its CPU rate."""
    assert added["resampling"] == "quartile" and added["resampling_described"]
    assert added["kernel_methods"] and added["pad"] == 2 and not added["overviews"] and added["exact"]
    assert added["gdal_name"] == "q1" and added["cpu_mpx_s"] == 4.5


def test_an_executor_in_executes_table_is_taken_by_the_config(added: dict[str, Any]) -> None:
    """``execute/executors.py`` is the one list of executors: the config accepts and describes a new name,
    and takes it for an executor, not a scheduler's address."""
    assert added["scheduler"] == "serial" and added["address"] is None and added["scheduler_described"]


def test_every_executor_named_has_its_executor() -> None:
    """Each name but ``auto`` (a rule) and ``local-cluster`` (Dask's) runs through
    :data:`pipeline.execute.schedulers.EXECUTORS`: a name without one would go to a Dask cluster."""
    from pipeline.execute.executors import NAMES
    from pipeline.execute.schedulers import EXECUTORS

    assert set(NAMES) == {"auto", "local-cluster", *EXECUTORS}
    with pytest.raises(ConfigError, match=r"auto \| threads \| processes \| local-cluster or an address"):
        Config(inputs={"stac": "/tmp/items.json"}, output={"path": "/tmp/o.zarr"}, execution={"scheduler": "thread"})


def _check_names() -> set[str]:
    """The names the checks give their entries (``entry("name", ...)`` in ``report/checks/``)."""
    names = set()
    for path in (PKG / "report" / "checks").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "entry" and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    names.add(first.value)
    return names


def test_the_page_the_text_and_the_comparison_name_no_check() -> None:
    """A diagnostic is added in ``report/checks/`` and ``report/diagnostics.py`` alone: the rest of the report
    (the page, the text, the comparison, the charts) shows whatever entries it is handed and names none."""
    names = _check_names()
    assert {"workers_used", "worker_memory", "nodata", "gpu_windows"} <= names  # the walk finds them
    for path in sorted((PKG / "report").glob("*.py")):
        if path.name == "diagnostics.py":
            continue
        spelt = {n.value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Constant)}
        assert spelt & names == set(), (path.name, spelt & names)


def test_the_config_leaves_a_stac_documents_form_to_the_inputs() -> None:
    """An input source read from ``inputs.stac`` (or ``inputs.paths``) is added in ``inputs/`` alone: the config
    takes any document name and leaves choosing its reader to :func:`pipeline.inputs.stac.load_asset_rows`."""
    for name in ("items.ndjson", "items.geojson", "catalog.json", "items.parquet"):
        cfg = Config(inputs={"stac": f"/tmp/{name}"}, output={"path": "/tmp/o.zarr"})
        assert cfg.inputs.stac == f"/tmp/{name}"


def _config_keys() -> set[str]:
    """``section.key`` of every section's keys (``grid.crs``...), which the doc names beside modules."""
    from pydantic import BaseModel

    keys = set()
    for section, field in Config.model_fields.items():
        for kind in (field.annotation, *getattr(field.annotation, "__args__", ())):
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                keys |= {f"{section}.{k}" for k in kind.model_fields}
    return keys


def test_the_architecture_names_what_exists() -> None:
    """Every module and ``module.name`` docs/architecture.md names (``inputs/read.read_window``,
    ``kernels.RESAMPLERS``, ``resample.reduce.peak_bytes``...) exists, in the picture and the text alike."""
    import importlib

    text = (PKG.parent / "docs" / "architecture.md").read_text()
    modules: dict[str, list[Path]] = {}
    for p in sorted(PKG.rglob("*.py")):
        modules.setdefault(p.stem, []).append(p)
    files = {
        p.name for d in ("pipeline", "tests", "bench") for p in (PKG.parent / d).rglob("*") if p.suffix in (".py", ".c")
    }
    for name in set(re.findall(r"\b([a-z_0-9]+\.(?:py|c))\b", text)):
        assert name in files or (PKG.parent / name).exists(), name
    keys = _config_keys()
    missing = []
    for path, attr in set(re.findall(r"\b((?:[a-z_]+[/.])*[a-z_0-9]+)\.([A-Za-z_][A-Za-z_0-9]*)\b", text)):
        if attr in ("py", "c", "md", "yaml", "json") or f"{path}.{attr}" in keys:
            continue
        parts = path.replace("/", ".").split(".")
        found = [p for p in modules.get(parts[-1], []) if p.with_suffix("").parts[-len(parts) :] == tuple(parts)]
        if not found:
            continue  # not a module of ours (``pipeline.Config``, ``config.yaml``)
        names = [".".join(p.relative_to(PKG.parent).with_suffix("").parts) for p in found]
        if not any(hasattr(importlib.import_module(n), attr) for n in names):
            missing.append(f"{path}.{attr}")
    assert missing == []
