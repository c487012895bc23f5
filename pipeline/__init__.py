"""pipeline: many satellite tiles in, one analysis-ready Zarr datacube out.

Data flow, one module per stage::

    config -> catalog -> grid -> plan -> (read -> resample -> write) per task -> report
                                         \\_ execute wires the tasks onto Dask _/

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

import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "Config": "pipeline.config_model",
    "plan": "pipeline.api",
    "run": "pipeline.api",
    "PlanSummary": "pipeline.api",
    "Report": "pipeline.api",
    "RunResult": "pipeline.execute",
    "PipelineError": "pipeline.errors",
    "ConfigError": "pipeline.errors",
    "InputError": "pipeline.errors",
    "TileReadError": "pipeline.errors",
    "StoreError": "pipeline.errors",
    "DeviceError": "pipeline.errors",
}
__all__ = ["__version__", *_LAZY]

if TYPE_CHECKING:  # the names for type checkers; at run time __getattr__ imports them
    from pipeline.api import PlanSummary, Report, plan, run  # noqa: F401
    from pipeline.config_model import Config  # noqa: F401
    from pipeline.errors import (  # noqa: F401
        ConfigError,
        DeviceError,
        InputError,
        PipelineError,
        StoreError,
        TileReadError,
    )
    from pipeline.execute import RunResult  # noqa: F401


class _Package(types.ModuleType):
    """``pipeline.plan`` is the API function, though ``pipeline/plan.py`` is also a module: importing a
    submodule sets it as an attribute of its package, and this package keeps its function instead
    (the module stays importable: ``from pipeline.plan import Plan``)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    """The public names, imported on first use (PEP 562)."""
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
