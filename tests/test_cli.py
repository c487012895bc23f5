"""The command line as a user runs it: real processes, exit codes, messages."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write_config


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pipeline", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)  # fmt: skip


@pytest.mark.parametrize(
    ("sets", "key"),
    [
        (["colour=red"], "colour"),
        (["grid.crs=EPSG:0"], "grid.crs"),
        (["inputs.pattern=(?P<date>x).tif"], "inputs.pattern"),
        (["inputs.paths=[/nonexistent/**/*.tif]"], "inputs.paths"),
    ],
)
def test_config_errors_exit_2_naming_the_key(tmp_path: Path, small_dir: Path, sets: list[str], key: str) -> None:
    cfg = write_config(tmp_path, str(small_dir / "**" / "*.tif"))
    args = [a for s in sets for a in ("--set", s)]
    r = cli("run", str(cfg), *args)
    assert r.returncode == 2, r.stderr
    assert f"config key '{key}'" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "out.zarr").exists()


def test_plan_json_reads_no_pixels(tmp_path: Path, small_dir: Path) -> None:
    cfg = write_config(tmp_path, str(small_dir / "**" / "*.tif"))
    r = cli("plan", str(cfg), "--json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["inputs"]["files"] == 32
    h, w = plan["grid"]["shape_yx"]
    spatial = -(-h // 128) * -(-w // 128)
    assert plan["chunks"] == 4 * 2 * spatial  # bands x dates x spatial chunks
    assert plan["tasks"] >= 2 and 0 < plan["jobs"] <= plan["chunks"]
    assert plan["bytes_to_read"] > 0 and plan["grid"]["crs"] == "EPSG:32632"
    assert not (tmp_path / "out.zarr").exists()
    text = cli("plan", str(cfg))
    assert text.returncode == 0 and "tasks" in text.stdout and "grid" in text.stdout


def test_run_then_report_html(tmp_path: Path, small_dir: Path) -> None:
    cfg = write_config(tmp_path, str(small_dir / "**" / "*.tif"))
    r = cli("run", str(cfg), "--workers", "2", "--set", "output.chunks={y: 256, x: 256}")
    assert r.returncode == 0, r.stderr
    for stage in ("index", "plan", "read", "resample", "write", "finalize", "overhead"):
        assert stage in r.stdout
    report = tmp_path / "out.report.json"
    assert report.exists()
    again = cli("run", str(cfg))
    assert again.returncode == 2 and "--overwrite" in again.stderr
    html = tmp_path / "page" / "report.html"
    r = cli("report", str(report), "--html", str(html))
    assert r.returncode == 0, r.stderr
    assert html.exists() and (tmp_path / "page" / "report.stages.png").stat().st_size > 5000
    assert "data:image/png;base64," in html.read_text()


def test_fixtures_are_deterministic(tmp_path: Path) -> None:
    def digest(folder: Path) -> dict[str, str]:
        return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(folder.rglob("*.tif"))}  # fmt: skip

    assert cli("fixtures", str(tmp_path / "a"), "--preset", "small", "--seed", "3").returncode == 0
    assert cli("fixtures", str(tmp_path / "b"), "--preset", "small", "--seed", "3").returncode == 0
    a, b = digest(tmp_path / "a"), digest(tmp_path / "b")
    assert len(a) == 32 and a == b


def test_doctor_and_version() -> None:
    r = cli("doctor")
    assert r.returncode == 0 and "GDAL" in r.stdout and "gpu" in r.stdout
    assert cli("--version").returncode == 0
