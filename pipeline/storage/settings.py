"""The storage settings reads and writes use: the :class:`Storage` protocol the config's
:class:`~pipeline.config.StorageConfig` fills, and the plain :class:`StorageSettings` tasks carry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class Storage(Protocol):
    """The storage settings reads and writes use: the config's :class:`~pipeline.config.StorageConfig`, or
    the :class:`StorageSettings` a task carries."""

    @property
    def endpoint_url(self) -> str | None: ...
    @property
    def region(self) -> str | None: ...
    @property
    def anonymous(self) -> bool: ...
    @property
    def profile(self) -> str | None: ...


@dataclass(frozen=True)
class StorageSettings:
    """The storage section's settings as tasks carry them (:func:`task_storage`): plain values, so a
    worker unpickles them without pydantic, whose import costs ~70 ms of the fork server's start that a
    short run waits for."""

    endpoint_url: str | None = None
    region: str | None = None
    anonymous: bool = False
    profile: str | None = None


def task_storage(storage: Storage) -> StorageSettings:
    """``storage``'s settings as a :class:`StorageSettings`."""
    return StorageSettings(storage.endpoint_url, storage.region, bool(storage.anonymous), storage.profile)


def default_storage() -> StorageSettings:
    """The storage section's defaults (AWS, signed requests), where none is given."""
    return StorageSettings()
