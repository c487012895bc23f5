"""Planning maths, tested without rasters: synthetic tile tables in memory."""

from __future__ import annotations

import pickle

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.inputs.tiles import TileTable
from pipeline.planning.grid import GridSpec, compute_grid, transform_boxes, transform_points
from pipeline.planning.planner import compute_plan
from tests.helpers import virtual_tiles


def tile_table(specs: list[tuple[str, float, float, int, float]], band: str = "B1") -> TileTable:
    """Square tiles (crs, x0, y0, size_px, res) of one band and date; no files behind them."""
    return virtual_tiles([(crs, x0, y0, n, n, res, band, "2024-01-01") for crs, x0, y0, n, res in specs])


@settings(deadline=None)
@given(
    st.integers(1, 3000),
    st.integers(1, 3000),
    st.integers(1, 700),
    st.integers(1, 700),
)
def test_chunk_windows_tile_the_grid(h: int, w: int, ch: int, cw: int) -> None:
    g = GridSpec("EPSG:32632", (10.0, 0.0, 0.0, 0.0, -10.0, 0.0), (h, w), (ch, cw))
    ny, nx = g.n_chunks_yx
    area = 0
    for cy in (0, ny - 1):
        for cx in (0, nx - 1):
            r0, c0, hh, ww = g.chunk_window(cy, cx)
            assert r0 % ch == 0 and c0 % cw == 0 and 0 < hh <= ch and 0 < ww <= cw
            assert r0 + hh <= h and c0 + ww <= w
    area = sum(g.chunk_window(cy, 0)[2] for cy in range(ny)) * sum(g.chunk_window(0, cx)[3] for cx in range(nx))
    assert area == h * w
    boxes = g.chunk_boxes()
    assert boxes.shape == (ny, nx, 4)
    assert np.allclose(boxes[0, 0, [0, 3]], [g.bounds[0], g.bounds[3]])
    assert np.allclose(boxes[-1, -1, [2, 1]], [g.bounds[2], g.bounds[1]])


@given(
    st.floats(-1e6, 1e6),
    st.floats(-1e6, 1e6),
    st.floats(1, 5e4),
    st.floats(1, 5e4),
    st.sampled_from([10.0, 20.0, 60.0, 0.5]),
)
def test_grid_snaps_outward_to_the_resolution(x: float, y: float, dx: float, dy: float, res: float) -> None:
    g = compute_grid("EPSG:32632", (res, res), (256, 256), (x, y, x + dx, y + dy))
    xmin, ymin, xmax, ymax = g.bounds
    eps = res * 1e-6
    assert xmin <= x + eps and ymin <= y + eps and xmax >= x + dx - eps and ymax >= y + dy - eps
    for v in g.bounds:
        assert abs(v / res - round(v / res)) < 1e-6
    assert xmax - xmin < dx + 2 * res + eps


def _brute_force_pairs(tiles: TileTable, grid: GridSpec) -> set[tuple[int, int, int]]:
    """The chunks x tiles double loop the planner avoids, as the reference."""
    out = set()
    boxes = grid.chunk_boxes()
    for i in range(len(tiles)):
        row = tiles.row(i)
        fp = transform_boxes(row["crs"], grid.crs, np.array([[row[k] for k in ("xmin", "ymin", "xmax", "ymax")]]), 11)[
            0
        ]
        for cy in range(boxes.shape[0]):
            for cx in range(boxes.shape[1]):
                b = boxes[cy, cx]
                if fp[0] < b[2] and fp[2] > b[0] and fp[1] < b[3] and fp[3] > b[1]:
                    out.add((int(i), cy, cx))
    return out


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 40),
            st.integers(0, 40),
            st.integers(20, 300),
            st.sampled_from([10.0, 20.0, 60.0]),
            st.booleans(),
        ),
        min_size=1,
        max_size=6,
    ),
    st.integers(16, 200),
)
def test_plan_pairs_match_brute_force(specs: list, chunk: int) -> None:  # type: ignore[type-arg]
    tiles = tile_table(
        [
            (
                "EPSG:32631" if other_zone else "EPSG:32632",
                (730_000 if other_zone else 270_000) + ix * 600.0,
                4_990_000 - iy * 600.0,
                n,
                res,
            )
            for ix, iy, n, res, other_zone in specs
        ]
    )
    plan = compute_plan(
        tiles,
        crs="EPSG:32632",
        res_xy=(20.0, 20.0),
        chunks_yx=(chunk, chunk),
        bounds=None,
        resampling="nearest",
        fuse="first",
        partition_mb=0.5,
    )
    got = {
        (int(s.path.rsplit("/", 1)[1].split("_")[0]), j.cy, j.cx)
        for p in plan.partitions
        for j in p.jobs
        for s in j.sources
    }
    expected = _brute_force_pairs(tiles, plan.grid)
    # The planner also drops pairs whose padded window misses the file; it never adds pairs.
    assert got <= expected
    # A dropped pair loses no output pixel: no pixel centre of that chunk lies inside the tile.
    rows = tiles.row
    for i, cy, cx in expected - got:
        t = rows(i)
        r0, c0, h, w = plan.grid.chunk_window(cy, cx)
        ga = plan.grid.transform
        cols, rws = np.meshgrid(np.arange(c0, c0 + w) + 0.5, np.arange(r0, r0 + h) + 0.5)
        x, y = ga[2] + cols * ga[0], ga[5] + rws * ga[4]
        if t["crs"] != "EPSG:32632":
            x, y = transform_points("EPSG:32632", t["crs"], x.ravel(), y.ravel())
        col, row = (np.ravel(x) - t["c"]) / t["a"], (np.ravel(y) - t["f"]) / t["e"]
        inside = (col > 0) & (col < t["width"]) & (row > 0) & (row < t["height"])
        assert not inside.any(), f"tile {i} chunk ({cy}, {cx}) dropped but {int(inside.sum())} pixels lie inside"


def test_windows_cover_the_chunk_same_crs() -> None:
    tiles = tile_table([("EPSG:32632", 300_000.0, 5_000_000.0, 1000, 10.0)])
    plan = compute_plan(
        tiles,
        crs="EPSG:32632",
        res_xy=(20.0, 20.0),
        chunks_yx=(100, 100),
        bounds=None,
        resampling="bilinear",
        fuse="first",
        partition_mb=64,
    )
    assert plan.grid.shape_yx == (500, 500)
    job = plan.partitions[0].jobs[0]
    (src,) = job.sources
    # bilinear may use overview 0 (20 m): the 100x100 chunk at 20 m is 100x100 there, plus padding.
    assert src.overview_level == 0
    assert src.window == (0, 0, 102, 102)
    assert src.transform[0] == 20.0 and src.transform[2] == 300_000.0


def test_value_picking_methods_read_full_resolution() -> None:
    tiles = tile_table([("EPSG:32632", 300_000.0, 5_000_000.0, 1000, 10.0)])
    for method, level in (("nearest", -1), ("mode", -1), ("median", -1), ("average", 0), ("cubic", 0)):
        plan = compute_plan(
            tiles,
            crs="EPSG:32632",
            res_xy=(20.0, 20.0),
            chunks_yx=(100, 100),
            bounds=None,
            resampling=method,
            fuse="first",
            partition_mb=64,
        )
        assert plan.partitions[0].jobs[0].sources[0].overview_level == level, method


def test_partitions_pack_in_order_to_the_target_and_keys_are_stable() -> None:
    tiles = tile_table([("EPSG:32632", 300_000.0 + 5000 * i, 5_000_000.0, 600, 10.0) for i in range(6)])
    kw = {
        "crs": "EPSG:32632",
        "res_xy": (20.0, 20.0),
        "chunks_yx": (64, 64),
        "bounds": None,
        "resampling": "average",
        "fuse": "first",
    }
    small = compute_plan(tiles, partition_mb=0.05, **kw)
    big = compute_plan(tiles, partition_mb=256, **kw)
    assert len(big.partitions) == 1 and len(small.partitions) > 5
    flat = [j for p in small.partitions for j in p.jobs]
    assert flat == list(big.partitions[0].jobs)
    total = sum(p.cost_bytes for p in small.partitions)
    k = int(np.ceil(total / 0.05e6))
    biggest_job = max(j.cost_bytes for j in flat)
    for p in small.partitions:  # even cuts: each partition is its share of the total, within one job
        assert p.cost_bytes <= total / k + biggest_job
    again = compute_plan(tiles, partition_mb=0.05, **kw)
    assert [p.key for p in again.partitions] == [p.key for p in small.partitions]
    assert len({p.key for p in small.partitions}) == len(small.partitions)
    assert max(len(pickle.dumps(p)) for p in small.partitions) < 64 * 1024


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.one_of(st.integers(1, 1000), st.integers(10_000, 10**6)), min_size=1, max_size=400),
    st.floats(100, 5e6),
)
def test_partitions_are_even_ordered_and_have_no_long_tail(costs: list[int], target: float) -> None:
    from pipeline.planning.packing import pack_partitions

    job_cost = np.asarray(costs, dtype=np.int64)
    bounds = pack_partitions(job_cost, target)
    assert bounds[0] == 0 and bounds[-1] == len(costs) and np.all(np.diff(bounds) > 0)
    part = np.add.reduceat(job_cost, bounds[:-1])
    k = max(1, int(np.ceil(job_cost.sum() / target)))
    several = np.diff(bounds) > 1
    assert np.all(part[several] <= 3 * np.median(part) + 1e-9)
    # A partition of several jobs holds at most its share of the total plus one job.
    assert np.all(part[several] <= job_cost.sum() / k + job_cost.max())


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 40), min_size=1, max_size=60),
    st.integers(1, 10**4),
    st.floats(0.2, 4.0),
)
def test_cuts_move_to_the_start_of_a_band_and_date_when_one_is_near(sizes: list[int], job: int, per: float) -> None:
    """Groups of jobs read the same files (one band and date): a cut within a partition's share of a
    group's start moves there, so the files are opened once; partitions stay ordered and without a
    long tail."""
    from pipeline.planning.packing import SNAP_TO_GROUP, pack_partitions

    job_cost = np.full(sum(sizes), job, dtype=np.int64)
    group_start = np.cumsum([0, *sizes[:-1]])
    target = per * float(np.median(sizes)) * job
    bounds = pack_partitions(job_cost, target, group_start=group_start)
    assert bounds[0] == 0 and bounds[-1] == len(job_cost) and np.all(np.diff(bounds) > 0)
    part = np.add.reduceat(job_cost, bounds[:-1])
    several = np.diff(bounds) > 1
    assert np.all(part[several] <= 3 * np.median(part) + 1e-9)
    k = max(1, int(np.ceil(job_cost.sum() / target)))
    share = job_cost.sum() / k
    csum = np.concatenate([[0], np.cumsum(job_cost)])
    # Where a group starts within the snapping distance of a cut's due place, the cut is there.
    for due in share * np.arange(1, k):
        near = np.abs(csum[group_start[1:]] - due)
        if near.size and near.min() < SNAP_TO_GROUP * share:
            # (of equally near ones: the test's dues and the packer's differ in their last bits)
            assert np.isin(group_start[1:][near <= near.min() + 1e-9 * share], bounds).any()


def test_bands_about_a_partition_in_size_are_never_split() -> None:
    """24 band-dates of 12 chunks, 60 m ones half the cost: 24 partitions, one band-date each."""
    from pipeline.planning.packing import pack_partitions

    costs = np.concatenate([np.full(12, 3 if b % 6 == 0 else 6) for b in range(24)]).astype(np.int64)
    group_start = np.arange(24) * 12
    bounds = pack_partitions(costs, float(costs.sum()) / 25 * 0.999, group_start=group_start)
    assert set(bounds[:-1].tolist()) <= set(group_start.tolist())
    assert len(bounds) - 1 >= 20


def test_overview_levels_as_gdalwarp_picks_them_from_declared_sizes() -> None:
    """A 5490 px band whose levels GDAL's COG driver sized 2745 and 1372 (rounded down): an 80 m grid from
    20 m reads level 0 (level 1's decimation, 4.0015, is over the grid's 4), 80.1 m reads level 1."""
    from pipeline.planning.windows import compute_levels, level_transforms

    tiles = virtual_tiles([("EPSG:32632", 300000.0, 5000040.0, 5490, 5490, 20.0, "B11", "2024-06-01")])
    tiles = tiles.assign(overview_sizes=np.array([[2745, 2745, 1372, 1372]], dtype=object))
    assert compute_levels(tiles, "EPSG:32632", (80.0, 80.0), "average").tolist() == [0]
    level = compute_levels(tiles, "EPSG:32632", (80.1, 80.1), "average")
    assert level.tolist() == [1]
    assert compute_levels(tiles, "EPSG:32632", (80.1, 80.1), "nearest").tolist() == [-1]
    aff, lw, lh = level_transforms(tiles, level)
    assert (lw[0], lh[0]) == (1372, 1372) and aff[0, 0] == 20.0 * 5490 / 1372


def test_a_partition_packed_from_the_tables_is_its_jobs_packed() -> None:
    """The plan packs each task straight from its tables; packing the jobs it unpacks to, as objects,
    gives the same bytes, and a pickled task comes back equal. Overlapping tiles partly covering chunks,
    two resolutions, small partitions."""
    from pipeline.planning.jobs import pack_jobs

    specs = [
        ("EPSG:32632", 300_000.0, 5_000_000.0, 700, 10.0),
        ("EPSG:32632", 302_500.0, 4_998_000.0, 700, 10.0),
        ("EPSG:32632", 301_000.0, 4_997_000.0, 300, 20.0),
    ]
    plan = compute_plan(
        tile_table(specs),
        crs="EPSG:32632",
        res_xy=(20.0, 20.0),
        chunks_yx=(64, 64),
        bounds=None,
        resampling="average",
        fuse="first",
        partition_mb=0.05,
    )
    assert len(plan.partitions) > 3 and max(len(p.packed()[2]) for p in plan.partitions) >= 3  # files a task
    for p in plan.partitions:
        assert pack_jobs(p.jobs) == p.packed()
        assert pickle.loads(pickle.dumps(p)) == p and p.files() == frozenset(s.path for j in p.jobs for s in j.sources)
