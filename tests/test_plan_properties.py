"""Properties of planning and chunked resampling, for random grids, chunkings and partition sizes.

- every output pixel that some tile covers is in exactly one chunk job of each (band, date), and no
  job is planned where no tile reaches;
- partitions split the jobs without loss or repetition, and a job (its chunk and its source windows)
  does not depend on how the jobs are partitioned;
- a grid resampled chunk by chunk equals the grid resampled whole, bit for bit, for any chunking.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.planning.jobs import SourceWindow
from pipeline.planning.planner import compute_plan
from pipeline.resample.kernels import KERNEL_METHODS
from pipeline.resample.warp import RowSpan, warp_window
from tests.helpers import virtual_tiles

RES = 20.0


@st.composite
def layouts(draw: st.DrawFn) -> dict:
    """A few tiles of one UTM zone (grid CRS) at 10 or 20 m, two bands, one or two dates."""
    n = draw(st.integers(1, 5))
    tiles = []
    for _ in range(n):
        res = draw(st.sampled_from([10.0, 20.0]))
        x0 = 500_000.0 + draw(st.integers(0, 60)) * 100.0 + draw(st.sampled_from([0.0, 5.0, 13.0]))
        y0 = 5_000_000.0 - draw(st.integers(0, 60)) * 100.0
        w, h = draw(st.integers(20, 400)), draw(st.integers(20, 400))
        band = draw(st.sampled_from(["B02", "B11"]))
        date = draw(st.sampled_from(["2024-06-01", "2024-06-11"]))
        tiles.append(("EPSG:32632", x0, y0, w, h, res, band, date))
    return {
        "tiles": tiles,
        "chunks": (draw(st.integers(16, 300)), draw(st.integers(16, 300))),
        "method": draw(st.sampled_from(["nearest", "average", "bilinear"])),
    }


def _plan(layout: dict, partition_mb: float):
    return compute_plan(
        virtual_tiles(layout["tiles"]),
        crs="EPSG:32632",
        res_xy=(RES, RES),
        chunks_yx=layout["chunks"],
        bounds=None,
        resampling=layout["method"],
        fuse="first",
        partition_mb=partition_mb,
    )


def _jobs(plan) -> dict:
    out = {}
    for p in plan.partitions:
        for j in p.jobs:
            key = (j.band, j.t, j.cy, j.cx)
            assert key not in out, f"chunk {key} planned twice"
            out[key] = j
    return out


@settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(layouts(), st.sampled_from([0.01, 0.05, 0.5, 64.0]))
def test_every_covered_pixel_is_in_exactly_one_chunk(layout: dict, partition_mb: float) -> None:
    plan = _plan(layout, partition_mb)
    h, w = plan.grid.shape_yx
    gt = plan.grid.transform
    jobs = _jobs(plan)
    times = [np.datetime64(t, "D") for t in plan.times]
    for band in {t[6] for t in layout["tiles"]}:
        for ti, when in enumerate(times):
            count = np.zeros((h, w), dtype=np.int32)
            for (b, t, _, _), job in jobs.items():
                if b == band and t == ti:
                    r0, c0, hh, ww = job.window
                    count[r0 : r0 + hh, c0 : c0 + ww] += 1
                    assert job.sources, "a job without sources was planned"
            assert count.max() <= 1
            # Pixels whose centres lie well inside a tile of this band and date must be covered.
            for _crs, x0, y0, tw, th, res, b, date in layout["tiles"]:
                if b != band or np.datetime64(date) != when:
                    continue
                c_lo = int(np.ceil((x0 - gt[2]) / gt[0])) + 1
                c_hi = int(np.floor((x0 + tw * res - gt[2]) / gt[0])) - 1
                r_lo = int(np.ceil((gt[5] - y0) / -gt[4])) + 1
                r_hi = int(np.floor((gt[5] - (y0 - th * res)) / -gt[4])) - 1
                if c_hi > c_lo and r_hi > r_lo:
                    assert count[r_lo:r_hi, c_lo:c_hi].min() == 1


@settings(deadline=None, max_examples=30, suppress_health_check=[HealthCheck.too_slow])
@given(layouts(), st.sampled_from([0.01, 0.05, 0.3]), st.sampled_from([1.0, 64.0]))
def test_jobs_do_not_depend_on_partitioning(layout: dict, small_mb: float, large_mb: float) -> None:
    fine, coarse = _plan(layout, small_mb), _plan(layout, large_mb)
    a, b = _jobs(fine), _jobs(coarse)
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].window == b[key].window
        assert a[key].sources == b[key].sources
    # Partitions are contiguous runs of the same job order, so their concatenation is the same list.
    order_fine = [(j.band, j.t, j.cy, j.cx) for p in fine.partitions for j in p.jobs]
    order_coarse = [(j.band, j.t, j.cy, j.cx) for p in coarse.partitions for j in p.jobs]
    assert order_fine == order_coarse
    assert len(fine.partitions) >= len(coarse.partitions)


@settings(deadline=None, max_examples=25, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(KERNEL_METHODS),
    st.integers(1, 5),
    st.integers(8, 97),
    st.integers(8, 97),
    st.sampled_from(["EPSG:32632", "EPSG:32633"]),
    st.integers(0, 2**32 - 1),
)
def test_chunk_by_chunk_equals_whole_for_any_chunking(
    method: str, scale_step: int, ch: int, cw: int, src_crs: str, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    src_res = 10.0
    n = 160
    data = rng.integers(1, 1000, size=(n, n)).astype("uint16")
    data[rng.random((n, n)) < 0.05] = 0  # nodata holes
    x0 = 500_000.0 if src_crs == "EPSG:32632" else 200_000.0
    src = SourceWindow(
        path="/virtual/a.tif",
        overview_level=-1,
        window=(0, 0, n, n),
        transform=(src_res, 0.0, x0, 0.0, -src_res, 5_000_000.0),
        crs=src_crs,
        nodata=0.0,
    )
    dst_res = src_res * scale_step / 2 + 3.0
    h = w = 120
    if src_crs == "EPSG:32632":
        dx0, dy0 = x0 + 37.0, 5_000_000.0 - 41.0
    else:  # the same area seen from the neighbouring zone
        from pyproj import Transformer

        dx0, dy0 = Transformer.from_crs(src_crs, "EPSG:32632", always_xy=True).transform(x0 + 60.0, 5_000_000.0 - 60.0)
    dt = (dst_res, 0.0, float(dx0), 0.0, -dst_res, float(dy0))
    whole = warp_window(data, src, (h, w), dt, "EPSG:32632", 0.0, method, grid=RowSpan(dt, w, 0, 0))
    pieces = np.zeros_like(whole)
    for r0 in range(0, h, ch):
        for c0 in range(0, w, cw):
            hh, ww = min(ch, h - r0), min(cw, w - c0)
            t = (dt[0], 0.0, dt[2] + dt[0] * c0, 0.0, dt[4], dt[5] + dt[4] * r0)
            pieces[r0 : r0 + hh, c0 : c0 + ww] = warp_window(
                data, src, (hh, ww), t, "EPSG:32632", 0.0, method, grid=RowSpan(dt, w, r0, c0)
            )
    np.testing.assert_array_equal(pieces, whole)
