"""Coordinate maps no task left reads are forgotten (:mod:`pipeline.execute.maplife`): the driver counts each
source window's geometry over the partitions not done, and a worker forgets the maps of the dead ones it
holds. What a task computes never depends on it (a map forgotten is made again, the same bits)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from pipeline.execute.maplife import MapLives
from pipeline.planning.jobs import ChunkJob, Partition, SourceWindow
from tests.conftest import SMALL_CUBE_64_SETS
from tests.test_scheduler import same_cube

A, B, C = (
    SourceWindow(
        path=f"/tiles/{name}.tif",
        overview_level=-1,
        window=(0, 64 * k, 64, 64),
        transform=(10.0, 0.0, 500000.0 + 640 * k, 0.0, -10.0, 4000000.0),
        crs="EPSG:32632",
        nodata=float("nan"),
        tile_origin=(500000.0, 4000000.0),
        tile_shape=(1000, 1000),
    )
    for k, name in enumerate("abc")
)


def partition(i: int, *sources: SourceWindow) -> Partition:
    job = ChunkJob(band="B04", t=0, cy=0, cx=i, window=(0, 0, 64, 64), sources=sources, cost_bytes=1)
    return Partition(index=i, key=f"p-{i}", jobs=(job,), cost_bytes=1)


def test_a_geometry_dies_with_the_last_partition_that_reads_it() -> None:
    """Each holder hears, once, of the dead geometries among those it read; a geometry another partition
    still reads (on any worker) stays."""
    b_other_band = replace(B, path="/tiles/b-other-band.tif")  # another file, the same geometry
    todo = [partition(0, A, B), partition(1, b_other_band, C), partition(2, C)]
    lives = MapLives(todo)
    assert len(lives) == 3
    assert lives.sent("w0", 0) == [] and lives.sent("w1", 1) == []
    lives.done(0)
    assert lives.sent("w0", 2) == [A.geometry()]  # B is still read by partition 1
    lives.done(1)
    assert lives.take("w1") == [B.geometry()]  # C is still read by partition 2, on w0
    lives.done(2)
    assert lives.take("w0") == [B.geometry(), C.geometry()]
    assert lives.take("w1") == [C.geometry()]
    assert lives.take("w0") == lives.take("w1") == []
    assert lives.forgotten == 5

    shared = MapLives(todo)  # one cache for every worker, told at once
    assert shared.dead(0) == [A.geometry()]
    assert shared.dead(2) == []
    assert shared.dead(1) == [B.geometry(), C.geometry()]


def test_the_driver_counts_the_geometries_maps_are_kept_by(small_config: Any) -> None:
    """The driver's count (numbers from the packed form, without unpacking the jobs) names each partition's
    windows' own geometries, exactly: the ones a map cache keys its maps by, so a worker told of one
    forgets that map."""
    from pipeline.execute.runner import plan_run
    from pipeline.resample.warp import MapCache

    _, plan = plan_run(small_config(*SMALL_CUBE_64_SETS))
    todo = list(plan.partitions)
    lives = MapLives(todo)
    assert all(p._jobs is None for p in todo)  # (counted from the packed form)
    maps = MapCache()
    for i, p in enumerate(todo):
        windows = [src for job in p.jobs for src in job.sources]
        assert lives.read_by(i) == p.geometries() == {src.geometry() for src in windows}
        for src in windows[:2]:
            key, _ = maps.get(src, (64, 64), (20.0, 0.0, 0.0, 0.0, -20.0, 0.0), "EPSG:32632", "nearest", None)
            assert key[0] in lives.read_by(i)
    assert len(lives) == len(set().union(*(p.geometries() for p in todo))) > 10
    maps.drop(lives.read_by(0))
    assert not any(key[0] in lives.read_by(0) for key in maps._maps)


def test_a_window_of_another_tile_shape_is_another_geometry() -> None:
    """A tile's shape places the one stretch of a geographic source's kernel: windows alike but for it
    must not share a map (which one came first would decide the other's pixels)."""
    assert A.geometry() != replace(A, tile_shape=(1000, 999)).geometry()
    assert A.geometry() == replace(A, path="/x.tif", band_index=2, layer=3).geometry()


def test_a_threads_run_forgets_every_map_by_its_end(small_config: Any, tmp_path: Path) -> None:
    """The threads pool's one cache: each map forgotten once its last partition is done, so none is left
    when the run ends; the cube is the one a run keeping every map writes."""
    from pipeline.execute.runner import run
    from pipeline.resample.warp import MAPS

    sets = (*SMALL_CUBE_64_SETS, "execution.scheduler=threads", "execution.workers=2")
    MAPS.clear()
    try:
        MAPS.drop = lambda geometries: 0  # type: ignore[method-assign]  # (a cache that forgets nothing)
        assert run(small_config(*sets, f"output.path={tmp_path}/keeping.zarr")).exit_code == 0
        assert len(MAPS) > 0
        del MAPS.drop
        MAPS.clear()
        report = run(small_config(*sets, f"output.path={tmp_path}/forgetting.zarr")).report
        assert report["execution"]["maps"]["made"] > 0
        assert len(MAPS) == 0 and MAPS.bytes == 0
    finally:
        MAPS.__dict__.pop("drop", None)
        MAPS.clear()
    same_cube(str(tmp_path / "keeping.zarr"), str(tmp_path / "forgetting.zarr"))


def test_a_worker_process_forgets_the_maps_no_task_left_reads(small_config: Any) -> None:
    """One worker process runs every partition: before each it forgets the maps of windows no partition
    left reads, so what it keeps falls between tasks (it never would below the cache's bound)."""
    from pipeline.execute.runner import run

    sets = (*SMALL_CUBE_64_SETS, "execution.scheduler=processes", "execution.workers=1")
    tasks = sorted(run(small_config(*sets)).report["tasks"], key=lambda t: t["start"])
    kept = [t["maps_kept_mb"] for t in tasks]
    assert len(kept) > 4
    assert kept[-1] < max(kept), kept


def test_dask_workers_forget_the_maps_no_task_left_reads(small_config: Any) -> None:
    """On the caller's cluster every worker is told, without the driver waiting: in-process workers share
    this process's cache, which holds no map once the run is done (each one forgotten after its last
    partition)."""
    import time

    from distributed import Client, LocalCluster

    from pipeline.execute.runner import run
    from pipeline.resample.warp import MAPS

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None)
    with cluster, Client(cluster) as client:
        MAPS.clear()
        report = run(small_config(*SMALL_CUBE_64_SETS), client=client).report
        assert report["execution"]["maps"]["made"] > 0
        deadline = time.monotonic() + 10.0  # (the last word reaches the workers after the run returns)
        while len(MAPS) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(MAPS) == 0 and MAPS.bytes == 0
