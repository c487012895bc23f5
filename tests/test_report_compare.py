"""``pipeline report NEW --compare OLD``: stage by stage, diagnostic by diagnostic, setting by setting."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from pipeline.execute.runner import run
from pipeline.report.compare import compare_reports, format_comparison


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory, small_dir: Any) -> dict[str, Any]:
    from pipeline.config import load_config
    from tests.helpers import write_config

    folder = tmp_path_factory.mktemp("cmp")
    return run(load_config(write_config(folder, str(small_dir / "**" / "*.tif")))).report


def test_each_stage_each_diagnostic_and_each_changed_setting(report: dict[str, Any]) -> None:
    # chunk_size planted: ok in the new run, warned in the old (the run's own verdict sits near its edge)
    report = copy.deepcopy(report)
    report["diagnostics"] = [dict(d, status="ok") if d["check"] == "chunk_size" else d for d in report["diagnostics"]]
    old = copy.deepcopy(report)
    old["wall_s"] += 2.0
    old["stages"]["overhead"] += 2.0
    old["resolved_config"]["execution"]["partition_mb"] = 8.0
    old["diagnostics"] = [dict(d, status="warn") if d["check"] == "chunk_size" else d for d in old["diagnostics"]]
    cmp = compare_reports(report, old)
    assert [r["stage"] for r in cmp["stages"]] == ["wall", *report["stages"]]
    overhead = next(r for r in cmp["stages"] if r["stage"] == "overhead")
    assert overhead["delta_s"] == pytest.approx(-2.0)
    changes = {d["check"]: d["change"] for d in cmp["diagnostics"]}
    assert changes["chunk_size"] == "fixed" and changes["workers_used"] == "ok"
    assert cmp["settings"] == [{"key": "execution.partition_mb", "old": 8.0, "new": 1.0}]
    text = format_comparison(cmp)
    assert (
        "faster" in text and "chunk_size" in text and "fixed" in text and "execution.partition_mb: 8.0 -> 1.0" in text
    )


def test_an_older_report_without_its_config_compares_stages_only(report: dict[str, Any]) -> None:
    old = copy.deepcopy(report)
    del old["resolved_config"]
    cmp = compare_reports(report, old)
    assert cmp["settings"] == [] and not cmp["settings_recorded"]
    assert "settings: not recorded in both reports" in format_comparison(cmp)


def test_a_file_that_is_no_report_is_exit_2_naming_it(tmp_path: Any) -> None:
    import subprocess
    import sys

    bad = tmp_path / "bad.json"
    bad.write_text('{"a": 1}')
    r = subprocess.run([sys.executable, "-m", "pipeline", "report", str(bad)], capture_output=True, text=True)
    assert r.returncode == 2 and f"{bad} is not a run report" in r.stderr and "Traceback" not in r.stderr
