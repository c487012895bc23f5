"""The executors by the name ``execution.scheduler`` gives them: the one list of names, read by the
config to validate and describe the key (:mod:`pipeline.config` imports this module, and only this one of
``execute/``: it imports nothing), and run by :mod:`pipeline.execute.schedulers`. A new executor is
named here and registered there, in ``execute/`` alone."""

from __future__ import annotations

SCHEDULERS: dict[str, str] = {
    "auto": "",
    "threads": "",
    "processes": "a pool of worker processes on this machine, no Dask cluster",
    "local-cluster": "",
}
"""``execution.scheduler``'s modes, each with what the config's description says of it (nothing: its name
says it); any other value is the address of an existing Dask scheduler. ``auto`` picks one
(:func:`pipeline.execute.schedulers.choose_scheduler`)."""

NAMES: tuple[str, ...] = tuple(SCHEDULERS)
