"""Each diagnostic warns on the problem it names, and a clean run warns on none."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rasterio
from rasterio.transform import from_origin

from pipeline.config import load_config
from pipeline.execute import run
from pipeline.report import compute_diagnostics
from tests.helpers import write_config


def statuses(report: dict[str, Any]) -> dict[str, str]:
    return {d["check"]: d["status"] for d in report["diagnostics"]}


def warned(report: dict[str, Any]) -> set[str]:
    return {c for c, s in statuses(report).items() if s == "warn"}


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory, small_dir: Path) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("clean")
    cfg = load_config(write_config(folder, str(small_dir / "**" / "*.tif")))
    return run(cfg).report


def test_clean_run_warns_on_nothing(clean: dict[str, Any]) -> None:
    assert set(statuses(clean)) == {"workers_used", "task_overhead", "long_tail", "task_args_size", "blocking",
                                    "gpu_ran", "io_vs_compute", "idle_workers"}  # fmt: skip
    assert warned(clean) == set(), clean["diagnostics"]
    for d in clean["diagnostics"]:
        assert d["detail"]


def test_tiny_partitions_warn_task_overhead(tmp_path: Path, small_dir: Path) -> None:
    cfg = load_config(write_config(tmp_path, str(small_dir / "**" / "*.tif")),
                      ["execution.partition_mb=0.002", "output.chunks={y: 32, x: 32}"])  # fmt: skip
    report = run(cfg).report
    assert "task_overhead" in warned(report)
    assert next(d for d in report["diagnostics"] if d["check"] == "task_overhead")["advice"]


def test_one_huge_tile_warns_long_tail(tmp_path: Path, small_dir: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(small_dir, data)
    with rasterio.open(small_dir / "2024-06-01" / "T32A0_B02.tif") as src:
        x0, y0 = src.bounds.left, src.bounds.top
    # One 0.3125 m tile over a single 2.56 km chunk: 64x more pixels per axis than the 20 m grid.
    n = 8192
    values = np.random.default_rng(0).integers(1500, 2500, (n, n)).astype("uint16")  # decodes slowly, as real data
    with rasterio.open(data / "2024-06-01" / "T32A0_B02z.tif", "w", driver="GTiff", width=n, height=n, count=1,
                       dtype="uint16", crs="EPSG:32632", transform=from_origin(x0, y0, 2560 / n, 2560 / n), nodata=0,
                       tiled=True, compress="deflate") as dst:  # fmt: skip
        dst.write(values, 1)
    cfg = load_config(write_config(tmp_path, str(data / "**" / "*.tif")),
                      ["resampling=mode", "execution.partition_mb=0.05"])  # fmt: skip
    report = run(cfg).report
    assert "long_tail" in warned(report), report["diagnostics"]
    huge = [s for s in report["stragglers"] if s["cost_bytes"] > 20e6]  # the chunks under the fine tile
    assert huge and report["stragglers"][0] in huge  # found, and the worst of the tail


def test_single_worker_warns_workers_used(tmp_path: Path, small_dir: Path) -> None:
    cfg = load_config(write_config(tmp_path, str(small_dir / "**" / "*.tif")), ["execution.workers=1"])
    report = run(cfg).report
    assert "workers_used" in warned(report) and report["execution"]["cores"] > 1


def test_serial_run_warns_blocking(clean: dict[str, Any]) -> None:
    report = copy.deepcopy(clean)
    t = min(x["start"] for x in report["tasks"])
    for task in sorted(report["tasks"], key=lambda x: x["start"]):  # one after another, as if awaited singly
        d = task["end"] - task["start"]
        task["start"], task["end"] = t, t + d
        t += d + 0.001
    report["diagnostics"] = compute_diagnostics(report)
    assert "blocking" in warned(report)


def test_one_worker_doing_all_the_work_warns_idle_and_workers_used(clean: dict[str, Any]) -> None:
    report = copy.deepcopy(clean)
    t = min(x["start"] for x in report["tasks"])
    for task in sorted(report["tasks"], key=lambda x: x["start"]):
        d = task["end"] - task["start"]
        task["start"], task["end"], task["worker"] = t, t + d, "0"
        t += d
    report["workers"] = {"0": {"tasks": len(report["tasks"]), "busy_s": t}, "1": {"tasks": 0, "busy_s": 0.0}}
    report["diagnostics"] = compute_diagnostics(report)
    assert {"idle_workers", "workers_used"} <= warned(report)


def test_big_task_arguments_and_an_unused_gpu_warn(clean: dict[str, Any]) -> None:
    report = copy.deepcopy(clean)
    report["execution"]["max_task_arg_bytes"] = 5 * 2**20
    report["execution"]["device_requested"] = "gpu"
    report["diagnostics"] = compute_diagnostics(report)
    assert {"task_args_size", "gpu_ran"} <= warned(report)


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def test_html_report_renders_in_headless_chromium(clean: dict[str, Any], tmp_path: Path) -> None:
    from matplotlib.image import imread

    from pipeline.report_html import COLOURS, write_html

    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium: `make test` installs Debian's chromium where it can")
    page, stages_png, timeline_png = write_html(clean, str(tmp_path / "report.html"))
    shot = tmp_path / "shot.png"
    r = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars", "--window-size=1000,1600",
         f"--screenshot={shot}", f"file://{page}"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert shot.exists(), r.stderr
    img = imread(str(shot))[:, :, :3]
    assert img.std() > 0.05  # not a blank page
    pixels = (img * 255).round().astype(int).reshape(-1, 3)

    def present(hex_colour: str) -> int:
        rgb = np.array([int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)])
        return int((np.abs(pixels - rgb).max(axis=1) <= 8).sum())

    # The charts' bar colours are on screen: the stage chart and the timeline rendered.
    for stage in ("read", "resample", "write"):
        assert present(COLOURS[stage]) > 200, stage
    for png in (stages_png, timeline_png):
        assert imread(png).std() > 0.05
