"""Packing chunk jobs into partitions (tasks): even shares of the total cost, cut at the start of a band and
date where one is near, whole shards kept together, and no partition far costlier than the median.
"""

from __future__ import annotations

import math

import numpy as np

SNAP_TO_GROUP = 1.0
"""A partition cut moves to the start of a band and date when that is within this many partitions' shares
of the total (see :func:`pack_partitions`)."""


def pack_partitions(
    job_cost: np.ndarray,
    target_bytes: float,
    split_factor: float = 3.0,
    group_start: np.ndarray | None = None,
    snap: float = SNAP_TO_GROUP,
    unit_start: np.ndarray | None = None,
) -> np.ndarray:
    """Offsets of partitions over the jobs, in job order.

    ``unit_start``: the first job of each run of jobs that must stay in one partition (one shard's
    chunks); partitions are then packed over these units, cut only at their starts. Every group start
    must be a unit start.

    K = ceil(total / target) partitions cut where the cumulative cost crosses each k/K of the total,
    so tiny jobs are batched and partitions are even (within one job). ``group_start``: the first job
    of each run of jobs that read the same files (one band and date); a cut within ``snap`` of a
    partition's share of a group's start moves there, so that the group's files are opened and
    their blocks decoded by one task rather than two. Then, until none is left, any partition of
    several jobs costing over ``split_factor`` x the median is halved by cost. A single job is never
    split: a chunk is the unit of writing.
    """
    n = len(job_cost)
    if n == 0:
        return np.zeros(1, dtype=np.int64)
    if unit_start is not None:
        units = np.asarray(unit_start, dtype=np.int64)
        unit_cost = np.add.reduceat(np.asarray(job_cost), units)
        groups = None if group_start is None else np.searchsorted(units, group_start)
        bounds = pack_partitions(unit_cost, target_bytes, split_factor, groups, snap)
        return np.append(units, n)[bounds]
    csum = np.concatenate([[0.0], np.cumsum(job_cost, dtype="f8")])
    k = max(1, math.ceil(csum[-1] / target_bytes))
    ideal = csum[-1] * np.arange(1, k) / k
    cuts = np.searchsorted(csum, ideal, side="left")
    if group_start is not None and len(group_start) > 1 and k > 1:
        starts = np.asarray(group_start, dtype=np.int64)[1:]  # the first group starts at 0: no cut there
        at = csum[starts]
        right = np.clip(np.searchsorted(at, ideal), 0, len(starts) - 1)
        left = np.clip(right - 1, 0, len(starts) - 1)
        nearest = np.where(np.abs(at[left] - ideal) <= np.abs(at[right] - ideal), left, right)
        close = np.abs(at[nearest] - ideal) <= snap * csum[-1] / k
        cuts = np.where(close, starts[nearest], cuts)
    bounds = np.unique(np.concatenate([[0], np.clip(cuts, 1, n - 1) if n > 1 else [], [n]]).astype(np.int64))
    while len(bounds) > 2:
        costs = csum[bounds[1:]] - csum[bounds[:-1]]
        too_big = (costs > split_factor * np.median(costs)) & (np.diff(bounds) > 1)
        if not too_big.any():
            break
        lo, hi = bounds[:-1][too_big], bounds[1:][too_big]
        mid = np.searchsorted(csum, (csum[lo] + csum[hi]) / 2, side="left")
        bounds = np.unique(np.concatenate([bounds, np.clip(mid, lo + 1, hi - 1)]))
    return bounds
