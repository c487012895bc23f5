"""Monthly clear-sky median composites on the cloudy fixture: this pipeline against the way users build
them today with odc-stac.

* pipeline: ``pipeline run configs/cloudy.yaml --workers 2``: the ``SCL`` mask (cloud shadow, cloud,
  thin cirrus, grown by one pixel) judged per source tile before resampling, then a monthly median.
* odc-stac: the fixture's STAC items (``data_fixtures/cloudy/items.json``),
  ``odc.stac.load(bands=[data bands, SCL], crs=EPSG:32632, resolution=20, groupby="solar_day",
  resampling={"*": "average", "SCL": "mode"}, chunks=1024²)``, then the data where ``SCL`` is not one of
  the excluded classes, grown by one pixel as users grow it (a 3x3 rolling max: the config's
  ``dilate: 1``), nor no data (odc-stac fills nodata with 0, and a median must not see those zeros),
  ``.resample(time="1MS").median()``, ``.to_zarr`` on dask's default threaded scheduler. The
  mask is judged after resampling, on ``SCL`` resampled by mode (the categorical method the pipeline
  gives a band with ``classification:classes``): the approximation users accept, which differs from the
  pipeline's near cloud edges.

Each side is a fresh process, timed whole (start-up and imports included) in ``BENCH_REPEATS``
interleaved runs (default 3; medians printed) with nothing else running: the memory sampler reads each
process's ``smaps`` (~3-7 ms a process, ~22 ms a sample of the pipeline's four, every 50 ms: ~30% of a
core, which a 2-core run would lose), so it samples runs of their own per side (``BENCH_SAMPLED`` of
them, default 1, interleaved; medians). It records the peaks of the process tree's summed PSS (worker
processes included) and summed RSS, every 50 ms, and the kernel's ``ru_maxrss`` (the largest process).
Then both cubes are compared band by band and month by month (max |difference|, share of pixels within 1
DN and within 5%): reported, not asserted. While the pipeline rejects the ``mask`` or ``composite`` key,
its side prints why and odc-stac's figures stand alone.
Writes ``bench/results/composite.json``; outputs under ``out/composite/``. Needs the ``bench`` extra and
``make fixtures-cloudy``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np
from save import run_args, save_json  # noqa: E402  (bench/ is on sys.path when a script runs)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
CONFIG = os.path.join(ROOT, "configs", "cloudy.yaml")
ITEMS = os.path.join(ROOT, "data_fixtures", "cloudy", "items.json")
OUT = os.path.join(ROOT, "out", "composite")
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
SAMPLED = int(os.environ.get("BENCH_SAMPLED", "1"))
"""Interleaved runs sampled for memory (the medians printed): a run's peak moves by ~±15 MB."""
BANDS = ["B02", "B03", "B04", "B08", "B09", "B11"]
EXCLUDE = [3, 8, 9, 10]
"""``SCL`` classes dropped: cloud shadows, cloud medium and high probability, thin cirrus (the config's)."""

ODC_SCRIPT = r"""
import json, os, sys
import odc.stac, pystac
items_path, out, bands, exclude = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
base = os.path.dirname(os.path.abspath(items_path))
docs = json.load(open(items_path))["features"]
for d in docs:  # the items' hrefs are relative to their file
    for a in d["assets"].values():
        a["href"] = os.path.normpath(os.path.join(base, a["href"]))
items = [pystac.Item.from_dict(d) for d in docs]
ds = odc.stac.load(items, bands=[*bands, "SCL"], crs="EPSG:32632", resolution=20, groupby="solar_day",
                   resampling={"*": "average", "SCL": "mode"}, chunks={"x": 1024, "y": 1024})
scl = ds["SCL"]
cloudy = scl.isin(exclude).astype("uint8").rolling(y=3, x=3, center=True, min_periods=1).max() > 0
clear = ~cloudy & (scl != 0)
data = ds[bands]
composite = data.where(clear & (data != 0)).resample(time="1MS").median()
composite.to_zarr(out, mode="w")
"""


BASELINE = os.environ.get("BENCH_BASELINE_TREE")
"""Another checkout of the project (``git -C /work/main archive HEAD | tar -x -C /tmp/base``, its compiled
kernels copied in): its pipeline run as a side of its own, ``pipeline (baseline)``, interleaved with the
others, and its cube compared with this tree's bit for bit."""


def measure(cmd: list[str], sample: bool = True, cwd: str = ROOT) -> dict[str, Any]:
    """Run ``cmd`` in a fresh process: its wall seconds; the kernel's peak RSS (MB) of it and the
    descendants whose ends were waited for (``peak_mb``: the largest one, not their sum; the pipeline's
    worker processes are not among them); with ``sample``, the sampled peaks of the process tree's summed
    PSS (shared pages split between the processes that map them: the tree's memory) and summed RSS
    (shared pages counted in each process), else only the wall (waited for, nothing else running); exit
    code and output."""
    import psutil

    with tempfile.TemporaryFile("w+") as log:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, text=True)
        tree_rss = tree_pss = 0
        while True:
            pid, status, usage = os.wait4(proc.pid, 0 if not sample else os.WNOHANG)
            if pid:
                break
            try:
                ps = psutil.Process(proc.pid)
                mem = [p.memory_full_info() for p in (ps, *ps.children(recursive=True))]
                tree_rss = max(tree_rss, sum(m.rss for m in mem))
                tree_pss = max(tree_pss, sum(m.pss for m in mem))
            except psutil.Error:
                pass  # a process ended between the listing and the reading
            time.sleep(0.05)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        output = log.read()
    return {
        "wall_s": wall,
        "peak_mb": usage.ru_maxrss * 1024 / 1e6,  # Linux counts KiB
        "tree_rss_mb": tree_rss / 1e6,
        "tree_pss_mb": tree_pss / 1e6,
        "rc": proc.returncode,
        "output": output,
    }


def odc_command() -> list[str]:
    return [
        sys.executable,
        "-W",
        "ignore",
        "-c",
        ODC_SCRIPT,
        ITEMS,
        f"{OUT}/odc.zarr",
        json.dumps(BANDS),
        json.dumps(EXCLUDE),
    ]


def pipeline_command(name: str = "pipeline") -> list[str]:
    return [sys.executable, "-m", "pipeline", *run_args(CONFIG, f"{OUT}/{name}.zarr", f"{OUT}/{name}.report.json")]


def same_cube(a: str, b: str) -> bool:
    """Whether two pipeline cubes hold the same arrays, bit for bit."""
    import zarr

    ga, gb = zarr.open_group(a, mode="r"), zarr.open_group(b, mode="r")
    keys = sorted(ga.array_keys())
    return keys == sorted(gb.array_keys()) and all(
        np.array_equal(np.asarray(ga[k][...]), np.asarray(gb[k][...]), equal_nan=True) for k in keys
    )


def pipeline_unavailable() -> str | None:
    """Why the pipeline cannot run this config (its config error's message), or None when it can."""
    r = subprocess.run(
        [sys.executable, "-m", "pipeline", "config", CONFIG], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if r.returncode == 0:
        return None
    lines = [ln for ln in (r.stderr or r.stdout).strip().splitlines() if ln.strip()]
    return " ".join(lines[-3:]) if lines else f"exit {r.returncode}"


def compare_composites(ours_path: str, theirs_path: str) -> dict[str, dict[str, dict[str, float]]]:
    """Both cubes on their common pixels (aligned by coordinates), per band and period: the max
    |difference|, the share of pixels both have within 1 DN and within 5% of odc-stac's value, and the
    share of pixels that one has and the other has not."""
    import xarray as xr

    ours = xr.open_zarr(ours_path)
    theirs = xr.open_zarr(theirs_path, consolidated=False)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for band in BANDS:
        if band not in ours or band not in theirs:
            continue
        a, b = xr.align(ours[band].astype("f8"), theirs[band].astype("f8"), join="inner")
        out[band] = {}
        for ti, t in enumerate(a["time"].values):
            x, y = a.isel(time=ti).values, b.isel(time=ti).values
            x = np.where(x == 0, np.nan, x)  # a fill of 0 where the store declares none
            both = np.isfinite(x) & np.isfinite(y)
            either = np.isfinite(x) | np.isfinite(y)
            diff = np.abs(x[both] - y[both])
            out[band][str(np.datetime_as_string(t, unit="D"))] = {
                "max_abs_diff": float(diff.max()) if diff.size else float("nan"),
                "within_1dn": float((diff <= 1).mean()) if diff.size else float("nan"),
                "within_5pct": float((diff <= 0.05 * np.abs(y[both])).mean()) if diff.size else float("nan"),
                "one_side_only": float(1 - both.sum() / max(either.sum(), 1)),
                "pixels": int(both.sum()),
            }
    return out


def print_comparison(cmp: dict[str, dict[str, dict[str, float]]]) -> None:
    print(f"\n{'band':<6}{'period':<12}{'max |diff|':>12}{'<= 1 DN':>10}{'<= 5%':>9}{'one side':>10}")
    for band, periods in cmp.items():
        for period, s in periods.items():
            print(
                f"{band:<6}{period:<12}{s['max_abs_diff']:12.1f}{s['within_1dn']:10.2%}"
                f"{s['within_5pct']:9.2%}{s['one_side_only']:10.2%}"
            )


def main() -> None:
    if not os.path.exists(ITEMS):
        sys.exit(f"{ITEMS} not found: make fixtures-cloudy writes the cloudy preset and its items")
    os.makedirs(OUT, exist_ok=True)
    sides = {"odc-stac": odc_command()}
    why = pipeline_unavailable()
    if why is None:
        sides = {"pipeline": pipeline_command(), **sides}
        if BASELINE:  # (`python -m` puts the working directory first on sys.path: the baseline's package)
            sides = {"pipeline": sides["pipeline"], "pipeline (baseline)": pipeline_command("baseline"), **sides}
    cwd = {name: BASELINE if name == "pipeline (baseline)" and BASELINE else ROOT for name in sides}
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in sides}
    for name, cmd in sides.items():  # warm-up: page cache, imports, the pipeline's index
        r = measure(cmd, sample=False, cwd=cwd[name])
        if r["rc"] not in (0, 3):
            sys.exit(f"{name} failed (exit {r['rc']}):\n{r['output'][-4000:]}")
    sampled: dict[str, list[dict[str, Any]]] = {k: [] for k in sides}
    for _ in range(SAMPLED):  # sampled runs of their own: the sampler's CPU would slow the timed ones
        for name, cmd in sides.items():
            r = measure(cmd, cwd=cwd[name])
            if r["rc"] not in (0, 3):
                sys.exit(f"{name} failed (exit {r['rc']}):\n{r['output'][-4000:]}")
            sampled[name].append({k: v for k, v in r.items() if k != "output"})
    keys = ("wall_s", "tree_pss_mb", "tree_rss_mb", "peak_mb")
    memory = {name: {k: statistics.median(r[k] for r in rs) for k in keys} for name, rs in sampled.items()}
    for _ in range(REPEATS):
        for name, cmd in sides.items():
            r = measure(cmd, sample=False, cwd=cwd[name])
            if r["rc"] not in (0, 3):
                sys.exit(f"{name} failed (exit {r['rc']}):\n{r['output'][-4000:]}")
            runs[name].append({k: v for k, v in r.items() if k != "output"})
    medians = {
        name: {"wall_s": statistics.median(r["wall_s"] for r in rs), "sampled_wall_s": memory[name]["wall_s"]}
        | {k: memory[name][k] for k in ("tree_pss_mb", "tree_rss_mb", "peak_mb")}
        for name, rs in runs.items()
    }
    print(f"monthly median composite of {', '.join(BANDS)} on the cloudy fixture; {REPEATS} interleaved runs")
    print(
        f"peak memory, medians of {SAMPLED} sampled runs of their own: the process tree's summed PSS and RSS, "
        "the largest process"
    )
    print(f"{'tool':<20}{'median s':>10}{'sampled s':>11}{'PSS MB':>10}{'RSS MB':>10}{'1 proc MB':>11}")
    for name, m in medians.items():
        print(
            f"{name:<20}{m['wall_s']:10.2f}{m['sampled_wall_s']:11.2f}{m['tree_pss_mb']:10.0f}{m['tree_rss_mb']:10.0f}"
            f"{m['peak_mb']:11.0f}"
        )
    result: dict[str, Any] = {"runs": runs, "memory_runs": sampled, "medians": medians}
    if why is not None:
        print(f"pipeline side: not available yet ({why})")
        result["pipeline_unavailable"] = why
    else:
        print(f"pipeline / odc-stac wall: {medians['pipeline']['wall_s'] / medians['odc-stac']['wall_s']:.3f}")
        if BASELINE:
            base = medians["pipeline (baseline)"]
            identical = same_cube(f"{OUT}/pipeline.zarr", f"{OUT}/baseline.zarr")
            print(
                f"pipeline / baseline: wall {medians['pipeline']['wall_s'] / base['wall_s']:.3f}, "
                f"tree PSS {medians['pipeline']['tree_pss_mb'] / base['tree_pss_mb']:.3f}; "
                f"cubes bit-identical: {identical}"
            )
            result["baseline_identical"] = identical
        pss = medians["pipeline"]["tree_pss_mb"] / medians["odc-stac"]["tree_pss_mb"]
        print(f"pipeline / odc-stac tree PSS: {pss:.3f}")
        cmp = compare_composites(f"{OUT}/pipeline.zarr", f"{OUT}/odc.zarr")
        print_comparison(cmp)
        result["values"] = cmp
    save_json("composite", result)


if __name__ == "__main__":
    main()
