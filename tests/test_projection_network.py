"""The projection prices the bucket: requests, their latency and bandwidth, reads in flight
(:mod:`pipeline.report.network_sizing`, through :mod:`pipeline.report.sizing`)."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pipeline.report.sizing import FULL_BYTES, TARGET_S, format_estimate, project_case_study

DRIVER_S = 3.0  # the serial driver work of the projections below (the demo measures it on 192,000 files)


def local_report() -> dict[str, Any]:
    """What ``pipeline run configs/small.yaml`` measured (32 local files, 6 tasks on 2 workers), cut to the
    sections a projection reads; ``network`` and ``io`` as a run of local files writes them."""
    tasks = [
        (847174, 501072, 19, 0.046194),
        (807678, 250536, 19, 0.048383),
        (355518, 501072, 8, 0.02859),
        (807678, 250536, 0, 0.009724),
        (807678, 250536, 0, 0.011737),
        (316022, 250536, 0, 0.002551),
    ]
    return {
        "wall_s": 0.58,
        "stages": {
            "index": 0.295589,
            "plan": 0.016745,
            "read": 0.029003,
            "mask": 0.0,
            "resample": 0.07359,
            "reduce": 0.0,
            "write": 0.108278,
            "finalize": 0.003269,
            "overhead": 0.053429,
        },
        "stage_task_s": {
            "index": 0.295589,
            "plan": 0.016745,
            "read": 0.058006,
            "mask": 0.0,
            "resample": 0.147179,
            "reduce": 0.0,
            "write": 0.20726,
            "finalize": 0.003269,
            "overhead": 0.041918,
        },
        "inputs": {"files": 32, "bytes": 2277153, "bytes_unknown": 0, "headers_read": 32, "bytes_read": 3941748},
        "plan": {"partitions": 6, "chunks": 80, "jobs": 80, "windows": 160, "geometries": 48, "bytes_to_read": 4004500},
        "tasks": [
            {"pid": 6299, "bytes_read": r, "bytes_written": w, "maps_made": m, "resample_s": s} for r, w, m, s in tasks
        ],
        "network": {
            "requests": 0,
            "bytes_fetched": 0,
            "bytes_needed": 0,
            "retries": 0,
            "latency_ms": {"p50": None, "p99": None},
            "in_flight": {"mean": None, "max": 0},
            "read_busy_s": 0,
            "mb_per_s": None,
        },
        "io": {
            "concurrency": 2,
            "chosen_by": "local",
            "why": "local files: 2 (one read ahead of the resampling)",
            "latency_ms": None,
            "mb_per_s": None,
            "request_kb": None,
            "prefetch_mb": 64.0,
            "prefetch_peak_mb": 0.858494,
        },
    }


def remote_report(
    latency_ms: float | None = 40.07, in_flight: float | None = 13.99, mb_per_s: float | None = 52.0
) -> dict[str, Any]:
    """The same run as if read from a bucket: ``network`` and ``io`` in the shape (and at the rates per byte)
    of the case-study fixture read through a 25 ms S3 proxy (1,493 requests, 168.6 MB fetched for 165 MB
    decoded, a 40.07 ms probe at 52 MB/s, 13.99 reads in flight per worker)."""
    r = local_report()
    r["network"] = {
        "requests": 36,
        "bytes_fetched": 4028000,
        "bytes_needed": 2670000,
        "retries": 0,
        "latency_ms": {"p50": 405.16, "p99": 923.41},
        "in_flight": {"mean": in_flight, "max": 24},
        "read_busy_s": 0.39,
        "mb_per_s": 10.4,
    }
    r["io"] = {
        "concurrency": 24,
        "chosen_by": "auto",
        "why": "24 = 1 + latency 40.1 ms x 52 MB/s / 94 KB a window",
        "latency_ms": latency_ms,
        "mb_per_s": mb_per_s,
        "request_kb": 94.5,
        "prefetch_mb": 64.0,
        "prefetch_peak_mb": 13.58,
    }
    return r


def expected(report: dict[str, Any], latency_ms: float, in_flight: float, mb_per_s: float | None) -> dict[str, float]:
    """The module's formulas, written out again: 7 TB's requests and bytes fetched at the run's rates per
    byte read, the network-bound workers and the requests in flight across the cluster (Little's law)."""
    scale = FULL_BYTES / report["inputs"]["bytes"]
    read = report["inputs"]["bytes_read"] * scale
    per_byte = read / report["inputs"]["bytes_read"]
    requests = report["network"]["requests"] * per_byte
    fetched = report["network"]["bytes_fetched"] * per_byte
    budget = TARGET_S - DRIVER_S - report["stage_task_s"]["finalize"]
    seconds = requests * latency_ms / 1e3 / in_flight + (fetched / (in_flight * mb_per_s * 1e6) if mb_per_s else 0)
    return {
        "requests": requests,
        "fetched": fetched,
        "budget": budget,
        "workers": math.ceil(seconds / budget),
        "in_flight": requests * latency_ms / 1e3 / budget,
        "gb_per_s": fetched / budget / 1e9,
    }


def test_a_remote_run_prices_requests_latency_bandwidth_and_in_flight() -> None:
    r = remote_report()
    e = project_case_study(r, driver_s=DRIVER_S)
    x = expected(r, 40.07, 13.99, 52.0)
    n = e["network"]
    assert n["remote"] and n["requests"] == pytest.approx(x["requests"]) and n["budget_s"] == pytest.approx(x["budget"])
    assert n["bytes_fetched"] == pytest.approx(x["fetched"]) and n["aggregate_gb_per_s"] == pytest.approx(x["gb_per_s"])
    assert n["workers"] == e["workers_network"] == x["workers"]
    assert n["in_flight_cluster"] == pytest.approx(x["in_flight"])
    assert n["latency_from"].startswith("io.latency_ms") and n["in_flight_from"].startswith("network.in_flight.mean")
    assert n["once_gb_per_s"] == pytest.approx(FULL_BYTES / x["budget"] / 1e9)  # 7 TB once: ~39 GB/s
    # At 40 ms the compute-bound count (today's, per byte read) is the larger: it is the answer.
    compute = project_case_study(local_report(), driver_s=DRIVER_S)["workers_needed"]
    assert e["workers_compute"] == compute > x["workers"] and e["workers_needed"] == compute
    assert e["network"]["in_flight_per_worker_needed"] == pytest.approx(x["in_flight"] / compute)
    text = format_estimate(e, "T")
    assert f"requests {x['requests']:,.0f} (36 measured" in text
    assert "latency 40.1 ms a request (io.latency_ms" in text and "52 MB/s a request past it" in text
    assert "in flight 14.0 reads per worker (network.in_flight.mean, measured)" in text
    assert f"network-bound: ~{x['workers']:,} workers" in text
    assert f"in flight across the cluster: {x['in_flight']:,.0f} requests (Little's law" in text
    assert f"(compute-bound {compute:,}, network-bound {x['workers']:,})" in text
    assert text.count("workers to finish in 180 s") == 1


def test_a_slower_store_or_fewer_reads_in_flight_raise_the_counts_as_the_formulas_say() -> None:
    base = project_case_study(remote_report(), driver_s=DRIVER_S)
    slow_r = remote_report(latency_ms=400.7)
    slow = project_case_study(slow_r, driver_s=DRIVER_S)
    x = expected(slow_r, 400.7, 13.99, 52.0)
    # Ten times the latency: ten times the requests in flight (Little's law), and the network-bound count
    # overtakes the compute-bound one, which is then the answer and names the network.
    assert slow["network"]["in_flight_cluster"] == pytest.approx(10 * base["network"]["in_flight_cluster"])
    assert slow["workers_network"] == x["workers"] > base["workers_network"]
    assert slow["workers_needed"] == x["workers"] > slow["workers_compute"] == base["workers_compute"]
    assert slow["limiting_stage"] == "the network (requests in flight)"
    assert "limited by the network (requests in flight)" in format_estimate(slow, "T")
    # Half the reads in flight per worker: the same requests in flight across the cluster, more workers.
    few_r = remote_report(latency_ms=400.7, in_flight=7.0)
    few = project_case_study(few_r, driver_s=DRIVER_S)
    assert few["network"]["in_flight_cluster"] == pytest.approx(slow["network"]["in_flight_cluster"])
    assert few["workers_network"] == expected(few_r, 400.7, 7.0, 52.0)["workers"] > slow["workers_network"]
    # A run that set io_concurrency (no probe): the median remote read's latency, the reads in flight as set,
    # and no bandwidth term (a lower bound, said so).
    unprobed_r = remote_report(latency_ms=None, in_flight=None, mb_per_s=None)
    unprobed = project_case_study(unprobed_r, driver_s=DRIVER_S)
    u = unprobed["network"]
    assert u["latency_ms"] == 405.16 and u["latency_from"].startswith("network.latency_ms.p50")
    assert u["in_flight_per_worker"] == 24 and u["in_flight_from"] == "io.concurrency, as set"
    assert u["workers"] == expected(unprobed_r, 405.16, 24, None)["workers"]
    assert "latency only, a lower bound" in format_estimate(unprobed, "T")
    # A latency given replaces the measured one.
    given = project_case_study(remote_report(), driver_s=DRIVER_S, latency_ms=400.7)
    assert given["workers_network"] == slow["workers_network"] and given["network"]["latency_from"] == "given"


def test_a_local_run_names_the_assumptions_it_prices_the_bucket_at() -> None:
    r = local_report()
    e = project_case_study(r, driver_s=DRIVER_S)
    n = e["network"]
    scale = FULL_BYTES / r["inputs"]["bytes"]
    windows = r["plan"]["windows"] / r["plan"]["bytes_to_read"] * r["inputs"]["bytes_read"] * scale
    budget = TARGET_S - DRIVER_S - r["stage_task_s"]["finalize"]
    assert not n["remote"] and n["requests_from"] == "assumed"
    assert n["windows"] == pytest.approx(windows) and n["requests"] == pytest.approx(windows + 192_000)
    assert n["latency_ms"] == 25.0 and n["in_flight_cluster"] == pytest.approx((windows + 192_000) * 0.025 / budget)
    assert n["bytes_fetched"] == FULL_BYTES and n["aggregate_gb_per_s"] == pytest.approx(7e12 / budget / 1e9)
    # No network-bound count: what bounds it is measured only from a bucket; the answer is today's.
    assert e["workers_network"] is None and e["workers_needed"] == e["workers_compute"]
    assert e["limiting_stage"] in ("read", "resample", "write")
    text = format_estimate(e, "T")
    for said in (
        "the bucket, not measured (this run read local files); priced at these assumptions:",
        "latency 25.0 ms a request (assumed: an S3 GET's typical first-byte time)",
        "requests not measured (run from the bucket to measure them): assumed 1 GET per source window",
        f"= {windows + 192_000:,.0f} (the case study from a 25 ms store made 406",
        "7.0 TB fetched (assumed: every input byte once)",
        "network-bound worker count not priced",
        f"in flight across the cluster: {(windows + 192_000) * 0.025 / budget:,.0f} requests (Little's law",
        f"aggregate bandwidth {7e12 / budget / 1e9:,.1f} GB/s",
    ):
        assert said in text, said
    # Twice the latency given: twice the requests in flight, said to be given.
    slow = project_case_study(r, driver_s=DRIVER_S, latency_ms=50.0)
    assert slow["network"]["in_flight_cluster"] == pytest.approx(2 * n["in_flight_cluster"])
    assert "latency 50.0 ms a request (given)" in format_estimate(slow, "T")
    # A report that counts no windows: no request count is made up.
    bare = copy.deepcopy(r)
    del bare["plan"]
    b = project_case_study(bare, driver_s=DRIVER_S)
    assert b["network"]["requests"] is None and b["network"]["in_flight_cluster"] is None
    bare_text = format_estimate(b, "T")
    assert "requests not measured: run from the bucket" in bare_text and "in flight across" not in bare_text


def test_the_html_answer_carries_the_requests_in_flight() -> None:
    from pipeline.report.html import _projection

    page = _projection(local_report())
    assert "requests in flight across the cluster" in page and "assumed: an S3 GET" in page


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pipeline", *args], capture_output=True, text=True, timeout=600)


def test_plan_from_a_remote_report_prints_and_carries_the_bucket(small_config: Any, tmp_path: Path) -> None:
    """A real run's report, with the ``network`` and ``io`` a run from a bucket writes: ``plan
    --from-report`` prices the plan's bytes at its requests and latency, in its text and its JSON."""
    from pipeline.execute.runner import run

    cfg = small_config()
    report = run(cfg).report
    remote = remote_report(latency_ms=400.7)
    report = {**report, "network": remote["network"], "io": remote["io"]}
    path = tmp_path / "remote.report.json"
    path.write_text(json.dumps(report, default=str))
    config = str(tmp_path / "config.yaml")
    got = cli("plan", config, "-q", "--json", "--from-report", str(path), "--target-time", "60")
    assert got.returncode == 0, got.stderr
    summary = json.loads(got.stdout)
    sizing, n = summary["sizing"], summary["sizing"]["network"]
    per_byte = summary["bytes_to_read"] / report["inputs"]["bytes_read"]
    assert n["remote"] and n["requests"] == pytest.approx(36 * per_byte)
    assert n["in_flight_cluster"] == pytest.approx(n["requests"] * 0.4007 / n["budget_s"])
    assert sizing["workers_needed"] == max(sizing["workers_compute"], sizing["workers_network"])
    text = cli("plan", config, "-q", "--from-report", str(path), "--target-time", "60", "--latency-ms", "801.4")
    assert text.returncode == 0, text.stderr
    assert "the bucket, priced from this run's remote reads" in text.stdout
    assert "latency 801.4 ms a request (given)" in text.stdout and "in flight across the cluster" in text.stdout
    bad = cli("plan", config, "-q", "--from-report", str(path), "--latency-ms", "0")
    assert bad.returncode == 2 and "--latency-ms" in bad.stderr
