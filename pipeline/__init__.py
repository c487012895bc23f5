"""pipeline: many satellite tiles in, one analysis-ready Zarr datacube out.

Data flow, one package per stage::

    config -> inputs (catalog, stac) -> planning (grid, plan) -> per task: inputs.read -> resample -> store
           -> report;  execute wires the tasks onto Dask (threads or a cluster), api and cli call execute

From Python::

    import pipeline
    cfg = pipeline.Config.from_yaml("configs/small.yaml")   # or pipeline.Config(**mapping)
    plan = pipeline.plan(cfg)                                 # reads no pixels
    result = pipeline.run(cfg, client=None)                   # or an existing distributed.Client
    ds = result.open()

Importing this package changes no global state and imports nothing heavy: the names below load
on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "Config": "pipeline.config.model",
    "plan": "pipeline.api",
    "run": "pipeline.api",
    "update": "pipeline.api",
    "open": "pipeline.api",
    "PlanSummary": "pipeline.api",
    "Report": "pipeline.api",
    "RunResult": "pipeline.execute.runner",
    "PipelineError": "pipeline.errors",
    "ConfigError": "pipeline.errors",
    "InputError": "pipeline.errors",
    "TileReadError": "pipeline.errors",
    "StoreError": "pipeline.errors",
    "DeviceError": "pipeline.errors",
}
_SUBMODULES = (
    "api",
    "cli",
    "config",
    "errors",
    "execute",
    "inputs",
    "planning",
    "report",
    "resample",
    "storage",
    "store",
    "tools",
)
"""Subpackages and modules reachable as attributes (``pipeline.storage.zarr_store``), imported on first use."""
__all__ = ["__version__", *_LAZY]

if TYPE_CHECKING:  # the names for type checkers; at run time __getattr__ imports them
    from pipeline.api import PlanSummary, Report, plan, run, update  # noqa: F401
    from pipeline.config.model import Config  # noqa: F401
    from pipeline.errors import (  # noqa: F401
        ConfigError,
        DeviceError,
        InputError,
        PipelineError,
        StoreError,
        TileReadError,
    )
    from pipeline.execute.runner import RunResult  # noqa: F401


def __getattr__(name: str) -> Any:
    """The public names, imported on first use (PEP 562)."""
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"pipeline.{name}")  # the import system binds it here too
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | set(_SUBMODULES))
