"""Whether a run's tasks use the compiled kernels (:mod:`pipeline.resample.compiled`), and why: by its
reprojected windows per worker process, past :data:`MIN_MB_PER_WORKER_MASKED` where sources are masked
(the NumPy kernels then gather each tap's validity as well as its value, and the compiled ones test it in
the same pass: the cloudy preset's resampling took 0.51x the task-seconds, the run 0.94x the wall, load
included), past :data:`MIN_MB_PER_WORKER` without a mask. Below those, importing numba and loading the
compiled code (~0.4 s of LLVM's and numba's set-up before the first task; the fork server pays it where
it preloads them, :mod:`pipeline.execute.server_compiled`) costs more than they save (the case study
1.21x the wall, 4x its dates 1.03x). ``PIPELINE_COMPILED=1`` or ``0`` decides instead.

Imports neither NumPy nor numba: the command asks before it starts the fork server.
"""

from __future__ import annotations

import os

ENV = "PIPELINE_COMPILED"
"""``1``: every run uses the compiled kernels; ``0``: none does; unset (or ``auto``): each run chooses."""


def asked() -> bool | None:
    """What :data:`ENV` says: True (``1``), False (``0``), None (unset or ``auto``: the run chooses)."""
    return {"1": True, "0": False}.get(os.environ.get(ENV, "auto"))


def installed() -> bool:
    """Whether numba can be imported here (without importing it)."""
    import importlib.util

    return importlib.util.find_spec("numba") is not None


MIN_MB_PER_WORKER = 1000.0
"""Reprojected windows (MB decoded) per worker process past which a run without a mask uses the compiled
kernels: their ~0.4 s load is then a small part of what they save (~0.2 of the NumPy kernels' resampling
on windows without nodata). casestudy-x4 on one worker, 496 MB, ran in 1.006x the wall with them (the
break-even); the case study's full scale reads gigabytes per worker."""
MIN_MB_PER_WORKER_MASKED = 150.0
"""The same for a masked run, where they save ~half the resampling: the cloudy preset on 2 workers, 188 MB
a process, ran in 0.94x the wall with them; its June alone, 94 MB a process, in 1.047x."""


def choose(masked: bool, reprojected_mb_per_worker: float | None = None) -> tuple[bool, str]:
    """Whether a run's tasks use the compiled kernels, and why. ``masked``: the run drops pixels by a
    ``mask`` rule, so that its reprojected windows have nodata within. ``reprojected_mb_per_worker``: the
    plan's windows in another CRS than the grid's (``Plan.bytes_reprojected``) over the worker processes;
    None before the plan (what the fork server preloads): masked runs then."""
    said = asked()
    if said is False:
        return False, f"{ENV}=0"
    if not installed():
        return False, "numba is not installed (pip install 'pipeline[compiled]')"
    if said:
        return True, f"{ENV}=1"
    mb = reprojected_mb_per_worker
    if mb is None:
        return masked, "masked sources" if masked else "no mask"
    least = MIN_MB_PER_WORKER_MASKED if masked else MIN_MB_PER_WORKER
    saving = (
        "masked sources, whose nodata the compiled kernels test in the same pass as each value (0.51x the "
        "NumPy kernels' resampling task-seconds on the cloudy preset)"
        if masked
        else "no mask (on windows without nodata they save ~0.2 of the NumPy kernels' resampling)"
    )
    if mb >= least:
        return True, (
            f"{saving}; {mb:,.0f} MB of reprojected windows per worker process, past {least:,.0f} MB, where "
            "they save more than their ~0.4 s load"
        )
    return False, (
        f"{saving}; {mb:,.0f} MB of reprojected windows per worker process, below {least:,.0f} MB, where "
        "loading numba (~0.4 s before the first task) costs more than they save; PIPELINE_COMPILED=1 turns "
        "them on"
    )
