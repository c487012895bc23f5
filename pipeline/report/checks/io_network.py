"""Checks of I/O: reads against compute (``io_vs_compute``), bytes read per byte written from tiles read at
full resolution (``overviews``), and storage and the network: the objects a run wrote to a bucket
(``object_size``) and what remote reads fetched (``read_amplification``), both from
:mod:`pipeline.report.remote_checks`, and whether they waited on round trips with too few in flight
(``latency_bound``).

A new check of object storage or of remote reads (its latency, its requests) belongs to this group:
define it in this module and add it to :func:`check_network`, which puts the network's checks last in
the report."""

from __future__ import annotations

from typing import Any

from pipeline.report.checks.entry import entry
from pipeline.report.remote_checks import check_object_sizes, network_checks

READ_AMPLIFICATION = 2.0
"""``overviews`` warns when the tasks read over this many bytes per byte written, most tiles at full
resolution: a grid 2x coarser than the inputs reads ~4x its bytes without overviews, ~1.3x with them."""


MIN_READ_BYTES = 1 << 20
"""``overviews`` judges runs that read at least this much."""


def check_object_size(report: dict[str, Any]) -> list[dict[str, str]]:
    """``object_size`` for a store in a bucket (nothing for a local store): the report's first check."""
    return check_object_sizes(report.get("output", {}), report.get("plan", {}))


def check_network(report: dict[str, Any]) -> list[dict[str, str]]:
    """The checks of remote reads, from the report's ``network`` record (none where no tile was read
    remotely): ``read_amplification``, ``latency_bound``. The report's last checks; a new network check is
    added here."""
    latency = check_latency_bound(report)
    return [*network_checks(report.get("network") or {}), *([latency] if latency else [])]


def check_io_vs_compute(report: dict[str, Any]) -> dict[str, str]:
    """Whether reading and writing or resampling took most of the tasks' time (never a warning: it says
    which resources help)."""
    st = report["stage_task_s"]
    io, compute = st["read"] + st["write"], st["resample"] + st.get("mask", 0.0) + st.get("reduce", 0.0)
    io_share = io / (io + compute) if io + compute else 0.0
    bound = "I/O-bound" if io_share >= 0.5 else "compute-bound"
    advice = (
        "more workers help while storage keeps up; faster storage or fewer bytes (overviews, compression) help more"
        if io_share >= 0.5
        else "more workers/cores or the GPU help: resampling dominates"
    )
    return {
        "check": "io_vs_compute",
        "status": "ok",
        "detail": f"{bound}: read+write {io_share:.0%} of task time, resample {1 - io_share:.0%}",
        "advice": advice,
    }


def full_reads(report: dict[str, Any]) -> tuple[int, int, int]:
    """Tiles read at full resolution; of those, the ones with overviews; of those, the ones whose method
    reads none (a report without that count: all of them)."""
    plan = report.get("plan", {})
    had = int(plan.get("full_with_overviews", 0))
    return int((plan.get("levels_used") or {}).get("full", 0)), had, int(plan.get("full_by_method", had))


def overview_verdict(levels: dict[str, int], had: int, by_method: int) -> tuple[bool, str]:
    """Whether the tiles read at full resolution are mostly ones that could read less, and what would:
    ``levels``: tiles per level read (``plan.levels_used``); ``had``: those at full resolution with
    overviews; ``by_method``: of those, the ones whose method reads none. The rest of ``had`` have
    overviews coarser than the grid's pixel where they land, which gdalwarp reads whole too. The run's
    ``overviews`` check and ``pipeline plan`` judge by it alike."""
    full = int(levels.get("full", 0))
    avoidable = full - (had - by_method)
    mostly = avoidable * 2 >= sum(levels.values())
    if by_method and by_method * 2 >= avoidable:
        return mostly, (
            f"{by_method} of the {full} tiles read at full resolution have overviews that this run's method does "
            "not read: use a blending resampling (average, bilinear, cubic) for those bands, which reads them"
        )
    return mostly, (
        "the grid is coarser than the inputs but they are read at full resolution: give the inputs overviews "
        "(gdaladdo -r average, or write COGs) and use a blending resampling (average, bilinear, cubic), "
        "which reads them"
    )


def check_overviews(report: dict[str, Any]) -> dict[str, str]:
    """Downsampling from full resolution: bytes read per byte written, the levels the plan chose, and why
    the tiles read at full resolution were: no overviews (``gdaladdo`` would give them), a method that reads
    none (a blending one would), or overviews coarser than the grid's pixel where the tile lands (gdalwarp
    reads those whole too: nothing to do, so they do not count toward the warning)."""
    read = int(report["inputs"].get("bytes_read", 0))
    written = int(sum(t.get("bytes_written", 0) for t in report["tasks"]))
    levels = report.get("plan", {}).get("levels_used") or {}
    _, had, by_method = full_reads(report)
    coarse = had - by_method
    ratio = read / written if written else 0.0
    judged = read >= MIN_READ_BYTES and written > 0
    mostly, advice = overview_verdict(levels, had, by_method)
    why = []
    if by_method:
        why.append(f"{by_method} with overviews this method does not read")
    if coarse:
        why.append(f"{coarse} whose overviews are coarser than the grid's pixel, as gdalwarp judges: read whole")
    return entry(
        "overviews",
        judged and ratio > READ_AMPLIFICATION and mostly,
        f"read {ratio:.1f} bytes per byte written; tiles read at "
        + (", ".join(f"{k}: {v}" for k, v in levels.items()) or "no level")
        + (f" ({'; '.join(why)})" if why else "")
        + ("" if judged else f"; {read / 1e6:.1f} MB read: too little to judge"),
        advice,
    )


LATENCY_SHARE = 0.5
"""``latency_bound`` warns when the store's round trips, ``io_concurrency`` at a time, account for this
share of the reads' task-seconds or more ..."""
READ_SHARE = 0.3
"""... the tasks waited on reads this share of their time or more ..."""
FULL = 0.5
"""... the reads kept the I/O threads full (this share of them busy on average, while any was) ..."""
SHORT = 0.5
"""... and ``io_concurrency`` is this share of the store's measured bandwidth-delay product or less."""


def check_latency_bound(report: dict[str, Any]) -> dict[str, str] | None:
    """Whether the reads mostly waited on the store's round trips because too few were in flight: the tasks
    waited on reads, the I/O threads were full, the requests times the store's first-byte time
    (``io.latency_ms``, probed; else the reads' p50) over ``io_concurrency`` is most of the reads' time, and
    ``auto`` would keep at least twice as many in flight. None where nothing was read remotely."""
    net, io = report.get("network") or {}, report.get("io") or {}
    requests = int(net.get("requests") or 0)
    if not requests:
        return None
    st = report.get("stage_task_s") or {}
    reads = float(st.get("read", 0.0))
    tasks = sum(float(st.get(k, 0.0)) for k in ("read", "mask", "resample", "reduce", "write"))
    latency_ms = io.get("latency_ms") or (net.get("latency_ms") or {}).get("p50") or 0.0
    concurrency = max(int(io.get("concurrency") or 1), 1)
    mean = float((net.get("in_flight") or {}).get("mean") or 1.0)
    waited = requests * latency_ms / 1e3 / concurrency
    share = min(waited / reads, 1.0) if reads > 0 else 0.0
    auto = io.get("auto")
    warn = (
        tasks > 0
        and reads >= READ_SHARE * tasks
        and mean >= FULL * concurrency
        and share >= LATENCY_SHARE
        and auto is not None
        and concurrency <= SHORT * auto
    )
    detail = (
        f"{requests} requests x {latency_ms:.1f} ms / io_concurrency {concurrency} = {waited:.1f} s, "
        f"{share:.0%} of the reads' {reads:.1f} task-s (reads {reads / tasks if tasks else 0:.0%} of task time); "
        f"{mean:.1f} in flight on average" + (f"; the store's bandwidth-delay product: {auto}" if auto else "")
    )
    advice = (
        f"reads wait on round trips, {concurrency} at a time: set execution.io_concurrency: {auto} "
        "(or auto, which measures it: 1 + latency x bandwidth / window size)"
    )
    return entry("latency_bound", warn, detail, advice)
