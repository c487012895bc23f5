"""The headers a STAC run reads: every asset the metadata cannot plan, and one sample per group of
assets that share (collection, band, shape, pixel size), whose overviews, blocks and file nodata the
group takes; a failed sample gives way to the group's next asset (see :mod:`pipeline.inputs.stac`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.config import is_url
from pipeline.errors import TileReadError
from pipeline.inputs.headers import read_header
from pipeline.inputs.read import input_errors
from pipeline.inputs.tiles import factorize
from pipeline.report.progress import NoProgress

if TYPE_CHECKING:
    from pipeline.config import StorageConfig

logger = logging.getLogger("pipeline.inputs.stac")
"""Named as before these steps left :mod:`pipeline.inputs.stac`: the run's log lines read as they did."""


SAMPLE_TRIES = 3
"""Headers tried per group of assets planned from metadata before its assets go without overviews."""


def _read_headers(
    hrefs: list[str], storage: StorageConfig, gdal_env: Mapping[str, str], max_threads: int, progress: NoProgress
) -> list[tuple[dict[str, Any] | None, str | None]]:
    def one(href: str) -> tuple[dict[str, Any] | None, str | None]:
        try:
            return read_header(href, storage, gdal_env), None
        except TileReadError as e:
            return None, e.problem
        except input_errors() as e:  # a bad input; any other exception is a bug and fails the run
            return None, f"{type(e).__name__}: {e}"

    if not hrefs:
        return []
    if any(is_url(h) for h in hrefs):
        from pipeline.inputs.read import cloud_env

        cloud_env(storage)  # the AWS session and GDAL's network counters: once, before the threads
    import rasterio  # noqa: F401 - on this thread, before the pool's (`pipeline run` imports it lazily, without boto3)

    progress.phase("headers", len(hrefs), "headers read")
    out = []
    with ThreadPoolExecutor(min(max_threads, len(hrefs))) as pool:
        for result in pool.map(one, hrefs):
            out.append(result)
            progress.add()
    return out


def _group_samples(rows: dict[str, np.ndarray], planned: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Assets planned from metadata, grouped by (collection, band, shape, pixel size): each group's first
    asset in table order (its sample, whose header gives the group's overviews, blocks, dtype where the
    item gives none, and file nodata), and each planned asset's group. Vectorised: a 192,000-item
    catalogue has ~2.5 million assets."""
    idx = np.flatnonzero(planned)
    codes = [factorize(rows[col][idx])[1] for col in ("collection", "band", "width", "height", "a", "e")]
    if not len(idx):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    _, first, group = np.unique(np.stack(codes, axis=1), axis=0, return_index=True, return_inverse=True)
    return idx[first], group.reshape(-1)


def open_headers(
    rows: dict[str, np.ndarray],
    planned: np.ndarray,
    storage: StorageConfig,
    gdal_env: Mapping[str, str],
    max_threads: int,
    skipped: list[dict[str, str]],
    progress: NoProgress,
) -> tuple[dict[int, dict[str, Any]], np.ndarray, np.ndarray, int]:
    """Read the headers a STAC run needs: every asset not planned from metadata, and one sample per group
    of planned assets. A group whose sample fails tries its next asset, up to :data:`SAMPLE_TRIES` in
    all, then opens each of its assets: a group never goes without the files' overviews. Remote headers are
    read with the ``storage`` settings and ``gdal_env`` (``inputs.gdal_env``). Returns the
    headers by asset, the assets to keep (a failed one is skipped and listed), each asset's header
    source, and how many headers were read."""
    n = len(rows["href"])
    keep = np.ones(n, dtype=bool)
    samples, group = _group_samples(rows, planned)
    planned_idx = np.flatnonzero(planned)
    source = np.arange(n)  # whose header each asset takes overviews, blocks and file nodata from
    opened: dict[int, dict[str, Any]] = {}
    to_open = np.concatenate([np.flatnonzero(~planned), samples]).astype(np.int64)
    read = 0
    for attempt in range(SAMPLE_TRIES + 1):
        headers = _read_headers([rows["href"][k] for k in to_open], storage, gdal_env, max_threads, progress)
        read += len(to_open)
        failed = set()
        for k, (header, error) in zip(to_open.tolist(), headers, strict=True):
            if header is None:
                keep[k] = False
                skipped.append({"path": rows["href"][k], "error": str(error)})
                failed.add(k)
            else:
                opened[k] = header
        pending = [g for g, k in enumerate(samples.tolist()) if k in failed]
        if not pending or attempt == SAMPLE_TRIES:
            break
        retry = []
        for g in pending:
            others = planned_idx[(group == g) & keep[planned_idx]]
            others = others[[int(k) not in opened for k in others]] if len(others) else others
            if not len(others):
                continue
            if attempt + 1 < SAMPLE_TRIES:  # the group's next asset
                samples[g] = others[0]
                retry.append(int(others[0]))
            else:  # its samples kept failing: each of its assets is its own header
                logger.warning(
                    "STAC: %d header samples of %s failed; opening its %d assets",
                    SAMPLE_TRIES,
                    rows["band"][others[0]],
                    len(others),
                )
                samples[g] = -1
                retry += [int(k) for k in others]
                source[others] = others
        if not retry:
            break
        to_open = np.array(retry, dtype=np.int64)
    grouped = samples[group] if len(planned_idx) else np.zeros(0, dtype=np.int64)
    source[planned_idx] = np.where(grouped >= 0, grouped, source[planned_idx])
    return opened, keep, source, read
