"""The config: one pydantic model holds every key (:mod:`~pipeline.config.model`, its sections in
:mod:`~pipeline.config.sections`, their field types and validators in :mod:`~pipeline.config.fields`),
and :mod:`~pipeline.config.load` reads it from YAML with ``--set`` overrides.

Owns: config keys, their defaults, rules, documentation and errors (:class:`~pipeline.errors.ConfigError`
names the dotted key). Imports only :mod:`pipeline.errors` and the tables of names it validates against,
which their packages own and which import nothing: :mod:`pipeline.resample.methods` (``resampling``) and
:mod:`pipeline.execute.executors` (``execution.scheduler``); every stage may import it.
Importing this package imports no pydantic: the model classes load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipeline.config.load import (
    SCHEDULERS,
    apply_override,
    is_url,
    load_config,
    read_config,
    uses_scheduler,
    validate,
    validate_crs,
)

if TYPE_CHECKING:
    from pipeline.config.model import Config, ExecutionConfig, GridConfig, InputsConfig, OutputConfig, StorageConfig

_MODEL_NAMES = {"Config", "StorageConfig", "InputsConfig", "GridConfig", "OutputConfig", "ExecutionConfig"}
__all__ = [
    "SCHEDULERS",
    "apply_override",
    "is_url",
    "load_config",
    "read_config",
    "uses_scheduler",
    "validate",
    "validate_crs",
    "Config",
    "ExecutionConfig",
    "GridConfig",
    "InputsConfig",
    "OutputConfig",
    "StorageConfig",
]


def __getattr__(name: str) -> Any:
    """The model classes (:mod:`pipeline.config.model`), imported on first use: they import pydantic."""
    if name in _MODEL_NAMES:
        from pipeline.config import model

        return getattr(model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
